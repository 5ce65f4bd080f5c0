//! `/metrics` in the Prometheus text format, rendered at scrape time.
//!
//! Two sources, said in each metric's help text:
//! - the database (clients, jobs, dispatches, queue lag): the same for every
//!   `oduflow serve` process, whichever worker did the work;
//! - this process's own Vultr client (requests by route and status, rate
//!   budget waits): `oduflow serve` talks to Vultr only for operator actions
//!   (reconcile, adopt), so these count those, not the workers' requests.
//! - the rate budget: every group's reservations and pauses, and
//!   each process's slot waits as it last flushed them (every few seconds),
//!   from the database, so one scrape shows the whole fleet.
//!
//! No global recorder and no metrics crate: every figure is a query or an
//! atomic read, so there is nothing to keep in sync.

use crate::AppState;
use crate::error::ApiResult;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use oduflow_engine::{HistogramSnapshot, RunResult, RunStats};
use oduflow_model::{BlockedReason, ClientStatus, JobState};
use oduflow_store::Store;
use oduflow_vultr::stats::StatsSnapshot;
use std::fmt::Write;

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value, escaped as the text format requires.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }
    fn histogram(&mut self, name: &str, help: &str, h: &HistogramSnapshot) {
        self.head(name, "histogram", help);
        for (bound, n) in &h.buckets {
            let le = if bound.is_infinite() { "+Inf".to_owned() } else { bound.to_string() };
            self.sample(&format!("{name}_bucket"), &[("le", &le)], n);
        }
        self.sample(&format!("{name}_sum"), &[], h.sum_seconds);
        self.sample(&format!("{name}_count"), &[], h.count);
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", esc(v))).collect();
            let _ = write!(self.0, "{{{}}}", l.join(","));
        }
        let _ = writeln!(self.0, " {value}");
    }
}

pub(crate) async fn metrics(State(s): State<AppState>) -> ApiResult<impl IntoResponse> {
    let mut o = Out(String::new());
    database(&mut o, s.store(), s.now_ms()).await?;
    if let Some(provider) = s.provider() {
        process(
            &mut o,
            &provider.stats().snapshot(),
            "this oduflow serve process (operator actions only; workers count their own)",
        );
    }
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], o.0))
}

/// A worker's `/metrics` (`oduflow worker --metrics-listen`): the database's
/// figures, as `serve` shows them, this process's Vultr requests and rate
/// budget waits under the same names as `serve`'s, and its job runs.
pub async fn worker_text(
    store: &Store,
    provider: &StatsSnapshot,
    runs: &RunStats,
    now_ms: i64,
) -> Result<String, oduflow_store::StoreError> {
    let mut o = Out(String::new());
    database(&mut o, store, now_ms).await?;
    process(&mut o, provider, "this oduflow worker process");
    run_metrics(&mut o, runs);
    Ok(o.0)
}

/// What one worker process serves on `--metrics-listen`.
#[derive(Clone)]
pub struct WorkerMetrics {
    pub store: Store,
    pub provider: std::sync::Arc<oduflow_vultr::VultrClient>,
    pub runs: std::sync::Arc<RunStats>,
    pub clock: oduflow_engine::SharedClock,
}

async fn worker_metrics(State(w): State<WorkerMetrics>) -> axum::response::Response {
    match worker_text(&w.store, &w.provider.stats().snapshot(), &w.runs, w.clock.now_ms()).await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => crate::ApiError::from(e).into_response(),
    }
}

/// Serves a worker's `/metrics` (and `/health`) on `listener` until
/// `shutdown` completes. No token: the figures carry no secret and no
/// client name; bind it to an address only the scraper reaches. Bounded as
/// `serve` is (`listen`: header read timeout, connection cap).
pub async fn serve_worker_metrics(
    w: WorkerMetrics,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(worker_metrics))
        .route("/health", axum::routing::get(|| async { "ok\n" }))
        .fallback(|| async { crate::ApiError::NotFound("no such route: a worker serves /metrics and /health".into()) })
        .with_state(w);
    crate::listen::serve_router(listener, app, shutdown, crate::listen::ListenLimits::default()).await
}

/// This process's job runs (workers only).
fn run_metrics(o: &mut Out, runs: &RunStats) {
    o.head("oduflow_runs_total", "counter", "Job runs of this worker process, by how they ended.");
    for r in RunResult::ALL {
        o.sample("oduflow_runs_total", &[("outcome", r.as_str())], runs.runs(r));
    }
    o.head("oduflow_runs_in_flight", "gauge", "Job runs of this worker process under way now.");
    o.sample("oduflow_runs_in_flight", &[], runs.in_flight());
    o.histogram(
        "oduflow_run_duration_seconds",
        "How long this worker process's job runs took, claim to commit.",
        &runs.run_seconds.snapshot(),
    );
    o.histogram(
        "oduflow_run_claim_lag_seconds",
        "How long a job this worker process claimed had been runnable (past its scheduled time) before the claim.",
        &runs.claim_lag_seconds.snapshot(),
    );
}

/// This process's Vultr client: requests by route and status, and its
/// waits for the rate budget. `who` says which process, in the help texts.
fn process(o: &mut Out, provider: &StatsSnapshot, who: &str) {
    o.head(
        "oduflow_provider_requests_total",
        "counter",
        &format!(
            "Vultr API requests sent by {who}, by method, route template and status (transport_error when no answer was read)."
        ),
    );
    for (series, n) in &provider.requests {
        o.sample(
            "oduflow_provider_requests_total",
            &[("method", &series.method), ("route", &series.route), ("status", &series.status)],
            n,
        );
    }
    o.head(
        "oduflow_provider_rate_limiter_waits_total",
        "counter",
        &format!("Vultr requests of {who} that waited for a slot in the rate budget."),
    );
    o.sample("oduflow_provider_rate_limiter_waits_total", &[], provider.limiter_waits);
    o.head(
        "oduflow_provider_rate_limiter_wait_seconds_total",
        "counter",
        &format!("Time the Vultr requests of {who} spent waiting for a slot in the rate budget."),
    );
    o.sample("oduflow_provider_rate_limiter_wait_seconds_total", &[], provider.limiter_wait.as_secs_f64());
    o.head(
        "oduflow_provider_budget_refusals_total",
        "counter",
        &format!(
            "Vultr requests of {who} not sent because no slot could be had (budget unreachable, or a wait bound)."
        ),
    );
    o.sample("oduflow_provider_budget_refusals_total", &[], provider.budget_refusals);
}

/// The database's figures: the same whichever process serves them.
async fn database(o: &mut Out, store: &Store, now_ms: i64) -> Result<(), oduflow_store::StoreError> {
    let counts = store.client_status_counts().await?;
    let stats = store.stats(now_ms).await?;
    let queue = store.queue_status(now_ms).await?;
    let restore_pending = store.restore_pending().await?.is_some();
    o.head("oduflow_clients", "gauge", "Clients by status (database).");
    for st in ClientStatus::ALL {
        let n = counts.iter().find(|(s, _)| s == st).map_or(0, |(_, n)| *n);
        o.sample("oduflow_clients", &[("status", st.as_str())], n);
    }
    o.head("oduflow_clients_blocked", "gauge", "Blocked clients by reason (database).");
    for r in BlockedReason::ALL {
        let n = stats.blocked_by_reason.iter().find(|(s, _)| s == r.as_str()).map_or(0, |(_, n)| *n);
        o.sample("oduflow_clients_blocked", &[("reason", r.as_str())], n);
    }
    o.head("oduflow_clients_observed", "gauge", "Imported clients observed only, not yet promoted (database).");
    o.sample("oduflow_clients_observed", &[], stats.observed);
    webhooks(o, store).await?;
    // Verification stopped (every worker down, or the interval set to 0)
    // shows as this age growing.
    if let Some(last) = store.setting_get(oduflow_store::SETTING_VERIFY_LAST).await?.and_then(|v| v.parse::<i64>().ok())
    {
        o.head("oduflow_verify_age_seconds", "gauge", "Seconds since the last verification pass began (database).");
        o.sample("oduflow_verify_age_seconds", &[], (now_ms - last).max(0) / 1000);
    }
    o.head("oduflow_jobs", "gauge", "Jobs by state (database).");
    for st in JobState::ALL {
        let n = stats.jobs_by_state.iter().find(|(s, _)| s == st.as_str()).map_or(0, |(_, n)| *n);
        o.sample("oduflow_jobs", &[("state", st.as_str())], n);
    }
    o.head("oduflow_jobs_runnable", "gauge", "Queued jobs whose scheduled time has come (database).");
    o.sample("oduflow_jobs_runnable", &[], queue.runnable);
    o.head(
        "oduflow_queue_lag_seconds",
        "gauge",
        "How long the oldest runnable job has waited for a worker; 0 when none waits (database).",
    );
    let lag_ms = stats.oldest_runnable_ms.map_or(0, |t| (now_ms - t).max(0));
    o.sample("oduflow_queue_lag_seconds", &[], lag_ms as f64 / 1000.0);
    o.head("oduflow_queue_paused", "gauge", "1 while the queue is paused (database).");
    o.sample("oduflow_queue_paused", &[], u8::from(queue.paused));
    o.head(
        "oduflow_restore_pending",
        "gauge",
        "1 while a restored database awaits `oduflow reconcile --all` (database).",
    );
    o.sample("oduflow_restore_pending", &[], u8::from(restore_pending));
    o.head(
        "oduflow_dispatches",
        "gauge",
        "Dispatches (receipts) by resource kind and outcome, as the ledger reads each: accepted, \
         adopted_by_label, adopted_by_operator, reclaimed_by_marker, rejected, abandoned, not_sent, \
         not_marked_sent, unknown (database).",
    );
    for (kind, outcome, n) in &stats.dispatches_by_outcome {
        o.sample("oduflow_dispatches", &[("kind", kind), ("outcome", outcome)], n);
    }
    budget(o, store).await
}

/// The rate budget of the whole fleet, from the database.
/// Each webhook endpoint's backlog, failed attempts and dead letters.
async fn webhooks(o: &mut Out, store: &Store) -> Result<(), oduflow_store::StoreError> {
    let (endpoints, head) = (store.webhook_list().await?, store.feed_head().await?);
    o.head("oduflow_webhook_lag_events", "gauge", "Feed positions not yet delivered to the endpoint (database).");
    for e in &endpoints {
        o.sample("oduflow_webhook_lag_events", &[("endpoint", &e.name)], (head - e.cursor).max(0));
    }
    o.head("oduflow_webhook_failed_attempts", "gauge", "Failed attempts at the endpoint's next event (database).");
    for e in &endpoints {
        o.sample("oduflow_webhook_failed_attempts", &[("endpoint", &e.name)], e.attempts);
    }
    o.head("oduflow_webhook_delivered_total", "counter", "Events the endpoint took (database).");
    for e in &endpoints {
        o.sample("oduflow_webhook_delivered_total", &[("endpoint", &e.name)], e.delivered);
    }
    o.head("oduflow_webhook_dead_letters", "gauge", "Events given up until replayed (database).");
    for e in &endpoints {
        o.sample("oduflow_webhook_dead_letters", &[("endpoint", &e.name)], e.dead);
    }
    Ok(())
}

async fn budget(o: &mut Out, store: &Store) -> Result<(), oduflow_store::StoreError> {
    let groups = store.budget_groups().await?;
    let usage = store.budget_usage().await?;
    o.head(
        "oduflow_rate_budget_waits_total",
        "counter",
        "Requests that waited for a slot, per rate group and process (database; a process adds its waits at most every 5 s while it sends, and when a worker exits).",
    );
    for u in &usage {
        o.sample("oduflow_rate_budget_waits_total", &[("group", &u.group), ("process", &u.process)], u.waits);
    }
    o.head(
        "oduflow_rate_budget_wait_seconds_total",
        "counter",
        "Time spent waiting for slots, per rate group and process (database; a process adds its waits at most every 5 s while it sends, and when a worker exits).",
    );
    for u in &usage {
        o.sample(
            "oduflow_rate_budget_wait_seconds_total",
            &[("group", &u.group), ("process", &u.process)],
            u.wait_us as f64 / 1e6,
        );
    }
    // Per group, from the group's own row (its processes' usage rows are
    // pruned after a week; the group's totals never shrink).
    let per_group: Vec<(&str, [f64; 5])> = groups
        .iter()
        .map(|g| {
            (
                g.group.as_str(),
                [
                    g.waits as f64,
                    g.wait_us as f64 / 1e6,
                    g.reservations as f64,
                    g.pauses as f64,
                    g.paused_for_us as f64 / 1e6,
                ],
            )
        })
        .collect();
    for (i, (name, kind, help)) in [
        ("oduflow_rate_group_waits_total", "counter", "Requests that waited for a slot, per rate group (database)."),
        (
            "oduflow_rate_group_wait_seconds_total",
            "counter",
            "Time spent waiting for slots, per rate group (database).",
        ),
        ("oduflow_rate_group_reservations_total", "counter", "Send slots handed out, per rate group (database)."),
        ("oduflow_rate_group_pauses_total", "counter", "429 answers that paused the rate group (database)."),
        (
            "oduflow_rate_group_paused_seconds",
            "gauge",
            "How much longer the rate group is paused; 0 when not (database).",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        o.head(name, kind, help);
        for (group, v) in &per_group {
            o.sample(name, &[("group", group)], v[i]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut o = Out(String::new());
        o.sample("m", &[("l", "a\"b\\c\nd")], 1);
        assert_eq!(o.0, "m{l=\"a\\\"b\\\\c\\nd\"} 1\n");
    }
}
