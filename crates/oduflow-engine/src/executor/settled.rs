//! Where a run ends: the client ready (its backup schedule and other
//! identities first), deleted, or blocked with its evidence.

use super::*;
use oduflow_model::ledger::Effect;

/// Times the backup schedule is set without reading back before the client
/// blocks `config_mismatch`: a set is repeatable, but not for ever.
const BACKUP_SCHEDULE_SETS_MAX: i64 = 3;

/// Where setting the backup schedule stands.
enum Backups {
    Done,
    WaitUntil(i64),
    Stuck(String),
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
            .unwrap_or_else(|| match r.effect() {
                Effect::Unmarked { .. } => "claimed, never marked sent, and not recorded as stopped (a worker \
                                            stopped or died before its request left, or its mark is late)"
                    .to_owned(),
                _ => "no answer was recorded (the worker died or rolled back after sending)".to_owned(),
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

impl<'a, P: Provider> Converge<'a, P> {
    /// Blocks the client with the reason and its evidence.
    pub(super) async fn block(
        mut self,
        reason: BlockedReason,
        detail: String,
        view: &View,
    ) -> Result<Step<'a, P>, EngineError> {
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
    pub(super) async fn ready(mut self, attach: Option<&ReceiptRow>) -> Result<Step<'a, P>, EngineError> {
        fail_step!("attach-confirmed");
        // What this run's reads showed (both are read before Ready).
        if let (Seen::Present(vm), Seen::Present(vol)) = (&self.reads.vm.seen, &self.reads.volume.seen) {
            self.run.infra.outputs = ServerOutputs { mount_id: vol.outputs.mount_id.clone(), ..vm.outputs.clone() };
            self.attach_confirmed(attach, &vm.id, vol).await?;
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

    /// An attach whose answer was lost is confirmed by the read that shows
    /// the volume attached to the VM: its receipt records the VM's id as
    /// `confirmed_by_read`, as an answered attach records it as `response`,
    /// so it is no longer counted as an unknown outcome. Only an attach
    /// marked sent (one never marked may never have left: what attached the
    /// volume is then not known to be it), and only of this very pair.
    async fn attach_confirmed(&self, attach: Option<&ReceiptRow>, vm: &str, vol: &Facts) -> Result<(), EngineError> {
        let Some(r) = attach.filter(|r| matches!(r.effect(), Effect::Unknown { .. })) else { return Ok(()) };
        if vol.attached_to.as_deref() != Some(vm) || r.spec_digest != current::attach_digest(Some(vm), Some(&vol.id)) {
            return Ok(());
        }
        let w = self.run.w;
        w.receipts.record_id(&r.operation_key, vm, IdSource::ConfirmedByRead, w.now_ms()).await?;
        Ok(())
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
    pub(super) async fn deleted(mut self) -> Result<Step<'a, P>, EngineError> {
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
