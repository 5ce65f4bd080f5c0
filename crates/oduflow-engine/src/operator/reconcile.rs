//! The operator's answers to a dispatch the machine could not decide
//! (docs/protocol.md §6): observe again (`reconcile`), record a named
//! resource after verifying it (`adopt`), or give the dispatch up on an
//! attestation (`abandon`).

use super::*;
use oduflow_store::AbandonGround;

/// `oduflow reconcile NAME [--new-dispatch]`.
pub async fn reconcile<P: Provider>(
    store: &Store,
    provider: &P,
    name: &str,
    new_dispatch: bool,
    actor: Actor<'_>,
) -> Result<ClientRow> {
    let Actor { by: actor, now_ms, attempts_max } = actor;
    let plan = reconcile_plan(store, provider, name, new_dispatch).await?;
    let writer = ReceiptWriter::acting_for(store.clone(), actor);
    for key in &plan.observe_again {
        // Observe again: a fresh polling budget, the spent one kept.
        writer.observations_restart(key).await?;
    }
    Ok(store.client_reconcile(name, &plan.advance, actor, now_ms, attempts_max).await?)
}

/// What `reconcile` would do to `name`, or why it is refused; nothing is
/// written (a dry run stops here).
pub(crate) struct ReconcilePlan {
    /// Dispatches whose polling budget starts afresh.
    pub observe_again: Vec<OperationKey>,
    /// Kinds whose next dispatch generation starts, after a rejection.
    pub advance: Vec<(ResourceKind, i64)>,
}

pub(crate) async fn reconcile_plan<P: Provider>(
    store: &Store,
    provider: &P,
    name: &str,
    new_dispatch: bool,
) -> Result<ReconcilePlan> {
    let c = acting_on(store, name, provider).await?;
    let mut plan = ReconcilePlan { observe_again: vec![], advance: vec![] };
    for kind in [ResourceKind::Vm, ResourceKind::Volume, ResourceKind::Attach] {
        let (Some(r), dg) = current_receipt(store, &c, kind).await? else { continue };
        if matches!(r.effect(), Effect::Rejected { .. }) {
            if new_dispatch {
                plan.advance.push((kind, dg + 1));
            }
        } else {
            plan.observe_again.push(r.operation_key);
        }
    }
    if new_dispatch && plan.advance.is_empty() {
        return refused(format!(
            "{name} has no definitive rejection on its current dispatches: --new-dispatch is allowed only after \
             a 400/401/403/422 answered to the create call itself"
        ));
    }
    Ok(plan)
}

/// `oduflow adopt NAME --kind vm|volume --id ID`: records a resource the
/// operator names for a dispatch whose outcome is unknown (or that has none),
/// after verifying that it exists in the right region with the right
/// configuration and is not recorded anywhere else.
pub async fn adopt<P: Provider>(
    store: &Store,
    provider: &P,
    name: &str,
    kind: ResourceKind,
    id: &str,
    actor: Actor<'_>,
) -> Result<ClientRow> {
    let Actor { by: actor, now_ms, attempts_max } = actor;
    let c = acting_on(store, name, provider).await?;
    if kind == ResourceKind::Attach {
        return refused("only a vm or a volume can be adopted");
    }
    let all = store.receipts_all().await?;
    if let Some(other) = all.iter().find(|r| r.id() == Some(id)) {
        return refused(format!("{id} is already recorded on receipt {}", other.operation_key));
    }
    let spec = &c.infra.spec;
    let (label, mismatch) = read_for_adoption(provider, &c, kind, id).await?;
    let writer = ReceiptWriter::acting_for(store.clone(), actor);
    let (receipt, dg) = current_receipt(store, &c, kind).await?;
    refuse_if_another_dispatchs(&all, receipt.as_ref(), &label, id, name)?;
    if let Some(why) = mismatch {
        return refused(format!("{} {id} does not match {name}'s spec: {why}", kind.as_str()));
    }
    let effect = receipt.as_ref().map(ReceiptRow::effect);
    let op = match receipt {
        Some(_) if let Some(had) = effect.as_ref().and_then(Effect::id) => {
            return refused(format!("{} of {name} already has id {had}", kind.as_str()));
        }
        Some(_) if matches!(effect, Some(Effect::Rejected { .. })) => {
            return refused(format!(
                "the current {} dispatch of {name} was rejected; run `oduflow reconcile {name} --new-dispatch` \
                 to start a new one instead",
                kind.as_str()
            ));
        }
        Some(r) => r.operation_key,
        None => {
            let r = NewReceipt {
                operation_key: OperationKey::new(&c.id, kind, dg),
                client_ref: c.id.clone(),
                resource_kind: kind,
                dispatch_generation: dg,
                label: Label(label.clone()),
                region: spec.region.clone(),
                spec_digest: "adopted".into(),
                key_fingerprint: provider.key_fingerprint(),
                claimed_ms: now_ms,
            };
            writer.claim(&r).await?;
            r.operation_key
        }
    };
    writer.record_id(&op, id, IdSource::AdoptedByOperator, now_ms).await?;
    writer
        .audit(
            &c.id,
            EventKind::ResourceAdoptedByOperator,
            serde_json::json!({ "kind": kind, "id": id, "by": actor }),
            now_ms,
        )
        .await?;
    Ok(store.client_reconcile(name, &[], actor, now_ms, attempts_max).await?)
}

/// A resource carrying the label of another dispatch belongs to that
/// dispatch: its own run adopts it by label. Two receipts owning one
/// resource would let deleting one client delete the other's.
fn refuse_if_another_dispatchs(
    all: &[ReceiptRow],
    receipt: Option<&ReceiptRow>,
    label: &str,
    id: &str,
    name: &str,
) -> Result<()> {
    if let Some(other) = all
        .iter()
        .find(|r| r.label.as_str() == label && receipt.is_none_or(|mine| mine.operation_key != r.operation_key))
    {
        return refused(format!(
            "{id} carries the label of dispatch {} (client {}); it is not {name}'s to adopt",
            other.operation_key, other.client_ref
        ));
    }
    Ok(())
}

/// The label of resource `id` as the provider shows it, and how it does not
/// match `c`'s spec; refused when it is not visible, or its label names
/// another client or kind.
async fn read_for_adoption<P: Provider>(
    provider: &P,
    c: &ClientRow,
    kind: ResourceKind,
    id: &str,
) -> Result<(String, Option<String>)> {
    let (spec, name) = (&c.infra.spec, &c.name);
    let (label, mismatch) = match provider.resource_get(&ResourceId::new(kind, id)).await? {
        None => {
            let noun = if kind == ResourceKind::Vm { "instance" } else { "block" };
            return refused(format!("{noun} {id} is not visible with the configured key"));
        }
        Some(Existing::Instance(i)) => (i.label.clone(), instance_mismatch(spec, &i.label, &i)),
        Some(Existing::Block(b)) => (b.label.clone(), block_mismatch(spec, &b.label, &b)),
    };
    // Whose it is comes first, then whether it matches. A label made by oduflow names the client and kind it was made for.
    if let Some((owner, made_as)) = Label(label.clone()).owner()
        && (owner != c.id || made_as != kind)
    {
        return refused(format!(
            "{id} carries label {label}, made for the {} of client {owner}; it is not {name}'s {} to adopt",
            made_as.as_str(),
            kind.as_str()
        ));
    }
    Ok((label, mismatch))
}

/// `oduflow abandon NAME --kind K --by WHO --reason WHY`: gives up an uncertain
/// dispatch on an operator's recorded attestation. The dispatch generation
/// moves on; the abandoned label stays on the inventory watch list.
pub async fn abandon(
    store: &Store,
    name: &str,
    kind: ResourceKind,
    reason: &str,
    actor: Actor<'_>,
) -> Result<ClientRow> {
    let plan = abandon_plan(store, name, kind, actor.by, reason).await?;
    abandon_apply(store, name, kind, reason, actor, &plan).await
}

/// Records the abandon `plan` names and queues the next dispatch (the
/// ledger checks its ground again as it writes).
pub(crate) async fn abandon_apply(
    store: &Store,
    name: &str,
    kind: ResourceKind,
    reason: &str,
    actor: Actor<'_>,
    plan: &AbandonPlan,
) -> Result<ClientRow> {
    let Actor { by, now_ms, attempts_max } = actor;
    let writer = ReceiptWriter::acting_for(store.clone(), by);
    writer.abandon(&plan.receipt.operation_key, by, reason, &plan.ground, now_ms).await?;
    Ok(store.client_reconcile(name, &[(kind, plan.generation + 1)], by, now_ms, attempts_max).await?)
}

/// The dispatch `abandon` would give up, or why it is refused; nothing is
/// written (a dry run stops here).
pub(crate) struct AbandonPlan {
    pub receipt: ReceiptRow,
    /// The dispatch generation in force.
    pub generation: i64,
    /// Why it may be abandoned although it has an id.
    pub ground: AbandonGround,
}

pub(crate) async fn abandon_plan(
    store: &Store,
    name: &str,
    kind: ResourceKind,
    by: &str,
    reason: &str,
) -> Result<AbandonPlan> {
    if by.trim().is_empty() || reason.trim().is_empty() {
        return refused("abandoning a dispatch needs an attestation: --by WHO and --reason WHY");
    }
    refuse_if_restored(store).await?;
    let c = client(store, name).await?;
    super::import::refuse_if_observed(&c)?;
    let (Some(r), dg) = current_receipt(store, &c, kind).await? else {
        return refused(format!("{name} has no current {} dispatch", kind.as_str()));
    };
    // An id the provider answered with but that no GET ever showed is as
    // uncertain as no id: Vultr may have dropped it, or it may still come.
    // One a listing showed exists: it is abandoned only once its
    // client is being deleted and GET answers 404 (deleted behind oduflow's
    // back, or still inside the post-create window: the attestation says
    // which, and the label stays watched).
    let listed_gone = c.infra.target == Target::Absent;
    let effect = r.effect();
    // A resource seen, then answering 404 until its client blocked
    // `known_resource_missing` for it, was deleted behind oduflow's back
    // (or is still lost in Vultr's lag: the attestation says which, and
    // its label stays watched). Given up, it is built again: a new
    // dispatch for it alone, the survivor attached to it.
    let missing = effect.id().map(|id| oduflow_model::decide::missing_evidence(kind, id));
    let rebuild = c.infra.blocked_reason == Some(BlockedReason::KnownResourceMissing)
        && missing.as_ref().zip(c.infra.blocked_detail.as_deref()).is_some_and(|(m, d)| d.starts_with(m.as_str()));
    if (effect.id().is_some() && (r.progress().seen || (r.listed() && !listed_gone)) && !rebuild)
        || matches!(effect, Effect::Rejected { .. })
    {
        return refused(format!(
            "the current {} dispatch of {name} has a known outcome; only an uncertain one can be abandoned",
            kind.as_str()
        ));
    }
    let ground = match (rebuild, listed_gone) {
        (true, _) => AbandonGround::Missing(missing.unwrap_or_default()),
        (false, true) => AbandonGround::ListedGone,
        (false, false) => AbandonGround::Uncertain,
    };
    Ok(AbandonPlan { receipt: r, generation: dg, ground })
}
