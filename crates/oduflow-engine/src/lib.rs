//! oduflow's engine: the worker that claims jobs, the executor that converges
//! one client's infrastructure towards its target, and the receipt writer.
//!
//! Invariants kept here:
//! - a create or attach is sent only after its receipt is committed, and at
//!   most once per operation key: the executor never re-sends when a receipt
//!   exists, whatever happened to the first request;
//! - the id of a created resource is committed on its receipt (independently of
//!   the job) before any other write that depends on it;
//! - the job's main transaction is committed once, at the end of the run;
//! - nothing waits on the provider inside a job: it re-runs later instead.

mod clock;
pub mod command_adapter;
pub mod current;
pub mod dns_inventory;
mod executor;
mod fleet_view;
pub mod operator;
mod outage;
mod receipt_writer;
mod run_stats;
pub mod webhook;
mod worker;

pub use clock::{DB_CLOCK_RESAMPLE, DbClock};
pub use fleet_view::ViewFigures;
pub use outage::{OUTAGE_REPORT_EVERY_MS, Outage};
pub use receipt_writer::ReceiptWriter;
pub use run_stats::{HistogramSnapshot, RunResult, RunStats};
pub use worker::*;

use std::sync::Arc;

/// Engine settings. Defaults suit production against Vultr; tests shrink the
/// intervals.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Names this worker in leases and events.
    pub worker_id: String,
    /// The base interval between observations of one resource.
    pub poll_interval_ms: i64,
    /// The polling limit before an outcome is declared uncertain.
    pub observations_max: i64,
    /// Failure backoff base; doubles per failed attempt.
    pub retry_base_ms: i64,
    /// Failed runs before a job is failed and its client blocked.
    pub attempts_max: i32,
    /// How long an idle worker sleeps before looking for work again.
    pub idle_ms: u64,
    /// Jobs run concurrently by one worker process.
    pub concurrency: usize,
    /// How long after its create a VM may stay short of active/ok (or a
    /// volume short of active) before the client blocks `not_ready`. Zero:
    /// derived from the polling limit (see [`EngineConfig::ready_wait`]).
    pub ready_wait_ms: i64,
    /// How long after a volume's resize was sent the next resize waits:
    /// Vultr refuses one sooner (docs/vultr.md §3).
    pub resize_interval_ms: i64,
    /// Watch first provisioning through shared listings of instances and
    /// blocks (the bulk view) rather than a GET by id per
    /// resource per poll. Label searches share one listing per kind.
    pub bulk_view: bool,
    /// How often one worker lists every ready client's VM and volume and
    /// runs again each whose listing differs (`operator::verify`); 0: never.
    pub verify_interval_ms: i64,
    /// How long a client stays ready before the pass looks at it (a
    /// listing lags a create).
    pub verify_grace_ms: i64,
    /// The bug planted in this worker's runs (test builds only; none by
    /// default).
    pub planted: PlantedBug,
}

impl EngineConfig {
    /// The readiness wait in force: `ready_wait_ms`, or else as long as the
    /// polling limit lasts at its slowest interval (observations_max x
    /// poll_interval x 6; 30 minutes by default, seconds against a fast
    /// simulator).
    pub fn ready_wait(&self) -> i64 {
        if self.ready_wait_ms > 0 {
            self.ready_wait_ms
        } else {
            self.observations_max.saturating_mul(self.poll_interval_ms).saturating_mul(6)
        }
    }
}

/// The defaults of the settings an operator can set (the binary's
/// configuration reads them from here).
impl EngineConfig {
    pub const POLL_INTERVAL_MS_DEFAULT: i64 = 5_000;
    /// 60 observations at a 5 s base with backoff: well past the
    /// minutes-long windows in which Vultr may not list or find a new
    /// resource (docs/vultr.md §7).
    pub const OBSERVATIONS_MAX_DEFAULT: i64 = 60;
    pub const ATTEMPTS_MAX_DEFAULT: i32 = 10;
    pub const CONCURRENCY_DEFAULT: usize = 4;
    /// Vultr's 60 s between two resizes of a volume, and a second more:
    /// the interval runs from when Vultr applied the resize, and it was
    /// sent a moment before (Vultr's own Ansible tests wait 61 s).
    pub const RESIZE_INTERVAL_MS_DEFAULT: i64 = 61_000;
    /// Every 15 minutes: two listings a pass (a page per 100 resources),
    /// a small share of the rate budget at any fleet size.
    pub const VERIFY_INTERVAL_MS_DEFAULT: i64 = 900_000;
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            worker_id: format!("worker-{}", std::process::id()),
            poll_interval_ms: Self::POLL_INTERVAL_MS_DEFAULT,
            observations_max: Self::OBSERVATIONS_MAX_DEFAULT,
            retry_base_ms: 1_000,
            attempts_max: Self::ATTEMPTS_MAX_DEFAULT,
            idle_ms: 200,
            concurrency: Self::CONCURRENCY_DEFAULT,
            ready_wait_ms: 0,
            resize_interval_ms: Self::RESIZE_INTERVAL_MS_DEFAULT,
            bulk_view: true,
            verify_interval_ms: Self::VERIFY_INTERVAL_MS_DEFAULT,
            verify_grace_ms: crate::operator::LISTING_SETTLE_MS_DEFAULT,
            planted: PlantedBug::none(),
        }
    }
}

/// The time source. Tests and simulations may inject their own.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The host's wall clock (with the test hook below).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        host_now_ms()
    }
}

/// The host's wall clock in epoch milliseconds. In test builds (the
/// `failpoints` feature) `ODUFLOW_CLOCK_OFFSET_MS` (signed milliseconds) is
/// added to every reading, so a test can run a process whose host clock is
/// wrong by minutes or hours.
pub fn host_now_ms() -> i64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    ms.saturating_add(host_clock_offset_ms())
}

/// Test builds only: `ODUFLOW_CLOCK_OFFSET_MS` sets this host's clock off,
/// read once; a product build never reads it.
fn host_clock_offset_ms() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let asked = || cfg!(feature = "failpoints").then(|| std::env::var("ODUFLOW_CLOCK_OFFSET_MS"));
    *OFFSET.get_or_init(|| match asked() {
        None | Some(Err(_)) => 0,
        Some(Ok(v)) => v.trim().parse().unwrap_or_else(|_| {
            // A test hook only: a test that asked for a wrong clock and
            // silently got the right one could not fail.
            panic!("ODUFLOW_CLOCK_OFFSET_MS={v:?}: expected signed milliseconds")
        }),
    })
}

pub type SharedClock = Arc<dyn Clock>;

/// A clock that moves only when told: for tests that wait on time (a
/// backoff, a deadline) without sleeping.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    pub fn at(ms: i64) -> Self {
        Self(std::sync::atomic::AtomicI64::new(ms))
    }

    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("store")]
    Store(#[from] oduflow_store::StoreError),
    #[error("fail point {0} triggered")]
    FailPoint(&'static str),
    #[error("job run panicked: {0}")]
    Panicked(String),
    #[error("invariant violated: {0}")]
    Invariant(String),
    /// The record moved on while the run was in flight (SQLite: a target
    /// change landed): the run sends nothing more and ends stale.
    #[error("the record moved on to a newer generation during the run")]
    Superseded,
    /// The claim no longer holds the client (the claim connection died):
    /// the run sends nothing more.
    #[error("the run's claim on its client was lost: {0}")]
    ClaimLost(String),
    /// A read outside any receipt's polling (the preflight's catalog, the
    /// backup schedule) failed after its retries: the run fails and is
    /// retried with backoff until `attempts_max`.
    #[error("provider read failed: {0}")]
    ProviderRead(String),
}

/// How long a worker reuses a region's catalog for preflights: regions,
/// plans, images, SSH keys and firewall groups change rarely, and a client
/// created in a burst of a hundred should not cost eight hundred reads.
pub const CATALOG_TTL_MS: i64 = 300_000;

/// The catalogs a worker has read, per region, with when it read them.
#[derive(Default)]
pub struct CatalogCache(std::sync::Mutex<std::collections::HashMap<String, (i64, oduflow_model::provider::Catalog)>>);

impl CatalogCache {
    pub(crate) fn get(&self, region: &str, now_ms: i64) -> Option<oduflow_model::provider::Catalog> {
        let m = self.0.lock().expect("catalog cache poisoned");
        m.get(region).filter(|(at, _)| now_ms - at < CATALOG_TTL_MS).map(|(_, c)| c.clone())
    }

    /// Drops a region's catalog: after a preflight refused a spec, the
    /// operator's fix must be seen by the next one.
    pub(crate) fn forget(&self, region: &str) {
        self.0.lock().expect("catalog cache poisoned").remove(region);
    }

    pub(crate) fn put(&self, region: &str, now_ms: i64, c: oduflow_model::provider::Catalog) {
        self.0.lock().expect("catalog cache poisoned").insert(region.to_owned(), (now_ms, c));
    }
}

/// Activates the fail points named in `FAILPOINTS` for the life of the
/// returned guard (only in builds with the `failpoints` feature).
pub fn fail_scenario() -> fail::FailScenario<'static> {
    fail::FailScenario::setup()
}

/// Evaluates a named fail point (a no-op unless built with the `failpoints`
/// feature). Configured via the `FAILPOINTS` environment variable, e.g.
/// `FAILPOINTS=main-tx-commit=return` (fails the step with an error),
/// `=panic`, or `=pause` (blocks, so a test can SIGKILL the worker there).
macro_rules! fail_step {
    ($name:literal) => {
        $crate::crash_if_asked($name);
        fail::fail_point!($name, |_| Err($crate::EngineError::FailPoint($name)))
    };
}

/// Every protocol step with a fail point, in protocol order. Crash tests walk
/// this list.
pub const FAIL_POINTS: &[&str] = &[
    "job-claimed",
    "receipt-committed",
    "request-about-to-be-sent",
    "request-sent",
    "response-received",
    "id-recorded",
    "attach-sent",
    "attach-confirmed",
    "delete-sent",
    "get-404-recorded",
    "adapter-removed",
    "change-claimed",
    "change-sent",
    "change-answer-recorded",
    "change-confirmed",
    "main-tx-commit",
];

/// Test builds only: a deliberate protocol violation the worker's
/// configuration carries ([`EngineConfig::planted`]; the worker binary reads
/// it once from `ODUFLOW_PLANTED_BUG`), so the fault campaign can show that
/// it catches such bugs ([`Bug`] names them all; the store's
/// `lease_overlap` is planted in the [`oduflow_store::Store`],
/// `Store::with_planted`).
pub use oduflow_store::{Bug, PLANTED_BUG_ENV, PlantedBug};

/// With `ODUFLOW_CRASH_AT=<fail point>` (test builds only), the process kills
/// itself with SIGKILL when it reaches that point: no destructor, no rollback
/// from inside, exactly like a worker killed from outside at that instant.
/// The variable is read once, at the first step; a product build never
/// reads it.
pub fn crash_if_asked(name: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let at =
        AT.get_or_init(|| if cfg!(feature = "failpoints") { std::env::var("ODUFLOW_CRASH_AT").ok() } else { None });
    if at.as_deref() == Some(name) {
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
        std::process::abort();
    }
}
pub(crate) use fail_step;
