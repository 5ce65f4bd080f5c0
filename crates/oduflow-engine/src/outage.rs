//! What a worker says while its steps fail (the database unreachable, a
//! SQLite file that cannot be written): its first failure, then at most one
//! line per [`OUTAGE_REPORT_EVERY_MS`] counting the failures since the last
//! line, and one line when a step succeeds again. Shared by a worker's
//! loops, so N loops do not say everything N times. Retrying every 100 ms
//! used to log each failure: about twenty lines a second, for minutes.

use std::sync::Mutex;

/// How often, at most, a worker whose steps keep failing logs a line about
/// it after its first (reason in the line: `still failing`).
pub const OUTAGE_REPORT_EVERY_MS: i64 = 60_000;

#[derive(Default)]
pub struct Outage(Mutex<State>);

#[derive(Default)]
struct State {
    /// Since when steps have failed without one succeeding.
    since_ms: Option<i64>,
    /// Whether a line has told of this outage (then its end is told too).
    told: bool,
    /// Failures since the last line, and in this outage.
    unreported: u64,
    total: u64,
    /// When the last line about failures was logged.
    last_line_ms: Option<i64>,
}

impl Outage {
    /// A step failed with `error` at `now_ms`: logs it if due.
    pub fn failed(&self, now_ms: i64, error: &str) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let since = *s.since_ms.get_or_insert(now_ms);
        s.unreported += 1;
        s.total += 1;
        if s.last_line_ms.is_some_and(|t| now_ms - t < OUTAGE_REPORT_EVERY_MS) {
            return;
        }
        if s.unreported == 1 {
            tracing::error!(
                error = %error,
                "worker step failed; retrying, and saying so again at most every {} s until a step succeeds",
                OUTAGE_REPORT_EVERY_MS / 1000
            );
        } else {
            tracing::error!(
                error = %error,
                failures = s.unreported,
                failing_for_s = (now_ms - since) / 1000,
                "worker steps still failing: {} failure(s) since the last line, the last one here",
                s.unreported
            );
        }
        s.unreported = 0;
        s.told = true;
        s.last_line_ms = Some(now_ms);
    }

    /// A step succeeded at `now_ms`: the outage, if one was told of, is
    /// said to be over, in one line.
    pub fn succeeded(&self, now_ms: i64) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(since) = s.since_ms.take() else { return };
        if std::mem::take(&mut s.told) {
            tracing::warn!(
                failures = s.total,
                failed_for_ms = now_ms - since,
                "worker resumed: a step succeeded again after {} failure(s) over {} ms",
                s.total,
                now_ms - since
            );
        }
        s.total = 0;
    }
}
