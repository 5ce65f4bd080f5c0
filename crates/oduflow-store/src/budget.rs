//! The shared rate budget: one row per group in `rate_budget`.
//!
//! Every process of a group reserves its send slots from the same row, one
//! statement per request (an upsert that moves `next_us` on by the caller's
//! interval and returns the wait). Nothing is held between statements, so a
//! process that is killed or paused holds nothing but the few slots it
//! reserved, which simply pass. Chosen by measurement (BENCHMARKS.md, "Rate
//! budget"): one reservation costs a fraction of a millisecond on either
//! store, against tens to hundreds of milliseconds for a Vultr call.
//!
//! Clocks: the database's clock reserves, read as the statement runs, after
//! any lock it waited for (PostgreSQL's `clock_timestamp()`, SQLite's
//! `julianday('now')`, millisecond resolution): processes on several hosts
//! agree on one timeline without trusting their own clocks, and a reservation
//! that queued behind a lock is not handed a slot in the past. Slots and
//! pauses are never more than [`AHEAD_MAX`] ahead of that clock, so a clock
//! stepped back cannot stall the group.

use crate::Db;
use crate::{Result, Store};
use oduflow_model::rate::{BudgetFuture, RateBudget};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a process adds its slot waits to `rate_budget_usage`.
pub const USAGE_FLUSH_EVERY: Duration = Duration::from_secs(5);

/// Usage rows of processes silent this long are dropped (they are dead, or
/// renamed): a week, so yesterday's fleet still shows on `/metrics`.
pub const USAGE_KEPT_MS: i64 = 7 * 24 * 3_600_000;

/// The database's clock in microseconds since the epoch, for `concat!`,
/// read when the statement runs (after any lock it waited for, so a
/// reservation that queued is not handed a slot in the past).
macro_rules! pg_now_us {
    () => {
        "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
    };
}
/// The same at the start of the statement, the same value at every use: for
/// a group's first row, which waited for no lock.
macro_rules! pg_start_us {
    () => {
        "(extract(epoch FROM statement_timestamp()) * 1000000)::bigint"
    };
}
macro_rules! sqlite_now_us {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"
    };
}

/// The reservation, one statement for both backends: `$start` is the clock
/// for a group's first row, `$now` the clock read after the row lock,
/// `$max`/`$min` the backend's names for GREATEST/LEAST. `$2` is the
/// interval, `$3` the furthest a slot may be ahead.
///
/// The update reads `$now` once, in a subquery, and derives the slot, the
/// next slot and `last_us` from that one reading: PostgreSQL computes a SET
/// list in the table's column order, so separate readings put `next_us`
/// before the slot and left the next slot a few microseconds short of one
/// interval (a volatile subquery is not flattened, so it is read once).
macro_rules! reserve_sql {
    ($start:ident, $now:ident, $max:literal, $min:literal) => {
        concat!(
            "INSERT INTO rate_budget (grp, next_us, paused_until_us, last_slot_us, last_us, interval_us, \
             reservations, pauses, waits, wait_us) \
             VALUES ($1, ",
            $start!(),
            " + $2, 0, ",
            $start!(),
            ", ",
            $start!(),
            ", $2, 1, 0, 0, 0) \
             ON CONFLICT (grp) DO UPDATE SET (last_slot_us, next_us, last_us) = (\
               SELECT s, s + ",
            $max,
            "($2, rate_budget.interval_us), n FROM (SELECT ",
            $max,
            "(",
            $min,
            "(rate_budget.next_us, n + $3), n, ",
            $min,
            "(rate_budget.paused_until_us, n + $3)) AS s, n FROM (SELECT ",
            $now!(),
            " AS n) AS clock) AS slot), \
               interval_us = $2, reservations = rate_budget.reservations + 1 \
             RETURNING last_slot_us, last_slot_us - last_us"
        )
    };
}

/// A pause of `$2` microseconds from now, never shortening a longer one.
macro_rules! pause_sql {
    ($start:ident, $now:ident, $max:literal) => {
        concat!(
            "INSERT INTO rate_budget (grp, next_us, paused_until_us, last_slot_us, last_us, interval_us, \
             reservations, pauses, waits, wait_us) \
             VALUES ($1, ",
            $start!(),
            ", ",
            $start!(),
            " + $2, 0, ",
            $start!(),
            ", 0, 0, 1, 0, 0) \
             ON CONFLICT (grp) DO UPDATE SET \
               paused_until_us = ",
            $max,
            "(rate_budget.paused_until_us, ",
            $now!(),
            " + $2), \
               pauses = rate_budget.pauses + 1"
        )
    };
}

/// Furthest ahead a slot or a pause may be, whatever the row says: a clock
/// stepped back (NTP) or a bogus pause cannot stall the group for longer.
/// The longest pause we honour (`retry_after_max_ms`) is 60 s.
pub const AHEAD_MAX: Duration = Duration::from_secs(60);

/// SQLite connections a process's budget keeps open besides its store's.
const SQLITE_BUDGET_CONNECTIONS: u32 = 2;

/// The store the budget's statements run on. PostgreSQL: the store itself.
/// SQLite: a pool of its own on the same file whose commits do not wait for
/// the disk (`synchronous = NORMAL`). Every request reserves a slot, and an
/// upsert that synced the WAL held the file's one write lock for the whole
/// sync: a process stopped (SIGSTOP, a paused VM) inside it stopped every
/// writer of the file, claims and receipts included, until it resumed (in
/// the SQLite campaign, stopped workers held the lock in 6 of 25 stops, 2 of
/// 25 with a budget of their own, 12 of 92 with this pool). Without the sync
/// the lock is held for microseconds. What NORMAL risks is the last few reservations after a
/// power loss, harmless since the whole host restarted; the file stays
/// consistent (in WAL mode NORMAL still syncs around every checkpoint), and
/// receipts, on the store's own connections, still sync every commit.
fn budget_store(store: Store) -> Store {
    match &store.db {
        Db::Pg(..) => store,
        Db::Sqlite(p) => {
            let opts = (*p.connect_options()).clone().synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(SQLITE_BUDGET_CONNECTIONS)
                .acquire_timeout(crate::SQLITE_BUSY_TIMEOUT)
                .connect_lazy_with(opts);
            let mut store = store;
            store.db = Db::Sqlite(pool);
            store
        }
    }
}

/// One group's budget in the database.
#[derive(Debug)]
pub struct SharedBudget {
    store: Store,
    group: String,
    process: String,
    waits: AtomicU64,
    wait_us: AtomicU64,
    flushed: Mutex<Instant>,
}

/// A group as `/metrics` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetGroupRow {
    pub group: String,
    pub reservations: i64,
    pub pauses: i64,
    /// Slot waits of all the group's processes, as flushed.
    pub waits: i64,
    pub wait_us: i64,
    /// Microseconds of pause left when read (0: not paused).
    pub paused_for_us: i64,
}

/// One process's slot waits in one group, as last flushed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetUsageRow {
    pub group: String,
    pub process: String,
    pub waits: i64,
    pub wait_us: i64,
    pub updated_ms: i64,
}

fn host_now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn wait_of(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// Why a budget could not be asked, in one line (never the URL).
fn why(e: sqlx::Error) -> String {
    format!("rate budget unavailable: {e}")
}

impl SharedBudget {
    /// `process` names this process in metrics (host, role and pid).
    pub fn new(store: Store, group: &str, process: &str) -> std::result::Result<Self, String> {
        oduflow_model::rate::check_group(group)?;
        Ok(Self {
            store: budget_store(store),
            group: group.to_owned(),
            process: process.to_owned(),
            waits: AtomicU64::new(0),
            wait_us: AtomicU64::new(0),
            flushed: Mutex::new(Instant::now()),
        })
    }

    /// Reserves a slot: (the slot, the wait until it), in microseconds on
    /// the database's clock.
    async fn reserve_us(&self, interval_us: i64) -> std::result::Result<(i64, i64), sqlx::Error> {
        let ahead = micros(AHEAD_MAX);
        let sql = match &self.store.db {
            Db::Pg(..) => reserve_sql!(pg_start_us, pg_now_us, "GREATEST", "LEAST"),
            Db::Sqlite(_) => reserve_sql!(sqlite_now_us, sqlite_now_us, "max", "min"),
        };
        let slot: (i64, i64) = crate::both!(self.store, p => {
            sqlx::query_as(sql).bind(&self.group).bind(interval_us).bind(ahead).fetch_one(p).await?
        });
        Ok(slot)
    }

    async fn paused_us(&self) -> std::result::Result<i64, sqlx::Error> {
        let ahead = micros(AHEAD_MAX);
        let left: Option<i64> = match &self.store.db {
            Db::Pg(p, _) => {
                sqlx::query_scalar(concat!(
                    "SELECT LEAST(GREATEST(paused_until_us - ",
                    pg_now_us!(),
                    ", 0), $2) FROM rate_budget WHERE grp = $1"
                ))
                .bind(&self.group)
                .bind(ahead)
                .fetch_optional(p)
                .await?
            }
            Db::Sqlite(p) => {
                sqlx::query_scalar(concat!(
                    "SELECT min(max(paused_until_us - ",
                    sqlite_now_us!(),
                    ", 0), $2) FROM rate_budget WHERE grp = $1"
                ))
                .bind(&self.group)
                .bind(ahead)
                .fetch_optional(p)
                .await?
            }
        };
        Ok(left.unwrap_or(0))
    }

    async fn pause_us(&self, d_us: i64) -> std::result::Result<(), sqlx::Error> {
        let d_us = d_us.min(micros(AHEAD_MAX));
        let sql = match &self.store.db {
            Db::Pg(..) => pause_sql!(pg_start_us, pg_now_us, "GREATEST"),
            Db::Sqlite(_) => pause_sql!(sqlite_now_us, sqlite_now_us, "max"),
        };
        crate::both!(self.store, p => sqlx::query(sql).bind(&self.group).bind(d_us).execute(p).await.map(|_| ()))
    }

    /// Adds this process's slot waits since the last flush to
    /// `rate_budget_usage` and to the group's own totals, in one transaction
    /// (then drops usage rows silent for a week).
    pub async fn flush(&self) -> Result<()> {
        let waits = self.waits.swap(0, Ordering::Relaxed);
        let wait_us = self.wait_us.swap(0, Ordering::Relaxed);
        *self.flushed.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let now_ms = host_now_us() / 1000;
        let r: std::result::Result<(), sqlx::Error> = crate::both!(&self.store, p => async {
            let mut tx = crate::BeginWrite::begin_write(p).await?;
            sqlx::query(
                "INSERT INTO rate_budget_usage (grp, process, waits, wait_us, updated_ms) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (grp, process) DO UPDATE SET waits = rate_budget_usage.waits + EXCLUDED.waits, \
                   wait_us = rate_budget_usage.wait_us + EXCLUDED.wait_us, updated_ms = EXCLUDED.updated_ms",
            )
            .bind(&self.group)
            .bind(&self.process)
            .bind(waits as i64)
            .bind(wait_us as i64)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE rate_budget SET waits = waits + $2, wait_us = wait_us + $3 WHERE grp = $1")
                .bind(&self.group)
                .bind(waits as i64)
                .bind(wait_us as i64)
                .execute(&mut *tx)
                .await?;
            tx.commit().await
        }.await);
        if let Err(e) = r {
            // Not lost: counted again at the next flush.
            self.waits.fetch_add(waits, Ordering::Relaxed);
            self.wait_us.fetch_add(wait_us, Ordering::Relaxed);
            return Err(e.into());
        }
        let pruned = crate::both!(&self.store, p => {
            sqlx::query("DELETE FROM rate_budget_usage WHERE updated_ms < $1")
                .bind(now_ms - USAGE_KEPT_MS)
                .execute(p)
                .await
                .map(|_| ())
        });
        if let Err(e) = pruned {
            tracing::debug!(error = %e, "old rate budget usage rows not pruned");
        }
        Ok(())
    }

    fn flush_due(&self) -> bool {
        self.flushed.lock().unwrap_or_else(|p| p.into_inner()).elapsed() >= USAGE_FLUSH_EVERY
            && self.waits.load(Ordering::Relaxed) > 0
    }
}

impl RateBudget for SharedBudget {
    fn group(&self) -> &str {
        &self.group
    }

    fn reserve(&self, interval: Duration) -> BudgetFuture<'_, Duration> {
        Box::pin(async move {
            // Before reserving, not between the reservation and the send.
            if self.flush_due()
                && let Err(e) = self.flush().await
            {
                tracing::debug!(error = %e, "rate budget usage not flushed; kept for the next flush");
            }
            let (_, wait) = self.reserve_us(micros(interval)).await.map_err(why)?;
            Ok(wait_of(wait))
        })
    }

    fn paused_for(&self) -> BudgetFuture<'_, Duration> {
        Box::pin(async move { self.paused_us().await.map(wait_of).map_err(why) })
    }

    fn pause(&self, d: Duration) -> BudgetFuture<'_, ()> {
        Box::pin(async move { self.pause_us(micros(d)).await.map_err(why) })
    }

    fn record_wait(&self, waited: Duration) {
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.wait_us.fetch_add(micros(waited) as u64, Ordering::Relaxed);
    }

    fn flush(&self) -> BudgetFuture<'_, ()> {
        Box::pin(async move { SharedBudget::flush(self).await.map_err(|e| e.to_string()) })
    }
}

impl Store {
    /// Every group's totals, for `/metrics`.
    pub async fn budget_groups(&self) -> Result<Vec<BudgetGroupRow>> {
        let rows: Vec<(String, i64, i64, i64, i64, i64)> = match &self.db {
            Db::Pg(p, _) => {
                sqlx::query_as(concat!(
                    "SELECT grp, reservations, pauses, waits, wait_us, GREATEST(paused_until_us - ",
                    pg_now_us!(),
                    ", 0) \
                     FROM rate_budget ORDER BY grp"
                ))
                .fetch_all(p)
                .await?
            }
            Db::Sqlite(p) => {
                sqlx::query_as(concat!(
                    "SELECT grp, reservations, pauses, waits, wait_us, max(paused_until_us - ",
                    sqlite_now_us!(),
                    ", 0) \
                     FROM rate_budget ORDER BY grp"
                ))
                .fetch_all(p)
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(group, reservations, pauses, waits, wait_us, paused_for_us)| BudgetGroupRow {
                group,
                reservations,
                pauses,
                waits,
                wait_us,
                paused_for_us,
            })
            .collect())
    }

    /// Every process's flushed slot waits, for `/metrics`.
    pub async fn budget_usage(&self) -> Result<Vec<BudgetUsageRow>> {
        let rows: Vec<(String, String, i64, i64, i64)> = crate::both!(self, p => {
            sqlx::query_as(
                "SELECT grp, process, waits, wait_us, updated_ms FROM rate_budget_usage ORDER BY grp, process",
            )
            .fetch_all(p)
            .await?
        });
        Ok(rows
            .into_iter()
            .map(|(group, process, waits, wait_us, updated_ms)| BudgetUsageRow {
                group,
                process,
                waits,
                wait_us,
                updated_ms,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    async fn stores() -> Vec<(&'static str, Store, Store, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().unwrap();
        let url = crate::testing::sqlite_url(dir.path());
        let a = Store::connect(&url, true).await.unwrap();
        a.migrate().await.unwrap();
        let b = Store::connect(&url, false).await.unwrap();
        let pg_url = crate::testing::fresh_migrated_pg_url().await;
        let pa = Store::connect(&pg_url, true).await.unwrap();
        pa.migrate().await.unwrap();
        let pb = Store::connect(&pg_url, false).await.unwrap();
        vec![("sqlite", a, b, Some(dir)), ("postgres", pa, pb, None)]
    }

    /// Two "processes" (two pools, two budgets) reserving at once get slots
    /// on one timeline, each at least one interval from every other; a pause
    /// set by one pushes the other's next slot past it; usage is flushed per
    /// process and group.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_processes_share_one_timeline_and_one_pause() {
        for (name, a, b, _dir) in stores().await {
            let interval = Duration::from_millis(20);
            let ba = Arc::new(SharedBudget::new(a.clone(), "g1", "host/a-1").unwrap());
            let bb = Arc::new(SharedBudget::new(b.clone(), "g1", "host/b-2").unwrap());
            let other = SharedBudget::new(b.clone(), "g2", "host/b-2").unwrap();
            let mut tasks = Vec::new();
            for i in 0..40 {
                let budget = if i % 2 == 0 { ba.clone() } else { bb.clone() };
                tasks.push(tokio::spawn(async move { budget.reserve_us(20_000).await.unwrap() }));
            }
            let mut slots = Vec::new();
            for t in tasks {
                let (slot, wait) = t.await.unwrap();
                assert!(wait <= 40 * 20_000, "{name}: a wait beyond the 40 slots asked for: {wait}");
                slots.push(slot);
            }
            slots.sort();
            // One timeline: every slot exactly one interval after the one
            // before (all 40 asked at once, so none found the group idle).
            let gaps: Vec<i64> = slots.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(gaps.iter().all(|g| *g >= 20_000), "{name}: slots too close: {gaps:?}");
            let span = Duration::from_micros((slots[39] - slots[0]) as u64);
            assert!(span >= interval * 39, "{name}: {span:?}");
            // Another group is not slowed by this one.
            assert!(other.reserve(interval).await.unwrap() < Duration::from_millis(5), "{name}: groups share slots");

            tokio::time::sleep(span + interval).await;
            // What the pause has left, as the other process sees it, is
            // short only by the time this test took to ask: on a loaded
            // machine that was once 230 ms, so the bound counts it.
            let pause = Duration::from_millis(2_000);
            let paused_at = std::time::Instant::now();
            ba.pause(pause).await.unwrap();
            let left = bb.paused_for().await.unwrap();
            let slack = paused_at.elapsed() + Duration::from_millis(50);
            assert!(left + slack >= pause, "{name}: the pause did not reach the other process: {left:?}");
            let wait = bb.reserve(interval).await.unwrap();
            let slack = paused_at.elapsed() + Duration::from_millis(50);
            assert!(wait + slack >= pause, "{name}: a slot inside the pause: {wait:?}");
            assert!(other.paused_for().await.unwrap().is_zero(), "{name}: the pause reached another group");

            ba.record_wait(Duration::from_millis(30));
            ba.record_wait(Duration::from_millis(20));
            bb.record_wait(Duration::from_millis(5));
            ba.flush().await.unwrap();
            bb.flush().await.unwrap();
            ba.record_wait(Duration::from_millis(1));
            ba.flush().await.unwrap();
            let usage = a.budget_usage().await.unwrap();
            let row = |p: &str| usage.iter().find(|u| u.process == p && u.group == "g1").cloned().unwrap();
            assert_eq!((row("host/a-1").waits, row("host/a-1").wait_us), (3, 51_000), "{name}: {usage:?}");
            assert_eq!((row("host/b-2").waits, row("host/b-2").wait_us), (1, 5_000), "{name}: {usage:?}");
            let groups = a.budget_groups().await.unwrap();
            let g1 = groups.iter().find(|g| g.group == "g1").unwrap();
            assert_eq!((g1.reservations, g1.pauses), (41, 1), "{name}: {groups:?}");
            assert_eq!((g1.waits, g1.wait_us), (4, 56_000), "{name}: the group's totals: {groups:?}");
            assert!(g1.paused_for_us > 0, "{name}");
        }
    }

    /// A process set to a higher rate cannot speed up a group whose other
    /// processes ask for less: each slot is spaced by the larger of its own
    /// interval and the one before. And no slot or pause is ever more than
    /// `AHEAD_MAX` ahead of the clock (a clock stepped back, a bogus pause).
    /// A reservation that finds its group idle gets "now" as its slot, and
    /// the next one is a whole interval later: the slot and the group's next
    /// slot come from one reading of the clock. (PostgreSQL computes the SET
    /// list in column order, so two readings put `next_us` before the slot:
    /// CI saw a gap of 19,995 µs at a 20,000 µs interval.)
    #[tokio::test]
    async fn a_slot_after_an_idle_spell_keeps_the_next_a_whole_interval_away() {
        for (name, a, _b, _dir) in stores().await {
            let budget = SharedBudget::new(a.clone(), "g1", "host/a-1").unwrap();
            for round in 0..20 {
                budget.reserve_us(20_000).await.unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
                let (idle, _) = budget.reserve_us(20_000).await.unwrap();
                let (next, _) = budget.reserve_us(20_000).await.unwrap();
                assert!(next - idle >= 20_000, "{name}, round {round}: {} µs after the idle slot", next - idle);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_slower_rate_wins_and_nothing_is_far_ahead() {
        for (name, a, _b, _dir) in stores().await {
            let slow = SharedBudget::new(a.clone(), "g", "slow").unwrap();
            let fast = SharedBudget::new(a.clone(), "g", "fast").unwrap();
            let (s0, _) = slow.reserve_us(100_000).await.unwrap();
            let (f1, _) = fast.reserve_us(1_000).await.unwrap();
            let (f2, _) = fast.reserve_us(1_000).await.unwrap();
            assert!(f1 - s0 >= 100_000, "{name}: the fast process ignored the slow one's spacing: {}", f1 - s0);
            // Spaced by the larger of its own and the previous asker's.
            assert!(f2 - f1 >= 100_000, "{name}: {}", f2 - f1);
            let (f3, _) = fast.reserve_us(1_000).await.unwrap();
            assert!(f3 - f2 >= 1_000 && f3 - f2 < 50_000, "{name}: {}", f3 - f2);
            // The row says a slot an hour ahead (a clock stepped back).
            crate::both!(&a, p => sqlx::query("UPDATE rate_budget SET next_us = next_us + 3600000000, paused_until_us = next_us + 3600000000").execute(p).await.map(|_| ()).unwrap());
            let (_, wait) = slow.reserve_us(1_000).await.unwrap();
            assert!(wait <= micros(AHEAD_MAX) + 1_000, "{name}: a slot {wait} µs ahead");
            assert!(slow.paused_us().await.unwrap() <= micros(AHEAD_MAX), "{name}");
        }
    }

    /// A database one migration behind is refused at connect, with what to
    /// run, instead of failing request by request.
    #[tokio::test]
    async fn a_database_behind_the_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = crate::testing::sqlite_url(dir.path());
        let s = Store::connect(&url, true).await.unwrap();
        s.migrate().await.unwrap();
        assert_eq!(s.schema_version().await.unwrap(), crate::SCHEMA_VERSION);
        let last = format!("DELETE FROM _sqlx_migrations WHERE version = {}", crate::SCHEMA_VERSION);
        crate::both!(&s, p => sqlx::query(sqlx::AssertSqlSafe(last.clone())).execute(p).await.map(|_| ()).unwrap());
        let e = Store::connect(&url, false).await.unwrap_err();
        assert!(e.to_string().contains("oduflow init"), "{e}");
    }

    #[tokio::test]
    async fn a_bad_group_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::connect(&crate::testing::sqlite_url(dir.path()), true).await.unwrap();
        assert!(SharedBudget::new(s, "no spaces", "p").is_err());
    }
}
