//! The database's clock (docs/protocol.md §4.1): the one clock whose times
//! order events across processes (a job's `run_after_ms`, a receipt's
//! `sent_ms` against a readiness deadline, a job's `created_ms` against a
//! listing's start). Each process samples it and runs on from the sample
//! with its own monotonic clock (`oduflow_engine::DbClock`).
//!
//! PostgreSQL: the server's `clock_timestamp()`. SQLite has no server: its
//! clock is the host's wall clock read once per boot of the host, by the
//! first process that asks, and never behind the newest time recorded in the
//! file; every process then derives the time from that one reading and the
//! host's boot-time clock (`/proc/uptime`), which no wall-clock step moves.
//! So a host clock stepped back or forward, while processes run or between
//! their starts, changes nothing until the next boot (which again starts no
//! earlier than the file's newest time). Where the boot-time clock cannot be
//! read (not Linux), each sample is the host clock, never behind the file's
//! newest time.

use crate::{Db, Result, Store};

/// The newest time recorded in a SQLite file: the clock never starts
/// behind it.
const SQLITE_HIGH_WATER: &str = "SELECT MAX(m) FROM ( \
     SELECT MAX(at_ms) AS m FROM events \
     UNION ALL SELECT MAX(created_ms) FROM jobs \
     UNION ALL SELECT MAX(finished_ms) FROM jobs \
     UNION ALL SELECT MAX(updated_ms) FROM infra \
     UNION ALL SELECT MAX(claimed_ms) FROM dispatch_receipts \
     UNION ALL SELECT MAX(sent_ms) FROM dispatch_receipts \
     UNION ALL SELECT MAX(wall_ms) FROM clock_anchor)";

/// `/proc/uptime` counts in hundredths of a second: a reading is taken the
/// instant it ticks, so that two processes' readings agree to well under a
/// millisecond rather than to 10 ms. At most this long is spent waiting for
/// one tick (past it, the last reading is used).
const UPTIME_TICK_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(20);
/// The tick is placed between the last read that did not show it and the
/// end of the one that did; a process preempted there (a loaded machine)
/// could place it tens of milliseconds late, so a reading spread wider than
/// this is taken again at the next tick...
const UPTIME_TICK_SPREAD_MAX: std::time::Duration = std::time::Duration::from_millis(1);
/// ...at most this many times (past them, the narrowest is used).
const UPTIME_TICK_TRIES_MAX: usize = 4;

fn uptime_ms() -> Option<i64> {
    let up = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = up.split_whitespace().next()?.parse().ok()?;
    Some((secs * 1000.0).round() as i64)
}

/// This boot of the host: its id and the boot-time clock in milliseconds
/// (time since boot, suspend included), read as it ticks. `None` where the
/// host does not offer them.
fn boot_reading() -> Option<(String, i64, std::time::Instant)> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let mut best: Option<(std::time::Duration, i64, std::time::Instant)> = None;
    for _ in 0..UPTIME_TICK_TRIES_MAX {
        let (spread, up, at) = uptime_tick()?;
        if best.is_none_or(|(b, _, _)| spread < b) {
            best = Some((spread, up, at));
        }
        if spread <= UPTIME_TICK_SPREAD_MAX {
            break;
        }
    }
    best.map(|(_, up, at)| (id.trim().to_owned(), up, at))
}

/// One tick of the boot-time clock: how wide the window it was placed in
/// is, its reading, and the instant (the window's middle) it stands for.
fn uptime_tick() -> Option<(std::time::Duration, i64, std::time::Instant)> {
    let started = std::time::Instant::now();
    let mut before = std::time::Instant::now();
    let first = uptime_ms()?;
    let mut up = first;
    while up == first && started.elapsed() < UPTIME_TICK_WAIT_MAX {
        std::hint::spin_loop();
        let at = std::time::Instant::now();
        up = uptime_ms()?;
        if up == first {
            before = at;
        }
    }
    let after = std::time::Instant::now();
    let spread = after - before;
    Some((spread, up, before + spread / 2))
}

impl Store {
    /// The database's clock now, in epoch milliseconds. `host_ms` is this
    /// process's wall clock: SQLite uses it only for the first reading of a
    /// boot, or where the host has no boot-time clock (see the module).
    pub async fn clock_now_ms(&self, host_ms: i64) -> Result<i64> {
        Ok(self.clock_sample(host_ms).await?.0)
    }

    /// [`Store::clock_now_ms`], with the instant (this process's monotonic
    /// clock) the reading stands for: SQLite's is taken as the boot-time
    /// clock ticks; PostgreSQL's is the middle of the round trip.
    pub async fn clock_sample(&self, host_ms: i64) -> Result<(i64, std::time::Instant)> {
        crate::named("clock_now_ms", async move {
            match &self.db {
                Db::Pg(p, _) => {
                    let before = std::time::Instant::now();
                    let ms = sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                        .fetch_one(p)
                        .await?;
                    Ok((ms, before + before.elapsed() / 2))
                }
                Db::Sqlite(p) => {
                    let boot = boot_reading();
                    let at = boot.as_ref().map_or_else(std::time::Instant::now, |b| b.2);
                    Ok((sqlite_clock(p, boot.map(|(id, up, _)| (id, up)), host_ms).await?, at))
                }
            }
        })
        .await
    }
}

/// SQLite's clock from this boot's anchor, anchoring it first if this
/// process is the boot's first to ask (see the module).
async fn sqlite_clock(p: &sqlx::SqlitePool, boot: Option<(String, i64)>, host_ms: i64) -> Result<i64> {
    if let Some((id, up)) = &boot {
        let anchor: Option<(i64, i64)> =
            sqlx::query_as("SELECT wall_ms, uptime_ms FROM clock_anchor WHERE id = 1 AND boot_id = $1")
                .bind(id)
                .fetch_optional(p)
                .await?;
        if let Some((wall, at)) = anchor.filter(|(_, at)| *at <= *up) {
            return Ok(wall.saturating_add(up - at));
        }
    }
    let mut tx = crate::BeginWrite::begin_write(p).await?;
    let high: Option<i64> = sqlx::query_scalar(SQLITE_HIGH_WATER).fetch_one(&mut *tx).await?;
    let now = host_ms.max(high.unwrap_or(i64::MIN));
    let Some((id, up)) = boot else {
        tx.rollback().await?;
        return Ok(now);
    };
    // Another process of this boot may have anchored meanwhile: its
    // reading stands.
    let anchor: Option<(i64, i64)> =
        sqlx::query_as("SELECT wall_ms, uptime_ms FROM clock_anchor WHERE id = 1 AND boot_id = $1")
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some((wall, at)) = anchor.filter(|(_, at)| *at <= up) {
        tx.rollback().await?;
        return Ok(wall.saturating_add(up - at));
    }
    sqlx::query(
        "INSERT INTO clock_anchor (id, boot_id, wall_ms, uptime_ms) VALUES (1, $1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET boot_id = excluded.boot_id, wall_ms = excluded.wall_ms, \
         uptime_ms = excluded.uptime_ms",
    )
    .bind(&id)
    .bind(now)
    .bind(up)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(now)
}
