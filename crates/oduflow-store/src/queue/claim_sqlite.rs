//! The SQLite claim protocol: a claimed job holds its client's lock file
//! (`flock`, released by the kernel only when the process dies) and names its
//! lease token on the infra row. A run's fence checks that the row still names
//! its lease and its generation.

use super::{COUNT_START_SQL, Claim, ClaimInner, Footing, job_and_infra};
use crate::rows::{INFRA_COLUMNS_PREFIXED, JOB_COLUMNS};
use crate::{Result, StoreError};
use oduflow_model::*;
use sqlx::{SqliteConnection, SqlitePool};

/// The planted bug `lease_overlap`'s timed lease: the campaign's runs
/// outlast it, so a second worker takes a client whose run is under way.
/// The real claim is not timed (its lease columns name its owner only).
const PLANTED_TIMED_LEASE_MS: i64 = 400;

/// Claims the next runnable job whose client's lock file is free, or `None`.
/// `timed_lease`: the planted bug `lease_overlap` (test builds only; always
/// false otherwise).
pub(super) async fn claim_next(p: &SqlitePool, worker: &str, now_ms: i64, timed_lease: bool) -> Result<Option<Claim>> {
    let token = format!("{worker}/{}", uuid::Uuid::new_v4());
    let locks = sqlite_lock_dir(p)?;
    let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
    // Clients nobody holds first; the lock file decides.
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {JOB_COLUMNS}, {INFRA_COLUMNS_PREFIXED} FROM jobs j JOIN infra i ON i.client_id = j.client_id \
         WHERE j.state = 'queued' AND j.run_after_ms <= $1 \
         AND NOT EXISTS (SELECT 1 FROM settings WHERE (key = 'queue_paused' AND value = 'true') OR key = 'restore_pending') \
         ORDER BY (i.lease_owner IS NOT NULL), j.run_after_ms, j.id LIMIT {SQLITE_CLAIM_CANDIDATES}"
    ));
    let rows = sqlx::query(sql).bind(now_ms).fetch_all(&mut *tx).await?;
    let mut tried = std::collections::HashSet::new();
    for row in &rows {
        let (job, infra) = job_and_infra(row)?;
        if !tried.insert(job.client_id.clone()) {
            continue;
        }
        let hold = match planted_timed_lease(&mut tx, &job.client_id, now_ms, timed_lease).await? {
            Some(true) => continue,
            Some(false) => std::fs::File::open("/dev/null").map_err(|e| StoreError::Lock(e.to_string()))?,
            None => match try_lock_client(&locks, &job.client_id)? {
                Some(hold) => hold,
                None => continue,
            },
        };
        sqlx::query("UPDATE infra SET lease_owner = $2, lease_until_ms = $3 WHERE client_id = $1")
            .bind(job.client_id.as_str())
            .bind(&token)
            .bind(timed_lease.then_some(now_ms + PLANTED_TIMED_LEASE_MS))
            .execute(&mut *tx)
            .await?;
        let unfinished = count_start_sqlite(&mut tx, job.id).await?;
        tx.commit().await?;
        let inner =
            ClaimInner::Sqlite { pool: p.clone(), lease_token: token, hold: std::sync::Arc::new(hold), timed_lease };
        return Ok(Some(Claim { job, infra, unfinished_runs: unfinished, inner }));
    }
    tx.rollback().await?;
    Ok(None)
}

/// Test builds with the planted bug `lease_overlap`: the
/// old timed lease, taken once and never checked again, instead of the lock
/// file. `Some(held)`: whether an unexpired lease names someone; `None`: the
/// real protocol.
async fn planted_timed_lease(
    c: &mut SqliteConnection,
    client: &ClientId,
    now_ms: i64,
    planted: bool,
) -> Result<Option<bool>> {
    if !planted {
        return Ok(None);
    }
    let lease: (Option<String>, Option<i64>) =
        sqlx::query_as("SELECT lease_owner, lease_until_ms FROM infra WHERE client_id = $1")
            .bind(client.as_str())
            .fetch_one(c)
            .await?;
    Ok(Some(lease.0.is_some() && lease.1.is_some_and(|u| u >= now_ms)))
}

/// The fence of a run: the row still names its lease, at its generation.
pub(super) async fn fence_check(
    pool: &SqlitePool,
    lease_token: &str,
    client: &ClientId,
    generation: i64,
) -> Result<Footing> {
    let row: Option<(i64, Option<String>)> =
        sqlx::query_as("SELECT generation, lease_owner FROM infra WHERE client_id = $1")
            .bind(client.as_str())
            .fetch_optional(pool)
            .await?;
    match row {
        Some((_, owner)) if owner.as_deref() != Some(lease_token) => Err(StoreError::LeaseLost(client.to_string())),
        Some((g, _)) if g == generation => Ok(Footing::Held),
        Some(_) => Ok(Footing::Superseded),
        None => Err(StoreError::LeaseLost(client.to_string())),
    }
}

/// Candidate jobs a SQLite claim looks at: enough that every worker loop of
/// every process on the host can hold one client and a runnable job is still
/// found.
const SQLITE_CLAIM_CANDIDATES: usize = 256;

/// The same inside the SQLite claim transaction (which commits at once).
async fn count_start_sqlite(c: &mut SqliteConnection, job: JobId) -> Result<i64> {
    let n: i64 = sqlx::query_scalar(COUNT_START_SQL).bind(job.0).fetch_one(c).await?;
    Ok(n - 1)
}

/// The directory beside a SQLite database that holds one lock file per
/// client. A claim holds its client's file locked (`flock`) for the whole
/// run: the kernel releases it when the process dies, never while it lives
/// (paused, stopped, slow), so two runs of one client never overlap, however
/// long a run takes. SQLite is a single-host store, so a host-local lock is
/// exactly its scope.
///
/// The database's path is made canonical first: two processes that name one
/// file by different paths (a symlink, a relative path) must lock the same
/// files.
pub(crate) fn sqlite_lock_dir(p: &SqlitePool) -> Result<std::path::PathBuf> {
    let options = p.connect_options();
    let named = options.get_filename();
    let db = std::fs::canonicalize(named).map_err(|e| StoreError::Lock(format!("{}: {e}", named.display())))?;
    let mut name = db.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".locks");
    let dir = db.with_file_name(name);
    crate::files::private_dir_all(&dir).map_err(|e| StoreError::Lock(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

/// Takes the client's lock file, or `None` when another run holds it.
pub(crate) fn try_lock_client(dir: &std::path::Path, client: &ClientId) -> Result<Option<std::fs::File>> {
    let path = dir.join(client.as_str());
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::Lock(format!("{}: {e}", path.display())))?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Lock(format!("{}: {e}", path.display()))),
    }
}
