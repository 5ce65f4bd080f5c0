//! What a person or a business system asks of a client (create, update,
//! delete) and of the queue, with the refusals both front ends make: the
//! command line and the HTTP API parse the request and render the answer,
//! and refuse the same things because they refuse them here.

use super::{Actor, OperatorError, Result, refused};
use oduflow_model::provider::Provider;
use oduflow_model::update::SpecUpdate;
use oduflow_model::*;
use oduflow_store::{ClientRow, Store};

/// Actions that act on the provider wait, like the queue, until a restored
/// copy of the database has been compared with the provider's inventory
/// (`oduflow reconcile --all`): the copy may lag the cloud.
pub async fn refuse_if_restored(store: &Store) -> Result<()> {
    match store.restore_pending().await? {
        Some(why) => refused(format!("restore pending ({why}): run `oduflow reconcile --all` first")),
        None => Ok(()),
    }
}

/// A spec Vultr's catalog refuses (a region without the volume type, a plan
/// or image it does not list) is bad input, refused before anything is
/// stored. A catalog that cannot be read is the provider's error.
pub async fn preflight<P: Provider>(provider: &P, spec: &ClientSpec) -> Result<()> {
    let problems = provider.catalog(&spec.region).await?.problems(spec);
    if problems.is_empty() {
        return Ok(());
    }
    Err(OperatorError::Invalid(format!("preflight: {}; nothing was stored", problems.join("; "))))
}

/// Records a new client's intent (`present`) and queues its provisioning,
/// after the catalog's preflight when `preflight_with` gives a provider. With
/// `recover`, the id of a client a restored copy lost (its labels name it).
pub async fn client_create<P: Provider>(
    store: &Store,
    preflight_with: Option<&P>,
    name: &ClientName,
    spec: &ClientSpec,
    recover: Option<&ClientId>,
    actor: Actor<'_>,
) -> Result<ClientRow> {
    if let Some(p) = preflight_with {
        store.client_create_refusal(name, spec, recover).await?;
        preflight(p, spec).await?;
    }
    Ok(store.client_create_as(name, spec, recover, actor.by, actor.now_ms, actor.attempts_max).await?)
}

/// What an update recorded, and what it could not check.
#[derive(Debug)]
pub struct Updated {
    pub row: ClientRow,
    /// Why a new plan was not checked against Vultr's upgrades (a failed
    /// read): the worker checks it before it sends anything.
    pub plan_unchecked: Option<String>,
}

/// Changes the client's spec in place and queues the change. With a
/// provider and the client's VM recorded, a plan Vultr does not offer as an
/// upgrade is bad input and nothing is stored.
pub async fn client_update<P: Provider>(
    store: &Store,
    provider: Option<&P>,
    name: &str,
    update: &SpecUpdate,
    actor: Actor<'_>,
) -> Result<Updated> {
    super::import::refuse_if_observed(&super::client(store, name).await?)?;
    let plan_unchecked = plan_check(store, provider, name, update).await?;
    let row = store.client_update(name, update, actor.by, actor.now_ms, actor.attempts_max).await?;
    Ok(Updated { row, plan_unchecked })
}

/// With a provider, a new plan Vultr does not offer as an upgrade is bad
/// input; a failed read leaves it unchecked (the text says why).
pub(super) async fn plan_check<P: Provider>(
    store: &Store,
    provider: Option<&P>,
    name: &str,
    update: &SpecUpdate,
) -> Result<Option<String>> {
    let (Some(plan), Some(p)) = (&update.plan, provider) else { return Ok(None) };
    match plan_refusal(store, p, name, plan).await {
        Ok(None) => Ok(None),
        Ok(Some(why)) => Err(OperatorError::Invalid(format!("{why}; nothing was stored"))),
        Err(OperatorError::Provider(e)) => Ok(Some(e.to_string())),
        Err(e) => Err(e),
    }
}

/// Sets the client's target to `absent` and queues its deletion; deleting
/// again changes nothing.
pub async fn client_delete(store: &Store, name: &str, actor: Actor<'_>) -> Result<ClientRow> {
    super::import::refuse_if_observed(&super::client(store, name).await?)?;
    Ok(store.client_delete(name, actor.by, actor.now_ms, actor.attempts_max).await?)
}

/// Lets workers claim jobs again; refused while a restore is pending.
pub async fn queue_resume(store: &Store, by: &str, now_ms: i64) -> Result<()> {
    if let Some(why) = store.restore_pending().await? {
        return refused(format!("restore pending ({why}): run `oduflow reconcile --all` before resuming the queue"));
    }
    Ok(store.queue_set_paused(false, by, now_ms).await?)
}

/// Before `client update --plan` is recorded: when the client's VM is
/// recorded and `plan` is neither its spec's plan, nor the plan the VM has,
/// nor among the upgrades Vultr lists for it (GET /instances/{id}/upgrades), why the update cannot
/// be made in place (a plan only grows). `None`: nothing to refuse here (the
/// worker checks the list again before it sends anything).
async fn plan_refusal<P: Provider>(store: &Store, provider: &P, name: &str, plan: &str) -> Result<Option<String>> {
    let c = super::client(store, name).await?;
    let Some(vm) = c.infra.vm_id.clone().filter(|_| c.infra.spec.plan != plan) else {
        return Ok(None);
    };
    // Bound to another key: no request (the worker blocks it
    // `credential_changed` before anything is sent).
    if super::check_key(&c, provider).is_err() {
        return Ok(None);
    }
    // Back to the plan the server has is no change at Vultr.
    if provider.instance_get(&vm).await?.is_some_and(|i| i.plan == plan) {
        return Ok(None);
    }
    let plans = provider.instance_upgrade_plans(&vm).await?;
    if plans.iter().any(|p| p == plan) {
        return Ok(None);
    }
    Ok(Some(format!(
        "plan {} -> {plan}: Vultr offers vm {vm} only these upgrades: {} (a plan only grows; to move to a smaller \
         one, create a new client and move the data)",
        c.infra.spec.plan,
        if plans.is_empty() { "none".to_owned() } else { plans.join(", ") }
    )))
}
