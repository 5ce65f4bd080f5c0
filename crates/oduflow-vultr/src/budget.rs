//! Waiting for a send slot in the rate budget.
//!
//! Every request waits here before it leaves: it takes a pass from this
//! process's turnstile, reserves the group's next slot
//! ([`oduflow_model::rate::RateBudget`]), sleeps until it, and gives the pass
//! back. Fairness, chosen this way:
//! - Across processes, slots are handed out first come first served, and a
//!   process holds at most [`RESERVATIONS_AHEAD_MAX`] reserved slots at a
//!   time. A create therefore waits for one of its own process's passes (its
//!   holders' slots at most 2 per process of the group ahead) and then behind
//!   at most 2 slots per process: about 4 slots per process of the group in
//!   the worst case (4 processes: 16 slots, 0.64 s at 25/s), however long
//!   another process's burst.
//! - Inside a process, the pages of a shared listing (the bulk view's, which
//!   many runs wait for, at most one per kind per gap) take the next pass
//!   first; then requests that change something at Vultr (create, attach,
//!   detach, delete), before any other waiting read, so a label scan or
//!   `reconcile --all` never starves this process's own creates.
//!
//! A pause (a `Retry-After` seen by any process of the group) pushes every
//! later slot past its end; a request whose slot came before a pause that
//! began while it slept looks again and waits the pause out, so nothing,
//! create or read, is sent into a paused group.

use oduflow_model::provider::Sending;
use oduflow_model::rate::{RateBudget, SlotUse};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Slots one process may hold reserved and not yet reached. Two keep a
/// single process at the full rate when asking the database takes a moment;
/// more would let one process's burst queue further ahead of the others.
pub const RESERVATIONS_AHEAD_MAX: usize = 2;

/// Longest wait for one slot. Slots are handed out a few per process ahead,
/// so only a pause (at most `retry_after_max_ms`, 60 s by default) or a
/// process of the group set to a far lower rate makes a slot this far away;
/// past it the request is not sent and says why.
pub const SLOT_WAIT_MAX: Duration = Duration::from_secs(120);

/// Longest total wait for a slot, pauses included, before giving up.
pub const BUDGET_WAIT_MAX: Duration = Duration::from_secs(180);

/// Times the budget is asked before a request gives up because the database
/// that holds it does not answer.
pub const BUDGET_ASKS_MAX: u32 = 3;

/// Longest one ask of the budget may take (a half-open connection to the
/// database would otherwise hang it for the kernel's retransmission time).
pub const BUDGET_ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest pause a 429 causes, whatever its `Retry-After` says (none,
/// or 0): Vultr's limit is per second.
pub const PAUSE_MIN: Duration = Duration::from_secs(1);

/// Below this a wait is only the cost of asking the budget, not a wait: it
/// is not counted in the metrics.
pub const WAIT_COUNTED_MIN: Duration = Duration::from_millis(2);

/// Below this a slot is "now": the reservation itself already looked at the
/// pause, so there is no need to look again.
const SLOT_NOW: Duration = Duration::from_millis(1);

/// Which line of the turnstile a request waits in, served in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// A page of a shared listing ([`Sending::shared_listing`]).
    Shared,
    /// A request that changes something at Vultr.
    Change,
    /// Any other read.
    Read,
}

impl Line {
    /// The line of a request sent with `sending`.
    pub fn of(change: bool, sending: &Sending) -> Self {
        if change {
            Line::Change
        } else if sending.is_shared_listing() {
            Line::Shared
        } else {
            Line::Read
        }
    }
}

/// This process's passes to the budget: at most `RESERVATIONS_AHEAD_MAX`
/// held at once, shared listings' pages, then changes, then reads, first
/// come first served within each.
#[derive(Debug)]
pub struct Turnstile {
    state: Mutex<TurnstileState>,
    /// A pause this process saw itself, honoured at once, before (and
    /// whether or not) the database has recorded it for the group.
    paused_until: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct TurnstileState {
    free: usize,
    shared: VecDeque<oneshot::Sender<()>>,
    changes: VecDeque<oneshot::Sender<()>>,
    reads: VecDeque<oneshot::Sender<()>>,
}

/// A held pass; dropping it hands it to the next in line.
pub struct Pass<'a>(&'a Turnstile);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A place in the line. Dropped before its turn (the request was cancelled),
/// it leaves the line; dropped just after being handed the pass, it hands it
/// on.
struct Waiting<'a> {
    turnstile: &'a Turnstile,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.turnstile.release();
            }
        }
    }
}

impl Turnstile {
    pub fn new(passes: usize) -> Self {
        Self {
            state: Mutex::new(TurnstileState {
                free: passes.max(1),
                shared: VecDeque::new(),
                changes: VecDeque::new(),
                reads: VecDeque::new(),
            }),
            paused_until: Mutex::new(None),
        }
    }

    /// Pauses this process's requests for `d` from now (a 429 it was
    /// answered), unless already paused longer.
    pub fn pause_locally(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut p = self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
        *p = Some(p.map_or(until, |u| u.max(until)));
    }

    fn paused_locally_for(&self) -> Duration {
        let p = self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
        p.map_or(Duration::ZERO, |u| u.saturating_duration_since(Instant::now()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TurnstileState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn enter(&self, line: Line) -> Pass<'_> {
        let rx = {
            let mut s = self.lock();
            let ahead = s.shared.len()
                + if line == Line::Shared { 0 } else { s.changes.len() }
                + if line == Line::Read { s.reads.len() } else { 0 };
            if s.free > 0 && ahead == 0 {
                s.free -= 1;
                return Pass(self);
            }
            let (tx, rx) = oneshot::channel();
            match line {
                Line::Shared => s.shared.push_back(tx),
                Line::Change => s.changes.push_back(tx),
                Line::Read => s.reads.push_back(tx),
            }
            rx
        };
        let mut w = Waiting { turnstile: self, rx: Some(rx) };
        // The sender stays in the line until it is handed a pass, so the
        // only answer is the pass.
        let _ = w.rx.as_mut().expect("set above").await;
        w.rx = None;
        Pass(self)
    }

    fn release(&self) {
        let mut s = self.lock();
        loop {
            let next = s.shared.pop_front().or_else(|| s.changes.pop_front()).or_else(|| s.reads.pop_front());
            match next {
                // Handed over; a closed receiver (cancelled) passes it on.
                Some(tx) => {
                    if tx.send(()).is_ok() {
                        return;
                    }
                }
                None => {
                    s.free += 1;
                    return;
                }
            }
        }
    }
}

/// One ask of the budget, bounded by [`BUDGET_ASK_TIMEOUT`].
async fn ask<T>(f: oduflow_model::rate::BudgetFuture<'_, T>) -> Result<T, String> {
    match tokio::time::timeout(BUDGET_ASK_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(format!("rate budget unavailable: no answer within {} s", BUDGET_ASK_TIMEOUT.as_secs())),
    }
}

/// Waits for this request's slot. `Err` says why the request must not be
/// sent (the budget cannot be asked, or a bound was reached).
///
/// A slot is used only on time: if this request wakes up more than one
/// interval after its slot (a stalled or starved process, a slow pause
/// check), the slot has passed and is left unused, and a new one is
/// reserved, so late requests never arrive bunched with punctual ones.
pub async fn wait_for_slot(
    turnstile: &Turnstile,
    budget: &dyn RateBudget,
    interval: Duration,
    line: Line,
) -> Result<Duration, String> {
    let started = Instant::now();
    let over = |what: &str| {
        format!(
            "rate group {}: {what}; waiting would pass the {} s bound, so the request was not sent",
            budget.group(),
            BUDGET_WAIT_MAX.as_secs()
        )
    };
    let Ok(_pass) = tokio::time::timeout(BUDGET_WAIT_MAX, turnstile.enter(line)).await else {
        return Err(over("this process's turn never came"));
    };
    let late_max = interval.max(Duration::from_millis(5));
    let mut failed_asks = 0;
    let mut failed = |e: String| {
        failed_asks += 1;
        if failed_asks >= BUDGET_ASKS_MAX {
            Err(format!("{e} ({failed_asks} tries); the request was not sent"))
        } else {
            Ok(())
        }
    };
    loop {
        let slot_use = if line == Line::Change { SlotUse::Change } else { SlotUse::Read };
        let wait = match ask(budget.reserve_for(interval, slot_use)).await {
            Ok(w) => w,
            Err(e) => {
                failed(e)?;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let deadline = Instant::now() + wait;
        if wait > SLOT_WAIT_MAX {
            return Err(format!(
                "rate group {}: the next send slot is {:.1} s away, beyond the {} s bound \
                 (a long pause, or a process of the group set to a much lower rate); the request was not sent",
                budget.group(),
                wait.as_secs_f64(),
                SLOT_WAIT_MAX.as_secs()
            ));
        }
        if started.elapsed() + wait > BUDGET_WAIT_MAX {
            return Err(over(&format!("the next send slot is {:.1} s away", wait.as_secs_f64())));
        }
        tokio::time::sleep(wait).await;
        // A pause may have begun while this request slept: nothing is sent
        // into it. The reservation itself looked at the group's pause, so a
        // slot that was "now" needs no second look at the database.
        let mut paused = turnstile.paused_locally_for();
        if wait >= SLOT_NOW {
            match ask(budget.paused_for()).await {
                Ok(p) => paused = paused.max(p),
                Err(e) => {
                    failed(e)?;
                    continue;
                }
            }
        }
        if !paused.is_zero() {
            if started.elapsed() + paused > BUDGET_WAIT_MAX {
                return Err(over(&format!(
                    "the group is paused for {:.1} s more (a Retry-After)",
                    paused.as_secs_f64()
                )));
            }
            tokio::time::sleep(paused).await;
            continue;
        }
        if Instant::now() > deadline + late_max {
            tracing::debug!(
                late_ms = (Instant::now() - deadline).as_millis() as u64,
                "rate budget slot passed before the request could use it; reserving another"
            );
            continue;
        }
        break;
    }
    let waited = started.elapsed();
    if waited >= WAIT_COUNTED_MIN {
        budget.record_wait(waited);
    }
    Ok(waited)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn shared_listings_then_changes_go_before_waiting_reads_and_a_cancelled_waiter_passes_its_turn_on() {
        let t = Arc::new(Turnstile::new(1));
        let held = t.enter(Line::Read).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let lines = [("read1", Line::Read), ("read2", Line::Read), ("change", Line::Change), ("shared", Line::Shared)];
        for (name, line) in lines {
            let (t, order) = (t.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _p = t.enter(line).await;
                order.lock().unwrap().push(name);
            }));
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // One more waiter that gives up before its turn.
        let cancelled = {
            let t = t.clone();
            tokio::spawn(async move {
                let _p = t.enter(Line::Change).await;
                unreachable!("cancelled before its turn");
            })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        cancelled.abort();
        let _ = cancelled.await;
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec!["shared", "change", "read1", "read2"]);
        // Every pass came back, the cancelled waiter's turn included.
        assert_eq!(t.lock().free, 1);
        assert!(t.lock().shared.is_empty() && t.lock().changes.is_empty() && t.lock().reads.is_empty());
    }

    #[test]
    fn only_the_requests_of_a_shared_listing_go_in_its_line() {
        let plain = Sending::default();
        assert_eq!((Line::of(true, &plain), Line::of(false, &plain)), (Line::Change, Line::Read));
        let shared = Sending::shared_listing();
        assert_eq!((Line::of(false, &shared), Line::of(true, &shared)), (Line::Shared, Line::Change));
    }

    /// A budget whose pause check is slow the first time: the request wakes
    /// up long after its slot.
    #[derive(Debug, Default)]
    struct SlowCheck {
        reservations: std::sync::atomic::AtomicUsize,
        checks: std::sync::atomic::AtomicUsize,
    }

    impl RateBudget for SlowCheck {
        fn group(&self) -> &str {
            "slow"
        }
        fn reserve(&self, _: Duration) -> oduflow_model::rate::BudgetFuture<'_, Duration> {
            self.reservations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Box::pin(async { Ok(Duration::from_millis(20)) })
        }
        fn paused_for(&self) -> oduflow_model::rate::BudgetFuture<'_, Duration> {
            let first = self.checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0;
            Box::pin(async move {
                if first {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Duration::ZERO)
            })
        }
        fn pause(&self, _: Duration) -> oduflow_model::rate::BudgetFuture<'_, ()> {
            Box::pin(async { Ok(()) })
        }
    }

    /// A slot that passed while the request was held up is not used: a new
    /// one is reserved, so a late request never arrives next to a punctual one.
    #[tokio::test]
    async fn a_slot_that_passed_is_not_used() {
        let t = Turnstile::new(1);
        let b = SlowCheck::default();
        wait_for_slot(&t, &b, Duration::from_millis(40), Line::Change).await.unwrap();
        assert_eq!(b.reservations.load(std::sync::atomic::Ordering::Relaxed), 2, "the late slot was used");
    }

    /// A pause this process was answered holds its own requests at once.
    #[tokio::test]
    async fn a_local_pause_holds_the_next_request() {
        let t = Turnstile::new(1);
        let b = oduflow_model::rate::LocalBudget::new("l");
        t.pause_locally(Duration::from_millis(300));
        let started = Instant::now();
        wait_for_slot(&t, &b, Duration::from_millis(1), Line::Read).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(290), "{:?}", started.elapsed());
    }
}
