//! oduflow's database: the only crate that knows SQL.
//!
//! [`Store`] is a closed choice between PostgreSQL (production, several worker
//! processes on several hosts) and SQLite (the embedded default). Both run the
//! same protocol; they differ in how one client's work is serialized:
//!
//! - PostgreSQL: a job is claimed with `FOR UPDATE SKIP LOCKED` together with
//!   `FOR UPDATE` on the client's infra row, inside the job's main transaction,
//!   which stays open for the whole job and commits once at the end. A worker
//!   that dies drops its connection; PostgreSQL rolls the transaction back and
//!   the job is claimable again.
//! - SQLite (one writer at a time): a short write transaction takes a lease on
//!   the client's infra row; the job then runs with no transaction open, and
//!   its writes are applied in one `BEGIN IMMEDIATE` transaction at the end,
//!   after re-checking the lease and the generation. A dead worker's lease
//!   expires. Receipts can always commit in between, because nothing holds the
//!   write lock while a provider call is in flight.
//!
//! Receipts are written only through [`ReceiptLedger`], on connections of
//! their own that commit independently of any job. The schema's triggers
//! refuse to delete a receipt or change a recorded resource id.

mod budget;
mod changes;
mod clock;
mod feed;
pub mod files;
mod idempotency;
mod import;
mod operator;
mod orphans;
mod planted;
mod queue;
mod receipts;
mod rows;
mod select;
mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod tokens;
mod webhooks;

pub use budget::*;
pub use changes::*;
pub use feed::*;
pub use idempotency::*;
pub use import::Import;
pub use operator::*;
pub use orphans::*;
pub use planted::{Bug, PLANTED_BUG_ENV, PlantedBug};
pub use queue::*;
pub use receipts::*;
pub use rows::*;
pub use select::{ClientSelect, glob};
pub use stats::*;
pub use tokens::*;
pub use webhooks::*;

use oduflow_model::{ClientName, ClientSpec, ClientStatus, EventKind, JobKind, Target};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};
use std::str::FromStr;
use std::time::Duration;

/// Whether a SQLite connection given back to the pool may serve again:
/// not if it still counts an open transaction. A COMMIT that fails on a
/// full disk or an I/O error is rolled back by SQLite itself; the driver's
/// own ROLLBACK (queued when the failed transaction was dropped) then fails
/// with "no transaction is active", and the driver goes on counting one
/// open: every later `BEGIN` on that connection failed ("attempted to call
/// begin_with at non-zero transaction depth"), for ever. Such a connection
/// is closed; the pool opens a fresh one when it is next needed. The ping
/// first lets the queued ROLLBACK run, so a transaction it did end counts
/// as ended. Said at debug: the caller reports the failure that led here.
async fn sqlite_fit_for_reuse(c: &mut sqlx::SqliteConnection) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::Connection;
    c.ping().await?;
    let fit = !c.is_in_transaction();
    if !fit {
        tracing::debug!("a SQLite connection left inside a failed transaction is closed, not reused");
    }
    Ok(fit)
}

/// How long a SQLite connection waits for the single writer before giving up.
/// Write transactions here last milliseconds; 30 s covers a loaded machine.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections per worker process. A job holds one (its main transaction) and
/// the receipt writer needs another while it runs; the rest serve readers.
const POOL_CONNECTIONS_MAX: u32 = 8;

/// The tracing directive that keeps the database driver to its errors by
/// default. sqlx warns of a statement over 1 s and of a connection that took
/// 2 s to get: on a loaded server those lines came before a command's
/// one-line error. `ODUFLOW_LOG=warn` (or `sqlx=warn`) brings them back.
pub const DRIVER_LOG_DIRECTIVE: &str = "sqlx=error";

/// Settings keys.
pub const SETTING_QUEUE_PAUSED: &str = "queue_paused";
/// When the last verification pass of ready clients ran (epoch ms, the
/// database's clock).
pub const SETTING_VERIFY_LAST: &str = "verify_last_ms";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid database URL {url:?}: {why}")]
    InvalidUrl { url: String, why: String },
    #[error("the database at {0} has not been initialized; run `oduflow init`")]
    NotInitialized(String),
    /// The PostgreSQL server answers, but has no database of that name.
    #[error("database {name:?} does not exist at {url}: create it (createdb {name}), then run `oduflow init`")]
    DatabaseMissing { url: String, name: String },
    #[error(
        "the database at {url} has schema version {have}; this oduflow needs {want}: run `oduflow init` to migrate it"
    )]
    MigrationsPending { url: String, have: i64, want: i64 },
    #[error("a client named {0} already exists")]
    ClientExists(String),
    #[error("no client named {0}")]
    ClientNotFound(String),
    /// A DNS name belongs to at most one client not yet deleted.
    #[error(
        "DNS name {name} is held by {holder} (a name belongs to one client until it is deleted): give this client \
         another with --dns-name"
    )]
    DnsNameTaken { name: String, holder: String },
    #[error(
        "client {0} is still being deleted with its old spec: create it again with another spec once `client show {0}` says deleted"
    )]
    ClientStillDeleting(String),
    #[error("client {0} is deleted or being deleted: `client create` it again with the spec it should have")]
    ClientAbsent(String),
    #[error("client {0} changed while the update was being made (a delete, a reconcile or another update): try again")]
    ClientMoved(String),
    #[error("{0}")]
    UpdateRefused(#[from] oduflow_model::update::UpdateRefused),
    #[error("receipt {0} already exists")]
    ReceiptExists(String),
    #[error("receipt {operation_key} already records resource {recorded}; refusing {offered}")]
    ReceiptIdConflict { operation_key: String, recorded: String, offered: String },
    #[error("no receipt {0}")]
    ReceiptNotFound(String),
    #[error("the lease on client {0} was lost before the job's writes were applied")]
    LeaseLost(String),
    #[error("client lock file: {0}")]
    Lock(String),
    #[error("an API token named {0} already exists")]
    TokenExists(String),
    #[error("no live API token named {0}")]
    TokenNotFound(String),
    #[error("a webhook endpoint named {0} already exists")]
    WebhookExists(String),
    #[error("no webhook endpoint named {0}")]
    WebhookNotFound(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
    /// A database error, with the store operation it failed (the
    /// `Store` method's name).
    #[error("{op}: database error")]
    DbOp {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("oduflow backup copies SQLite databases; back up PostgreSQL with pg_dump")]
    BackupUnsupported,
    /// A feed cursor past the highest position: the database is an older
    /// copy than the one the cursor was read from (a restore), or another
    /// database. Events written since would be skipped up to the cursor.
    #[error(
        "cursor {after} is past this database's last feed position {head}: the database is an older copy than \
         the one the cursor was read from (restored from a backup), or another database; read again from a \
         position at or below {head}, and expect events to repeat"
    )]
    FeedCursorAhead { after: i64, head: i64 },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// Whether waiting may cure it: nothing answering (refused, reset,
    /// timed out), a pool that timed out waiting, a PostgreSQL server at its
    /// connection limit, starting, stopping or in a connection exception
    /// (SQLSTATE classes 08, 53, 57), a database that does not accept
    /// connections now (55000), a SQLite file busy or locked. Not a bad
    /// URL, a missing database or schema, a refused password.
    pub fn is_transient(&self) -> bool {
        let (StoreError::Db(e) | StoreError::DbOp { source: e, .. }) = self else { return false };
        match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(d) => match d.code().as_deref() {
                // PostgreSQL's SQLSTATE: five characters.
                Some(c) if c.len() == 5 => matches!(&c[..2], "08" | "53" | "57") || c == "55000",
                // SQLite's (extended) result code, at most four digits:
                // SQLITE_BUSY, SQLITE_LOCKED.
                Some(c) => c.parse::<i64>().is_ok_and(|n| matches!(n & 0xff, 5 | 6)),
                None => false,
            },
            _ => false,
        }
    }
}

/// Runs a store operation; a database error it ends in names it.
/// How long `Store::probe` waits while a PostgreSQL server answers "too
/// many clients" or "starting up": as long as a pool waits for a connection
/// on the same errors (sqlx counts them transient), so `oduflow check` does
/// not fail where a worker would have waited.
pub const PROBE_SERVER_FULL_WAIT_MAX: Duration = Duration::from_secs(30);

/// One PostgreSQL connection, waiting while the server answers "too many
/// clients" (53300) or "starting up" (57P03), up to `wait_max`; any other
/// error at once.
pub async fn pg_connect_waiting(url: &str, wait_max: Duration) -> std::result::Result<sqlx::PgConnection, sqlx::Error> {
    use sqlx::Connection;
    let start = std::time::Instant::now();
    loop {
        match sqlx::PgConnection::connect(url).await {
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("53300" | "57P03")) && start.elapsed() < wait_max =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            other => return other,
        }
    }
}

pub(crate) async fn named<T>(op: &'static str, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    f.await.map_err(|e| match e {
        StoreError::Db(source) => StoreError::DbOp { op, source },
        e => e,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// The database, on one of two backends. Which one is the store's own
/// business: nothing outside this crate can reach a backend (ask
/// [`Store::backend`] which it is).
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) db: Db,
    /// The bug planted in this store's claims (test builds only).
    pub(crate) planted: PlantedBug,
}

/// A backend's pool(s).
#[derive(Clone, Debug)]
pub(crate) enum Db {
    /// The pool, and the connections that claim jobs (see [`queue::ClaimConns`]).
    Pg(PgPool, queue::ClaimConns),
    Sqlite(SqlitePool),
}

/// Runs `$body` with `$pool` bound to the backend's pool. The SQL used this
/// way is written to be valid on both (`$n` placeholders work on both).
macro_rules! both {
    ($store:expr, $pool:ident => $body:expr) => {
        match &($store).db {
            $crate::Db::Pg($pool, _) => $body,
            $crate::Db::Sqlite($pool) => $body,
        }
    };
}
pub(crate) use both;

/// A read (`$select`, a literal or a macro giving one, naming the infra row `i`) of a client's
/// infra row that its transaction then writes back: on PostgreSQL it locks
/// the row (`FOR UPDATE OF i`), so a concurrent writer waits for this one
/// and then reads what it wrote (read committed would let both read first,
/// and the second write back a target or generation the first had
/// changed); SQLite's write transaction already orders them.
macro_rules! locking {
    ($store:expr, $select:expr) => {
        match &($store).db {
            $crate::Db::Pg(..) => concat!($select, " FOR UPDATE OF i"),
            $crate::Db::Sqlite(_) => $select,
        }
    };
}
pub(crate) use locking;

/// A client's id, target, generation and status, by name (`client create`).
macro_rules! client_by_name {
    () => {
        "SELECT c.id, i.target, i.generation, i.status FROM clients c JOIN infra i ON i.client_id = c.id \
         WHERE c.name = $1"
    };
}

/// A client's id, target and generation, by name (`client delete`).
macro_rules! client_target {
    () => {
        "SELECT i.client_id, i.target, i.generation FROM infra i JOIN clients c ON c.id = i.client_id \
         WHERE c.name = $1"
    };
}

/// Refuses `$dns` when a client other than `$id` that is not deleted holds
/// it (read in the write's transaction, for the message; the unique index
/// `infra_dns_key_live` is what makes the refusal atomic).
macro_rules! dns_name_free {
    ($tx:expr, $dns:expr, $id:expr) => {{
        let holder: Option<String> = sqlx::query_scalar(
            "SELECT c.name FROM infra i JOIN clients c ON c.id = i.client_id \
             WHERE i.dns_key = $1 AND i.status <> 'deleted' AND i.client_id <> $2",
        )
        .bind($dns)
        .bind($id)
        .fetch_optional(&mut *$tx)
        .await?;
        if let Some(h) = holder {
            return Err(StoreError::DnsNameTaken { name: ($dns).to_owned(), holder: format!("client {h}") });
        }
    }};
}
pub(crate) use dns_name_free;

/// A client's spec as its infra row stores it.
pub(crate) struct SpecColumns<'a> {
    pub spec: &'a ClientSpec,
    pub os_id: i64,
    pub image: String,
    pub server: String,
    /// The DNS name it holds: its own, or the client's name.
    pub dns: String,
}

impl<'a> SpecColumns<'a> {
    /// The columns of `spec`, for client `name`.
    pub(crate) fn new(name: &str, spec: &'a ClientSpec) -> Result<Self> {
        Ok(SpecColumns {
            spec,
            os_id: spec.image.os_id().unwrap_or(0),
            image: serde_json::to_string(&spec.image).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            server: serde_json::to_string(&spec.server).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            dns: spec.dns_name.clone().unwrap_or_else(|| name.to_string()),
        })
    }
}

/// The unique index's refusal, when a concurrent write took the name
/// between the check above and this write.
pub(crate) fn dns_name_race(e: sqlx::Error, dns: &str) -> StoreError {
    unique_to(e, || StoreError::DnsNameTaken { name: dns.to_owned(), holder: "another client".into() })
}

macro_rules! const_format_client_select {
    ($tail:literal) => {
        concat!(
            "SELECT c.id, c.name, c.created_ms, i.region, i.plan, i.os_id, i.volume_gb, i.volume_type, \
             i.target, i.generation, i.status, i.blocked_reason, i.blocked_detail, i.key_fingerprint, \
             i.vm_id, i.volume_id, i.vm_dispatch_generation, i.volume_dispatch_generation, \
             i.attach_dispatch_generation, i.updated_ms, i.image, i.server, i.outputs, \
             i.spec_generation, i.spec_updated_ms, i.dns_name, i.preflight_read_failures, \
             i.upgrades_read_failures_generation, i.upgrades_read_failures, i.updated_generation, \
             i.backup_schedule, i.backup_schedule_sets, i.volume_size_id, i.volume_size_gb, i.observe_only \
             FROM clients c JOIN infra i ON i.client_id = c.id ",
            $tail
        )
    };
}

/// Opens a transaction that will write. On SQLite it takes the write lock up
/// front (`BEGIN IMMEDIATE`): a deferred transaction that reads and then
/// writes can fail with SQLITE_BUSY on the upgrade without ever waiting.
pub(crate) trait BeginWrite {
    type Db: sqlx::Database;
    async fn begin_write(&self) -> std::result::Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>;
}

impl BeginWrite for PgPool {
    type Db = sqlx::Postgres;
    async fn begin_write(&self) -> std::result::Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.begin().await
    }
}

impl BeginWrite for SqlitePool {
    type Db = sqlx::Sqlite;
    async fn begin_write(&self) -> std::result::Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

/// The payload key that marks a job made by an operator's reconcile: its
/// runs read by id, never from the bulk view (docs/protocol.md §3.6), so no
/// listing older than the reconcile can answer it, whatever the clocks say.
pub const RECONCILE_PAYLOAD: &str = "reconcile";

/// The migration this build needs (the last in [`Store::migrate`]).
pub const SCHEMA_VERSION: i64 = 23;

/// The PostgreSQL migrations, in order: (version, name, SQL). Embedded with
/// include_str! rather than sqlx's `migrate!` macro, which would pull in
/// sqlx's proc-macro crate.
pub(crate) const PG_MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/postgres/0001_init.sql")),
    (2, "tokens", include_str!("../migrations/postgres/0002_tokens.sql")),
    (3, "adapter state", include_str!("../migrations/postgres/0003_adapter_state.sql")),
    (4, "fencing", include_str!("../migrations/postgres/0004_fencing.sql")),
    (5, "orphans", include_str!("../migrations/postgres/0005_orphans.sql")),
    (6, "rate budget", include_str!("../migrations/postgres/0006_rate_budget.sql")),
    (7, "server spec", include_str!("../migrations/postgres/0007_server_spec.sql")),
    (8, "changes", include_str!("../migrations/postgres/0008_changes.sql")),
    (9, "identity ownership", include_str!("../migrations/postgres/0009_identity_ownership.sql")),
    (10, "listed", include_str!("../migrations/postgres/0010_listed.sql")),
    (11, "dns name unique", include_str!("../migrations/postgres/0011_dns_name_unique.sql")),
    (12, "clock", include_str!("../migrations/postgres/0012_clock.sql")),
    (13, "no replace", include_str!("../migrations/postgres/0013_no_replace.sql")),
    (14, "progress columns", include_str!("../migrations/postgres/0014_progress_columns.sql")),
    (15, "change restored", include_str!("../migrations/postgres/0015_change_restored.sql")),
    (16, "observe only", include_str!("../migrations/postgres/0016_observe_only.sql")),
    (17, "id sources", include_str!("../migrations/postgres/0017_id_sources.sql")),
    (18, "event feed", include_str!("../migrations/postgres/0018_event_feed.sql")),
    (19, "event actor", include_str!("../migrations/postgres/0019_event_actor.sql")),
    (20, "token scopes", include_str!("../migrations/postgres/0020_token_scopes.sql")),
    (21, "webhooks", include_str!("../migrations/postgres/0021_webhooks.sql")),
    (22, "idempotency keys", include_str!("../migrations/postgres/0022_idempotency_keys.sql")),
    (23, "dashboard sessions", include_str!("../migrations/postgres/0023_dashboard_sessions.sql")),
];

/// The SQLite migrations, as [`PG_MIGRATIONS`].
const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/sqlite/0001_init.sql")),
    (2, "tokens", include_str!("../migrations/sqlite/0002_tokens.sql")),
    (3, "adapter state", include_str!("../migrations/sqlite/0003_adapter_state.sql")),
    (4, "fencing", include_str!("../migrations/sqlite/0004_fencing.sql")),
    (5, "orphans", include_str!("../migrations/sqlite/0005_orphans.sql")),
    (6, "rate budget", include_str!("../migrations/sqlite/0006_rate_budget.sql")),
    (7, "server spec", include_str!("../migrations/sqlite/0007_server_spec.sql")),
    (8, "changes", include_str!("../migrations/sqlite/0008_changes.sql")),
    (9, "identity ownership", include_str!("../migrations/sqlite/0009_identity_ownership.sql")),
    (10, "listed", include_str!("../migrations/sqlite/0010_listed.sql")),
    (11, "dns name unique", include_str!("../migrations/sqlite/0011_dns_name_unique.sql")),
    (12, "clock", include_str!("../migrations/sqlite/0012_clock.sql")),
    (13, "no replace", include_str!("../migrations/sqlite/0013_no_replace.sql")),
    (14, "progress columns", include_str!("../migrations/sqlite/0014_progress_columns.sql")),
    (15, "change restored", include_str!("../migrations/sqlite/0015_change_restored.sql")),
    (16, "observe only", include_str!("../migrations/sqlite/0016_observe_only.sql")),
    (17, "id sources", include_str!("../migrations/sqlite/0017_id_sources.sql")),
    (18, "event feed", include_str!("../migrations/sqlite/0018_event_feed.sql")),
    (19, "event actor", include_str!("../migrations/sqlite/0019_event_actor.sql")),
    (20, "token scopes", include_str!("../migrations/sqlite/0020_token_scopes.sql")),
    (21, "webhooks", include_str!("../migrations/sqlite/0021_webhooks.sql")),
    (22, "idempotency keys", include_str!("../migrations/sqlite/0022_idempotency_keys.sql")),
    (23, "dashboard sessions", include_str!("../migrations/sqlite/0023_dashboard_sessions.sql")),
];

/// The default database: a SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://oduflow.db";

impl Store {
    /// A store on `db`, with no planted bug.
    pub(crate) fn on(db: Db) -> Store {
        Store { db, planted: PlantedBug::none() }
    }

    /// This store with `bug` planted in its claims (test builds only): the
    /// worker binary plants the bug its process was started with, a test
    /// the one it proves is caught.
    pub fn with_planted(mut self, bug: PlantedBug) -> Store {
        self.planted = bug;
        self
    }

    /// The bug planted in this store's claims (test builds only).
    pub fn planted(&self) -> PlantedBug {
        self.planted
    }

    /// Parses a URL without touching anything, so a malformed one is refused
    /// before any file is created or any connection made.
    pub fn check_url(url: &str) -> Result<Backend> {
        let bad = |why: &str| StoreError::InvalidUrl { url: redact_url(url), why: why.to_owned() };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            PgConnectOptions::from_str(url).map_err(|e| bad(&e.to_string()))?;
            Ok(Backend::Postgres)
        } else if url.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(url).map_err(|e| bad(&e.to_string()))?;
            Ok(Backend::Sqlite)
        } else {
            Err(bad("expected postgres://..., postgresql://... or sqlite://PATH"))
        }
    }

    /// Opens the database. With `create`, a missing SQLite file is created
    /// (only `oduflow init` and the demo do that); without it, a missing or
    /// uninitialized database is an error that changes nothing.
    pub async fn connect(url: &str, create: bool) -> Result<Store> {
        crate::named("connect", async move { Self::connect_sized(url, create, POOL_CONNECTIONS_MAX).await }).await
    }

    /// Like `connect`, with a pool of `max_connections`. A worker running N
    /// jobs at once needs 2N: on PostgreSQL each job holds its main
    /// transaction's connection and needs one more for receipts and reads,
    /// so a smaller pool can starve every job at once.
    pub async fn connect_sized(url: &str, create: bool, max_connections: u32) -> Result<Store> {
        crate::named("connect_sized", async move {
            let store = match Self::check_url(url)? {
                Backend::Postgres => {
                    let opts = PgConnectOptions::from_str(url).expect("checked");
                    let name = opts.get_database().unwrap_or_default().to_owned();
                    let pool = PgPoolOptions::new()
                        .max_connections(max_connections)
                        .acquire_timeout(Duration::from_secs(30))
                        .connect_with(opts)
                        .await
                        .map_err(|e| match e {
                            // invalid_catalog_name: said once, with what to do.
                            sqlx::Error::Database(d) if d.code().as_deref() == Some("3D000") => {
                                StoreError::DatabaseMissing { url: redact_url(url), name }
                            }
                            e => StoreError::Db(e),
                        })?;
                    let claims = queue::ClaimConns::new(max_connections as usize);
                    Store::on(Db::Pg(pool, claims))
                }
                Backend::Sqlite => {
                    let opts = SqliteConnectOptions::from_str(url).expect("checked");
                    if create {
                        sqlite_file_private(url, &opts)?;
                    }
                    let opts = opts
                        .create_if_missing(create)
                        .journal_mode(SqliteJournalMode::Wal)
                        // Receipts must survive a crash of the machine, not just of
                        // the process: sync every commit.
                        .synchronous(SqliteSynchronous::Full)
                        .busy_timeout(SQLITE_BUSY_TIMEOUT)
                        // Without it, INSERT OR REPLACE deletes a row without
                        // firing its DELETE triggers: a receipt could vanish.
                        .pragma("recursive_triggers", "ON")
                        .foreign_keys(true);
                    let pool = SqlitePoolOptions::new()
                        .max_connections(max_connections)
                        .acquire_timeout(SQLITE_BUSY_TIMEOUT)
                        .after_release(|c, _| Box::pin(sqlite_fit_for_reuse(c)))
                        .connect_with(opts)
                        .await
                        .map_err(|e| match e {
                            sqlx::Error::Database(_) if !create => StoreError::NotInitialized(redact_url(url)),
                            e => StoreError::Db(e),
                        })?;
                    Store::on(Db::Sqlite(pool))
                }
            };
            if !create && !store.is_initialized().await? {
                return Err(StoreError::NotInitialized(redact_url(url)));
            }
            if !create {
                // An older schema would fail later, request by request (every
                // Vultr request reserves its slot in `rate_budget`, added in 6).
                let have = store.schema_version().await?;
                if have < SCHEMA_VERSION {
                    return Err(StoreError::MigrationsPending { url: redact_url(url), have, want: SCHEMA_VERSION });
                }
            }
            Ok(store)
        })
        .await
    }

    /// Opens one connection and closes it, without a pool: the driver's own
    /// error (connection refused, authentication failed, no such database)
    /// where a pool would only say that it timed out waiting, after 30 s.
    /// Changes nothing: a missing SQLite file is not created. For
    /// `oduflow check`; the caller bounds the wait.
    pub async fn probe(url: &str) -> Result<()> {
        use sqlx::Connection;
        crate::named("probe", async move {
            match Self::check_url(url)? {
                Backend::Postgres => {
                    pg_connect_waiting(url, PROBE_SERVER_FULL_WAIT_MAX).await?.close().await?;
                }
                Backend::Sqlite => {
                    let opts = SqliteConnectOptions::from_str(url).expect("checked").create_if_missing(false);
                    let conn = sqlx::SqliteConnection::connect_with(&opts).await.map_err(|e| match e {
                        sqlx::Error::Database(_) => StoreError::NotInitialized(redact_url(url)),
                        e => StoreError::Db(e),
                    })?;
                    conn.close().await?;
                }
            }
            Ok(())
        })
        .await
    }

    pub fn backend(&self) -> Backend {
        match &self.db {
            Db::Pg(..) => Backend::Postgres,
            Db::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Creates or migrates the schema. Running it again is harmless.
    pub async fn migrate(&self) -> Result<()> {
        crate::named("migrate", async move {
            use sqlx::migrate::{Migration, MigrationType, Migrator};
            use sqlx::{AssertSqlSafe, SqlSafeStr};
            let files = match &self.db {
                Db::Pg(..) => PG_MIGRATIONS,
                Db::Sqlite(_) => SQLITE_MIGRATIONS,
            };
            let migrator = Migrator::with_migrations(
                files
                    .iter()
                    .map(|(v, d, sql)| {
                        Migration::new(
                            *v,
                            (*d).into(),
                            MigrationType::Simple,
                            AssertSqlSafe(*sql).into_sql_str(),
                            false,
                        )
                    })
                    .collect(),
            );
            match &self.db {
                Db::Pg(p, _) => migrator.run(p).await?,
                Db::Sqlite(p) => migrator.run(p).await?,
            }
            Ok(())
        })
        .await
    }

    /// Writes a consistent copy of a SQLite database to `path`, a file that
    /// must not exist (`VACUUM INTO`: one read transaction, so a commit made
    /// meanwhile is wholly in the copy or not at all, and writers go on;
    /// a plain copy of the file can miss commits still in the WAL). SQLite
    /// does not fsync the copy: the caller does. PostgreSQL is refused:
    /// `pg_dump` is its tool.
    pub async fn sqlite_backup_into(&self, path: &str) -> Result<()> {
        crate::named("sqlite_backup_into", async move {
            match &self.db {
                Db::Sqlite(p) => {
                    sqlx::query("VACUUM INTO $1").bind(path).execute(p).await?;
                    Ok(())
                }
                Db::Pg(..) => Err(StoreError::BackupUnsupported),
            }
        })
        .await
    }

    /// The newest migration applied.
    pub async fn schema_version(&self) -> Result<i64> {
        crate::named("schema_version", async move {
            let v: i64 = both!(self, p => {
                sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success")
                    .fetch_one(p)
                    .await?
            });
            Ok(v)
        })
        .await
    }

    async fn is_initialized(&self) -> Result<bool> {
        let n: i64 = match &self.db {
            Db::Pg(p, _) => {
                sqlx::query_scalar(
                    "SELECT count(*) FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_name = 'dispatch_receipts'",
                )
                .fetch_one(p)
                .await?
            }
            Db::Sqlite(p) => {
                sqlx::query_scalar(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dispatch_receipts'",
                )
                .fetch_one(p)
                .await?
            }
        };
        Ok(n == 1)
    }

    pub async fn close(&self) {
        both!(self, p => p.close().await)
    }

    // ---- clients -------------------------------------------------------

    /// Records the intent for a new client (`present`, generation 1) and
    /// enqueues its provisioning, in one transaction.
    pub async fn client_create(
        &self,
        name: &ClientName,
        spec: &ClientSpec,
        by: &str,
        now_ms: i64,
        attempts_max: i32,
    ) -> Result<ClientRow> {
        self.client_create_as(name, spec, None, by, now_ms, attempts_max).await
    }

    /// A recovery under a name or an id already taken is refused.
    async fn refuse_recover_clash(&self, name: &ClientName, recover: Option<&oduflow_model::ClientId>) -> Result<()> {
        if let Some(id) = recover
            && (self.client_get_by_id(id).await?.is_some() || self.client_get(name.as_str()).await?.is_some())
        {
            return Err(StoreError::ClientExists(format!("{name} (or client id {id})")));
        }
        Ok(())
    }

    /// The refusals [`Store::client_create_as`] would answer that reads
    /// alone tell (a name or an id taken, a DNS name another client holds),
    /// nothing written: asked before the catalog's preflight, so a create
    /// certain to be refused spends no provider request. The create checks
    /// again in its own transaction.
    pub async fn client_create_refusal(
        &self,
        name: &ClientName,
        spec: &ClientSpec,
        recover: Option<&oduflow_model::ClientId>,
    ) -> Result<()> {
        crate::named("client_create_refusal", async move {
            self.refuse_recover_clash(name, recover).await?;
            let found = self.client_get(name.as_str()).await?;
            if found.as_ref().is_some_and(|c| c.infra.target != Target::Absent) {
                return Err(StoreError::ClientExists(name.to_string()));
            }
            let cols = SpecColumns::new(name.as_str(), spec)?;
            let (dns, own) = (cols.dns.as_str(), found.map(|c| c.id.0).unwrap_or_default());
            both!(self, p => {
                let mut c = p.acquire().await?;
                crate::dns_name_free!(c, dns, own.as_str());
            });
            Ok(())
        })
        .await
    }

    /// [`Store::client_create`], under a given id when `recover` names one:
    /// a client this database does not know (created after the backup it
    /// was restored from) comes back under the id its resources' labels
    /// name, so its first provisioning adopts them. Refused when the name
    /// or the id is taken.
    pub async fn client_create_as(
        &self,
        name: &ClientName,
        spec: &ClientSpec,
        recover: Option<&oduflow_model::ClientId>,
        by: &str,
        now_ms: i64,
        attempts_max: i32,
    ) -> Result<ClientRow> {
        crate::named("client_create", async move {
            self.refuse_recover_clash(name, recover).await?;
            let id = recover.cloned().unwrap_or_else(oduflow_model::ClientId::new_v7);
            // No hostname (`ClientSpec::parse`): the name, never the label.
            let mut spec = spec.clone();
            if spec.server.hostname.is_empty() {
                spec.server.hostname = name.to_string();
            }
            let cols = SpecColumns::new(name.as_str(), &spec)?;
            let SpecColumns { spec, os_id, ref image, ref server, ref dns } = cols;
            let dns = dns.as_str();
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                // Read first without the lock: a client present is refused
                // without waiting for its run; one going away is read again,
                // locked, to be brought back.
                let exists: Option<(String, String, i64, String)> =
                    sqlx::query_as(client_by_name!()).bind(name.as_str()).fetch_optional(&mut *tx).await?;
                let exists = match exists {
                    Some((_, target, ..)) if target == Target::Absent.as_str() => {
                        let locked = locking!(self, client_by_name!());
                        sqlx::query_as(locked).bind(name.as_str()).fetch_optional(&mut *tx).await?
                    }
                    exists => exists,
                };
                if let Some(found) = exists {
                    (*tx).client_bring_back(name, found, &cols, by, now_ms, attempts_max).await?;
                    tx.commit().await?;
                    return self.client_get(name.as_str()).await?
                        .ok_or_else(|| StoreError::ClientNotFound(name.to_string()));
                }
                sqlx::query("INSERT INTO clients (id, name, created_ms) VALUES ($1, $2, $3)")
                    .bind(id.as_str())
                    .bind(name.as_str())
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| unique_to(e, || StoreError::ClientExists(name.to_string())))?;
                crate::dns_name_free!(tx, dns, id.as_str());
                sqlx::query(
                    "INSERT INTO infra (client_id, region, plan, os_id, volume_gb, volume_type, target, \
                     generation, status, updated_ms, image, server, dns_name, dns_key) \
                     VALUES ($1, $2, $3, $4, $5, $6, 'present', 1, 'pending', $7, $8, $9, $10, $11)",
                )
                .bind(id.as_str()).bind(&spec.region).bind(&spec.plan).bind(os_id)
                .bind(spec.volume_gb).bind(spec.volume_type.as_str()).bind(now_ms)
                .bind(image).bind(server).bind(&spec.dns_name).bind(dns)
                .execute(&mut *tx).await.map_err(|e| crate::dns_name_race(e, dns))?;
                let job = NewJob::for_client(&id, JobKind::Provision, 1, now_ms, attempts_max);
                queue::job_insert(&mut *tx, &job).await?;
                queue::event_by(&mut *tx, by, Some(&id), EventKind::ClientCreated, &serde_json::json!({
                    "name": name.as_str(), "spec": spec, "recovered": recover.is_some(),
                }), now_ms).await?;
                tx.commit().await?;
            });
            self.client_get(name.as_str()).await?.ok_or_else(|| StoreError::ClientNotFound(name.to_string()))
        })
        .await
    }

    /// Sets the target to `absent`: bumps the generation (so queued creation
    /// jobs become stale) and enqueues deletion. Deleting a client whose
    /// target is already `absent` changes nothing.
    pub async fn client_delete(&self, name: &str, by: &str, now_ms: i64, attempts_max: i32) -> Result<ClientRow> {
        crate::named("client_delete", async move {
            let lock = locking!(self, client_target!());
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                // Read first without the lock: a client already going away
                // needs no write, and so waits for no run (a run holds its
                // row's lock to its end). Otherwise read again, locked.
                let row: Option<(String, String, i64)> =
                    sqlx::query_as(client_target!()).bind(name).fetch_optional(&mut *tx).await?;
                let row = match row {
                    Some((_, target, _)) if target != Target::Absent.as_str() => {
                        sqlx::query_as(lock).bind(name).fetch_optional(&mut *tx).await?
                    }
                    row => row,
                };
                let Some((id, target, generation)) = row else {
                    return Err(StoreError::ClientNotFound(name.to_owned()));
                };
                if target != Target::Absent.as_str() {
                    let generation = generation + 1;
                    sqlx::query(
                        "UPDATE infra SET target = 'absent', generation = $2, status = 'deleting', \
                         blocked_reason = NULL, blocked_detail = NULL, updated_ms = $3, \
                         preflight_read_failures = 0, upgrades_read_failures_generation = NULL, \
                         upgrades_read_failures = 0, updated_generation = 0, backup_schedule = NULL, \
                         backup_schedule_sets = 0, volume_size_id = NULL, volume_size_gb = NULL, progress = '{}' \
                         WHERE client_id = $1",
                    )
                    .bind(&id)
                    .bind(generation)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
                    let id = oduflow_model::ClientId(id);
                    let job = NewJob::for_client(&id, JobKind::Deprovision, generation, now_ms, attempts_max);
                    queue::job_insert(&mut *tx, &job).await?;
                    queue::event_by(&mut *tx, by, Some(&id), EventKind::ClientDeleteRequested,
                        &serde_json::json!({ "generation": generation }), now_ms).await?;
                }
                tx.commit().await?;
            });
            self.client_get(name).await?.ok_or_else(|| StoreError::ClientNotFound(name.to_owned()))
        })
        .await
    }

    pub async fn client_get(&self, name: &str) -> Result<Option<ClientRow>> {
        crate::named("client_get", async move {
            let sql = const_format_client_select!("WHERE c.name = $1");
            both!(self, p => {
                let row = sqlx::query(sql).bind(name).fetch_optional(p).await?;
                row.as_ref().map(rows::client_from_row).transpose()
            })
        })
        .await
    }

    pub async fn client_get_by_id(&self, id: &oduflow_model::ClientId) -> Result<Option<ClientRow>> {
        crate::named("client_get_by_id", async move {
            let sql = const_format_client_select!("WHERE c.id = $1");
            both!(self, p => {
                let row = sqlx::query(sql).bind(id.as_str()).fetch_optional(p).await?;
                row.as_ref().map(rows::client_from_row).transpose()
            })
        })
        .await
    }

    pub async fn client_list(&self) -> Result<Vec<ClientRow>> {
        crate::named("client_list", async move {
            let sql = const_format_client_select!("ORDER BY c.name");
            both!(self, p => {
                let rows = sqlx::query(sql).fetch_all(p).await?;
                rows.iter().map(rows::client_from_row).collect()
            })
        })
        .await
    }

    /// Counts clients per status.
    pub async fn client_status_counts(&self) -> Result<Vec<(ClientStatus, i64)>> {
        crate::named("client_status_counts", async move {
            both!(self, p => {
                let rows: Vec<(String, i64)> =
                    sqlx::query_as("SELECT status, count(*) FROM infra GROUP BY status ORDER BY status")
                        .fetch_all(p)
                        .await?;
                rows.into_iter()
                    .map(|(s, n)| Ok((ClientStatus::parse(&s).ok_or_else(|| StoreError::Corrupt(s))?, n)))
                    .collect()
            })
        })
        .await
    }

    // ---- settings --------------------------------------------------------

    pub async fn setting_get(&self, key: &str) -> Result<Option<String>> {
        crate::named("setting_get", async move {
            both!(self, p => Ok(sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
                .bind(key).fetch_optional(p).await?))
        })
        .await
    }

    pub async fn setting_set(&self, key: &str, value: &str) -> Result<()> {
        crate::named("setting_set", async move {
            both!(self, p => {
                let mut c = p.acquire().await?;
                (*c).setting_put(key, value).await
            })
        })
        .await
    }

    /// Claims the verification pass that is due: true for exactly one
    /// caller once `interval_ms` has passed since the last pass (on the
    /// database's clock); the claim is the new last pass. The first call
    /// only records the time (a pass an interval after the first worker
    /// started). Each caller's own interval counts, so a shorter one set
    /// since takes effect at once.
    pub async fn verify_claim(&self, now_ms: i64, interval_ms: i64) -> Result<bool> {
        crate::named("verify_claim", async move {
            // Read first: an idle worker asks often, and only a due pass
            // writes (a write would take SQLite's lock each time).
            let last = self.setting_get(SETTING_VERIFY_LAST).await?.and_then(|v| v.parse::<i64>().ok());
            if last.is_some_and(|l| now_ms < l.saturating_add(interval_ms)) {
                return Ok(false);
            }
            let now = now_ms.to_string();
            both!(self, p => {
                let moved = sqlx::query(
                    "UPDATE settings SET value = $2 WHERE key = $1 AND CAST(value AS BIGINT) + $3 <= $4")
                    .bind(SETTING_VERIFY_LAST).bind(&now).bind(interval_ms).bind(now_ms)
                    .execute(p).await?.rows_affected();
                if moved == 0 {
                    sqlx::query("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
                        .bind(SETTING_VERIFY_LAST).bind(&now).execute(p).await?;
                }
                Ok(moved == 1)
            })
        })
        .await
    }

    // ---- events ----------------------------------------------------------

    pub async fn events_for_client(&self, id: &oduflow_model::ClientId) -> Result<Vec<EventRow>> {
        crate::named("events_for_client", async move {
            both!(self, p => {
                let rows = sqlx::query("SELECT id, client_ref, kind, detail, at_ms, actor FROM events \
                                        WHERE client_ref = $1 ORDER BY id")
                    .bind(id.as_str()).fetch_all(p).await?;
                rows.iter().map(rows::event_from_row).collect()
            })
        })
        .await
    }

    /// The latest `limit` events, newest first (the dashboard's and the
    /// API's recent activity).
    pub async fn events_recent(&self, limit: i64) -> Result<Vec<EventRow>> {
        crate::named("events_recent", async move {
            both!(self, p => {
                let rows = sqlx::query("SELECT id, client_ref, kind, detail, at_ms, actor FROM events \
                                        ORDER BY id DESC LIMIT $1")
                    .bind(limit).fetch_all(p).await?;
                rows.iter().map(rows::event_from_row).collect()
            })
        })
        .await
    }

    pub async fn events_by_kind(&self, kind: EventKind) -> Result<Vec<EventRow>> {
        crate::named("events_by_kind", async move {
            both!(self, p => {
                let rows = sqlx::query("SELECT id, client_ref, kind, detail, at_ms, actor FROM events \
                                        WHERE kind = $1 ORDER BY id")
                    .bind(kind.as_str()).fetch_all(p).await?;
                rows.iter().map(rows::event_from_row).collect()
            })
        })
        .await
    }
}

/// Creates the SQLite database's file readable by its user only, before
/// SQLite would create it with the umask's mode (an existing file is left
/// as it is).
fn sqlite_file_private(url: &str, opts: &SqliteConnectOptions) -> Result<()> {
    let file = opts.get_filename();
    if file.to_str().is_some_and(|f| f.is_empty() || f.contains(":memory:")) {
        return Ok(());
    }
    files::private_file(file).map_err(|e| StoreError::InvalidUrl {
        url: redact_url(url),
        why: format!("cannot create {}: {e}", file.display()),
    })
}

/// Maps a unique-constraint violation to a domain error.
fn unique_to(e: sqlx::Error, f: impl FnOnce() -> StoreError) -> StoreError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => f(),
        _ => StoreError::Db(e),
    }
}

/// Hides a password in a database URL before it is shown anywhere.
pub fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((creds, host)) = rest.rsplit_once('@')
        && let Some((user, _)) = creds.split_once(':')
    {
        return format!("{scheme}://{user}:***@{host}");
    }
    url.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(Store::check_url("sqlite://x.db").unwrap(), Backend::Sqlite);
        assert_eq!(Store::check_url("postgres://u@localhost/db").unwrap(), Backend::Postgres);
        assert!(Store::check_url("mysql://x").is_err());
        assert!(Store::check_url("").is_err());
        assert!(Store::check_url("postgres://u@host:notaport/db").is_err());
        assert_eq!(redact_url("postgres://u:secret@h/db"), "postgres://u:***@h/db");
    }

    /// One SQLite file named by two paths (here a symlink) is one set of
    /// client locks: a second claim of the client through the other path
    /// finds nothing while the first holds it.
    #[tokio::test]
    async fn one_sqlite_file_by_two_paths_locks_each_client_once() {
        let dir = tempfile::tempdir().unwrap();
        let real = testing::sqlite_url(dir.path());
        let a = Store::connect(&real, true).await.unwrap();
        a.migrate().await.unwrap();
        std::os::unix::fs::symlink(dir.path().join("oduflow.db"), dir.path().join("link.db")).unwrap();
        let b = Store::connect(&format!("sqlite://{}", dir.path().join("link.db").display()), false).await.unwrap();
        let spec = oduflow_model::ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
        a.client_create(&oduflow_model::ClientName::parse("acme").unwrap(), &spec, "test", 1, 3).await.unwrap();
        let first = a.job_claim_next("a", 1).await.unwrap().expect("a claims the job");
        // A duplicate delivery of the same work, claimable by time alone.
        let mut dup = NewJob::for_client(&first.job.client_id, oduflow_model::JobKind::Provision, 1, 1, 3);
        dup.identity_key = None;
        b.job_enqueue(&dup).await.unwrap();
        assert!(b.job_claim_next("b", 10_000).await.unwrap().is_none(), "the client was claimed twice");
        drop(first);
    }

    /// The planted bug `lease_overlap` is the planting store's: its claims
    /// take the old timed lease and their fences never refuse, so a second
    /// worker claims the client once the lease has run out while the first
    /// still holds it (the test above: what the real protocol does).
    #[cfg(feature = "failpoints")]
    #[tokio::test]
    async fn a_planted_lease_overlap_is_the_planting_stores_alone() {
        let dir = tempfile::tempdir().unwrap();
        let url = testing::sqlite_url(dir.path());
        let plain = Store::connect(&url, true).await.unwrap();
        plain.migrate().await.unwrap();
        let bug = PlantedBug::of(Bug::LeaseOverlap);
        let a = Store::connect(&url, false).await.unwrap().with_planted(bug);
        let b = Store::connect(&url, false).await.unwrap().with_planted(bug);
        let spec = oduflow_model::ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
        plain.client_create(&oduflow_model::ClientName::parse("acme").unwrap(), &spec, "test", 1, 3).await.unwrap();
        let first = a.job_claim_next("a", 1).await.unwrap().expect("a claims the job");
        // A duplicate delivery of the same work, claimable by time alone.
        let mut dup = NewJob::for_client(&first.job.client_id, oduflow_model::JobKind::Provision, 1, 1, 3);
        dup.identity_key = None;
        plain.job_enqueue(&dup).await.unwrap();
        let second = b.job_claim_next("b", 10_000).await.unwrap().expect("the bug: a second claim");
        assert_eq!(first.fence().check().await.unwrap(), Footing::Held, "the bug: a fence that never refuses");
        assert_eq!(plain.planted(), PlantedBug::none(), "the store without the bug");
        drop(second);
        drop(first);
    }
}
