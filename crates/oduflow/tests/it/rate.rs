//! Issue 13: several oduflow processes on one database share one rate
//! budget, so together they stay under Vultr's 30 requests/s per source
//! address, as the simulator counts it (a sliding second per address, 429
//! with Retry-After above it).

use super::*;
use std::process::Child;

/// A simulator that counts Vultr's limit: 30 requests in any one second from
/// one address (every process here connects from 127.0.0.1).
async fn vultr_rate_sim() -> oduflow_sim::SimHandle {
    let cfg = oduflow_sim::SimConfig {
        pending_ms: 200,
        installing_ms: 200,
        get_404_window_ms: 100,
        list_lag_ms: 100,
        rate_per_sec: oduflow_sim::DEFAULT_RATE_PER_SEC,
        ..oduflow_sim::SimConfig::default()
    }
    .with_key(KEY);
    assert_eq!(cfg.rate_per_sec, 30, "Vultr's limit");
    oduflow_sim::Sim::start(cfg, "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// A process with the default rate (the group's 25/s) and polling slow
/// enough for a fleet: `Env::cmd` is for tests that want speed.
fn fleet_cmd(env: &Env, args: &[&str]) -> Command {
    let mut c = env.cmd(args);
    c.env_remove("ODUFLOW_RATE_PER_SEC")
        .env("ODUFLOW_POLL_INTERVAL_MS", "300")
        .env("ODUFLOW_OBSERVATIONS_MAX", "40")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

async fn counts(store: &Store) -> Vec<(ClientStatus, i64)> {
    store.client_status_counts().await.unwrap()
}

fn wait_all(children: Vec<Child>) {
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "a worker failed: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// `workers` processes provision `clients` clients, then delete them, while
/// `oduflow reconcile --all` processes (label scans, reads only) run beside
/// them and are SIGKILLed mid-run, holding whatever budget they held.
async fn fleet_shares_one_budget(mut env: Env, workers: usize, clients: usize) {
    env.sim = vultr_rate_sim().await;
    env.ok(&["init"]);
    let store = env.store().await;
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
    for i in 0..clients {
        store.client_create(&ClientName::parse(&format!("f{i:03}")).unwrap(), &spec, 0, 5).await.unwrap();
    }
    let started = Instant::now();
    let mut kills = Vec::new();
    for phase in ["provision", "delete"] {
        let children: Vec<Child> =
            (0..workers).map(|_| fleet_cmd(&env, &["worker", "--until-settled", "--concurrency", "4"]).spawn().unwrap()).collect();
        // Scanners beside them, each killed at a different point of its run.
        for k in 0..4u64 {
            tokio::time::sleep(Duration::from_millis(400 + 170 * k)).await;
            let mut scan = fleet_cmd(&env, &["reconcile", "--all"]).spawn().unwrap();
            tokio::time::sleep(Duration::from_millis(60 + 90 * k)).await;
            let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
            if scan.try_wait().unwrap().is_none() {
                scan.kill().unwrap();
                kills.push(at);
            }
            let _ = scan.wait();
        }
        wait_all(children);
        let c = counts(&store).await;
        let want = if phase == "provision" { ClientStatus::Ready } else { ClientStatus::Deleted };
        assert_eq!(c, vec![(want, clients as i64)], "after {phase}: {c:?}");
        if phase == "provision" {
            for i in 0..clients {
                store.client_delete(&format!("f{i:03}"), 0, 5).await.unwrap();
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let l = env.sim.ledger();
    let served: u64 = l.requests.values().sum();
    // Liveness after each kill: the longest silence at the simulator.
    let mut at: Vec<i64> = l.request_log.iter().map(|r| r.at_ms).collect();
    at.sort();
    let longest_gap_after_kill = kills
        .iter()
        .map(|k| at.windows(2).filter(|w| w[0] >= *k && w[0] < k + 3_000).map(|w| w[1] - w[0]).max().unwrap_or(0))
        .max()
        .unwrap_or(0);
    println!(
        "{workers} worker processes, {clients} clients ready then deleted in {secs:.1} s: {served} requests ({:.1}/s), \
         busiest second {}, 429s {} (rate limit) + {} (faults); scanners killed mid-run {}, longest silence after a kill {} ms",
        served as f64 / secs,
        l.busiest_second,
        l.responses_429_rate_limit,
        l.responses_429_fault,
        kills.len(),
        longest_gap_after_kill,
    );
    assert_eq!(l.responses_429_rate_limit, 0, "the fleet went over Vultr's limit");
    assert!(l.busiest_second <= 30, "{} requests in one second", l.busiest_second);
    assert!(!kills.is_empty(), "no scanner was still running when killed: the kill was not exercised");
    // Generous: the point is "not stalled", not a speed.
    assert!(longest_gap_after_kill < 2_000, "the others stalled {longest_gap_after_kill} ms after a process was killed");
    // Every process of the group shows in the budget's usage.
    let usage = store.budget_usage().await.unwrap();
    assert!(usage.iter().all(|u| u.group == "default"), "{usage:?}");
}

mod fleet_shares_one_budget {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn four_workers_on_postgres() {
        super::fleet_shares_one_budget(super::Env::postgres().await, 4, 24).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_workers_on_sqlite() {
        super::fleet_shares_one_budget(super::Env::sqlite().await, 2, 16).await;
    }
}
