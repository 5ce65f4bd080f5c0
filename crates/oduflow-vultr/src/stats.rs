//! Counters of this process's requests to Vultr, for `oduflow serve`'s
//! `/metrics`: requests by (method, route template, status) and the time
//! spent waiting for the rate limiter. Cheap: one short mutex per request
//! (requests are rate-limited to tens per second) and relaxed atomics.
//!
//! Routes are recorded as templates (`/v2/instances/{id}`), never with ids,
//! so the number of series stays bounded whatever the account holds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One series: method, route template, and status (`"200"`, ...) or
/// `"transport_error"` when no answer was read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestSeries {
    pub method: String,
    pub route: String,
    pub status: String,
}

/// Shared by every clone of a [`crate::VultrClient`].
#[derive(Debug, Default)]
pub struct Stats {
    requests: Mutex<BTreeMap<RequestSeries, u64>>,
    limiter_waits: AtomicU64,
    limiter_wait_us: AtomicU64,
    budget_refusals: AtomicU64,
}

/// A copy of the counters at one instant.
#[derive(Clone, Debug, Default)]
pub struct StatsSnapshot {
    pub requests: Vec<(RequestSeries, u64)>,
    /// Requests that had to wait for the rate limiter at all.
    pub limiter_waits: u64,
    /// Total time spent waiting for the rate limiter.
    pub limiter_wait: Duration,
    /// Requests not sent because no slot could be had (the budget's database
    /// did not answer, or a wait bound was reached).
    pub budget_refusals: u64,
}

impl Stats {
    pub(crate) fn record_request(&self, method: &str, route: String, status: Option<u16>) {
        let key = RequestSeries {
            method: method.to_owned(),
            route,
            status: status.map_or_else(|| "transport_error".to_owned(), |s| s.to_string()),
        };
        // A poisoned lock only means another thread panicked mid-increment;
        // the counts are still usable.
        let mut m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(key).or_insert(0) += 1;
    }

    pub(crate) fn record_limiter_wait(&self, waited: Duration) {
        if waited >= crate::budget::WAIT_COUNTED_MIN {
            self.limiter_waits.fetch_add(1, Ordering::Relaxed);
            self.limiter_wait_us.fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn record_budget_refusal(&self) {
        self.budget_refusals.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        StatsSnapshot {
            requests: m.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            limiter_waits: self.limiter_waits.load(Ordering::Relaxed),
            limiter_wait: Duration::from_micros(self.limiter_wait_us.load(Ordering::Relaxed)),
            budget_refusals: self.budget_refusals.load(Ordering::Relaxed),
        }
    }
}

/// `/v2/instances/{id}/attach` from the path segments after the base: a
/// segment of lowercase words (letters and `_`) joined by single hyphens is
/// a route word (`ssh-keys`, `backup-schedule`); anything else (UUIDs,
/// domain names) is an id.
pub(crate) fn route_template(base_path: &str, segments: &[&str]) -> String {
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    let mut s = base_path.trim_end_matches('/').to_owned();
    for seg in segments {
        s.push('/');
        if seg.split('-').all(word) {
            s.push_str(seg);
        } else {
            s.push_str("{id}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_hide_ids() {
        assert_eq!(
            route_template("/v2", &["instances", "3f1c2a9e-0b7d-4c55-9e1a-1234567890ab", "attach"]),
            "/v2/instances/{id}/attach"
        );
        assert_eq!(route_template("/v2/", &["domains", "example.com", "records"]), "/v2/domains/{id}/records");
        assert_eq!(route_template("/v2", &["blocks"]), "/v2/blocks");
    }

    #[test]
    fn hyphenated_route_words_are_kept() {
        assert_eq!(route_template("/v2", &["ssh-keys"]), "/v2/ssh-keys");
        assert_eq!(
            route_template("/v2", &["instances", "3f1c2a9e-0b7d-4c55-9e1a-1234567890ab", "backup-schedule"]),
            "/v2/instances/{id}/backup-schedule"
        );
        for id in ["deadbeef-0b7d-4c55-9e1a-1234567890ab", "example.com", "-x", "x-", "a--b", ""] {
            assert_eq!(route_template("/v2", &["domains", id]), "/v2/domains/{id}", "{id}");
        }
    }

    #[test]
    fn counts_by_series_and_waits() {
        let s = Stats::default();
        s.record_request("GET", "/v2/blocks".into(), Some(200));
        s.record_request("GET", "/v2/blocks".into(), Some(200));
        s.record_request("POST", "/v2/instances".into(), None);
        s.record_limiter_wait(Duration::from_millis(5));
        s.record_limiter_wait(Duration::from_nanos(10));
        let snap = s.snapshot();
        assert_eq!(snap.requests.len(), 2);
        assert!(snap.requests.iter().any(|(k, n)| k.route == "/v2/blocks" && k.status == "200" && *n == 2));
        assert!(snap.requests.iter().any(|(k, n)| k.status == "transport_error" && *n == 1));
        assert_eq!(snap.limiter_waits, 1);
        assert_eq!(snap.limiter_wait, Duration::from_millis(5));
    }
}
