//! Aggregates for `oduflow serve`'s `/metrics`, computed at scrape time from
//! the tables (so every process sees the same figures, whichever worker did
//! the work). Each is one `GROUP BY`; nothing here is kept in memory.

use crate::{Result, Store, both};
use serde::Serialize;

/// Counts of the whole database at one instant.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreStats {
    /// Jobs per state (`queued`, `done`, `stale`, `failed`).
    pub jobs_by_state: Vec<(String, i64)>,
    /// Blocked clients per blocked reason.
    pub blocked_by_reason: Vec<(String, i64)>,
    /// Dispatches (receipts) per (resource kind, outcome), the outcome as
    /// [`oduflow_model::ledger::Effect::outcome`] names it.
    pub dispatches_by_outcome: Vec<(String, String, i64)>,
    /// `run_after_ms` of the oldest runnable queued job: how long work has
    /// been waiting for a worker.
    pub oldest_runnable_ms: Option<i64>,
    /// Imported clients not yet promoted.
    pub observed: i64,
}

impl Store {
    pub async fn stats(&self, now_ms: i64) -> Result<StoreStats> {
        crate::named("stats", async move {
            both!(self, p => {
                let jobs_by_state = sqlx::query_as("SELECT state, count(*) FROM jobs GROUP BY state ORDER BY state")
                    .fetch_all(p).await?;
                let blocked_by_reason = sqlx::query_as(
                    "SELECT blocked_reason, count(*) FROM infra WHERE status = 'blocked' AND blocked_reason IS NOT NULL \
                     GROUP BY blocked_reason ORDER BY blocked_reason")
                    .fetch_all(p).await?;
                let dispatches_by_outcome = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT resource_kind, {} AS outcome, count(*) \
                     FROM dispatch_receipts GROUP BY 1, 2 ORDER BY 1, 2", crate::rows::RECEIPT_OUTCOME_SQL)))
                    .fetch_all(p).await?;
                let oldest_runnable_ms = sqlx::query_scalar(
                    "SELECT min(run_after_ms) FROM jobs WHERE state = 'queued' AND run_after_ms <= $1")
                    .bind(now_ms).fetch_one(p).await?;
                let observed = sqlx::query_scalar("SELECT count(*) FROM infra WHERE observe_only = 1").fetch_one(p).await?;
                Ok(StoreStats { jobs_by_state, blocked_by_reason, dispatches_by_outcome, oldest_runnable_ms, observed })
            })
        })
        .await
    }
}
