//! The executor: converges one client's infrastructure towards its target in
//! one job run. It reads facts (`observe`), asks the pure
//! [`oduflow_model::decide::decide`] for the next action, and performs it in
//! that action's module, with at most one side effect per run. Receipts and
//! audit events commit on their own; everything else is returned as one
//! [`Finish`] for the job's main transaction.

use crate::current::{self, spec_digest};
use crate::{Bug, EngineError, Worker, fail_step};
use oduflow_model::decide::{self, Action, Change, DeleteProgress, Facts, Inputs, ReceiptFacts, Resource, Seen};
use oduflow_model::provider::{BlockRequest, DeleteOutcome, InstanceRequest, Outcome, Provider, ResourceId, SendGuard};
use oduflow_model::*;
use oduflow_store::{Fence, Finish, Footing, IdSource, InfraRow, JobNext, NewEvent, NewReceipt, ReceiptRow};
use std::sync::{Arc, Mutex};

mod change;
mod delete;
mod dispatch;
mod guard;
mod identities;
mod observe;
mod orphans;
mod settled;

use dispatch::create_digest;
use guard::RunGuard;
pub(crate) use guard::{MarkOf, SentMark};

/// Decisions per run. Each kind needs at most a read, an adoption and a
/// bookkeeping step before the run ends with a side effect or a wait, so
/// twelve is ample; reaching it just re-queues the job.
const STEPS_MAX: usize = 12;

struct Run<'a, P> {
    w: &'a Worker<P>,
    infra: InfraRow,
    events: Vec<NewEvent>,
    guard: Arc<RunGuard>,
}

/// When the job a run serves was due, and when it was made (the intent it
/// serves: a client's creation, a flip, an update, an operator's
/// reconcile).
#[derive(Clone, Copy, Debug)]
pub(crate) struct JobTimes {
    pub due_ms: i64,
    pub created_ms: i64,
    /// The job is an operator's reconcile (`oduflow_store::RECONCILE_PAYLOAD`):
    /// it reads by id, never from the bulk view (docs/protocol.md §3.6).
    pub reconcile: bool,
}

pub(crate) async fn converge<P: Provider>(
    w: &Worker<P>,
    infra0: &InfraRow,
    fence: Fence,
    job: JobTimes,
) -> Result<Finish, EngineError> {
    if infra0.observe_only {
        // Imported, not promoted: nothing is sent for it, ever (the operator layer refuses the jobs).
        return Ok(Finish::stale());
    }
    let guard = Arc::new(RunGuard { fence, stop: Mutex::new(None) });
    // The run's requests carry its guard: it runs on a worker whose
    // provider asks the guard before each request it sends.
    let sending = provider::Sending::guarded(guard.clone());
    let w = Worker { provider: Arc::new(w.provider.sending_as(sending)), ..w.clone() };
    converge_guarded(&w, infra0, guard, job).await
}

async fn converge_guarded<P: Provider>(
    w: &Worker<P>,
    infra0: &InfraRow,
    guard: Arc<RunGuard>,
    job: JobTimes,
) -> Result<Finish, EngineError> {
    let mut c = Converge::start(w, infra0, guard, job).await?;
    for _ in 0..STEPS_MAX {
        let view = c.view().await?;
        if c.orphans_needed(&view) {
            c.read_orphans(&view).await?;
        }
        let action = decide::decide(&c.inputs(&view));
        tracing::debug!(client = %c.run.infra.client_id, action = %serde_json::to_string(&action).unwrap_or_default(), "decided");
        if c.confirm_by_get(&action) {
            continue;
        }
        c = match c.act(action, &view).await? {
            Step::Next(c) => c,
            Step::Finish(f) => return Ok(f),
        };
    }
    Ok(c.run.wait(c.now))
}

/// The convergence loop between two steps: the run, and what its reads have
/// shown so far.
struct Converge<'a, P> {
    run: Run<'a, P>,
    /// When the run started: waits are scheduled from it.
    now: i64,
    /// When the run was due (its job's time, at most `now`): what it reads
    /// from the bulk view is at most a poll interval older than this.
    due: i64,
    /// When its job was made: what it reads from the bulk view started
    /// after this, so that a run answers the intent it serves (a reconcile
    /// asked after a volume was moved) from a listing that could see it.
    job_created: i64,
    target: Target,
    current_key: KeyFingerprint,
    /// The latest read of the VM and of the volume.
    reads: observe::LastReads,
    /// When the run started, on this process's monotonic clock.
    started: std::time::Instant,
    /// The client is being provisioned for the first time: target present,
    /// never updated, pending or provisioning when the run began (not a
    /// reconcile of a ready or blocked client). Only then may reads by id
    /// come from the bulk view.
    first_provisioning: bool,
    /// Provider calls with side effects made by this run (at most one).
    side_effects: u32,
    /// The client's labelled orphans of each kind, read by id; `None`
    /// until a step needs them (executor/orphans.rs).
    orphans: Option<orphans::ByKind>,
}

/// What one step leaves the loop with (a dozen per run at most: their size
/// does not matter).
#[allow(clippy::large_enum_variant)]
enum Step<'a, P> {
    /// Decide again, from the receipts as they now are.
    Next(Converge<'a, P>),
    /// The run is over.
    Finish(Finish),
}

/// What a step decides from: the receipts as they now are, and the current
/// dispatch of each kind.
struct View {
    receipts: Vec<ReceiptRow>,
    cur: current::Current,
    /// The client's change receipts (read only once it was ever updated).
    changes: Vec<oduflow_store::ChangeRow>,
}

impl View {
    /// The receipt an action on `kind` follows from: the decision never names
    /// an action without one.
    fn receipt(&self, kind: ResourceKind, action: &str) -> Result<ReceiptRow, EngineError> {
        let r = match kind {
            ResourceKind::Vm => &self.cur.vm,
            ResourceKind::Volume => &self.cur.volume,
            ResourceKind::Attach => &self.cur.attach,
        };
        r.clone().ok_or_else(|| EngineError::Invariant(format!("{action} without receipt")))
    }
}

impl<'a, P: Provider> Converge<'a, P> {
    /// Binds the record to a key if it has none, and marks it in progress.
    async fn start(
        w: &'a Worker<P>,
        infra0: &InfraRow,
        guard: Arc<RunGuard>,
        job: JobTimes,
    ) -> Result<Self, EngineError> {
        let now = w.now_ms();
        let mut run = Run { w, infra: infra0.clone(), events: vec![], guard };
        let current_key = w.provider.key_fingerprint();
        if run.infra.key_fingerprint.is_none() {
            // The key is bound when work on the record starts (docs/protocol.md §7). A
            // run that rolled back may have left receipts sent with some key
            // without the binding: those receipts' key is the binding then.
            let earlier = w.store.receipts_for_client(&run.infra.client_id).await?;
            let bound = earlier
                .iter()
                .max_by_key(|r| r.claimed_ms())
                .map(|r| r.key_fingerprint.clone())
                .unwrap_or_else(|| current_key.clone());
            run.event(EventKind::KeyBound, serde_json::json!({ "fingerprint": bound.short() }));
            run.infra.key_fingerprint = Some(bound);
        }
        let target = run.infra.target;
        let first_provisioning = target == Target::Present
            && !job.reconcile
            && run.infra.spec_generation == 0
            && matches!(infra0.status, ClientStatus::Pending | ClientStatus::Provisioning);
        run.infra.status = match target {
            Target::Present => ClientStatus::Provisioning,
            Target::Absent => ClientStatus::Deleting,
        };
        Ok(Self {
            run,
            now,
            due: job.due_ms.min(now),
            job_created: job.created_ms,
            target,
            current_key,
            reads: observe::LastReads::default(),
            started: std::time::Instant::now(),
            first_provisioning,
            side_effects: 0,
            orphans: None,
        })
    }

    /// Reads the receipts again. Receipts are the source of truth for ids
    /// and dispatch generations; the infra row keeps a copy (a rolled-back
    /// run may have recorded an id only there). A read made for an older
    /// receipt no longer counts.
    async fn view(&mut self) -> Result<View, EngineError> {
        let receipts = self.run.w.store.receipts_for_client(&self.run.infra.client_id).await?;
        let cur = current::current_planted(&self.run.infra, self.target, &receipts, self.run.w.cfg.planted);
        for kind in [ResourceKind::Vm, ResourceKind::Volume, ResourceKind::Attach] {
            self.run.set_dispatch_generation(kind, cur.generation(kind));
        }
        for (read, r) in self.reads.both_mut().into_iter().zip([&cur.vm, &cur.volume]) {
            let key = r.as_ref().map(|r| r.operation_key.clone());
            if read.op != key {
                (read.op, read.seen) = (key, Seen::NotRead);
            }
        }
        for kind in [ResourceKind::Vm, ResourceKind::Volume] {
            let id = cur.receipt(kind).filter(|r| !r.progress().deleted).and_then(|r| r.id().map(str::to_string));
            self.run.set_id(kind, id);
        }
        let changes = match self.run.infra.spec_generation {
            0 => vec![],
            _ => self.run.w.store.changes_for_client(&self.run.infra.client_id).await?,
        };
        Ok(View { receipts, cur, changes })
    }

    /// The facts the decision is taken on.
    fn inputs(&self, view: &View) -> Inputs {
        let w = self.run.w;
        let key_changed = self.run.infra.key_fingerprint.as_ref() != Some(&self.current_key);
        // A planted bug, for proving the campaign catches requests sent with
        // a key the record is not bound to.
        let key_changed = key_changed && !w.cfg.planted.is(Bug::IgnoreKeyChange);
        let ready_wait = w.cfg.ready_wait();
        let overdue = |r: Option<&ReceiptRow>| r.is_some_and(|r| w.now_ms() - r.sent_or_claimed_ms() > ready_wait);
        let infra = &self.run.infra;
        let update_overdue = infra.spec_updated_ms.is_some_and(|at| w.now_ms() - at > ready_wait);
        let resource = |r: Option<&ReceiptRow>, kind: ResourceKind| {
            let change = view.change_of(infra, kind);
            Resource {
                receipt: ReceiptFacts::of(r.map(ReceiptRow::effect), self.target),
                seen: self.reads.of(kind).seen.clone(),
                progress: progress_of(r),
                overdue: overdue(r),
                // Updated, and this resource's part of the spec is not what it
                // was created with, or an update already changed it: a drift is
                // then a change to make. Otherwise (an update of the other part
                // only) it is someone else's change, and blocks.
                updated: infra.spec_generation > 0
                    && r.is_some_and(|r| {
                        r.spec_digest != create_digest(&infra.spec, kind)
                            || view.changes.iter().any(|c| Some(c.resource_id.as_str()) == r.id())
                    }),
                change: change.map_or_else(Default::default, oduflow_store::ChangeRow::facts),
                update_overdue,
                resize_settling: view.resize_settling(kind, r, w.now_ms() - w.cfg.resize_interval_ms),
                plan_change: change.is_some_and(
                    |c| matches!(serde_json::from_value(c.change.clone()), Ok(Change::Instance(i)) if i.plan.is_some()),
                ),
                orphans: self.orphans_of(kind),
            }
        };
        Inputs {
            target: self.target,
            key_changed,
            vm: resource(view.cur.vm.as_ref(), ResourceKind::Vm),
            volume: resource(view.cur.volume.as_ref(), ResourceKind::Volume),
            attach: ReceiptFacts::of(view.cur.attach.as_ref().map(ReceiptRow::effect), self.target),
            observations_max: w.cfg.observations_max,
        }
    }

    /// One action, one function.
    async fn act(self, action: Action, view: &View) -> Result<Step<'a, P>, EngineError> {
        match action {
            Action::Observe(kind) => {
                let attach_sent = view.cur.attach.as_ref().map(ReceiptRow::sent_or_claimed_ms);
                self.observe(kind, view.receipt(kind, "observe")?, attach_sent).await
            }
            Action::CountObservation(kind) => self.count_observation(kind, view.receipt(kind, "count")?).await,
            Action::Adopt(kind, id) => self.adopt(kind, id, view.receipt(kind, "adopt")?).await,
            Action::AdoptOrphan(kind, id) => self.adopt_orphan(kind, id).await,
            Action::Dispatch(kind) => self.dispatch(kind, view).await,
            Action::Delete(kind, id) => self.delete(kind, id, view).await,
            Action::ConfirmDeleted(kind) => self.confirm_deleted(kind, view.receipt(kind, "confirm")?).await,
            Action::MarkSeen(kind) => self.mark_seen(view.receipt(kind, "mark")?).await,
            Action::Change(kind) => self.change(kind, view).await,
            Action::ConfirmChange(kind) => self.confirm_change(kind, view).await,
            Action::CountChange(kind) => self.count_change(kind, view).await,
            Action::Wait => {
                let at = self.now + self.run.w.cfg.poll_interval_ms;
                Ok(Step::Finish(self.run.wait(at)))
            }
            Action::Block(reason, detail) => self.block(reason, detail, view).await,
            Action::Ready => self.ready(view.cur.attach.as_ref()).await,
            Action::Deleted => self.deleted().await,
        }
    }
}

fn progress_of(r: Option<&ReceiptRow>) -> DeleteProgress {
    r.map(ReceiptRow::progress).unwrap_or_default()
}

/// The wait before the n-th observation: the base interval, growing slowly so
/// a long lag costs few reads.
fn poll_delay(base_ms: i64, n: i64) -> i64 {
    base_ms * (1 + n / 10).min(6)
}

impl<P: Provider> Run<'_, P> {
    fn event(&mut self, kind: EventKind, detail: serde_json::Value) {
        self.events.push(NewEvent { kind, detail });
    }

    fn finish(self, next: JobNext) -> Finish {
        Finish { next, infra: Some(self.infra), events: self.events, enqueue: vec![] }
    }

    fn wait(self, at_ms: i64) -> Finish {
        self.finish(JobNext::RunAgainAt(at_ms))
    }

    fn done(self) -> Finish {
        self.finish(JobNext::Done)
    }

    /// Moves a kind to the dispatch generation its receipts put it at (see
    /// [`current`]), with an event when that is a new one.
    fn set_dispatch_generation(&mut self, kind: ResourceKind, dg: i64) {
        let g = match kind {
            ResourceKind::Vm => &mut self.infra.vm_dispatch_generation,
            ResourceKind::Volume => &mut self.infra.volume_dispatch_generation,
            ResourceKind::Attach => &mut self.infra.attach_dispatch_generation,
        };
        if *g == dg {
            return;
        }
        *g = dg;
        self.event(
            EventKind::DispatchGenerationAdvanced,
            serde_json::json!({ "kind": kind, "dispatch_generation": dg }),
        );
    }

    fn set_id(&mut self, kind: ResourceKind, id: Option<String>) {
        match kind {
            ResourceKind::Vm => self.infra.vm_id = id.map(VultrInstanceId),
            ResourceKind::Volume => self.infra.volume_id = id.map(VultrBlockId),
            ResourceKind::Attach => {}
        }
    }

    /// Stops before the next side effect unless the claim still holds this
    /// client at this generation. (Provider requests are also guarded one by
    /// one, see [`RunGuard`].)
    async fn check_fence(&self) -> Result<(), EngineError> {
        self.guard.claim_holds().await
    }

    /// After a provider call: `Err` if the guard stopped any of its
    /// requests, so that nothing the call returned is recorded.
    fn halted(&self) -> Result<(), EngineError> {
        self.guard.stopped()
    }

    fn block(mut self, reason: BlockedReason, detail: String) -> Finish {
        self.infra.status = ClientStatus::Blocked;
        self.infra.blocked_reason = Some(reason);
        self.infra.blocked_detail = Some(detail.clone());
        self.event(EventKind::Blocked, serde_json::json!({ "reason": reason, "detail": detail }));
        self.done()
    }

    fn clone_shallow(&self) -> Self {
        Run { w: self.w, infra: self.infra.clone(), events: vec![], guard: self.guard.clone() }
    }
}

#[cfg(test)]
mod tests {
    /// The README's figure for a stuck create at the defaults (poll
    /// interval 5 s, 60 observations): the waits after the 1st to the 59th
    /// observation, the 60th being the one that blocks.
    #[test]
    fn the_readmes_polling_budget_is_the_codes() {
        let waits: i64 = (1..60).map(|n| super::poll_delay(5_000, n)).sum();
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
        let said = format!("{} x 5 s = {},{:03} s", waits / 5_000, waits / 1_000_000, waits / 1000 % 1000);
        assert!(readme.contains(&said), "README.md should say {said:?}");
        assert!(readme.contains(&format!("17 min {} s", waits / 1000 - 17 * 60)));
    }
}
