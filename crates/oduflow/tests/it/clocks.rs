//! Host clocks that are wrong (docs/protocol.md §4.1): worker and operator
//! processes whose wall clocks are off by minutes to hours
//! (`ODUFLOW_CLOCK_OFFSET_MS`, test builds only) leave no client in a wrong
//! state and no job waiting for hours. Times that order events across
//! processes come from the database's clock.

use super::*;
use std::process::Child;

oduflow_store::on_both_stores!(
    super::slow_env =>
    a_worker_two_hours_ahead_blocks_no_healthy_client,
    jobs_left_by_a_worker_whose_clock_was_ahead_run_at_once,
    a_host_clock_stepped_back_an_hour_does_not_stall_provisioning,
    a_host_clock_stepped_forward_an_hour_blocks_nothing,
);

oduflow_store::on_both_stores!(super::env_of => a_reconcile_from_a_host_behind_reads_by_id);

const CLIENTS: usize = 6;
const HOUR_MS: i64 = 3_600_000;

/// How long a worker may take to settle the suite's few clients: far more
/// than they need (seconds), far less than the clock offsets (an hour).
const SETTLE_MAX: Duration = Duration::from_secs(90);

/// The readiness wait of these tests: longer than the simulator's install,
/// so a client blocked `not_ready` was blocked by a clock, not by the cloud.
const READY_WAIT: (&str, &str) = ("ODUFLOW_READY_WAIT_MS", "30000");

/// An environment whose simulated VMs take 1.5 s to boot: a worker that
/// comes along after the creates were sent finds them still pending.
async fn slow_env(db: &oduflow_store::testing::TestDb) -> Env {
    let cfg = oduflow_sim::SimConfig {
        pending_ms: 1_500,
        installing_ms: 300,
        get_404_window_ms: 100,
        list_lag_ms: 100,
        rate_per_sec: 1000,
        ..oduflow_sim::SimConfig::default()
    }
    .with_key(KEY);
    let sim = oduflow_sim::Sim::start(cfg, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    Env { dir: tempfile::tempdir().unwrap(), url: db.url.clone(), sim }
}

/// A worker process whose host clock is off by `offset_ms`.
fn worker(env: &Env, offset_ms: i64, until_settled: bool) -> Child {
    let mut args = vec!["worker", "--concurrency", "2"];
    if until_settled {
        args.push("--until-settled");
    }
    env.cmd(&args)
        .env("ODUFLOW_CLOCK_OFFSET_MS", offset_ms.to_string())
        .env(READY_WAIT.0, READY_WAIT.1)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits for `child` to exit, at most `within`; kills it past that.
/// Whether it exited on its own, successfully.
fn exited_within(child: &mut Child, within: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(status) = child.try_wait().unwrap() {
            return status.success();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Waits (at most [`SETTLE_MAX`]) until every client's VM and volume
/// creates were sent and answered (its id recorded: a worker killed with a create in flight
/// leaves a lost create, which ends `uncertain_create` by design).
async fn creates_sent(store: &Store) {
    let start = Instant::now();
    loop {
        let sent = store
            .receipts_all()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.resource_kind != ResourceKind::Attach && r.id().is_some())
            .count();
        if sent >= 2 * CLIENTS {
            return;
        }
        assert!(start.elapsed() < SETTLE_MAX, "{sent} of {} creates answered", 2 * CLIENTS);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn create_all(env: &Env) {
    for i in 0..CLIENTS {
        env.create_client(&format!("c{i}"));
    }
}

/// Every client ready, none blocked: the states, by name, as a message.
async fn all_ready(store: &Store) {
    let all = store.client_list().await.unwrap();
    let wrong: Vec<String> = all
        .iter()
        .filter(|c| c.infra.status != ClientStatus::Ready)
        .map(|c| format!("{}: {} {:?}", c.name, c.infra.status, c.infra.blocked_reason))
        .collect();
    assert_eq!(all.len(), CLIENTS);
    assert!(wrong.is_empty(), "{} of {CLIENTS} clients not ready: {wrong:?}", wrong.len());
}

/// Provisioning begun by a worker with a right clock, which is then killed
/// once every create was sent (the VMs still booting).
async fn begun_then_killed(env: &Env, store: &Store) {
    create_all(env);
    let mut w = worker(env, 0, false);
    creates_sent(store).await;
    w.kill().unwrap();
    w.wait().unwrap();
}

/// PostgreSQL at the issue: one of two workers 2 h ahead blocked 4 of 6
/// healthy clients `not_ready` (a create the other sent looked 2 h old).
async fn a_worker_two_hours_ahead_blocks_no_healthy_client(env: Env) {
    failpoints_required();
    env.ok(&["init"]);
    let store = env.store().await;
    create_all(&env);
    let mut right = worker(&env, 0, true);
    creates_sent(&store).await;
    let mut ahead = worker(&env, 2 * HOUR_MS, true);
    let ahead_ok = exited_within(&mut ahead, SETTLE_MAX);
    let right_ok = exited_within(&mut right, SETTLE_MAX);
    all_ready(&store).await;
    assert!(ahead_ok && right_ok, "a worker did not settle (2 h ahead: {ahead_ok}, right: {right_ok})");
}

/// A worker 2 h ahead queued its jobs' next runs 2 h ahead of the others'
/// clocks; after it died, the other worker left them until then.
async fn jobs_left_by_a_worker_whose_clock_was_ahead_run_at_once(env: Env) {
    failpoints_required();
    env.ok(&["init"]);
    let store = env.store().await;
    create_all(&env);
    let mut ahead = worker(&env, 2 * HOUR_MS, false);
    creates_sent(&store).await;
    ahead.kill().unwrap();
    ahead.wait().unwrap();
    let mut right = worker(&env, 0, true);
    let settled = exited_within(&mut right, SETTLE_MAX);
    assert!(settled, "the worker with a right clock did not settle within {SETTLE_MAX:?}");
    all_ready(&store).await;
}

/// SQLite at the issue: the host clock stepped back 1 h left 6 of 6
/// clients provisioning (their next runs an hour away).
async fn a_host_clock_stepped_back_an_hour_does_not_stall_provisioning(env: Env) {
    failpoints_required();
    env.ok(&["init"]);
    let store = env.store().await;
    begun_then_killed(&env, &store).await;
    let mut behind = worker(&env, -HOUR_MS, true);
    let settled = exited_within(&mut behind, SETTLE_MAX);
    assert!(settled, "a worker an hour behind did not settle within {SETTLE_MAX:?}");
    all_ready(&store).await;
}

/// SQLite at the issue: the host clock stepped forward 1 h blocked 4 of 6
/// clients `not_ready` (their creates looked an hour old).
async fn a_host_clock_stepped_forward_an_hour_blocks_nothing(env: Env) {
    failpoints_required();
    env.ok(&["init"]);
    let store = env.store().await;
    begun_then_killed(&env, &store).await;
    let mut ahead = worker(&env, HOUR_MS, true);
    let settled = exited_within(&mut ahead, SETTLE_MAX);
    all_ready(&store).await;
    assert!(settled, "a worker an hour ahead did not settle within {SETTLE_MAX:?}");
}

/// The bulk view at the issue: an operator's `reconcile` from a host 600 s
/// behind the worker's was answered from the listing that showed the volume
/// attached before it was moved: the client stayed ready with its volume on
/// another instance. A reconcile reads by id (docs/protocol.md §3.6).
async fn a_reconcile_from_a_host_behind_reads_by_id(env: Env) {
    failpoints_required();
    env.ok(&["init"]);
    let store = env.store().await;
    env.create_client("acme");
    // One worker process throughout: its view keeps the listing that
    // showed the volume attached to the client's VM.
    let mut w = env
        .cmd(&["worker", "--concurrency", "2"])
        .env("ODUFLOW_POLL_INTERVAL_MS", "300")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let c = wait_for(&store, "acme", |c| c.infra.status == ClientStatus::Ready).await;
    // Someone moves the volume to another instance.
    let p = env.console();
    use oduflow_model::provider::{InstanceRequest, Outcome, Provider};
    let other = match p
        .instance_create(&InstanceRequest {
            region: "ewr".into(),
            plan: "vc2-1c-1gb".into(),
            image: oduflow_model::ImageSource::Os(2284),
            label: Label("foreign".into()),
            server: oduflow_model::ServerSpec { hostname: "f".into(), ..Default::default() },
        })
        .await
    {
        Outcome::Accepted(id) => id,
        o => panic!("{o:?}"),
    };
    let vol = c.infra.volume_id.clone().unwrap();
    p.block_detach(&vol).await.unwrap();
    env.sim.advance(Duration::from_secs(1));
    let start = Instant::now();
    while !matches!(p.block_attach(&vol, &other).await, Outcome::Accepted(())) {
        assert!(start.elapsed() < SETTLE_MAX, "could not attach elsewhere");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let generation = c.infra.generation;
    let o = env.cmd(&["reconcile", "acme"]).env("ODUFLOW_CLOCK_OFFSET_MS", "-600000").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let after = wait_for(&store, "acme", |c| {
        c.infra.generation > generation && matches!(c.infra.status, ClientStatus::Ready | ClientStatus::Blocked)
    })
    .await;
    w.kill().unwrap();
    w.wait().unwrap();
    assert_eq!(after.infra.blocked_reason, Some(BlockedReason::ForeignAttachment), "{after:?}");
    assert!(after.infra.blocked_detail.unwrap().contains(other.as_str()));
}

/// Waits (at most [`SETTLE_MAX`]) until the client's record passes `f`.
async fn wait_for(store: &Store, name: &str, f: impl Fn(&ClientRow) -> bool) -> ClientRow {
    let start = Instant::now();
    loop {
        let c = store.client_get(name).await.unwrap().unwrap();
        if f(&c) {
            return c;
        }
        assert!(start.elapsed() < SETTLE_MAX, "{name}: {:?} {:?}", c.infra.status, c.infra.blocked_reason);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
