//! Waiting for a send slot in the rate budget (issue 13).
//!
//! Every request waits here before it leaves: it takes a pass from this
//! process's turnstile, reserves the group's next slot
//! ([`oduflow_model::rate::RateBudget`]), sleeps until it, and gives the pass
//! back. Fairness, chosen this way:
//! - Across processes, slots are handed out first come first served, and a
//!   process holds at most [`RESERVATIONS_AHEAD_MAX`] reserved slots at a
//!   time. A request another process's burst is queued behind therefore waits
//!   at most `RESERVATIONS_AHEAD_MAX` slots per other process (4 processes:
//!   6 slots, 0.24 s at 25/s), however long the burst.
//! - Inside a process, requests that change something at Vultr (create,
//!   attach, detach, delete) take the next pass before any waiting read, so a
//!   label scan or `reconcile --all` never starves this process's own creates.
//!
//! A pause (a `Retry-After` seen by any process of the group) pushes every
//! later slot past its end; a request whose slot came before a pause that
//! began while it slept looks again and waits the pause out, so nothing,
//! create or read, is sent into a paused group.

use oduflow_model::rate::RateBudget;
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

/// Pause when a 429 comes without a usable `Retry-After`: Vultr's limit is
/// per second.
pub const PAUSE_WITHOUT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Below this a wait is only the cost of asking the budget, not a wait: it
/// is not counted in the metrics.
pub const WAIT_COUNTED_MIN: Duration = Duration::from_millis(2);

/// Below this a slot is "now": the reservation itself already looked at the
/// pause, so there is no need to look again.
const SLOT_NOW: Duration = Duration::from_millis(1);

/// This process's passes to the budget: at most `RESERVATIONS_AHEAD_MAX`
/// held at once, changes before reads, first come first served within each.
#[derive(Debug)]
pub struct Turnstile {
    state: Mutex<TurnstileState>,
}

#[derive(Debug)]
struct TurnstileState {
    free: usize,
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
                changes: VecDeque::new(),
                reads: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TurnstileState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn enter(&self, change: bool) -> Pass<'_> {
        let rx = {
            let mut s = self.lock();
            let ahead = s.changes.len() + if change { 0 } else { s.reads.len() };
            if s.free > 0 && ahead == 0 {
                s.free -= 1;
                return Pass(self);
            }
            let (tx, rx) = oneshot::channel();
            if change {
                s.changes.push_back(tx);
            } else {
                s.reads.push_back(tx);
            }
            rx
        };
        let mut w = Waiting {
            turnstile: self,
            rx: Some(rx),
        };
        // The sender stays in the line until it is handed a pass, so the
        // only answer is the pass.
        let _ = w.rx.as_mut().expect("set above").await;
        w.rx = None;
        Pass(self)
    }

    fn release(&self) {
        let mut s = self.lock();
        loop {
            let next = match s.changes.pop_front() {
                Some(tx) => Some(tx),
                None => s.reads.pop_front(),
            };
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

/// Waits for this request's slot. `Err` says why the request must not be
/// sent (the budget cannot be asked, or a bound was reached).
pub async fn wait_for_slot(
    turnstile: &Turnstile,
    budget: &dyn RateBudget,
    interval: Duration,
    change: bool,
) -> Result<Duration, String> {
    let started = Instant::now();
    let _pass = turnstile.enter(change).await;
    let mut failed_asks = 0;
    loop {
        let wait = match budget.reserve(interval).await {
            Ok(w) => w,
            Err(e) => {
                failed_asks += 1;
                if failed_asks >= BUDGET_ASKS_MAX {
                    return Err(format!(
                        "{e} ({failed_asks} tries); the request was not sent"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100 * u64::from(failed_asks))).await;
                continue;
            }
        };
        if wait > SLOT_WAIT_MAX {
            return Err(format!(
                "rate group {}: the next send slot is {:.1} s away, beyond the {} s bound \
                 (a long pause, or a process of the group set to a much lower rate); the request was not sent",
                budget.group(),
                wait.as_secs_f64(),
                SLOT_WAIT_MAX.as_secs()
            ));
        }
        tokio::time::sleep(wait).await;
        if wait < SLOT_NOW {
            break;
        }
        // A pause may have begun while this request slept: nothing is sent
        // into it.
        let paused = match budget.paused_for().await {
            Ok(p) => p,
            Err(e) => {
                failed_asks += 1;
                if failed_asks >= BUDGET_ASKS_MAX {
                    return Err(format!(
                        "{e} ({failed_asks} tries); the request was not sent"
                    ));
                }
                continue;
            }
        };
        if paused.is_zero() {
            break;
        }
        if started.elapsed() + paused > BUDGET_WAIT_MAX {
            return Err(format!(
                "rate group {} is paused for {:.1} s more (a Retry-After); waiting would pass the {} s bound, \
                 so the request was not sent",
                budget.group(),
                paused.as_secs_f64(),
                BUDGET_WAIT_MAX.as_secs()
            ));
        }
        tokio::time::sleep(paused).await;
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
    async fn changes_go_before_waiting_reads_and_a_cancelled_waiter_passes_its_turn_on() {
        let t = Arc::new(Turnstile::new(1));
        let held = t.enter(false).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, change) in [("read1", false), ("read2", false), ("change", true)] {
            let (t, order) = (t.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _p = t.enter(change).await;
                order.lock().unwrap().push(name);
            }));
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // One more waiter that gives up before its turn.
        let cancelled = {
            let t = t.clone();
            tokio::spawn(async move {
                let _p = t.enter(true).await;
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
        assert_eq!(*order.lock().unwrap(), vec!["change", "read1", "read2"]);
        // Every pass came back, the cancelled waiter's turn included.
        assert_eq!(t.lock().free, 1);
        assert!(t.lock().changes.is_empty() && t.lock().reads.is_empty());
    }
}
