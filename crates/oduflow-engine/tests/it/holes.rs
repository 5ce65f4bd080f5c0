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
    vm_never_ready_blocks_and_is_deleted_once_it_is_active,
    adopted_renamed_vm_is_verified_without_its_label,
    adopt_refuses_another_dispatchs_labelled_resource,
    rotation_bumps_generation_and_resolves_credential_changed,
    an_orphan_names_its_client_and_is_adopted_into_it,
    a_deleted_clients_orphan_is_deleted_on_an_attestation,
    a_delete_accepted_but_never_carried_out_blocks,
    a_vm_deleted_just_before_a_flip_back_is_not_missing,
    a_restore_that_lost_the_receipts_adopts_the_labelled_resources,
    a_labelled_orphan_that_does_not_match_blocks_the_first_create,
    a_client_is_not_deleted_while_a_volume_labelled_for_it_lives,
    a_client_made_after_the_backup_is_recovered_with_its_resources,
    an_abandoned_dispatchs_late_vm_blocks_labelled_orphan_not_a_crash_loop,
    a_receipt_restored_unmarked_is_looked_for_by_label_before_it_is_sent_again,
    a_restored_deleted_client_is_not_deleted_while_a_vm_labelled_for_it_lives,
);

/// ready -> deleted -> present again: the re-provisioning run sends the VM
/// create at a new dispatch generation and then rolls back; the client is
/// deleted before that job runs again. The VM the rolled-back run created
/// must be deleted too, and the client must not read `deleted` before it is.
async fn deleted_client_keeps_no_vm_after_flip_and_rollback(store: Store) -> Result<()> {
    failpoints_required();
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    create(&store, "acme").await;
    drain(&w, 50).await;
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    store.client_create(&ClientName::parse("acme")?, &spec(), "test", now(), 3).await?;
    let scenario = fail::FailScenario::setup();
    fail::cfg("main-tx-commit", "return").unwrap();
    let out = w.run_next().await?;
    fail::cfg("main-tx-commit", "off").unwrap();
    assert!(matches!(out, RunOutcome::Failed { .. }), "{out:?}");
    assert_eq!(cloud.live(SimKind::Instance).len(), 1, "the rolled-back run created the new VM");
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Deleted, "{c:?}");
    assert!(
        cloud.live(SimKind::Instance).is_empty() && cloud.live(SimKind::Block).is_empty(),
        "live after deletion: {:?}",
        cloud.live(SimKind::Instance)
    );
    scenario.teardown();
    Ok(())
}

/// The same hole without a crash: `client delete` lands while the
/// re-provisioning run is between its create and its commit (on SQLite the
/// run's writes are then dropped as stale; on PostgreSQL the delete waits
/// for the run's row lock).
async fn deleted_client_keeps_no_vm_when_delete_lands_mid_run(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    create(&store, "acme").await;
    drain(&w, 50).await;
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    store.client_create(&ClientName::parse("acme")?, &spec(), "test", now(), 3).await?;
    let hold = Arc::new(tokio::sync::Notify::new());
    cloud.script(&[Op::InstanceCreate], Scripted::HoldAfter(hold.clone()), Some(1));
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    // Wait until the run's create is applied (its answer is held back).
    let t = std::time::Instant::now();
    while cloud.live(SimKind::Instance).is_empty() {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "the run never sent its create");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let s2 = store.clone();
    let delete = tokio::spawn(async move { s2.client_delete("acme", "test", now(), 3).await });
    // Aim, not a condition: give the deletion time to commit (SQLite) or to
    // queue behind the run's row lock (PostgreSQL) before the run goes on.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    hold.notify_one();
    run.await??;
    delete.await??;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Deleted, "{c:?}");
    assert!(
        cloud.live(SimKind::Instance).is_empty() && cloud.live(SimKind::Block).is_empty(),
        "live after deletion: {:?}",
        cloud.live(SimKind::Instance)
    );
    Ok(())
}

/// The same hole as seen by the inventory: with the fix planted out, the
/// deleted client's VM stays live, and `reconcile --all` must report it.
async fn inventory_reports_a_deleted_clients_live_vm(store: Store) -> Result<()> {
    failpoints_required();
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    // The bug is this worker's alone: the inventory below, and every other
    // test in the process, run the real protocol.
    let w = worker_with(&store, p.clone(), |c| {
        c.planted = oduflow_engine::PlantedBug::of(oduflow_engine::Bug::SkipOpenReceipts)
    });
    ready(&store, &w, "acme").await;
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    store.client_create(&ClientName::parse("acme")?, &spec(), "test", now(), 3).await?;
    let scenario = fail::FailScenario::setup();
    fail::cfg("main-tx-commit", "return").unwrap();
    w.run_next().await?;
    fail::cfg("main-tx-commit", "off").unwrap();
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    let live: Vec<String> = cloud.live(SimKind::Instance).into_iter().map(|r| r.id).collect();
    assert_eq!(live.len(), 1, "the planted bug leaves the VM live");
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert!(inv.orphans.iter().any(|o| o.id == live[0] && o.client.as_deref() == Some("acme")), "{inv:?}");
    scenario.teardown();
    Ok(())
}

/// A run outlives any timed lease (read retries, Retry-After waits, a
/// paused process): no other worker may run the same client meanwhile.
async fn a_run_longer_than_its_lease_is_never_overlapped(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let a = worker_with(&store, p.clone(), |_| {});
    // Worker b lives ten minutes ahead: any timed lease worker a could
    // have taken has long expired by b's clock, with no sleeping.
    let b_clock = Arc::new(ManualClock::at(now() + 600_000));
    let b = worker_on(&store, p.clone(), |_| {}, b_clock);
    let c = create(&store, "acme").await;
    let hold = Arc::new(tokio::sync::Notify::new());
    cloud.script(&[Op::InstanceCreate], Scripted::HoldAfter(hold.clone()), Some(1));
    let a2 = a.clone();
    let run = tokio::spawn(async move { a2.run_next().await });
    let t = std::time::Instant::now();
    while cloud.live(SimKind::Instance).is_empty() {
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
    assert_eq!(cloud.count("POST /instances"), 1);
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
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
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
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let a = Arc::new(identity::MemoryAdapter::default());
    let w = worker(&store, p.clone()).with_adapters(vec![a.clone()]);
    let c = ready(&store, &w, "acme").await;
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    a.fail_check.store(true, std::sync::atomic::Ordering::SeqCst);
    store.client_create(&ClientName::parse("acme")?, &spec(), "test", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.blocked_reason, Some(BlockedReason::AdapterFailed));
    let st = store.adapter_states(&c.id).await?;
    assert_eq!(st[0].state, oduflow_model::identity::AdapterState::Ensuring, "{st:?}");
    // The identity was ensured (the check only failed): deleting must remove it.
    a.fail_check.store(false, std::sync::atomic::Ordering::SeqCst);
    let removes = a.removes.load(std::sync::atomic::Ordering::SeqCst);
    store.client_delete("acme", "test", now(), 3).await?;
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
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let a = Arc::new(identity::MemoryAdapter::default());
    let with = worker(&store, p.clone()).with_adapters(vec![a.clone()]);
    ready(&store, &with, "acme").await;
    let without = worker(&store, p.clone());
    store.client_delete("acme", "test", now(), 3).await?;
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
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "acme").await;
    cloud.refuse(&[Op::InstanceDelete, Op::BlockDelete], 500, "server is locked", None);
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 100).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::DeleteRefused), "{after:?}");
    assert!(after.infra.blocked_detail.as_deref().unwrap().contains("locked"));
    let vm = store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    assert_eq!(vm.observations(), 5, "the receipt's count agrees with the evidence");
    assert!(store.queue_status(now()).await?.is_settled());
    cloud.unscript();
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 100).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(cloud.live(SimKind::Instance).is_empty() && cloud.live(SimKind::Block).is_empty());
    Ok(())
}

async fn reads_failing_for_ever_block_then_reconcile_recovers(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    create(&store, "acme").await;
    cloud.revoke("k1");
    drain(&w, 100).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::ProviderUnavailable), "{after:?}");
    assert!(after.infra.blocked_detail.as_deref().unwrap().contains("401"));
    assert!(store.queue_status(now()).await?.is_settled());
    cloud.accept("k1");
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 100).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Ready);
    assert_eq!(cloud.count("POST /instances"), 1);
    Ok(())
}

async fn vm_never_ready_blocks_and_is_deleted_once_it_is_active(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    cloud.sim.control().set_pending_ms(3_600_000);
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
    // The suggested `client delete`: Vultr refuses to destroy a server
    // still pending ("not currently active"), so the deletion blocks,
    // saying so, until the install ends; then a reconcile deletes it.
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 100).await;
    let refused = status(&store, "acme").await;
    assert_eq!(refused.infra.blocked_reason, Some(BlockedReason::DeleteRefused), "{refused:?}");
    assert!(refused.infra.blocked_detail.as_deref().unwrap().contains("not currently active"), "{refused:?}");
    assert_eq!(cloud.live(SimKind::Instance).len(), 1);
    cloud.sim.control().set_pending_ms(0);
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 100).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(cloud.live(SimKind::Instance).is_empty() && cloud.live(SimKind::Block).is_empty());
    Ok(())
}

/// The documented adopt case: a VM found in the console under another label.
/// The run must accept what adopt verified, not block config_mismatch.
async fn adopted_renamed_vm_is_verified_without_its_label(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    // The VM POST is answered 500, not applied: its outcome is unknown, and
    // the VM to adopt is one made by hand under another label.
    cloud.refuse(&[Op::InstanceCreate], 500, "Internal server error.", Some(1));
    w.run_next().await?;
    assert!(store.receipts_for_client(&c.id).await?[0].id().is_none());
    let id = cloud.put_vm("renamed-by-hand").await.0;
    operator::adopt(&store, p.as_ref(), "acme", ResourceKind::Vm, &id, actor("ops")).await?;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id.as_ref().map(|v| v.0.clone()), Some(id.clone()));
    // A rotation proves ownership of it the way runs accept it: by its id,
    // not by a label it never carried.
    let p2 = cloud.client("k2");
    let rebound = operator::credentials_rotate(&store, p2.as_ref(), actor("ops")).await?;
    assert_eq!(rebound.map_err(|u| format!("{u:?}")), Ok(vec!["acme".to_owned()]));
    Ok(())
}

/// A resource carrying another dispatch's label is that dispatch's: adopting
/// it into another client would give it two owners.
async fn adopt_refuses_another_dispatchs_labelled_resource(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let a = create(&store, "acme").await;
    cloud.script(&[Op::InstanceCreate, Op::BlockCreate], Scripted::LoseAnswer, Some(1));
    w.run_next().await?; // acme's VM applied, answer lost: receipt without id
    let label = store.receipts_for_client(&a.id).await?[0].label.clone();
    let id = cloud.live(SimKind::Instance).into_iter().find(|i| i.label == label.as_str()).unwrap().id;
    create(&store, "beta").await;
    let r = operator::adopt(&store, p.as_ref(), "beta", ResourceKind::Vm, &id, actor("ops")).await;
    assert!(matches!(r, Err(operator::OperatorError::Refused(ref m)) if m.contains("label")), "{r:?}");
    Ok(())
}

/// Rotation rebinds by moving the record to a new generation, so a run in
/// flight cannot write the old binding back, and it resolves
/// credential_changed as its suggestion says.
async fn rotation_bumps_generation_and_resolves_credential_changed(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let w1 = worker(&store, cloud.client("old"));
    let before = ready(&store, &w1, "acme").await;
    let p2 = cloud.client("new");
    let w2 = worker(&store, p2.clone());
    store.client_delete("acme", "test", now(), 3).await?;
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

/// A VM made through the provider as a run would have made it, with a label
/// naming `client`'s vm, but recorded nowhere (the receipt that knew it was
/// lost with a restore).
async fn leak_vm(cloud: &Cloud, client: &ClientId) -> String {
    cloud.put_vm(Label::new_dispatch(client, ResourceKind::Vm).as_str()).await.0
}

/// Hole 8: after a restore, a client pending in the backup had its VM made
/// already; the receipt is gone. The orphan's label names the client and the
/// kind, the inventory says so and records it, and `orphan adopt` records it
/// on that client, whose run then uses it instead of creating another.
async fn an_orphan_names_its_client_and_is_adopted_into_it(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    let vm = leak_vm(&cloud, &c.id).await;
    // An old-style label names no client: listed, but not adoptable by name.
    let old_style = cloud.put_vm(&format!("{LABEL_PREFIX}0b1e2c3d-0000-4000-8000-000000000000")).await;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    let o = inv.orphans.iter().find(|o| o.id == vm).expect("the leaked VM is an orphan");
    assert_eq!(o.client.as_deref(), Some("acme"), "{o:?}");
    assert!(o.note.contains("acme's vm"), "{o:?}");
    assert!(o.resolve.as_deref().is_some_and(|r| r.contains(&format!("oduflow orphan adopt {vm}"))), "{o:?}");
    let listed = store.orphans_list(false).await?;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed.iter().find(|o| o.resource_id == vm).and_then(|o| o.client_ref.clone()), Some(c.id.to_string()));
    let err = operator::orphan_adopt(&store, p.as_ref(), old_style.as_str(), actor("ops")).await.unwrap_err();
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
    assert_eq!(cloud.count("POST /instances"), 0, "a second VM was made");
    Ok(())
}

/// Hole 8: a deleted client's VM, recorded nowhere, is an orphan that names
/// it; adopting it is refused (the client is deleted) and `orphan delete`
/// deletes it on an attestation, which the audit trail keeps.
async fn a_deleted_clients_orphan_is_deleted_on_an_attestation(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "gone").await;
    store.client_delete("gone", "test", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "gone").await.infra.status, ClientStatus::Deleted);
    let vm = leak_vm(&cloud, &c.id).await;
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
    assert!(cloud.live(SimKind::Instance).iter().any(|i| i.id == vm), "a refused delete deleted");
    let d = operator::orphan_delete(
        &store,
        p.as_ref(),
        &vm,
        "client left in November",
        operator::Actor { by: "ops", now_ms: now(), attempts_max: 0 },
    )
    .await?;
    assert!(d.confirmed, "{d:?}");
    assert!(!cloud.live(SimKind::Instance).iter().any(|i| i.id == vm));
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
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    ready(&store, &w, "acme").await;
    cloud.script(&[Op::InstanceDelete, Op::BlockDelete], Scripted::AnswerWithoutApplying, None);
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.blocked_reason, Some(BlockedReason::UncertainDelete), "{c:?}");
    assert!(c.infra.blocked_detail.as_deref().is_some_and(|d| d.contains("still shows")), "{c:?}");
    let deletes = cloud.calls().iter().filter(|c| c.starts_with("DELETE")).count();
    // The first, then one per counted observation (the limit is 5).
    assert_eq!(deletes, 1 + 5, "{deletes} DELETEs for a limit of 5 observations");
    cloud.unscript();
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
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let first = ready(&store, &w, "acme").await;
    store.client_delete("acme", "test", now(), 3).await?;
    let t = std::time::Instant::now();
    while cloud.count("DELETE /instances/{id}") == 0 {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "no DELETE was sent");
        w.run_next().await?;
    }
    store.client_create(&ClientName::parse("acme")?, &spec(), "test", now(), 3).await?;
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

/// A restore (or a lost WAL) threw away the receipts of a client's first
/// provisioning; its VM and volume live on under labels naming it. The
/// inventory pass records them as orphans; the runs then adopt them instead
/// of sending a second create of each, the client ends ready on them, and
/// its deletion deletes them.
async fn a_restore_that_lost_the_receipts_adopts_the_labelled_resources(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    let vm_lost = cloud.put_vm(Label::new_dispatch(&c.id, ResourceKind::Vm).as_str()).await;
    let vol_lost = cloud.put_block(Label::new_dispatch(&c.id, ResourceKind::Volume).as_str()).await;
    store.restore_declare("test: restored from a backup", "test", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 2, "{inv:?}");
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id, Some(vm_lost));
    assert_eq!(after.infra.volume_id, Some(vol_lost));
    assert_eq!(
        cloud.count("POST /instances") + cloud.count("POST /blocks"),
        0,
        "a create was sent: {:?}",
        cloud.calls()
    );
    assert!(store.orphans_list(false).await?.is_empty(), "the adopted orphans are resolved");
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(
        cloud.live(SimKind::Instance).is_empty() && cloud.live(SimKind::Block).is_empty(),
        "{:?} {:?}",
        cloud.live(SimKind::Instance),
        cloud.live(SimKind::Block)
    );
    Ok(())
}

/// The labelled VM a lost timeline made is in another region than the
/// restored spec says: it cannot be adopted as it is, and no second VM is
/// made beside it. The client blocks `labelled_orphan` naming it; deleting
/// it on an attestation and reconciling provisions the client anew.
async fn a_labelled_orphan_that_does_not_match_blocks_the_first_create(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    let elsewhere = cloud.put_vm_in(Label::new_dispatch(&c.id, ResourceKind::Vm).as_str(), "ams").await;
    store.restore_declare("test: restored from a backup", "test", now()).await?;
    operator::inventory(&store, p.as_ref(), now()).await?;
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::LabelledOrphan), "{blocked:?}");
    assert!(blocked.infra.blocked_detail.as_deref().is_some_and(|d| d.contains(elsewhere.as_str())), "{blocked:?}");
    assert_eq!(
        cloud.count("POST /instances") + cloud.count("POST /blocks"),
        0,
        "a create was sent: {:?}",
        cloud.calls()
    );
    let why = "wrong region, made before the restore";
    operator::orphan_delete(&store, p.as_ref(), elsewhere.as_str(), why, actor("ops")).await?;
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_ne!(after.infra.vm_id, Some(elsewhere));
    Ok(())
}

/// The restored copy knows the client's VM and volume; the timeline it
/// threw away had made a second volume under a label naming the client.
/// Deleting the client deletes what it records, and then it is not
/// reported deleted while that volume lives: it blocks `labelled_orphan`
/// naming it, and once the orphan is deleted a reconcile ends it deleted.
async fn a_client_is_not_deleted_while_a_volume_labelled_for_it_lives(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "acme").await;
    let extra = cloud.put_block(Label::new_dispatch(&c.id, ResourceKind::Volume).as_str()).await;
    store.restore_declare("test: restored from a backup", "test", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 1, "{inv:?}");
    drain(&w, 50).await;
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::LabelledOrphan), "{blocked:?}");
    assert!(blocked.infra.blocked_detail.as_deref().is_some_and(|d| d.contains(extra.as_str())), "{blocked:?}");
    assert!(cloud.live(SimKind::Block).iter().any(|b| b.id == extra.as_str()));
    operator::orphan_delete(&store, p.as_ref(), extra.as_str(), "left by the lost timeline", actor("ops")).await?;
    operator::reconcile(&store, p.as_ref(), "acme", false, actor("ops")).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(
        cloud.live(SimKind::Instance).is_empty() && cloud.live(SimKind::Block).is_empty(),
        "{:?} {:?}",
        cloud.live(SimKind::Instance),
        cloud.live(SimKind::Block)
    );
    Ok(())
}

/// A client created after the backup the database was restored from is
/// unknown to the restored copy; its VM and volume live on under labels
/// naming its id. The inventory names that id and the command that brings
/// the client back; created again under that id, its first provisioning
/// adopts both (no create is sent), and it ends ready on them.
async fn a_client_made_after_the_backup_is_recovered_with_its_resources(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let lost = ClientId::new_v7();
    let vm_of_lost = cloud.put_vm(Label::new_dispatch(&lost, ResourceKind::Vm).as_str()).await;
    let vol_of_lost = cloud.put_block(Label::new_dispatch(&lost, ResourceKind::Volume).as_str()).await;
    store.restore_declare("test: restored from a backup", "test", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 2, "{inv:?}");
    let recover = format!("--recover {lost}");
    assert!(inv.orphans.iter().all(|o| o.note.contains(&recover)), "{inv:?}");
    let name = ClientName::parse("late")?;
    let c = store.client_create_as(&name, &spec(), Some(&lost), "test", now(), 3).await?;
    assert_eq!(c.id, lost);
    // Not twice, nor under a name or an id already taken.
    assert!(store.client_create_as(&name, &spec(), Some(&ClientId::new_v7()), "test", now(), 3).await.is_err());
    assert!(
        store.client_create_as(&ClientName::parse("other")?, &spec(), Some(&lost), "test", now(), 3).await.is_err()
    );
    drain(&w, 50).await;
    let after = status(&store, "late").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id, Some(vm_of_lost));
    assert_eq!(after.infra.volume_id, Some(vol_of_lost));
    assert_eq!(
        cloud.count("POST /instances") + cloud.count("POST /blocks"),
        0,
        "a create was sent: {:?}",
        cloud.calls()
    );
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
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    cloud.refuse(&[Op::InstanceCreate, Op::BlockCreate], 500, "Internal server error.", Some(1));
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::UncertainCreate), "{blocked:?}");
    let vm0 =
        store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    operator::abandon(&store, "acme", ResourceKind::Vm, "console shows nothing", actor("ops")).await?;
    // The abandoned create did land after all (Vultr's lag), before the
    // next run; an inventory pass records it as an orphan naming acme.
    cloud.put_vm(vm0.label.as_str()).await;
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
    assert_eq!(cloud.live(SimKind::Instance).len(), 1, "a second VM was made: {:?}", cloud.live(SimKind::Instance));
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
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
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
    cloud.put_vm(label.as_str()).await;
    drain(&w, 50).await;
    let same: Vec<_> = cloud.live(SimKind::Instance).into_iter().filter(|i| i.label == label.as_str()).collect();
    assert_eq!(
        same.len(),
        1,
        "a second VM under one receipt's label: {same:?}; creates {:?}",
        cloud.creates_per_label()
    );
    Ok(())
}

/// The restored copy says a client is deleted; the timeline it threw away
/// had brought the client back and made a VM under a label naming it. The
/// inventory records the VM as an orphan, and the client is no longer
/// reported deleted: its run blocks `labelled_orphan` naming the VM; once
/// the orphan is deleted on an attestation, it ends deleted again.
async fn a_restored_deleted_client_is_not_deleted_while_a_vm_labelled_for_it_lives(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = ready(&store, &w, "acme").await;
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    let after_backup = cloud.put_vm(Label::new_dispatch(&c.id, ResourceKind::Vm).as_str()).await;
    store.restore_declare("test: restored from a backup", "test", now()).await?;
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 1, "{inv:?}");
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::LabelledOrphan), "{blocked:?}");
    operator::orphan_delete(&store, p.as_ref(), after_backup.as_str(), "the client left", actor("ops")).await?;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(cloud.live(SimKind::Instance).is_empty());
    Ok(())
}
