//! `oduflow demo`: the embedded default end to end. A fresh SQLite file, the
//! Vultr simulator in-process with faults switched on (lost responses, 5xx,
//! 429 bursts, listing lag, post-create 404s), the real Vultr adapter and
//! engine: N clients provisioned, then deleted, with a progress line and a
//! summary that checks the simulator's ledger: one create per operation key.

use crate::config::{BadInput, Config};
use crate::output::outln;
use anyhow::Result;
use oduflow_engine::{Clock, SystemClock, Worker};
use oduflow_model::*;
use oduflow_sim::{Faults, Sim, SimConfig};
use oduflow_store::Store;
use oduflow_vultr::{VultrClient, VultrConfig};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Demo faults: frequent enough that a 20-client run meets each kind.
fn demo_faults() -> Faults {
    Faults {
        lost_drop: 0.03,
        lost_5xx: 0.03,
        lost_stall: 0.01,
        error_5xx: 0.03,
        burst_429: 0.005,
        stall_ms: 2_500,
        ..Faults::default()
    }
}

/// The simulator (its faults on or off) and a worker through the real
/// Vultr adapter, with the demo's short intervals.
async fn start(
    cfg: &Config,
    store: &Store,
    seed: u64,
    faults: bool,
) -> Result<(oduflow_sim::SimHandle, Worker<VultrClient>, oduflow_engine::SharedClock)> {
    let key = "demo-key-not-secret";
    let sim = Sim::start(
        SimConfig {
            seed,
            faults: if faults { demo_faults() } else { Faults::default() },
            pending_ms: 500,
            installing_ms: 500,
            get_404_window_ms: 400,
            list_lag_ms: 400,
            ..SimConfig::default()
        }
        .with_key(key),
        "127.0.0.1:0".parse()?,
    )
    .await?;
    let provider = Arc::new(VultrClient::new(VultrConfig {
        base_url: sim.base_url.clone(),
        request_timeout_ms: 1_500,
        backoff_base_ms: 50,
        ..VultrConfig::new(secrecy::SecretString::from(key.to_owned()))
    })?);
    let mut engine = cfg.engine();
    engine.poll_interval_ms = 150;
    engine.retry_base_ms = 100;
    engine.observations_max = 40;
    engine.concurrency = 8;
    let clock: oduflow_engine::SharedClock = oduflow_engine::DbClock::start(store).await?;
    let worker = Worker::new(store.clone(), provider, engine, clock.clone());
    Ok((sim, worker, clock))
}

pub async fn run(cfg: &Config, clients: usize, seed: u64, faults: bool) -> Result<()> {
    if clients == 0 || clients > 10_000 {
        return Err(BadInput("--clients must be between 1 and 10000".into()).into());
    }
    let (db, store) = fresh_store().await?;

    let (sim, worker, clock) = start(cfg, &store, seed, faults).await?;
    outln!(
        "oduflow demo: {clients} clients, SQLite at {}, simulator at {} (seed {seed}, faults {})",
        db.display(),
        sim.base_url,
        if faults { "on" } else { "off" }
    )?;
    let started = Instant::now();

    let profile = announce_profile(cfg)?;
    for i in 0..clients {
        let name = ClientName::parse(&format!("demo-{i:04}"))?;
        let spec = profile.resolve(&name, &cfg.spec_defaults)?;
        store.client_create(&name, &spec, &cfg.actor, clock.now_ms(), cfg.attempts_max).await?;
    }
    drive(&store, &worker, "provisioning").await?;
    let provisioned = store.client_status_counts().await?;
    let blocked_after_provisioning = blocked_lines(&store).await?;
    for c in store.client_list().await? {
        store.client_delete(&c.name, &cfg.actor, clock.now_ms(), cfg.attempts_max).await?;
    }
    drive(&store, &worker, "deleting").await?;

    // What the simulator's ledger says, per operation key.
    let ledger = sim.ledger();
    let receipts = store.receipts_all().await?;
    let mut per_key: BTreeMap<String, u64> = BTreeMap::new();
    for r in &receipts {
        if r.resource_kind != ResourceKind::Attach {
            per_key.insert(
                r.operation_key.to_string(),
                ledger.creates_per_label.get(r.label.as_str()).copied().unwrap_or(0),
            );
        }
    }
    let untracked: Vec<_> =
        ledger.creates_per_label.keys().filter(|l| !receipts.iter().any(|r| r.label.as_str() == l.as_str())).collect();
    let live = ledger.resources.iter().filter(|r| r.deleted_at.is_none()).count();
    outln!("\nsummary after {:.1} s:", started.elapsed().as_secs_f64())?;
    outln!("  after provisioning: {}", fmt_counts(&provisioned))?;
    for l in &blocked_after_provisioning {
        outln!("    {l}")?;
    }
    outln!("  after deletion:     {}", fmt_counts(&store.client_status_counts().await?))?;
    let blocked = blocked_lines(&store).await?;
    for l in &blocked {
        outln!("    {l}")?;
    }
    if !blocked.is_empty() || !blocked_after_provisioning.is_empty() {
        outln!(
            "  (blocked is the safe answer where a create's outcome stayed unknown: oduflow never guesses.\n   \
             Inspect with `oduflow client show NAME`; resolve with `oduflow reconcile`, `adopt` or `abandon`.)"
        )?;
    }
    let requests: u64 = ledger.requests.values().sum();
    outln!(
        "  simulator: {requests} requests, {} faults injected, {} resources created, {live} still live",
        ledger.faults.len(),
        ledger.resources.len()
    )?;
    print_live(&store, &ledger, &receipts).await?;
    let dup = per_key.values().filter(|n| **n > 1).count();
    let creates_dist: BTreeMap<u64, usize> = per_key.values().fold(BTreeMap::new(), |mut m, n| {
        *m.entry(*n).or_default() += 1;
        m
    });
    outln!(
        "  creates applied per operation key: {} (count -> keys; must never exceed 1)",
        creates_dist.iter().map(|(n, k)| format!("{n} -> {k}")).collect::<Vec<_>>().join(", ")
    )?;
    outln!("  resources created without a receipt: {}", untracked.len())?;

    sim.shutdown().await;
    anyhow::ensure!(dup == 0, "{dup} operation keys were created more than once");
    anyhow::ensure!(untracked.is_empty(), "resources created without a receipt: {untracked:?}");
    Ok(())
}

async fn blocked_lines(store: &Store) -> Result<Vec<String>> {
    Ok(store
        .client_list()
        .await?
        .into_iter()
        .filter_map(|c| {
            c.infra
                .blocked_reason
                .map(|r| format!("blocked {}: {r} — {}", c.name, c.infra.blocked_detail.unwrap_or_default()))
        })
        .collect())
}

fn fmt_counts(c: &[(ClientStatus, i64)]) -> String {
    c.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ")
}

async fn drive<P: oduflow_model::provider::Provider>(store: &Store, worker: &Worker<P>, phase: &str) -> Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let w = worker.clone();
    let task = tokio::spawn(async move { w.run(true, rx).await });
    let tty = std::io::stdout().is_terminal();
    let mut last = String::new();
    let mut last_print = Instant::now();
    loop {
        let line = format!("{phase}: {}", fmt_counts(&store.client_status_counts().await?));
        if tty {
            crate::output::write_text(format_args!("\r{line}        "))?;
        } else if line != last && last_print.elapsed() > Duration::from_secs(2) || task.is_finished() {
            outln!("{line}")?;
            last_print = Instant::now();
        }
        last = line;
        if task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(tx);
    task.await??;
    if tty {
        outln!()?;
    }
    Ok(())
}

/// The demo's profile when the config file has none: what a real server
/// needs to be reachable and bootstrapped.
fn demo_profile() -> SpecInput {
    SpecInput {
        region: Some("ewr".into()),
        plan: Some("vc2-1c-1gb".into()),
        os_id: Some(2284),
        volume_gb: Some(40),
        ssh_keys: Some(vec![oduflow_sim::catalog::SSH_KEYS[0].0.to_owned()]),
        user_data: Some("#cloud-config\nhostname: {{oduflow.hostname}}\nruncmd:\n  - echo {{oduflow.client}} > /etc/oduflow-client\n".into()),
        tags: Some(vec!["demo".into()]),
        ipv6: Some(true),
        ..SpecInput::default()
    }
}

/// Every client comes from one profile: the config file's `[profile.demo]`
/// if there is one, else the built-in one (an SSH key of the simulated
/// account, cloud-init user data naming the client, a tag, IPv6).
fn announce_profile(cfg: &Config) -> Result<SpecInput> {
    let (profile, from) = match cfg.profiles.get("demo") {
        Some(p) => (p.clone(), "the config file's [profile.demo]"),
        None => (demo_profile(), "the built-in demo profile"),
    };
    outln!(
        "clients from {from}: ssh keys {}, user data {} bytes, tags {}",
        profile.ssh_keys.as_deref().unwrap_or_default().join(", "),
        profile.user_data.as_deref().map_or(0, str::len),
        profile.tags.as_deref().unwrap_or_default().join(", ")
    )?;
    Ok(profile)
}

/// Each resource still live with the client whose receipt records it
/// (nothing may be live that no record knows), and how many VM creates
/// carried the profile's SSH key and user data.
async fn print_live(store: &Store, ledger: &oduflow_sim::Ledger, receipts: &[oduflow_store::ReceiptRow]) -> Result<()> {
    let names: BTreeMap<String, String> =
        store.client_list().await?.into_iter().map(|c| (c.id.to_string(), c.name)).collect();
    for r in ledger.resources.iter().filter(|r| r.deleted_at.is_none()) {
        let owner = receipts.iter().find(|x| x.label.as_str() == r.label || x.id() == Some(r.id.as_str()));
        let client = match owner {
            Some(x) => names.get(x.client_ref.as_str()).map_or(x.client_ref.to_string(), |n| n.clone()),
            None => "NO RECEIPT".to_owned(),
        };
        outln!("    still live: {:?} {} (label {}), recorded for {client}", r.kind, r.id, r.label)?;
    }
    let bodies = &ledger.instance_create_bodies;
    let whole = bodies.iter().filter(|b| b.get("sshkey_id").is_some() && b.get("user_data").is_some()).count();
    outln!("  VM create bodies carrying the SSH key and the user data: {whole} of {}", bodies.len())?;
    Ok(())
}

/// A fresh SQLite file in a directory of its own, migrated.
async fn fresh_store() -> Result<(std::path::PathBuf, Store)> {
    let dir = std::env::temp_dir().join(format!("oduflow-demo-{}-{}", std::process::id(), SystemClock.now_ms()));
    oduflow_store::files::private_dir_all(&dir)?;
    let db = dir.join("oduflow.db");
    let store = Store::connect(&format!("sqlite://{}", db.display()), true).await?;
    store.migrate().await?;
    Ok((db, store))
}
