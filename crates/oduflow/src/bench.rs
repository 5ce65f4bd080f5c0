//! `oduflow bench`: figures, not assertions. Convergence at Vultr's rate limit
//! against the simulator, queue throughput on PostgreSQL, and an inventory
//! pass at scale, each printed with its target and the command that
//! reproduces it. `--smoke` runs each small (the test command does).

use crate::config::BadInput;
use anyhow::{Context, Result};
use oduflow_engine::{operator, Clock, EngineConfig, SystemClock, Worker};
use oduflow_model::provider::{BlockRequest, InstanceRequest, Outcome, Provider};
use oduflow_model::*;
use oduflow_sim::{Sim, SimConfig};
use oduflow_store::{IdSource, NewJob, NewReceipt, ReceiptLedger, Store};
use oduflow_vultr::{VultrClient, VultrConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &str = "bench-key";

#[derive(clap::Args)]
pub struct BenchArgs {
    /// convergence | queue | inventory | all
    #[arg(default_value = "all")]
    which: String,
    /// Small sizes, for the test command's smoke run.
    #[arg(long)]
    smoke: bool,
    /// PostgreSQL for the queue benchmark (default: ODUFLOW_TEST_PG or the local `test` database).
    #[arg(long)]
    pg: Option<String>,
    /// Worker counts for the queue benchmark.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    workers: Vec<usize>,
    /// Jobs per queue run (default 20,000; 500 with --smoke).
    #[arg(long)]
    jobs: Option<usize>,
}

pub async fn run(a: BenchArgs) -> Result<()> {
    if let Some(pg) = &a.pg {
        // Read by oduflow_store::testing only; set before any task starts.
        unsafe { std::env::set_var("ODUFLOW_TEST_PG", pg) };
    }
    let all = a.which == "all";
    if !all && !["convergence", "queue", "inventory"].contains(&a.which.as_str()) {
        return Err(BadInput(format!("unknown benchmark {:?}: convergence, queue, inventory or all", a.which)).into());
    }
    println!("machine: {} cores, {}", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), load());
    if all || a.which == "convergence" {
        convergence(if a.smoke { 20 } else { 500 }).await?;
    }
    if all || a.which == "queue" {
        queue(a.jobs.unwrap_or(if a.smoke { 500 } else { 20_000 }), &a.workers).await?;
    }
    if all || a.which == "inventory" {
        inventory(if a.smoke { 200 } else { 10_000 }).await?;
    }
    Ok(())
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|l| format!("load {}", l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))).unwrap_or_default()
}

fn vultr(base_url: &str, rate: u32) -> Result<Arc<VultrClient>> {
    Ok(Arc::new(VultrClient::new(VultrConfig {
        base_url: base_url.to_owned(),
        rate_per_sec: rate,
        // Vultr's maximum page size: inventory passes read fewer pages.
        per_page: 500,
        ..VultrConfig::new(secrecy::SecretString::from(KEY.to_owned()))
    })?))
}

async fn temp_sqlite() -> Result<(tempfile::TempDir, Store)> {
    let dir = tempfile::tempdir()?;
    let store = Store::connect_sized(&oduflow_store::testing::sqlite_url(dir.path()), true, 70).await?;
    store.migrate().await?;
    Ok((dir, store))
}

async fn settle<P: Provider>(w: &Worker<P>) -> Result<()> {
    let (_tx, rx) = tokio::sync::watch::channel(false);
    w.run(true, rx).await?;
    Ok(())
}

/// Provisions then deletes `n` clients at Vultr's 30 requests/s.
async fn convergence(n: usize) -> Result<()> {
    let sim = Sim::start(
        SimConfig {
            rate_per_sec: 30,
            // Compressed but realistic: pending, then installing, then ok;
            // a new resource answers 404 and is missing from listings briefly.
            pending_ms: 2_000,
            installing_ms: 2_000,
            block_pending_ms: 1_000,
            get_404_window_ms: 500,
            list_lag_ms: 500,
            attach_lock_ms: 500,
            ..SimConfig::default()
        }
        .with_key(KEY),
        "127.0.0.1:0".parse()?,
    )
    .await?;
    let p = vultr(&sim.base_url, 30)?;
    let (_dir, store) = temp_sqlite().await?;
    let cfg = EngineConfig { poll_interval_ms: 2_000, concurrency: 32, ..EngineConfig::default() };
    let w = Worker::new(store.clone(), p, cfg, Arc::new(SystemClock));
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    let t = Instant::now();
    for i in 0..n {
        store.client_create(&ClientName::parse(&format!("b{i}"))?, &spec, SystemClock.now_ms(), 10).await?;
    }
    settle(&w).await?;
    let provision_s = t.elapsed().as_secs_f64();
    let l1 = sim.ledger();
    let calls_provision: u64 = l1.requests.values().sum();
    let t = Instant::now();
    for i in 0..n {
        store.client_delete(&format!("b{i}"), SystemClock.now_ms(), 10).await?;
    }
    settle(&w).await?;
    let delete_s = t.elapsed().as_secs_f64();
    let l2 = sim.ledger();
    let calls_total: u64 = l2.requests.values().sum();
    let counts = store.client_status_counts().await?;
    let per_client = calls_provision as f64 / n as f64;
    let bound_s = calls_total as f64 / 30.0;
    println!("convergence: {n} clients provisioned then deleted at 30 requests/s");
    println!("  final states: {counts:?}");
    println!("  provisioning: {calls_provision} calls = {per_client:.2} per client (minimum about 6; target <= {:.1}), {provision_s:.1} s", 6.0 * 1.3);
    println!("  deletion: {} calls = {:.2} per client, {delete_s:.1} s", calls_total - calls_provision, (calls_total - calls_provision) as f64 / n as f64);
    println!(
        "  wall {:.1} s vs rate-limit bound {bound_s:.1} s = {:.2}x (target <= 1.15x); 429s: {} (target 0)",
        provision_s + delete_s,
        (provision_s + delete_s) / bound_s,
        l2.responses_429_rate_limit + l2.responses_429_fault
    );
    let mut routes: Vec<_> = l2.requests.iter().collect();
    routes.sort_by(|a, b| b.1.cmp(a.1));
    println!("  calls by route: {}", routes.iter().map(|(r, c)| format!("{r} {c}")).collect::<Vec<_>>().join(", "));
    println!("  reproduce: cargo run --release -- bench convergence");
    sim.shutdown().await;
    Ok(())
}

/// No-op jobs per second on PostgreSQL with 1, 4 and 16 workers.
async fn queue(jobs: usize, worker_counts: &[usize]) -> Result<()> {
    println!("queue: {jobs} no-op jobs on PostgreSQL, spread over 64 clients (one job per client at a time)");
    for &workers in worker_counts {
        let url = oduflow_store::testing::fresh_pg_url().await;
        let store = Store::connect_sized(&url, true, 2 * workers as u32 + 4).await?;
        store.migrate().await?;
        let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
        // Clients whose own jobs are settled (created, deleted before any run).
        let clients = 64.min(jobs);
        let mut ids = vec![];
        for i in 0..clients {
            let c = store.client_create(&ClientName::parse(&format!("q{i}"))?, &spec, 0, 3).await?;
            store.client_delete(&format!("q{i}"), 0, 3).await?;
            ids.push(c.id);
        }
        let p = Arc::new(oduflow_engine::memory::MemoryProvider::new(KeyFingerprint::of_key(&secrecy::SecretString::from(KEY.to_owned()))));
        let cfg = EngineConfig { concurrency: workers, idle_ms: 5, ..EngineConfig::default() };
        let w = Worker::new(store.clone(), p, cfg, Arc::new(SystemClock));
        settle(&w).await?;
        // Enqueued before the clock starts, 8 at a time (setup, not measured).
        let mut tasks = tokio::task::JoinSet::new();
        for part in 0..8 {
            let (store, ids) = (store.clone(), ids.clone());
            tasks.spawn(async move {
                for i in (part..jobs).step_by(8) {
                    let mut j = NewJob::for_client(&ids[i % clients], JobKind::Noop, 2, 0, 3);
                    j.identity_key = None;
                    store.job_enqueue(&j).await?;
                }
                anyhow::Ok(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        let t = Instant::now();
        settle(&w).await?;
        let s = t.elapsed().as_secs_f64();
        let done = store.queue_status(SystemClock.now_ms()).await?.done;
        println!("  workers {workers:>2}: {:.0} jobs/s ({jobs} jobs in {s:.2} s; {done} done including setup)", jobs as f64 / s);
        store.close().await;
    }
    println!("  reproduce: cargo run --release -- bench queue  (peer and pgbench ceiling: bench/apalis-peer/run.sh, bench/pgbench-ceiling.sh)");
    Ok(())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// reconcile --all over `n` clients (2n resources), the simulator in another
/// process so the figure is the inventory's own memory.
async fn inventory(n: usize) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let exe = std::env::current_exe()?;
    let mut sim = tokio::process::Command::new(exe)
        .args(["sim", "--listen", &format!("127.0.0.1:{port}"), "--rate", "1000000", "--pending-ms", "0", "--get-404-window-ms", "0", "--list-lag-ms", "0"])
        .env("VULTR_API_KEY", KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}/v2");
    let setup = vultr(&base, 100_000)?;
    let start = Instant::now();
    while setup.instance_list().await.is_err() {
        anyhow::ensure!(start.elapsed() < Duration::from_secs(20), "oduflow sim did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = oduflow_store::testing::fresh_pg_url().await;
    let store = Store::connect(&url, true).await?;
    store.migrate().await?;
    let ledger = ReceiptLedger::new(store.clone());
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    let fp = KeyFingerprint::of_key(&secrecy::SecretString::from(KEY.to_owned()));
    let t = Instant::now();
    // Setup, in parallel: each client with a VM and a volume created through
    // the API and recorded on receipts, as the engine would have.
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (store, ledger, setup, spec, fp, sem) = (store.clone(), ledger.clone(), setup.clone(), spec.clone(), fp.clone(), sem.clone());
        tasks.spawn(async move {
            let _permit = sem.acquire().await?;
            let c = store.client_create(&ClientName::parse(&format!("i{i}"))?, &spec, 0, 3).await?;
            for kind in [ResourceKind::Vm, ResourceKind::Volume] {
                let label = Label::new_dispatch();
                let op = OperationKey::new(&c.id, kind, 1);
                ledger
                    .receipt_claim(&NewReceipt {
                        operation_key: op.clone(),
                        client_ref: c.id.clone(),
                        resource_kind: kind,
                        dispatch_generation: 1,
                        label: label.clone(),
                        region: "ewr".into(),
                        spec_digest: "bench".into(),
                        key_fingerprint: fp.clone(),
                        claimed_ms: 0,
                    })
                    .await?;
                let id = match kind {
                    ResourceKind::Vm => match setup
                        .instance_create(&InstanceRequest { region: "ewr".into(), plan: "vc2-1c-1gb".into(), os_id: 2284, label, hostname: "h".into() })
                        .await
                    {
                        Outcome::Accepted(id) => id.0,
                        o => anyhow::bail!("setup create: {o:?}"),
                    },
                    _ => match setup.block_create(&BlockRequest { region: "ewr".into(), size_gb: 40, block_type: VolumeType::HighPerf, label }).await {
                        Outcome::Accepted(id) => id.0,
                        o => anyhow::bail!("setup create: {o:?}"),
                    },
                };
                ledger.receipt_record_id(&op, &id, IdSource::Response, 0).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let setup_s = t.elapsed().as_secs_f64();
    drop(tasks);
    // Measure the pass alone: reset the peak RSS (Linux: clear_refs 5).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_before = peak_rss_kib();
    let inv_client = vultr(&base, 30)?;
    let before = counted_requests(&base).await?;
    let t = Instant::now();
    let inv = operator::inventory(&store, inv_client.as_ref(), SystemClock.now_ms()).await?;
    let secs = t.elapsed().as_secs_f64();
    let calls = counted_requests(&base).await? - before;
    let rss = peak_rss_kib();
    println!("inventory: reconcile --all over {n} clients ({} resources listed; setup {setup_s:.0} s)", inv.instances_listed + inv.blocks_listed);
    println!(
        "  provider calls {calls} (list pages of 500 at 30 requests/s; one GET per resource would be {}), {secs:.2} s",
        2 * n
    );
    println!(
        "  peak RSS during the pass {:.1} MiB (before it {:.1} MiB; target <= 150 MiB at 10,000 clients); orphans {}, missing {}",
        rss as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        inv.orphans.len(),
        inv.missing.len()
    );
    println!("  reproduce: cargo run --release -- bench inventory");
    sim.kill().await.ok();
    store.close().await;
    Ok(())
}

/// Total requests the simulator has counted under /v2 (reading the ledger is
/// not one of them).
async fn counted_requests(base: &str) -> Result<u64> {
    let url = base.trim_end_matches("/v2").to_owned() + "/sim/ledger";
    let (host, path) = url.trim_start_matches("http://").split_once('/').context("url")?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(host).await?;
    s.write_all(format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let body = out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    // A chunked body: take the JSON object in it.
    let start = body.find('{').context("ledger json")?;
    let end = body.rfind('}').context("ledger json")?;
    let v: serde_json::Value = serde_json::from_str(&body[start..=end])?;
    Ok(v["requests"].as_object().map(|m| m.values().filter_map(|x| x.as_u64()).sum()).unwrap_or(0))
}
