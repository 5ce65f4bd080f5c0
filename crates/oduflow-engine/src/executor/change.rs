//! Changes to a running server or volume: one PATCH per change
//! receipt, claimed and committed before it is sent, sent again only while
//! provably never sent, and confirmed only by a read (see
//! `oduflow_model::decide` for when each step is taken).

use super::{Converge, MarkOf, Run, SentMark, Step, View, poll_delay};
use crate::{EngineError, fail_step};
use oduflow_model::decide::{Change, Seen};
use oduflow_model::identity::AdapterState;
use oduflow_model::ledger::Effect;
use oduflow_model::provider::{Outcome, Provider, ResourceId};
use oduflow_model::*;
use oduflow_store::{ChangeAnswer, ChangeRow, Finish, GenerationCount, NewChange, ReceiptRow};
use std::sync::Arc;

/// The one PATCH a change is: the instance's or the block's (`kind`'s,
/// by its recorded `id`).
async fn send<P: Provider>(p: &P, kind: ResourceKind, id: &str, change: &Change) -> Result<Outcome<()>, EngineError> {
    Ok(match (ResourceId::new(kind, id), change) {
        (ResourceId::Instance(i), Change::Instance(c)) => p.instance_update(&i, c).await,
        (ResourceId::Block(b), Change::VolumeSize(gb)) => p.block_resize(&b, *gb).await,
        (id, _) => return Err(EngineError::Invariant(format!("{change:?} is not a change of {id:?}"))),
    })
}

/// What Vultr's list of upgrades says of a plan change.
enum Upgrade {
    Offered,
    Refused(BlockedReason, String),
    ReadAgainAt(i64),
}

impl View {
    /// The change receipt for `kind`'s current resource at the record's spec
    /// generation.
    pub(super) fn change_of(&self, infra: &oduflow_store::InfraRow, kind: ResourceKind) -> Option<&ChangeRow> {
        let id = self.cur.receipt(kind)?.id()?;
        let key = oduflow_store::change_key(&infra.client_id, kind, infra.spec_generation, id);
        self.changes.iter().find(|c| c.operation_key == key)
    }

    /// Vultr refuses a volume's resize within a minute of the last one:
    /// whether a resize of this volume that was not refused was sent after
    /// `since`.
    pub(super) fn resize_settling(&self, kind: ResourceKind, r: Option<&ReceiptRow>, since: i64) -> bool {
        let id = r.and_then(ReceiptRow::id);
        kind == ResourceKind::Volume
            && self.changes.iter().any(|c| {
                Some(c.resource_id.as_str()) == id
                    && !matches!(c.effect(), Effect::Rejected { .. })
                    && c.sent_at().is_some_and(|t| t > since)
            })
    }
}

impl<'a, P: Provider> Converge<'a, P> {
    /// Sends the PATCH that removes the drift the last read showed: first
    /// checked against Vultr's list of upgrades for a plan, then claimed on
    /// its receipt (or sent again on it, if provably never sent).
    pub(super) async fn change(mut self, kind: ResourceKind, view: &View) -> Result<Step<'a, P>, EngineError> {
        if self.side_effects > 0 {
            return Ok(Step::Finish(self.run.wait(self.now)));
        }
        let Seen::Present(f) = &self.reads.of(kind).seen else {
            return Err(EngineError::Invariant("change without a read".into()));
        };
        let (id, d) = match &f.drift {
            Some(d) => (f.id.clone(), (**d).clone()),
            None => return Err(EngineError::Invariant("change without a drift".into())),
        };
        if let Change::Instance(c) = &d.change
            && let Some(plan) = &c.plan
        {
            match self.upgrade_check(&id, plan).await? {
                Upgrade::Offered => {}
                Upgrade::Refused(reason, detail) => return Ok(Step::Finish(self.run.block(reason, detail))),
                Upgrade::ReadAgainAt(at) => return Ok(Step::Finish(self.run.wait(at))),
            }
        }
        self.side_effects += 1;
        let w = self.run.w;
        let client = self.run.infra.client_id.clone();
        let key = match view.change_of(&self.run.infra, kind) {
            Some(unsent) => unsent.operation_key.clone(),
            None => {
                let c = NewChange {
                    client_ref: client.clone(),
                    resource_kind: kind,
                    resource_id: id.clone(),
                    spec_generation: self.run.infra.spec_generation,
                    change: serde_json::to_value(&d.change).unwrap_or_default(),
                    key_fingerprint: w.provider.key_fingerprint(),
                    claimed_ms: w.now_ms(),
                };
                w.receipts.ledger().change_claim(&c).await?
            }
        };
        fail_step!("change-claimed");
        self.run.check_fence().await?;
        // Marked sent right before the PATCH leaves, after its rate slot
        // and the run's guard: a PATCH stopped before that never left.
        let mark = Arc::new(SentMark::new(w, MarkOf::Change(key.clone()), client.clone(), false));
        let outcome = send(&w.provider.marked(mark.clone()), kind, &id, &d.change).await?;
        fail_step!("change-sent");
        if let Outcome::NotSent { reason } = &outcome {
            // Known by this live worker even if it no longer holds the
            // client. Without its own mark, recorded only if no other run
            // has marked the change sent since.
            let answer = match mark.marked() {
                true => ChangeAnswer::NotSent(reason.clone()),
                false => ChangeAnswer::Stopped(reason.clone()),
            };
            w.receipts.ledger().change_record(&key, &client, &answer, w.now_ms()).await?;
            self.run.halted()?;
            let at = self.now + w.cfg.poll_interval_ms;
            return Ok(Step::Finish(self.run.wait(at)));
        }
        self.run.halted()?;
        let answer = match outcome {
            Outcome::Accepted(()) => ChangeAnswer::Accepted,
            // The read before the send showed the drift: "Nothing to change"
            // now means it is gone (or going), so read again; never a
            // definitive rejection.
            Outcome::Rejected { message, .. } if message.to_ascii_lowercase().contains("nothing to change") => {
                ChangeAnswer::NothingToChange
            }
            Outcome::Rejected { status, message } => ChangeAnswer::Rejected { status, message },
            Outcome::Unknown { reason } => ChangeAnswer::Unknown(reason),
            Outcome::NotSent { reason } => ChangeAnswer::NotSent(reason),
        };
        w.receipts.ledger().change_record(&key, &client, &answer, w.now_ms()).await?;
        fail_step!("change-answer-recorded");
        self.run.event(EventKind::ChangeSent, serde_json::json!({ "kind": kind, "id": id, "change": d.change }));
        if matches!(answer, ChangeAnswer::Rejected { .. }) {
            return Ok(Step::Next(self));
        }
        let at = self.now + w.cfg.poll_interval_ms;
        Ok(Step::Finish(self.run.wait(at)))
    }

    /// A plan Vultr does not list as an upgrade of this VM blocks
    /// `update_rejected` before anything is sent (a plan only grows).
    async fn upgrade_check(&mut self, id: &str, plan: &str) -> Result<Upgrade, EngineError> {
        let w = self.run.w;
        let plans = w.provider.instance_upgrade_plans(&ResourceId::vm(id)).await;
        self.run.halted()?;
        Ok(match plans {
            Ok(plans) if plans.iter().any(|p| p == plan) => Upgrade::Offered,
            Ok(plans) => Upgrade::Refused(
                BlockedReason::UpdateRejected,
                format!(
                    "vm {id}: plan {plan} is not among the upgrades Vultr offers for it ({}); a plan only grows, \
                     and nothing was sent: `client update --plan` one of those, or back to the plan it has",
                    if plans.is_empty() { "none".to_owned() } else { plans.join(", ") }
                ),
            ),
            Err(e) => {
                // Counted like the preflight's failed reads: past the polling
                // limit the client blocks with the error as evidence.
                // Counted per spec generation: an update or a reconcile
                // starts the count again.
                let generation = self.run.infra.spec_generation;
                let progress = &mut self.run.infra.progress;
                let n = progress.upgrades_read_failures_at(generation) + 1;
                progress.upgrades_read_failures = Some(GenerationCount { generation, count: n });
                if n >= w.cfg.observations_max {
                    let detail =
                        format!("vm {id}: reading its upgrades failed {n} times (the polling limit); last: {e}");
                    Upgrade::Refused(BlockedReason::ProviderUnavailable, detail)
                } else {
                    Upgrade::ReadAgainAt(self.now + poll_delay(w.cfg.poll_interval_ms, n))
                }
            }
        })
    }

    /// A read shows the spec: the change is done.
    pub(super) async fn confirm_change(mut self, kind: ResourceKind, view: &View) -> Result<Step<'a, P>, EngineError> {
        let w = self.run.w;
        let c = view
            .change_of(&self.run.infra, kind)
            .ok_or_else(|| EngineError::Invariant("confirm without a change".into()))?;
        w.receipts.ledger().change_confirm(&c.operation_key, &self.run.infra.client_id, w.now_ms()).await?;
        fail_step!("change-confirmed");
        self.run.event(
            EventKind::ChangeConfirmed,
            serde_json::json!({ "kind": kind, "id": c.resource_id, "change": c.change }),
        );
        Ok(Step::Next(self))
    }

    /// A read that does not show the change yet counts against the polling
    /// limit; the run waits for the next poll.
    pub(super) async fn count_change(self, kind: ResourceKind, view: &View) -> Result<Step<'a, P>, EngineError> {
        let w = self.run.w;
        let c = view
            .change_of(&self.run.infra, kind)
            .ok_or_else(|| EngineError::Invariant("count without a change".into()))?;
        // A planted bug, for proving the campaign catches a PATCH sent twice
        // on one receipt (as a client that retries a timed-out PATCH would).
        if w.cfg.planted.is(crate::Bug::ResendChange)
            && let Seen::Present(f) = &self.reads.of(kind).seen
            && let Some(d) = &f.drift
        {
            let _ = send(w.provider.as_ref(), kind, &f.id, &d.change).await;
        }
        let summary = match &self.reads.of(kind).seen {
            Seen::Present(f) => format!("{}: {}", f.state, f.drift.as_ref().map_or("", |d| d.what.as_str())),
            other => format!("{other:?}"),
        };
        let n = w.receipts.ledger().change_observe(&c.operation_key, &summary).await?;
        let at = self.now + poll_delay(w.cfg.poll_interval_ms, n);
        Ok(Step::Finish(self.run.wait(at)))
    }
}

impl<P: Provider> Run<'_, P> {
    /// Once per spec generation with a confirmed change, each adapter's
    /// `update` (a command adapter's optional `update` command), with the new
    /// facts. A failure counts like the adapter's other failures (blocking
    /// `adapter_failed` at the limit); `None` once done or nothing to do.
    pub(super) async fn adapters_update(&mut self) -> Result<Option<Finish>, EngineError> {
        let w = self.w;
        let generation = self.infra.spec_generation;
        let done = self.infra.progress.updated_generation;
        if generation == 0 || done >= generation || w.adapters.is_empty() {
            return Ok(None);
        }
        // Any change confirmed since the adapters last ran: one confirmed at
        // an earlier generation counts too (a reconcile or another update
        // may have moved the generation on before the client was ready).
        let changes = w.store.changes_for_client(&self.infra.client_id).await?;
        let confirmed = changes.iter().any(|c| c.spec_generation > done && matches!(c.effect(), Effect::Known { .. }));
        if confirmed {
            let t = self.identity_target(false).await?;
            let states = w.store.adapter_states(&self.infra.client_id).await?;
            for a in w.adapters.iter() {
                let now = w.now_ms();
                let row = states.iter().find(|s| s.adapter == a.name());
                let own = super::identities::StoredOwnership::new(w, &self.infra.client_id, a.name(), row, now);
                let Some(update) = a.update(&t, &own) else { continue };
                self.check_fence().await?;
                let result = update.await;
                self.halted()?;
                match result {
                    Ok(detail) => self
                        .event(EventKind::AdapterUpdated, serde_json::json!({ "adapter": a.name(), "detail": detail })),
                    Err(e) => {
                        // The identity stays ensured; the failure is counted.
                        let run = std::mem::replace(self, self.clone_shallow());
                        return Ok(Some(
                            run.adapter_failed(a.name(), AdapterState::Ensured, format!("update: {e}"), now).await?,
                        ));
                    }
                }
            }
        }
        self.infra.progress.updated_generation = generation;
        Ok(None)
    }
}
