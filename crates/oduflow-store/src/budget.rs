//! The shared rate budget (issue 13): one row per group in `rate_budget`.
//!
//! Every process of a group reserves its send slots from the same row, one
//! statement per request (an upsert that moves `next_us` on by the caller's
//! interval and returns the wait). Nothing is held between statements, so a
//! process that is killed or paused holds nothing but the few slots it
//! reserved, which simply pass. Chosen by measurement (BENCHMARKS.md, "Rate
//! budget"): one reservation costs a fraction of a millisecond on either
//! store, against tens to hundreds of milliseconds for a Vultr call.
//!
//! Clocks: on PostgreSQL the server's clock reserves (`statement_timestamp()`),
//! so processes on several hosts agree on one timeline without trusting their
//! own clocks; on SQLite every process is on the host that holds the file and
//! uses that host's clock.

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

/// PostgreSQL's clock in microseconds since the epoch, for `concat!`.
macro_rules! pg_now_us {
    () => {
        "(extract(epoch FROM statement_timestamp()) * 1000000)::bigint"
    };
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
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
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
            store,
            group: group.to_owned(),
            process: process.to_owned(),
            waits: AtomicU64::new(0),
            wait_us: AtomicU64::new(0),
            flushed: Mutex::new(Instant::now()),
        })
    }

    /// Reserves a slot: (the slot, the wait until it), in microseconds.
    async fn reserve_us(&self, interval_us: i64) -> std::result::Result<(i64, i64), sqlx::Error> {
        let slot: (i64, i64) = match &self.store {
            Store::Pg(p, _) => {
                sqlx::query_as(concat!(
                    "INSERT INTO rate_budget (grp, next_us, paused_until_us, last_us, reservations, pauses) \
                     VALUES ($1, ", pg_now_us!(), " + $2, 0, ", pg_now_us!(), ", 1, 0) \
                     ON CONFLICT (grp) DO UPDATE SET \
                       next_us = GREATEST(rate_budget.next_us, EXCLUDED.last_us, rate_budget.paused_until_us) + $2, \
                       last_us = EXCLUDED.last_us, reservations = rate_budget.reservations + 1 \
                     RETURNING next_us - $2, next_us - $2 - last_us"
                ))
                .bind(&self.group)
                .bind(interval_us)
                .fetch_one(p)
                .await?
            }
            Store::Sqlite(p) => {
                sqlx::query_as(
                    "INSERT INTO rate_budget (grp, next_us, paused_until_us, last_us, reservations, pauses) \
                     VALUES ($1, $3 + $2, 0, $3, 1, 0) \
                     ON CONFLICT (grp) DO UPDATE SET \
                       next_us = max(rate_budget.next_us, excluded.last_us, rate_budget.paused_until_us) + $2, \
                       last_us = excluded.last_us, reservations = rate_budget.reservations + 1 \
                     RETURNING next_us - $2, next_us - $2 - last_us",
                )
                .bind(&self.group)
                .bind(interval_us)
                .bind(host_now_us())
                .fetch_one(p)
                .await?
            }
        };
        Ok(slot)
    }

    async fn paused_us(&self) -> std::result::Result<i64, sqlx::Error> {
        let left: Option<i64> = match &self.store {
            Store::Pg(p, _) => {
                sqlx::query_scalar(concat!(
                    "SELECT GREATEST(paused_until_us - ", pg_now_us!(), ", 0) FROM rate_budget WHERE grp = $1"
                ))
                .bind(&self.group)
                .fetch_optional(p)
                .await?
            }
            Store::Sqlite(p) => {
                sqlx::query_scalar("SELECT max(paused_until_us - $2, 0) FROM rate_budget WHERE grp = $1")
                    .bind(&self.group)
                    .bind(host_now_us())
                    .fetch_optional(p)
                    .await?
            }
        };
        Ok(left.unwrap_or(0))
    }

    async fn pause_us(&self, d_us: i64) -> std::result::Result<(), sqlx::Error> {
        match &self.store {
            Store::Pg(p, _) => {
                sqlx::query(concat!(
                    "INSERT INTO rate_budget (grp, next_us, paused_until_us, last_us, reservations, pauses) \
                     VALUES ($1, ", pg_now_us!(), ", ", pg_now_us!(), " + $2, ", pg_now_us!(), ", 0, 1) \
                     ON CONFLICT (grp) DO UPDATE SET \
                       paused_until_us = GREATEST(rate_budget.paused_until_us, EXCLUDED.paused_until_us), \
                       pauses = rate_budget.pauses + 1"
                ))
                .bind(&self.group)
                .bind(d_us)
                .execute(p)
                .await?;
            }
            Store::Sqlite(p) => {
                sqlx::query(
                    "INSERT INTO rate_budget (grp, next_us, paused_until_us, last_us, reservations, pauses) \
                     VALUES ($1, $3, $3 + $2, $3, 0, 1) \
                     ON CONFLICT (grp) DO UPDATE SET \
                       paused_until_us = max(rate_budget.paused_until_us, excluded.paused_until_us), \
                       pauses = rate_budget.pauses + 1",
                )
                .bind(&self.group)
                .bind(d_us)
                .bind(host_now_us())
                .execute(p)
                .await?;
            }
        }
        Ok(())
    }

    /// Adds this process's slot waits since the last flush to
    /// `rate_budget_usage` (and drops rows silent for a week).
    pub async fn flush(&self) -> Result<()> {
        let waits = self.waits.swap(0, Ordering::Relaxed);
        let wait_us = self.wait_us.swap(0, Ordering::Relaxed);
        *self.flushed.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let now_ms = host_now_us() / 1000;
        let r = crate::both!(&self.store, p => {
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
            .execute(p)
            .await
            .map(|_| ())
            .and(
                sqlx::query("DELETE FROM rate_budget_usage WHERE updated_ms < $1")
                    .bind(now_ms - USAGE_KEPT_MS)
                    .execute(p)
                    .await
                    .map(|_| ()),
            )
        });
        if let Err(e) = r {
            // Not lost: counted again at the next flush.
            self.waits.fetch_add(waits, Ordering::Relaxed);
            self.wait_us.fetch_add(wait_us, Ordering::Relaxed);
            return Err(e.into());
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
            let (_, wait) = self.reserve_us(micros(interval)).await.map_err(why)?;
            if self.flush_due() {
                if let Err(e) = self.flush().await {
                    tracing::debug!(error = %e, "rate budget usage not flushed; kept for the next flush");
                }
            }
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
        let rows: Vec<(String, i64, i64, i64)> = match self {
            Store::Pg(p, _) => {
                sqlx::query_as(concat!(
                    "SELECT grp, reservations, pauses, GREATEST(paused_until_us - ", pg_now_us!(), ", 0) \
                     FROM rate_budget ORDER BY grp"
                ))
                .fetch_all(p)
                .await?
            }
            Store::Sqlite(p) => {
                sqlx::query_as(
                    "SELECT grp, reservations, pauses, max(paused_until_us - $1, 0) FROM rate_budget ORDER BY grp",
                )
                .bind(host_now_us())
                .fetch_all(p)
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(group, reservations, pauses, paused_for_us)| BudgetGroupRow {
                group,
                reservations,
                pauses,
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
        let pg_url = crate::testing::fresh_pg_url().await;
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
            ba.pause(Duration::from_millis(800)).await.unwrap();
            let left = bb.paused_for().await.unwrap();
            assert!(left > Duration::from_millis(700), "{name}: the pause did not reach the other process: {left:?}");
            let wait = bb.reserve(interval).await.unwrap();
            assert!(wait > Duration::from_millis(700), "{name}: a slot inside the pause: {wait:?}");
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
            assert!(g1.paused_for_us > 0, "{name}");
        }
    }

    #[tokio::test]
    async fn a_bad_group_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::connect(&crate::testing::sqlite_url(dir.path()), true).await.unwrap();
        assert!(SharedBudget::new(s, "no spaces", "p").is_err());
    }
}
