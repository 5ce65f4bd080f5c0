//! Who asked: every event a change made through the API writes names the
//! token that made it, whatever the route.

use super::*;
use std::collections::BTreeSet;

/// A second key of the same simulated account, for the rotation.
const KEY2: &str = "vultr-key-ACTOR-2b9d41";

/// A route as `ROUTES` names it: the client `acme`, the zero orphan id, no
/// query.
fn route_of(method: &str, path: &str) -> (String, String) {
    let path = path.split('?').next().unwrap();
    let parts: Vec<&str> = path.split('/').collect();
    let mut out = vec![];
    for (i, p) in parts.iter().enumerate() {
        out.push(match parts.get(i.wrapping_sub(1)) {
            Some(&"clients") => "acme",
            Some(&"orphans") => "00000000-0000-4000-8000-000000000000",
            _ => p,
        });
    }
    (method.to_owned(), out.join("/"))
}

/// A client whose VM create is answered 500 without being made: blocked
/// `uncertain_create`.
async fn lost(h: &H, name: &str) {
    h.sim.set_faults(oduflow_sim::Faults::server_errors_on(vec![oduflow_sim::Op::InstanceCreate])).unwrap();
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
    h.store.client_create(&ClientName::parse(name).unwrap(), &spec, "test", now_ms(), 5).await.unwrap();
    h.drain().await;
    h.sim.set_faults(oduflow_sim::Faults::default()).unwrap();
}

/// A server made in the console with one volume attached: what `import`
/// takes.
async fn console_server(h: &H, label: &str) {
    use oduflow_model::provider::BlockRequest;
    let req = InstanceRequest {
        region: "ewr".into(),
        plan: "vc2-1c-1gb".into(),
        image: ImageSource::Os(2284),
        label: Label(label.to_owned()),
        server: ServerSpec { hostname: label.to_owned(), ..Default::default() },
    };
    let Outcome::Accepted(vm) = h.provider.instance_create(&req).await else { panic!("create") };
    let b = BlockRequest {
        region: "ewr".into(),
        size_gb: 40,
        block_type: VolumeType::HighPerf,
        label: Label(format!("{label}-data")),
    };
    let Outcome::Accepted(vol) = h.provider.block_create(&b).await else { panic!("block") };
    assert!(matches!(h.provider.block_attach(&vol, &vm).await, Outcome::Accepted(_)));
}

/// Calls `path`, which must succeed and write events, each naming the
/// harness's token; the route as `ROUTES` names it.
async fn named_by_its_token(h: &H, method: &str, path: &str, body: Value) -> (String, String) {
    let before = h.store.feed_after(0, 1).await.unwrap().head;
    let (status, v) = h.call(Method::from_bytes(method.as_bytes()).unwrap(), path, Some(body)).await;
    assert!((200..300).contains(&status), "{method} {path}: {status} {v}");
    let wrote = h.store.feed_after(before, 1000).await.unwrap().events;
    assert!(!wrote.is_empty(), "{method} {path} wrote no event");
    for e in &wrote {
        let actor = e.actor.as_deref().unwrap_or_default();
        assert!(actor.contains("api-token:tester"), "{method} {path}: {} names {:?}", e.kind, e.actor);
    }
    route_of(method, path)
}

/// One successful call of every route that changes something; the events
/// each wrote (read from the feed) all name the caller's token, and no
/// changing route of `ROUTES` is left out.
#[tokio::test]
async fn every_event_a_change_through_the_api_writes_names_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let url = oduflow_store::testing::sqlite_url(dir.path());
    let h = H::start_with_sim(dir, url, |c| c.with_key(KEY2)).await;
    h.fixture().await;
    lost(&h, "lost-third").await;
    lost(&h, "lost-fourth").await;
    console_server(&h, "legacy-1").await;
    let vm = {
        let req = InstanceRequest {
            region: "ewr".into(),
            plan: "vc2-1c-1gb".into(),
            image: ImageSource::Os(2284),
            label: Label::from("made-in-the-console"),
            server: ServerSpec { hostname: "lost-create".into(), ..Default::default() },
        };
        let Outcome::Accepted(id) = h.provider.instance_create(&req).await else { panic!("create") };
        id.0
    };
    let adoptable = h.orphan_of("lost-third").await;
    let stray = h.orphan_of("acme-ready").await;
    let calls: Vec<(&str, String, Value)> = vec![
        ("POST", "/api/v1/clients".into(), create_body("newcomer")),
        ("PATCH", "/api/v1/clients/acme-ready".into(), json!({ "tags": ["audited"] })),
        (
            "PUT",
            "/api/v1/clients/declared".into(),
            json!({ "name": "declared", "region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2284, "volume_gb": 40 }),
        ),
        ("POST", "/api/v1/clients/bad-plan/reconcile".into(), json!({})),
        ("POST", "/api/v1/clients/lost-create/adopt".into(), json!({ "kind": "vm", "id": vm })),
        ("POST", "/api/v1/clients/lost-again/abandon".into(), json!({ "kind": "vm", "by": "alice", "reason": "seen" })),
        ("POST", "/api/v1/bulk/reconcile?name=bad-plan".into(), json!({})),
        (
            "POST",
            "/api/v1/bulk/abandon?name=lost-fourth".into(),
            json!({ "kind": "vm", "by": "bob", "reason": "seen" }),
        ),
        ("POST", "/api/v1/import".into(), json!({ "label": "legacy-*" })),
        ("POST", "/api/v1/clients/legacy-1/promote".into(), json!({})),
        ("POST", format!("/api/v1/orphans/{adoptable}/adopt"), json!({})),
        ("POST", format!("/api/v1/orphans/{stray}/delete"), json!({ "by": "carol", "reason": "a stray copy" })),
        ("POST", "/api/v1/queue/pause".into(), json!({})),
        ("POST", "/api/v1/queue/resume".into(), json!({})),
        ("POST", "/api/v1/inventory".into(), json!({})),
        ("DELETE", "/api/v1/clients/acme-ready".into(), json!({})),
    ];
    let mut covered = BTreeSet::new();
    for (method, path, body) in calls {
        covered.insert(named_by_its_token(&h, method, &path, body).await);
    }
    // A rotation proves ownership of every recorded resource: on a fleet
    // of its own, every dispatch settled.
    let dir = tempfile::tempdir().unwrap();
    let url = oduflow_store::testing::sqlite_url(dir.path());
    let h = H::start_with_sim(dir, url, |c| c.with_key(KEY2)).await;
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
    h.store.client_create(&ClientName::parse("acme").unwrap(), &spec, "test", now_ms(), 5).await.unwrap();
    h.drain().await;
    let rotate = json!({ "api_key": KEY2 });
    covered.insert(named_by_its_token(&h, "POST", "/api/v1/credentials/rotate", rotate).await);
    let changing: BTreeSet<(String, String)> =
        ROUTES.iter().filter(|(m, _)| *m != "GET").map(|(m, p)| ((*m).to_owned(), (*p).to_owned())).collect();
    let left: Vec<_> = changing.difference(&covered).collect();
    assert!(left.is_empty(), "changing routes this test does not call: {left:?}");
}
