//! Dry runs: what `client update` and `client delete` would do, checked as
//! the real commands check, with nothing recorded and nothing sent (reads
//! only: an update's plan is checked against Vultr's list of upgrades).

use super::intent::plan_check;
use super::*;
use oduflow_model::update::{FieldChange, SpecUpdate, changes};

/// `client update NAME ... --dry-run`.
#[derive(Clone, Debug, Serialize)]
pub struct UpdatePlan {
    pub name: String,
    /// Field by field: from, to, and what the change does at Vultr.
    pub changes: Vec<FieldChange>,
    /// The block that stays after the update (one the update does not
    /// resolve): the change waits for `reconcile`.
    pub stays_blocked: Option<BlockedReason>,
    /// Why the new plan could not be checked against Vultr's upgrades (the
    /// worker checks it before it sends anything).
    pub plan_unchecked: Option<String>,
}

/// What `client_update` would record, or its refusal, the same one.
pub async fn client_update_plan<P: Provider>(
    store: &Store,
    provider: Option<&P>,
    name: &str,
    update: &SpecUpdate,
) -> Result<UpdatePlan> {
    super::import::refuse_if_observed(&client(store, name).await?)?;
    let plan_unchecked = plan_check(store, provider, name, update).await?;
    let p = store.client_update_preview(name, update).await?;
    let mut changes = changes(&p.client.infra.spec, &p.spec, p.created);
    if changes.is_empty() {
        // The spec stands (the server differs, or Vultr refused the change).
        changes.push(FieldChange {
            field: "(spec)",
            from: "what the server shows".into(),
            to: "the spec, as it is".into(),
            effect: "the spec stands: what differs is sent again, one PATCH per resource, applied at once",
        });
    }
    Ok(UpdatePlan {
        name: name.to_owned(),
        changes,
        stays_blocked: p.blocked_stays.then_some(p.client.infra.blocked_reason).flatten(),
        plan_unchecked,
    })
}

/// `client delete NAME --dry-run`.
#[derive(Clone, Debug, Serialize)]
pub struct DeletePlan {
    pub name: String,
    /// Deletion was asked already: deleting again changes nothing.
    pub already_absent: bool,
    /// Each resource and identity, and what deletion does with it.
    pub deletes: Vec<Deletes>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Deletes {
    /// vm, volume, attach, or an identity adapter's name.
    pub what: String,
    pub detail: String,
}

/// What `client_delete` would do to `name`'s resources and identities.
pub async fn client_delete_plan(store: &Store, name: &str) -> Result<DeletePlan> {
    let c = client(store, name).await?;
    super::import::refuse_if_observed(&c)?;
    let mut deletes = vec![];
    for kind in [ResourceKind::Attach, ResourceKind::Vm, ResourceKind::Volume] {
        let (r, _) = current_receipt(store, &c, kind).await?;
        let detail = match r.as_ref().map(|r| (r, r.effect())) {
            None => "none: never dispatched".to_owned(),
            Some((_, Effect::Rejected { status, .. })) => format!("none: its create was refused ({status})"),
            Some((r, Effect::Abandoned { .. })) => format!("none: abandoned; label {} stays watched", r.label),
            Some((_, Effect::Known { id, .. })) if kind == ResourceKind::Attach => {
                format!("volume detached from vm {id} first")
            }
            Some((_, Effect::Known { id, .. })) => {
                format!(
                    "DELETE {} {id}, confirmed by GET 404",
                    if kind == ResourceKind::Vm { "instance" } else { "block" }
                )
            }
            Some((_, _)) if kind == ResourceKind::Attach => "no attach known: nothing to detach".to_owned(),
            Some((r, _)) => format!(
                "its create's outcome is unknown: looked for under label {} and deleted if found (blocked \
                 uncertain_delete if it cannot be decided)",
                r.label
            ),
        };
        deletes.push(Deletes { what: kind.as_str().to_owned(), detail });
    }
    for a in store.adapter_states(&c.id).await? {
        // An adapter's ownership record lists what it made (the DNS
        // adapter: `records`, each with its type and name).
        let records = a.owned.get("records").and_then(|r| r.as_array()).map_or(vec![], |rs| {
            rs.iter()
                .map(|r| format!("{} {}", r["rtype"].as_str().unwrap_or("?"), r["name"].as_str().unwrap_or("?")))
                .collect()
        });
        let owned = if records.is_empty() { String::new() } else { format!(": {}", records.join(", ")) };
        deletes.push(Deletes {
            what: a.adapter,
            detail: format!("identity removed through its adapter (now {}){owned}", a.state.as_str()),
        });
    }
    Ok(DeletePlan { name: c.name, already_absent: c.infra.target == Target::Absent, deletes })
}
