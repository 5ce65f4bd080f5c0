//! The executor: converges one client's infrastructure towards its target in
//! one job run. It gathers facts with bounded reads, asks the pure
//! [`oduflow_model::decide::decide`] for the next action, and performs at most
//! one side effect (a create, an attach or a DELETE) before re-queueing
//! itself. Receipts and audit events go through the receipt writer and commit
//! on their own; everything else is returned as one [`Finish`] for the job's
//! main transaction.

use crate::current::{self, spec_digest};
use crate::{Bug, EngineError, Worker, fail_step};
use oduflow_model::decide::{self, Action, DeleteProgress, Facts, Inputs, ReceiptFacts, Resource, Seen};
use oduflow_model::provider::{BlockRequest, DeleteOutcome, InstanceRequest, Outcome, Provider, SendGuard};
use oduflow_model::*;
use oduflow_store::{Fence, Finish, Footing, IdSource, InfraRow, JobNext, NewEvent, NewReceipt, ReceiptRow};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

mod change;
mod identities;
mod observe;
mod orphans;

/// Times the backup schedule is set without reading back before the client
/// blocks `config_mismatch`: a set is repeatable, but not for ever.
const BACKUP_SCHEDULE_SETS_MAX: i64 = 3;

/// Where setting the backup schedule stands.
enum Backups {
    Done,
    WaitUntil(i64),
    Stuck(String),
}

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

/// A run's claim, asked right before every provider request (as the
/// [`SendGuard`] the provider asks after its rate-limiter wait and before
/// each retry) and by the run before its other side effects. The first
/// refusal sticks: a run that lost its claim stays stopped, and whatever a
/// stopped request returned is thrown away, never recorded.
struct RunGuard {
    fence: Fence,
    stop: Mutex<Option<Stop>>,
}

#[derive(Clone)]
enum Stop {
    Superseded,
    Lost(String),
}

impl RunGuard {
    async fn claim_holds(&self) -> Result<(), EngineError> {
        self.stopped()?;
        let stop = match self.fence.check().await {
            Ok(Footing::Held) => return Ok(()),
            Ok(Footing::Superseded) => Stop::Superseded,
            Err(e) => Stop::Lost(e.to_string()),
        };
        *self.stop.lock().expect("run guard poisoned") = Some(stop);
        self.stopped()
    }

    /// `Err` once any check failed, without asking the store again.
    fn stopped(&self) -> Result<(), EngineError> {
        match self.stop.lock().expect("run guard poisoned").clone() {
            None => Ok(()),
            Some(Stop::Superseded) => Err(EngineError::Superseded),
            Some(Stop::Lost(e)) => Err(EngineError::ClaimLost(e)),
        }
    }
}

impl SendGuard for RunGuard {
    fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            self.claim_holds().await.map_err(|e| match e {
                EngineError::Superseded => "the client's record moved on while the run was in flight".to_owned(),
                e => e.to_string(),
            })
        })
    }
}

/// A dispatch's receipt marked sent right before its request leaves (the
/// provider asks it after the rate slot and the run's guard). A mark that
/// cannot be recorded stops the request; whether it was recorded tells the
/// run, when the request then did not leave, which record is its to write.
pub(crate) struct SentMark {
    receipts: crate::receipt_writer::ReceiptWriter,
    clock: crate::SharedClock,
    of: MarkOf,
    client: ClientId,
    /// The key the request goes out with: recorded by the mark (a receipt
    /// claimed before a key rotation is sent with the new key).
    key: KeyFingerprint,
    /// A planted bug's create has no receipt to mark.
    unrecorded: bool,
    marked: std::sync::atomic::AtomicBool,
}

/// The receipt a [`SentMark`] marks.
pub(crate) enum MarkOf {
    Dispatch(OperationKey),
    /// A change receipt's operation key (§3.4).
    Change(String),
}

impl SentMark {
    pub(crate) fn new<P: Provider>(w: &Worker<P>, of: MarkOf, client: ClientId, unrecorded: bool) -> Self {
        Self {
            receipts: w.receipts.clone(),
            clock: w.clock.clone(),
            of,
            client,
            key: w.provider.key_fingerprint(),
            unrecorded,
            marked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether this run recorded the receipt as sent.
    pub(crate) fn marked(&self) -> bool {
        self.marked.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl provider::SendMark for SentMark {
    fn mark(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            if self.unrecorded || self.marked() {
                return Ok(());
            }
            let now = self.clock.now_ms();
            let recorded = match &self.of {
                MarkOf::Dispatch(op) => self.receipts.mark_sent(op, &self.client, &self.key, now).await,
                MarkOf::Change(key) => self.receipts.ledger().change_mark_sent(key, &self.client, &self.key, now).await,
            };
            recorded.map_err(|e| format!("the receipt could not be marked sent: {e}"))?;
            // A crash from here on leaves the receipt marked: maybe sent.
            if matches!(self.of, MarkOf::Dispatch(_)) {
                crate::crash_if_asked("request-about-to-be-sent");
                fail::fail_point!("request-about-to-be-sent", |_| Err("fail point request-about-to-be-sent".into()));
            }
            self.marked.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
    }
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
        tracing::debug!(client = %c.run.infra.client_id, ?action, "decided");
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
    orphans: Option<[Vec<orphans::Read>; 2]>,
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

fn slot(kind: ResourceKind) -> usize {
    if kind == ResourceKind::Vm { 0 } else { 1 }
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
                .max_by_key(|r| r.claimed_ms)
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
            let id = cur.receipt(kind).filter(|r| r.deleted_ms.is_none()).and_then(|r| r.resource_id.clone());
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
        let overdue =
            |r: Option<&ReceiptRow>| r.is_some_and(|r| w.now_ms() - r.sent_ms.unwrap_or(r.claimed_ms) > ready_wait);
        let infra = &self.run.infra;
        let update_overdue = infra.spec_updated_ms.is_some_and(|at| w.now_ms() - at > ready_wait);
        let resource = |r: Option<&ReceiptRow>, kind: ResourceKind| Resource {
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
                        || view.changes.iter().any(|c| Some(&c.resource_id) == r.resource_id.as_ref())
                }),
            change: oduflow_model::decide::ChangeFacts::of(
                view.change_of(infra, kind).map(oduflow_store::ChangeRow::effect),
            ),
            update_overdue,
            orphans: self.orphans_of(kind),
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
                let attach_sent = view.cur.attach.as_ref().map(|a| a.sent_ms.unwrap_or(a.claimed_ms));
                self.observe(kind, view.receipt(kind, "observe")?, attach_sent).await
            }
            Action::CountObservation(kind) => self.count_observation(kind, view.receipt(kind, "count")?).await,
            Action::Adopt(kind, id) => self.adopt(kind, id, view.receipt(kind, "adopt")?).await,
            Action::AdoptOrphan(kind, id) => self.adopt_orphan(kind, id).await,
            Action::Dispatch(kind) => self.dispatch(kind, view).await,
            Action::Delete(kind, id) => self.delete(kind, id, view).await,
            Action::ConfirmDeleted(kind) => self.confirm_deleted(kind, view.receipt(kind, "confirm")?).await,
            Action::MarkSeen(kind) => {
                let r = view.receipt(kind, "mark")?;
                self.run.w.receipts.mark_seen(&r.operation_key, self.run.w.now_ms()).await?;
                Ok(Step::Next(self))
            }
            Action::Change(kind) => self.change(kind, view).await,
            Action::ConfirmChange(kind) => self.confirm_change(kind, view).await,
            Action::CountChange(kind) => self.count_change(kind, view).await,
            Action::Wait => {
                let at = self.now + self.run.w.cfg.poll_interval_ms;
                Ok(Step::Finish(self.run.wait(at)))
            }
            Action::Block(reason, detail) => self.block(reason, detail, view).await,
            Action::Ready => self.ready().await,
            Action::Deleted => self.deleted().await,
        }
    }

    /// Records the id a label search found for a dispatch whose outcome was
    /// unknown.
    async fn adopt(mut self, kind: ResourceKind, id: String, r: ReceiptRow) -> Result<Step<'a, P>, EngineError> {
        let w = self.run.w;
        w.receipts.record_id(&r.operation_key, &id, IdSource::AdoptedByLabel, w.now_ms()).await?;
        self.run.set_id(kind, Some(id.clone()));
        self.run
            .event(EventKind::ResourceAdoptedByLabel, serde_json::json!({ "kind": kind, "id": id, "label": r.label }));
        // Read it by id next: a listing may show a new resource while
        // GET by id (and DELETE) still answer 404, so only a GET by id
        // establishes that it has been seen (campaign seed 7020).
        self.reads.of_mut(kind).seen = Seen::NotRead;
        Ok(Step::Next(self))
    }

    /// Sends a create or attach (at most one side effect per run).
    async fn dispatch(mut self, kind: ResourceKind, view: &View) -> Result<Step<'a, P>, EngineError> {
        if self.side_effects > 0 {
            return Ok(Step::Finish(self.run.wait(self.now)));
        }
        // Before the client's first create, whatever it would be: nothing is
        // paid for a spec the catalog already refuses.
        if kind != ResourceKind::Attach && view.cur.vm.is_none() && view.cur.volume.is_none() {
            let problems = match self.run.preflight().await? {
                Ok(problems) => problems,
                Err(e) => {
                    let now = self.now;
                    return Ok(Step::Finish(self.run.preflight_read_failed(&e, now).await?));
                }
            };
            if !problems.is_empty() {
                let detail = format!("preflight: {}; nothing was created", problems.join("; "));
                return Ok(Step::Finish(self.run.block(BlockedReason::PreflightFailed, detail)));
            }
        }
        self.side_effects += 1;
        self.run.check_fence().await?;
        let unsent = view.cur.receipt(kind).filter(|r| r.effect().is_unsent()).cloned();
        let rejected = self.run.dispatch(kind, unsent, view.cur.vm.as_ref(), view.cur.volume.as_ref()).await?;
        if rejected {
            return Ok(Step::Next(self));
        }
        // A poll interval after the send, not after this run began: a run
        // slow to send (a loaded store, the rate budget) must not look again
        // before the resource has had a poll interval to show.
        let at = self.run.w.now_ms().max(self.now) + self.run.w.cfg.poll_interval_ms;
        Ok(Step::Finish(self.run.wait(at)))
    }

    /// Sends a DELETE (the run's one side effect).
    async fn delete(self, kind: ResourceKind, id: String, view: &View) -> Result<Step<'a, P>, EngineError> {
        if self.side_effects > 0 {
            return Ok(Step::Finish(self.run.wait(self.now)));
        }
        let r = view.receipt(kind, "delete")?;
        Ok(Step::Finish(self.run.delete(kind, &id, &r, self.now).await?))
    }

    /// Records a deletion, once a GET sent after the DELETE answered 404.
    async fn confirm_deleted(mut self, kind: ResourceKind, r: ReceiptRow) -> Result<Step<'a, P>, EngineError> {
        if r.delete_sent_ms.is_none_or(|d| self.reads.of(kind).at <= d) {
            self.reads.of_mut(kind).seen = Seen::NotRead;
            return Ok(Step::Next(self));
        }
        let w = self.run.w;
        w.receipts.mark_deleted(&r.operation_key, w.now_ms()).await?;
        fail_step!("get-404-recorded");
        let id = r.resource_id;
        self.run.event(EventKind::ResourceDeleted, serde_json::json!({ "kind": kind, "id": id }));
        self.run.set_id(kind, None);
        Ok(Step::Next(self))
    }

    /// Blocks the client with the reason and its evidence.
    async fn block(mut self, reason: BlockedReason, detail: String, view: &View) -> Result<Step<'a, P>, EngineError> {
        let w = self.run.w;
        // A limit reached by observations: the last one counts too, so the
        // receipt's count agrees with the evidence.
        let counted = match reason {
            BlockedReason::UncertainCreate | BlockedReason::KnownResourceMissing | BlockedReason::UncertainDelete => {
                view.cur.receipt(if detail.starts_with("volume") { ResourceKind::Volume } else { ResourceKind::Vm })
            }
            BlockedReason::UncertainAttach => view.cur.receipt(ResourceKind::Attach),
            _ => None,
        };
        if let Some(r) = counted {
            w.receipts.observe(&r.operation_key, &detail).await?;
        }
        let detail = match reason {
            BlockedReason::UncertainCreate | BlockedReason::UncertainAttach | BlockedReason::UncertainDelete => {
                format!("{detail}; {}", uncertain_evidence(w, &view.receipts, counted).await?)
            }
            _ => detail,
        };
        self.run.infra.status = ClientStatus::Blocked;
        self.run.infra.blocked_reason = Some(reason);
        self.run.infra.blocked_detail = Some(detail.clone());
        self.run.event(EventKind::Blocked, serde_json::json!({ "reason": reason, "detail": detail }));
        Ok(Step::Finish(self.run.done()))
    }

    /// VM and volume ready: the other identities next, then the client.
    async fn ready(mut self) -> Result<Step<'a, P>, EngineError> {
        fail_step!("attach-confirmed");
        // What this run's reads showed (both are read before Ready).
        if let (Seen::Present(vm), Seen::Present(vol)) = (&self.reads.vm.seen, &self.reads.volume.seen) {
            self.run.infra.outputs = ServerOutputs { mount_id: vol.outputs.mount_id.clone(), ..vm.outputs.clone() };
        }
        match self.backup_schedule().await? {
            Backups::Done => {}
            Backups::WaitUntil(at) => return Ok(Step::Finish(self.run.wait(at))),
            Backups::Stuck(detail) => return Ok(Step::Finish(self.run.block(BlockedReason::ConfigMismatch, detail))),
        }
        if let Some(f) = self.run.adapters_present().await? {
            return Ok(Step::Finish(f));
        }
        if let Some(f) = self.run.adapters_update().await? {
            return Ok(Step::Finish(f));
        }
        self.run.infra.status = ClientStatus::Ready;
        self.run.infra.blocked_reason = None;
        self.run.infra.blocked_detail = None;
        let ids = serde_json::json!({ "vm_id": self.run.infra.vm_id, "volume_id": self.run.infra.volume_id });
        self.run.event(EventKind::Ready, ids);
        Ok(Step::Finish(self.run.done()))
    }

    /// The backup schedule, which Vultr sets with a call of its own after
    /// the create: read, set when it differs (a repeatable set, this run's
    /// one side effect), and confirmed by the next run's read; after
    /// [`BACKUP_SCHEDULE_SETS_MAX`] sets that never read back, the client
    /// blocks with what Vultr shows.
    async fn backup_schedule(&mut self) -> Result<Backups, EngineError> {
        let (Some(want), Some(vm)) = (self.run.infra.spec.server.backups, self.run.infra.vm_id.clone()) else {
            return Ok(Backups::Done);
        };
        let progress = &self.run.infra.progress;
        if progress.backup_schedule.as_deref() == Some(want.to_string().as_str()) {
            return Ok(Backups::Done);
        }
        let sets = progress.backup_schedule_sets;
        let p = &self.run.w.provider;
        let read = |e: provider::ProviderError| EngineError::ProviderRead(format!("backup schedule of {vm}: {e}"));
        let have = p.backup_schedule_get(&vm).await.map_err(read)?;
        if have == Some(want) {
            self.run.infra.progress.backup_schedule = Some(want.to_string());
            self.run.event(
                EventKind::BackupScheduleConfirmed,
                serde_json::json!({ "vm_id": vm, "schedule": want.to_string() }),
            );
            return Ok(Backups::Done);
        }
        if sets >= BACKUP_SCHEDULE_SETS_MAX {
            let have = have.map_or_else(|| "backups off".to_owned(), |h| h.to_string());
            return Ok(Backups::Stuck(format!(
                "vm {vm}: backup schedule {want} set {sets} times, but Vultr reads back {have}"
            )));
        }
        if self.side_effects > 0 {
            return Ok(Backups::WaitUntil(self.now));
        }
        self.side_effects += 1;
        self.run.check_fence().await?;
        p.backup_schedule_set(&vm, &want).await.map_err(read)?;
        self.run.infra.progress.backup_schedule_sets = sets + 1;
        self.run.event(EventKind::BackupScheduleSet, serde_json::json!({ "vm_id": vm, "schedule": want.to_string() }));
        Ok(Backups::WaitUntil(self.now + self.run.w.cfg.poll_interval_ms))
    }

    /// VM and volume gone: the other identities next (the VM's absence
    /// proves nothing about them), then the client.
    async fn deleted(mut self) -> Result<Step<'a, P>, EngineError> {
        if let Some(f) = self.run.adapters_absent().await? {
            return Ok(Step::Finish(f));
        }
        self.run.infra.status = ClientStatus::Deleted;
        self.run.infra.blocked_reason = None;
        self.run.infra.blocked_detail = None;
        self.run.event(EventKind::Deleted, serde_json::json!({}));
        Ok(Step::Finish(self.run.done()))
    }
}

/// Why a dispatch's outcome is unknown (the answer its send got, from the
/// audit trail), and every dispatch of the client whose outcome is unknown,
/// so one look at the evidence names them all.
async fn uncertain_evidence<P: Provider>(
    w: &Worker<P>,
    receipts: &[ReceiptRow],
    blocked_on: Option<&ReceiptRow>,
) -> Result<String, EngineError> {
    let unknown: Vec<&ReceiptRow> = receipts
        .iter()
        .filter(|r| {
            current::is_open(r) && r.effect().id().is_none() && r.resource_kind != ResourceKind::Attach || {
                r.resource_kind == ResourceKind::Attach
                    && blocked_on.is_some_and(|b| b.operation_key == r.operation_key)
            }
        })
        .collect();
    let client = receipts.first().map(|r| r.client_ref.clone());
    let answers = match client {
        Some(c) => w.store.events_for_client(&c).await?,
        None => vec![],
    };
    let why = |r: &ReceiptRow| {
        answers
            .iter()
            .rev()
            .find(|e| {
                e.kind == "dispatch_outcome_unknown"
                    && e.detail["operation_key"].as_str() == Some(r.operation_key.as_str())
            })
            .and_then(|e| e.detail["reason"].as_str().map(str::to_owned))
            .unwrap_or_else(|| match r.sent_ms {
                Some(_) => "no answer was recorded (the worker died or rolled back after sending)".to_owned(),
                None => "claimed, never marked sent, and not recorded as stopped (a worker stopped or died \
                         before its request left, or its mark is late)"
                    .to_owned(),
            })
    };
    let list: Vec<String> = unknown
        .iter()
        .map(|r| format!("{} {} (label {}): {}", r.resource_kind.as_str(), r.operation_key, r.label, why(r)))
        .collect();
    Ok(if list.is_empty() {
        "no dispatch of this client has an unknown outcome now".to_owned()
    } else {
        format!("dispatches with an unknown outcome: {}", list.join("; "))
    })
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

    /// A read that failed after its bounded retries counts as an
    /// observation of that receipt; past the polling limit the client
    /// blocks `provider_unavailable` with the error as evidence.
    async fn read_failed(
        self,
        kind: ResourceKind,
        r: &ReceiptRow,
        e: &provider::ProviderError,
        now: i64,
    ) -> Result<Finish, EngineError> {
        let w = self.w;
        w.receipts
            .audit(
                &self.infra.client_id,
                EventKind::ProviderReadFailed,
                serde_json::json!({ "kind": kind, "error": e.to_string() }),
                now,
            )
            .await?;
        w.receipts.observe(&r.operation_key, &format!("read failed: {e}")).await?;
        let n = r.observations() + 1;
        if n >= w.cfg.observations_max {
            let detail = format!("{} reads failed {n} times (the polling limit); last: {e}", kind.as_str());
            return Ok(self.block(BlockedReason::ProviderUnavailable, detail));
        }
        Ok(self.wait(now + poll_delay(w.cfg.poll_interval_ms, n)))
    }

    fn block(mut self, reason: BlockedReason, detail: String) -> Finish {
        self.infra.status = ClientStatus::Blocked;
        self.infra.blocked_reason = Some(reason);
        self.infra.blocked_detail = Some(detail.clone());
        self.event(EventKind::Blocked, serde_json::json!({ "reason": reason, "detail": detail }));
        self.done()
    }

    /// What the provider's catalog (cached per region for
    /// [`crate::CATALOG_TTL_MS`]) says is wrong with the spec.
    async fn preflight(&self) -> Result<Result<Vec<String>, provider::ProviderError>, EngineError> {
        let w = self.w;
        let region = &self.infra.spec.region;
        let now = w.now_ms();
        let catalog = match w.catalogs.get(region, now) {
            Some(c) => c,
            None => match w.provider.catalog(region).await {
                Ok(c) => {
                    w.catalogs.put(region, now, c.clone());
                    c
                }
                Err(e) => return Ok(Err(e)),
            },
        };
        self.halted()?;
        let problems = catalog.problems(&self.infra.spec);
        if !problems.is_empty() {
            w.catalogs.forget(region);
        }
        Ok(Ok(problems))
    }

    /// The preflight's reads failed after their retries: counted like a
    /// receipt's failed reads, and past the polling limit the client blocks
    /// `provider_unavailable` (nothing was created).
    async fn preflight_read_failed(mut self, e: &provider::ProviderError, now: i64) -> Result<Finish, EngineError> {
        let w = self.w;
        w.receipts
            .audit(
                &self.infra.client_id,
                EventKind::PreflightReadFailed,
                serde_json::json!({ "error": e.to_string() }),
                now,
            )
            .await?;
        self.infra.progress.preflight_read_failures += 1;
        let n = self.infra.progress.preflight_read_failures;
        if n >= w.cfg.observations_max {
            let detail =
                format!("preflight reads failed {n} times (the polling limit); last: {e}; nothing was created");
            return Ok(self.block(BlockedReason::ProviderUnavailable, detail));
        }
        Ok(self.wait(now + poll_delay(w.cfg.poll_interval_ms, n)))
    }

    /// The receipt of this client's current dispatch of `kind`, claimed now.
    pub(super) fn new_receipt(&self, kind: ResourceKind, label: Label, spec_digest: String) -> NewReceipt {
        let dg = self.infra.dispatch_generation(kind);
        NewReceipt {
            operation_key: OperationKey::new(&self.infra.client_id, kind, dg),
            client_ref: self.infra.client_id.clone(),
            resource_kind: kind,
            dispatch_generation: dg,
            label,
            region: self.infra.spec.region.clone(),
            spec_digest,
            key_fingerprint: self.w.provider.key_fingerprint(),
            claimed_ms: self.w.now_ms(),
        }
    }

    /// Claims a receipt, then sends the create or attach exactly once and
    /// records what the answer establishes. Returns whether it was a
    /// definitive rejection.
    async fn dispatch(
        &mut self,
        kind: ResourceKind,
        unsent: Option<ReceiptRow>,
        vm: Option<&ReceiptRow>,
        volume: Option<&ReceiptRow>,
    ) -> Result<bool, EngineError> {
        let w = self.w;
        let client = self.infra.client_id.clone();
        let spec = self.infra.spec.clone();
        let dg = self.infra.dispatch_generation(kind);
        let op = OperationKey::new(&client, kind, dg);
        // A receipt whose last send provably never left is sent again as it
        // is: same operation key, same label.
        let resend = unsent.is_some();
        let label = unsent.map_or_else(|| Label::new_dispatch(&client, kind), |r| r.label);
        let digest = match kind {
            ResourceKind::Attach => current::attach_digest(
                vm.and_then(|r| r.resource_id.as_deref()),
                volume.and_then(|r| r.resource_id.as_deref()),
            ),
            _ => create_digest(&spec, kind),
        };
        let forget = w.cfg.planted.is(Bug::ForgetReceipt) && kind != ResourceKind::Attach;
        if !forget && !resend {
            w.receipts.claim(&self.new_receipt(kind, label.clone(), digest)).await?;
        }
        fail_step!("receipt-committed");
        // Marked sent only right before the request leaves: after its rate
        // slot and the run's guard (which checks the claim again; a lost
        // claim sends nothing). A create stopped before the mark never left.
        let mark = Arc::new(SentMark::new(w, MarkOf::Dispatch(op.clone()), client.clone(), forget));
        let p = w.provider.marked(mark.clone());
        let outcome: Outcome<String> = async {
            Ok::<_, EngineError>(match kind {
                ResourceKind::Vm => map_outcome(p.instance_create(&instance_request(&spec, &label)).await, |id| id.0),
                ResourceKind::Volume => {
                    let req = BlockRequest {
                        region: spec.region.clone(),
                        size_gb: spec.volume_gb,
                        block_type: spec.volume_type,
                        label: label.clone(),
                    };
                    map_outcome(p.block_create(&req).await, |id| id.0)
                }
                ResourceKind::Attach => {
                    let vm_id = vm
                        .and_then(|r| r.resource_id.clone())
                        .ok_or_else(|| EngineError::Invariant("attach without VM id".into()))?;
                    let vol_id = volume
                        .and_then(|r| r.resource_id.clone())
                        .ok_or_else(|| EngineError::Invariant("attach without volume id".into()))?;
                    let o = p.block_attach(&VultrBlockId(vol_id), &VultrInstanceId(vm_id.clone())).await;
                    fail_step!("attach-sent");
                    map_outcome(o, |()| vm_id)
                }
            })
        }
        .await?;
        fail_step!("request-sent");
        fail_step!("response-received");
        if forget {
            self.halted()?;
            // The planted bug sent a create without a receipt: nothing records it.
            return Ok(false);
        }
        if let Outcome::NotSent { reason } = &outcome {
            self.record_not_sent(&op, &mark, reason).await?;
        }
        self.halted()?;
        let now = w.now_ms();
        match outcome {
            Outcome::Accepted(id) => {
                // The id is committed on the receipt before anything else.
                w.receipts.record_id(&op, &id, IdSource::Response, now).await?;
                fail_step!("id-recorded");
                self.set_id(kind, Some(id.clone()));
                let detail = serde_json::json!({ "operation_key": op, "kind": kind, "id": id });
                self.event(EventKind::DispatchAccepted, detail);
                Ok(false)
            }
            Outcome::Rejected { status, message } => {
                w.receipts.record_rejection(&op, status, &message, now).await?;
                Ok(true)
            }
            Outcome::Unknown { reason } => {
                let detail = serde_json::json!({ "operation_key": op, "reason": reason });
                w.receipts.audit(&client, EventKind::DispatchOutcomeUnknown, detail, now).await?;
                Ok(false)
            }
            Outcome::NotSent { .. } => Ok(false),
        }
    }

    /// A dispatch that did not leave, as this live worker knows, whether or
    /// not it still holds the client: recorded even by a run about to stop.
    async fn record_not_sent(&self, op: &OperationKey, mark: &SentMark, reason: &str) -> Result<(), EngineError> {
        let (w, now) = (self.w, self.w.now_ms());
        if mark.marked() {
            // It holds the mark: nobody else may have sent since.
            w.receipts.mark_not_sent(op, reason, now).await?;
        } else {
            // Stopped before its mark: recorded unless another run has
            // marked the receipt sent since (or the mark's commit went
            // through unseen).
            w.receipts.mark_stopped(op, reason, now).await?;
        }
        Ok(())
    }

    async fn resend_planted_bug(&self, kind: ResourceKind, r: &ReceiptRow) {
        let spec = &self.infra.spec;
        match kind {
            ResourceKind::Vm => {
                let _ = self.w.provider.instance_create(&instance_request(spec, &r.label)).await;
            }
            _ => {
                let req = BlockRequest {
                    region: spec.region.clone(),
                    size_gb: spec.volume_gb,
                    block_type: spec.volume_type,
                    label: r.label.clone(),
                };
                let _ = self.w.provider.block_create(&req).await;
            }
        }
    }

    fn clone_shallow(&self) -> Self {
        Run { w: self.w, infra: self.infra.clone(), events: vec![], guard: self.guard.clone() }
    }

    /// Sends one DELETE and ends the run. A refusal (500 "locked", a 4xx, a
    /// read error) counts as an observation of the receipt; past the polling
    /// limit the client blocks `delete_refused` with the answer as evidence.
    async fn delete(self, kind: ResourceKind, id: &str, r: &ReceiptRow, now: i64) -> Result<Finish, EngineError> {
        let w = self.w;
        let client = self.infra.client_id.clone();
        let op = &r.operation_key;
        // Audited before it leaves, so a killed worker's DELETE is on record.
        w.receipts
            .audit(&client, EventKind::DeleteSending, serde_json::json!({ "kind": kind, "id": id }), w.now_ms())
            .await?;
        // The run's guard checks the claim right before each attempt leaves:
        // nothing but this process's own scheduling lies between the check
        // and the request.
        let answer = w.provider.resource_delete(&provider::ResourceId::new(kind, id)).await;
        fail_step!("delete-sent");
        self.halted()?;
        let at = w.now_ms();
        let sent = matches!(answer, Ok(DeleteOutcome::Sent | DeleteOutcome::NotFound));
        if sent && r.delete_sent_ms.is_none() {
            // Deletion has a polling budget of its own: what creation spent
            // (label searches, early 404s) is not held against it.
            w.receipts.observations_restart(op).await?;
        }
        if sent {
            w.receipts.mark_delete_sent(op, at).await?;
        }
        let refusal = match &answer {
            Ok(DeleteOutcome::Refused { status, message }) => Some(format!("DELETE refused with {status}: {message}")),
            Err(e) => Some(format!("DELETE failed: {e}")),
            // Accepted again while a GET still shows it: a DELETE the
            // provider takes and never carries out would otherwise be sent
            // for ever. Each repeat counts against the polling limit.
            Ok(DeleteOutcome::Sent) if r.delete_sent_ms.is_some() => {
                Some("DELETE accepted again, but a GET still shows the resource".to_owned())
            }
            Ok(_) => None,
        };
        let answer_json = match &answer {
            Ok(o) => serde_json::to_value(o).unwrap_or_default(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        w.receipts
            .audit(
                &client,
                EventKind::DeleteSent,
                serde_json::json!({ "kind": kind, "id": id, "answer": answer_json }),
                at,
            )
            .await?;
        if let Some(why) = refusal {
            w.receipts.observe(op, &why).await?;
            let n = r.observations() + 1;
            if n >= w.cfg.observations_max {
                let detail = format!("{} {id}: {why} ({n} attempts, the polling limit)", kind.as_str());
                let reason = match answer {
                    // The provider took every DELETE: what it did with them is unknown.
                    Ok(DeleteOutcome::Sent) => BlockedReason::UncertainDelete,
                    _ => BlockedReason::DeleteRefused,
                };
                return Ok(self.block(reason, detail));
            }
            return Ok(self.wait(now + poll_delay(w.cfg.poll_interval_ms, n)));
        }
        Ok(self.wait(now + w.cfg.poll_interval_ms))
    }
}

/// The digest of what a VM's or a volume's create asks for: every field of
/// its POST (a VM's server fields included).
fn create_digest(spec: &ClientSpec, kind: ResourceKind) -> String {
    match kind {
        ResourceKind::Vm => spec_digest(&(&spec.region, &spec.plan, &spec.image, &spec.server)),
        _ => spec_digest(&(&spec.region, spec.volume_gb, spec.volume_type)),
    }
}

/// The VM create for `spec` under `label`: one POST carries every field.
fn instance_request(spec: &ClientSpec, label: &Label) -> InstanceRequest {
    InstanceRequest {
        region: spec.region.clone(),
        plan: spec.plan.clone(),
        image: spec.image.clone(),
        label: label.clone(),
        server: ServerSpec {
            // A spec stored before hostnames existed: its VMs were created
            // with the label as hostname, and keep it.
            hostname: if spec.server.hostname.is_empty() { label.to_string() } else { spec.server.hostname.clone() },
            ..spec.server.clone()
        },
    }
}

fn map_outcome<T>(o: Outcome<T>, f: impl FnOnce(T) -> String) -> Outcome<String> {
    match o {
        Outcome::Accepted(t) => Outcome::Accepted(f(t)),
        Outcome::Rejected { status, message } => Outcome::Rejected { status, message },
        Outcome::Unknown { reason } => Outcome::Unknown { reason },
        Outcome::NotSent { reason } => Outcome::NotSent { reason },
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
