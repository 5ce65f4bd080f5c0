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
    /// Preflight, one line per check: the database (at this binary's
    /// schema), Vultr's base URL and the key, the rate group, the restore
    /// state, the adapters' commands, the DNS zone. Exit 0 if all pass, 1 if
    /// any fails.
    Check {
        #[arg(long)]
        json: bool,
    },
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
        /// Serve Prometheus metrics (and /health) on this address, e.g.
        /// 127.0.0.1:9464. No token is asked: bind it where only the scraper
        /// reaches.
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<std::net::SocketAddr>,
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
        /// Who asks, as the audit trail records it (default: the actor
        /// setting, else cli:USER).
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Record a named resource for an uncertain dispatch, after verification.
    Adopt {
        name: String,
        /// vm, volume, or dns (a DNS record at the client's DNS name).
        #[arg(long, value_parser = ["vm", "volume", "dns"])]
        kind: String,
        #[arg(long)]
        id: String,
        /// Who asks, as the audit trail records it (default: the actor
        /// setting, else cli:USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Give up an uncertain dispatch, on a recorded attestation.
    Abandon {
        name: String,
        /// vm, volume, attach, or dns (record creates whose outcome is unknown).
        #[arg(long, value_parser = ["vm", "volume", "attach", "dns"])]
        kind: String,
        /// Who attests (required).
        #[arg(long)]
        by: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
    },
    /// Bring servers made outside oduflow under it, changing nothing at
    /// Vultr: one client per server with its one attached volume, its spec
    /// read from the listing, recorded ready and observed only (tracked and
    /// verified, never changed or deleted) until `client promote`.
    Import {
        /// Only servers whose label matches (`*` for any run of characters).
        #[arg(long)]
        label: Option<String>,
        /// Only servers carrying this tag.
        #[arg(long)]
        tag: Option<String>,
        /// Only servers in this region.
        #[arg(long)]
        region: Option<String>,
        /// Show what would be imported and what does not fit; record nothing.
        #[arg(long)]
        dry_run: bool,
        /// Who asks, as the audit trail records it (default: the actor
        /// setting, else cli:USER).
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// One action over a selection of clients (the flags of `client list`;
    /// at least one), each client as the single command would take it.
    #[command(subcommand)]
    Bulk(BulkCmd),
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
    /// The event feed: every event, oldest first, after a cursor that stays
    /// valid (the `next` the last read printed), each with its client's
    /// name; as `GET /api/v1/events/feed`.
    Events {
        /// The events after this position (default 0: from the first event).
        #[arg(long, allow_negative_numbers = true)]
        after: Option<i64>,
        /// At most this many (default 100, at most 1000).
        #[arg(long, allow_negative_numbers = true)]
        limit: Option<i64>,
        /// Seconds to wait for an event when there is none after the cursor
        /// (default 0, at most 30).
        #[arg(long)]
        wait: Option<u64>,
        /// Print the page as JSON (the API's shape).
        #[arg(long, conflicts_with = "export")]
        json: bool,
        /// The audit export: every event after the cursor up to the last
        /// one, page by page, one JSON object per line (with `actor`, who
        /// asked); `--limit` sets the page size.
        #[arg(long, conflicts_with = "wait")]
        export: bool,
    },
    /// Write a consistent copy of the SQLite database to FILE (VACUUM INTO),
    /// safe while workers run; for PostgreSQL use pg_dump.
    Backup {
        /// A file that does not exist yet.
        file: PathBuf,
    },
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
    ///
    /// It accepts only the API key in VULTR_API_KEY, which must be set, and
    /// those of --also-accept-keys FILE (any other key is answered 401):
    /// run workers with that same key and ODUFLOW_VULTR_URL=http://LISTEN/v2.
    Sim(crate::cmd::sim::SimArgs),
    /// Serve the HTTP API, the dashboard and Prometheus metrics.
    Serve(crate::cmd::serve::ServeArgs),
    /// Bearer tokens for `oduflow serve`.
    #[command(subcommand)]
    Token(crate::cmd::serve::TokenCmd),
    /// Webhook endpoints: each state change POSTed, signed, to each.
    #[command(subcommand)]
    Webhook(crate::cmd::webhook::WebhookCmd),
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
pub(crate) enum BulkCmd {
    /// `oduflow reconcile NAME` for every selected client: observe again,
    /// failed adapters afresh.
    Reconcile {
        #[command(flatten)]
        select: SelectFlags,
        /// Who asks, as each client's audit trail records it (default: the actor
        /// setting, else cli:USER).
        #[arg(long)]
        by: Option<String>,
        #[command(flatten)]
        out: BulkFlags,
    },
    /// `oduflow abandon NAME --kind K` for every selected client, on one
    /// attestation recorded with each. `--reason` selects by blocked
    /// reason, as in `client list`; the attestation's text is `--why`.
    Abandon {
        #[command(flatten)]
        select: SelectFlags,
        /// vm, volume or attach.
        #[arg(long, value_parser = ["vm", "volume", "attach"])]
        kind: String,
        /// Who attests (required).
        #[arg(long)]
        by: String,
        /// Why (required): what was checked, for every selected client.
        #[arg(long)]
        why: String,
        #[command(flatten)]
        out: BulkFlags,
    },
}

#[derive(clap::Args, Debug)]
pub(crate) struct BulkFlags {
    /// Show what each selected client would get; record nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
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
        /// Who asks, as the audit trail records it (default: the actor
        /// setting, else cli:USER).
        #[arg(long)]
        by: Option<String>,
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

/// A client's spec fields, as `client create` takes them.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct SpecFlags {
    /// A `[profile.NAME]` from the config file: its fields, under the flags.
    #[arg(long)]
    pub profile: Option<String>,
    /// Vultr region id, e.g. ewr.
    #[arg(long)]
    pub region: Option<String>,
    /// Vultr plan id, e.g. vc2-1c-1gb.
    #[arg(long)]
    pub plan: Option<String>,
    /// Image source (exactly one): an operating system id, e.g. 2284...
    #[arg(long = "os-id", allow_negative_numbers = true)]
    pub os_id: Option<i64>,
    /// ...or a snapshot id...
    #[arg(long)]
    pub snapshot: Option<String>,
    /// ...or a marketplace application id...
    #[arg(long, allow_negative_numbers = true)]
    pub app: Option<i64>,
    /// ...or a marketplace application image_id.
    #[arg(long)]
    pub image: Option<String>,
    /// Block volume size in GB.
    #[arg(long = "volume-gb", allow_negative_numbers = true)]
    pub volume_gb: Option<i64>,
    /// high_perf (10-10000 GB, the default) or storage_opt (40-40000 GB).
    #[arg(long = "volume-type")]
    pub volume_type: Option<String>,
    /// A Vultr SSH key id installed for root (repeat for several).
    #[arg(long = "ssh-key")]
    pub ssh_keys: Vec<String>,
    /// A cloud-init file sent as user data; {{oduflow.client}},
    /// {{oduflow.hostname}}, {{oduflow.region}} and {{oduflow.plan}} are
    /// substituted. Readable through Vultr's API and inside the VM: no secrets.
    #[arg(long = "user-data")]
    pub user_data: Option<std::path::PathBuf>,
    /// Default: <name>.<hostname_domain>, else the client's name.
    #[arg(long)]
    pub hostname: Option<String>,
    /// A tag (repeat for several).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// A Vultr firewall group id.
    #[arg(long = "firewall-group")]
    pub firewall_group: Option<String>,
    /// IPv6 on (`--ipv6`) or off (`--ipv6 false`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub ipv6: Option<bool>,
    /// A VPC id to attach (repeat for several).
    #[arg(long = "vpc")]
    pub vpcs: Vec<String>,
    /// daily:HOUR, weekly:DOW:HOUR, monthly:DOM:HOUR, daily_alt_even:HOUR,
    /// daily_alt_odd:HOUR (UTC), or disabled.
    #[arg(long)]
    pub backups: Option<String>,
    /// The name of the client's DNS records in `[dns] domain` (mail,
    /// vpn.eu); default: the client's name.
    #[arg(long = "dns-name")]
    pub dns_name: Option<String>,
}

/// What `client update` changes.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct UpdateFlags {
    #[arg(long)]
    pub region: Option<String>,
    /// A larger plan (Vultr only upgrades; the worker checks its list of
    /// upgrades before sending).
    #[arg(long)]
    pub plan: Option<String>,
    /// A larger volume (volumes only grow).
    #[arg(long)]
    pub volume_gb: Option<i64>,
    /// The whole list of tags (repeat the flag); replaces the old list.
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Remove every tag.
    #[arg(long, conflicts_with = "tags")]
    pub no_tags: bool,
    /// A firewall group id; "" detaches the group.
    #[arg(long)]
    pub firewall_group: Option<String>,
    /// Another DNS record name ("" for the client's name): the records
    /// oduflow owns are renamed in place, after checking that the new
    /// name is free.
    #[arg(long = "dns-name")]
    pub dns_name: Option<String>,
    /// Refused: another image means a reinstall (out of scope).
    #[arg(long, hide = true)]
    pub os_id: Option<i64>,
    #[arg(long, hide = true)]
    pub snapshot: Option<String>,
    #[arg(long, hide = true)]
    pub app: Option<i64>,
    #[arg(long, hide = true)]
    pub image: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum ClientCmd {
    /// Record intent (target present) and enqueue provisioning. Fields come
    /// from `--profile` (a `[profile.NAME]` of the config file), each flag
    /// given overriding it. With VULTR_API_KEY set, the spec is checked
    /// against Vultr's catalog first (region, volume type, plan, image, SSH
    /// keys, firewall group).
    Create {
        name: String,
        #[command(flatten)]
        spec: Box<SpecFlags>,
        /// Skip the catalog check (the worker still makes it before the
        /// first create).
        #[arg(long = "no-preflight")]
        no_preflight: bool,
        /// Bring back a client this database does not know (created after
        /// the backup it was restored from) under the id its resources'
        /// labels name (`oduflow reconcile --all` and `oduflow orphan list`
        /// show it): its first provisioning adopts its VM and volume
        /// instead of creating them again.
        #[arg(long, value_name = "CLIENT_ID")]
        recover: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Change a client's spec in place: a larger plan, a larger volume, its
    /// tags, firewall group or DNS name (before anything was created, any
    /// field).
    /// Bumps the generation and enqueues the change. A block the update
    /// resolves (a change refused or unseen, a server unlike its spec, a
    /// failed preflight, a DNS name taken) is lifted; any other stays until
    /// `oduflow reconcile NAME`.
    Update {
        name: String,
        #[command(flatten)]
        change: Box<UpdateFlags>,
        #[arg(long)]
        json: bool,
        /// Show field by field what would change and what each change
        /// does (a reboot, a resize); refused as the update would be;
        /// record nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Set the target to absent: bumps the generation and enqueues deletion.
    Delete {
        name: String,
        #[arg(long)]
        json: bool,
        /// Show what deletion would remove (resources and identities);
        /// record nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// End observation of an imported client: oduflow manages it from now
    /// on (a run reads it by id and converges, as for any client).
    Promote {
        name: String,
        /// Who asks, as the audit trail records it (default: the actor
        /// setting, else cli:USER).
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Status, blocked reason and evidence, provider ids, receipts, events.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Every client with its status, or those a selection names (every
    /// flag given must match). `--json`: one object per client, its fields
    /// as `GET /api/v1/clients` answers them (a stable format: fields are
    /// added, never renamed or removed).
    List {
        #[command(flatten)]
        select: SelectFlags,
        #[arg(long)]
        json: bool,
    },
}

/// Which clients: every flag given must match.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct SelectFlags {
    /// A status: pending, provisioning, ready, deleting, deleted, blocked.
    #[arg(long)]
    pub status: Option<String>,
    /// A blocked reason (uncertain_create, adapter_failed, ...).
    #[arg(long)]
    pub reason: Option<String>,
    /// The target: present or absent.
    #[arg(long)]
    pub target: Option<String>,
    /// The spec's region.
    #[arg(long)]
    pub region: Option<String>,
    /// A name pattern: `*` stands for any run of characters (shop-*).
    #[arg(long)]
    pub name: Option<String>,
    /// Only clients whose record has not changed for at least this long
    /// (90s, 15m, 2h, 3d): blocked, ready or waiting that long.
    #[arg(long)]
    pub unchanged_for: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum CredentialsCmd {
    /// Prove, with the key now in VULTR_API_KEY, ownership of every recorded
    /// resource, then rebind the records to it.
    Rotate {
        /// Who asks, as the audit trail records it (default: the actor
        /// setting, else cli:USER).
        #[arg(long)]
        by: Option<String>,
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
