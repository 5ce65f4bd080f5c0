//! Counters of this process's job runs, for a worker's `/metrics`
//! (`oduflow worker --metrics-listen`): runs by outcome, how long runs took,
//! how late jobs were claimed, and how many run now. Relaxed atomics only:
//! a scrape reads a consistent-enough copy, and a run pays a few increments.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds (seconds) of the run-duration histogram's buckets. A run
/// does one side effect plus bounded reads, each under the request timeout
/// (30 s by default), so the last finite bucket is a minute.
pub const RUN_SECONDS_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0];

/// Upper bounds (seconds) of the claim-lag histogram's buckets: how long a
/// runnable job waited past its scheduled time before this process claimed it.
pub const CLAIM_LAG_SECONDS_BUCKETS: [f64; 9] = [0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0];

/// How a run ended, as `/metrics` labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunResult {
    /// Committed: its purpose achieved, or settled as blocked.
    Done,
    /// Committed: progress made, to run again later.
    RunAgain,
    /// Committed: the job was for an older generation or target.
    Stale,
    /// Committed: its runs kept dying; the client blocks `attempts_exhausted`.
    Exhausted,
    /// Rolled back: an error or a panic; the attempt was recorded.
    Failed,
}

impl RunResult {
    pub const ALL: [RunResult; 5] =
        [RunResult::Done, RunResult::RunAgain, RunResult::Stale, RunResult::Exhausted, RunResult::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Done => "done",
            RunResult::RunAgain => "run_again",
            RunResult::Stale => "stale",
            RunResult::Exhausted => "exhausted",
            RunResult::Failed => "failed",
        }
    }
}

/// A histogram with fixed buckets: cumulative counts as the text format
/// wants them are computed at read time.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One counter per bound, plus one for +Inf.
    counts: Vec<AtomicU64>,
    sum_us: AtomicU64,
}

/// A copy of a histogram: `(upper bound, cumulative count)` per bucket,
/// +Inf last, then the sum in seconds and the count.
#[derive(Clone, Debug, Default)]
pub struct HistogramSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum_us: AtomicU64::new(0) }
    }

    pub fn observe(&self, d: std::time::Duration) {
        let s = d.as_secs_f64();
        let i = self.bounds.iter().position(|b| s <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut acc = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            acc += c.load(Ordering::Relaxed);
            buckets.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), acc));
        }
        HistogramSnapshot { buckets, sum_seconds: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6, count: acc }
    }
}

/// Shared by every clone of a [`crate::Worker`].
#[derive(Debug)]
pub struct RunStats {
    runs: [AtomicU64; 5],
    in_flight: AtomicI64,
    pub run_seconds: Histogram,
    pub claim_lag_seconds: Histogram,
}

impl Default for RunStats {
    fn default() -> Self {
        Self {
            runs: Default::default(),
            in_flight: AtomicI64::new(0),
            run_seconds: Histogram::new(&RUN_SECONDS_BUCKETS),
            claim_lag_seconds: Histogram::new(&CLAIM_LAG_SECONDS_BUCKETS),
        }
    }
}

impl RunStats {
    pub(crate) fn started(&self, lag_ms: i64) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.claim_lag_seconds.observe(std::time::Duration::from_millis(lag_ms.max(0) as u64));
    }

    pub(crate) fn ended(&self, result: RunResult, took: std::time::Duration) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.runs[RunResult::ALL.iter().position(|r| *r == result).unwrap_or(0)].fetch_add(1, Ordering::Relaxed);
        self.run_seconds.observe(took);
    }

    /// Runs ended with `result` so far.
    pub fn runs(&self, result: RunResult) -> u64 {
        self.runs[RunResult::ALL.iter().position(|r| *r == result).unwrap_or(0)].load(Ordering::Relaxed)
    }

    /// Runs started and not yet ended.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn buckets_are_cumulative_and_inf_counts_all() {
        let s = RunStats::default();
        s.started(0);
        s.ended(RunResult::Done, Duration::from_millis(30));
        s.started(2_000);
        s.ended(RunResult::Failed, Duration::from_secs(120));
        let h = s.run_seconds.snapshot();
        assert_eq!(h.count, 2);
        assert_eq!(h.buckets.iter().find(|(b, _)| *b == 0.05).unwrap().1, 1);
        assert_eq!(h.buckets.iter().find(|(b, _)| *b == 60.0).unwrap().1, 1);
        assert_eq!(h.buckets.last().unwrap(), &(f64::INFINITY, 2));
        assert!((h.sum_seconds - 120.03).abs() < 1e-6);
        assert_eq!((s.runs(RunResult::Done), s.runs(RunResult::Failed), s.runs(RunResult::Stale)), (1, 1, 0));
        assert_eq!(s.in_flight(), 0);
        let lag = s.claim_lag_seconds.snapshot();
        assert_eq!(lag.buckets.iter().find(|(b, _)| *b == 1.0).unwrap().1, 1);
        assert_eq!(lag.buckets.iter().find(|(b, _)| *b == 5.0).unwrap().1, 2);
    }
}
