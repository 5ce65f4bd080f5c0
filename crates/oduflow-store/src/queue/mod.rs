//! The durable job queue: enqueue with an optional identity key, claim with
//! per-client serialization, finish in one write, record failures with
//! backoff, pause and resume.

mod claim_pg;
pub(crate) mod claim_sqlite;

use crate::Db;
use crate::rows::{self, InfraRow, JOB_COLUMNS, JobRow};
use crate::{Result, SETTING_QUEUE_PAUSED, Store, StoreError, both};
pub use claim_pg::ClaimConns;
use claim_pg::PgClaim;
use oduflow_model::*;
use serde::Serialize;
use sqlx::{PgConnection, Sqlite, SqliteConnection, SqlitePool, Transaction};

/// Failure backoff doubles per attempt up to this cap, so a job that keeps
/// failing is retried at least every five minutes until its attempts run out.
pub const RETRY_BACKOFF_CAP_MS: i64 = 5 * 60 * 1000;

/// A job to enqueue.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub client_id: ClientId,
    pub kind: JobKind,
    pub generation: i64,
    /// Deduplicates *pending* jobs: while a queued job has this key, another
    /// enqueue with it is a no-op. A convenience, not a safety mechanism.
    pub identity_key: Option<String>,
    pub run_after_ms: i64,
    pub attempts_max: i32,
    pub payload: serde_json::Value,
    pub created_ms: i64,
}

impl NewJob {
    pub fn for_client(client_id: &ClientId, kind: JobKind, generation: i64, now_ms: i64, attempts_max: i32) -> Self {
        Self {
            client_id: client_id.clone(),
            kind,
            generation,
            identity_key: Some(format!("{client_id}/{}/{generation}", kind.as_str())),
            run_after_ms: now_ms,
            attempts_max,
            payload: serde_json::json!({}),
            created_ms: now_ms,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    New(JobId),
    /// A queued job with the same identity key exists already.
    Duplicate(JobId),
}

impl Enqueued {
    pub fn id(self) -> JobId {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) => id,
        }
    }
}

/// An audit event written in a job's main transaction.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub kind: EventKind,
    pub detail: serde_json::Value,
}

/// What happens to the job after this run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobNext {
    /// Its purpose is achieved (or settled as blocked).
    Done,
    /// It was for an older generation or target: a no-op.
    Stale,
    /// Progress made; run it again no earlier than this time. Not a failure:
    /// attempts are not counted.
    RunAgainAt(i64),
    /// Its runs died before finishing too often (a worker killed each time):
    /// the job fails, and the run's infra write blocks the client.
    Exhausted,
}

/// Everything a job run writes in its main transaction, applied at once.
#[derive(Clone, Debug)]
pub struct Finish {
    pub next: JobNext,
    /// The infra record as it should be after this run (mutable columns only
    /// are written; the generation is checked, never changed here).
    pub infra: Option<InfraRow>,
    pub events: Vec<NewEvent>,
    pub enqueue: Vec<NewJob>,
}

impl Finish {
    pub fn stale() -> Self {
        Finish { next: JobNext::Stale, infra: None, events: vec![], enqueue: vec![] }
    }
}

/// What a worker needs to record a failure after the claim itself is gone
/// (rolled back by an error or a panic).
#[derive(Clone, Debug)]
pub struct ClaimRef {
    pub job_id: JobId,
    pub client_id: ClientId,
    pub generation: i64,
    pub lease_token: Option<String>,
    /// SQLite: the client's lock file, kept until the failure is recorded so
    /// no other run of the client starts in between.
    pub hold: Option<std::sync::Arc<std::fs::File>>,
}

/// A claimed job. On PostgreSQL it holds the main transaction (and with it the
/// row locks); on SQLite it holds a lease on the client's infra row.
pub struct Claim {
    pub job: JobRow,
    /// The infra record as read at claim time.
    pub infra: InfraRow,
    /// Earlier runs of this job that started and never finished (their
    /// worker died): counted durably when each run starts.
    pub unfinished_runs: i64,
    inner: ClaimInner,
}

enum ClaimInner {
    Pg(PgClaim),
    Sqlite {
        pool: SqlitePool,
        lease_token: String,
        hold: std::sync::Arc<std::fs::File>,
        /// The planted bug `lease_overlap` (test builds only): the old timed
        /// lease, whose fence never refuses.
        timed_lease: bool,
    },
}

/// What a run checks just before each provider call: that its claim still
/// holds the client (see [`Claim::fence`]). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fence {
    client: ClientId,
    generation: i64,
    inner: FenceInner,
}

#[derive(Clone, Debug)]
enum FenceInner {
    /// The claim connection's backend, identified by pid and start time: as
    /// long as it lives, its transaction (and the row locks) stand, since a
    /// run never commits before its end.
    Pg { pool: sqlx::PgPool, pid: i32, started: String },
    /// The lock file is held by this process for as long as the claim lives;
    /// the row must still name this lease and this generation.
    Sqlite {
        pool: SqlitePool,
        lease_token: String,
        /// See `ClaimInner::Sqlite` (test builds only; always `false` else).
        timed_lease: bool,
    },
}

/// Where a run stands, as its fence sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Footing {
    /// The claim holds and the record is at the run's generation.
    Held,
    /// The claim holds but the record moved on (SQLite: a `client delete`
    /// or a reconcile landed while the run was in flight): the run is stale
    /// and must send nothing more.
    Superseded,
}

impl Fence {
    /// Checks the claim. `Err` when it is lost (the claim connection died,
    /// the lease names someone else): the run must stop before its next
    /// provider call.
    pub async fn check(&self) -> Result<Footing> {
        crate::named("check", async move {
            match &self.inner {
                FenceInner::Pg { pool, pid, started } => claim_pg::fence_check(pool, *pid, started, &self.client).await,
                FenceInner::Sqlite { pool, lease_token, .. } => {
                    // The planted bug `lease_overlap`: a lease never checked again.
                    if matches!(self.inner, FenceInner::Sqlite { timed_lease: true, .. }) {
                        return Ok(Footing::Held);
                    }
                    claim_sqlite::fence_check(pool, lease_token, &self.client, self.generation).await
                }
            }
        })
        .await
    }
}

/// `EXECUTE oduflow_finish(...)` for a job's next state: integers and fixed
/// words only, so inlining them is safe.
fn finish_sql(job: JobId, next: &JobNext, now_ms: i64) -> String {
    let (state, run_after, finished) = job_next_columns(next, now_ms);
    let opt = |v: Option<i64>| v.map_or("NULL".to_owned(), |v| v.to_string());
    format!(
        "EXECUTE oduflow_finish({}, '{state}', {}, {}); DELETE FROM job_starts WHERE job_id = {}",
        job.0,
        opt(run_after),
        opt(finished),
        job.0
    )
}

fn job_next_columns(next: &JobNext, now_ms: i64) -> (&'static str, Option<i64>, Option<i64>) {
    match next {
        JobNext::Done => ("done", None, Some(now_ms)),
        JobNext::Stale => ("stale", None, Some(now_ms)),
        JobNext::RunAgainAt(t) => ("queued", Some(*t), None),
        JobNext::Exhausted => ("failed", None, Some(now_ms)),
    }
}

/// A claim whose writes are applied but not yet committed.
pub struct Applied {
    inner: AppliedTx,
}

enum AppliedTx {
    /// With the job's own state still to write, when nothing written after
    /// it depends on it (it then travels with `COMMIT`).
    Pg(PgClaim, Option<String>),
    /// The lock file is released only after the commit.
    Sqlite(Transaction<'static, Sqlite>, std::sync::Arc<std::fs::File>),
}

impl Applied {
    /// The one commit of the job's main transaction.
    pub async fn commit(self) -> Result<()> {
        crate::named("commit", async move {
            match self.inner {
                AppliedTx::Pg(mut c, finish) => {
                    let sql = match finish {
                        Some(finish) => format!("{finish}; COMMIT"),
                        None => "COMMIT".to_owned(),
                    };
                    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut **c.conn).await?;
                    c.conns.put(c.conn);
                }
                AppliedTx::Sqlite(tx, hold) => {
                    tx.commit().await?;
                    drop(hold);
                }
            }
            Ok(())
        })
        .await
    }
}

impl Claim {
    pub fn claim_ref(&self) -> ClaimRef {
        ClaimRef {
            job_id: self.job.id,
            client_id: self.job.client_id.clone(),
            generation: self.job.generation,
            lease_token: match &self.inner {
                ClaimInner::Pg(_) => None,
                ClaimInner::Sqlite { lease_token, .. } => Some(lease_token.clone()),
            },
            hold: match &self.inner {
                ClaimInner::Pg(_) => None,
                ClaimInner::Sqlite { hold, .. } => Some(hold.clone()),
            },
        }
    }

    /// The check a run makes before each provider call.
    pub fn fence(&self) -> Fence {
        let inner = match &self.inner {
            ClaimInner::Pg(c) => {
                FenceInner::Pg { pool: c.pool.clone(), pid: c.conn.pid, started: c.conn.started.clone() }
            }
            ClaimInner::Sqlite { pool, lease_token, timed_lease, .. } => {
                FenceInner::Sqlite { pool: pool.clone(), lease_token: lease_token.clone(), timed_lease: *timed_lease }
            }
        };
        Fence { client: self.job.client_id.clone(), generation: self.infra.generation, inner }
    }

    /// Applies the run's writes inside the main transaction without committing.
    /// If the infra record's generation moved on while the job ran (possible on
    /// SQLite only, where no row lock is held), the job becomes stale and its
    /// infra write is dropped; its events are still kept.
    pub async fn apply(self, finish: &Finish, now_ms: i64) -> Result<Applied> {
        crate::named("apply", async move {
            let job = self.job;
            // Deleted when claimed: a write that applies finds it so (its
            // generation has not moved), and may bring it back.
            let deleted = self.infra.status == ClientStatus::Deleted;
            match self.inner {
                ClaimInner::Pg(mut c) => {
                    // The infra row has been locked since the claim: its generation
                    // is the one read then.
                    let held = Held::RowLock { generation: self.infra.generation };
                    // A job enqueued in this run may share this job's identity
                    // key, so this job must leave `queued` before it is inserted.
                    let defer = finish.enqueue.is_empty();
                    let next = apply_in(&mut **c.conn, &job, finish, held, !defer, deleted, now_ms).await?;
                    let finish_sql = defer.then(|| finish_sql(job.id, &next, now_ms));
                    Ok(Applied { inner: AppliedTx::Pg(c, finish_sql) })
                }
                ClaimInner::Sqlite { pool, lease_token, hold, .. } => {
                    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                    apply_in(&mut *tx, &job, finish, Held::Lease(&lease_token), true, deleted, now_ms).await?;
                    sqlx::query("DELETE FROM job_starts WHERE job_id = $1").bind(job.id.0).execute(&mut *tx).await?;
                    Ok(Applied { inner: AppliedTx::Sqlite(tx, hold) })
                }
            }
        })
        .await
    }

    /// Gives the job back untouched (rollback on PostgreSQL, lease released on
    /// SQLite).
    pub async fn release(self) -> Result<()> {
        crate::named("release", async move {
            match self.inner {
                ClaimInner::Pg(mut c) => {
                    sqlx::raw_sql("ROLLBACK").execute(&mut **c.conn).await?;
                    c.conns.put(c.conn);
                }
                ClaimInner::Sqlite { pool, lease_token, hold: _hold, .. } => {
                    sqlx::query("DELETE FROM job_starts WHERE job_id = $1").bind(self.job.id.0).execute(&pool).await?;
                    sqlx::query(
                        "UPDATE infra SET lease_owner = NULL, lease_until_ms = NULL \
                                 WHERE client_id = $1 AND lease_owner = $2",
                    )
                    .bind(self.job.client_id.as_str())
                    .bind(&lease_token)
                    .execute(&pool)
                    .await?;
                }
            }
            Ok(())
        })
        .await
    }
}

/// Queries that run on either backend's connection, inside a transaction the
/// caller owns.
pub(crate) trait Conn {
    async fn job_insert(&mut self, job: &NewJob) -> Result<Enqueued>;
    /// Records an event; `by` names who asked for the change it records
    /// (none for what a run records of itself).
    async fn event_insert(
        &mut self,
        client: Option<&ClientId>,
        kind: EventKind,
        detail: &serde_json::Value,
        at_ms: i64,
        by: Option<&str>,
    ) -> Result<()>;
    async fn infra_lock_state(&mut self, client: &ClientId) -> Result<(i64, Option<String>)>;
    async fn infra_write(&mut self, infra: &InfraRow, now_ms: i64) -> Result<()>;
    /// A deleted client about to leave `deleted` (a run or a reconcile
    /// brings it back) gives up its DNS name when another live client was
    /// given it since: it is being deleted and needs no name (its records
    /// are owned by id), and holding it again would break the name's unique
    /// index. An event names the holder.
    async fn dns_name_release(&mut self, client: &ClientId, now_ms: i64) -> Result<()>;
    /// Blocks the client `attempts_exhausted` at `generation` (a record
    /// moved on since is left alone).
    async fn infra_block_exhausted(
        &mut self,
        client: &ClientId,
        generation: i64,
        detail: &str,
        now_ms: i64,
    ) -> Result<()>;
    async fn job_set_next(&mut self, job: JobId, next: &JobNext, now_ms: i64) -> Result<()>;
    /// Counts a failed run of `c`'s job, which had made `attempts` of its
    /// `attempts_max`: queued again after a backoff, or, the last, failed
    /// with its client blocked `attempts_exhausted`. Whether it was the last.
    async fn job_count_failure(
        &mut self,
        c: &ClaimRef,
        attempts: (i64, i64),
        error: &str,
        now_ms: i64,
        retry_base_ms: i64,
    ) -> Result<bool>;
    /// Sets client `name`, `found` (id, target, generation, status) under
    /// it, back to `present` with the spec of `cols`: a target flip with the
    /// same spec, or, once it is deleted, any spec (nothing of it is left to
    /// verify against the old one). Anything else is a name clash.
    async fn client_bring_back(
        &mut self,
        name: &ClientName,
        found: (String, String, i64, String),
        cols: &crate::SpecColumns<'_>,
        by: &str,
        now_ms: i64,
        attempts_max: i32,
    ) -> Result<()>;
    async fn lease_release(&mut self, client: &ClientId, token: &str) -> Result<()>;
    /// Sets setting `key` to `value`.
    async fn setting_put(&mut self, key: &str, value: &str) -> Result<()>;
}

macro_rules! impl_conn {
    ($conn:ty) => {
        impl Conn for $conn {
            async fn job_insert(&mut self, job: &NewJob) -> Result<Enqueued> {
                let id: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO jobs (client_id, kind, generation, identity_key, state, attempts_max, \
                     run_after_ms, payload, created_ms) VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7, $8) \
                     ON CONFLICT (identity_key) WHERE state = 'queued' AND identity_key IS NOT NULL \
                     DO NOTHING RETURNING id",
                )
                .bind(job.client_id.as_str())
                .bind(job.kind.as_str())
                .bind(job.generation)
                .bind(job.identity_key.as_deref())
                .bind(i64::from(job.attempts_max))
                .bind(job.run_after_ms)
                .bind(job.payload.to_string())
                .bind(job.created_ms)
                .fetch_optional(&mut *self)
                .await?;
                if let Some(id) = id {
                    return Ok(Enqueued::New(JobId(id)));
                }
                let id: i64 = sqlx::query_scalar("SELECT id FROM jobs WHERE identity_key = $1 AND state = 'queued'")
                    .bind(job.identity_key.as_deref())
                    .fetch_one(&mut *self)
                    .await?;
                Ok(Enqueued::Duplicate(JobId(id)))
            }

            async fn event_insert(
                &mut self,
                client: Option<&ClientId>,
                kind: EventKind,
                detail: &serde_json::Value,
                at_ms: i64,
                by: Option<&str>,
            ) -> Result<()> {
                sqlx::query("INSERT INTO events (client_ref, kind, detail, at_ms, actor) VALUES ($1, $2, $3, $4, $5)")
                    .bind(client.map(|c| c.as_str()))
                    .bind(kind.as_str())
                    .bind(detail.to_string())
                    .bind(at_ms)
                    .bind(by)
                    .execute(&mut *self)
                    .await?;
                Ok(())
            }

            async fn dns_name_release(&mut self, client: &ClientId, now_ms: i64) -> Result<()> {
                let held: Option<(String, String)> = sqlx::query_as(
                    "SELECT i.dns_key, c.name FROM infra i \
                     JOIN infra o ON o.dns_key = i.dns_key AND o.status <> 'deleted' AND o.client_id <> i.client_id \
                     JOIN clients c ON c.id = o.client_id WHERE i.client_id = $1 AND i.status = 'deleted'",
                )
                .bind(client.as_str())
                .fetch_optional(&mut *self)
                .await?;
                let Some((name, holder)) = held else { return Ok(()) };
                // Still deleted and holding that key (PostgreSQL: a
                // re-create may have committed since the read).
                let released = sqlx::query(
                    "UPDATE infra SET dns_key = NULL WHERE client_id = $1 AND status = 'deleted' AND dns_key = $2",
                )
                .bind(client.as_str())
                .bind(&name)
                .execute(&mut *self)
                .await?;
                if released.rows_affected() == 0 {
                    return Ok(());
                }
                let detail = serde_json::json!({ "name": name, "held_by": holder });
                self.event_insert(Some(client), EventKind::DnsNameReleased, &detail, now_ms, None).await
            }

            async fn infra_block_exhausted(
                &mut self,
                client: &ClientId,
                generation: i64,
                detail: &str,
                now_ms: i64,
            ) -> Result<()> {
                let at: Option<i64> = sqlx::query_scalar("SELECT generation FROM infra WHERE client_id = $1")
                    .bind(client.as_str())
                    .fetch_optional(&mut *self)
                    .await?;
                if at != Some(generation) {
                    return Ok(());
                }
                self.dns_name_release(client, now_ms).await?;
                sqlx::query(
                    "UPDATE infra SET status = 'blocked', blocked_reason = 'attempts_exhausted', \
                     blocked_detail = $3, updated_ms = $4 WHERE client_id = $1 AND generation = $2",
                )
                .bind(client.as_str())
                .bind(generation)
                .bind(detail)
                .bind(now_ms)
                .execute(&mut *self)
                .await?;
                // As a run's block writes it: the feed, and every webhook, has it.
                let blocked = serde_json::json!({ "reason": BlockedReason::AttemptsExhausted, "detail": detail });
                self.event_insert(Some(client), EventKind::Blocked, &blocked, now_ms, None).await
            }

            async fn infra_lock_state(&mut self, client: &ClientId) -> Result<(i64, Option<String>)> {
                Ok(sqlx::query_as("SELECT generation, lease_owner FROM infra WHERE client_id = $1")
                    .bind(client.as_str())
                    .fetch_one(&mut *self)
                    .await?)
            }

            async fn infra_write(&mut self, i: &InfraRow, now_ms: i64) -> Result<()> {
                sqlx::query(
                    "UPDATE infra SET status = $2, blocked_reason = $3, blocked_detail = $4, \
                     key_fingerprint = $5, vm_id = $6, volume_id = $7, vm_dispatch_generation = $8, \
                     volume_dispatch_generation = $9, attach_dispatch_generation = $10, \
                     preflight_read_failures = $11, updated_ms = $12, outputs = $14, progress = $22, \
                     upgrades_read_failures_generation = $15, upgrades_read_failures = $16, \
                     updated_generation = $17, backup_schedule = $18, backup_schedule_sets = $19, \
                     volume_size_id = $20, volume_size_gb = $21 WHERE client_id = $1 AND generation = $13",
                )
                .bind(i.client_id.as_str())
                .bind(i.status.as_str())
                .bind(i.blocked_reason.map(|r| r.as_str()))
                .bind(i.blocked_detail.as_deref())
                .bind(i.key_fingerprint.as_ref().map(|k| k.as_str()))
                .bind(i.vm_id.as_ref().map(|k| k.as_str()))
                .bind(i.volume_id.as_ref().map(|k| k.as_str()))
                .bind(i.vm_dispatch_generation)
                .bind(i.volume_dispatch_generation)
                .bind(i.attach_dispatch_generation)
                .bind(i.progress.preflight_read_failures)
                .bind(now_ms)
                .bind(i.generation)
                .bind(serde_json::to_string(&i.outputs).map_err(|e| StoreError::Corrupt(e.to_string()))?)
                .bind(i.progress.upgrades_read_failures.as_ref().map(|f| f.generation))
                .bind(i.progress.upgrades_read_failures.as_ref().map_or(0, |f| f.count))
                .bind(i.progress.updated_generation)
                .bind(i.progress.backup_schedule.as_deref())
                .bind(i.progress.backup_schedule_sets)
                .bind(i.progress.volume_size.as_ref().map(|v| v.id.as_str()))
                .bind(i.progress.volume_size.as_ref().map(|v| v.gb))
                // For an older binary on this schema (migration 14).
                .bind(serde_json::to_string(&i.progress).expect("progress always serializes"))
                .execute(&mut *self)
                .await?;
                Ok(())
            }

            async fn job_set_next(&mut self, job: JobId, next: &JobNext, now_ms: i64) -> Result<()> {
                let (state, run_after, finished) = job_next_columns(next, now_ms);
                sqlx::query(
                    "UPDATE jobs SET state = $2, run_after_ms = COALESCE($3, run_after_ms), finished_ms = $4 \
                     WHERE id = $1",
                )
                .bind(job.0)
                .bind(state)
                .bind(run_after)
                .bind(finished)
                .execute(&mut *self)
                .await?;
                Ok(())
            }

            async fn job_count_failure(
                &mut self,
                c: &ClaimRef,
                (attempts, attempts_max): (i64, i64),
                error: &str,
                now_ms: i64,
                retry_base_ms: i64,
            ) -> Result<bool> {
                let attempts = attempts + 1;
                let exhausted = attempts >= attempts_max;
                let backoff = retry_base_ms
                    .saturating_mul(1_i64 << (attempts - 1).clamp(0, 20))
                    .min(RETRY_BACKOFF_CAP_MS);
                sqlx::query(
                    "UPDATE jobs SET attempts = $2, last_error = $3, run_after_ms = $4, state = $5, finished_ms = $6 \
                     WHERE id = $1",
                )
                .bind(c.job_id.0)
                .bind(attempts)
                .bind(error)
                .bind(now_ms + backoff)
                .bind(if exhausted { "failed" } else { "queued" })
                .bind(if exhausted { Some(now_ms) } else { None })
                .execute(&mut *self)
                .await?;
                if exhausted {
                    let detail = format!("job {} failed {attempts} times; last error: {error}", c.job_id);
                    self.infra_block_exhausted(&c.client_id, c.generation, &detail, now_ms).await?;
                }
                event_insert(&mut *self, Some(&c.client_id), EventKind::JobFailed, &serde_json::json!({
                    "job": c.job_id.0, "attempts": attempts, "exhausted": exhausted, "error": error,
                }), now_ms).await?;
                Ok(exhausted)
            }

            async fn client_bring_back(
                &mut self,
                name: &ClientName,
                (id, target, generation, status): (String, String, i64, String),
                cols: &crate::SpecColumns<'_>,
                by: &str,
                now_ms: i64,
                attempts_max: i32,
            ) -> Result<()> {
                let crate::SpecColumns { spec, os_id, image, server, dns } = cols;
                let dns = dns.as_str();
                let same: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM infra WHERE client_id = $1 AND region = $2 AND plan = $3 AND os_id = $4 \
                     AND volume_gb = $5 AND volume_type = $6 AND coalesce(image, '') = $7 AND server = $8 \
                     AND coalesce(dns_name, '') = $9")
                    .bind(&id).bind(&spec.region).bind(&spec.plan).bind(os_id)
                    .bind(spec.volume_gb).bind(spec.volume_type.as_str()).bind(image).bind(server)
                    .bind(spec.dns_name.as_deref().unwrap_or(""))
                    .fetch_one(&mut *self).await?;
                let deleted = status == ClientStatus::Deleted.as_str();
                if target != Target::Absent.as_str() {
                    return Err(StoreError::ClientExists(name.to_string()));
                }
                if same == 0 && !deleted {
                    return Err(StoreError::ClientStillDeleting(name.to_string()));
                }
                let generation = generation + 1;
                crate::dns_name_free!(self, dns, &id);
                sqlx::query(
                    "UPDATE infra SET target = 'present', generation = $2, status = 'pending', \
                     blocked_reason = NULL, blocked_detail = NULL, updated_ms = $3, region = $4, plan = $5, \
                     os_id = $6, volume_gb = $7, volume_type = $8, image = $9, server = $10, \
                     spec_generation = 0, spec_updated_ms = NULL, dns_name = $11, dns_key = $12 \
                     WHERE client_id = $1")
                    .bind(&id).bind(generation).bind(now_ms).bind(&spec.region).bind(&spec.plan).bind(os_id)
                    .bind(spec.volume_gb).bind(spec.volume_type.as_str()).bind(image).bind(server)
                    .bind(&spec.dns_name).bind(dns)
                    .execute(&mut *self).await.map_err(|e| crate::dns_name_race(e, dns))?;
                let id = ClientId(id);
                let job = NewJob::for_client(&id, JobKind::Provision, generation, now_ms, attempts_max);
                job_insert(&mut *self, &job).await?;
                event_by(&mut *self, by, Some(&id), EventKind::ClientRecreateRequested,
                    &serde_json::json!({ "generation": generation }), now_ms).await?;
                Ok(())
            }

            async fn setting_put(&mut self, key: &str, value: &str) -> Result<()> {
                sqlx::query(
                    "INSERT INTO settings (key, value) VALUES ($1, $2) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                )
                .bind(key)
                .bind(value)
                .execute(&mut *self)
                .await?;
                Ok(())
            }

            async fn lease_release(&mut self, client: &ClientId, token: &str) -> Result<()> {
                sqlx::query(
                    "UPDATE infra SET lease_owner = NULL, lease_until_ms = NULL \
                             WHERE client_id = $1 AND lease_owner = $2",
                )
                .bind(client.as_str())
                .bind(token)
                .execute(&mut *self)
                .await?;
                Ok(())
            }
        }
    };
}
impl_conn!(PgConnection);
impl_conn!(SqliteConnection);

pub(crate) async fn job_insert(c: &mut impl Conn, job: &NewJob) -> Result<Enqueued> {
    c.job_insert(job).await
}

pub(crate) async fn event_insert(
    c: &mut impl Conn,
    client: Option<&ClientId>,
    kind: EventKind,
    detail: &serde_json::Value,
    at_ms: i64,
) -> Result<()> {
    c.event_insert(client, kind, detail, at_ms, None).await
}

/// [`event_insert`] for a change someone asked for: `by` names them.
pub(crate) async fn event_by(
    c: &mut impl Conn,
    by: &str,
    client: Option<&ClientId>,
    kind: EventKind,
    detail: &serde_json::Value,
    at_ms: i64,
) -> Result<()> {
    c.event_insert(client, kind, detail, at_ms, Some(by)).await
}

/// How a claim holds its client.
enum Held<'a> {
    /// PostgreSQL: the infra row is locked in this transaction.
    RowLock { generation: i64 },
    /// SQLite: a lease with this token, to be checked and released.
    Lease(&'a str),
}

/// Applies a run's writes; returns the job's next state, written here too
/// with `set_next`.
async fn apply_in(
    c: &mut impl Conn,
    job: &JobRow,
    finish: &Finish,
    held: Held<'_>,
    set_next: bool,
    claimed_deleted: bool,
    now_ms: i64,
) -> Result<JobNext> {
    let (generation, lease_token) = match held {
        Held::RowLock { generation } => (generation, None),
        Held::Lease(token) => {
            let (generation, lease_owner) = c.infra_lock_state(&job.client_id).await?;
            if lease_owner.as_deref() != Some(token) {
                return Err(StoreError::LeaseLost(job.client_id.to_string()));
            }
            (generation, Some(token))
        }
    };
    let mut next = finish.next.clone();
    match &finish.infra {
        Some(infra) if infra.generation == generation => {
            if claimed_deleted && infra.status != ClientStatus::Deleted {
                c.dns_name_release(&infra.client_id, now_ms).await?;
            }
            c.infra_write(infra, now_ms).await?;
        }
        Some(_) => next = JobNext::Stale,
        None => {}
    }
    if generation > job.generation {
        next = JobNext::Stale;
    }
    if let Some(token) = lease_token {
        c.lease_release(&job.client_id, token).await?;
    }
    if set_next {
        c.job_set_next(job.id, &next, now_ms).await?;
    }
    for e in &finish.events {
        c.event_insert(Some(&job.client_id), e.kind, &e.detail, now_ms, None).await?;
    }
    for j in &finish.enqueue {
        c.job_insert(j).await?;
    }
    Ok(next)
}

/// Counts of the queue, for `oduflow queue status`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct QueueStatus {
    pub paused: bool,
    pub queued: i64,
    pub runnable: i64,
    pub done: i64,
    pub stale: i64,
    pub failed: i64,
    /// When the next scheduled (not yet runnable) job becomes runnable.
    pub next_run_after_ms: Option<i64>,
    /// Clients not yet ready, deleted or blocked.
    pub unsettled_clients: i64,
}

impl QueueStatus {
    /// Nothing left to do: no queued job and every client ready, deleted or
    /// blocked.
    pub fn is_settled(&self) -> bool {
        self.queued == 0 && self.unsettled_clients == 0
    }
}

impl Store {
    pub async fn job_enqueue(&self, job: &NewJob) -> Result<Enqueued> {
        crate::named("job_enqueue", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let r = job_insert(&mut *tx, job).await?;
                tx.commit().await?;
                Ok(r)
            })
        })
        .await
    }

    /// Claims the next runnable job whose client is not being worked on, or
    /// `None`. Returns nothing while the queue is paused.
    ///
    /// Each claimed run is counted in `job_starts` on a commit of its own
    /// before it does anything, and uncounted when it finishes: a run killed
    /// outright stays counted (see [`Claim::unfinished_runs`]).
    pub async fn job_claim_next(&self, worker: &str, now_ms: i64) -> Result<Option<Claim>> {
        crate::named("job_claim_next", async move {
            match &self.db {
                Db::Pg(p, conns) => claim_pg::claim_next(p, conns, now_ms).await,
                Db::Sqlite(p) => {
                    let timed_lease = self.planted.is(crate::Bug::LeaseOverlap);
                    claim_sqlite::claim_next(p, worker, now_ms, timed_lease).await
                }
            }
        })
        .await
    }

    /// Records a failed run after its claim was rolled back: counts the
    /// attempt and schedules a retry with exponential backoff, or, past the
    /// job's attempts, fails it and blocks the client so it does not wait
    /// forever (invariant 4).
    pub async fn job_record_failure(
        &self,
        c: &ClaimRef,
        error: &str,
        now_ms: i64,
        retry_base_ms: i64,
    ) -> Result<JobState> {
        crate::named("job_record_failure", async move {
            let error: String = error.chars().take(2000).collect();
            // PostgreSQL: another worker may have claimed the job since this run
            // rolled back; its claim holds the row, and whatever it does
            // supersedes this record (SKIP LOCKED: nothing is waited on, nothing
            // revived). SQLite: this worker still holds the client's lock file
            // (`ClaimRef::hold`), so no other run of it is in flight.
            // The failed run's own rollback may still be on its way (a dropped
            // connection): wait for it a little, never for another run.
            let (prelude, select) = match &self.db {
                Db::Pg(..) => (
                    Some("SET LOCAL lock_timeout = '3s'"),
                    "SELECT attempts, attempts_max, state FROM jobs WHERE id = $1 FOR UPDATE",
                ),
                Db::Sqlite(_) => (None, "SELECT attempts, attempts_max, state FROM jobs WHERE id = $1"),
            };
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                if let Some(sql) = prelude {
                    sqlx::query(sql).execute(&mut *tx).await?;
                }
                let row: std::result::Result<Option<(i64, i64, String)>, sqlx::Error> =
                    sqlx::query_as(select)
                        .bind(c.job_id.0)
                        .fetch_optional(&mut *tx)
                        .await;
                let row = match row {
                    // lock_not_available: another run holds the job now.
                    Err(sqlx::Error::Database(d)) if d.code().as_deref() == Some("55P03") => None,
                    r => r?,
                };
                let Some((attempts, attempts_max, state)) = row else {
                    tx.rollback().await?;
                    return Ok(JobState::Queued);
                };
                sqlx::query("DELETE FROM job_starts WHERE job_id = $1").bind(c.job_id.0).execute(&mut *tx).await?;
                if state != "queued" {
                    // Someone else ran it to completion in the meantime.
                    tx.commit().await?;
                    return Ok(JobState::parse(&state).unwrap_or(JobState::Done));
                }
                let exhausted =
                    (*tx).job_count_failure(c, (attempts, attempts_max), &error, now_ms, retry_base_ms).await?;
                if let Some(token) = &c.lease_token {
                    (*tx).lease_release(&c.client_id, token).await?;
                }
                tx.commit().await?;
                Ok(if exhausted { JobState::Failed } else { JobState::Queued })
            })
        })
        .await
    }

    pub async fn queue_status(&self, now_ms: i64) -> Result<QueueStatus> {
        crate::named("queue_status", async move {
            both!(self, p => {
                let counts: Vec<(String, i64)> = sqlx::query_as("SELECT state, count(*) FROM jobs GROUP BY state")
                    .fetch_all(p).await?;
                let mut s = QueueStatus::default();
                for (state, n) in counts {
                    match state.as_str() {
                        "queued" => s.queued = n,
                        "done" => s.done = n,
                        "stale" => s.stale = n,
                        "failed" => s.failed = n,
                        _ => {}
                    }
                }
                s.runnable = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'queued' AND run_after_ms <= $1")
                    .bind(now_ms).fetch_one(p).await?;
                s.next_run_after_ms = sqlx::query_scalar("SELECT min(run_after_ms) FROM jobs WHERE state = 'queued' AND run_after_ms > $1")
                    .bind(now_ms).fetch_one(p).await?;
                s.unsettled_clients = sqlx::query_scalar(
                    "SELECT count(*) FROM infra WHERE status NOT IN ('ready', 'deleted', 'blocked')")
                    .fetch_one(p).await?;
                s.paused = self.setting_get(SETTING_QUEUE_PAUSED).await?.as_deref() == Some("true");
                Ok(s)
            })
        })
        .await
    }

    /// Pauses or resumes the queue for everyone, recording who asked in the
    /// same transaction.
    pub async fn queue_set_paused(&self, paused: bool, by: &str, now_ms: i64) -> Result<()> {
        crate::named("queue_set_paused", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                (*tx).setting_put(SETTING_QUEUE_PAUSED, if paused { "true" } else { "false" }).await?;
                event_by(&mut *tx, by, None, if paused { EventKind::QueuePaused } else { EventKind::QueueResumed },
                    &serde_json::json!({}), now_ms).await?;
                tx.commit().await?;
                Ok(())
            })
        })
        .await
    }

    pub async fn jobs_for_client(&self, client: &ClientId) -> Result<Vec<JobRow>> {
        crate::named("jobs_for_client", async move {
            let sql =
                sqlx::AssertSqlSafe(format!("SELECT {JOB_COLUMNS} FROM jobs j WHERE j.client_id = $1 ORDER BY j.id"));
            both!(self, p => {
                let rows = sqlx::query(sql).bind(client.as_str()).fetch_all(p).await?;
                rows.iter().map(rows::job_from_row).collect()
            })
        })
        .await
    }

    pub async fn job_get(&self, id: JobId) -> Result<Option<JobRow>> {
        crate::named("job_get", async move {
            let sql = sqlx::AssertSqlSafe(format!("SELECT {JOB_COLUMNS} FROM jobs j WHERE j.id = $1"));
            both!(self, p => {
                let row = sqlx::query(sql).bind(id.0).fetch_optional(p).await?;
                row.as_ref().map(rows::job_from_row).transpose()
            })
        })
        .await
    }
}

fn job_and_infra(row: &impl rows::RowExt) -> Result<(JobRow, InfraRow)> {
    Ok((rows::job_from_row(row)?, rows::infra_from_row(&rows::Prefixed(row, "i_"), "client_id")?))
}

const COUNT_START_SQL: &str = "INSERT INTO job_starts (job_id, unfinished) VALUES ($1, 1) \
     ON CONFLICT (job_id) DO UPDATE SET unfinished = job_starts.unfinished + 1 RETURNING unfinished";
