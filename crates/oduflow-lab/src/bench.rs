//! `oduflow bench`: figures, not assertions. Convergence at Vultr's rate limit
//! against the simulator, queue throughput on PostgreSQL, and an inventory
//! pass at scale, each printed with its target and the command that
//! reproduces it. `--smoke` runs each small (the test command does).

use crate::BadInput;
use crate::campaign::{Profile, REALISTIC_PACE};
use anyhow::{Context, Result};
use oduflow_engine::{Clock, EngineConfig, SystemClock, Worker};
use oduflow_model::provider::{BlockRequest, InstanceRequest, Outcome, Provider};
use oduflow_model::*;
use oduflow_sim::{Sim, SimConfig};
use oduflow_store::{IdSource, NewJob, NewReceipt, ReceiptLedger, Store};
use oduflow_vultr::{VultrClient, VultrConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &str = "bench-key";

#[derive(clap::Args)]
pub struct BenchArgs {
    /// convergence | bulk | queue | inventory | budget | dns | all
    #[arg(default_value = "all")]
    which: String,
    /// Small sizes, for the test command's smoke run.
    #[arg(long)]
    smoke: bool,
    /// PostgreSQL server for the queue and inventory benchmarks (each run
    /// gets a fresh database on it; default: ODUFLOW_TEST_PG or the local `test` database).
    #[arg(long)]
    pg: Option<String>,
    /// Worker counts for the queue benchmark.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    workers: Vec<usize>,
    /// Jobs per queue run (default 20,000; 500 with --smoke).
    #[arg(long)]
    jobs: Option<usize>,
    /// Clients the queue's jobs are spread over (default: one per job, so
    /// every job is independent, as the peer's are).
    #[arg(long)]
    clients: Option<usize>,
    /// Runs per queue figure, the median reported (default 3; 1 with --smoke).
    #[arg(long)]
    repeat: Option<usize>,
    /// Leave out the apalis-postgres peer (it is built with cargo on first use).
    #[arg(long)]
    no_peer: bool,
    /// Where the peer's Cargo project is.
    #[arg(long, default_value = "bench/apalis-peer")]
    peer_dir: PathBuf,
    /// Fleet sizes of the bulk-view benchmark, each with the rate it runs at
    /// (requests/s; the simulator's 429 threshold is scaled with it), as
    /// SIZE@RATE.
    #[arg(long, value_delimiter = ',', default_value = "500@25,5000@100")]
    bulk: Vec<String>,
    /// Which fleets of the bulk-view benchmark run: with the view off, on,
    /// or both (before and after).
    #[arg(long, value_parser = ["off", "on", "both"], default_value = "both")]
    bulk_view: String,
    /// The simulator's timings in the bulk-view benchmark: `default`
    /// (section 1's compressed lifecycle), `realistic` (Vultr as reports
    /// show it, in real time, with the workers' production polling), or
    /// `both`, side by side.
    #[arg(long, value_parser = ["default", "realistic", "both"], default_value = "both")]
    bulk_profile: String,
    /// Poll intervals (ms, real time) the realistic profile's fleets run
    /// with, one fleet each, to weigh the default against others (default:
    /// the production default alone).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(i64).range(1..=600_000))]
    realistic_poll_ms: Vec<i64>,
    /// Jobs in flight in all for the convergence and bulk-view benchmarks
    /// (default 32; 8 with --smoke).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    in_flight: Option<u16>,
    /// Clients for the inventory benchmark (default 10,000; 200 with --smoke).
    #[arg(long)]
    inventory_clients: Option<usize>,
    /// Write the figures into this Markdown file (between its
    /// `<!-- bench:begin -->` and `<!-- bench:end -->` markers, or the whole file).
    #[arg(long)]
    write: Option<PathBuf>,
}

impl BenchArgs {
    /// `--in-flight`, or its default.
    fn in_flight(&self) -> usize {
        self.in_flight.map(usize::from).unwrap_or(if self.smoke { 8 } else { 32 })
    }

    fn pace(&self) -> u64 {
        if self.smoke { SMOKE_PACE } else { 1 }
    }

    /// `--bulk` as (clients, rate) pairs.
    fn bulk_sizes(&self) -> Result<Vec<(usize, u32)>> {
        self.bulk
            .iter()
            .map(|s| {
                let parse = || -> Option<(usize, u32)> {
                    let (n, r) = s.split_once('@')?;
                    Some((n.parse().ok().filter(|n| *n > 0)?, r.parse().ok().filter(|r| (1..=1000).contains(r))?))
                };
                parse().ok_or_else(|| BadInput(format!("--bulk {s:?}: use SIZE@RATE, e.g. 500@25")).into())
            })
            .collect()
    }
}

/// The Markdown a benchmark contributes to BENCHMARKS.md.
#[derive(Default)]
pub(crate) struct Section(String);

impl Section {
    pub(crate) fn line(&mut self, l: &str) {
        self.0.push_str(l);
        self.0.push('\n');
    }
}

pub async fn run(a: BenchArgs) -> Result<()> {
    if let Some(pg) = &a.pg {
        // Read by oduflow_store::testing only; set before any task starts.
        #[allow(unsafe_code)] // SAFETY: set before any other thread reads the environment.
        unsafe {
            std::env::set_var("ODUFLOW_TEST_PG", pg)
        };
    }
    let all = a.which == "all";
    if !all && !["convergence", "bulk", "queue", "inventory", "budget", "dns"].contains(&a.which.as_str()) {
        return Err(BadInput(format!(
            "unknown benchmark {:?}: convergence, bulk, queue, inventory, budget, dns or all",
            a.which
        ))
        .into());
    }
    if a.workers.is_empty() || a.workers.contains(&0) {
        return Err(BadInput("--workers takes counts >= 1, e.g. 1,4,16".into()).into());
    }
    let machine = machine().await;
    println!("machine: {}", machine.join("; "));
    let started = Instant::now();
    let mut doc = Section::default();
    // The peer first: in the test command its build overlaps the campaigns'
    // start, and the PostgreSQL benchmarks come after their first seeds.
    let peer = if all || a.which == "queue" { Some(queue_peer(&a).await) } else { None };
    if all || a.which == "convergence" {
        doc.line("## 1. Convergence at Vultr's rate limit\n");
        doc.line("    cargo run --release -- bench convergence\n");
        convergence(if a.smoke { SMOKE_CLIENTS } else { 500 }, a.in_flight(), a.pace(), &mut doc).await?;
    }
    if all || a.which == "bulk" {
        doc.line("\n## 1c. The bulk view: calls per client, off and on\n");
        doc.line("    cargo run --release -- bench bulk\n");
        let sizes: Vec<(usize, u32)> = if a.smoke { vec![(SMOKE_CLIENTS, 25)] } else { a.bulk_sizes()? };
        let views: &[bool] = match a.bulk_view.as_str() {
            "off" => &[false],
            "on" => &[true],
            _ => &[false, true],
        };
        // The realistic profile runs in real time; the smoke run's at the
        // campaign's pace, so that it takes seconds.
        let pace = if a.smoke { REALISTIC_PACE } else { 1 };
        let polls = if a.realistic_poll_ms.is_empty() {
            vec![EngineConfig::POLL_INTERVAL_MS_DEFAULT]
        } else {
            a.realistic_poll_ms.clone()
        };
        let realistic = polls.iter().map(|&poll| (Profile::Realistic, pace, poll));
        let default = std::iter::once((Profile::Default, a.pace(), DEFAULT_PROFILE_POLL_MS));
        let profiles: Vec<(Profile, u64, i64)> = match a.bulk_profile.as_str() {
            "default" => default.collect(),
            "realistic" => realistic.collect(),
            _ => default.chain(realistic).collect(),
        };
        crate::bench_bulk::bulk(&sizes, views, &profiles, a.in_flight(), &mut doc).await?;
    }
    if all || a.which == "budget" {
        doc.line("\n## 1b. The rate budget's own cost\n");
        doc.line("    cargo run --release -- bench budget\n");
        budget(if a.smoke { 200 } else { 2_000 }, &mut doc).await?;
    }
    if all || a.which == "queue" {
        doc.line("\n## 2. Queue throughput (no-op jobs, PostgreSQL)\n");
        doc.line("    cargo run --release -- bench queue\n");
        queue(&a, peer.flatten(), &mut doc).await?;
    }
    if all || a.which == "inventory" {
        doc.line("\n## 3. Inventory at scale\n");
        doc.line("    cargo run --release -- bench inventory\n");
        inventory(a.inventory_clients.unwrap_or(if a.smoke { 200 } else { 10_000 }), &mut doc).await?;
    }
    if all || a.which == "dns" {
        doc.line("\n## 4. DNS calls per client, one zone\n");
        doc.line("    cargo run --release -- bench dns\n");
        crate::bench_dns::dns(if a.smoke { 200 } else { 10_000 }, &mut doc).await?;
    }
    println!("benchmarks took {:.0} s", started.elapsed().as_secs_f64());
    if let Some(path) = &a.write {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut out = Section::default();
        out.line(&format!("Measured by `oduflow {}` ({:.0} s).\n", args.join(" "), started.elapsed().as_secs_f64()));
        out.line("Machine:\n");
        for m in &machine {
            out.line(&format!("- {m}"));
        }
        out.line("");
        out.0.push_str(&doc.0);
        write_between_markers(path, &out.0)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn write_between_markers(path: &Path, body: &str) -> Result<()> {
    const BEGIN: &str = "<!-- bench:begin -->";
    const END: &str = "<!-- bench:end -->";
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => format!("{}{BEGIN}\n{body}{}", &old[..b], &old[e..]),
        _ => format!("{BEGIN}\n{body}{END}\n"),
    };
    std::fs::write(path, new).with_context(|| format!("writing {}", path.display()))
}

/// What the figures were measured on.
async fn machine() -> Vec<String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or("?".into(), |kib| format!("{:.1}", kib / 1024.0 / 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let date = std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().ok();
    let date = date.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
    let commit = std::process::Command::new("git").args(["rev-parse", "--short", "HEAD"]).output().ok();
    let commit = commit.filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let pg = pg_version().await.unwrap_or_else(|e| format!("PostgreSQL not reachable ({e})"));
    vec![
        format!("{cores} cores ({cpu}), {mem_gib} GiB memory, Linux {}", kernel.trim()),
        pg,
        format!("{} at start, {date}{}", load(), commit.map(|c| format!(", commit {c}")).unwrap_or_default()),
        format!(
            "oduflow {}, PostgreSQL on the same host over TCP 127.0.0.1, default settings (fsync and synchronous_commit on)",
            if cfg!(debug_assertions) {
                "debug build (figures not comparable)"
            } else {
                "release build (`cargo run --release`)"
            }
        ),
    ]
}

async fn pg_version() -> Result<String> {
    oduflow_store::testing::pg_version().await.map_err(anyhow::Error::from_boxed)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| format!("load {}", l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")))
        .unwrap_or_default()
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

/// A simulator and a client on it, neither limiting the rate to speak of.
async fn unlimited_sim() -> Result<(oduflow_sim::SimHandle, Arc<VultrClient>)> {
    let cfg = SimConfig { rate_per_sec: 1_000_000, ..SimConfig::default() }.with_key(KEY);
    let sim = Sim::start(cfg, "127.0.0.1:0".parse()?).await?;
    let p = vultr(&sim.base_url, 1_000_000)?;
    Ok((sim, p))
}

async fn settle<P: Provider>(w: &Worker<P>) -> Result<()> {
    let (_tx, rx) = tokio::sync::watch::channel(false);
    w.run(true, rx).await?;
    Ok(())
}

/// One convergence run's figures.
pub(crate) struct Converged {
    pub processes: usize,
    pub provision_s: f64,
    pub delete_s: f64,
    pub calls_provision: u64,
    pub calls_total: u64,
    pub r429: u64,
    pub busiest_second: u64,
    pub counts: Vec<(ClientStatus, i64)>,
    pub routes: String,
    /// Each client's time from its creation to `ready`, seconds (the clients
    /// ready once provisioning settled), sorted.
    pub ready_s: Vec<f64>,
    /// Clients blocked once provisioning settled, by reason.
    pub blocked: std::collections::BTreeMap<String, u64>,
    /// The largest peak RSS of any worker process, KiB.
    pub peak_rss_kib: u64,
    /// Each worker process's last line (runs, and what the bulk view
    /// cost), provisioning then deletion.
    pub worker_lines: Vec<String>,
}

/// One convergence run's settings.
#[derive(Clone, Copy)]
pub(crate) struct Fleet {
    pub n: usize,
    pub processes: usize,
    pub in_flight: usize,
    /// The rate budget (requests/s); the simulator answers 429 above
    /// `rate * 30 / 25` (Vultr's 30 at the default 25).
    pub rate: u32,
    /// The bulk view (shared listings) on or off.
    pub bulk: bool,
    /// The simulator's timings.
    pub profile: Profile,
    /// The workers' poll interval at real time (divided by the pace).
    pub poll_ms: i64,
    /// Every lifecycle time and the poll interval divided by this: 1, or
    /// faster in the smoke run.
    pub pace: u64,
}

/// The smoke run's lifecycles and polls are this many times shorter. Its
/// convergence and bulk runs wait on them, not on the CPU: at the real
/// pace the four took about 70 s of the test command, holding back one of
/// its PostgreSQL campaigns. Smoke figures are printed, never published.
pub(crate) const SMOKE_PACE: u64 = 4;

/// Clients of the smoke run's convergence and bulk runs (four runs), which
/// wait on Vultr's rate and the lifecycles: at 20 they were 50 of the smoke
/// run's 63 s on an idle machine, at 10 the run takes 45 s. The test
/// command's second PostgreSQL campaign waits for it.
const SMOKE_CLIENTS: usize = 10;

/// Provisions then deletes `n` clients with 1 and with 4 worker processes
/// sharing one rate budget (one PostgreSQL database), against a simulator
/// counting Vultr's limit (30 in any second per source address).
/// `in_flight` jobs at once in all, split over the processes (each worker
/// process's pool holds 2 connections per job, so the smoke run keeps this
/// small beside the other tests' databases).
async fn convergence(n: usize, in_flight: usize, pace: u64, out: &mut Section) -> Result<()> {
    let rate = oduflow_vultr::DEFAULT_RATE_PER_SEC;
    let mut runs = Vec::new();
    for processes in [1, 4] {
        let r = converge_with(Fleet {
            n,
            processes,
            in_flight,
            rate,
            bulk: true,
            profile: Profile::Default,
            poll_ms: DEFAULT_PROFILE_POLL_MS,
            pace,
        })
        .await?;
        let bound_s = r.calls_total as f64 / f64::from(rate);
        let wall = r.provision_s + r.delete_s;
        println!(
            "convergence: {n} clients provisioned then deleted by {processes} worker process(es) sharing one budget at {rate}/s"
        );
        println!("  final states: {:?}", r.counts);
        println!(
            "  provisioning: {} calls = {:.2} per client, {:.1} s; deletion: {} calls = {:.2} per client, {:.1} s",
            r.calls_provision,
            r.calls_provision as f64 / n as f64,
            r.provision_s,
            r.calls_total - r.calls_provision,
            (r.calls_total - r.calls_provision) as f64 / n as f64,
            r.delete_s
        );
        println!(
            "  wall {wall:.1} s vs rate-limit bound {bound_s:.1} s (all calls / {rate} per s) = {:.2}x (target <= 1.10x); \
             429s: {} (target 0); busiest second at the simulator: {} requests (Vultr's limit 30)",
            wall / bound_s,
            r.r429,
            r.busiest_second
        );
        println!("  calls by route: {}", r.routes);
        runs.push(r);
    }
    println!("  reproduce: cargo run --release -- bench convergence");
    out.line(&format!(
        "{n} clients provisioned, then deleted, by `oduflow worker` processes on one PostgreSQL database sharing one rate \
         budget at the default {rate} requests/s, against the simulator counting Vultr's limit (429 above 30 requests in \
         any one second from one address). Lifecycle: 2 s pending, 2 s installing, 1 s block pending, 0.5 s post-create \
         404 window and listing lag, 0.5 s attach lock; poll interval 2 s (each a quarter of that in the smoke run); {in_flight} jobs in flight in all, split evenly over the processes. The rate-limit bound is all calls / {rate} per s.\n"
    ));
    out.line("| processes | calls per provisioned client | calls per deleted client | wall time vs rate-limit bound (target ≤ 1.10×) | 429s (target 0) | busiest second (limit 30) | final states |");
    out.line("|---|---|---|---|---|---|---|");
    for r in &runs {
        let bound_s = r.calls_total as f64 / f64::from(rate);
        let wall = r.provision_s + r.delete_s;
        out.line(&format!(
            "| {} | {:.2} | {:.2} | **{wall:.1} s vs {bound_s:.1} s = {:.2}×** ({}) | **{}** | {} | {:?} |",
            r.processes,
            r.calls_provision as f64 / n as f64,
            (r.calls_total - r.calls_provision) as f64 / n as f64,
            wall / bound_s,
            if wall / bound_s <= 1.10 { "met" } else { "not met" },
            r.r429,
            r.busiest_second,
            r.counts
        ));
    }
    out.line("");
    for r in &runs {
        out.line(&format!("Calls by route, {} process(es): {}.\n", r.processes, r.routes));
    }
    Ok(())
}

pub(crate) async fn converge_with(f: Fleet) -> Result<Converged> {
    let Fleet { n, processes, in_flight, rate, bulk, profile, poll_ms, pace } = f;
    let poll = (poll_ms / pace as i64).to_string();
    let sim_cfg = fleet_sim(profile, rate, pace);
    let sim = Sim::start(sim_cfg.with_key(KEY), "127.0.0.1:0".parse()?).await?;
    let url = oduflow_store::testing::fresh_pg_url().await;
    let store = Store::connect(&url, true).await?;
    store.migrate().await?;
    let state = tempfile::tempdir()?;
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    for i in 0..n {
        store.client_create(&ClientName::parse(&format!("b{i}"))?, &spec, "bench", SystemClock.now_ms(), 10).await?;
    }
    let fleet = || -> Result<Vec<tokio::process::Child>> {
        (0..processes)
            .map(|_| {
                Ok(tokio::process::Command::new(std::env::current_exe()?)
                    .args(["worker", "--until-settled", "--concurrency", &(in_flight / processes).max(1).to_string()])
                    .env("ODUFLOW_DATABASE_URL", &url)
                    .env("ODUFLOW_VULTR_URL", &sim.base_url)
                    .env("VULTR_API_KEY", KEY)
                    .env("ODUFLOW_POLL_INTERVAL_MS", &poll)
                    .env("ODUFLOW_STATE_DIR", state.path())
                    .env("ODUFLOW_LOG", "error")
                    .env("ODUFLOW_RATE_PER_SEC", rate.to_string())
                    .env("ODUFLOW_BULK_VIEW", bulk.to_string())
                    .env("ODUFLOW_PRINT_PEAK_RSS", "1")
                    .env_remove("ODUFLOW_RATE_GROUP")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()?)
            })
            .collect()
    };
    let lines = std::sync::Mutex::new(Vec::new());
    let wait = |children: Vec<tokio::process::Child>| async {
        let mut rss = 0u64;
        for c in children {
            let o = c.wait_with_output().await?;
            let err = String::from_utf8_lossy(&o.stderr);
            anyhow::ensure!(o.status.success(), "a worker failed: {err}");
            let peak =
                err.lines().filter_map(|l| l.strip_prefix("oduflow: peak RSS ")?.strip_suffix(" KiB")?.parse().ok());
            rss = rss.max(peak.max().unwrap_or(0));
            let last = err.lines().filter(|l| l.starts_with("oduflow worker: stopped")).map(str::to_owned);
            lines.lock().expect("lines").extend(last);
        }
        Ok::<u64, anyhow::Error>(rss)
    };
    let t = Instant::now();
    let rss_provision = wait(fleet()?).await?;
    let provision_s = t.elapsed().as_secs_f64();
    let calls_provision: u64 = sim.ledger().requests.values().sum();
    let (ready_s, blocked) = provisioned(&store).await?;
    for i in 0..n {
        store.client_delete(&format!("b{i}"), "bench", SystemClock.now_ms(), 10).await?;
    }
    let t = Instant::now();
    let rss_delete = wait(fleet()?).await?;
    let delete_s = t.elapsed().as_secs_f64();
    let l = sim.ledger();
    let counts = store.client_status_counts().await?;
    let mut routes: Vec<_> = l.requests.iter().collect();
    routes.sort_by(|a, b| b.1.cmp(a.1));
    let routes = routes.iter().map(|(r, c)| format!("{r} {c}")).collect::<Vec<_>>().join(", ");
    store.close().await;
    drop_db(&url).await;
    sim.shutdown().await;
    Ok(Converged {
        processes,
        provision_s,
        delete_s,
        calls_provision,
        calls_total: l.requests.values().sum(),
        r429: l.responses_429_rate_limit + l.responses_429_fault,
        busiest_second: l.busiest_second,
        counts,
        routes,
        ready_s,
        blocked,
        peak_rss_kib: rss_provision.max(rss_delete),
        worker_lines: lines.into_inner().expect("lines"),
    })
}

/// The workers' poll interval under the default profile's compressed
/// lifecycle (real time; divided by the pace like the lifecycle).
const DEFAULT_PROFILE_POLL_MS: i64 = 2_000;

/// The simulator a fleet runs against: its profile's timings at its pace,
/// and a 429 threshold scaled with the rate (Vultr's 30 at the default 25).
fn fleet_sim(profile: Profile, rate: u32, pace: u64) -> SimConfig {
    let rate_per_sec = oduflow_sim::DEFAULT_RATE_PER_SEC * rate / oduflow_vultr::DEFAULT_RATE_PER_SEC;
    match profile {
        Profile::Default => SimConfig {
            rate_per_sec,
            // Compressed: pending, then installing, then ok; a new
            // resource answers 404 and is missing from listings briefly.
            pending_ms: 2_000 / pace,
            installing_ms: 2_000 / pace,
            block_pending_ms: 1_000 / pace,
            get_404_window_ms: 500 / pace,
            list_lag_ms: 500 / pace,
            attach_lock_ms: 500 / pace,
            ..SimConfig::default()
        },
        // Vultr as reports show it, at the pace (the workers' readiness wait
        // follows their poll interval).
        Profile::Realistic => SimConfig { rate_per_sec, ..SimConfig::default() }.realistic(pace),
    }
}

/// What provisioning left: each ready client's time from its creation to
/// `ready` (seconds, sorted), and the blocked clients by reason.
async fn provisioned(store: &Store) -> Result<(Vec<f64>, std::collections::BTreeMap<String, u64>)> {
    let clients = store.client_list().await?;
    let mut ready_s: Vec<f64> = clients
        .iter()
        .filter(|c| c.infra.status == ClientStatus::Ready)
        .map(|c| (c.infra.updated_ms - c.created_ms) as f64 / 1000.0)
        .collect();
    ready_s.sort_by(f64::total_cmp);
    let mut blocked = std::collections::BTreeMap::new();
    for c in &clients {
        if let Some(r) = c.infra.blocked_reason {
            *blocked.entry(r.as_str().to_owned()).or_default() += 1;
        }
    }
    Ok((ready_s, blocked))
}

/// What one slot reservation costs (the statement every request to Vultr
/// waits for), from 1 and from 4 processes at once (separate pools), on both
/// stores, next to one simulator call over loopback.
async fn budget(n: usize, out: &mut Section) -> Result<()> {
    use oduflow_model::rate::RateBudget;
    let dir = tempfile::tempdir()?;
    let sqlite = oduflow_store::testing::sqlite_url(dir.path());
    let pg = oduflow_store::testing::fresh_pg_url().await;
    out.line(&format!(
        "{n} reservations per process, back to back (an interval of 1 µs, so none waits): the latency of the one \
         statement each request to Vultr runs before it is sent. For scale: a Vultr call is a TLS request over the \
         internet (tens to hundreds of ms); the simulator over loopback is the floor.\n"
    ));
    out.line("| store | processes (one pool each, in one OS process) | p50 | p99 | reservations/s in all |");
    out.line("|---|---|---|---|---|");
    for (name, url) in [("SQLite", &sqlite), ("PostgreSQL", &pg)] {
        let first = Store::connect(url, true).await?;
        first.migrate().await?;
        for processes in [1usize, 4] {
            let mut tasks = Vec::new();
            let t = Instant::now();
            for p in 0..processes {
                let store = Store::connect(url, false).await?;
                let b = oduflow_store::SharedBudget::new(store, "bench", &format!("bench/{p}")).map_err(BadInput)?;
                tasks.push(tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(n);
                    for _ in 0..n {
                        let s = Instant::now();
                        b.reserve(Duration::from_micros(1)).await.map_err(|e| anyhow::anyhow!(e))?;
                        lat.push(s.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok::<_, anyhow::Error>(lat)
                }));
            }
            let mut lat = Vec::new();
            for t in tasks {
                lat.extend(t.await??);
            }
            let secs = t.elapsed().as_secs_f64();
            lat.sort_by(|a, b| a.total_cmp(b));
            let pct = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
            println!(
                "budget: {name}, {processes} process(es): p50 {:.3} ms, p99 {:.3} ms, {:.0} reservations/s",
                pct(0.5),
                pct(0.99),
                lat.len() as f64 / secs
            );
            out.line(&format!(
                "| {name} | {processes} | {:.3} ms | {:.3} ms | {:.0} |",
                pct(0.5),
                pct(0.99),
                lat.len() as f64 / secs
            ));
        }
        first.close().await;
    }
    drop_db(&pg).await;
    // The floor of a provider call: the simulator over loopback.
    let (sim, p) = unlimited_sim().await?;
    let mut lat = Vec::new();
    for _ in 0..200 {
        let s = Instant::now();
        p.account_get().await?;
        lat.push(s.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    println!("budget: one simulator call over loopback (budget included): p50 {:.3} ms", lat[100]);
    out.line(&format!(
        "| (a simulator call over loopback, in-memory budget) | 1 | {:.3} ms | {:.3} ms | — |",
        lat[100], lat[197]
    ));
    sim.shutdown().await;
    Ok(())
}

/// One queue run: `jobs` no-op jobs over `clients` clients, drained by one
/// worker process running `workers` jobs at once. Returns jobs per second.
async fn queue_once(jobs: usize, clients: usize, workers: usize) -> Result<f64> {
    let url = oduflow_store::testing::fresh_pg_url().await;
    let store = Store::connect_sized(&url, true, 2 * workers as u32 + 4).await?;
    store.migrate().await?;
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    let clients = clients.clamp(1, jobs.max(1));
    // Setup, not measured, 8 at a time: clients whose own jobs are settled
    // (created and deleted before any run), then the jobs.
    let ids = Arc::new(tokio::sync::Mutex::new(vec![None; clients]));
    let mut tasks = tokio::task::JoinSet::new();
    for part in 0..8 {
        let (store, ids, spec) = (store.clone(), ids.clone(), spec.clone());
        tasks.spawn(async move {
            for i in (part..clients).step_by(8) {
                let c = store.client_create(&ClientName::parse(&format!("q{i}"))?, &spec, "bench", 0, 3).await?;
                store.client_delete(&format!("q{i}"), "bench", 0, 3).await?;
                ids.lock().await[i] = Some(c.id);
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let ids: Arc<Vec<ClientId>> = Arc::new(ids.lock().await.iter().map(|c| c.clone().expect("created")).collect());
    // The provider is the one every run has: the Vultr client, here on a
    // simulator. No-op jobs (and the setup's clients, deleted before any
    // create) send it nothing, so the figure is the queue's alone: the
    // simulator's ledger checks that at the end (setup included).
    let (sim, p) = unlimited_sim().await?;
    let cfg = EngineConfig { concurrency: workers, idle_ms: 5, ..EngineConfig::default() };
    let w = Worker::new(store.clone(), p.clone(), cfg.clone(), Arc::new(SystemClock));
    let setup = Worker::new(store.clone(), p, EngineConfig { concurrency: 16, ..cfg }, Arc::new(SystemClock));
    settle(&setup).await?;
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
    // The setup's finished jobs are dead rows at the head of the queue's
    // index; a production queue has autovacuum for them, so vacuum here
    // rather than time a scan over them.
    oduflow_store::testing::vacuum_analyze(&store, &["jobs", "infra"]).await.map_err(anyhow::Error::from_boxed)?;
    let t = Instant::now();
    settle(&w).await?;
    let s = t.elapsed().as_secs_f64();
    let q = store.queue_status(SystemClock.now_ms()).await?;
    // Setup left one stale provision job and one done deprovision job per client.
    anyhow::ensure!(q.queued == 0 && q.failed == 0 && q.done as usize == jobs + clients, "queue run ended with {q:?}");
    let asked = sim.ledger().request_log.len();
    anyhow::ensure!(asked == 0, "the queue run sent {asked} provider requests: the figure is not the queue's alone");
    sim.shutdown().await;
    store.close().await;
    drop_db(&url).await;
    Ok(jobs as f64 / s)
}

async fn drop_db(url: &str) {
    oduflow_store::testing::drop_pg_database(url).await;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The apalis-postgres peer, a separate Cargo project (bench/apalis-peer):
/// built here, run as a child process on a fresh database of the same server.
/// A full run builds it optimised; the smoke run (the test command's, whose
/// figures are not compared) in cargo's dev profile: 70 s from nothing
/// instead of 154 s on two cores, measured. `scripts/test` builds it before
/// the tests, so that here cargo finds it fresh.
struct Peer {
    bin: PathBuf,
}

impl Peer {
    async fn build(dir: &Path, release: bool) -> Result<Peer> {
        let manifest = dir.join("Cargo.toml");
        anyhow::ensure!(
            manifest.exists(),
            "{} not found (run from the repository's root, or pass --peer-dir)",
            manifest.display()
        );
        // Canonical, so that every run finds the same build
        // (`crates/oduflow/../../bench/apalis-peer` is another path to it,
        // and cargo then built the whole peer again).
        let dir = &dir.canonicalize()?;
        let manifest = dir.join("Cargo.toml");
        let target = dir.join("target");
        let profile = if release { "release" } else { "dev" };
        println!("queue: building the apalis-postgres peer ({}, {profile} profile) ...", dir.display());
        let mut cargo = tokio::process::Command::new("cargo");
        cargo.args(["build", "--profile", profile, "--quiet", "--manifest-path"]).arg(&manifest);
        // Run from a test, this process carries cargo's and nextest's
        // variables for the oduflow crate (CARGO_PKG_*, LD_LIBRARY_PATH,
        // RUSTUP_TOOLCHAIN, ...); with them cargo found a peer built from a
        // shell stale and built it all again (63 s), and the other way round.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            let inherited = (k.starts_with("CARGO") && k != "CARGO_HOME")
                || k.starts_with("NEXTEST")
                || k.starts_with("RUSTUP_TOOLCHAIN")
                || k == "LD_LIBRARY_PATH"
                || k == "RUST_RECURSION_COUNT";
            if inherited {
                cargo.env_remove(k.as_ref());
            }
        }
        let st = cargo.env("CARGO_TARGET_DIR", &target).status().await?;
        anyhow::ensure!(st.success(), "building the peer failed ({st})");
        Ok(Peer { bin: target.join(if release { "release" } else { "debug" }).join("apalis-peer") })
    }

    async fn run(&self, jobs: usize, workers: usize) -> Result<f64> {
        let url = oduflow_store::testing::fresh_pg_url().await;
        let out = tokio::process::Command::new(&self.bin)
            .args(["--database-url", &url, "--jobs", &jobs.to_string(), "--workers", &workers.to_string()])
            .args(["--mode", "workers", "--poll-ms", "5"])
            .output()
            .await?;
        drop_db(&url).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(out.status.success(), "apalis-peer failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        let rate = stdout.split_whitespace().find_map(|w| w.strip_prefix("jobs_per_s="));
        Ok(rate.context("apalis-peer printed no jobs_per_s")?.parse()?)
    }
}

/// pgbench's single-row INSERT rate with `clients` clients: the ceiling.
async fn pgbench(bin: &Path, clients: usize, secs: u64) -> Result<f64> {
    let url = oduflow_store::testing::fresh_pg_url().await;
    // Shaped like a queue row: id, kind, a ~200-byte JSON payload, a time.
    oduflow_store::testing::create_ceiling_table(&url).await.map_err(anyhow::Error::from_boxed)?;
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("insert.sql");
    let pad = "x".repeat(150);
    std::fs::write(
        &script,
        format!(
            "INSERT INTO ceiling (kind, payload) VALUES ('noop', '{{\"id\":12345,\"tenant\":\"tenant-0001\",\"pad\":\"{pad}\"}}');\n"
        ),
    )?;
    let out = tokio::process::Command::new(bin)
        .args(["-n", "-f"])
        .arg(&script)
        .args(["-c", &clients.to_string(), "-j", &clients.min(2).to_string(), "-T", &secs.to_string(), &url])
        .output()
        .await?;
    drop_db(&url).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "pgbench failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let tps = stdout.lines().find_map(|l| l.strip_prefix("tps = ")).and_then(|l| l.split_whitespace().next());
    Ok(tps.context("pgbench printed no tps")?.parse()?)
}

fn find_pgbench() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("pgbench")).find(|p| p.exists()));
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| Some(e.ok()?.path().join("bin/pgbench")))
            .filter(|p| p.exists())
            .collect();
        found.sort();
        found.pop()
    })
}

/// No-op jobs per second on PostgreSQL with 1, 4 and 16 workers; in the same
/// run the apalis-postgres peer on the same server and pgbench's ceiling.
/// The apalis-postgres peer built, or why not (printed).
async fn queue_peer(a: &BenchArgs) -> Option<Peer> {
    if a.no_peer {
        println!("queue: PEER SKIPPED (--no-peer): no apalis-postgres figures in this run");
        return None;
    }
    match Peer::build(&a.peer_dir, !a.smoke).await {
        Ok(p) => Some(p),
        Err(e) => {
            println!("queue: PEER SKIPPED: {e:#}");
            None
        }
    }
}

async fn queue(a: &BenchArgs, peer: Option<Peer>, out: &mut Section) -> Result<()> {
    let jobs = a.jobs.unwrap_or(if a.smoke { 500 } else { 20_000 });
    let clients = a.clients.unwrap_or(jobs);
    let repeat = a.repeat.unwrap_or(if a.smoke { 1 } else { 3 }).max(1);
    let secs = if a.smoke { 2 } else { 10 };
    println!("queue: {jobs} no-op jobs on PostgreSQL over {clients} clients, median of {repeat} runs per figure");
    let pgb = find_pgbench();
    if pgb.is_none() {
        println!("  PGBENCH SKIPPED: pgbench not found on PATH or under /usr/lib/postgresql/*/bin");
    }
    let fig = |v: Option<f64>| v.map_or("skipped".to_owned(), |v| format!("{v:.0}"));
    out.line("| workers | oduflow jobs/s | apalis-postgres jobs/s | pgbench INSERT tps (ceiling) | oduflow ÷ peer (target ≥ 1) | oduflow ÷ ceiling (target ≥ 0.40) |");
    out.line("|---|---|---|---|---|---|");
    let mut met = (true, true);
    for &w in &a.workers {
        let mut ours = vec![];
        let mut theirs = vec![];
        for _ in 0..repeat {
            ours.push(queue_once(jobs, clients, w).await?);
            if let Some(p) = &peer {
                theirs.push(p.run(jobs, w).await?);
            }
        }
        let ours_all = ours.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(", ");
        let theirs_all = theirs.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(", ");
        let (ours, theirs) = (median(ours), (!theirs.is_empty()).then(|| median(theirs)));
        let ceiling = match &pgb {
            Some(b) => Some(pgbench(b, w, secs).await?),
            None => None,
        };
        let vs_peer = theirs.map(|t| ours / t);
        let vs_ceiling = ceiling.map(|c| ours / c);
        met.0 &= vs_peer.is_none_or(|r| r >= 1.0);
        met.1 &= vs_ceiling.is_none_or(|r| r >= 0.40);
        let ratio = |r: Option<f64>| r.map_or("—".to_owned(), |r| format!("{r:.2}"));
        println!(
            "  workers {w:>2}: oduflow {ours:.0} jobs/s [{ours_all}]; apalis-postgres {} [{theirs_all}]; pgbench ceiling {} tps; ratios {} / {}",
            fig(theirs),
            fig(ceiling),
            ratio(vs_peer),
            ratio(vs_ceiling)
        );
        out.line(&format!(
            "| {w} | **{ours:.0}** ({ours_all}) | {} ({theirs_all}) | {} | {} | {} |",
            fig(theirs),
            fig(ceiling),
            ratio(vs_peer),
            ratio(vs_ceiling)
        ));
    }
    out.line("");
    out.line(&format!(
        "Targets: at or above the peer at every concurrency — **{}**; at least 40% of the pgbench ceiling — **{}**.",
        if peer.is_none() {
            "not measured"
        } else if met.0 {
            "met"
        } else {
            "not met"
        },
        if pgb.is_none() {
            "not measured"
        } else if met.1 {
            "met"
        } else {
            "not met"
        },
    ));
    // The same jobs on few clients: per-client serialization at work (a
    // busy client's jobs are skipped, not waited on).
    if clients > 64 && !a.smoke {
        let w = a.workers.iter().copied().max().unwrap_or(16);
        let few = queue_once(jobs, 64, w).await?;
        println!("  contention: {jobs} jobs over 64 clients, {w} workers: {few:.0} jobs/s");
        out.line(&format!(
            "With the same {jobs} jobs on only 64 clients (each client runs one job at a time, so a quarter of them are busy at 16 workers and their jobs are skipped): {few:.0} jobs/s at {w} workers."
        ));
    }
    println!("  reproduce: cargo run --release -- bench queue");
    Ok(())
}

/// The inventory's setup, in parallel: each client with a VM and a volume
/// created through the API and recorded on receipts, as the engine would
/// have.
async fn inventory_setup(n: usize, store: &Store, setup: &Arc<VultrClient>) -> Result<()> {
    let ledger = ReceiptLedger::new(store.clone());
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    let fp = KeyFingerprint::of_key(&secrecy::SecretString::from(KEY.to_owned()));
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (store, ledger, setup, spec, fp, sem) =
            (store.clone(), ledger.clone(), setup.clone(), spec.clone(), fp.clone(), sem.clone());
        tasks.spawn(async move {
            let _permit = sem.acquire().await?;
            let c = store.client_create(&ClientName::parse(&format!("i{i}"))?, &spec, "bench", 0, 3).await?;
            for kind in [ResourceKind::Vm, ResourceKind::Volume] {
                let label = Label::new_dispatch(&c.id, kind);
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
                        .instance_create(&InstanceRequest {
                            region: "ewr".into(),
                            plan: "vc2-1c-1gb".into(),
                            image: oduflow_model::ImageSource::Os(2284),
                            label,
                            server: oduflow_model::ServerSpec { hostname: "h".into(), ..Default::default() },
                        })
                        .await
                    {
                        Outcome::Accepted(id) => id.0,
                        o => anyhow::bail!("setup create: {o:?}"),
                    },
                    _ => match setup
                        .block_create(&BlockRequest {
                            region: "ewr".into(),
                            size_gb: 40,
                            block_type: VolumeType::HighPerf,
                            label,
                        })
                        .await
                    {
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
    Ok(())
}

/// reconcile --all over `n` clients (2n resources), the simulator in another
/// process so the figure is the inventory's own memory.
async fn inventory(n: usize, out: &mut Section) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let exe = std::env::current_exe()?;
    let mut sim = tokio::process::Command::new(exe)
        .args([
            "sim",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--rate",
            "1000000",
            "--pending-ms",
            "0",
            "--get-404-window-ms",
            "0",
            "--list-lag-ms",
            "0",
        ])
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
    let t = Instant::now();
    inventory_setup(n, &store, &setup).await?;
    let setup_s = t.elapsed().as_secs_f64();
    store.close().await;
    // The pass itself: `oduflow reconcile --all` in a child process, so its
    // peak RSS is the command's own (it reports it on exit).
    let before = counted_requests(&base).await?;
    let t = Instant::now();
    let child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["reconcile", "--all", "--json"])
        .env("ODUFLOW_DATABASE_URL", &url)
        .env("ODUFLOW_VULTR_URL", &base)
        .env("VULTR_API_KEY", KEY)
        .env_remove("ODUFLOW_RATE_PER_SEC")
        .env("ODUFLOW_PRINT_PEAK_RSS", "1")
        .env("ODUFLOW_LOG", "error")
        .output()
        .await?;
    let secs = t.elapsed().as_secs_f64();
    let calls = counted_requests(&base).await? - before;
    let stderr = String::from_utf8_lossy(&child.stderr);
    anyhow::ensure!(child.status.success(), "reconcile --all failed: {stderr}");
    let inv: serde_json::Value = serde_json::from_slice(&child.stdout).context("reconcile --all --json output")?;
    let rss_kib: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("oduflow: peak RSS ")?.strip_suffix(" KiB")?.parse().ok())
        .context("reconcile --all reported no peak RSS")?;
    let rss = rss_kib / 1024.0;
    let listed = inv["instances_listed"].as_u64().unwrap_or(0) + inv["blocks_listed"].as_u64().unwrap_or(0);
    let count = |k: &str| inv[k].as_array().map_or(0, |a| a.len());
    println!("inventory: reconcile --all over {n} clients ({listed} resources listed; setup {setup_s:.0} s)");
    println!(
        "  provider calls {calls} (list pages of 500 at the default rate; one GET per resource would be {}), {secs:.2} s",
        2 * n
    );
    println!(
        "  peak RSS of the reconcile --all process {rss:.1} MiB (target <= 150 MiB at 10,000 clients); orphans {}, missing {}, unrecorded {}",
        count("orphans"),
        count("missing"),
        count("unrecorded")
    );
    println!("  reproduce: cargo run --release -- bench inventory");
    out.line(&format!(
        "`oduflow reconcile --all` over {n} clients ({} resources: a VM and a volume each, created through the simulator's API \
         and recorded on receipts), PostgreSQL, the simulator in another process (unlimited; the pass at the default 25 requests/s), pages of 500. The pass runs as \
         its own process; its peak RSS is its own VmHWM.\n",
        2 * n
    ));
    out.line("| figure | target | measured |");
    out.line("|---|---|---|");
    out.line(&format!("| provider calls | list pages only (one GET per resource would be {}) | **{calls}** ({listed} resources listed) |", 2 * n));
    out.line(&format!("| wall time of the pass | — | {secs:.2} s |"));
    out.line(&format!("| peak RSS of the process | ≤ 150 MiB at 10,000 clients | **{rss:.1} MiB** at {n} clients |"));
    out.line(&format!(
        "| findings | none | {} orphans, {} missing, {} unrecorded |",
        count("orphans"),
        count("missing"),
        count("unrecorded")
    ));
    sim.kill().await.ok();
    drop_db(&url).await;
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
