//! The deletion: one DELETE per run, recorded only after a GET sent after it
//! answered 404 (docs/protocol.md §3.3).

use super::*;

impl<'a, P: Provider> Converge<'a, P> {
    /// Sends a DELETE (the run's one side effect).
    pub(super) async fn delete(self, kind: ResourceKind, id: String, view: &View) -> Result<Step<'a, P>, EngineError> {
        if self.side_effects > 0 {
            return Ok(Step::Finish(self.run.wait(self.now)));
        }
        let r = view.receipt(kind, "delete")?;
        Ok(Step::Finish(self.run.delete(kind, &id, &r, self.now).await?))
    }

    /// Records a deletion, once a GET sent after the DELETE answered 404.
    pub(super) async fn confirm_deleted(
        mut self,
        kind: ResourceKind,
        r: ReceiptRow,
    ) -> Result<Step<'a, P>, EngineError> {
        if r.delete_sent_at().is_none_or(|d| self.reads.of(kind).at <= d) {
            self.reads.of_mut(kind).seen = Seen::NotRead;
            return Ok(Step::Next(self));
        }
        let w = self.run.w;
        w.receipts.mark_deleted(&r.operation_key, w.now_ms()).await?;
        fail_step!("get-404-recorded");
        let id = r.id();
        self.run.event(EventKind::ResourceDeleted, serde_json::json!({ "kind": kind, "id": id }));
        self.run.set_id(kind, None);
        Ok(Step::Next(self))
    }
}

impl<P: Provider> Run<'_, P> {
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
        if sent && !r.progress().delete_sent {
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
            Ok(DeleteOutcome::Sent) if r.progress().delete_sent => {
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
