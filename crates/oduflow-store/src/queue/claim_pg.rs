//! The PostgreSQL claim protocol: a claimed job holds its main transaction,
//! begun by the claim itself (`FOR UPDATE SKIP LOCKED` on the job and the
//! client's infra row), on a connection of [`ClaimConns`]. The row locks are
//! the lease: they last exactly as long as the backend's transaction, and a
//! run's fence asks whether that backend still lives.

use super::{COUNT_START_SQL, Claim, ClaimInner, Footing, job_and_infra};
use crate::rows::{INFRA_COLUMNS_PREFIXED, JOB_COLUMNS};
use crate::{Result, StoreError};
use oduflow_model::*;
use sqlx::PgConnection;

/// Claims the next runnable job whose client no other run holds, or `None`.
pub(super) async fn claim_next(p: &sqlx::PgPool, conns: &ClaimConns, now_ms: i64) -> Result<Option<Claim>> {
    // Locking the job and the client's infra row together, both
    // with SKIP LOCKED, means a job whose client is busy is simply
    // passed over instead of waited on. One round trip begins the
    // main transaction, claims and reads both rows.
    let sql = format!("BEGIN; EXECUTE oduflow_claim({now_ms})");
    let (mut conn, reused) = conns.take(p).await?;
    let (mut conn, rows) = match sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone())).fetch_all(&mut **conn).await {
        Ok(rows) => (conn, rows),
        // A kept connection may have died while idle (a server
        // restart, a terminated backend): drop it and claim once
        // on a new one. Dropping it rolls back whatever it began.
        Err(e) if reused => {
            tracing::debug!(error = %e, "a kept claim connection failed; reconnecting");
            drop(conn);
            let (mut conn, _) = conns.connect(p).await?;
            let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_all(&mut **conn).await?;
            (conn, rows)
        }
        Err(e) => return Err(e.into()),
    };
    let Some(row) = rows.first() else {
        sqlx::raw_sql("ROLLBACK").execute(&mut **conn).await?;
        conns.put(conn);
        return Ok(None);
    };
    let (job, infra) = job_and_infra(row)?;
    // On the pool, committed at once: the job row is locked by the
    // claim, this table is not.
    let unfinished = count_start_pg(p, job.id).await?;
    let inner = ClaimInner::Pg(PgClaim { conn, conns: conns.clone(), pool: p.clone() });
    Ok(Some(Claim { job, infra, unfinished_runs: unfinished, inner }))
}

/// The fence of a run: its claim's backend (pid, start time) still lives.
pub(super) async fn fence_check(pool: &sqlx::PgPool, pid: i32, started: &str, client: &ClientId) -> Result<Footing> {
    let alive: Option<i32> =
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE pid = $1 AND backend_start::text = $2")
            .bind(pid)
            .bind(started)
            .fetch_optional(pool)
            .await?;
    if alive.is_none() {
        return Err(StoreError::LeaseLost(client.to_string()));
    }
    // The row is locked by that backend: its generation cannot move.
    Ok(Footing::Held)
}

/// Counts a run's start on PostgreSQL (autocommit on the pool); returns the
/// runs of this job that started before and never finished.
async fn count_start_pg(p: &sqlx::PgPool, job: JobId) -> Result<i64> {
    let n: i64 = sqlx::query_scalar(COUNT_START_SQL).bind(job.0).fetch_one(p).await?;
    Ok(n - 1)
}

/// A claim's main transaction on PostgreSQL, driven by hand on a connection
/// of [`ClaimConns`]. Dropping it (an error, a panic, a cancelled task) drops
/// the connection, which closes it: PostgreSQL then rolls the transaction back
/// and releases the locks, exactly as when a worker dies.
pub(super) struct PgClaim {
    pub(super) conn: Box<ClaimConn>,
    pub(super) conns: ClaimConns,
    /// For the fence's check, made on a connection of the pool.
    pub(super) pool: sqlx::PgPool,
}

/// A claim connection and the identity of its backend (for the fence).
pub(super) struct ClaimConn {
    pub(super) conn: PgConnection,
    pub(super) pid: i32,
    pub(super) started: String,
}

impl std::ops::Deref for ClaimConn {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for ClaimConn {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// The PostgreSQL connections that claim jobs, kept apart from the pool.
///
/// Each round trip of a claim is time its locks are held and work for both
/// processes, so the main transaction is driven by hand: `BEGIN` travels with
/// the claim and the job's state with `COMMIT` (statements prepared once per
/// connection, values inlined are integers and fixed words only). A job that
/// writes nothing else costs two round trips. A connection comes back here
/// only after its `COMMIT` or `ROLLBACK` succeeded, so none is ever reused
/// inside a transaction.
#[derive(Clone)]
// Boxed: a claim connection moves between the pool and a `Claim` as a
// pointer, never by value.
#[allow(clippy::vec_box)]
pub struct ClaimConns {
    idle: std::sync::Arc<std::sync::Mutex<Vec<Box<ClaimConn>>>>,
    max_idle: usize,
}

impl std::fmt::Debug for ClaimConns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimConns").field("max_idle", &self.max_idle).finish_non_exhaustive()
    }
}

impl ClaimConns {
    pub(crate) fn new(max_idle: usize) -> Self {
        Self { idle: Default::default(), max_idle }
    }

    /// A kept connection (`true`) or a new one.
    pub(super) async fn take(&self, pool: &sqlx::PgPool) -> Result<(Box<ClaimConn>, bool)> {
        let idle = self.idle.lock().expect("claim connections").pop();
        match idle {
            Some(conn) => Ok((conn, true)),
            None => self.connect(pool).await,
        }
    }

    pub(super) async fn connect(&self, pool: &sqlx::PgPool) -> Result<(Box<ClaimConn>, bool)> {
        use sqlx::Connection;
        let mut conn = PgConnection::connect_with(&pool.connect_options()).await?;
        let (pid, started): (i32, String) =
            sqlx::query_as("SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()")
                .fetch_one(&mut conn)
                .await?;
        let mut conn = Box::new(ClaimConn { conn, pid, started });
        // A generic plan: the claim's shape never changes, and planning it
        // afresh for every job was a large share of the server's time.
        // `OF i, j`: rows are locked in this order, so a job whose client is
        // busy is skipped before its own row is locked. (`OF j, i` left the
        // skipped jobs locked until the claim ended, hiding them from every
        // other worker and writing a lock record for each.)
        let sql = format!(
            "SET plan_cache_mode = force_generic_plan; PREPARE oduflow_claim(bigint) AS SELECT {JOB_COLUMNS}, {INFRA_COLUMNS_PREFIXED} \
             FROM jobs j JOIN infra i ON i.client_id = j.client_id \
             WHERE j.state = 'queued' AND j.run_after_ms <= $1 \
             AND NOT EXISTS (SELECT 1 FROM settings WHERE (key = 'queue_paused' AND value = 'true') OR key = 'restore_pending') \
             ORDER BY j.run_after_ms, j.id LIMIT 1 FOR UPDATE OF i, j SKIP LOCKED; \
             PREPARE oduflow_finish(bigint, text, bigint, bigint) AS UPDATE jobs SET state = $2, \
             run_after_ms = COALESCE($3, run_after_ms), finished_ms = $4 WHERE id = $1"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut **conn).await?;
        Ok((conn, false))
    }

    pub(super) fn put(&self, conn: Box<ClaimConn>) {
        let mut idle = self.idle.lock().expect("claim connections");
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }
}
