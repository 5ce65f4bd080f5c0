//! How a run reads a resource: by id, by label, or through the bulk view
//! (docs/protocol.md §3.6), and what a read records. The bulk view is known
//! here and in the worker that owns it, nowhere else in the executor.

use super::*;
use crate::fleet_view;

/// A planted bug (test builds only), for proving the campaign catches it: a
/// listing's sighting taken as the GET's, which deletion's bookkeeping
/// trusts (a 404 inside the post-create window then "confirms" a deletion).
fn listing_taken_as_seen(cfg: &crate::EngineConfig) -> bool {
    cfg.planted.is(crate::Bug::ListingTakenAsSeen)
}

/// How an observation reads (see `Converge::read_via`).
#[derive(Clone, Copy, Debug)]
enum Via {
    /// Its own request: GET by id, or a label search.
    Get,
    /// The bulk view, from a listing that started after `after_ms` (the
    /// worker's clock) and, if given, at or after `since` (monotonic).
    /// The run may be told to come back once a listing is done instead.
    View { after_ms: i64, since: Option<std::time::Instant>, may_defer: bool },
}

/// What one read gave.
enum Observed {
    /// What it showed, and whether it came from the bulk view.
    Read(Seen, bool),
    /// No listing qualifies yet: one that will should be done after this.
    Later(std::time::Duration),
}

/// What the run's latest read of one resource showed, and how it was made.
pub(super) struct LastRead {
    /// The receipt it was read for: a read made for an older one no longer
    /// counts.
    pub op: Option<OperationKey>,
    pub seen: Seen,
    /// When it was made.
    pub at: i64,
    /// It came from the bulk view (a listing) rather than a GET by id.
    pub from_view: bool,
    /// A decision taken on the bulk view had to be confirmed: the resource
    /// is read by id for the rest of the run.
    pub must_get: bool,
}

impl Default for LastRead {
    fn default() -> Self {
        Self { op: None, seen: Seen::NotRead, at: 0, from_view: false, must_get: false }
    }
}

/// The run's latest reads of the VM and of the volume (an attach is read
/// on the volume).
#[derive(Default)]
pub(super) struct LastReads {
    pub vm: LastRead,
    pub volume: LastRead,
}

impl LastReads {
    pub(super) fn of(&self, kind: ResourceKind) -> &LastRead {
        if kind == ResourceKind::Vm { &self.vm } else { &self.volume }
    }

    pub(super) fn of_mut(&mut self, kind: ResourceKind) -> &mut LastRead {
        if kind == ResourceKind::Vm { &mut self.vm } else { &mut self.volume }
    }

    pub(super) fn both_mut(&mut self) -> [&mut LastRead; 2] {
        [&mut self.vm, &mut self.volume]
    }
}

/// What the bulk view gave one read.
enum InView {
    Shown(Seen),
    /// The listing does not show it: only a GET by id can tell.
    NotShown,
    Later(std::time::Duration),
}

/// What a listing shows of `r`'s resource: by its id when recorded, else
/// everything under its label. An id an operator adopted is not held to
/// the receipt's label (`oduflow adopt` verified everything else).
fn shown<T: fleet_view::Listed>(got: fleet_view::Got<T>, r: &ReceiptRow, facts: impl Fn(&str, T) -> Facts) -> InView {
    let snap = match got {
        fleet_view::Got::Snapshot(s) => s,
        fleet_view::Got::Later(d) => return InView::Later(d),
    };
    let label = r.label.as_str();
    let by_operator = r.id_source() == Some(IdSource::AdoptedByOperator);
    match r.id() {
        Some(id) => snap.get(id).map_or(InView::NotShown, |x| {
            InView::Shown(Seen::Present(facts(if by_operator { x.label() } else { label }, x.clone())))
        }),
        None => InView::Shown(Seen::ByLabel(snap.with_label(label).into_iter().map(|x| facts(label, x)).collect())),
    }
}

pub(super) fn instance_facts(spec: &ClientSpec, label: &str, i: provider::Instance) -> Facts {
    Facts {
        mismatch: decide::instance_fixed_mismatch(spec, label, &i),
        drift: decide::instance_drift(spec, &i).map(Box::new),
        ready: i.is_ready(),
        state: format!("{}/{}", i.status, i.server_status),
        outputs: ServerOutputs { main_ip: i.main_ip, v6_main_ip: i.v6_main_ip, mount_id: String::new() },
        id: i.id.0,
        attached_to: None,
        size_gb: None,
    }
}

/// Records the size a read showed a volume to have (its id and size), so
/// `client update` can go back to it after a refused grow without asking
/// the provider.
fn note_volume_size(progress: &mut oduflow_store::Progress, seen: &Seen) {
    if let Seen::Present(Facts { id, size_gb: Some(gb), .. }) = seen {
        progress.volume_size = Some(oduflow_store::VolumeSize { id: id.clone(), gb: *gb });
    }
}

pub(super) fn block_facts(spec: &ClientSpec, label: &str, b: provider::Block) -> Facts {
    Facts {
        mismatch: decide::block_fixed_mismatch(spec, label, &b),
        drift: decide::block_drift(spec, &b).map(Box::new),
        ready: b.status == "active",
        state: b.status.clone(),
        attached_to: b.attached_to_instance.map(|i| i.0),
        outputs: ServerOutputs { mount_id: b.mount_id, ..ServerOutputs::default() },
        id: b.id.0,
        size_gb: Some(b.size_gb),
    }
}

impl<'a, P: Provider> Converge<'a, P> {
    /// Reads the resource (by id, or by label while its id is unknown).
    pub(super) async fn observe(
        mut self,
        kind: ResourceKind,
        r: ReceiptRow,
        attach_sent: Option<i64>,
    ) -> Result<Step<'a, P>, EngineError> {
        let w = self.run.w;
        if w.cfg.planted.is(crate::Bug::ResendAfterLost)
            && (r.effect().is_uncertain() || r.effect().is_unsent())
            && kind != ResourceKind::Attach
        {
            // A planted bug, for proving the fault campaign can fail:
            // re-send the create after a lost response, as a naive
            // client library would.
            self.run.resend_planted_bug(kind, &r).await;
        }
        let at = w.now_ms();
        let via = self.read_via(kind, &r, attach_sent);
        let observed = self.run.observe(kind, &r, via).await;
        self.run.halted()?;
        let observed = match observed {
            // No listing qualifies yet: come back once one is done rather
            // than hold a place among the jobs in flight meanwhile.
            Ok(Observed::Later(d)) => {
                let at = w.now_ms().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                return Ok(Step::Finish(self.run.wait(at)));
            }
            Ok(Observed::Read(seen, from_view)) => {
                self.reads.of_mut(kind).from_view = from_view;
                Ok(seen)
            }
            Err(e) => Err(e),
        };
        match observed {
            // Only a GET by id establishes that a resource has been seen
            // (deletion bookkeeping): a listing may show a new resource
            // while GET by id and DELETE still answer 404.
            Ok(s @ Seen::Present(_))
                if !r.progress().seen && (!self.reads.of(kind).from_view || listing_taken_as_seen(&w.cfg)) =>
            {
                w.receipts.mark_seen(&r.operation_key, w.now_ms()).await?;
                self.reads.of_mut(kind).seen = s;
            }
            // A listing showed it: it exists (its outcome is known), though
            // it is not yet "seen" for deletion's bookkeeping.
            Ok(s @ Seen::Present(_)) if !r.listed() && self.reads.of(kind).from_view => {
                w.receipts.mark_listed(&r.operation_key, w.now_ms()).await?;
                self.reads.of_mut(kind).seen = s;
            }
            Ok(s) => self.reads.of_mut(kind).seen = s,
            Err(e) => return Ok(Step::Finish(self.run.read_failed(kind, &r, &e, self.now).await?)),
        }
        note_volume_size(&mut self.run.infra.progress, &self.reads.of(kind).seen);
        self.reads.of_mut(kind).at = at;
        Ok(Step::Next(self))
    }

    /// How this observation may read (docs/protocol.md §3.6).
    /// By id, the bulk view only while the client is first provisioned
    /// (target present, never updated) and no decision of this run had to
    /// be confirmed, from a listing that started after the create (and,
    /// for the volume, the attach) was sent and at most one poll interval
    /// before this run was due. A label search always uses a listing
    /// started during this run: a counted absence must come from a listing
    /// of its own (so it waits for it: coming back would be another run).
    fn read_via(&self, kind: ResourceKind, r: &ReceiptRow, attach_sent: Option<i64>) -> Via {
        let w = self.run.w;
        if !w.cfg.bulk_view {
            return Via::Get;
        }
        if r.effect().id().is_none() {
            // A listing of this run's own (started after it began, on this
            // process's monotonic clock: a wall-clock step cannot make an
            // older listing count again).
            return Via::View { after_ms: i64::MIN, since: Some(self.started), may_defer: false };
        }
        // A deletion of this very dispatch still in flight reads by id.
        let deleting = matches!(r.progress(), DeleteProgress { delete_sent: true, deleted: false, .. });
        if !self.first_provisioning || deleting || self.reads.of(kind).must_get {
            return Via::Get;
        }
        // After the create and the attach were sent (for either resource:
        // the VM read that lets the client be ready must postdate the
        // attach too), and within a poll interval of this run. Half a poll
        // interval after the send, too: a listing started sooner may not
        // show the resource yet (listing lag), and reading it would only
        // cost a GET by id. (Efficiency only: what a listing does not show
        // is read by id anyway.)
        let sent = r.sent_or_claimed_ms().max(attach_sent.unwrap_or(0));
        let settled = sent.saturating_add(w.cfg.poll_interval_ms / 2);
        // Due, not started: a run that came back for a listing planned when
        // it left finds it qualifying, however long it then queued. Never
        // from before its job was made: a reconcile of a ready client is
        // "first provisioning" again, and the listing that showed its volume
        // attached may predate the move that made the operator ask.
        let after_ms = settled.max(self.due - w.cfg.poll_interval_ms).max(self.job_created);
        Via::View { after_ms, since: None, may_defer: true }
    }

    /// A block or a counted observation is never decided on the bulk view:
    /// a listing lags, so what it shows may be older than the truth. The
    /// resources it showed are read by id, and the decision taken again.
    pub(super) fn confirm_by_get(&mut self, action: &Action) -> bool {
        // Ready is decided on the volume's attachment; its outputs come from
        // the VM read, which must then show the VM ready.
        let vm = &mut self.reads.vm;
        let vm_not_ready = matches!(&vm.seen, Seen::Present(f) if !f.ready);
        if *action == Action::Ready && vm.from_view && vm_not_ready {
            (vm.must_get, vm.from_view, vm.seen) = (true, false, Seen::NotRead);
            return true;
        }
        if !matches!(action, Action::Block(..) | Action::CountObservation(_)) {
            return false;
        }
        let mut again = false;
        for read in self.reads.both_mut() {
            if read.from_view && !matches!(read.seen, Seen::NotRead | Seen::ByLabel(_)) {
                (read.must_get, read.from_view, read.seen) = (true, false, Seen::NotRead);
                again = true;
            }
        }
        again
    }

    /// A fruitless observation counts against the receipt's polling limit;
    /// the run waits for the next poll.
    pub(super) async fn count_observation(self, kind: ResourceKind, r: ReceiptRow) -> Result<Step<'a, P>, EngineError> {
        let w = self.run.w;
        let summary = match &self.reads.of(kind).seen {
            Seen::Missing => "GET by id answered 404".to_owned(),
            Seen::ByLabel(f) if f.is_empty() => "no resource carries the label".to_owned(),
            _ if kind == ResourceKind::Attach => "volume not yet attached".to_owned(),
            other => format!("{other:?}"),
        };
        let n = w.receipts.observe(&r.operation_key, &summary).await?;
        let at = self.now + poll_delay(w.cfg.poll_interval_ms, n);
        Ok(Step::Finish(self.run.wait(at)))
    }
}

impl<P: Provider> Run<'_, P> {
    /// One read of a resource: by id when known, else by label; through
    /// the bulk view when `via` allows it. Whether it came from the view.
    async fn observe(
        &mut self,
        kind: ResourceKind,
        r: &ReceiptRow,
        via: Via,
    ) -> Result<Observed, provider::ProviderError> {
        if let Via::View { after_ms, since, may_defer } = via {
            let poll = std::time::Duration::from_millis(self.w.cfg.poll_interval_ms.max(0) as u64);
            let ask = fleet_view::ask(after_ms, since, may_defer, poll);
            match self.observe_in_view(kind, r, ask).await {
                Ok(InView::Shown(seen)) => return Ok(Observed::Read(seen, true)),
                Ok(InView::Later(d)) => return Ok(Observed::Later(d)),
                Ok(InView::NotShown) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "bulk view listing failed; reading by id");
                }
            }
        }
        Ok(Observed::Read(self.observe_by_request(kind, r).await?, false))
    }

    /// The read from the bulk view: `NotShown` when the listing does not
    /// show the resource by its id (a label search always has an answer).
    async fn observe_in_view(
        &mut self,
        kind: ResourceKind,
        r: &ReceiptRow,
        ask: fleet_view::Ask,
    ) -> Result<InView, provider::ProviderError> {
        let w = self.w;
        let spec = &self.infra.spec;
        let clock = w.clock.clone();
        let now: Arc<dyn Fn() -> i64 + Send + Sync> = Arc::new(move || clock.now_ms());
        Ok(match kind {
            ResourceKind::Vm => {
                shown(w.view.instances(&w.provider, ask, now).await?, r, |l, i| instance_facts(spec, l, i))
            }
            _ => shown(w.view.blocks(&w.provider, ask, now).await?, r, |l, b| block_facts(spec, l, b)),
        })
    }

    /// One read of a resource by its own request: GET by id when known,
    /// else a label search.
    async fn observe_by_request(
        &mut self,
        kind: ResourceKind,
        r: &ReceiptRow,
    ) -> Result<Seen, provider::ProviderError> {
        let spec = &self.infra.spec;
        let p = &self.w.provider;
        let label = r.label.as_str();
        // An operator adopted this id knowing its label (`oduflow adopt`
        // verifies everything else): the label is not held against it.
        let by_operator = r.id_source() == Some(IdSource::AdoptedByOperator);
        let expect = |found: &str| if by_operator { found.to_owned() } else { label.to_owned() };
        let by_id = match r.resource() {
            Some(id) => Some(p.resource_get(&id).await?),
            None => None,
        };
        let seen = match (kind, by_id) {
            (_, Some(None)) => Seen::Missing,
            (_, Some(Some(provider::Existing::Instance(i)))) => {
                Seen::Present(instance_facts(spec, &expect(&i.label), i))
            }
            (_, Some(Some(provider::Existing::Block(b)))) => {
                let expected = expect(&b.label);
                Seen::Present(block_facts(spec, &expected, b))
            }
            (ResourceKind::Vm, None) => Seen::ByLabel(
                p.instance_list_by_label(&r.label)
                    .await?
                    .into_iter()
                    .filter(|i| i.label == label)
                    .map(|i| instance_facts(spec, label, i))
                    .collect(),
            ),
            (_, None) => Seen::ByLabel(
                p.block_list()
                    .await?
                    .into_iter()
                    .filter(|b| b.label == label)
                    .map(|b| block_facts(spec, label, b))
                    .collect(),
            ),
        };
        Ok(seen)
    }
}

impl<P: Provider> Run<'_, P> {
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
}
