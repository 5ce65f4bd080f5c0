//! The process's clock for times that order events across processes
//! (docs/protocol.md §4.1): the database's clock, sampled, and run on from
//! the sample with this process's monotonic clock. A step of the host's wall
//! clock while the process runs changes nothing; a host clock wrong by hours
//! changes nothing either (the database's clock is the one every process
//! reads). Durations inside a process (timeouts, backoffs) use `Instant`.

use crate::{Clock, host_now_ms};
use oduflow_store::{Store, StoreError};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often a running process samples the database's clock again (a
/// monotonic clock drifts by parts per million: a sample a minute old is off
/// by well under a millisecond).
pub const DB_CLOCK_RESAMPLE: Duration = Duration::from_secs(60);

/// The database's time at one instant of this process.
#[derive(Clone, Copy, Debug)]
struct Sample {
    db_ms: i64,
    at: Instant,
}

/// The database's clock, as this process runs it (see the module).
#[derive(Debug)]
pub struct DbClock {
    sample: Mutex<Sample>,
    /// The latest time handed out: a new sample never moves the clock back
    /// (times written by one process never go backwards).
    last: AtomicI64,
}

impl DbClock {
    /// Samples the database's clock once, and then every
    /// [`DB_CLOCK_RESAMPLE`] in a task of its own that ends with the clock.
    /// Fails only if the first sample fails (the database unreachable).
    pub async fn start(store: &Store) -> Result<Arc<Self>, StoreError> {
        let first = sample(store).await?;
        let clock = Arc::new(Self { sample: Mutex::new(first), last: AtomicI64::new(first.db_ms) });
        let weak = Arc::downgrade(&clock);
        let store = store.clone();
        tokio::spawn(async move { resample(weak, store).await });
        Ok(clock)
    }

    /// The database's clock now, sampled once (a command that writes once).
    pub async fn now_once(store: &Store) -> Result<i64, StoreError> {
        Ok(sample(store).await?.db_ms)
    }
}

async fn sample(store: &Store) -> Result<Sample, StoreError> {
    // The instant the reading stands for (SQLite's boot-time clock ticks
    // every 10 ms: the reading is taken as it ticks).
    let (db_ms, at) = store.clock_sample(host_now_ms()).await?;
    Ok(Sample { db_ms, at })
}

/// Samples again every [`DB_CLOCK_RESAMPLE`] while the clock lives; a failed
/// sample keeps the previous one (warned, with the error) and is tried
/// again at the next interval.
async fn resample(clock: Weak<DbClock>, store: Store) {
    loop {
        tokio::time::sleep(DB_CLOCK_RESAMPLE).await;
        if clock.strong_count() == 0 {
            return;
        }
        let s = sample(&store).await;
        let Some(clock) = clock.upgrade() else { return };
        match s {
            Ok(s) => *clock.sample.lock().unwrap_or_else(|p| p.into_inner()) = s,
            Err(e) => tracing::warn!(
                error = %crate::error_chain(&e),
                "the database's clock could not be sampled again: running on from the previous sample"
            ),
        }
    }
}

impl Clock for DbClock {
    fn now_ms(&self) -> i64 {
        let s = *self.sample.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = i64::try_from(s.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        let now = s.db_ms.saturating_add(elapsed);
        self.last.fetch_max(now, Ordering::SeqCst).max(now)
    }
}
