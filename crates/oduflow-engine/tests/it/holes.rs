//! Scenarios from an adversarial review of the protocol: each one reproduces a
//! schedule under which a promise used to break, on both stores.

use super::*;
use oduflow_engine::operator;
use oduflow_model::identity;

oduflow_store::on_both_stores!(
    migrated crate::store_of =>
    deleted_client_keeps_no_vm_after_flip_and_rollback,
    deleted_client_keeps_no_vm_when_delete_lands_mid_run,
    inventory_reports_a_deleted_clients_live_vm,
    a_run_longer_than_its_lease_is_never_overlapped,
    a_job_that_kills_its_worker_every_time_blocks,
    failed_ensure_leaves_the_adapter_not_removed,
    unconfigured_adapter_blocks_deletion,
    delete_refused_for_ever_blocks_then_reconcile_deletes,
    reads_failing_for_ever_block_then_reconcile_recovers,
    vm_never_ready_blocks_then_delete_removes_it,
    a_create_that_never_connected_is_sent_again_on_its_receipt,
    adopted_renamed_vm_is_verified_without_its_label,
    adopt_refuses_another_dispatchs_labelled_resource,
    rotation_bumps_generation_and_resolves_credential_changed,
    a_run_that_loses_its_claim_while_a_read_waits_sends_nothing_more,
    an_orphan_names_its_client_and_is_adopted_into_it,
    a_deleted_clients_orphan_is_deleted_on_an_attestation,
    a_delete_accepted_but_never_carried_out_blocks,
    a_vm_deleted_just_before_a_flip_back_is_not_missing,
    a_restored_not_sent_receipt_is_never_sent_again_blindly,
    a_restore_that_lost_the_receipts_adopts_the_labelled_resources,
    a_labelled_orphan_that_does_not_match_blocks_the_first_create,
    a_client_is_not_deleted_while_a_volume_labelled_for_it_lives,
    a_client_made_after_the_backup_is_recovered_with_its_resources,
    an_abandoned_dispatchs_late_vm_blocks_labelled_orphan_not_a_crash_loop,
    a_receipt_restored_unmarked_is_looked_for_by_label_before_it_is_sent_again,
    a_restored_deleted_client_is_not_deleted_while_a_vm_labelled_for_it_lives,
    a_create_first_sent_after_a_key_rotation_records_the_key_it_went_with,
    a_delete_landing_while_a_create_waits_for_its_slot_records_it_not_sent,
    a_connection_reset_while_creates_wait_for_their_slot_costs_no_block,
    a_claim_lost_while_a_change_waits_for_its_slot_sends_it_later,
);

async fn ready(store: &Store, w: &Worker<MemoryProvider>, name: &str) -> ClientRow {
    create(store, name).await;
    drain(w, 50).await;
    let c = status(store, name).await;
    assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
    c
}

/// An identity adapter whose check can be told to fail.
#[derive(Default)]
struct TestAdapter {
    present: std::sync::Mutex<bool>,
    fail_check: std::sync::atomic::AtomicBool,
    removes: std::sync::atomic::AtomicUsize,
}

impl oduflow_model::identity::IdentityAdapter for TestAdapter {
    fn name(&self) -> &str {
        "vpn"
    }
    fn ensure<'a>(
        &'a self,
        _t: &'a identity::IdentityTarget,
        _own: &'a dyn identity::Ownership,
    ) -> identity::Step<'a, String> {
        Box::pin(async move {
            *self.present.lock().unwrap() = true;
            Ok("peer added".into())
        })
    }
    fn check<'a>(
        &'a self,
        _t: &'a identity::IdentityTarget,
        _own: &'a dyn identity::Ownership,
    ) -> identity::Step<'a, identity::Presence> {
        Box::pin(async move {
            if self.fail_check.load(std::sync::atomic::Ordering::SeqCst) {
                return Err("check failed".into());
            }
            Ok(if *self.present.lock().unwrap() {
                identity::Presence::Present("peer".into())
            } else {
                identity::Presence::Absent
            })
        })
    }
    fn remove<'a>(
        &'a self,
        _t: &'a identity::IdentityTarget,
        _own: &'a dyn identity::Ownership,
    ) -> identity::Step<'a, String> {
        Box::pin(async move {
            self.removes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            *self.present.lock().unwrap() = false;
            Ok("peer removed".into())
        })
    }
}

/// ready -> deleted -> present again: the re-provisioning run sends the VM
/// create at a new dispatch generation and then rolls back; the client is
/// deleted before that job runs again. The VM the rolled-back run created
/// must be deleted too, and the client must not read `deleted` before it is.
async fn deleted_client_keeps_no_vm_after_flip_and_rollback(store: Store) -> Result<()> {
    failpoints_required();
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    create(&store, "acme").await;
    drain(&w, 50).await;
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    store.client_create(&ClientName::parse("acme")?, &spec(), now(), 3).await?;
    let scenario = fail::FailScenario::setup();
    fail::cfg("main-tx-commit", "return").unwrap();
    let out = w.run_next().await?;
    fail::cfg("main-tx-commit", "off").unwrap();
    assert!(matches!(out, RunOutcome::Failed { .. }), "{out:?}");
    assert_eq!(p.with(|s| s.instances.len()), 1, "the rolled-back run created the new VM");
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Deleted, "{c:?}");
    p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty(), "live after deletion: {:?}", s.instances));
    scenario.teardown();
    Ok(())
}

/// The same hole without a crash: `client delete` lands while the
/// re-provisioning run is between its create and its commit (on SQLite the
/// run's writes are then dropped as stale; on PostgreSQL the delete waits
/// for the run's row lock).
async fn deleted_client_keeps_no_vm_when_delete_lands_mid_run(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    create(&store, "acme").await;
    drain(&w, 50).await;
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    store.client_create(&ClientName::parse("acme")?, &spec(), now(), 3).await?;
    let hold = Arc::new(tokio::sync::Notify::new());
    p.with(|s| s.hold_next_create = Some(hold.clone()));
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    // Wait until the run's create is applied (its answer is held back).
    let t = std::time::Instant::now();
    while p.with(|s| s.instances.is_empty()) {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "the run never sent its create");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let s2 = store.clone();
    let delete = tokio::spawn(async move { s2.client_delete("acme", now(), 3).await });
    // Aim, not a condition: give the deletion time to commit (SQLite) or to
    // queue behind the run's row lock (PostgreSQL) before the run goes on.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    hold.notify_one();
    run.await??;
    delete.await??;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Deleted, "{c:?}");
    p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty(), "live after deletion: {:?}", s.instances));
    Ok(())
}

/// The same hole as seen by the inventory: with the fix planted out, the
/// deleted client's VM stays live, and `reconcile --all` must report it.
async fn inventory_reports_a_deleted_clients_live_vm(store: Store) -> Result<()> {
    failpoints_required();
    let p = Arc::new(MemoryProvider::new(key("k1")));
    // The bug is this worker's alone: the inventory below, and every other
    // test in the process, run the real protocol.
    let w = worker_with(&store, p.clone(), |c| {
        c.planted = oduflow_engine::PlantedBug::of(oduflow_engine::Bug::SkipOpenReceipts)
    });
    ready(&store, &w, "acme").await;
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    store.client_create(&ClientName::parse("acme")?, &spec(), now(), 3).await?;
    let scenario = fail::FailScenario::setup();
    fail::cfg("main-tx-commit", "return").unwrap();
    w.run_next().await?;
    fail::cfg("main-tx-commit", "off").unwrap();
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    let live = p.with(|s| s.instances.keys().cloned().collect::<Vec<_>>());
    assert_eq!(live.len(), 1, "the planted bug leaves the VM live");
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert!(inv.orphans.iter().any(|o| o.id == live[0] && o.client.as_deref() == Some("acme")), "{inv:?}");
    scenario.teardown();
    Ok(())
}

/// A run outlives any timed lease (read retries, Retry-After waits, a
/// paused process): no other worker may run the same client meanwhile.
async fn a_run_longer_than_its_lease_is_never_overlapped(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let a = worker_with(&store, p.clone(), |_| {});
    // Worker b lives ten minutes ahead: any timed lease worker a could
    // have taken has long expired by b's clock, with no sleeping.
    let b_clock = Arc::new(ManualClock::at(now() + 600_000));
    let b = worker_on(&store, p.clone(), |_| {}, b_clock);
    let c = create(&store, "acme").await;
    let hold = Arc::new(tokio::sync::Notify::new());
    p.with(|s| s.hold_next_create = Some(hold.clone()));
    let a2 = a.clone();
    let run = tokio::spawn(async move { a2.run_next().await });
    let t = std::time::Instant::now();
    while p.with(|s| s.instances.is_empty()) {
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Far past the lease: another delivery of the same work must not start.
    let mut dup = NewJob::for_client(&c.id, JobKind::Provision, 1, now(), 3);
    dup.identity_key = None;
    store.job_enqueue(&dup).await?;
    let out = b.run_next().await?;
    assert_eq!(out, RunOutcome::Idle, "a second run started while the first was in flight");
    hold.notify_one();
    run.await??;
    drain(&a, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Ready);
    p.with(|s| assert_eq!(s.calls.iter().filter(|c| *c == "POST /instances").count(), 1));
    Ok(())
}

/// Runs killed outright (no error, no panic to count) still count: the
/// job's claim is taken and dropped without finishing, as a SIGKILL would.
async fn a_job_that_kills_its_worker_every_time_blocks(store: Store) -> Result<()> {
    let c = create(&store, "acme").await;
    for i in 0..3 {
        let t = std::time::Instant::now();
        let claim = loop {
            if let Some(claim) = store.job_claim_next("dying", now()).await? {
                break claim;
            }
            assert!(t.elapsed() < std::time::Duration::from_secs(10), "the job never came back");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(claim.unfinished_runs, i);
        std::mem::forget(claim.fence()); // nothing: the worker just dies
        drop(claim);
    }
    let w = worker(&store, Arc::new(MemoryProvider::new(key("k1"))));
    let t = std::time::Instant::now();
    loop {
        if !matches!(w.run_next().await?, RunOutcome::Idle) {
            break;
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::AttemptsExhausted), "{after:?}");
    assert!(after.infra.blocked_detail.unwrap().contains("never finished"));
    assert_eq!(store.jobs_for_client(&c.id).await?[0].state, JobState::Failed);
    assert!(store.queue_status(now()).await?.is_settled());
    Ok(())
}

/// ready -> deleted -> present with an adapter whose check fails: its state
/// must not stay `removed`, so a later deletion removes the identity again.
async fn failed_ensure_leaves_the_adapter_not_removed(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let a = Arc::new(TestAdapter::default());
    let w = worker(&store, p.clone()).with_adapters(vec![a.clone()]);
    let c = ready(&store, &w, "acme").await;
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    a.fail_check.store(true, std::sync::atomic::Ordering::SeqCst);
    store.client_create(&ClientName::parse("acme")?, &spec(), now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.blocked_reason, Some(BlockedReason::AdapterFailed));
    let st = store.adapter_states(&c.id).await?;
    assert_eq!(st[0].state, oduflow_model::identity::AdapterState::Ensuring, "{st:?}");
    // The identity was ensured (the check only failed): deleting must remove it.
    a.fail_check.store(false, std::sync::atomic::Ordering::SeqCst);
    let removes = a.removes.load(std::sync::atomic::Ordering::SeqCst);
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(a.removes.load(std::sync::atomic::Ordering::SeqCst) > removes, "deletion skipped the adapter");
    assert!(!*a.present.lock().unwrap());
    Ok(())
}

/// An identity recorded as ensured whose adapter was dropped from the
/// configuration blocks the deletion, naming it; putting the adapter back
/// and reconciling (the suggestion) deletes it.
async fn unconfigured_adapter_blocks_deletion(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let a = Arc::new(TestAdapter::default());
    let with = worker(&store, p.clone()).with_adapters(vec![a.clone()]);
    ready(&store, &with, "acme").await;
    let without = worker(&store, p.clone());
    store.client_delete("acme", now(), 3).await?;
    drain(&without, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.blocked_reason, Some(BlockedReason::AdapterUnconfigured), "{c:?}");
    assert!(c.infra.blocked_detail.as_deref().unwrap().contains("vpn"));
    assert!(*a.present.lock().unwrap());
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&with, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(!*a.present.lock().unwrap());
    Ok(())
}

async fn delete_refused_for_ever_blocks_then_reconcile_deletes(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "acme").await;
    p.with(|s| s.refuse_deletes = Some((500, "server is locked".into())));
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 100).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::DeleteRefused), "{after:?}");
    assert!(after.infra.blocked_detail.as_deref().unwrap().contains("locked"));
    let vm = store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    assert_eq!(vm.observations(), 5, "the receipt's count agrees with the evidence");
    assert!(store.queue_status(now()).await?.is_settled());
    p.with(|s| s.refuse_deletes = None);
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 100).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty()));
    Ok(())
}

async fn reads_failing_for_ever_block_then_reconcile_recovers(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    create(&store, "acme").await;
    p.with(|s| {
        s.fail_reads = Some(provider::ProviderError::Status { status: 401, message: "Invalid API token.".into() })
    });
    drain(&w, 100).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::ProviderUnavailable), "{after:?}");
    assert!(after.infra.blocked_detail.as_deref().unwrap().contains("401"));
    assert!(store.queue_status(now()).await?.is_settled());
    p.with(|s| s.fail_reads = None);
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 100).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Ready);
    p.with(|s| assert_eq!(s.calls.iter().filter(|c| *c == "POST /instances").count(), 1));
    Ok(())
}

async fn vm_never_ready_blocks_then_delete_removes_it(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    p.with(|s| s.vms_stay_pending = true);
    let w = worker_with(&store, p.clone(), |c| c.ready_wait_ms = 200);
    create(&store, "acme").await;
    let t = std::time::Instant::now();
    while !store.queue_status(now()).await?.is_settled() {
        assert!(t.elapsed() < std::time::Duration::from_secs(20), "never settled");
        drain(&w, 50).await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::NotReady), "{after:?}");
    assert!(after.infra.blocked_detail.as_deref().unwrap().contains("pending"));
    // The suggested `client delete` removes it.
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 100).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty()));
    Ok(())
}

async fn a_create_that_never_connected_is_sent_again_on_its_receipt(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    p.with(|s| s.unreachable_creates = 2);
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Ready);
    let receipts = store.receipts_for_client(&c.id).await?;
    let vm = receipts.iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    assert_eq!(vm.dispatch_generation, 1, "sent again on the same receipt");
    assert!(vm.not_sent_count() >= 1 && vm.not_sent_at().is_none(), "{vm:?}");
    assert_eq!(receipts.iter().filter(|r| r.resource_kind == ResourceKind::Vm).count(), 1);
    p.with(|s| {
        assert_eq!(s.calls.iter().filter(|c| *c == "POST /instances").count(), 3);
        assert!(s.creates_per_label.values().all(|n| *n == 1));
        assert_eq!(s.instances.len(), 1);
    });
    // Connections that never succeed end blocked, not in a loop.
    p.with(|s| s.unreachable_creates = 1000);
    create(&store, "beta").await;
    drain(&w, 100).await;
    let b = status(&store, "beta").await;
    assert_eq!(b.infra.blocked_reason, Some(BlockedReason::ProviderUnavailable), "{b:?}");
    Ok(())
}

/// The documented adopt case: a VM found in the console under another label.
/// The run must accept what adopt verified, not block config_mismatch.
async fn adopted_renamed_vm_is_verified_without_its_label(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    p.with(|s| s.lose_create_responses = 1);
    w.run_next().await?;
    let label = store.receipts_for_client(&c.id).await?[0].label.clone();
    let id = p.with(|s| {
        let i = s.instances.values_mut().find(|i| i.label == label.as_str()).unwrap();
        i.label = "renamed-by-hand".into();
        i.id.0.clone()
    });
    operator::adopt(&store, p.as_ref(), "acme", ResourceKind::Vm, &id, actor("ops")).await?;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id.as_ref().map(|v| v.0.clone()), Some(id.clone()));
    // A rotation proves ownership of it the way runs accept it: by its id,
    // not by a label it never carried.
    let p2 = Arc::new(MemoryProvider::new(key("k2")));
    p.with(|s1| {
        p2.with(|s2| {
            s2.instances = s1.instances.clone();
            s2.blocks = s1.blocks.clone();
        })
    });
    let rebound = operator::credentials_rotate(&store, p2.as_ref(), actor("ops")).await?;
    assert_eq!(rebound.map_err(|u| format!("{u:?}")), Ok(vec!["acme".to_owned()]));
    Ok(())
}

/// A resource carrying another dispatch's label is that dispatch's: adopting
/// it into another client would give it two owners.
async fn adopt_refuses_another_dispatchs_labelled_resource(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let a = create(&store, "acme").await;
    p.with(|s| s.lose_create_responses = 1);
    w.run_next().await?; // acme's VM applied, answer lost: receipt without id
    let label = store.receipts_for_client(&a.id).await?[0].label.clone();
    let id = p.with(|s| s.instances.values().find(|i| i.label == label.as_str()).unwrap().id.0.clone());
    create(&store, "beta").await;
    let r = operator::adopt(&store, p.as_ref(), "beta", ResourceKind::Vm, &id, actor("ops")).await;
    assert!(matches!(r, Err(operator::OperatorError::Refused(ref m)) if m.contains("label")), "{r:?}");
    Ok(())
}

/// Rotation rebinds by moving the record to a new generation, so a run in
/// flight cannot write the old binding back, and it resolves
/// credential_changed as its suggestion says.
async fn rotation_bumps_generation_and_resolves_credential_changed(store: Store) -> Result<()> {
    let p1 = Arc::new(MemoryProvider::new(key("old")));
    let w1 = worker(&store, p1.clone());
    let before = ready(&store, &w1, "acme").await;
    let p2 = Arc::new(MemoryProvider::new(key("new")));
    p1.with(|s1| {
        p2.with(|s2| {
            s2.instances = s1.instances.clone();
            s2.blocks = s1.blocks.clone();
        })
    });
    let w2 = worker(&store, p2.clone());
    store.client_delete("acme", now(), 3).await?;
    drain(&w2, 20).await;
    assert_eq!(status(&store, "acme").await.infra.blocked_reason, Some(BlockedReason::CredentialChanged));
    let names = operator::credentials_rotate(&store, p2.as_ref(), actor("ops")).await?.unwrap();
    assert_eq!(names, vec!["acme".to_owned()]);
    let after = status(&store, "acme").await;
    assert!(after.infra.generation > before.infra.generation + 1, "{after:?}");
    assert_eq!(after.infra.blocked_reason, None);
    drain(&w2, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    Ok(())
}

/// A run's read waits (the rate limiter, a retry's backoff, a paused
/// process) and meanwhile loses its claim: PostgreSQL terminates its claim
/// connection, or on SQLite the record moves on (`client create` flips it
/// back). Checked only before the call, the read would still leave after the
/// wait, and another worker, free to take the client, could have reported it
/// deleted by then (campaign seed 156635722: a GET and a DELETE reached the
/// provider after `deleted`). Each request is checked as it leaves.
async fn a_run_that_loses_its_claim_while_a_read_waits_sends_nothing_more(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    ready(&store, &w, "acme").await;
    store.client_delete("acme", now(), 3).await?;
    let hold = Arc::new(tokio::sync::Notify::new());
    p.with(|s| s.hold_next_get = Some(hold.clone()));
    let gets = |p: &MemoryProvider| p.with(|s| s.calls.iter().filter(|c| c.starts_with("GET /instances/")).count());
    let before = gets(&p);
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    // Until the run's GET is waiting (it took the hold).
    let t = std::time::Instant::now();
    while p.with(|s| s.hold_next_get.is_some()) {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "the run never read its VM");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    match store.backend() {
        Backend::Postgres => {
            let pids =
                oduflow_store::testing::pg_idle_in_transaction_pids(&store).await.map_err(anyhow::Error::from_boxed)?;
            assert_eq!(pids.len(), 1, "exactly the run's claim connection is idle in its transaction");
            // Waits until the backend is gone (pg_terminate_backend only signals).
            oduflow_store::testing::pg_terminate(&store, pids[0]).await.map_err(anyhow::Error::from_boxed)?;
        }
        Backend::Sqlite => drop(store.client_create(&ClientName::parse("acme")?, &spec(), now(), 3).await?),
    }
    hold.notify_one();
    let out = run.await?;
    assert_eq!(gets(&p), before, "a read left after the run lost its claim ({out:?})");
    p.with(|s| assert_eq!(s.calls.iter().filter(|c| c.starts_with("DELETE")).count(), 0, "{:?}", s.calls));
    // Whoever holds the client next finishes the work.
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    let want = if store.backend() == Backend::Postgres { ClientStatus::Deleted } else { ClientStatus::Ready };
    assert_eq!(c.infra.status, want, "{c:?}");
    Ok(())
}

/// A VM made through the provider as a run would have made it, with a label
/// naming `client`'s vm, but recorded nowhere (the receipt that knew it was
/// lost with a restore).
fn leak_vm(p: &MemoryProvider, client: &ClientId) -> String {
    let label = Label::new_dispatch(client, ResourceKind::Vm);
    p.with(|s| {
        let id = format!("leaked-{}", s.instances.len());
        s.put_vm(&id, label.as_str());
        id
    })
}

/// Hole 8: after a restore, a client pending in the backup had its VM made
/// already; the receipt is gone. The orphan's label names the client and the
/// kind, the inventory says so and records it, and `orphan adopt` records it
/// on that client, whose run then uses it instead of creating another.
async fn an_orphan_names_its_client_and_is_adopted_into_it(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    let vm = leak_vm(&p, &c.id);
    // An old-style label names no client: listed, but not adoptable by name.
    p.with(|s| {
        let mut i = s.instances[&vm].clone();
        i.id = VultrInstanceId("old-style".into());
        i.label = format!("{LABEL_PREFIX}0b1e2c3d-0000-4000-8000-000000000000");
        s.instances.insert("old-style".into(), i);
    });
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    let o = inv.orphans.iter().find(|o| o.id == vm).expect("the leaked VM is an orphan");
    assert_eq!(o.client.as_deref(), Some("acme"), "{o:?}");
    assert!(o.note.contains("acme's vm"), "{o:?}");
    assert!(o.resolve.as_deref().is_some_and(|r| r.contains(&format!("oduflow orphan adopt {vm}"))), "{o:?}");
    let listed = store.orphans_list(false).await?;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed.iter().find(|o| o.resource_id == vm).and_then(|o| o.client_ref.clone()), Some(c.id.to_string()));
    let err = operator::orphan_adopt(&store, p.as_ref(), "old-style", actor("ops")).await.unwrap_err();
    assert!(err.to_string().contains("names no client"), "{err}");
    let err = operator::orphan_adopt(&store, p.as_ref(), "nothing-like-it", actor("ops")).await.unwrap_err();
    assert!(err.to_string().contains("not a recorded orphan"), "{err}");
    operator::orphan_adopt(&store, p.as_ref(), &vm, actor("ops")).await?;
    assert_eq!(store.orphans_list(false).await?.len(), 1, "adopted: only the old-style one is open");
    let again = operator::orphan_adopt(&store, p.as_ref(), &vm, actor("ops")).await.unwrap_err();
    assert!(again.to_string().contains("no longer an orphan"), "{again}");
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
    assert_eq!(c.infra.vm_id.as_ref().map(|v| v.as_str()), Some(vm.as_str()));
    p.with(|s| assert_eq!(s.calls.iter().filter(|c| *c == "POST /instances").count(), 0, "a second VM was made"));
    Ok(())
}

/// Hole 8: a deleted client's VM, recorded nowhere, is an orphan that names
/// it; adopting it is refused (the client is deleted) and `orphan delete`
/// deletes it on an attestation, which the audit trail keeps.
async fn a_deleted_clients_orphan_is_deleted_on_an_attestation(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "gone").await;
    store.client_delete("gone", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "gone").await.infra.status, ClientStatus::Deleted);
    let vm = leak_vm(&p, &c.id);
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    let o = inv.orphans.iter().find(|o| o.id == vm).expect("orphan");
    assert_eq!(o.client.as_deref(), Some("gone"));
    assert!(!o.resolve.as_deref().unwrap_or("").contains("adopt"), "{o:?}");
    let err = operator::orphan_adopt(&store, p.as_ref(), &vm, actor("ops")).await.unwrap_err();
    assert!(err.to_string().contains("is deleted"), "{err}");
    let err = operator::orphan_delete(
        &store,
        p.as_ref(),
        &vm,
        "checked",
        operator::Actor { by: "", now_ms: now(), attempts_max: 0 },
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("attestation"), "{err}");
    assert!(p.with(|s| s.instances.contains_key(&vm)), "a refused delete deleted");
    let d = operator::orphan_delete(
        &store,
        p.as_ref(),
        &vm,
        "client left in November",
        operator::Actor { by: "ops", now_ms: now(), attempts_max: 0 },
    )
    .await?;
    assert!(d.confirmed, "{d:?}");
    assert!(!p.with(|s| s.instances.contains_key(&vm)));
    assert!(store.orphans_list(false).await?.is_empty());
    let all = store.orphans_list(true).await?;
    assert!(all[0].resolution.as_deref().is_some_and(|r| r.contains("client left in November")), "{all:?}");
    let ev = store.events_by_kind(EventKind::OrphanDeleteAttested).await?;
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].client_ref.as_deref(), Some(c.id.as_str()));
    // The next pass finds nothing more.
    assert!(operator::inventory(&store, p.as_ref(), now()).await?.orphans.is_empty());
    Ok(())
}

/// Every wait ends: a DELETE the provider answers 204 and never carries out
/// (the VM stays listed) used to be sent again for ever. Each repeat counts;
/// at the limit the client blocks `uncertain_delete`, and `reconcile` (once
/// the provider deletes) ends it deleted.
async fn a_delete_accepted_but_never_carried_out_blocks(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    ready(&store, &w, "acme").await;
    p.with(|s| s.deletes_not_applied = true);
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.blocked_reason, Some(BlockedReason::UncertainDelete), "{c:?}");
    assert!(c.infra.blocked_detail.as_deref().is_some_and(|d| d.contains("still shows")), "{c:?}");
    let deletes = p.with(|s| s.calls.iter().filter(|c| c.starts_with("DELETE")).count());
    // The first, then one per counted observation (the limit is 5).
    assert_eq!(deletes, 1 + 5, "{deletes} DELETEs for a limit of 5 observations");
    p.with(|s| s.deletes_not_applied = false);
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    Ok(())
}

/// Hole 9: the client is deleted, its VM's DELETE goes out, and before the
/// 404 that confirms it is read the target flips back to present. The 404
/// the present run then reads is the deletion it asked for, not a
/// `known_resource_missing`: it confirms the deletion and starts a new
/// dispatch.
async fn a_vm_deleted_just_before_a_flip_back_is_not_missing(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let first = ready(&store, &w, "acme").await;
    store.client_delete("acme", now(), 3).await?;
    let t = std::time::Instant::now();
    while p.with(|s| !s.calls.iter().any(|c| c == "DELETE /instances/{id}")) {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "no DELETE was sent");
        w.run_next().await?;
    }
    store.client_create(&ClientName::parse("acme")?, &spec(), now(), 3).await?;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
    assert_ne!(c.infra.vm_id, first.infra.vm_id, "a new VM");
    let r = store.receipts_for_client(&c.id).await?;
    assert!(
        r.iter().any(|r| r.resource_kind == ResourceKind::Vm && r.progress().deleted),
        "the deletion was confirmed"
    );
    Ok(())
}

/// A backup is taken while a create is recorded "not sent" (Vultr
/// unreachable); the resend after it went out and made the VM; then the
/// backup is restored. The restored receipt still says "not sent", which no
/// longer proves anything: the inventory pass makes it an unknown outcome,
/// and the run adopts the VM by its label instead of creating a second one.
async fn a_restored_not_sent_receipt_is_never_sent_again_blindly(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    p.with(|s| s.unreachable_creates = 1);
    w.run_next().await?;
    let r = store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    assert!(matches!(r.effect(), Effect::NotSent { .. }), "{r:?}");
    // The timeline the restore threw away: the resend made the VM.
    p.with(|s| s.put_vm("made-after-the-backup", r.label.as_str()));
    store.restore_declare("test: restored from a backup", now()).await?;
    operator::inventory(&store, p.as_ref(), now()).await?;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id.as_ref().map(|v| v.as_str()), Some("made-after-the-backup"));
    p.with(|s| {
        assert_eq!(
            s.creates_per_label.get(r.label.as_str()),
            None,
            "the create was sent again: {:?}",
            s.creates_per_label
        )
    });
    Ok(())
}

/// A restore (or a lost WAL) threw away the receipts of a client's first
/// provisioning; its VM and volume live on under labels naming it. The
/// inventory pass records them as orphans; the runs then adopt them instead
/// of sending a second create of each, the client ends ready on them, and
/// its deletion deletes them.
async fn a_restore_that_lost_the_receipts_adopts_the_labelled_resources(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    p.with(|s| {
        s.put_vm("vm-lost", Label::new_dispatch(&c.id, ResourceKind::Vm).as_str());
        s.put_block("vol-lost", Label::new_dispatch(&c.id, ResourceKind::Volume).as_str());
    });
    store.restore_declare("test: restored from a backup", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 2, "{inv:?}");
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id.as_ref().map(|v| v.as_str()), Some("vm-lost"));
    assert_eq!(after.infra.volume_id.as_ref().map(|v| v.as_str()), Some("vol-lost"));
    p.with(|s| assert!(s.creates_per_label.is_empty(), "a create was sent: {:?}", s.creates_per_label));
    assert!(store.orphans_list(false).await?.is_empty(), "the adopted orphans are resolved");
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty(), "{:?} {:?}", s.instances, s.blocks));
    Ok(())
}

/// The labelled VM a lost timeline made is in another region than the
/// restored spec says: it cannot be adopted as it is, and no second VM is
/// made beside it. The client blocks `labelled_orphan` naming it; deleting
/// it on an attestation and reconciling provisions the client anew.
async fn a_labelled_orphan_that_does_not_match_blocks_the_first_create(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    p.with(|s| {
        s.put_vm("vm-elsewhere", Label::new_dispatch(&c.id, ResourceKind::Vm).as_str());
        s.instances.get_mut("vm-elsewhere").unwrap().region = "ams".into();
    });
    store.restore_declare("test: restored from a backup", now()).await?;
    operator::inventory(&store, p.as_ref(), now()).await?;
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::LabelledOrphan), "{blocked:?}");
    assert!(blocked.infra.blocked_detail.as_deref().is_some_and(|d| d.contains("vm-elsewhere")), "{blocked:?}");
    p.with(|s| assert!(s.creates_per_label.is_empty(), "a create was sent: {:?}", s.creates_per_label));
    operator::orphan_delete(&store, p.as_ref(), "vm-elsewhere", "wrong region, made before the restore", actor("ops"))
        .await?;
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_ne!(after.infra.vm_id.as_ref().map(|v| v.as_str()), Some("vm-elsewhere"));
    Ok(())
}

/// The restored copy knows the client's VM and volume; the timeline it
/// threw away had made a second volume under a label naming the client.
/// Deleting the client deletes what it records, and then it is not
/// reported deleted while that volume lives: it blocks `labelled_orphan`
/// naming it, and once the orphan is deleted a reconcile ends it deleted.
async fn a_client_is_not_deleted_while_a_volume_labelled_for_it_lives(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "acme").await;
    p.with(|s| s.put_block("vol-extra", Label::new_dispatch(&c.id, ResourceKind::Volume).as_str()));
    store.restore_declare("test: restored from a backup", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 1, "{inv:?}");
    drain(&w, 50).await;
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::LabelledOrphan), "{blocked:?}");
    assert!(blocked.infra.blocked_detail.as_deref().is_some_and(|d| d.contains("vol-extra")), "{blocked:?}");
    assert!(p.with(|s| s.blocks.contains_key("vol-extra")));
    operator::orphan_delete(&store, p.as_ref(), "vol-extra", "left by the lost timeline", actor("ops")).await?;
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty(), "{:?} {:?}", s.instances, s.blocks));
    Ok(())
}

/// A client created after the backup the database was restored from is
/// unknown to the restored copy; its VM and volume live on under labels
/// naming its id. The inventory names that id and the command that brings
/// the client back; created again under that id, its first provisioning
/// adopts both (no create is sent), and it ends ready on them.
async fn a_client_made_after_the_backup_is_recovered_with_its_resources(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let lost = ClientId::new_v7();
    p.with(|s| {
        s.put_vm("vm-of-lost", Label::new_dispatch(&lost, ResourceKind::Vm).as_str());
        s.put_block("vol-of-lost", Label::new_dispatch(&lost, ResourceKind::Volume).as_str());
    });
    store.restore_declare("test: restored from a backup", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 2, "{inv:?}");
    let recover = format!("--recover {lost}");
    assert!(inv.orphans.iter().all(|o| o.note.contains(&recover)), "{inv:?}");
    let name = ClientName::parse("late")?;
    let c = store.client_create_as(&name, &spec(), Some(&lost), now(), 3).await?;
    assert_eq!(c.id, lost);
    // Not twice, nor under a name or an id already taken.
    assert!(store.client_create_as(&name, &spec(), Some(&ClientId::new_v7()), now(), 3).await.is_err());
    assert!(store.client_create_as(&ClientName::parse("other")?, &spec(), Some(&lost), now(), 3).await.is_err());
    drain(&w, 50).await;
    let after = status(&store, "late").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id.as_ref().map(|v| v.as_str()), Some("vm-of-lost"));
    assert_eq!(after.infra.volume_id.as_ref().map(|v| v.as_str()), Some("vol-of-lost"));
    p.with(|s| assert!(s.creates_per_label.is_empty(), "a create was sent: {:?}", s.creates_per_label));
    Ok(())
}

/// Closes the slot gate: every create, attach and change waits at it.
fn close_slots(p: &MemoryProvider) -> Arc<tokio::sync::Semaphore> {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    p.with(|s| {
        s.slot_gate = Some(gate.clone());
        s.slot_waiting = 0;
    });
    gate
}

/// Opens the gate for the sends waiting at it and every later one.
fn open_slots(p: &MemoryProvider, gate: &tokio::sync::Semaphore) {
    p.with(|s| s.slot_gate = None);
    gate.add_permits(1000);
}

/// Until `n` sends wait at the gate (at most 10 s).
async fn until_waiting(p: &MemoryProvider, n: u32) {
    let t = std::time::Instant::now();
    while p.with(|s| s.slot_waiting) < n {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "only {} sends reached their slot",
            p.with(|s| s.slot_waiting)
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Takes every claim away as a PostgreSQL failover or a lost SQLite lease
/// would: the claim connections are terminated; the leases name nobody.
async fn lose_every_claim(store: &Store, claims: usize) -> Result<()> {
    match store.backend() {
        Backend::Postgres => {
            let pids =
                oduflow_store::testing::pg_idle_in_transaction_pids(store).await.map_err(anyhow::Error::from_boxed)?;
            assert_eq!(pids.len(), claims, "the runs' claim connections are idle in their transactions");
            for pid in pids {
                oduflow_store::testing::pg_terminate(store, pid).await.map_err(anyhow::Error::from_boxed)?;
            }
        }
        Backend::Sqlite => {
            oduflow_store::testing::execute_raw(store, "UPDATE infra SET lease_owner = NULL")
                .await
                .map_err(anyhow::Error::msg)?;
        }
    }
    Ok(())
}

/// A `client delete` lands while the VM's create waits for its slot. The
/// run's guard stops the create before it leaves (on PostgreSQL the delete
/// waits for the run's row lock instead, and the create goes out). A
/// stopped create was recorded as sent, and the client blocked
/// `uncertain_delete` over a VM that was never asked for.
async fn a_delete_landing_while_a_create_waits_for_its_slot_records_it_not_sent(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    let gate = close_slots(&p);
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    until_waiting(&p, 1).await;
    let s2 = store.clone();
    let delete = tokio::spawn(async move { s2.client_delete("acme", now(), 3).await });
    // Aim, not a condition: give the deletion time to commit (SQLite) or to
    // queue behind the run's row lock (PostgreSQL) before the send goes on.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    open_slots(&p, &gate);
    let _ = run.await?;
    delete.await??;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Deleted, "{after:?}");
    p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty(), "live after deletion: {:?}", s.instances));
    if store.backend() == Backend::Sqlite {
        let vm = store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm);
        let vm = vm.expect("the create's receipt");
        let Effect::NotSent { reason: why, .. } = vm.effect() else { panic!("recorded as not sent: {vm:?}") };
        assert!(vm.sent_at().is_none(), "recorded as not sent: {vm:?}");
        assert!(why.starts_with("stopped before it left"), "{why}");
        p.with(|s| assert!(!s.calls.iter().any(|c| c == "POST /instances"), "{:?}", s.calls));
        let events = store.events_for_client(&c.id).await?;
        let about = |e: &&EventRow| e.detail["operation_key"].as_str() == Some(vm.operation_key.as_str());
        assert!(!events.iter().filter(about).any(|e| e.kind == "request_sent"), "audited as sent: {events:?}");
    }
    Ok(())
}

/// A failover while creates wait for their slots: every run loses its claim,
/// and none of the creates leaves. They are sent later on the same receipts:
/// no client blocks (it cost a ticket per in-flight create).
async fn a_connection_reset_while_creates_wait_for_their_slot_costs_no_block(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let names = ["acme", "beta", "gamma"];
    for n in names {
        create(&store, n).await;
    }
    let gate = close_slots(&p);
    let runs: Vec<_> = names
        .iter()
        .map(|_| {
            let w2 = w.clone();
            tokio::spawn(async move { w2.run_next().await })
        })
        .collect();
    until_waiting(&p, names.len() as u32).await;
    lose_every_claim(&store, names.len()).await?;
    open_slots(&p, &gate);
    for r in runs {
        let _ = r.await?;
    }
    p.with(|s| assert!(!s.calls.iter().any(|c| c == "POST /instances"), "a stopped create left: {:?}", s.calls));
    drain(&w, 100).await;
    for n in names {
        let c = status(&store, n).await;
        assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
        let receipts = store.receipts_for_client(&c.id).await?;
        let vms: Vec<_> = receipts.iter().filter(|r| r.resource_kind == ResourceKind::Vm).collect();
        assert_eq!(vms.len(), 1, "sent again on the same receipt: {vms:?}");
        assert!(vms[0].not_sent_count() >= 1, "{:?}", vms[0]);
    }
    p.with(|s| {
        assert_eq!(s.calls.iter().filter(|c| *c == "POST /instances").count(), names.len(), "{:?}", s.calls);
        assert!(s.creates_per_label.values().all(|n| *n == 1), "{:?}", s.creates_per_label);
    });
    Ok(())
}

/// The same for a change: its PATCH waits for its slot while the run loses
/// its claim. It never left, so it is sent later on the same change receipt
/// and confirmed; it was recorded as sent, and reads waited for a change
/// nobody had asked for.
async fn a_claim_lost_while_a_change_waits_for_its_slot_sends_it_later(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "acme").await;
    let u = oduflow_model::update::SpecUpdate { plan: Some("vc2-2c-4gb".into()), ..Default::default() };
    store.client_update("acme", &u, now(), 3).await?;
    let gate = close_slots(&p);
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    until_waiting(&p, 1).await;
    lose_every_claim(&store, 1).await?;
    open_slots(&p, &gate);
    let _ = run.await?;
    let patches = |p: &MemoryProvider| p.with(|s| s.calls.iter().filter(|c| *c == "PATCH /instances/{id}").count());
    assert_eq!(patches(&p), 0, "the stopped PATCH left");
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    p.with(|s| assert_eq!(s.instances.values().next().map(|i| i.plan.as_str()), Some("vc2-2c-4gb")));
    assert_eq!(patches(&p), 1);
    let changes = store.changes_for_client(&c.id).await?;
    assert_eq!(changes.len(), 1, "sent again on the same change receipt: {changes:?}");
    assert!(changes[0].confirmed_at().is_some() && changes[0].not_sent_count() >= 1, "{changes:?}");
    Ok(())
}

/// A VM create's outcome is unknown and no listing finds it: the client
/// blocks `uncertain_create`, and the operator abandons the dispatch (its
/// label stays watched). The VM then shows up; the inventory records it as
/// an orphan naming the client. The next run is the kind's first create of
/// the new dispatch generation, so it reads the client's orphans, finds
/// this one matching the spec and decides `AdoptOrphan`, which claims a
/// receipt under the orphan's label: the abandoned receipt holds that
/// label (unique), the claim is refused `ReceiptExists`, and the run
/// fails. Every run fails the same way until `attempts_exhausted`: the
/// client never says `labelled_orphan` with the orphan as evidence, and a
/// reconcile only repeats the crash loop.
async fn an_abandoned_dispatchs_late_vm_blocks_labelled_orphan_not_a_crash_loop(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    p.with(|s| s.unknown_unapplied_creates = 1);
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::UncertainCreate), "{blocked:?}");
    let vm0 =
        store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    operator::abandon(&store, "acme", ResourceKind::Vm, "console shows nothing", actor("ops")).await?;
    // The abandoned create did land after all (Vultr's lag), before the
    // next run; an inventory pass records it as an orphan naming acme.
    p.with(|s| s.put_vm("vm-late", vm0.label.as_str()));
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 1, "{inv:?}");
    let outs = drain(&w, 50).await;
    let after = status(&store, "acme").await;
    let failed: Vec<_> = outs.iter().filter(|o| matches!(o, RunOutcome::Failed { .. })).collect();
    assert!(
        failed.is_empty(),
        "runs failed instead of deciding about the orphan: {failed:?}; client now {:?} {:?}",
        after.infra.blocked_reason,
        after.infra.blocked_detail
    );
    assert!(
        after.infra.status == ClientStatus::Ready || after.infra.blocked_reason == Some(BlockedReason::LabelledOrphan),
        "{after:?}"
    );
    p.with(|s| assert_eq!(s.instances.len(), 1, "a second VM was made: {:?}", s.instances));
    Ok(())
}

/// A backup is taken while the VM create waits for its rate slot: the
/// receipt is claimed, not yet marked (the mark now comes after the slot,
/// up to 180 s later). The discarded timeline then marked and sent it: the
/// VM lives under the receipt's label. The copy is restored where the
/// worker host has no mark of the lineage (a new host, or its state
/// directory lost), so no restore is detected and no inventory runs. The
/// run reads "claimed, never marked" as "not sent" and sends the create a
/// second time on the same label: two paid VMs. An unmarked receipt is
/// now looked for by its label once before it is sent again: the one VM
/// is adopted.
async fn a_receipt_restored_unmarked_is_looked_for_by_label_before_it_is_sent_again(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    let dg = c.infra.dispatch_generation(ResourceKind::Vm);
    let label = Label::new_dispatch(&c.id, ResourceKind::Vm);
    ReceiptLedger::new(store.clone())
        .receipt_claim(&NewReceipt {
            operation_key: OperationKey::new(&c.id, ResourceKind::Vm, dg),
            client_ref: c.id.clone(),
            resource_kind: ResourceKind::Vm,
            dispatch_generation: dg,
            label: label.clone(),
            region: c.infra.spec.region.clone(),
            spec_digest: "as the backup had it".into(),
            key_fingerprint: key("k1"),
            claimed_ms: now(),
        })
        .await?;
    // The discarded timeline's send, after the backup.
    p.with(|s| s.put_vm("vm-after-backup", label.as_str()));
    drain(&w, 50).await;
    p.with(|s| {
        let same: Vec<_> = s.instances.values().filter(|i| i.label == label.as_str()).map(|i| i.id.0.clone()).collect();
        assert_eq!(same.len(), 1, "a second VM under one receipt's label: {same:?}; creates {:?}", s.creates_per_label)
    });
    Ok(())
}

/// The restored copy says a client is deleted; the timeline it threw away
/// had brought the client back and made a VM under a label naming it. The
/// inventory records the VM as an orphan, and the client is no longer
/// reported deleted: its run blocks `labelled_orphan` naming the VM; once
/// the orphan is deleted on an attestation, it ends deleted again.
async fn a_restored_deleted_client_is_not_deleted_while_a_vm_labelled_for_it_lives(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "acme").await;
    store.client_delete("acme", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    p.with(|s| s.put_vm("vm-after-the-backup", Label::new_dispatch(&c.id, ResourceKind::Vm).as_str()));
    store.restore_declare("test: restored from a backup", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 1, "{inv:?}");
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::LabelledOrphan), "{blocked:?}");
    operator::orphan_delete(&store, p.as_ref(), "vm-after-the-backup", "the client left", actor("ops")).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(p.with(|s| s.instances.is_empty()));
    Ok(())
}

/// A VM create could not connect (recorded not sent, claimed with the old
/// key); the key is rotated before it is sent again. The resend goes out
/// with the new key on the same receipt, and the receipt records the key
/// its request went with (campaign invariant 6: a resource is created with
/// its receipt's key).
async fn a_create_first_sent_after_a_key_rotation_records_the_key_it_went_with(store: Store) -> Result<()> {
    let p1 = Arc::new(MemoryProvider::new(key("old")));
    let w1 = worker(&store, p1.clone());
    let c = create(&store, "acme").await;
    p1.with(|s| s.unreachable_creates = 1);
    w1.run_next().await?;
    let vm = |r: &Vec<ReceiptRow>| r.iter().find(|r| r.resource_kind == ResourceKind::Vm).cloned().unwrap();
    let claimed = vm(&store.receipts_for_client(&c.id).await?);
    assert!(matches!(claimed.effect(), Effect::NotSent { .. }) && claimed.key_fingerprint == key("old"), "{claimed:?}");
    let p2 = Arc::new(MemoryProvider::new(key("new")));
    operator::credentials_rotate(&store, p2.as_ref(), actor("ops")).await?.unwrap();
    drain(&worker(&store, p2.clone()), 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Ready);
    let sent = vm(&store.receipts_for_client(&c.id).await?);
    assert_eq!(sent.operation_key, claimed.operation_key, "sent on the same receipt");
    assert_eq!(sent.key_fingerprint, key("new"), "{sent:?}");
    Ok(())
}
