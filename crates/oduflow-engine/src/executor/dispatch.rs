//! The create and attach: the catalog's preflight before a client's first
//! create, the receipt claimed, the request sent exactly once and its answer
//! recorded; and the adoption of an id a label search found
//! (docs/protocol.md §3.1, §3.2).

use super::*;

/// The digest of what a VM's or a volume's create asks for: every field of
/// its POST (a VM's server fields included).
pub(super) fn create_digest(spec: &ClientSpec, kind: ResourceKind) -> String {
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

/// The volume create for `spec` under `label`.
fn block_request(spec: &ClientSpec, label: &Label) -> BlockRequest {
    BlockRequest {
        region: spec.region.clone(),
        size_gb: spec.volume_gb,
        block_type: spec.volume_type,
        label: label.clone(),
    }
}

/// Sends the create or the attach of `kind` through `p`, whose mark records
/// its receipt sent right before the request leaves.
async fn send<P: Provider>(
    p: &P,
    kind: ResourceKind,
    spec: &ClientSpec,
    label: &Label,
    vm: Option<&ReceiptRow>,
    volume: Option<&ReceiptRow>,
) -> Result<Outcome<String>, EngineError> {
    Ok(match kind {
        ResourceKind::Vm => map_outcome(p.instance_create(&instance_request(spec, label)).await, |id| id.0),
        ResourceKind::Volume => map_outcome(p.block_create(&block_request(spec, label)).await, |id| id.0),
        ResourceKind::Attach => {
            let vm_id = vm
                .and_then(ReceiptRow::id)
                .map(str::to_string)
                .ok_or_else(|| EngineError::Invariant("attach without VM id".into()))?;
            let vol_id = volume
                .and_then(ReceiptRow::id)
                .map(str::to_string)
                .ok_or_else(|| EngineError::Invariant("attach without volume id".into()))?;
            let o = p.block_attach(&ResourceId::volume(vol_id), &ResourceId::vm(vm_id.clone())).await;
            fail_step!("attach-sent");
            map_outcome(o, |()| vm_id)
        }
    })
}

fn map_outcome<T>(o: Outcome<T>, f: impl FnOnce(T) -> String) -> Outcome<String> {
    match o {
        Outcome::Accepted(t) => Outcome::Accepted(f(t)),
        Outcome::Rejected { status, message } => Outcome::Rejected { status, message },
        Outcome::Unknown { reason } => Outcome::Unknown { reason },
        Outcome::NotSent { reason } => Outcome::NotSent { reason },
    }
}

impl<'a, P: Provider> Converge<'a, P> {
    /// Records the id a label search found for a dispatch whose outcome was
    /// unknown.
    pub(super) async fn adopt(
        mut self,
        kind: ResourceKind,
        id: String,
        r: ReceiptRow,
    ) -> Result<Step<'a, P>, EngineError> {
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
    pub(super) async fn dispatch(mut self, kind: ResourceKind, view: &View) -> Result<Step<'a, P>, EngineError> {
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
}

impl<P: Provider> Run<'_, P> {
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
            ResourceKind::Attach => {
                current::attach_digest(vm.and_then(ReceiptRow::id), volume.and_then(ReceiptRow::id))
            }
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
        let outcome = send(&p, kind, &spec, &label, vm, volume).await?;
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
                if kind == ResourceKind::Attach {
                    self.attach_sighting(vm, volume, now).await?;
                }
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

    /// An attach answered 2xx: Vultr found the volume (its id in the path)
    /// and the VM (its id in the body) by id. That is the sighting deletion
    /// needs, so it can send its DELETE first (docs/protocol.md §3.3).
    async fn attach_sighting(
        &self,
        vm: Option<&ReceiptRow>,
        volume: Option<&ReceiptRow>,
        now: i64,
    ) -> Result<(), EngineError> {
        for r in [vm, volume].into_iter().flatten().filter(|r| !r.progress().seen) {
            self.w.receipts.mark_seen(&r.operation_key, now).await?;
        }
        Ok(())
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

    pub(super) async fn resend_planted_bug(&self, kind: ResourceKind, r: &ReceiptRow) {
        let spec = &self.infra.spec;
        match kind {
            ResourceKind::Vm => {
                let _ = self.w.provider.instance_create(&instance_request(spec, &r.label)).await;
            }
            _ => {
                let _ = self.w.provider.block_create(&block_request(spec, &r.label)).await;
            }
        }
    }
}

impl<'a, P: Provider> Converge<'a, P> {
    /// Records that the resource has been seen (deletion bookkeeping).
    pub(super) async fn mark_seen(self, r: ReceiptRow) -> Result<Step<'a, P>, EngineError> {
        self.run.w.receipts.mark_seen(&r.operation_key, self.run.w.now_ms()).await?;
        Ok(Step::Next(self))
    }
}
