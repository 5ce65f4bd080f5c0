//! Requests stopped inside the client before they leave: a run whose request
//! waits before its guard (for its slot in the rate budget, or a read's
//! retry) while the run loses its claim or its client changes, and creates
//! that cannot connect (`NotSent`). The simulator sees only requests that
//! left: these hold a request at the clients' rate budget (`Cloud::slots`),
//! where it waits before its guard is asked, or close the simulator's
//! listening socket (`Cloud::unplug`), so that a create's own connection is
//! refused.

use super::*;
use oduflow_engine::operator;
use oduflow_model::rate::SlotUse;

oduflow_store::on_both_stores!(
    migrated crate::store_of =>
    a_run_that_loses_its_claim_while_a_read_waits_sends_nothing_more,
    a_delete_landing_while_a_create_waits_for_its_slot_records_it_not_sent,
    a_connection_reset_while_creates_wait_for_their_slot_costs_no_block,
    a_claim_lost_while_a_change_waits_for_its_slot_sends_it_later,
    a_create_that_never_connected_is_sent_again_on_its_receipt,
    a_restored_not_sent_receipt_is_never_sent_again_blindly,
    a_create_first_sent_after_a_key_rotation_records_the_key_it_went_with,
);

/// A run's read waits (the rate limiter, a retry's backoff, a paused
/// process) and meanwhile loses its claim: PostgreSQL terminates its claim
/// connection, or on SQLite the record moves on (`client create` flips it
/// back). Checked only before the call, the read would still leave after the
/// wait, and another worker, free to take the client, could have reported it
/// deleted by then (campaign seed 156635722: a GET and a DELETE reached the
/// provider after `deleted`). Each request is checked as it leaves.
async fn a_run_that_loses_its_claim_while_a_read_waits_sends_nothing_more(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    ready(&store, &w, "acme").await;
    store.client_delete("acme", "test", now(), 3).await?;
    // The attach showed the VM by id, so its DELETE goes first, in a run of
    // its own; the read that confirms it is the next run's.
    let deleting = cloud.calls().len();
    w.run_next().await?;
    assert!(cloud.calls()[deleting..].iter().any(|c| c.starts_with("DELETE")), "{:?}", cloud.calls());
    let before = cloud.calls().len();
    cloud.slots.hold(SlotUse::Read);
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    // Until the run's first read waits for its slot.
    cloud.slots.until_waiting(1).await;
    match store.backend() {
        Backend::Postgres => {
            let pids =
                oduflow_store::testing::pg_idle_in_transaction_pids(&store).await.map_err(anyhow::Error::from_boxed)?;
            assert_eq!(pids.len(), 1, "exactly the run's claim connection is idle in its transaction");
            // Waits until the backend is gone (pg_terminate_backend only signals).
            oduflow_store::testing::pg_terminate(&store, pids[0]).await.map_err(anyhow::Error::from_boxed)?;
        }
        Backend::Sqlite => drop(store.client_create(&ClientName::parse("acme")?, &spec(), "test", now(), 3).await?),
    }
    cloud.slots.open();
    assert_eq!(cloud.slots.given_up(), 0, "an ask of the budget timed out: the guard is not what stopped it");
    let out = run.await?;
    assert_eq!(cloud.calls().len(), before, "a request left after the run lost its claim ({out:?})");
    // Whoever holds the client next finishes the work.
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    let want = if store.backend() == Backend::Postgres { ClientStatus::Deleted } else { ClientStatus::Ready };
    assert_eq!(c.infra.status, want, "{c:?}");
    Ok(())
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
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    let c = create(&store, "acme").await;
    cloud.slots.hold(SlotUse::Change);
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    cloud.slots.until_waiting(1).await;
    let s2 = store.clone();
    let delete = tokio::spawn(async move { s2.client_delete("acme", "test", now(), 3).await });
    // Aim, not a condition: give the deletion time to commit (SQLite) or to
    // queue behind the run's row lock (PostgreSQL) before the send goes on.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    cloud.slots.open();
    assert_eq!(cloud.slots.given_up(), 0, "an ask of the budget timed out: the guard is not what stopped it");
    let _ = run.await?;
    delete.await??;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Deleted, "{after:?}");
    let live = cloud.live(SimKind::Instance);
    assert!(live.is_empty() && cloud.live(SimKind::Block).is_empty(), "live after deletion: {live:?}");
    if store.backend() == Backend::Sqlite {
        let vm = store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm);
        let vm = vm.expect("the create's receipt");
        let Effect::NotSent { reason: why, .. } = vm.effect() else { panic!("recorded as not sent: {vm:?}") };
        assert!(vm.sent_at().is_none(), "recorded as not sent: {vm:?}");
        // Stopped by the run's guard, not by its budget.
        assert!(why.ends_with("the client's record moved on while the run was in flight"), "{why}");
        assert_eq!(cloud.count("POST /instances"), 0, "{:?}", cloud.calls());
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
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    // As many as the client lets wait at the budget at once: one more
    // would wait at its turnstile, and its reads behind these creates.
    let names = &["acme", "beta", "gamma"][..oduflow_vultr::budget::RESERVATIONS_AHEAD_MAX];
    for n in names {
        create(&store, n).await;
    }
    cloud.slots.hold(SlotUse::Change);
    let runs: Vec<_> = names
        .iter()
        .map(|_| {
            let w2 = w.clone();
            tokio::spawn(async move { w2.run_next().await })
        })
        .collect();
    cloud.slots.until_waiting(names.len() as u32).await;
    lose_every_claim(&store, names.len()).await?;
    cloud.slots.open();
    assert_eq!(cloud.slots.given_up(), 0, "an ask of the budget timed out: the guard is not what stopped it");
    for r in runs {
        let _ = r.await?;
    }
    assert_eq!(cloud.count("POST /instances"), 0, "a stopped create left: {:?}", cloud.calls());
    drain(&w, 100).await;
    for n in names {
        let c = status(&store, n).await;
        assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
        let receipts = store.receipts_for_client(&c.id).await?;
        let vms: Vec<_> = receipts.iter().filter(|r| r.resource_kind == ResourceKind::Vm).collect();
        assert_eq!(vms.len(), 1, "sent again on the same receipt: {vms:?}");
        assert!(vms[0].not_sent_count() >= 1, "{:?}", vms[0]);
    }
    assert_eq!(cloud.count("POST /instances"), names.len(), "{:?}", cloud.calls());
    assert!(cloud.creates_per_label().values().all(|n| *n == 1), "{:?}", cloud.creates_per_label());
    Ok(())
}

/// The same for a change: its PATCH waits for its slot while the run loses
/// its claim. It never left, so it is sent later on the same change receipt
/// and confirmed; it was recorded as sent, and reads waited for a change
/// nobody had asked for.
async fn a_claim_lost_while_a_change_waits_for_its_slot_sends_it_later(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    let c = ready(&store, &w, "acme").await;
    let u = oduflow_model::update::SpecUpdate { plan: Some("vc2-2c-4gb".into()), ..Default::default() };
    store.client_update("acme", &u, "test", now(), 3).await?;
    cloud.slots.hold(SlotUse::Change);
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run_next().await });
    cloud.slots.until_waiting(1).await;
    lose_every_claim(&store, 1).await?;
    cloud.slots.open();
    assert_eq!(cloud.slots.given_up(), 0, "an ask of the budget timed out: the guard is not what stopped it");
    let _ = run.await?;
    assert_eq!(cloud.count("PATCH /instances/{id}"), 0, "the stopped PATCH left");
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(cloud.instances().await.first().map(|i| i.plan.clone()), Some("vc2-2c-4gb".into()));
    assert_eq!(cloud.count("PATCH /instances/{id}"), 1);
    let changes = store.changes_for_client(&c.id).await?;
    assert_eq!(changes.len(), 1, "sent again on the same change receipt: {changes:?}");
    assert!(changes[0].confirmed_at().is_some() && changes[0].not_sent_count() >= 1, "{changes:?}");
    Ok(())
}

async fn a_create_that_never_connected_is_sent_again_on_its_receipt(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    // Two runs whose create cannot connect (marked sent, then not sent).
    cloud.unplug(&p).await;
    for _ in 0..2 {
        w.run_next().await?;
    }
    cloud.plug().await;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Ready);
    let receipts = store.receipts_for_client(&c.id).await?;
    let vm = receipts.iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    assert_eq!(vm.dispatch_generation, 1, "sent again on the same receipt");
    assert!(vm.not_sent_count() >= 1 && vm.not_sent_at().is_none(), "{vm:?}");
    assert_eq!(receipts.iter().filter(|r| r.resource_kind == ResourceKind::Vm).count(), 1);
    assert_eq!(vm.not_sent_count(), 2, "{vm:?}");
    // The refused connections never reached the simulator.
    assert_eq!(cloud.count("POST /instances"), 1, "{:?}", cloud.calls());
    assert!(cloud.creates_per_label().values().all(|n| *n == 1));
    assert_eq!(cloud.live(SimKind::Instance).len(), 1);
    // Connections that never succeed end blocked, not in a loop.
    create(&store, "beta").await;
    cloud.unplug(&p).await;
    drain(&w, 100).await;
    cloud.plug().await;
    let b = status(&store, "beta").await;
    assert_eq!(b.infra.blocked_reason, Some(BlockedReason::ProviderUnavailable), "{b:?}");
    Ok(())
}

/// A backup is taken while a create is recorded "not sent" (Vultr
/// unreachable); the resend after it went out and made the VM; then the
/// backup is restored. The restored receipt still says "not sent", which no
/// longer proves anything: the inventory pass makes it an unknown outcome,
/// and the run adopts the VM by its label instead of creating a second one.
async fn a_restored_not_sent_receipt_is_never_sent_again_blindly(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    cloud.unplug(&p).await;
    w.run_next().await?;
    cloud.plug().await;
    let r = store.receipts_for_client(&c.id).await?.into_iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    assert!(matches!(r.effect(), Effect::NotSent { .. }) && r.sent_at().is_some(), "marked, then not sent: {r:?}");
    // The timeline the restore threw away: the resend made the VM.
    let made = cloud.put_vm(r.label.as_str()).await;
    store.restore_declare("test: restored from a backup", "test", now()).await?;
    operator::inventory(&store, p.as_ref(), now()).await?;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(after.infra.vm_id, Some(made));
    assert_eq!(cloud.count("POST /instances"), 0, "the create was sent again: {:?}", cloud.calls());
    Ok(())
}

/// A VM create could not connect (recorded not sent, claimed with the old
/// key); the key is rotated before it is sent again. The resend goes out
/// with the new key on the same receipt, and the receipt records the key
/// its request went with (campaign invariant 6: a resource is created with
/// its receipt's key).
async fn a_create_first_sent_after_a_key_rotation_records_the_key_it_went_with(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p1 = cloud.client("old");
    let w1 = worker(&store, p1.clone());
    let c = create(&store, "acme").await;
    cloud.unplug(&p1).await;
    w1.run_next().await?;
    cloud.plug().await;
    let vm = |r: &Vec<ReceiptRow>| r.iter().find(|r| r.resource_kind == ResourceKind::Vm).cloned().unwrap();
    let claimed = vm(&store.receipts_for_client(&c.id).await?);
    let not_sent = matches!(claimed.effect(), Effect::NotSent { .. }) && claimed.sent_at().is_some();
    assert!(not_sent && claimed.key_fingerprint == key("old"), "marked, then not sent: {claimed:?}");
    let p2 = cloud.client("new");
    operator::credentials_rotate(&store, p2.as_ref(), actor("ops")).await?.unwrap();
    drain(&worker(&store, p2.clone()), 50).await;
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Ready);
    let sent = vm(&store.receipts_for_client(&c.id).await?);
    assert_eq!(sent.operation_key, claimed.operation_key, "sent on the same receipt");
    assert_eq!(sent.key_fingerprint, key("new"), "{sent:?}");
    Ok(())
}
