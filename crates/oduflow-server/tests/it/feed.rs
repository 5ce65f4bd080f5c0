//! The event feed through the API: paged oldest first from the first event
//! to the last, each event once, with its client's name; a reader waiting
//! after the last event is answered as soon as the next is written; bad
//! cursors, limits and waits refused with 422, a cursor past the last
//! position with 409, and nothing written by any of it.

use crate::{H, assert_error, create_body};
use serde_json::{Value, json};

oduflow_store::on_both_stores!(
    migrated crate::h_of =>
    the_feed_pages_from_the_first_event_and_wakes_a_waiting_reader,
);

async fn the_feed_pages_from_the_first_event_and_wakes_a_waiting_reader(h: H) {
    for name in ["acme", "beta", "gamma"] {
        let (s, b) = h.post("/api/v1/clients", create_body(name)).await;
        assert_eq!(s, 201, "{b}");
    }
    let (mut after, mut read) = (0, Vec::<Value>::new());
    loop {
        let (s, page) = h.get(&format!("/api/v1/events/feed?after={after}&limit=2")).await;
        assert_eq!(s, 200, "{page}");
        let events = page["events"].as_array().unwrap().clone();
        assert!(events.len() <= 2, "{page}");
        if events.is_empty() {
            assert_eq!((page["next"].as_i64(), page["head"].as_i64()), (Some(after), Some(after)), "{page}");
            break;
        }
        after = page["next"].as_i64().unwrap();
        assert_eq!(events.last().unwrap()["position"].as_i64(), Some(after), "{page}");
        read.extend(events);
    }
    let all = h.store.events_recent(1000).await.unwrap();
    assert_eq!(read.len(), all.len(), "every event once: {read:?}");
    let ids: Vec<i64> = read.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first: {ids:?}");
    for name in ["acme", "beta", "gamma"] {
        let created = read
            .iter()
            .find(|e| e["kind"] == "client_created" && e["client"] == name)
            .unwrap_or_else(|| panic!("{read:?}"));
        assert!(created["client_id"].as_str().is_some_and(|id| !id.is_empty()), "{created}");
    }

    // A reader waiting after the last event is answered with the next one:
    // a wait that ran out would answer with none.
    let waiting = {
        let req = h.http.get(h.url(&format!("/api/v1/events/feed?after={after}&wait=20"))).bearer_auth(&h.token);
        tokio::spawn(async move { req.send().await.unwrap().json::<Value>().await.unwrap() })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(h.post("/api/v1/queue/pause", json!(null)).await.0, 200);
    let page = waiting.await.unwrap();
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{page}");
    assert_eq!((events[0]["kind"].as_str(), events[0]["client"].as_str()), (Some("queue_paused"), None), "{page}");
    let after = page["next"].as_i64().unwrap();
    let (s, empty) = h.get(&format!("/api/v1/events/feed?after={after}&wait=1")).await;
    assert_eq!((s, empty["events"].as_array().map(Vec::len)), (200, Some(0)), "{empty}");

    let before = h.footprint().await;
    for bad in ["after=-1", "limit=0", "limit=1001", "wait=31", "after=x", "since=3"] {
        assert_error(&h.get(&format!("/api/v1/events/feed?{bad}")).await, 422, "invalid_input");
    }
    let got = h.get(&format!("/api/v1/events/feed?after={}", after + 10)).await;
    assert_error(&got, 409, "conflict");
    assert!(got.1["error"]["message"].as_str().unwrap().contains("older copy"), "{}", got.1);
    assert_eq!(h.footprint().await, before, "a read of the feed changed something");
}
