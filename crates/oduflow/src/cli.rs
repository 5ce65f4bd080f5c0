//! The command line: every command, subcommand and flag (clap), and
//! nothing else.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "oduflow",
    version,
    about = "Provision and remove each client's Vultr infrastructure, never twice, never forgotten"
)]
pub(crate) struct Cli {
    /// TOML configuration file (default: ./oduflow.toml if it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
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
    #[cfg(feature = "lab")]
    Bench(oduflow_lab::bench::BenchArgs),
    /// Benchmarks (part of the laboratory build, not of this one).
    #[cfg(not(feature = "lab"))]
    Bench(NotBuilt),
    /// Randomized crash and lost-response schedules, checked against the invariants.
    #[cfg(feature = "lab")]
    Campaign(oduflow_lab::campaign::CampaignArgs),
    /// Fault schedules (part of the laboratory build, not of this one).
    #[cfg(not(feature = "lab"))]
    Campaign(NotBuilt),
    /// Serve the Vultr API simulator (API under /v2, controls under /sim).
    Sim(crate::cmd::sim::SimArgs),
    /// Serve the HTTP API, the dashboard and Prometheus metrics.
    Serve(crate::cmd::serve::ServeArgs),
    /// Bearer tokens for `oduflow serve`.
    #[command(subcommand)]
    Token(crate::cmd::serve::TokenCmd),
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
pub(crate) enum OrphanCmd {
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
pub(crate) enum ClientCmd {
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
pub(crate) enum CredentialsCmd {
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
pub(crate) enum RestoreCmd {
    /// Declare that this database was restored from a backup: the queue stops
    /// until `oduflow reconcile --all` has run.
    Declare {
        #[arg(long, default_value = "declared by an operator")]
        reason: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum QueueCmd {
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Stop claiming jobs (running jobs finish).
    Pause,
    /// Claim jobs again.
    Resume,
}

/// The arguments of a laboratory command in a build without the laboratory:
/// taken as they come, refused with a clear line.
#[cfg(not(feature = "lab"))]
#[derive(clap::Args)]
pub(crate) struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub args: Vec<String>,
}
