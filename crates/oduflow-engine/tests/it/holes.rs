//! Scenarios from the adversarial review (issue 12): each one reproduces a
//! schedule under which a promise used to break, on both stores.

use super::*;

on_both_stores_inner!(
    deleted_client_keeps_no_vm_after_flip_and_rollback,
    deleted_client_keeps_no_vm_when_delete_lands_mid_run,
);

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
