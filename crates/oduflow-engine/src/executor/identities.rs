//! The client's other identities (DNS, VPN, Salt, ...): ensured once the VM
//! and volume are ready, removed once they are gone, each confirmed by the
//! adapter's own check. What an adapter owns (a DNS record's id) is kept in
//! its durable ownership record, written by compare-and-set on the receipt
//! writer's connection (the identity's state too, on the same version); the
//! facts an identity was ensured with are recorded
//! with it, so a removal gets them back and a change of them (a new address,
//! a new DNS name) ensures it again.

use super::Run;
use crate::{EngineError, ReceiptWriter, Worker, fail_step};
use oduflow_model::identity::{
    AdapterError, AdapterState, BoxFuture, IdentityAdapter, IdentityTarget, Ownership, Presence,
};
use oduflow_model::provider::{Provider, Sending};
use oduflow_model::*;
use oduflow_store::{AdapterStateRow, Finish};
use std::sync::Mutex;

/// Failed steps of one identity adapter before its client is blocked
/// `adapter_failed`: enough to ride out a flaky command or API, few enough
/// that an operator hears of a broken one within minutes.
pub(super) const ADAPTER_FAILURES_MAX: i64 = 5;

/// One adapter's ownership record for one client, as this run read it.
pub(super) struct StoredOwnership {
    receipts: ReceiptWriter,
    client: ClientId,
    adapter: String,
    now_ms: i64,
    /// What was recorded, and its version (the compare-and-set's).
    state: Mutex<(serde_json::Value, i64)>,
    /// The run's guard, which the adapter's requests carry.
    sending: Sending,
}

impl StoredOwnership {
    pub(super) fn new<P: Provider>(
        w: &Worker<P>,
        client: &ClientId,
        adapter: &str,
        row: Option<&AdapterStateRow>,
        now_ms: i64,
    ) -> Self {
        let (owned, version) = row.map_or((serde_json::Value::Null, 0), |r| (r.owned.clone(), r.owned_version));
        Self {
            receipts: w.receipts.clone(),
            sending: w.provider.sending().clone(),
            client: client.clone(),
            adapter: adapter.to_owned(),
            now_ms,
            state: Mutex::new((owned, version)),
        }
    }

    /// The version this run last read or wrote: its ownership and state
    /// writes are recorded only while no other run has written since.
    fn version(&self) -> i64 {
        self.state.lock().expect("ownership lock poisoned").1
    }
}

/// A state write refused because another run recorded the identity's
/// ownership since this one read it: this run is stale (its claim lost, or
/// it outlived it) and stops; its job is retried, and the retry reads the
/// ownership as it now is.
fn stale_state(adapter: &str) -> EngineError {
    EngineError::ClaimLost(format!("another run recorded {adapter}'s ownership since this run read it"))
}

impl Ownership for StoredOwnership {
    fn get(&self) -> serde_json::Value {
        self.state.lock().expect("ownership lock poisoned").0.clone()
    }

    fn sending(&self) -> Sending {
        self.sending.clone()
    }

    /// An adapter's own steps are crash points too (test builds only).
    fn reached(&self, step: &str) {
        crate::crash_if_asked(step);
    }

    fn put(&self, v: serde_json::Value) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let put =
                self.receipts.ledger().adapter_owned_put(&self.client, &self.adapter, &v, self.version(), self.now_ms);
            match put.await {
                Ok(Some(version)) => {
                    *self.state.lock().expect("ownership lock poisoned") = (v, version);
                    Ok(())
                }
                Ok(None) => Err(format!(
                    "another run recorded {}'s ownership since this one read it: this run is stale and stops",
                    self.adapter
                )),
                Err(e) => Err(format!("recording {}'s ownership: {e}", self.adapter)),
            }
        })
    }
}

impl<'a, P: Provider> Run<'a, P> {
    /// Whom the identities belong to, with the facts of this run: the
    /// addresses from this run's read of the VM (or one more read when the
    /// run has none).
    pub(super) async fn identity_target(&self, removing: bool) -> Result<IdentityTarget, EngineError> {
        let name = self
            .w
            .store
            .client_get_by_id(&self.infra.client_id)
            .await?
            .map(|c| c.name)
            .ok_or_else(|| EngineError::Invariant("client vanished".into()))?;
        let mut outputs = self.infra.outputs.clone();
        if !removing
            && outputs.main_ip.is_empty()
            && let Some(vm) = &self.infra.vm_id
        {
            if let Some(i) = self.w.provider.instance_get(vm).await.ok().flatten() {
                (outputs.main_ip, outputs.v6_main_ip) = (i.main_ip, i.v6_main_ip);
            }
            self.halted()?;
        }
        let main_ip = Some(outputs.main_ip.clone()).filter(|ip| !ip.is_empty());
        Ok(IdentityTarget {
            dns_name: self.infra.spec.dns_name.clone().unwrap_or_else(|| name.clone()),
            client: name,
            client_id: self.infra.client_id.to_string(),
            main_ip,
            outputs,
            hostname: self.infra.spec.server.hostname.clone(),
            plan: self.infra.spec.plan.clone(),
            volume_gb: self.infra.spec.volume_gb,
            removing,
        })
    }

    /// Counts an adapter failure; past the limit, blocks naming the adapter.
    pub(super) async fn adapter_failed(
        mut self,
        adapter: &str,
        state: AdapterState,
        error: String,
        now: i64,
    ) -> Result<Finish, EngineError> {
        let n = self.w.receipts.adapter_fail(&self.infra.client_id, adapter, state, &error, now).await?;
        if n >= ADAPTER_FAILURES_MAX {
            let detail = format!("adapter {adapter}: {error} ({n} attempts)");
            self.infra.status = ClientStatus::Blocked;
            self.infra.blocked_reason = Some(BlockedReason::AdapterFailed);
            self.infra.blocked_detail = Some(detail.clone());
            self.event(
                EventKind::Blocked,
                serde_json::json!({ "reason": BlockedReason::AdapterFailed, "detail": detail }),
            );
            return Ok(self.done());
        }
        let at = now + self.w.cfg.poll_interval_ms * n;
        Ok(self.wait(at))
    }

    /// An adapter step that did not succeed: a failure is counted, a
    /// pending resolution comes back after a poll interval, a block blocks.
    async fn adapter_error(
        self,
        a: &str,
        state: AdapterState,
        e: AdapterError,
        now: i64,
    ) -> Result<Finish, EngineError> {
        match e {
            AdapterError::Failed(e) => self.adapter_failed(a, state, e, now).await,
            AdapterError::Pending(detail) => {
                let w = self.w;
                let audit = serde_json::json!({ "adapter": a, "detail": detail });
                w.receipts.audit(&self.infra.client_id, EventKind::AdapterPending, audit, now).await?;
                Ok(self.wait(now + w.cfg.poll_interval_ms))
            }
            AdapterError::Waiting { until_ms, detail } => {
                let w = self.w;
                let audit = serde_json::json!({ "adapter": a, "detail": detail, "until_ms": until_ms });
                w.receipts.audit(&self.infra.client_id, EventKind::AdapterPending, audit, now).await?;
                Ok(self.wait(until_ms.max(now + w.cfg.poll_interval_ms)))
            }
            AdapterError::Blocked(reason, detail) => Ok(self.block(reason, format!("adapter {a}: {detail}"))),
        }
    }

    /// Whether an adapter's identity is ensured with these facts. Rows
    /// recorded before facts were (`{}`) count as current.
    fn ensured(row: Option<&AdapterStateRow>, facts: &serde_json::Value) -> bool {
        row.is_some_and(|s| {
            s.state == AdapterState::Ensured && (s.facts == *facts || s.facts.as_object().is_some_and(|o| o.is_empty()))
        })
    }

    /// Ensures the next adapter whose identity is not yet confirmed present
    /// with this run's facts. `None` once every adapter is.
    pub(super) async fn adapters_present(&mut self) -> Result<Option<Finish>, EngineError> {
        let w = self.w;
        if w.adapters.is_empty() {
            return Ok(None);
        }
        let states = w.store.adapter_states(&self.infra.client_id).await?;
        let t = self.identity_target(false).await?;
        let facts = t.facts();
        for a in w.adapters.iter() {
            let row = states.iter().find(|s| s.adapter == a.name());
            if Self::ensured(row, &facts) {
                continue;
            }
            self.check_fence().await?;
            let now = w.now_ms();
            let own = StoredOwnership::new(w, &self.infra.client_id, a.name(), row, now);
            let run = std::mem::replace(self, self.clone_shallow());
            return Ok(Some(run.ensure_one(a.as_ref(), &t, &own, &facts, now).await?));
        }
        Ok(None)
    }

    async fn ensure_one(
        self,
        a: &dyn IdentityAdapter,
        t: &IdentityTarget,
        own: &StoredOwnership,
        facts: &serde_json::Value,
        now: i64,
    ) -> Result<Finish, EngineError> {
        let w = self.w;
        let ensured = a.ensure(t, own).await;
        self.halted()?;
        let ensured = match ensured {
            Err(e) => return self.adapter_error(a.name(), AdapterState::Ensuring, e, now).await,
            Ok(d) => d,
        };
        let checked = a.check(t, own).await;
        self.halted()?;
        match checked {
            Ok(Presence::Present(d)) => {
                let (client, v) = (&self.infra.client_id, own.version());
                if !w.receipts.adapter_set(client, a.name(), AdapterState::Ensured, &d, Some(facts), v, now).await? {
                    return Err(stale_state(a.name()));
                }
                Ok(self.wait(now))
            }
            Ok(Presence::Absent) => {
                self.adapter_failed(a.name(), AdapterState::Ensuring, format!("absent after ensure ({ensured})"), now)
                    .await
            }
            Err(e) => self.adapter_error(a.name(), AdapterState::Ensuring, e, now).await,
        }
    }

    /// Removes the next adapter whose identity is not yet confirmed absent,
    /// with the facts it was ensured with. `None` once every adapter's
    /// check has reported absence.
    pub(super) async fn adapters_absent(&mut self) -> Result<Option<Finish>, EngineError> {
        let w = self.w;
        let states = w.store.adapter_states(&self.infra.client_id).await?;
        // An identity this client may still have whose adapter is no longer
        // configured: nothing here can remove it, so the client is not
        // deleted; the evidence names it.
        let orphaned: Vec<&AdapterStateRow> = states
            .iter()
            .filter(|s| s.state != AdapterState::Removed && !w.adapters.iter().any(|a| a.name() == s.adapter))
            .collect();
        if !orphaned.is_empty() {
            let names: Vec<String> =
                orphaned.iter().map(|s| format!("{} ({}: {})", s.adapter, s.state, s.detail)).collect();
            let detail = format!(
                "identities recorded for this client whose adapter is no longer configured: {}",
                names.join("; ")
            );
            let run = std::mem::replace(self, self.clone_shallow());
            return Ok(Some(run.block(BlockedReason::AdapterUnconfigured, detail)));
        }
        if w.adapters.is_empty() {
            return Ok(None);
        }
        let current = self.identity_target(true).await?;
        for a in w.adapters.iter() {
            let row = states.iter().find(|s| s.adapter == a.name());
            if row.is_some_and(|s| s.state == AdapterState::Removed) {
                continue;
            }
            self.check_fence().await?;
            let t = match row {
                Some(r) => current.clone().with_facts(&r.facts),
                None => current.clone(),
            };
            let now = w.now_ms();
            let own = StoredOwnership::new(w, &self.infra.client_id, a.name(), row, now);
            let run = std::mem::replace(self, self.clone_shallow());
            return Ok(Some(run.remove_one(a.as_ref(), &t, &own, now).await?));
        }
        Ok(None)
    }

    async fn remove_one(
        self,
        a: &dyn IdentityAdapter,
        t: &IdentityTarget,
        own: &StoredOwnership,
        now: i64,
    ) -> Result<Finish, EngineError> {
        let w = self.w;
        let removed = a.remove(t, own).await;
        self.halted()?;
        if let Err(e) = removed {
            return self.adapter_error(a.name(), AdapterState::Removing, e, now).await;
        }
        fail_step!("adapter-removed");
        let checked = a.check(t, own).await;
        self.halted()?;
        match checked {
            Ok(Presence::Absent) => {
                let (client, v) = (&self.infra.client_id, own.version());
                let why = "check reports absence";
                if !w.receipts.adapter_set(client, a.name(), AdapterState::Removed, why, None, v, now).await? {
                    return Err(stale_state(a.name()));
                }
                Ok(self.wait(now))
            }
            Ok(Presence::Present(d)) => {
                self.adapter_failed(a.name(), AdapterState::Removing, format!("still present after remove: {d}"), now)
                    .await
            }
            Err(e) => self.adapter_error(a.name(), AdapterState::Removing, e, now).await,
        }
    }
}
