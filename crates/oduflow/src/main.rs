//! The `oduflow` command: CLI glue over the store, the engine, the Vultr
//! adapter and the simulator. It parses, validates, calls, prints; nothing
//! else lives here.

mod bench;
mod campaign;
mod config;
mod demo;
mod lineage;
mod serve;
mod sim;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use config::{BadInput, Config};
use oduflow_engine::{Clock, SystemClock, Worker, operator};
use oduflow_model::provider::Provider;
use oduflow_model::*;
use oduflow_store::{ClientRow, Store, StoreError};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "oduflow",
    version,
    about = "Provision and remove each client's Vultr infrastructure, never twice, never forgotten"
)]
struct Cli {
    /// TOML configuration file (default: ./oduflow.toml if it exists).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create or migrate the database. Running it again is harmless.
    Init,
    /// Record intent for clients and look at them.
    #[command(subcommand)]
    Client(ClientCmd),
    /// Run the queue.
    Worker {
        /// Exit once no job is queued and every client is ready, deleted or blocked.
        #[arg(long)]
        until_settled: bool,
        /// Jobs run side by side in this process (default from config: 4).
        #[arg(long)]
        concurrency: Option<usize>,
    },
    /// Queue control.
    #[command(subcommand)]
    Queue(QueueCmd),
    /// Observe again (NAME), or compare the provider's inventory with the receipts (--all).
    Reconcile {
        name: Option<String>,
        /// Inventory pass over every resource under oduflow's label prefix.
        #[arg(long, conflicts_with_all = ["name", "new_dispatch"])]
        all: bool,
        /// After a definitive rejection: allocate the next dispatch generation.
        #[arg(long)]
        new_dispatch: bool,
        /// Who asks (recorded in the audit trail).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[arg(long)]
        json: bool,
    },
    /// Record a named resource for an uncertain dispatch, after verification.
    Adopt {
        name: String,
        #[arg(long, value_parser = ["vm", "volume"])]
        kind: String,
        #[arg(long)]
        id: String,
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
    },
    /// Give up an uncertain dispatch, on a recorded attestation.
    Abandon {
        name: String,
        #[arg(long, value_parser = ["vm", "volume", "attach"])]
        kind: String,
        /// Who attests (required).
        #[arg(long)]
        by: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
    },
    /// Resources under oduflow's label prefix that no receipt accounts for, as
    /// the last `reconcile --all` recorded them.
    #[command(subcommand)]
    Orphan(OrphanCmd),
    /// API key management.
    #[command(subcommand)]
    Credentials(CredentialsCmd),
    /// Database restore safety.
    #[command(subcommand)]
    Restore(RestoreCmd),
    /// Benchmarks: convergence at the rate limit, queue throughput, inventory at scale.
    Bench(bench::BenchArgs),
    /// Randomized crash and lost-response schedules, checked against the invariants.
    Campaign(campaign::CampaignArgs),
    /// Serve the Vultr API simulator (API under /v2, controls under /sim).
    Sim(sim::SimArgs),
    /// Serve the HTTP API, the dashboard and Prometheus metrics.
    Serve(serve::ServeArgs),
    /// Bearer tokens for `oduflow serve`.
    #[command(subcommand)]
    Token(serve::TokenCmd),
    /// The embedded default end to end: a SQLite file, the in-process simulator with faults.
    Demo {
        /// How many clients to provision and then delete.
        #[arg(long, default_value_t = 20)]
        clients: usize,
        /// Seed of the simulator's fault draws.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Run without injected faults.
        #[arg(long)]
        no_faults: bool,
    },
}

#[derive(Subcommand)]
enum OrphanCmd {
    /// The open orphans (with --all, resolved ones too).
    List {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Record an orphan on the client its label names, after verifying it
    /// against that client's spec (as `adopt` does).
    Adopt {
        id: String,
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
    },
    /// Delete an orphan, on a recorded attestation.
    Delete {
        id: String,
        /// Who attests (required).
        #[arg(long)]
        by: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ClientCmd {
    /// Record intent (target present) and enqueue provisioning.
    Create {
        name: String,
        /// Vultr region id, e.g. ewr.
        #[arg(long)]
        region: String,
        /// Vultr plan id, e.g. vc2-1c-1gb.
        #[arg(long)]
        plan: String,
        /// Vultr operating system id, e.g. 2284.
        #[arg(long = "os-id", allow_negative_numbers = true)]
        os_id: i64,
        /// Block volume size in GB.
        #[arg(long = "volume-gb", allow_negative_numbers = true)]
        volume_gb: i64,
        /// high_perf (10-10000 GB) or storage_opt (40-40000 GB).
        #[arg(long = "volume-type", default_value = "high_perf")]
        volume_type: String,
        #[arg(long)]
        json: bool,
    },
    /// Set the target to absent: bumps the generation and enqueues deletion.
    Delete {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Status, blocked reason and evidence, provider ids, receipts, events.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Every client with its status.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CredentialsCmd {
    /// Prove, with the key now in VULTR_API_KEY, ownership of every recorded
    /// resource, then rebind the records to it.
    Rotate {
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RestoreCmd {
    /// Declare that this database was restored from a backup: the queue stops
    /// until `oduflow reconcile --all` has run.
    Declare {
        #[arg(long, default_value = "declared by an operator")]
        reason: String,
    },
}

#[derive(Subcommand)]
enum QueueCmd {
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Stop claiming jobs (running jobs finish).
    Pause,
    /// Claim jobs again.
    Resume,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One clear line, exit code 2, as for every other bad input.
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            eprintln!("oduflow: {first} (see oduflow --help)");
            return ExitCode::from(2);
        }
    };
    // The demo injects faults on purpose (429 bursts among them): the
    // adapter's warnings about them would bury its summary.
    init_tracing(if matches!(cli.cmd, Cmd::Demo { .. }) { "warn,oduflow_vultr=error" } else { "warn" });
    let _failpoints = oduflow_engine::fail_scenario();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = rt.block_on(run(cli));
    if std::env::var_os("ODUFLOW_PRINT_PEAK_RSS").is_some() {
        // For `oduflow bench inventory`, which runs a pass in a child process.
        eprintln!("oduflow: peak RSS {} KiB", bench::peak_rss_kib());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let bad_input = e.downcast_ref::<BadInput>().is_some()
                || e.downcast_ref::<SpecError>().is_some()
                || matches!(
                    e.downcast_ref::<StoreError>(),
                    Some(
                        StoreError::InvalidUrl { .. }
                            | StoreError::ClientExists(_)
                            | StoreError::ClientNotFound(_)
                            | StoreError::TokenExists(_)
                            | StoreError::TokenNotFound(_)
                    )
                );
            eprintln!("oduflow: {}", chain(&e));
            ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}

fn chain(e: &anyhow::Error) -> String {
    e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ")
}

/// `ODUFLOW_LOG` (tracing filter syntax), else `default`.
fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ODUFLOW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

async fn open(cfg: &Config) -> Result<Store> {
    Ok(Store::connect(&cfg.database_url, false).await?)
}

async fn run(cli: Cli) -> Result<()> {
    let cfg = Config::load(cli.config.as_deref())?;
    match cli.cmd {
        Cmd::Init => {
            let store = Store::connect(&cfg.database_url, true).await?;
            store.migrate().await?;
            store.lineage().await?;
            println!("database ready: {}", oduflow_store::redact_url(&cfg.database_url));
        }
        Cmd::Client(c) => client(&cfg, c).await?,
        Cmd::Queue(q) => queue(&cfg, q).await?,
        Cmd::Worker { until_settled, concurrency } => {
            let mut engine = cfg.engine();
            if let Some(n) = concurrency {
                if n == 0 {
                    return Err(BadInput("--concurrency must be at least 1".into()).into());
                }
                engine.concurrency = n;
            }
            let store = Store::connect_sized(&cfg.database_url, false, 2 * engine.concurrency as u32 + 4).await?;
            let provider = provider(&cfg, &store, "worker")?;
            if let Some(why) = lineage::check(&store, now_ms()).await? {
                anyhow::bail!("restore pending ({why}): run `oduflow reconcile --all` before starting workers");
            }
            // Its footing before anything else: the base URL answers as
            // Vultr and accepts the key (GET /account). A wrong URL or key
            // would otherwise turn every unbound client's create into a
            // rejection; here it is one line and nothing is sent.
            if let Err(e) = provider.account_get().await {
                return Err(BadInput(format!(
                    "preflight: GET {}/account failed with the configured key ({}): {e}; nothing was sent",
                    cfg.vultr_url.trim_end_matches('/'),
                    provider.fingerprint().short()
                ))
                .into());
            }
            let adapters = identity_adapters(&cfg, provider.as_ref())?;
            let worker =
                Worker::new(store.clone(), provider.clone(), engine, Arc::new(SystemClock)).with_adapters(adapters);
            // Keep this host's high-water mark fresh, and stop if the database
            // turns out to be a restored copy while running.
            let watch_store = store.clone();
            let watch = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                    match lineage::check(&watch_store, now_ms()).await {
                        Ok(Some(why)) => return why,
                        _ => continue,
                    }
                }
            });
            tokio::select! {
                r = run_worker(worker, until_settled) => r?,
                why = watch => anyhow::bail!("restore pending ({}): run `oduflow reconcile --all`", why.unwrap_or_default()),
            }
            provider.flush_budget().await;
            lineage::check(&store, now_ms()).await?;
        }
        Cmd::Demo { clients, seed, no_faults } => demo::run(&cfg, clients, seed, !no_faults).await?,
        Cmd::Sim(args) => sim::run(&cfg, args).await?,
        Cmd::Campaign(args) => campaign::run(args).await?,
        Cmd::Bench(args) => bench::run(args).await?,
        Cmd::Serve(args) => serve::serve(&cfg, args).await?,
        Cmd::Token(cmd) => serve::token(&cfg, cmd).await?,
        Cmd::Reconcile { name, all, new_dispatch, by, json } => {
            if all {
                let store = open(&cfg).await?;
                let provider = provider(&cfg, &store, "cli")?;
                let inv = operator::inventory(&store, provider.as_ref(), now_ms()).await?;
                provider.flush_budget().await;
                print_inventory(&inv, json)?;
            } else {
                let Some(name) = name else {
                    return Err(BadInput("name a client, or use --all".into()).into());
                };
                ClientName::parse(&name)?;
                let store = open(&cfg).await?;
                let provider = provider(&cfg, &store, "cli")?;
                refuse_if_restored(&store).await?;
                let row = operator::reconcile(
                    &store,
                    provider.as_ref(),
                    &name,
                    new_dispatch,
                    &by,
                    now_ms(),
                    cfg.attempts_max,
                )
                .await?;
                print_client(&store, &row, json, false).await?;
            }
        }
        Cmd::Adopt { name, kind, id, by } => {
            ClientName::parse(&name)?;
            let kind = ResourceKind::parse(&kind).expect("clap checked");
            let store = open(&cfg).await?;
            let provider = provider(&cfg, &store, "cli")?;
            refuse_if_restored(&store).await?;
            let row =
                operator::adopt(&store, provider.as_ref(), &name, kind, &id, &by, now_ms(), cfg.attempts_max).await?;
            print_client(&store, &row, false, false).await?;
        }
        Cmd::Abandon { name, kind, by, reason } => {
            ClientName::parse(&name)?;
            let kind = ResourceKind::parse(&kind).expect("clap checked");
            let store = open(&cfg).await?;
            refuse_if_restored(&store).await?;
            let row = operator::abandon(&store, &name, kind, &by, &reason, now_ms(), cfg.attempts_max).await?;
            print_client(&store, &row, false, false).await?;
        }
        Cmd::Credentials(CredentialsCmd::Rotate { by, json }) => {
            let store = open(&cfg).await?;
            let provider = provider(&cfg, &store, "cli")?;
            refuse_if_restored(&store).await?;
            match operator::credentials_rotate(&store, provider.as_ref(), &by, now_ms(), cfg.attempts_max).await? {
                Ok(names) => {
                    if json {
                        println!("{}", serde_json::json!({ "rebound": names }));
                    } else {
                        println!("rebound {} record(s) to key {}", names.len(), provider.key_fingerprint().short());
                    }
                }
                Err(unproven) => {
                    if json {
                        println!("{}", serde_json::json!({ "refused": unproven }));
                    }
                    let list: Vec<String> = unproven
                        .iter()
                        .map(|u| format!("{} {} {}: {}", u.client, u.kind.as_str(), u.resource, u.why))
                        .collect();
                    anyhow::bail!(
                        "rotation refused; the new key could not prove ownership of:\n  {}",
                        list.join("\n  ")
                    );
                }
            }
        }
        Cmd::Orphan(OrphanCmd::List { all, json }) => {
            let store = open(&cfg).await?;
            let list = store.orphans_list(all).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("orphans: {} (as the last `oduflow reconcile --all` found them)", list.len());
                for o in &list {
                    let state = o.resolution.as_deref().map_or_else(|| "open".to_owned(), |r| format!("resolved: {r}"));
                    println!(
                        "  {:<6} {} label {} client {} — {} [{state}]",
                        o.kind.as_str(),
                        o.resource_id,
                        o.label,
                        o.client_ref.as_deref().unwrap_or("-"),
                        o.note
                    );
                }
            }
        }
        Cmd::Orphan(OrphanCmd::Adopt { id, by }) => {
            let store = open(&cfg).await?;
            let provider = provider(&cfg, &store, "cli")?;
            refuse_if_restored(&store).await?;
            let row = operator::orphan_adopt(&store, provider.as_ref(), &id, &by, now_ms(), cfg.attempts_max).await?;
            print_client(&store, &row, false, false).await?;
        }
        Cmd::Orphan(OrphanCmd::Delete { id, by, reason, json }) => {
            let store = open(&cfg).await?;
            let provider = provider(&cfg, &store, "cli")?;
            refuse_if_restored(&store).await?;
            let d = operator::orphan_delete(&store, provider.as_ref(), &id, &by, &reason, now_ms()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                println!("{} {}: {}", d.kind.as_str(), d.id, d.note);
            }
        }
        Cmd::Restore(RestoreCmd::Declare { reason }) => {
            let store = open(&cfg).await?;
            store.restore_declare(&reason, now_ms()).await?;
            println!("restore declared: the queue claims nothing until `oduflow reconcile --all` has run");
        }
    }
    Ok(())
}

/// Operator actions that act on the provider wait, like the queue, until a
/// restored copy has been reconciled with the provider's inventory (this
/// host's high-water mark tells, or a declared restore).
async fn refuse_if_restored(store: &Store) -> Result<()> {
    if let Some(why) = lineage::check(store, now_ms()).await? {
        anyhow::bail!("restore pending ({why}): run `oduflow reconcile --all` first");
    }
    Ok(())
}

/// The provider the worker drives: Vultr (or `oduflow sim`) at
/// `ODUFLOW_VULTR_URL`, its requests taking their slots from the rate group's
/// budget in the database, shared with every other process of the group.
/// `role` names this process in the budget's metrics.
fn provider(cfg: &Config, store: &Store, role: &str) -> Result<Arc<oduflow_vultr::VultrClient>> {
    let scheme = cfg.vultr_url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("https" | "http")) {
        return Err(BadInput(format!(
            "ODUFLOW_VULTR_URL {:?}: the scheme must be https (or http for a local simulator)",
            cfg.vultr_url
        ))
        .into());
    }
    let key = cfg.api_key()?.clone();
    let vc = oduflow_vultr::VultrConfig {
        base_url: cfg.vultr_url.clone(),
        rate_per_sec: cfg.rate_per_sec,
        per_page: cfg.per_page,
        request_timeout_ms: cfg.request_timeout_ms,
        ..oduflow_vultr::VultrConfig::new(key)
    };
    let budget =
        oduflow_store::SharedBudget::new(store.clone(), &cfg.rate_group, &process_name(role)).map_err(BadInput)?;
    Ok(Arc::new(oduflow_vultr::VultrClient::with_budget(vc, Arc::new(budget)).map_err(|e| BadInput(e.to_string()))?))
}

/// `<host>/<role>-<pid>`: how this process is named in the rate budget's
/// metrics.
pub fn process_name(role: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}/{role}-{}", std::process::id())
}

/// The configured identity adapters, DNS first.
fn identity_adapters(
    cfg: &Config,
    vultr: &oduflow_vultr::VultrClient,
) -> Result<Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>>> {
    let mut out: Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>> = vec![];
    if let Some(d) = &cfg.dns {
        out.push(Arc::new(oduflow_vultr::dns_adapter::DnsAdapter::new(vultr.clone(), d.domain.clone(), d.ttl)));
    }
    for a in &cfg.adapters {
        out.push(Arc::new(oduflow_engine::command_adapter::CommandAdapter::new(a.clone()).map_err(BadInput)?));
    }
    Ok(out)
}

pub(crate) async fn run_worker<P: Provider>(worker: Worker<P>, until_settled: bool) -> Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    worker.run(until_settled, rx).await.context("worker")?;
    Ok(())
}

async fn client(cfg: &Config, c: ClientCmd) -> Result<()> {
    match c {
        ClientCmd::Create { name, region, plan, os_id, volume_gb, volume_type, json } => {
            // Validate everything before opening the database.
            let name = ClientName::parse(&name)?;
            let spec = ClientSpec::parse(&region, &plan, os_id, volume_gb, &volume_type)?;
            let store = open(cfg).await?;
            let row = store.client_create(&name, &spec, now_ms(), cfg.attempts_max).await?;
            print_client(&store, &row, json, false).await?;
        }
        ClientCmd::Delete { name, json } => {
            ClientName::parse(&name)?;
            let store = open(cfg).await?;
            let row = store.client_delete(&name, now_ms(), cfg.attempts_max).await?;
            print_client(&store, &row, json, false).await?;
        }
        ClientCmd::Show { name, json } => {
            ClientName::parse(&name)?;
            let store = open(cfg).await?;
            let row = store.client_get(&name).await?.ok_or_else(|| StoreError::ClientNotFound(name.clone()))?;
            print_client(&store, &row, json, true).await?;
        }
        ClientCmd::List { json } => {
            let store = open(cfg).await?;
            let rows = store.client_list().await?;
            if json {
                let v: Vec<_> = rows.iter().map(client_json).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{:<24} {:<13} {:<22} {:<38} VOLUME", "NAME", "STATUS", "BLOCKED", "VM");
                for r in &rows {
                    let i = &r.infra;
                    println!(
                        "{:<24} {:<13} {:<22} {:<38} {}",
                        r.name,
                        i.status,
                        i.blocked_reason.map(|b| b.as_str()).unwrap_or("-"),
                        i.vm_id.as_ref().map(|v| v.as_str()).unwrap_or("-"),
                        i.volume_id.as_ref().map(|v| v.as_str()).unwrap_or("-"),
                    );
                }
            }
        }
    }
    Ok(())
}

fn client_json(r: &ClientRow) -> serde_json::Value {
    let i = &r.infra;
    serde_json::json!({
        "name": r.name,
        "id": r.id,
        "status": i.status,
        "blocked_reason": i.blocked_reason,
        "blocked_detail": i.blocked_detail,
        "vm_id": i.vm_id,
        "volume_id": i.volume_id,
        "target": i.target,
        "generation": i.generation,
        "spec": i.spec,
        "key_fingerprint": i.key_fingerprint.as_ref().map(|k| k.short().to_owned()),
    })
}

async fn print_client(store: &Store, r: &ClientRow, json: bool, evidence: bool) -> Result<()> {
    let receipts = if evidence { store.receipts_for_client(&r.id).await? } else { vec![] };
    let adapters = if evidence { store.adapter_states(&r.id).await? } else { vec![] };
    let events = if evidence { store.events_for_client(&r.id).await? } else { vec![] };
    if json {
        let mut v = client_json(r);
        if r.infra.status == ClientStatus::Blocked {
            let receipts = store.receipts_for_client(&r.id).await?;
            v["resolve"] = serde_json::to_value(oduflow_server::resolve::resolutions(r, &receipts))?;
        }
        if evidence {
            v["receipts"] = serde_json::to_value(&receipts)?;
            v["adapters"] = serde_json::to_value(&adapters)?;
            v["events"] = serde_json::to_value(&events)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let i = &r.infra;
    println!("name:       {}", r.name);
    match i.blocked_reason {
        Some(b) => println!("status:     blocked ({b})"),
        None => println!("status:     {}", i.status),
    }
    if let Some(d) = &i.blocked_detail {
        println!("evidence:   {d}");
    }
    if i.status == ClientStatus::Blocked {
        // The same commands the API and the dashboard suggest.
        let receipts = store.receipts_for_client(&r.id).await?;
        for res in oduflow_server::resolve::resolutions(r, &receipts) {
            println!("resolve:    {}  ({})", res.command, res.when);
        }
    }
    println!("target:     {} (generation {})", i.target, i.generation);
    println!(
        "spec:       region {} plan {} os {} volume {} GB {}",
        i.spec.region,
        i.spec.plan,
        i.spec.os_id,
        i.spec.volume_gb,
        i.spec.volume_type.as_str()
    );
    println!("key:        {}", i.key_fingerprint.as_ref().map(|k| k.short()).unwrap_or("(not bound yet)"));
    println!("vm:         {}", i.vm_id.as_ref().map(|v| v.as_str()).unwrap_or("-"));
    println!("volume:     {}", i.volume_id.as_ref().map(|v| v.as_str()).unwrap_or("-"));
    if evidence {
        println!("receipts:");
        for rc in &receipts {
            let outcome = match (&rc.resource_id, rc.rejection_status) {
                (Some(id), _) => format!("id {id} ({})", rc.resource_id_source.map(|s| s.as_str()).unwrap_or("?")),
                (None, Some(s)) => format!("rejected {s}: {}", rc.rejection_message.as_deref().unwrap_or("")),
                (None, None) => "outcome unknown".into(),
            };
            println!(
                "  {:<8} dispatch {} label {} {} observations {}{}",
                rc.resource_kind.as_str(),
                rc.dispatch_generation,
                rc.label,
                outcome,
                rc.observation_count,
                rc.last_observation.as_deref().map(|o| format!(" (last: {o})")).unwrap_or_default()
            );
        }
        if !adapters.is_empty() {
            println!("identities:");
            for a in &adapters {
                println!(
                    "  {:<10} {:<9} {}{}",
                    a.adapter,
                    a.state,
                    a.detail,
                    if a.failures > 0 { format!(" (failures: {})", a.failures) } else { String::new() }
                );
            }
        }
        println!("events (latest last):");
        for e in events.iter().rev().take(15).rev() {
            println!("  {} {:<28} {}", e.at_ms, e.kind, e.detail);
        }
    }
    Ok(())
}

fn print_inventory(inv: &operator::Inventory, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(inv)?);
        return Ok(());
    }
    println!("listed: {} instances, {} blocks", inv.instances_listed, inv.blocks_listed);
    for (title, items) in [("orphans", &inv.orphans), ("missing", &inv.missing), ("unrecorded", &inv.unrecorded)] {
        println!("{title}: {}", items.len());
        for i in items {
            println!(
                "  {:<6} {} label {} client {} — {}",
                i.kind.as_str(),
                i.id,
                i.label,
                i.client.as_deref().unwrap_or("-"),
                i.note
            );
            if let Some(r) = &i.resolve {
                println!("         resolve: {r}");
            }
        }
    }
    Ok(())
}

async fn queue(cfg: &Config, q: QueueCmd) -> Result<()> {
    let store = open(cfg).await?;
    match q {
        QueueCmd::Status { json } => {
            let s = store.queue_status(now_ms()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!("paused:            {}", s.paused);
                println!("queued:            {} ({} runnable now)", s.queued, s.runnable);
                println!("done/stale/failed: {}/{}/{}", s.done, s.stale, s.failed);
                println!("unsettled clients: {}", s.unsettled_clients);
                if let Some(why) = store.restore_pending().await? {
                    println!("restore pending:   {why} (run `oduflow reconcile --all`)");
                }
            }
        }
        QueueCmd::Pause => {
            store.queue_set_paused(true, now_ms()).await?;
            println!("queue paused");
        }
        QueueCmd::Resume => {
            if let Some(why) = store.restore_pending().await? {
                anyhow::bail!(
                    "the database was restored ({why}); run `oduflow reconcile --all` before resuming the queue"
                );
            }
            store.queue_set_paused(false, now_ms()).await?;
            println!("queue resumed");
        }
    }
    Ok(())
}
