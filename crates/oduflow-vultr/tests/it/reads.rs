//! Reads and DELETE: bounded retries, Retry-After, pagination, label scans.

use crate::*;
use oduflow_model::provider::{DeleteOutcome, Outcome, Provider, ProviderError, SendGuard, Sending};
use oduflow_model::{Label, VultrBlockId, VultrInstanceId};
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;
use wiremock::matchers::{method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn instance(id: &str, label: &str) -> Value {
    json!({"id": id, "label": label, "region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136,
           "status": "active", "server_status": "ok", "main_ip": "192.0.2.1"})
}

fn block(id: &str, label: &str) -> Value {
    json!({"id": id, "label": label, "region": "ewr", "size_gb": 40, "block_type": "high_perf",
           "status": "active", "attached_to_instance": ""})
}

async fn gets(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().iter().filter(|r| r.method.as_str() == "GET").count()
}

#[tokio::test]
async fn get_is_retried_on_429_and_waits_for_retry_after() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("Retry-After", "1")
                .set_body_json(json!({"error": "slow down", "status": 429})),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/instances/i-1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"instance": instance("i-1", "l")})))
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    let started = Instant::now();
    let got = c.instance_get(&VultrInstanceId::from("i-1")).await.unwrap().unwrap();
    let waited = started.elapsed();
    assert_eq!(got.id.as_str(), "i-1");
    assert!(got.is_ready());
    assert_eq!(gets(&server).await, 2);
    // The configured backoff is 5 ms; only Retry-After explains a 1 s wait.
    assert!(waited >= Duration::from_millis(950), "waited only {waited:?}");
}

#[tokio::test]
async fn get_retries_5xx_a_bounded_number_of_times_then_fails() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"error": "unavailable", "status": 503})))
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    let err = c.instance_get(&VultrInstanceId::from("i-1")).await.unwrap_err();
    assert_eq!(err, ProviderError::Status { status: 503, message: "unavailable".into() });
    assert_eq!(gets(&server).await, oduflow_vultr::READ_ATTEMPTS_MAX as usize);
}

#[tokio::test]
async fn a_retry_after_beyond_the_bound_is_not_slept_through() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "3600"))
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    let started = Instant::now();
    let err = c.block_get(&VultrBlockId::from("b")).await.unwrap_err();
    assert!(matches!(err, ProviderError::Status { status: 429, .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(gets(&server).await, 1);
}

#[tokio::test]
async fn get_transport_errors_are_retried_then_reported() {
    let (base, requests) = resetting_server().await;
    let c = client(&base);
    let err = c.instance_get(&VultrInstanceId::from("i-1")).await.unwrap_err();
    assert!(matches!(err, ProviderError::Transport(_)), "{err:?}");
    assert_eq!(requests.load(Ordering::SeqCst), oduflow_vultr::READ_ATTEMPTS_MAX as usize);
}

#[tokio::test]
async fn get_404_is_none_and_other_4xx_is_an_error_without_retry() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/instances/gone"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({"error": "instance not found", "status": 404})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/blocks/bad"))
        .respond_with(
            ResponseTemplate::new(400).set_body_json(json!({"error": "Invalid block storage ID", "status": 400})),
        )
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    assert_eq!(c.instance_get(&VultrInstanceId::from("gone")).await.unwrap(), None);
    let err = c.block_get(&VultrBlockId::from("bad")).await.unwrap_err();
    assert_eq!(err, ProviderError::Status { status: 400, message: "Invalid block storage ID".into() });
    assert_eq!(gets(&server).await, 2);
}

#[tokio::test]
async fn a_2xx_get_with_an_unreadable_body_is_a_decode_error() {
    let server = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(200).set_body_string("{}")).mount(&server).await;
    let c = client(&format!("{}/v2", server.uri()));
    assert!(matches!(c.instance_get(&VultrInstanceId::from("i")).await, Err(ProviderError::Decode(_))));
}

#[tokio::test]
async fn delete_classifies_204_404_and_a_500_that_outlives_the_retries() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/v2/instances/ok"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/instances/gone"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({"error": "instance not found", "status": 404})))
        .expect(1)
        .mount(&server)
        .await;
    let locked = "Unable to destroy server: Unable to remove VM: Server is currently locked";
    Mock::given(method("DELETE"))
        .and(path("/v2/instances/locked"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"error": locked, "status": 500})))
        .expect(u64::from(oduflow_vultr::READ_ATTEMPTS_MAX))
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    assert_eq!(c.instance_delete(&VultrInstanceId::from("ok")).await.unwrap(), DeleteOutcome::Sent);
    assert_eq!(c.instance_delete(&VultrInstanceId::from("gone")).await.unwrap(), DeleteOutcome::NotFound);
    assert_eq!(
        c.instance_delete(&VultrInstanceId::from("locked")).await.unwrap(),
        DeleteOutcome::Refused { status: 500, message: locked.into() }
    );
}

/// Mounts a listing of `key` split over pages joined by cursors c1, c2, ...
async fn mount_pages(server: &MockServer, route: &str, key: &str, pages: &[Vec<Value>]) {
    for (n, items) in pages.iter().enumerate() {
        let next = if n + 1 < pages.len() { format!("c{}", n + 1) } else { String::new() };
        let prev = if n > 0 { format!("p{n}") } else { String::new() };
        let body = json!({ key: items, "meta": {"total": 7, "links": {"next": next, "prev": prev}} });
        let m = Mock::given(method("GET"))
            .and(path(route))
            .and(query_param("per_page", oduflow_vultr::DEFAULT_PER_PAGE.to_string()));
        let m = if n == 0 {
            m.and(query_param_is_missing("cursor"))
        } else {
            m.and(query_param("cursor", format!("c{n}").as_str()))
        };
        m.respond_with(ResponseTemplate::new(200).set_body_json(body)).expect(1).mount(server).await;
    }
}

#[tokio::test]
async fn instance_listing_by_label_follows_every_page_and_sends_the_filter() {
    let server = MockServer::start().await;
    let pages = vec![
        vec![instance("i-1", "oduflow-a"), instance("i-2", "oduflow-a")],
        vec![instance("i-3", "oduflow-a")],
        vec![instance("i-4", "oduflow-a"), instance("i-5", "oduflow-a-other")],
    ];
    mount_pages(&server, "/v2/instances", "instances", &pages).await;
    let c = client(&format!("{}/v2", server.uri()));
    let found = c.instance_list_by_label(&Label::from("oduflow-a")).await.unwrap();
    let ids: Vec<_> = found.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["i-1", "i-2", "i-3", "i-4"], "exact match, all three pages");
    let reqs = server.received_requests().await.unwrap();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| { r.url.query_pairs().any(|(k, v)| k == "label" && v == "oduflow-a") }));
}

#[tokio::test]
async fn block_listing_and_the_label_scan_read_all_pages_once() {
    let server = MockServer::start().await;
    let pages = vec![
        vec![block("b-1", "oduflow-x"), block("b-2", "someone-else")],
        vec![block("b-3", "oduflow-y"), block("b-4", "oduflow-x")],
        vec![block("b-5", "")],
    ];
    mount_pages(&server, "/v2/blocks", "blocks", &pages).await;
    let c = client(&format!("{}/v2", server.uri()));
    let labels = [Label::from("oduflow-x"), Label::from("oduflow-y"), Label::from("oduflow-z")];
    let found = c.block_find_by_labels(&labels).await.unwrap();
    let ids = |l: &str| found[&Label::from(l)].iter().map(|b| b.id.to_string()).collect::<Vec<_>>();
    assert_eq!(ids("oduflow-x"), ["b-1", "b-4"], "two matches are both reported");
    assert_eq!(ids("oduflow-y"), ["b-3"]);
    assert!(ids("oduflow-z").is_empty());
    assert_eq!(gets(&server).await, 3, "one scan for all labels");
    let reqs = server.received_requests().await.unwrap();
    assert!(
        reqs.iter().all(|r| !r.url.query_pairs().any(|(k, _)| k == "label")),
        "Vultr has no label filter for blocks"
    );
    assert_eq!(found[&Label::from("oduflow-x")][0].attached_to_instance, None, "\"\" means detached");
}

/// Vultr's cursors are opaque, so a page may repeat an item an earlier
/// page held (an item moved in the order while the scan ran): every id is
/// kept once, and a label's match is never reported twice, which would
/// read as two resources (`duplicate_matches`).
#[tokio::test]
async fn an_item_repeated_across_pages_is_listed_once() {
    let server = MockServer::start().await;
    let pages = vec![
        vec![block("b-1", "oduflow-x"), block("b-2", "oduflow-y")],
        vec![block("b-2", "oduflow-y"), block("b-3", "someone-else")],
        vec![block("b-3", "someone-else"), block("b-4", "oduflow-z")],
    ];
    mount_pages(&server, "/v2/blocks", "blocks", &pages).await;
    let c = client(&format!("{}/v2", server.uri()));
    let labels = [Label::from("oduflow-x"), Label::from("oduflow-y"), Label::from("oduflow-z")];
    let found = c.block_find_by_labels(&labels).await.unwrap();
    let ids = |l: &str| found[&Label::from(l)].iter().map(|b| b.id.to_string()).collect::<Vec<_>>();
    assert_eq!(
        (ids("oduflow-x"), ids("oduflow-y"), ids("oduflow-z")),
        (vec!["b-1".to_owned()], vec!["b-2".to_owned()], vec!["b-4".to_owned()])
    );

    let server = MockServer::start().await;
    let pages =
        vec![vec![instance("i-1", "oduflow-a")], vec![instance("i-1", "oduflow-a"), instance("i-2", "oduflow-b")]];
    mount_pages(&server, "/v2/instances", "instances", &pages).await;
    let c = client(&format!("{}/v2", server.uri()));
    let ids: Vec<_> = c.instance_list().await.unwrap().into_iter().map(|i| i.id.to_string()).collect();
    assert_eq!(ids, ["i-1", "i-2"], "the first copy, in the order listed");
}

#[tokio::test]
async fn a_cursor_that_repeats_is_an_error_not_a_loop() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"blocks": [], "meta": {"total": 0, "links": {"next": "same", "prev": ""}}})),
        )
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    assert!(matches!(c.block_list().await, Err(ProviderError::Decode(m)) if m.contains("twice")));
    assert_eq!(gets(&server).await, 2);
}

/// A guard that lets `passes` requests through, then refuses: a run whose
/// claim was lost between two attempts of one read.
struct Guard {
    passes: AtomicUsize,
}

impl SendGuard for Guard {
    fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let left = self.passes.load(Ordering::SeqCst);
            if left == 0 {
                return Err("claim lost".into());
            }
            self.passes.store(left - 1, Ordering::SeqCst);
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_retry_after_the_run_lost_its_claim_is_never_sent() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"error": "unavailable", "status": 503})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"instance": {"id": "i-1"}})))
        .mount(&server)
        .await;
    let c = client(&format!("{}/v2", server.uri()));
    let guarded = c.sending_as(Sending::guarded(Arc::new(Guard { passes: AtomicUsize::new(1) })));
    let err = guarded.instance_get(&VultrInstanceId::from("i-1")).await.unwrap_err();
    assert!(err.to_string().contains("not sent: claim lost"), "{err}");
    assert_eq!(gets(&server).await, 1, "the retry after the refusal was sent");
    // A create under a refusing guard is not sent, and says so.
    let outcome = guarded.instance_create(&crate::instance_req("l")).await;
    assert!(matches!(&outcome, Outcome::NotSent { reason } if reason.contains("claim lost")), "{outcome:?}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1, "only the first GET left");
}

/// `GET /account` tells a refused key from a base URL that is not Vultr's
/// API and from one where nothing answers (`oduflow check`): each is its own
/// case, so the preflight can name the right culprit.
#[tokio::test]
async fn the_account_probe_tells_a_refused_key_from_a_url_that_is_not_vultr() {
    use oduflow_vultr::AccountProbe;
    async fn probe(answer: ResponseTemplate) -> AccountProbe {
        let server = MockServer::start().await;
        Mock::given(path("/v2/account")).respond_with(answer).mount(&server).await;
        client(&format!("{}/v2", server.uri())).account_probe().await
    }
    let json = |status: u16, v: Value| ResponseTemplate::new(status).set_body_json(v);
    let html =
        |status: u16| ResponseTemplate::new(status).set_body_raw("<html><body>Not Found</body></html>", "text/html");
    let account =
        json!({"account": {"name": "n", "email": "e@example.com", "acls": [], "balance": 0, "pending_charges": 0}});
    assert!(matches!(probe(json(200, account)).await, AccountProbe::Accepted(a) if a.email == "e@example.com"));
    let refused = json!({"error": "Invalid API token.", "status": 401});
    assert_eq!(
        probe(json(401, refused)).await,
        AccountProbe::KeyRefused { status: 401, message: "Invalid API token.".into() }
    );
    let forbidden = json!({"error": "Unauthorized IP address", "status": 403});
    assert!(matches!(probe(json(403, forbidden)).await, AccountProbe::KeyRefused { status: 403, .. }));
    // An HTML 404 (a web server, or the wrong path), an HTML 401 (a proxy's
    // login), an HTML 200, a 2xx without an account, Vultr's JSON with a 404
    // (an API root without /account), a redirect.
    for answer in [
        html(404),
        html(401),
        html(200),
        json(200, json!({"ok": true})),
        json(404, json!({"error": "Not found.", "status": 404})),
        html(302).insert_header("Location", "https://example.com/"),
    ] {
        let p = probe(answer).await;
        assert!(matches!(p, AccountProbe::NotVultr(_)), "{p:?}");
    }
    let down = json!({"error": "Internal server error.", "status": 500});
    assert!(matches!(probe(json(500, down)).await, AccountProbe::Unavailable { status: 500, .. }));
    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let p = client(&format!("http://127.0.0.1:{port}/v2")).account_probe().await;
    assert!(matches!(p, AccountProbe::Unreachable(_)), "{p:?}");
}
