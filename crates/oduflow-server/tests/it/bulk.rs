//! Bulk actions over 100 clients blocked by one cause, in the engine's
//! world (a SQLite store, the simulator, the real Vultr client, a worker):
//! a dry run records nothing; the action takes every selected client,
//! refuses one it does not apply to, and each ends ready.

use oduflow_engine::operator::{self, Actor, BulkAction, BulkOutcome};
use oduflow_engine::{EngineConfig, SystemClock, Worker};
use oduflow_model::identity::{IdentityAdapter, MemoryAdapter};
use oduflow_model::ledger::Effect;
use oduflow_model::*;
use oduflow_sim::{Op, ResourceKind as SimKind};
use oduflow_store::{ClientSelect, Store};
use oduflow_vultr::VultrClient;
use oduflow_vultr::testing::Cloud;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

const FLEET: usize = 100;
/// How long a fleet of clients may take to settle.
const SETTLE_MAX: Duration = Duration::from_secs(120);

pub(crate) struct Fleet {
    _dir: tempfile::TempDir,
    pub(crate) store: Store,
    pub(crate) cloud: Cloud,
    pub(crate) p: Arc<VultrClient>,
}

impl Fleet {
    pub(crate) async fn new() -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&oduflow_store::testing::sqlite_url(dir.path()), true).await.unwrap();
        store.migrate().await.unwrap();
        let cloud = Cloud::start().await;
        let p = cloud.client("k1");
        Fleet { _dir: dir, store, cloud, p }
    }

    pub(crate) fn now(&self) -> i64 {
        use oduflow_engine::Clock;
        SystemClock.now_ms()
    }

    pub(crate) async fn create(&self, name: &str) {
        let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
        self.store.client_create(&ClientName::parse(name).unwrap(), &spec, "test", self.now(), 3).await.unwrap();
    }

    /// The engine's settings for a fleet: fast polls, three looks.
    pub(crate) fn config() -> EngineConfig {
        EngineConfig {
            worker_id: "bulk".into(),
            poll_interval_ms: 0,
            retry_base_ms: 0,
            observations_max: 3,
            attempts_max: 3,
            ready_wait_ms: 200,
            concurrency: 8,
            ..EngineConfig::default()
        }
    }

    /// Runs the queue until every client is ready, deleted or blocked.
    pub(crate) async fn settle(&self, adapter: Option<Arc<MemoryAdapter>>) {
        self.settle_with(adapter.into_iter().map(|a| a as Arc<dyn IdentityAdapter>).collect()).await
    }

    /// [`Fleet::settle`] with these identity adapters.
    pub(crate) async fn settle_with(&self, adapters: Vec<Arc<dyn IdentityAdapter>>) {
        let w = Worker::new(self.store.clone(), self.p.clone(), Self::config(), Arc::new(SystemClock))
            .with_adapters(adapters);
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        tokio::time::timeout(SETTLE_MAX, w.run(true, stopped)).await.expect("the fleet settles").unwrap();
    }

    pub(crate) async fn statuses(&self) -> Vec<(String, ClientStatus, Option<BlockedReason>)> {
        let rows = self.store.client_list().await.unwrap();
        rows.into_iter().map(|c| (c.name, c.infra.status, c.infra.blocked_reason)).collect()
    }

    /// Everything the database holds, as text: a dry run must leave it as
    /// it was.
    pub(crate) async fn everything(&self) -> String {
        oduflow_store::testing::all_text(&self.store).await.unwrap()
    }

    pub(crate) fn actor<'a>(&self, by: &'a str) -> Actor<'a> {
        Actor { by, now_ms: self.now(), attempts_max: 3 }
    }
}

fn abandon_vm(reason: &str) -> BulkAction<'_, VultrClient> {
    BulkAction::Abandon { kind: ResourceKind::Vm, reason }
}

fn names() -> Vec<String> {
    (0..FLEET).map(|i| format!("fleet-{i:03}")).collect()
}

#[tokio::test]
async fn a_bulk_reconcile_lifts_100_clients_blocked_by_one_adapter_outage() {
    let f = Fleet::new().await;
    let vpn = Arc::new(MemoryAdapter::default());
    vpn.fail_ensure.store(true, Ordering::SeqCst);
    for n in names() {
        f.create(&n).await;
    }
    f.settle(Some(vpn.clone())).await;
    let blocked = (ClientStatus::Blocked, Some(BlockedReason::AdapterFailed));
    assert!(f.statuses().await.iter().all(|(_, s, r)| (*s, *r) == blocked), "{:?}", f.statuses().await);

    let select = ClientSelect { blocked_reason: Some(BlockedReason::AdapterFailed), ..Default::default() };
    let action = || BulkAction::Reconcile { provider: f.p.as_ref() };
    let before = f.everything().await;
    let dry = operator::bulk(&f.store, &select, action(), f.actor("ops"), true).await.unwrap();
    assert_eq!(dry.count(BulkOutcome::WouldDo), FLEET, "{dry:?}");
    assert_eq!(f.everything().await, before, "a dry run recorded something");

    // The outage is over: one command for the whole fleet.
    vpn.fail_ensure.store(false, Ordering::SeqCst);
    let done = operator::bulk(&f.store, &select, action(), f.actor("ops"), false).await.unwrap();
    assert_eq!(
        (done.count(BulkOutcome::Done), done.items.len(), done.stopped.as_deref()),
        (FLEET, FLEET, None),
        "{done:?}"
    );
    f.settle(Some(vpn)).await;
    for (name, status, reason) in f.statuses().await {
        assert_eq!((status, reason), (ClientStatus::Ready, None), "{name}");
        let c = f.store.client_get(&name).await.unwrap().unwrap();
        let events = f.store.events_for_client(&c.id).await.unwrap();
        let asked = events.iter().filter(|e| e.kind == EventKind::ReconcileRequested.as_str()).count();
        assert_eq!(asked, 1, "{name}: each client carries its own record of the action");
    }
}

#[tokio::test]
async fn a_bulk_attested_abandon_settles_100_uncertain_creates() {
    let f = Fleet::new().await;
    // Each first instance create is answered 500 and not applied: the
    // outcome is unknown until someone checks the console.
    f.cloud.refuse(&[Op::InstanceCreate], 500, "Internal server error.", Some(FLEET as u32));
    for n in names() {
        f.create(&n).await;
    }
    f.settle(None).await;
    let uncertain = (ClientStatus::Blocked, Some(BlockedReason::UncertainCreate));
    assert!(f.statuses().await.iter().all(|(_, s, r)| (*s, *r) == uncertain), "{:?}", f.statuses().await);
    f.create("fleet-zz").await;
    f.settle(None).await;
    assert_eq!(f.cloud.live(SimKind::Instance).len(), 1, "only fleet-zz has a VM");

    // A selection by name takes fleet-zz too: its VM is known, so the
    // abandon is refused for it alone, and a dry run records nothing.
    let by_name = ClientSelect::default().with_words(None, Some("fleet-*"), None).unwrap();
    let why = "checked the console: no VM carries these labels";
    let abandon = || abandon_vm(why);
    let before = f.everything().await;
    let dry = operator::bulk(&f.store, &by_name, abandon(), f.actor("ops"), true).await.unwrap();
    assert_eq!((dry.count(BulkOutcome::WouldDo), dry.count(BulkOutcome::Refused)), (FLEET, 1), "{dry:?}");
    let zz = dry.items.iter().find(|i| i.name == "fleet-zz").unwrap();
    assert!(zz.detail.contains("known outcome"), "{zz:?}");
    assert_eq!(f.everything().await, before, "a dry run recorded something");

    let select = ClientSelect { blocked_reason: Some(BlockedReason::UncertainCreate), ..Default::default() };
    let done = operator::bulk(&f.store, &select, abandon(), f.actor("ops"), false).await.unwrap();
    assert_eq!(done.count(BulkOutcome::Done), FLEET, "{done:?}");
    f.settle(None).await;
    for (name, status, _) in f.statuses().await {
        assert_eq!(status, ClientStatus::Ready, "{name}");
    }
    // One VM per client, and each abandoned dispatch carries the one
    // attestation.
    assert_eq!(f.cloud.live(SimKind::Instance).len(), FLEET + 1);
    let receipts = f.store.receipts_all().await.unwrap();
    let attested: Vec<_> = receipts
        .iter()
        .filter(|r| matches!(r.effect(), Effect::Abandoned { ref by, ref reason, .. } if by == "ops" && reason == why))
        .collect();
    assert_eq!(attested.len(), FLEET);
}

#[tokio::test]
async fn a_bulk_action_refuses_no_selection_and_a_pending_restore_doing_nothing() {
    let f = Fleet::new().await;
    f.create("fleet-a").await;
    let reconcile = || BulkAction::Reconcile { provider: f.p.as_ref() };
    let before = f.everything().await;
    let e = operator::bulk(&f.store, &ClientSelect::default(), reconcile(), f.actor("ops"), false).await.unwrap_err();
    assert!(e.to_string().contains("needs a selection"), "{e}");
    let none = ClientSelect::default().with_words(None, Some("nobody-*"), None).unwrap();
    let r = operator::bulk(&f.store, &none, abandon_vm("x"), f.actor("ops"), false).await.unwrap();
    assert!(r.items.is_empty());
    assert_eq!(f.everything().await, before);

    f.store.restore_declare("a test", "test", f.now()).await.unwrap();
    let before = f.everything().await;
    let all = ClientSelect::default().with_words(None, Some("fleet-*"), None).unwrap();
    for action in [reconcile(), abandon_vm("x")] {
        let e = operator::bulk(&f.store, &all, action, f.actor("ops"), false).await.unwrap_err();
        assert!(e.to_string().contains("restore pending"), "{e}");
    }
    assert_eq!(f.everything().await, before);
}

/// Over HTTP: the query selects as `GET /api/v1/clients` does, bad input
/// is refused with nothing recorded, a dry run records nothing, and the
/// action answers one item per client.
#[tokio::test]
async fn the_bulk_routes_select_as_the_list_does_and_refuse_bad_input_doing_nothing() {
    use crate::{H, assert_error};
    use serde_json::json;
    let h = H::start().await;
    h.fixture().await;
    let attest =
        |dry_run: bool| json!({ "kind": "vm", "by": "ops", "reason": "checked the console", "dry_run": dry_run });
    let text = || oduflow_store::testing::all_text(&h.store);
    let before = (h.footprint().await, text().await.unwrap());
    for (path, body, status, code) in [
        ("/api/v1/bulk/abandon", attest(false), 409, "refused"),
        ("/api/v1/bulk/abandon?colour=red", attest(false), 422, "invalid_input"),
        ("/api/v1/bulk/abandon?blocked_reason=sunspots", attest(false), 422, "invalid_input"),
        ("/api/v1/bulk/abandon?name=Bad_Name", attest(false), 422, "invalid_input"),
        (
            "/api/v1/bulk/abandon?blocked_reason=uncertain_create",
            json!({ "kind": "dns", "by": "ops", "reason": "x" }),
            422,
            "invalid_input",
        ),
        (
            "/api/v1/bulk/abandon?blocked_reason=uncertain_create",
            json!({ "kind": "vm", "by": " ", "reason": "x" }),
            422,
            "invalid_input",
        ),
        ("/api/v1/bulk/reconcile", json!({}), 409, "refused"),
        ("/api/v1/bulk/reconcile?status=blocked", json!({ "dry_run": "yes" }), 422, "invalid_input"),
    ] {
        let got = h.post(path, body).await;
        assert_error(&got, status, code);
    }
    let dry = h.post("/api/v1/bulk/abandon?blocked_reason=uncertain_create", attest(true)).await;
    assert_eq!(dry.0, 200, "{}", dry.1);
    let outcomes: Vec<_> = dry.1["items"].as_array().unwrap().iter().map(|i| (&i["name"], &i["outcome"])).collect();
    assert_eq!(outcomes, [(&json!("lost-again"), &json!("would_do")), (&json!("lost-create"), &json!("would_do"))]);
    assert_eq!((h.footprint().await, text().await.unwrap()), before, "refusals and a dry run recorded something");

    let done = h.post("/api/v1/bulk/abandon?blocked_reason=uncertain_create", attest(false)).await;
    assert_eq!(done.0, 200, "{}", done.1);
    assert!(done.1["items"].as_array().unwrap().iter().all(|i| i["outcome"] == "done"), "{}", done.1);
    for n in ["lost-again", "lost-create"] {
        let c = h.store.client_get(n).await.unwrap().unwrap();
        assert_eq!(c.infra.status, ClientStatus::Provisioning, "{n}");
    }
    let again = h.post("/api/v1/bulk/reconcile?status=blocked&name=bad-*", json!({})).await;
    assert_eq!(again.0, 200, "{}", again.1);
    assert_eq!(again.1["items"][0]["name"], "bad-plan");
    assert_eq!(again.1["items"][0]["outcome"], "done", "{}", again.1);
}
