//! The `oduflow` command: CLI glue over the store, the engine, the Vultr
//! adapter and the simulator. It parses, validates, calls, prints; nothing
//! else lives here. `cli` declares the commands, `cmd` holds one module per
//! command, `output` prints, `setup` wires what they share; the laboratory
//! (`campaign`, `bench`) is crate oduflow-lab, linked by the `lab` feature.

mod cli;
mod cmd;
mod config;
mod lineage;
mod logs;
mod output;
mod setup;
mod signals;
mod startup;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Cmd};
use config::{BadInput, Config};
use oduflow_engine::operator::OperatorError;
use oduflow_model::*;
use oduflow_store::StoreError;
use std::process::ExitCode;

/// How long the exit waits for tasks still running when the command is done.
const RUNTIME_SHUTDOWN_MAX: std::time::Duration = std::time::Duration::from_secs(1);

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
    // adapter's warnings about them would bury its summary, and so would the
    // worker's line for each client that blocks: the summary lists them,
    // each with its reason, and says how to resolve them.
    // The database driver's own warnings stay out of a command's output
    // (see `oduflow_store::DRIVER_LOG_DIRECTIVE`).
    let default = if matches!(cli.cmd, Cmd::Demo { .. }) {
        "warn,oduflow_vultr=error,oduflow_engine::worker=error"
    } else {
        "warn"
    };
    let format = match logs::LogFormat::from_env() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("oduflow: {e}");
            return ExitCode::from(2);
        }
    };
    logs::init(&format!("{default},{}", oduflow_store::DRIVER_LOG_DIRECTIVE), format);
    let _failpoints = oduflow_engine::fail_scenario();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = rt.block_on(run(cli));
    // What is left (a worker's runs cut after its shutdown grace, a DNS
    // lookup on a blocking thread) must not hold the exit up.
    rt.shutdown_timeout(RUNTIME_SHUTDOWN_MAX);
    if std::env::var_os("ODUFLOW_PRINT_PEAK_RSS").is_some() {
        // For `oduflow bench inventory`, which runs a pass in a child process.
        eprintln!("oduflow: peak RSS {} KiB", output::peak_rss_kib());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `oduflow client list | head -1`: the reader has what it wanted.
        Err(e) if e.downcast_ref::<output::StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(e) => {
            let operator = e.downcast_ref::<OperatorError>();
            let store = e.downcast_ref::<StoreError>().or(match operator {
                Some(OperatorError::Store(s)) => Some(s),
                _ => None,
            });
            let bad_input = e.downcast_ref::<BadInput>().is_some()
                || lab_bad_input(&e)
                || e.downcast_ref::<SpecError>().is_some()
                || matches!(operator, Some(OperatorError::Invalid(_)))
                || matches!(
                    store,
                    Some(
                        StoreError::InvalidUrl { .. }
                            | StoreError::ClientExists(_)
                            | StoreError::DnsNameTaken { .. }
                            | StoreError::ClientNotFound(_)
                            | StoreError::ClientAbsent(_)
                            | StoreError::ClientStillDeleting(_)
                            | StoreError::UpdateRefused(_)
                            | StoreError::TokenExists(_)
                            | StoreError::TokenNotFound(_)
                            | StoreError::WebhookExists(_)
                            | StoreError::WebhookNotFound(_)
                            | StoreError::BackupUnsupported
                            | StoreError::FeedCursorAhead { .. }
                    )
                );
            logs::say_error(&format!("oduflow: {}", chain(&e)));
            ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}

/// The error and its causes on one line, each said once: a driver's error
/// often repeats its source's text ("error returned from database: X: X").
fn chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for c in e.chain().map(|c| c.to_string()) {
        if line.contains(&c) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&c);
    }
    line
}

#[cfg(feature = "lab")]
fn lab_bad_input(e: &anyhow::Error) -> bool {
    e.downcast_ref::<oduflow_lab::BadInput>().is_some()
}

#[cfg(not(feature = "lab"))]
fn lab_bad_input(_: &anyhow::Error) -> bool {
    false
}

/// A laboratory command in the product build.
#[cfg(not(feature = "lab"))]
fn not_built(cmd: &str) -> Result<()> {
    Err(BadInput(format!(
        "`oduflow {cmd}` is part of the laboratory, which this build leaves out: build with the default features \
         (cargo run --release --features failpoints -- {cmd})"
    ))
    .into())
}

async fn run(cli: Cli) -> Result<()> {
    let cfg = Config::load(cli.config.as_deref())?;
    match cli.cmd {
        Cmd::Init => cmd::init::run(&cfg).await,
        Cmd::Check { json } => cmd::check::run(&cfg, json).await,
        Cmd::Client(c) => cmd::client::run(&cfg, c).await,
        Cmd::Queue(q) => cmd::queue::run(&cfg, q).await,
        Cmd::Worker { until_settled, concurrency, metrics_listen } => {
            cmd::worker::run(&cfg, until_settled, concurrency, metrics_listen).await
        }
        Cmd::Demo { clients, seed, no_faults } => cmd::demo::run(&cfg, clients, seed, !no_faults).await,
        Cmd::Sim(args) => cmd::sim::run(&cfg, args).await,
        #[cfg(feature = "lab")]
        Cmd::Campaign(args) => oduflow_lab::campaign::run(args).await,
        #[cfg(feature = "lab")]
        Cmd::Bench(args) => oduflow_lab::bench::run(args).await,
        #[cfg(not(feature = "lab"))]
        Cmd::Campaign(_) => not_built("campaign"),
        #[cfg(not(feature = "lab"))]
        Cmd::Bench(_) => not_built("bench"),
        Cmd::Serve(args) => cmd::serve::serve(&cfg, args).await,
        Cmd::Token(c) => cmd::serve::token(&cfg, c).await,
        Cmd::Webhook(c) => cmd::webhook::run(&cfg, c).await,
        Cmd::Reconcile { name, all, new_dispatch, by, json } => {
            cmd::reconcile::run(&cfg, name, all, new_dispatch, cfg.by(&by), json).await
        }
        Cmd::Adopt { name, kind, id, by } => cmd::adopt::adopt(&cfg, &name, &kind, &id, cfg.by(&by)).await,
        Cmd::Abandon { name, kind, by, reason } => cmd::adopt::abandon(&cfg, &name, &kind, &by, &reason).await,
        Cmd::Bulk(c) => cmd::bulk::run(&cfg, c).await,
        Cmd::Import { label, tag, region, dry_run, by, json } => {
            cmd::import::run(
                &cfg,
                oduflow_engine::operator::ImportFilter { label, tag, region },
                dry_run,
                cfg.by(&by),
                json,
            )
            .await
        }
        Cmd::Credentials(c) => cmd::credentials::run(&cfg, c).await,
        Cmd::Orphan(c) => cmd::orphan::run(&cfg, c).await,
        Cmd::Restore(c) => cmd::restore::run(&cfg, c).await,
        Cmd::Backup { file } => cmd::backup::run(&cfg, &file).await,
        Cmd::Events { after, limit, wait, json, export } => {
            cmd::events::run(
                &cfg,
                after,
                limit,
                wait,
                if export { cmd::events::Show::Export } else { cmd::events::Show::from(json) },
            )
            .await
        }
    }
}
