//! Engine integration tests: the queue and the dispatch protocol against the
//! Vultr simulator in process (`oduflow_vultr::testing::Cloud`), each on
//! SQLite and on PostgreSQL.

use anyhow::Result;
use oduflow_engine::*;
use oduflow_model::*;
use oduflow_sim::{Op, ResourceKind as SimKind, Scripted};
use oduflow_store::*;
use oduflow_vultr::VultrClient;
use oduflow_vultr::testing::Cloud;
use std::sync::Arc;

/// Runs one async test body on a fresh SQLite file and on a fresh PostgreSQL
/// database.
/// The store every test body of this binary takes (see
/// `oduflow_store::on_both_stores!`).
async fn store_of(db: &oduflow_store::testing::TestDb) -> Store {
    open(&db.url).await
}

oduflow_store::on_both_stores!(
    migrated super::store_of =>
    provisions_then_deletes,
    receipt_survives_error_rollback,
    receipt_survives_panic_rollback,
    stale_generation_is_noop,
    identity_key_deduplicates,
    pause_stops_claiming,
    lost_response_is_adopted_never_resent,
    rejection_blocks_without_resend,
    a_rejected_create_is_corrected_by_update_and_a_new_dispatch,
    receipts_cannot_be_deleted_or_rewritten,
    key_change_blocks_before_any_request,
    failures_back_off_then_block,
    flip_present_absent_present_converges,
    a_worker_whose_every_step_fails_stops_at_the_outage_limit,
);

async fn open(url: &str) -> Store {
    let store = Store::connect(url, true).await.unwrap();
    store.migrate().await.unwrap();
    store
}

fn key(s: &str) -> KeyFingerprint {
    KeyFingerprint::of_key(&secrecy::SecretString::from(s.to_owned()))
}

fn worker(store: &Store, provider: Arc<VultrClient>) -> Worker<VultrClient> {
    worker_with(store, provider, |_| {})
}

/// A test worker with its settings adjusted by `f`.
fn worker_with(store: &Store, provider: Arc<VultrClient>, f: impl FnOnce(&mut EngineConfig)) -> Worker<VultrClient> {
    Worker::new(store.clone(), provider, test_config(f), Arc::new(SystemClock))
}

/// [`worker_with`], reading the time from a clock the test moves.
fn worker_on(
    store: &Store,
    provider: Arc<VultrClient>,
    f: impl FnOnce(&mut EngineConfig),
    clock: Arc<ManualClock>,
) -> Worker<VultrClient> {
    Worker::new(store.clone(), provider, test_config(f), clock)
}

fn test_config(f: impl FnOnce(&mut EngineConfig)) -> EngineConfig {
    let mut cfg = EngineConfig {
        worker_id: "test".into(),
        poll_interval_ms: 0,
        retry_base_ms: 0,
        observations_max: 5,
        attempts_max: 3,
        ..EngineConfig::default()
    };
    f(&mut cfg);
    cfg
}

fn spec() -> ClientSpec {
    ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap()
}

async fn create(store: &Store, name: &str) -> ClientRow {
    store.client_create(&ClientName::parse(name).unwrap(), &spec(), "test", now(), 3).await.unwrap()
}

/// An operator action taken now by `by` (jobs it queues get 3 attempts).
fn actor(by: &str) -> oduflow_engine::operator::Actor<'_> {
    oduflow_engine::operator::Actor { by, now_ms: now(), attempts_max: 3 }
}

fn now() -> i64 {
    SystemClock.now_ms()
}

/// Runs jobs until nothing is runnable; at most `n` runs.
async fn drain(w: &Worker<VultrClient>, n: usize) -> Vec<RunOutcome> {
    let mut out = vec![];
    for _ in 0..n {
        match w.run_next().await.unwrap() {
            RunOutcome::Idle => break,
            o => out.push(o),
        }
    }
    out
}

/// Creates the client and runs it to ready.
async fn ready(store: &Store, w: &Worker<VultrClient>, name: &str) -> ClientRow {
    create(store, name).await;
    drain(w, 50).await;
    let c = status(store, name).await;
    assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
    c
}

async fn status(store: &Store, name: &str) -> ClientRow {
    store.client_get(name).await.unwrap().unwrap()
}

fn failpoints_required() {
    if !cfg!(feature = "failpoints") {
        panic!("this test needs fail points: run the suite with --all-features (the README's test command does)");
    }
}

async fn provisions_then_deletes(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    create(&store, "acme").await;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
    assert!(c.infra.vm_id.is_some() && c.infra.volume_id.is_some());
    let vm = c.infra.vm_id.clone().unwrap();
    assert_eq!(cloud.live(SimKind::Instance).len(), 1);
    let blocks = cloud.blocks().await;
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].attached_to_instance.as_ref(), Some(&vm));
    assert!(cloud.creates_per_label().values().all(|n| *n == 1));
    assert_eq!(c.infra.key_fingerprint, Some(key("k1")));

    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w, 50).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Deleted, "{c:?}");
    assert!(cloud.live(SimKind::Instance).is_empty() && cloud.live(SimKind::Block).is_empty());
    // Deletion is confirmed by a GET after the DELETE.
    let calls = cloud.calls();
    let last_delete = calls.iter().rposition(|c| c == "DELETE /instances/{id}").unwrap();
    assert!(calls[last_delete..].iter().any(|c| c == "GET /instances/{id}"));
    let receipts = store.receipts_for_client(&c.id).await?;
    assert_eq!(receipts.len(), 3, "vm, volume and attach receipts all kept");
    assert!(receipts.iter().all(|r| r.id().is_some()));
    Ok(())
}

/// Fails the first job run after its writes were applied in the main
/// transaction, then checks what survived.
async fn rollback_case(store: Store, action: &str) -> Result<()> {
    failpoints_required();
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    let c = create(&store, "acme").await;
    let scenario = fail::FailScenario::setup();
    fail::cfg("main-tx-commit", action).unwrap();
    let out = w.run_next().await?;
    fail::cfg("main-tx-commit", "off").unwrap();
    assert!(matches!(out, RunOutcome::Failed { .. }), "{out:?}");

    // The receipt and its id were committed on their own connection...
    let receipts = store.receipts_for_client(&c.id).await?;
    assert_eq!(receipts.len(), 1);
    let vm_id = receipts[0].id().map(str::to_string).expect("id recorded on the receipt");
    assert_eq!(receipts[0].resource_kind, ResourceKind::Vm);
    // ...while the main transaction's writes are gone.
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.vm_id, None);
    assert_eq!(after.infra.status, ClientStatus::Pending);
    assert_eq!(after.infra.key_fingerprint, None);
    let events = store.events_for_client(&c.id).await?;
    assert!(!events.iter().any(|e| e.kind == "dispatch_accepted"), "main-transaction event survived");
    assert!(events.iter().any(|e| e.kind == "resource_id_recorded"));
    assert!(events.iter().any(|e| e.kind == "request_sent"));
    let jobs = store.jobs_for_client(&c.id).await?;
    assert_eq!(jobs[0].state, JobState::Queued);
    assert_eq!(jobs[0].attempts, 1);

    // The next run finds the VM by its recorded id and never creates it again.
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready);
    assert_eq!(after.infra.vm_id.as_ref().map(|v| v.0.clone()), Some(vm_id));
    assert_eq!(cloud.count("POST /instances"), 1);
    assert_eq!(cloud.live(SimKind::Instance).len(), 1);
    scenario.teardown();
    Ok(())
}

async fn receipt_survives_error_rollback(store: Store) -> Result<()> {
    rollback_case(store, "return").await
}

async fn receipt_survives_panic_rollback(store: Store) -> Result<()> {
    rollback_case(store, "panic").await
}

async fn stale_generation_is_noop(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    let c = create(&store, "acme").await;
    // The target changes before the provisioning job ever runs.
    store.client_delete("acme", "test", now(), 3).await?;
    let out = drain(&w, 50).await;
    assert!(matches!(&out[0], RunOutcome::Ran { kind: JobKind::Provision, next: JobNext::Stale, .. }), "{out:?}");
    let jobs = store.jobs_for_client(&c.id).await?;
    assert_eq!(jobs[0].state, JobState::Stale);
    assert_eq!(jobs[1].state, JobState::Done);
    assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
    assert!(cloud.calls().is_empty(), "a stale job sent {:?}", cloud.calls());
    Ok(())
}

async fn identity_key_deduplicates(store: Store) -> Result<()> {
    let c = create(&store, "acme").await;
    let mut job = NewJob::for_client(&c.id, JobKind::Noop, 1, now(), 3);
    job.identity_key = Some("refresh-acme".into());
    let a = store.job_enqueue(&job).await?;
    let b = store.job_enqueue(&job).await?;
    assert!(matches!(a, Enqueued::New(_)));
    assert_eq!(b, Enqueued::Duplicate(a.id()));
    // Once the first is done, the key is free again: it deduplicates pending
    // jobs only.
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    drain(&w, 50).await;
    assert_eq!(store.job_get(a.id()).await?.unwrap().state, JobState::Done);
    assert!(matches!(store.job_enqueue(&job).await?, Enqueued::New(_)));
    Ok(())
}

async fn pause_stops_claiming(store: Store) -> Result<()> {
    let c = create(&store, "acme").await;
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    store.queue_set_paused(true, "test", now()).await?;
    assert_eq!(w.run_next().await?, RunOutcome::Idle);
    let q = store.queue_status(now()).await?;
    assert!(q.paused && q.runnable == 1);
    store.queue_set_paused(false, "test", now()).await?;
    assert!(matches!(w.run_next().await?, RunOutcome::Ran { .. }));
    assert_eq!(store.jobs_for_client(&c.id).await?[0].attempts, 0);
    Ok(())
}

async fn lost_response_is_adopted_never_resent(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    // The VM's and the volume's.
    // The VM's, the volume's and the attach's.
    cloud.script(&[Op::InstanceCreate, Op::BlockCreate, Op::BlockAttach], Scripted::LoseAnswer, Some(3));
    let w = worker(&store, cloud.client("k1"));
    let c = create(&store, "acme").await;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    assert_eq!(cloud.count("POST /instances"), 1);
    assert_eq!(cloud.count("POST /blocks"), 1);
    assert_eq!(cloud.count("POST /blocks/{id}/attach"), 1);
    assert!(cloud.creates_per_label().values().all(|n| *n == 1));
    let receipts = store.receipts_for_client(&c.id).await?;
    assert!(
        receipts
            .iter()
            .filter(|r| r.resource_kind != ResourceKind::Attach)
            .all(|r| r.id_source() == Some(IdSource::AdoptedByLabel))
    );
    // The attach is confirmed by the read that showed the volume attached,
    // and counted as such, not as an unknown outcome.
    let attach = receipts.iter().find(|r| r.resource_kind == ResourceKind::Attach).unwrap();
    assert_eq!(attach.id_source(), Some(IdSource::ConfirmedByRead), "{attach:?}");
    assert_eq!(attach.id(), after.infra.vm_id.as_ref().map(|v| v.0.as_str()));
    let outcomes = store.stats(now()).await?.dispatches_by_outcome;
    assert!(outcomes.contains(&("attach".into(), "confirmed_by_read".into(), 1)), "{outcomes:?}");
    assert!(outcomes.iter().all(|(_, outcome, _)| outcome != "unknown"), "{outcomes:?}");
    Ok(())
}

async fn rejection_blocks_without_resend(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    cloud.refuse(&[Op::InstanceCreate], 400, "Invalid plan chosen.", Some(1));
    let w = worker(&store, cloud.client("k1"));
    let c = create(&store, "acme").await;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Blocked);
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::CreateRejected));
    assert!(after.infra.blocked_detail.as_deref().unwrap().contains("Invalid plan chosen."));
    let r = &store.receipts_for_client(&c.id).await?[0];
    assert!(matches!(r.effect(), Effect::Rejected { status: 400, .. }), "{r:?}");
    assert_eq!(cloud.sends(), vec!["POST /instances".to_owned()]);
    Ok(())
}

/// A create refused for its spec (here its plan) is
/// corrected with `client update` (allowed: nothing exists), and
/// `reconcile --new-dispatch` sends the corrected spec under a new label;
/// the refused dispatch is never sent again.
async fn a_rejected_create_is_corrected_by_update_and_a_new_dispatch(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    cloud.refuse(&[Op::InstanceCreate], 400, "Invalid plan chosen.", Some(1));
    let p = cloud.client("k1");
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    drain(&w, 50).await;
    assert_eq!(status(&store, "acme").await.infra.blocked_reason, Some(BlockedReason::CreateRejected));
    let u = oduflow_model::update::SpecUpdate { plan: Some("vc2-2c-4gb".into()), ..Default::default() };
    let updated = store.client_update("acme", &u, "test", now(), 3).await?;
    assert_eq!(updated.infra.status, ClientStatus::Blocked, "a rejected create stays blocked until reconciled");
    oduflow_engine::operator::reconcile(&store, p.as_ref(), "acme", true, actor("ops")).await?;
    drain(&w, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.status, ClientStatus::Ready, "{after:?}");
    let receipts = store.receipts_for_client(&c.id).await?;
    let vms: Vec<_> = receipts.iter().filter(|r| r.resource_kind == ResourceKind::Vm).collect();
    assert_eq!(vms.len(), 2, "the refused dispatch and a new one");
    assert_ne!(vms[0].label, vms[1].label);
    assert_eq!(cloud.count("POST /instances"), 2, "{:?}", cloud.calls());
    let applied = cloud.sim.ledger().instance_create_bodies;
    assert_eq!(applied.len(), 1, "one create applied");
    assert_eq!(applied[0]["plan"], "vc2-2c-4gb", "the corrected spec was sent");
    assert_eq!(cloud.instances().await.first().map(|i| i.plan.clone()), Some("vc2-2c-4gb".into()));
    Ok(())
}

async fn receipts_cannot_be_deleted_or_rewritten(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    create(&store, "acme").await;
    drain(&w, 50).await;
    let n = store.receipts_all().await?.len();
    assert_eq!(n, 3);
    let del = "DELETE FROM dispatch_receipts";
    let rewrite = "UPDATE dispatch_receipts SET resource_id = 'other'";
    let clear = "UPDATE dispatch_receipts SET resource_id = NULL";
    // Evidence is written once.
    let evidence = "UPDATE dispatch_receipts SET sent_ms = sent_ms + 1 WHERE sent_ms IS NOT NULL";
    for sql in [del, rewrite, clear, evidence] {
        let r = oduflow_store::testing::execute_raw(&store, sql).await;
        assert!(r.is_err(), "{sql} was allowed");
    }
    if store.backend() == Backend::Postgres {
        assert!(oduflow_store::testing::execute_raw(&store, "TRUNCATE dispatch_receipts").await.is_err());
    }
    if store.backend() == Backend::Sqlite {
        // REPLACE deletes the conflicting row: with recursive_triggers on,
        // the no-delete trigger fires and refuses it.
        let replace = "INSERT OR REPLACE INTO dispatch_receipts (operation_key, client_ref, resource_kind, \
            dispatch_generation, label, region, spec_digest, key_fingerprint, claimed_ms) \
            SELECT operation_key, client_ref, resource_kind, dispatch_generation, label, region, spec_digest, \
            key_fingerprint, claimed_ms FROM dispatch_receipts LIMIT 1";
        assert!(
            oduflow_store::testing::execute_raw(&store, replace).await.is_err(),
            "INSERT OR REPLACE replaced a receipt"
        );
    }
    let after = store.receipts_all().await?;
    assert_eq!(after.len(), n);
    let made: Vec<String> = cloud.sim.ledger().resources.into_iter().map(|r| r.id).collect();
    assert!(after.iter().all(|r| r.id().is_some_and(|id| made.iter().any(|m| m == id))), "{after:?}");
    Ok(())
}

async fn key_change_blocks_before_any_request(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let w1 = worker(&store, cloud.client("k1"));
    create(&store, "acme").await;
    // One run: the VM is dispatched under k1.
    w1.run_next().await?;
    let sent_before = cloud.calls().len();
    // A worker configured with another key must not send anything.
    let w2 = worker(&store, cloud.client("k2"));
    drain(&w2, 50).await;
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::CredentialChanged), "{after:?}");
    assert_eq!(cloud.calls().len(), sent_before, "sent with a changed key: {:?}", cloud.calls());
    // Deletion is refused the same way.
    store.client_delete("acme", "test", now(), 3).await?;
    drain(&w2, 50).await;
    assert_eq!(status(&store, "acme").await.infra.blocked_reason, Some(BlockedReason::CredentialChanged));
    assert_eq!(cloud.calls().len(), sent_before, "sent with a changed key: {:?}", cloud.calls());
    Ok(())
}

async fn failures_back_off_then_block(store: Store) -> Result<()> {
    failpoints_required();
    // Real backoff on a clock the test moves: 1 s, then 2 s (attempts_max 3).
    // The clock starts after the job is queued (at the real now), so the
    // job is due on it.
    let c = create(&store, "acme").await;
    let clock = Arc::new(ManualClock::at(now() + 1));
    let mut cfg =
        EngineConfig { worker_id: "test".into(), retry_base_ms: 1_000, attempts_max: 3, ..EngineConfig::default() };
    cfg.poll_interval_ms = 0;
    let cloud = Cloud::start().await;
    let w = Worker::new(store.clone(), cloud.client("k1"), cfg, clock.clone());
    let scenario = fail::FailScenario::setup();
    fail::cfg("job-claimed", "return").unwrap();
    let mut runs = 0;
    for backoff in [1_000, 2_000] {
        assert!(!matches!(w.run_next().await?, RunOutcome::Idle), "the job did not run when due");
        runs += 1;
        clock.advance(backoff - 1);
        assert!(matches!(w.run_next().await?, RunOutcome::Idle), "the job ran before its {backoff} ms backoff");
        clock.advance(1);
    }
    assert!(!matches!(w.run_next().await?, RunOutcome::Idle), "the last attempt did not run");
    runs += 1;
    fail::cfg("job-claimed", "off").unwrap();
    assert_eq!(runs, 3, "attempts_max is 3");
    assert!(matches!(w.run_next().await?, RunOutcome::Idle), "a failed job ran again");
    let job = &store.jobs_for_client(&c.id).await?[0];
    assert_eq!((job.state, job.attempts), (JobState::Failed, 3));
    let after = status(&store, "acme").await;
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::AttemptsExhausted));
    assert!(after.infra.blocked_detail.unwrap().contains("fail point job-claimed"));
    scenario.teardown();
    Ok(())
}

/// A store that fails every step (closed here; unreachable or full in
/// life): the worker backs off and keeps going, and stops with the error
/// once STORE_OUTAGE_MAX_MS has passed on its clock, not before.
async fn a_worker_whose_every_step_fails_stops_at_the_outage_limit(store: Store) -> Result<()> {
    let clock = Arc::new(ManualClock::at(now()));
    let cloud = Cloud::start().await;
    let w = worker_on(&store, cloud.client("k1"), |c| c.idle_ms = 5, clock.clone());
    store.close().await;
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { w.run(true, stop).await });
    // Failing steps for a while on a clock that stands still: still going.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!run.is_finished(), "the worker stopped before the outage limit");
    clock.advance(oduflow_engine::STORE_OUTAGE_MAX_MS - 1_000);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!run.is_finished(), "the worker stopped before the outage limit");
    clock.advance(1_000);
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), run).await;
    let err = ended.expect("the worker kept going past the outage limit")?.expect_err("a failing store is an error");
    assert!(err.to_string().contains("closed") || format!("{err:?}").contains("Closed"), "{err:?}");
    Ok(())
}

async fn flip_present_absent_present_converges(store: Store) -> Result<()> {
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    create(&store, "acme").await;
    // One run dispatches the VM, then the target flips twice.
    w.run_next().await?;
    store.client_delete("acme", "test", now(), 3).await?;
    w.run_next().await?;
    store.client_create(&ClientName::parse("acme")?, &spec(), "test", now(), 3).await?;
    drain(&w, 100).await;
    let c = status(&store, "acme").await;
    assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
    assert_eq!(cloud.live(SimKind::Instance).len(), 1, "exactly one VM");
    assert_eq!(cloud.live(SimKind::Block).len(), 1, "exactly one volume");
    assert!(cloud.creates_per_label().values().all(|n| *n == 1));
    Ok(())
}

mod holes;
mod waits;
mod webhooks;

mod operator_actions {
    use super::*;
    use oduflow_engine::operator;

    oduflow_store::on_both_stores!(
        migrated crate::store_of =>
        reconcile_new_dispatch_only_after_rejection,
        uncertain_create_blocks_then_abandon_watches_label,
        adopt_verifies_then_records,
        rotate_proves_ownership_then_rebinds,
        restore_stops_queue_until_inventory,
    );

    async fn reconcile_new_dispatch_only_after_rejection(store: Store) -> Result<()> {
        let cloud = Cloud::start().await;
        let p = cloud.client("k1");
        let w = worker(&store, p.clone());
        create(&store, "acme").await;
        drain(&w, 20).await;
        // Ready: nothing was rejected, so no new dispatch is allowed.
        let r = operator::reconcile(&store, p.as_ref(), "acme", true, actor("ops")).await;
        assert!(matches!(r, Err(operator::OperatorError::Refused(_))), "{r:?}");

        create(&store, "beta").await;
        cloud.refuse(&[Op::InstanceCreate], 422, "Invalid region", Some(1));
        drain(&w, 20).await;
        assert_eq!(status(&store, "beta").await.infra.blocked_reason, Some(BlockedReason::CreateRejected));
        // Plain reconcile observes again and stays blocked: no new POST.
        operator::reconcile(&store, p.as_ref(), "beta", false, actor("ops")).await?;
        drain(&w, 20).await;
        assert_eq!(status(&store, "beta").await.infra.blocked_reason, Some(BlockedReason::CreateRejected));
        assert_eq!(cloud.count("POST /instances"), 2);
        // --new-dispatch: a new operation key and label; the old receipt stays.
        let c = operator::reconcile(&store, p.as_ref(), "beta", true, actor("ops")).await?;
        assert_eq!(c.infra.vm_dispatch_generation, 2);
        drain(&w, 20).await;
        let c = status(&store, "beta").await;
        assert_eq!(c.infra.status, ClientStatus::Ready);
        let receipts = store.receipts_for_client(&c.id).await?;
        let vms: Vec<_> = receipts.iter().filter(|r| r.resource_kind == ResourceKind::Vm).collect();
        assert_eq!(vms.len(), 2);
        assert!(matches!(vms[0].effect(), Effect::Rejected { status: 422, .. }), "{:?}", vms[0]);
        assert_ne!(vms[0].label, vms[1].label);
        Ok(())
    }

    async fn uncertain_create_blocks_then_abandon_watches_label(store: Store) -> Result<()> {
        let cloud = Cloud::start().await;
        let p = cloud.client("k1");
        let w = worker(&store, p.clone());
        // beta's VM POST is applied but its answer is lost; the VM then
        // disappears before anyone sees it. The outcome stays unknown: it is
        // observed, never re-sent.
        create(&store, "beta").await;
        cloud.script(&[Op::InstanceCreate], Scripted::LoseAnswer, Some(1));
        let beta = status(&store, "beta").await;
        // Run beta's first job: POST applied, answer lost.
        loop {
            if w.run_next().await? == RunOutcome::Idle {
                break;
            }
            if !store.receipts_for_client(&beta.id).await?.is_empty() {
                break;
            }
        }
        // The VM the lost POST created disappears before anyone sees it.
        let label = store.receipts_for_client(&beta.id).await?[0].label.clone();
        let lost = cloud.live(SimKind::Instance).into_iter().find(|i| i.label == label.as_str()).unwrap();
        cloud.delete_vm(&VultrInstanceId(lost.id)).await;
        drain(&w, 50).await;
        let b = status(&store, "beta").await;
        assert_eq!(b.infra.blocked_reason, Some(BlockedReason::UncertainCreate), "{b:?}");
        // The evidence says why the outcome is unknown, naming the dispatch.
        let detail = b.infra.blocked_detail.clone().unwrap();
        assert!(detail.contains("transport error") && detail.contains(label.as_str()), "{detail}");
        assert_eq!(cloud.count("POST /instances"), 1, "never re-sent");

        // Abandon needs an attestation.
        assert!(operator::abandon(&store, "beta", ResourceKind::Vm, "x", actor("")).await.is_err());
        operator::abandon(&store, "beta", ResourceKind::Vm, "confirmed in the Vultr console", actor("alice")).await?;
        drain(&w, 50).await;
        assert_eq!(status(&store, "beta").await.infra.status, ClientStatus::Ready);
        // The abandoned label stays watched: if it appears, it is an orphan.
        let late = cloud.put_vm(label.as_str()).await;
        let inv = operator::inventory(&store, p.as_ref(), now()).await?;
        assert_eq!(inv.orphans.len(), 1, "{inv:?}");
        assert_eq!(inv.orphans[0].id, late.as_str());
        assert!(inv.orphans[0].note.contains("alice"));
        let events = store.events_for_client(&beta.id).await?;
        assert!(events.iter().any(|e| e.kind == "dispatch_abandoned" && e.detail["by"] == "alice"));
        Ok(())
    }

    async fn adopt_verifies_then_records(store: Store) -> Result<()> {
        let cloud = Cloud::start().await;
        let p = cloud.client("k1");
        let w = worker(&store, p.clone());
        create(&store, "acme").await;
        // The VM POST is answered 500, not applied: its outcome is unknown.
        cloud.refuse(&[Op::InstanceCreate], 500, "Internal server error.", Some(1));
        w.run_next().await?;
        let c = status(&store, "acme").await;
        assert!(store.receipts_for_client(&c.id).await?[0].id().is_none());
        // A VM made by hand under another label is the one to adopt.
        let id = cloud.put_vm("renamed").await.0;
        // A resource in the wrong region is refused.
        let wrong = cloud.put_vm_in("renamed", "ams").await;
        let r = operator::adopt(&store, p.as_ref(), "acme", ResourceKind::Vm, wrong.as_str(), actor("ops")).await;
        assert!(matches!(r, Err(operator::OperatorError::Refused(ref m)) if m.contains("region")), "{r:?}");
        operator::adopt(&store, p.as_ref(), "acme", ResourceKind::Vm, &id, actor("ops")).await?;
        let r = &store.receipts_for_client(&c.id).await?[0];
        assert_eq!(r.id(), Some(id.as_str()));
        assert_eq!(r.id_source(), Some(IdSource::AdoptedByOperator));
        // Adopting again is refused: the id is recorded.
        assert!(operator::adopt(&store, p.as_ref(), "acme", ResourceKind::Vm, &id, actor("ops")).await.is_err());
        Ok(())
    }

    async fn rotate_proves_ownership_then_rebinds(store: Store) -> Result<()> {
        let cloud = Cloud::start().await;
        let w = worker(&store, cloud.client("old"));
        create(&store, "acme").await;
        drain(&w, 20).await;
        // A new key on another account sees nothing: refused, nothing changed.
        let elsewhere = Cloud::start().await;
        let stranger = elsewhere.client("new");
        let refused = operator::credentials_rotate(&store, stranger.as_ref(), actor("ops")).await?.unwrap_err();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!(status(&store, "acme").await.infra.key_fingerprint, Some(key("old")));
        // A new key on the same account (same resources visible): rebound.
        let p2 = cloud.client("new");
        let names = operator::credentials_rotate(&store, p2.as_ref(), actor("ops")).await?.unwrap();
        assert_eq!(names, vec!["acme".to_owned()]);
        assert_eq!(status(&store, "acme").await.infra.key_fingerprint, Some(key("new")));
        store.client_delete("acme", "test", now(), 3).await?;
        drain(&worker(&store, p2.clone()), 20).await;
        assert_eq!(status(&store, "acme").await.infra.status, ClientStatus::Deleted);
        Ok(())
    }

    async fn restore_stops_queue_until_inventory(store: Store) -> Result<()> {
        let cloud = Cloud::start().await;
        let p = cloud.client("k1");
        let w = worker(&store, p.clone());
        create(&store, "acme").await;
        store.restore_declare("test", "test", now()).await?;
        assert_eq!(w.run_next().await?, RunOutcome::Idle);
        let inv = operator::inventory(&store, p.as_ref(), now()).await?;
        assert!(inv.orphans.is_empty() && inv.missing.is_empty());
        assert_eq!(store.restore_pending().await?, None);
        assert!(matches!(w.run_next().await?, RunOutcome::Ran { .. }));
        // A resource under our prefix with no receipt is an orphan; a
        // recorded one the provider lost is missing.
        drain(&w, 20).await;
        let vm = status(&store, "acme").await.infra.vm_id.unwrap();
        cloud.delete_vm(&vm).await;
        let stray = cloud.put_vm(&format!("{LABEL_PREFIX}not-ours-{}", 1)).await;
        let inv = operator::inventory(&store, p.as_ref(), now()).await?;
        assert_eq!(inv.orphans.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), vec![stray.as_str()]);
        assert_eq!(inv.missing.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), vec![vm.as_str()]);
        Ok(())
    }
}

/// PostgreSQL keeps the connections that claim jobs apart from the pool and
/// reuses them: one that died while idle (a restart, a terminated backend)
/// must cost nothing but a reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_survive_terminated_claim_connections_postgres() {
    let url = oduflow_store::testing::fresh_migrated_pg_url().await;
    let store = open(&url).await;
    let c = create(&store, "acme").await;
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    assert!(!drain(&w, 50).await.is_empty());
    let killed = oduflow_store::testing::pg_terminate_all_sessions(&url).await.unwrap();
    assert!(killed > 0, "no connection to terminate");
    store.job_enqueue(&NewJob::for_client(&c.id, JobKind::Noop, 1, now(), 3)).await.unwrap();
    assert!(matches!(w.run_next().await.unwrap(), RunOutcome::Ran { kind: JobKind::Noop, .. }));
}

/// A claim dropped without commit or rollback (a cancelled or panicking run)
/// closes its connection: PostgreSQL rolls back and the job is claimable
/// again, untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_claim_gives_its_job_back_postgres() {
    let store = open(&oduflow_store::testing::fresh_migrated_pg_url().await).await;
    let c = create(&store, "acme").await;
    let cloud = Cloud::start().await;
    let w = worker(&store, cloud.client("k1"));
    drain(&w, 50).await;
    let job = store.job_enqueue(&NewJob::for_client(&c.id, JobKind::Noop, 1, now(), 3)).await.unwrap().id();
    let claim = store.job_claim_next("a", now()).await.unwrap().expect("a claim");
    assert_eq!(claim.job.id, job);
    // While it is held, the client is busy: nothing else to claim.
    assert!(store.job_claim_next("b", now()).await.unwrap().is_none());
    drop(claim);
    let start = std::time::Instant::now();
    let again = loop {
        // The server notices the closed connection asynchronously.
        if let Some(c) = store.job_claim_next("b", now()).await.unwrap() {
            break c;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "the dropped claim's locks were never released");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(again.job.id, job);
    assert_eq!(again.job.state, JobState::Queued);
    assert_eq!(again.job.attempts, 0);
    again.release().await.unwrap();
    assert_eq!(store.job_get(job).await.unwrap().unwrap().state, JobState::Queued);
}
