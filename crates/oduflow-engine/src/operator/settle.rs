//! An operator settles what an identity adapter blocked a client on
//! (`oduflow adopt NAME --kind dns --id RECORD`, `oduflow abandon NAME
//! --kind dns`, and the API's same actions): the adapter decides what its
//! ownership becomes ([`IdentityAdapter::settle`]); this records it by
//! compare-and-set, with the operator's event, and queues the client again.

use super::{Actor, OperatorError, Result, client, refuse_if_restored, refused};
use oduflow_model::identity::{IdentityAdapter, IdentityTarget, Settle, SettleError};
use oduflow_model::*;
use oduflow_store::{ClientRow, ReceiptLedger, Store};

/// Settles `name`'s block through `adapter`. Refused, with nothing recorded:
/// a restore pending, a client not blocked for this adapter (a run may be
/// making the very resource this moment), a resource another client owns,
/// and whatever the adapter refuses.
pub async fn identity_settle(
    store: &Store,
    adapter: &dyn IdentityAdapter,
    name: &str,
    how: Settle<'_>,
    actor: Actor<'_>,
) -> Result<ClientRow> {
    let invalid = |why: String| OperatorError::Invalid(format!("{why}; nothing was recorded"));
    ClientName::parse(name).map_err(|e| invalid(e.to_string()))?;
    refuse_if_restored(store).await?;
    let c = client(store, name).await?;
    let reason = c.infra.blocked_reason.filter(|_| c.infra.status == ClientStatus::Blocked);
    if !reason.is_some_and(|r| adapter.settles().contains(&r)) {
        let wanted: Vec<&str> = adapter.settles().iter().map(|r| r.as_str()).collect();
        return Err(invalid(format!(
            "{name} is {} ({}), not blocked {}: its {} identity is the machine's to settle",
            c.infra.status.as_str(),
            reason.map_or("no block", BlockedReason::as_str),
            wanted.join(" or "),
            adapter.name()
        )));
    }
    if let Settle::Adopt { id, .. } = how
        && let Some(other) = store.adapter_owners_of(adapter.name(), id).await?.into_iter().find(|o| *o != c.id)
    {
        return Err(invalid(format!(
            "{} {id} is owned by another client ({other}), and what an identity owns is one client's: give {name} \
             another --dns-name",
            adapter.name()
        )));
    }
    let states = store.adapter_states(&c.id).await?;
    let st = states.iter().find(|s| s.adapter == adapter.name());
    let (owned, version) = st.map_or((serde_json::Value::Null, 0), |s| (s.owned.clone(), s.owned_version));
    let settled = adapter.settle(&target(&c), &owned, how).await.map_err(|e| match e {
        SettleError::Refused(why) => invalid(why),
        SettleError::Provider(e) => OperatorError::Provider(e),
    })?;
    let ledger = ReceiptLedger::acting_for(store.clone(), actor.by);
    let now = actor.now_ms;
    if ledger.adapter_owned_put(&c.id, adapter.name(), &settled.owned, version, now).await?.is_none() {
        return refused(format!(
            "{name}'s {} ownership changed while this action ran (a worker recorded it): ask again",
            adapter.name()
        ));
    }
    ledger.event_append(Some(&c.id), settled.event, &settled.detail, now).await?;
    Ok(store.client_reconcile(name, &[], actor.by, now, actor.attempts_max).await?)
}

/// Whom the settlement is for: the client as recorded (an operator's
/// settlement asks the provider nothing about the VM).
pub(super) fn target(c: &ClientRow) -> IdentityTarget {
    let spec = &c.infra.spec;
    IdentityTarget {
        client: c.name.clone(),
        client_id: c.id.to_string(),
        main_ip: Some(c.infra.outputs.main_ip.clone()).filter(|ip| !ip.is_empty()),
        outputs: c.infra.outputs.clone(),
        hostname: spec.server.hostname.clone(),
        dns_name: spec.dns_name.clone().unwrap_or_else(|| c.name.clone()),
        plan: spec.plan.clone(),
        volume_gb: spec.volume_gb,
        removing: c.infra.target == Target::Absent,
    }
}
