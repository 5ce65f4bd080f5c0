//! The worker: claims one job at a time per loop, runs it in its own task (a
//! panic is contained, rolling back), applies its writes and commits once.

use crate::{EngineConfig, EngineError, ReceiptWriter, SharedClock, executor, fail_step};
use oduflow_model::provider::Provider;
use oduflow_model::*;
use oduflow_store::{Claim, Finish, JobNext, NewEvent, Store};
use std::sync::Arc;
use std::time::Duration;

/// How long a worker keeps going while every step fails (the database
/// unreachable, or full past the pool's 30 s wait) before it stops with the
/// last error: a service manager restarts it; `--until-settled` ends.
pub const STORE_OUTAGE_MAX_MS: i64 = 5 * 60 * 1000;

/// What one call of [`Worker::run_next`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// Nothing was runnable.
    Idle,
    /// A job ran and was committed with this result.
    Ran { job: JobId, kind: JobKind, next: JobNext },
    /// A job failed (error or panic); its attempt was recorded.
    Failed { job: JobId, error: String },
}

pub struct Worker<P> {
    pub store: Store,
    pub provider: Arc<P>,
    pub cfg: EngineConfig,
    pub clock: SharedClock,
    pub(crate) receipts: ReceiptWriter,
    /// Preflight catalogs, shared by the worker's clones.
    pub(crate) catalogs: Arc<crate::CatalogCache>,
    /// External identities (DNS, VPN, Salt, ...) ensured with the
    /// infrastructure and removed, each with its own confirmation, before a
    /// client counts as deleted.
    pub adapters: Arc<Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>>>,
    /// This process's runs, for its `/metrics`.
    pub stats: Arc<crate::RunStats>,
    /// The bulk view of instances and blocks, shared by this process's runs:
    /// read by the observation module alone.
    pub(crate) view: Arc<crate::fleet_view::FleetView>,
    /// What its loops have said about failing steps, shared by them.
    pub outage: Arc<crate::Outage>,
}

impl<P> Clone for Worker<P> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            provider: self.provider.clone(),
            cfg: self.cfg.clone(),
            clock: self.clock.clone(),
            receipts: self.receipts.clone(),
            catalogs: self.catalogs.clone(),
            adapters: self.adapters.clone(),
            stats: self.stats.clone(),
            view: self.view.clone(),
            outage: self.outage.clone(),
        }
    }
}

impl<P: Provider> Worker<P> {
    pub fn new(store: Store, provider: Arc<P>, cfg: EngineConfig, clock: SharedClock) -> Self {
        let receipts = ReceiptWriter::new(store.clone());
        Self {
            store,
            provider,
            cfg,
            clock,
            receipts,
            catalogs: Arc::default(),
            adapters: Arc::new(vec![]),
            stats: Arc::default(),
            view: Arc::default(),
            outage: Arc::default(),
        }
    }

    pub fn with_adapters(mut self, adapters: Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>>) -> Self {
        self.adapters = Arc::new(adapters);
        self
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// What the bulk view of this process's runs has cost so far.
    pub fn view_figures(&self) -> crate::ViewFigures {
        self.view.stats()
    }

    /// Claims and runs the next runnable job, if any.
    pub async fn run_next(&self) -> Result<RunOutcome, EngineError> {
        let now = self.now_ms();
        let Some(claim) = self.store.job_claim_next(&self.cfg.worker_id, now).await? else {
            return Ok(RunOutcome::Idle);
        };
        let cref = claim.claim_ref();
        let kind = claim.job.kind;
        tracing::debug!(job = %cref.job_id, kind = %kind, client = %cref.client_id, generation = cref.generation, "claimed");
        self.stats.started(now - claim.job.run_after_ms);
        let started = std::time::Instant::now();
        let this = self.clone();
        let result = tokio::spawn(async move { this.run_claimed(claim).await }).await;
        let error = match result {
            Ok(Ok(next)) => {
                let result = match next {
                    JobNext::Done => crate::RunResult::Done,
                    JobNext::Stale => crate::RunResult::Stale,
                    JobNext::RunAgainAt(_) => crate::RunResult::RunAgain,
                    JobNext::Exhausted => crate::RunResult::Exhausted,
                };
                self.stats.ended(result, started.elapsed());
                return Ok(RunOutcome::Ran { job: cref.job_id, kind, next });
            }
            Ok(Err(e)) => error_chain(&e),
            Err(join) => {
                let msg = match join.try_into_panic() {
                    Ok(p) => p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panic".into()),
                    Err(_) => "cancelled".into(),
                };
                error_chain(&EngineError::Panicked(msg))
            }
        };
        self.stats.ended(crate::RunResult::Failed, started.elapsed());
        let client = self.store.client_get_by_id(&cref.client_id).await.ok().flatten().map(|c| c.name);
        let (client, id) = (client.unwrap_or_default(), &cref.client_id);
        tracing::warn!(%client, client_id = %id, job = %cref.job_id, %error, "job run failed; its transaction rolled back");
        let state = self.store.job_record_failure(&cref, &error, self.now_ms(), self.cfg.retry_base_ms).await?;
        if state == JobState::Failed {
            // Its last attempt: the store blocked the client attempts_exhausted.
            self.log_blocked(&cref.client_id, Some(BlockedReason::AttemptsExhausted)).await;
        }
        Ok(RunOutcome::Failed { job: cref.job_id, error })
    }

    async fn run_claimed(&self, claim: Claim) -> Result<JobNext, EngineError> {
        let job = &claim.job;
        let infra = &claim.infra;
        let purpose_matches = match job.kind {
            JobKind::Provision => infra.target == Target::Present,
            JobKind::Deprovision => infra.target == Target::Absent,
            JobKind::Noop => true,
        };
        let finish = match self.decide_run(&claim, purpose_matches).await {
            Ok(f) => f,
            Err(e) => {
                // Give the claim back at once (PostgreSQL: ROLLBACK now, not when the
                // server notices a closed connection), so the failure can be recorded.
                let _ = claim.release().await;
                return Err(e);
            }
        };
        let next = finish.next.clone();
        let blocks = finish.infra.as_ref().is_some_and(|i| {
            i.status == ClientStatus::Blocked
                && (infra.status != ClientStatus::Blocked || infra.blocked_reason != i.blocked_reason)
        });
        let client = infra.client_id.clone();
        let applied = claim.apply(&finish, self.now_ms()).await?;
        fail_step!("main-tx-commit");
        applied.commit().await?;
        if blocks {
            self.log_blocked(&client, None).await;
        }
        Ok(next)
    }

    /// Logs at warn (the default level) that a client is blocked, as its
    /// committed record says: its name, the reason and the evidence. A block
    /// waits for an operator, so it must show without asking for more logs.
    /// `reason`: only if blocked for that one.
    async fn log_blocked(&self, client: &ClientId, reason: Option<BlockedReason>) {
        match self.store.client_get_by_id(client).await {
            Ok(Some(c))
                if c.infra.status == ClientStatus::Blocked
                    && reason.is_none_or(|r| c.infra.blocked_reason == Some(r)) =>
            {
                tracing::warn!(
                    client = %c.name,
                    client_id = %client,
                    reason = c.infra.blocked_reason.map_or("-", |r| r.as_str()),
                    detail = c.infra.blocked_detail.as_deref().unwrap_or("-"),
                    "client blocked: `oduflow client show {}` names the commands that resolve it",
                    c.name
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(client_id = %client, error = %e, "a client was blocked; its record could not be read back")
            }
        }
    }

    async fn decide_run(&self, claim: &Claim, purpose_matches: bool) -> Result<Finish, EngineError> {
        fail_step!("job-claimed");
        let job = &claim.job;
        let infra = &claim.infra;
        Ok(if job.generation < infra.generation || !purpose_matches {
            Finish::stale()
        } else if claim.unfinished_runs > 0 && job.attempts + claim.unfinished_runs >= job.attempts_max {
            // Its earlier runs died before finishing (a worker killed each
            // time, perhaps by this very job): stop here, before it can
            // happen again.
            self.runs_died(claim)
        } else {
            match job.kind {
                JobKind::Noop => self.noop(claim).await,
                JobKind::Provision | JobKind::Deprovision => {
                    let times = executor::JobTimes {
                        due_ms: job.run_after_ms,
                        created_ms: job.created_ms,
                        reconcile: job.payload.get(oduflow_store::RECONCILE_PAYLOAD).is_some_and(|v| v == true),
                    };
                    match executor::converge(self, infra, claim.fence(), times).await {
                        Ok(f) => f,
                        // The record moved on while the run was in flight: it
                        // sent nothing more and ends stale.
                        Err(EngineError::Superseded) => Finish::stale(),
                        Err(e) => return Err(e),
                    }
                }
            }
        })
    }

    /// Ends a job whose runs kept dying before they finished: the job
    /// fails and its client blocks `attempts_exhausted`, naming the count.
    fn runs_died(&self, claim: &Claim) -> Finish {
        let job = &claim.job;
        let detail = format!(
            "job {} started {} run(s) that never finished (the worker died during each) after {} failed attempt(s); \
             see the events of its last runs",
            job.id, claim.unfinished_runs, job.attempts
        );
        let mut infra = claim.infra.clone();
        infra.status = ClientStatus::Blocked;
        infra.blocked_reason = Some(BlockedReason::AttemptsExhausted);
        infra.blocked_detail = Some(detail.clone());
        Finish {
            next: JobNext::Exhausted,
            infra: Some(infra),
            events: vec![NewEvent {
                kind: EventKind::Blocked,
                detail: serde_json::json!({ "reason": BlockedReason::AttemptsExhausted, "detail": detail }),
            }],
            enqueue: vec![],
        }
    }

    /// A job that does nothing but, if asked, sleep and record when it ran:
    /// the queue's own tests and benchmarks use it.
    async fn noop(&self, claim: &Claim) -> Finish {
        let start_ms = self.now_ms();
        // The host's own clock too: processes' samples of the database's
        // clock agree to a few milliseconds, and a test measuring whether
        // two runs of one host overlapped needs one clock to the millisecond.
        let host_start_ms = crate::host_now_ms();
        let record = claim.job.payload.get("record").and_then(|v| v.as_bool()).unwrap_or(false);
        if record {
            // Committed on its own: lets a test see the run has begun.
            let _ = self
                .receipts
                .audit(
                    &claim.job.client_id,
                    EventKind::NoopStarted,
                    serde_json::json!({ "job": claim.job.id.0 }),
                    start_ms,
                )
                .await;
        }
        let sleep_ms = claim.job.payload.get("sleep_ms").and_then(|v| v.as_u64()).unwrap_or(0);
        if sleep_ms > 0 {
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
        }
        let events = if record {
            vec![NewEvent {
                kind: EventKind::NoopRan,
                detail: serde_json::json!({
                    "job": claim.job.id.0,
                    "worker": self.cfg.worker_id,
                    "start_ms": start_ms,
                    "end_ms": self.now_ms(),
                    "host_start_ms": host_start_ms,
                    "host_end_ms": crate::host_now_ms(),
                }),
            }]
        } else {
            vec![]
        };
        Finish { next: JobNext::Done, infra: None, events, enqueue: vec![] }
    }

    /// Runs jobs until `stop` resolves, or, with `until_settled`, until no
    /// job is queued and every client is ready, deleted or blocked. Runs
    /// `cfg.concurrency` loops side by side.
    pub async fn run(&self, until_settled: bool, stop: tokio::sync::watch::Receiver<bool>) -> Result<(), EngineError> {
        let mut loops = tokio::task::JoinSet::new();
        for i in 0..self.cfg.concurrency.max(1) {
            let mut this = self.clone();
            this.cfg.worker_id = format!("{}/{i}", self.cfg.worker_id);
            let stop = stop.clone();
            loops.spawn(async move { this.run_loop(until_settled, stop).await });
        }
        while let Some(r) = loops.join_next().await {
            r.map_err(|e| EngineError::Panicked(e.to_string()))??;
        }
        Ok(())
    }

    async fn run_loop(
        &self,
        until_settled: bool,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), EngineError> {
        // Since when every step has failed (the store unreachable or full):
        // the worker backs off and keeps going, up to STORE_OUTAGE_MAX_MS.
        let mut failing_since: Option<i64> = None;
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let step = async {
                match self.run_next().await? {
                    RunOutcome::Idle => {
                        let now = self.now_ms();
                        crate::operator::verify_if_due(&self.store, self.provider.as_ref(), &self.cfg, now).await;
                        Ok(Some((now, self.store.queue_status(now).await?)))
                    }
                    _ => Ok(None),
                }
            };
            match step.await {
                Ok(Some((now, status))) => {
                    failing_since = None;
                    self.outage.succeeded(now);
                    if until_settled && status.is_settled() {
                        return Ok(());
                    }
                    let wait = status
                        .next_run_after_ms
                        .map(|t| (t - now).max(1) as u64)
                        .unwrap_or(self.cfg.idle_ms)
                        .min(self.cfg.idle_ms);
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                        _ = stop.changed() => {}
                    }
                }
                Ok(None) => {
                    failing_since = None;
                    self.outage.succeeded(self.now_ms());
                }
                Err(e) => {
                    let e: EngineError = e;
                    let since = *failing_since.get_or_insert_with(|| self.now_ms());
                    if self.now_ms() - since >= STORE_OUTAGE_MAX_MS {
                        tracing::error!(error = %error_chain(&e), "every step failed for {} s: stopping", STORE_OUTAGE_MAX_MS / 1000);
                        return Err(e);
                    }
                    // The store is unreachable or refused: back off, keep
                    // going, and say so a bounded number of times.
                    self.outage.failed(self.now_ms(), &error_chain(&e));
                    tokio::time::sleep(Duration::from_millis(self.cfg.idle_ms.max(100))).await;
                }
            }
        }
    }

    /// Runs jobs in this task until nothing is runnable now (for tests).
    pub async fn drain_runnable(&self) -> Result<Vec<RunOutcome>, EngineError> {
        let mut out = vec![];
        loop {
            match self.run_next().await? {
                RunOutcome::Idle => return Ok(out),
                o => out.push(o),
            }
        }
    }
}

/// An error with its whole chain of causes, for logs and job records.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
