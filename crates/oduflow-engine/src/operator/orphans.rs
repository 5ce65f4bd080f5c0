//! Orphans the inventory recorded: adopted into the client their label
//! names, or deleted on an attestation after checking again that nothing
//! accounts for them.

use super::*;

/// The commands that resolve an orphan: adoption into the client its label
/// names while that client is wanted, else deletion on an attestation. One
/// list for `reconcile --all`, the API and the dashboard.
pub fn orphan_resolutions(id: &str, client: Option<&ClientRow>) -> Vec<String> {
    let mut out = vec![];
    if client.is_some_and(|c| c.infra.status != ClientStatus::Deleted && c.infra.target == Target::Present) {
        out.push(format!("oduflow orphan adopt {id}"));
    }
    out.push(format!("oduflow orphan delete {id} --by WHO --reason WHY"));
    out
}

/// An orphan the last inventory pass recorded and has not seen resolved.
async fn open_orphan(store: &Store, id: &str) -> Result<oduflow_store::OrphanRow> {
    match store.orphan_get(id).await? {
        Some(o) if o.resolved_ms.is_none() => Ok(o),
        Some(o) => refused(format!(
            "{id} is no longer an orphan ({}); run `oduflow reconcile --all` to look again",
            o.resolution.unwrap_or_default()
        )),
        None => {
            refused(format!("{id} is not a recorded orphan; run `oduflow reconcile --all` first, which records them"))
        }
    }
}

/// `oduflow orphan adopt ID`: records an orphan on the client its label
/// names, as `adopt` would (verified against that client's spec, refused if
/// the client already has a resource of that kind recorded, or is deleted).
pub async fn orphan_adopt<P: Provider>(store: &Store, provider: &P, id: &str, actor: Actor<'_>) -> Result<ClientRow> {
    let Actor { by: actor, now_ms, attempts_max } = actor;
    refuse_if_restored(store).await?;
    let o = open_orphan(store, id).await?;
    let Some(owner) = o.client_ref.as_deref() else {
        return refused(format!(
            "{id} (label {}) names no client: adopt it into a client with `oduflow adopt NAME --kind {} --id {id}`, \
             or delete it with `oduflow orphan delete {id} --by WHO --reason WHY`",
            o.label,
            o.kind.as_str()
        ));
    };
    let Some(c) = store.client_get_by_id(&ClientId::from(owner)).await? else {
        return refused(format!("{id} names client {owner}, which this database does not know"));
    };
    if c.infra.target == Target::Absent || c.infra.status == ClientStatus::Deleted {
        return refused(format!(
            "{} is deleted or being deleted: its orphan is deleted, not adopted (`oduflow orphan delete {id} --by WHO --reason WHY`)",
            c.name
        ));
    }
    let row = adopt(store, provider, &c.name, o.kind, id, Actor { by: actor, now_ms, attempts_max }).await?;
    store.orphan_resolve(id, &format!("adopted into {} by {actor}", c.name), now_ms).await?;
    Ok(row)
}

/// What `oduflow orphan delete` did.
#[derive(Clone, Debug, Serialize)]
pub struct OrphanDeleted {
    pub id: String,
    pub kind: ResourceKind,
    /// True once a GET after the DELETE answered 404.
    pub confirmed: bool,
    pub note: String,
}

/// `oduflow orphan delete ID --by WHO --reason WHY`: deletes an orphan on an
/// operator's recorded attestation, after checking again that no receipt of
/// a live client accounts for it (recorded, or about to be adopted by its
/// label). A volume still attached is refused: its VM goes first.
pub async fn orphan_delete<P: Provider>(
    store: &Store,
    provider: &P,
    id: &str,
    reason: &str,
    actor: Actor<'_>,
) -> Result<OrphanDeleted> {
    let Actor { by, now_ms, .. } = actor;
    if by.trim().is_empty() || reason.trim().is_empty() {
        return refused("deleting an orphan needs an attestation: --by WHO and --reason WHY");
    }
    refuse_if_restored(store).await?;
    let o = open_orphan(store, id).await?;
    refuse_if_accounted(store, id, &o.label).await?;
    let label = label_now(provider, o.kind, id).await?;
    let client = o.client_ref.as_deref().map(ClientId::from);
    let Some(label) = label else {
        store.orphan_resolve(id, "gone: the provider answered 404", now_ms).await?;
        reconcile_blocked_by_orphan(store, client.as_ref(), actor).await?;
        return Ok(OrphanDeleted { id: id.into(), kind: o.kind, confirmed: true, note: "already gone (404)".into() });
    };
    if label != o.label {
        return refused(format!(
            "{id} now carries label {label:?}, not {:?}: run `oduflow reconcile --all` again",
            o.label
        ));
    }
    // A deleted client's receipt that still records it (never confirmed
    // deleted) follows the deletion protocol with it: seen, DELETE sent,
    // then 404.
    let writer = ReceiptWriter::acting_for(store.clone(), by);
    let recorded = recorded_by_the_deleted(store, id).await?;
    for r in recorded.iter().filter(|r| !r.progress().seen) {
        writer.mark_seen(&r.operation_key, now_ms).await?;
    }
    let detail = serde_json::json!({ "id": id, "kind": o.kind, "label": o.label, "by": by, "reason": reason });
    match &client {
        Some(c) => writer.audit(c, EventKind::OrphanDeleteAttested, detail, now_ms).await?,
        None => store.event_global(EventKind::OrphanDeleteAttested, detail, Some(by), now_ms).await?,
    }
    let answer = provider.resource_delete(&ResourceId::new(o.kind, id)).await?;
    if let provider::DeleteOutcome::Refused { status, message } = answer {
        return refused(format!("the provider refused the DELETE of {id} with {status}: {message}; nothing changed"));
    }
    for r in &recorded {
        writer.mark_delete_sent(&r.operation_key, now_ms).await?;
    }
    let gone = provider.resource_get(&ResourceId::new(o.kind, id)).await?.is_none();
    if gone {
        for r in &recorded {
            writer.mark_deleted(&r.operation_key, now_ms).await?;
        }
        store.orphan_resolve(id, &format!("deleted on the attestation of {by}: {reason}"), now_ms).await?;
        reconcile_blocked_by_orphan(store, client.as_ref(), actor).await?;
        return Ok(OrphanDeleted {
            id: id.into(),
            kind: o.kind,
            confirmed: true,
            note: "deleted; GET answers 404".into(),
        });
    }
    Ok(OrphanDeleted {
        id: id.into(),
        kind: o.kind,
        confirmed: false,
        note: "DELETE accepted, but the provider still shows it; `oduflow reconcile --all` confirms once it is gone"
            .into(),
    })
}

/// The label orphan `id` carries now (`None`: gone); refused for a volume
/// still attached to an instance.
async fn label_now<P: Provider>(provider: &P, kind: ResourceKind, id: &str) -> Result<Option<String>> {
    Ok(match provider.resource_get(&ResourceId::new(kind, id)).await? {
        Some(Existing::Block(b)) if b.attached_to_instance.is_some() => {
            return refused(format!(
                "volume {id} is attached to instance {}: delete or detach that first",
                b.attached_to_instance.map(|i| i.0).unwrap_or_default()
            ));
        }
        x => x.map(|x| x.label().to_owned()),
    })
}

/// The open receipts that record `id`, all of deleted clients: refused
/// when a live client's records it (not an orphan now).
async fn recorded_by_the_deleted(store: &Store, id: &str) -> Result<Vec<ReceiptRow>> {
    let recorded: Vec<ReceiptRow> =
        store.receipts_all().await?.into_iter().filter(|r| crate::current::is_open(r) && r.id() == Some(id)).collect();
    // Read again right before the DELETE: an adoption that landed since the
    // checks above (another operator) makes it a live client's again.
    let clients_now: HashMap<ClientId, ClientRow> =
        store.client_list().await?.into_iter().map(|c| (c.id.clone(), c)).collect();
    if let Some(r) = recorded
        .iter()
        .find(|r| clients_now.get(&r.client_ref).is_some_and(|c| c.infra.status != ClientStatus::Deleted))
    {
        return refused(format!(
            "{id} was just recorded on receipt {} of a live client: it is not an orphan now",
            r.operation_key
        ));
    }
    Ok(recorded)
}

/// An orphan a live client's open receipt records, or whose label such a
/// receipt without id carries (its next run adopts it), is no orphan now.
async fn refuse_if_accounted(store: &Store, id: &str, label: &str) -> Result<()> {
    let clients: HashMap<ClientId, ClientRow> =
        store.client_list().await?.into_iter().map(|c| (c.id.clone(), c)).collect();
    let live = |r: &ReceiptRow| clients.get(&r.client_ref).is_some_and(|c| c.infra.status != ClientStatus::Deleted);
    for r in store.receipts_all().await?.iter().filter(|r| crate::current::is_open(r) && live(r)) {
        if r.id() == Some(id) {
            return refused(format!(
                "{id} is recorded on receipt {} of a live client: it is not an orphan now",
                r.operation_key
            ));
        }
        if r.effect().id().is_none() && r.label.as_str() == label {
            return refused(format!(
                "{id} carries the label of receipt {}, whose next run adopts it: it is not an orphan now",
                r.operation_key
            ));
        }
    }
    Ok(())
}

/// The client an orphan's label names, blocked `labelled_orphan`, runs
/// again once that orphan is gone: deleting it was the resolution.
async fn reconcile_blocked_by_orphan(store: &Store, client: Option<&ClientId>, actor: Actor<'_>) -> Result<()> {
    let Some(c) = client else { return Ok(()) };
    if let Some(c) = store.client_get_by_id(c).await?
        && c.infra.blocked_reason == Some(BlockedReason::LabelledOrphan)
    {
        store.client_reconcile(&c.name, &[], actor.by, actor.now_ms, actor.attempts_max).await?;
    }
    Ok(())
}
