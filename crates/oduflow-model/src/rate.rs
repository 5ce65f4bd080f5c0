//! The rate budget every request to Vultr waits for.
//!
//! Vultr counts its limit per source address, so every oduflow process that
//! talks to it through one address must share one budget: a *group*. A
//! budget hands out send slots on one timeline, `interval` apart, first come
//! first served, and never before a pause (a `Retry-After`) has ended.
//!
//! Reserving a slot is one atomic step; nothing is held afterwards. A process
//! that dies after reserving leaves at most the few slots it reserved unused
//! (each process reserves at most `RESERVATIONS_AHEAD_MAX` ahead, see
//! `oduflow-vultr`), so a dead process cannot stall the others.
//!
//! Two implementations: [`LocalBudget`] (one process, in memory) and the
//! store's shared budget (one row per group in the database, PostgreSQL or
//! SQLite), which is what every oduflow command uses.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a budget operation returns: its value, or why the budget could not be
/// asked (the request is then not sent).
pub type BudgetFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// The group every process on one database shares unless told otherwise.
pub const DEFAULT_RATE_GROUP: &str = "default";

/// Longest group name; names are shown in metrics and logs.
pub const RATE_GROUP_CHARS_MAX: usize = 64;

/// Checks a group name: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn check_group(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= RATE_GROUP_CHARS_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("rate group {name:?}: 1 to {RATE_GROUP_CHARS_MAX} characters of A-Z a-z 0-9 . _ -"))
    }
}

/// What a send slot is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotUse {
    /// A request that changes something at Vultr: a create, attach, change,
    /// detach or delete.
    Change,
    /// A read.
    Read,
}

/// A rate budget shared by the processes of one group.
pub trait RateBudget: Send + Sync + fmt::Debug {
    /// The group's name.
    fn group(&self) -> &str;

    /// Reserves the group's next send slot: `interval` after the slot
    /// reserved before it, or now if the group was idle, and never before a
    /// pause ends. Returns how long from now until the slot.
    fn reserve(&self, interval: Duration) -> BudgetFuture<'_, Duration>;

    /// [`RateBudget::reserve`] for a request of this use, which is what the
    /// client asks. Both budgets hand out one timeline whatever the use;
    /// the test kit's budget (`oduflow_vultr::testing`) holds one use
    /// here, where a request waits before the run's guard is asked.
    fn reserve_for(&self, interval: Duration, _use: SlotUse) -> BudgetFuture<'_, Duration> {
        self.reserve(interval)
    }

    /// How much longer the group is paused (zero: it is not).
    fn paused_for(&self) -> BudgetFuture<'_, Duration>;

    /// Pauses the group for `d` from now (a `Retry-After` answered to any of
    /// its processes), unless it is already paused longer.
    fn pause(&self, d: Duration) -> BudgetFuture<'_, ()>;

    /// Counts one wait for a slot, for metrics per process and group.
    fn record_wait(&self, _waited: Duration) {}

    /// Writes the waits counted so far where the group's metrics are read
    /// (a shared budget does so every few seconds on its own; this is for a
    /// process about to exit).
    fn flush(&self) -> BudgetFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

/// A budget for one process, in memory: the same slots and pauses as the
/// shared one, for tests and for clients built without a store.
#[derive(Debug)]
pub struct LocalBudget {
    group: String,
    state: Mutex<LocalState>,
}

#[derive(Debug)]
struct LocalState {
    /// The next free slot.
    next: Instant,
    paused_until: Instant,
}

impl LocalBudget {
    pub fn new(group: &str) -> Self {
        let now = Instant::now();
        Self { group: group.to_owned(), state: Mutex::new(LocalState { next: now, paused_until: now }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LocalState> {
        // A panic elsewhere mid-update leaves two instants, both usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RateBudget for LocalBudget {
    fn group(&self) -> &str {
        &self.group
    }

    fn reserve(&self, interval: Duration) -> BudgetFuture<'_, Duration> {
        let now = Instant::now();
        let mut s = self.lock();
        let slot = s.next.max(now).max(s.paused_until);
        s.next = slot + interval;
        let wait = slot - now;
        Box::pin(async move { Ok(wait) })
    }

    fn paused_for(&self) -> BudgetFuture<'_, Duration> {
        let left = self.lock().paused_until.saturating_duration_since(Instant::now());
        Box::pin(async move { Ok(left) })
    }

    fn pause(&self, d: Duration) -> BudgetFuture<'_, ()> {
        let until = Instant::now() + d;
        let mut s = self.lock();
        s.paused_until = s.paused_until.max(until);
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_spaced_and_a_pause_pushes_them_back() {
        let b = LocalBudget::new("t");
        let t = Duration::from_millis(100);
        let w0 = b.reserve(t).await.unwrap();
        let w1 = b.reserve(t).await.unwrap();
        let w2 = b.reserve(t).await.unwrap();
        assert!(w0 < Duration::from_millis(5), "{w0:?}");
        assert!(w1 > Duration::from_millis(90) && w1 <= t, "{w1:?}");
        assert!(w2 > Duration::from_millis(190) && w2 <= 2 * t, "{w2:?}");
        b.pause(Duration::from_secs(2)).await.unwrap();
        assert!(b.paused_for().await.unwrap() > Duration::from_millis(1900));
        let w3 = b.reserve(t).await.unwrap();
        assert!(w3 > Duration::from_millis(1900), "a slot inside the pause: {w3:?}");
        // A shorter pause never shortens a longer one.
        b.pause(Duration::from_millis(10)).await.unwrap();
        assert!(b.paused_for().await.unwrap() > Duration::from_millis(1900));
    }

    #[test]
    fn group_names_are_checked() {
        assert!(check_group("default").is_ok());
        assert!(check_group("host-a.eu_1").is_ok());
        for bad in ["", "a b", "x/y", "é", &"a".repeat(65)] {
            assert!(check_group(bad).is_err(), "{bad:?} accepted");
        }
    }
}
