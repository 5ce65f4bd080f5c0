//! `ready` is a live claim: the verification pass lists every ready
//! client's VM and volume, and each kind of drift made in the console (a
//! deleted VM, tags, a firewall group, a detached volume) ends in a block
//! with its own reason and evidence; an untouched client stays ready and
//! runs nothing. The rebuild path then brings the client whose VM was
//! deleted back to ready on the volume it had.

use crate::bulk::Fleet;
use oduflow_engine::operator::{self, Actor};
use oduflow_engine::{SystemClock, Worker};
use oduflow_model::provider::{InstanceChange, Provider};
use oduflow_model::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn ready(f: &Fleet, names: &[&str]) {
    for n in names {
        f.create(n).await;
    }
    f.settle(None).await;
    for (name, status, _) in f.statuses().await {
        assert_eq!(status, ClientStatus::Ready, "{name}");
    }
}

async fn row(f: &Fleet, name: &str) -> oduflow_store::ClientRow {
    f.store.client_get(name).await.unwrap().unwrap()
}

async fn drift_events(f: &Fleet, name: &str) -> Vec<String> {
    let c = row(f, name).await;
    let events = f.store.events_for_client(&c.id).await.unwrap();
    events.into_iter().filter(|e| e.kind == EventKind::DriftSeen.as_str()).map(|e| e.detail.to_string()).collect()
}

#[tokio::test]
async fn each_kind_of_drift_ends_in_its_block_and_a_lost_vm_is_rebuilt_on_its_volume() {
    let f = Fleet::new().await;
    ready(&f, &["gone", "tagged", "walled", "loose", "steady"]).await;
    let (gone, tagged, walled, loose) =
        (row(&f, "gone").await, row(&f, "tagged").await, row(&f, "walled").await, row(&f, "loose").await);
    let console = f.cloud.console();
    f.cloud.delete_vm(gone.infra.vm_id.as_ref().unwrap()).await;
    let tags = InstanceChange { tags: Some(vec!["changed-by-hand".into()]), ..Default::default() };
    console.instance_update(tagged.infra.vm_id.as_ref().unwrap(), &tags).await;
    let fw = oduflow_sim::catalog::FIREWALL_GROUPS[0].0;
    let wall = InstanceChange { firewall_group_id: Some(fw.into()), ..Default::default() };
    console.instance_update(walled.infra.vm_id.as_ref().unwrap(), &wall).await;
    console.block_detach(loose.infra.volume_id.as_ref().unwrap()).await.unwrap();

    let found = operator::verify(&f.store, f.p.as_ref(), f.now(), 0).await.unwrap();
    let named =
        |n: &str| found.iter().filter(|i| i.client.as_deref() == Some(n)).map(|i| i.note.clone()).collect::<Vec<_>>();
    assert!(named("gone").iter().any(|e| e.contains("is not listed")), "{found:?}");
    assert!(named("tagged").iter().any(|e| e.contains("tags")), "{found:?}");
    assert!(named("walled").iter().any(|e| e.contains("firewall group")), "{found:?}");
    assert!(named("loose").iter().any(|e| e.contains("is detached")), "{found:?}");
    assert!(named("steady").is_empty(), "{found:?}");
    assert!(drift_events(&f, "steady").await.is_empty());
    assert_eq!(drift_events(&f, "tagged").await.len(), 1);

    f.settle(None).await;
    for (name, want) in [
        ("gone", BlockedReason::KnownResourceMissing),
        ("tagged", BlockedReason::ConfigMismatch),
        ("walled", BlockedReason::ConfigMismatch),
        ("loose", BlockedReason::UncertainAttach),
    ] {
        let c = row(&f, name).await;
        assert_eq!((c.infra.status, c.infra.blocked_reason), (ClientStatus::Blocked, Some(want)), "{name}: {c:?}");
        assert!(c.infra.blocked_detail.as_deref().is_some_and(|d| !d.is_empty()), "{name}: no evidence");
    }
    assert_eq!(row(&f, "steady").await.infra.status, ClientStatus::Ready);

    // The rebuild: a new VM for `gone`, its volume (and data) attached.
    let volume = gone.infra.volume_id.clone().unwrap();
    let actor = Actor { by: "ops", now_ms: f.now(), attempts_max: 3 };
    operator::abandon(&f.store, "gone", ResourceKind::Vm, "deleted in the console; rebuild", actor).await.unwrap();
    f.settle(None).await;
    let back = row(&f, "gone").await;
    assert_eq!(back.infra.status, ClientStatus::Ready, "{back:?}");
    assert_eq!(back.infra.volume_id.as_ref(), Some(&volume), "the same volume");
    assert_ne!(back.infra.vm_id, gone.infra.vm_id, "a new VM");
    let blocks = f.cloud.blocks().await;
    let b = blocks.iter().find(|b| b.id == volume).unwrap();
    assert_eq!(b.attached_to_instance.as_ref(), back.infra.vm_id.as_ref(), "re-attached");
    // A VM a read by id still shows is not abandoned this way, and the
    // ledger itself checks the block as it writes: a plan made before a
    // reconcile lifted it cannot land after.
    let e = operator::abandon(&f.store, "steady", ResourceKind::Vm, "x", actor).await.unwrap_err();
    assert!(e.to_string().contains("known outcome"), "{e}");
    let steady = row(&f, "steady").await;
    let receipts = f.store.receipts_for_client(&steady.id).await.unwrap();
    let vm = receipts.iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    let evidence = oduflow_model::decide::missing_evidence(ResourceKind::Vm, vm.id().unwrap());
    let ground = oduflow_store::AbandonGround::Missing(evidence);
    let ledger = oduflow_store::ReceiptLedger::new(f.store.clone());
    assert!(ledger.receipt_abandon(&vm.operation_key, "ops", "x", &ground, f.now()).await.is_err());

    // A rebuild is one client at a time: a bulk abandon refuses it.
    f.cloud.delete_vm(row(&f, "steady").await.infra.vm_id.as_ref().unwrap()).await;
    operator::verify(&f.store, f.p.as_ref(), f.now(), 0).await.unwrap();
    f.settle(None).await;
    assert_eq!(row(&f, "steady").await.infra.blocked_reason, Some(BlockedReason::KnownResourceMissing));
    let select = oduflow_store::ClientSelect::default().with_words(None, Some("steady"), None).unwrap();
    let action: operator::BulkAction<'_, oduflow_vultr::VultrClient> =
        operator::BulkAction::Abandon { kind: ResourceKind::Vm, reason: "x" };
    let r = operator::bulk(&f.store, &select, action, actor, false).await.unwrap();
    assert_eq!(r.count(operator::BulkOutcome::Refused), 1, "{r:?}");
    assert!(r.items[0].detail.contains("one client at a time"), "{r:?}");
}

/// The worker runs the pass itself, once per interval across workers, and
/// a drift made while it runs ends in its block with no command typed.
#[tokio::test]
async fn the_worker_verifies_ready_clients_every_interval() {
    let f = Fleet::new().await;
    ready(&f, &["acme"]).await;
    let acme = row(&f, "acme").await;
    let tags = InstanceChange { tags: Some(vec!["changed-by-hand".into()]), ..Default::default() };
    f.cloud.console().instance_update(acme.infra.vm_id.as_ref().unwrap(), &tags).await;
    let cfg =
        oduflow_engine::EngineConfig { verify_interval_ms: 200, verify_grace_ms: 0, idle_ms: 20, ..Fleet::config() };
    let w = Worker::new(f.store.clone(), f.p.clone(), cfg, Arc::new(SystemClock));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(async move { w.run(false, stopped).await });
    let t = Instant::now();
    while row(&f, "acme").await.infra.blocked_reason != Some(BlockedReason::ConfigMismatch) {
        assert!(t.elapsed() < Duration::from_secs(20), "never verified: {:?}", row(&f, "acme").await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    assert_eq!(drift_events(&f, "acme").await.len(), 1);
}
