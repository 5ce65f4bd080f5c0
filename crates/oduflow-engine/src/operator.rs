//! The operations both front ends run: what is asked of a client (in
//! [`intent`]) and the operator's commands that need the provider:
//! reconcile, adopt, abandon, credential rotation, orphans and the inventory
//! pass. Each leaves an audit event and refuses, with a clear reason,
//! anything the protocol does not allow.

mod intent;
mod settle;
pub use intent::{Updated, client_create, client_delete, client_update, preflight, queue_resume, refuse_if_restored};
pub use settle::identity_settle;

use crate::ReceiptWriter;
use oduflow_model::decide::{block_mismatch, instance_mismatch};
use oduflow_model::ledger::Effect;
use oduflow_model::provider::{Existing, Provider, ResourceId};
use oduflow_model::*;
use oduflow_store::{ClientRow, IdSource, NewReceipt, ReceiptRow, Store};
use serde::Serialize;
use std::collections::{HashMap, HashSet};

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Store(#[from] oduflow_store::StoreError),
    #[error(transparent)]
    Provider(#[from] provider::ProviderError),
    /// The protocol does not allow this action now; the message says why.
    #[error("{0}")]
    Refused(String),
    /// The request itself is wrong (a spec the catalog refuses, a plan Vultr
    /// does not offer): bad input, and nothing was stored.
    #[error("{0}")]
    Invalid(String),
    /// The client's records are bound to another API key than the one the
    /// action was given (short fingerprints): refused before any request.
    #[error(
        "{client} is bound to API key {bound} but the configured key is {configured}: run `oduflow credentials rotate` first"
    )]
    KeyMismatch { client: String, bound: String, configured: String },
}

type Result<T> = std::result::Result<T, OperatorError>;

fn refused<T>(msg: impl Into<String>) -> Result<T> {
    Err(OperatorError::Refused(msg.into()))
}

async fn client(store: &Store, name: &str) -> Result<ClientRow> {
    let c = store.client_get(name).await?;
    c.ok_or_else(|| oduflow_store::StoreError::ClientNotFound(name.to_owned()).into())
}

/// The receipt a run would work on for `kind` now (see [`crate::current`]),
/// and the dispatch generation in force.
async fn current_receipt(store: &Store, c: &ClientRow, kind: ResourceKind) -> Result<(Option<ReceiptRow>, i64)> {
    let receipts = store.receipts_for_client(&c.id).await?;
    let cur = crate::current::current(&c.infra, c.infra.target, &receipts);
    Ok((cur.receipt(kind).cloned(), cur.generation(kind)))
}

/// The client an action on the provider is about to touch: refused while a
/// restore is pending, or when its records are bound to another key.
async fn acting_on<P: Provider>(store: &Store, name: &str, provider: &P) -> Result<ClientRow> {
    refuse_if_restored(store).await?;
    let c = client(store, name).await?;
    check_key(&c, provider)?;
    Ok(c)
}

fn check_key<P: Provider>(c: &ClientRow, provider: &P) -> Result<()> {
    match &c.infra.key_fingerprint {
        Some(k) if *k != provider.key_fingerprint() => Err(OperatorError::KeyMismatch {
            client: c.name.clone(),
            bound: k.short().to_owned(),
            configured: provider.key_fingerprint().short().to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Who takes an operator action and when, recorded with it, and the attempt
/// budget of any job it queues.
#[derive(Clone, Copy, Debug)]
pub struct Actor<'a> {
    /// The operator, as `--by` names them (or the API token's name).
    pub by: &'a str,
    pub now_ms: i64,
    pub attempts_max: i32,
}

/// `oduflow reconcile NAME [--new-dispatch]`.
pub async fn reconcile<P: Provider>(
    store: &Store,
    provider: &P,
    name: &str,
    new_dispatch: bool,
    actor: Actor<'_>,
) -> Result<ClientRow> {
    let Actor { by: actor, now_ms, attempts_max } = actor;
    let c = acting_on(store, name, provider).await?;
    let writer = ReceiptWriter::new(store.clone());
    let mut advance = vec![];
    for kind in [ResourceKind::Vm, ResourceKind::Volume, ResourceKind::Attach] {
        let (Some(r), dg) = current_receipt(store, &c, kind).await? else { continue };
        if matches!(r.effect(), Effect::Rejected { .. }) {
            if new_dispatch {
                advance.push((kind, dg + 1));
            }
        } else {
            // Observe again: a fresh polling budget, the spent one kept.
            writer.observations_restart(&r.operation_key).await?;
        }
    }
    if new_dispatch && advance.is_empty() {
        return refused(format!(
            "{name} has no definitive rejection on its current dispatches: --new-dispatch is allowed only after \
             a 400/401/403/422 answered to the create call itself"
        ));
    }
    Ok(store.client_reconcile(name, &advance, actor, now_ms, attempts_max).await?)
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
    if let Some(other) = all.iter().find(|r| r.resource_id.as_deref() == Some(id)) {
        return refused(format!("{id} is already recorded on receipt {}", other.operation_key));
    }
    let spec = &c.infra.spec;
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
    let writer = ReceiptWriter::new(store.clone());
    let (receipt, dg) = current_receipt(store, &c, kind).await?;
    // A resource carrying the label of another dispatch belongs to that
    // dispatch: its own run adopts it by label. Two receipts owning one
    // resource would let deleting one client delete the other's.
    if let Some(other) = all.iter().find(|r| {
        r.label.as_str() == label && receipt.as_ref().is_none_or(|mine| mine.operation_key != r.operation_key)
    }) {
        return refused(format!(
            "{id} carries the label of dispatch {} (client {}); it is not {name}'s to adopt",
            other.operation_key, other.client_ref
        ));
    }
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
            let op = OperationKey::new(&c.id, kind, dg);
            writer
                .claim(&NewReceipt {
                    operation_key: op.clone(),
                    client_ref: c.id.clone(),
                    resource_kind: kind,
                    dispatch_generation: dg,
                    label: Label(label.clone()),
                    region: spec.region.clone(),
                    spec_digest: "adopted".into(),
                    key_fingerprint: provider.key_fingerprint(),
                    claimed_ms: now_ms,
                })
                .await?;
            op
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
    let Actor { by, now_ms, attempts_max } = actor;
    if by.trim().is_empty() || reason.trim().is_empty() {
        return refused("abandoning a dispatch needs an attestation: --by WHO and --reason WHY");
    }
    refuse_if_restored(store).await?;
    let c = client(store, name).await?;
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
    if (effect.id().is_some() && (r.seen_ms.is_some() || (r.listed_ms.is_some() && !listed_gone)))
        || matches!(effect, Effect::Rejected { .. })
    {
        return refused(format!(
            "the current {} dispatch of {name} has a known outcome; only an uncertain one can be abandoned",
            kind.as_str()
        ));
    }
    let writer = ReceiptWriter::new(store.clone());
    writer.abandon(&r.operation_key, by, reason, listed_gone, now_ms).await?;
    Ok(store.client_reconcile(name, &[(kind, dg + 1)], by, now_ms, attempts_max).await?)
}

/// One record the new key could not prove ownership of.
#[derive(Clone, Debug, Serialize)]
pub struct Unproven {
    pub client: String,
    pub kind: ResourceKind,
    pub resource: String,
    pub why: String,
}

/// `oduflow credentials rotate`: with the new key, proves ownership of every
/// recorded resource of every record bound to another key (visible, label
/// matching), then rebinds them all; refuses with the list otherwise.
pub async fn credentials_rotate<P: Provider>(
    store: &Store,
    provider: &P,
    actor: Actor<'_>,
) -> Result<std::result::Result<Vec<String>, Vec<Unproven>>> {
    let Actor { by: actor, now_ms, attempts_max } = actor;
    refuse_if_restored(store).await?;
    let new = provider.key_fingerprint();
    let (mut unproven, mut rebind, mut names) = (vec![], vec![], vec![]);
    for c in store.client_list().await? {
        let Some(old) = c.infra.key_fingerprint.clone() else { continue };
        if old == new {
            continue;
        }
        let receipts_before = store.receipts_for_client(&c.id).await?;
        for r in receipts_before.iter().cloned() {
            // Only receipts that may still own a resource need proof.
            if r.resource_kind == ResourceKind::Attach || !crate::current::is_open(&r) {
                continue;
            }
            let label = r.label.as_str();
            let fail = |why: String| Unproven {
                client: c.name.clone(),
                kind: r.resource_kind,
                resource: r.resource_id.clone().unwrap_or_else(|| format!("label {label}")),
                why,
            };
            // An id an operator adopted is accepted by runs without its label
            // (`oduflow adopt` verified it): proven the same way, by the new
            // key seeing it.
            let by_operator = r.resource_id_source == Some(IdSource::AdoptedByOperator);
            match r.resource_id.as_ref().map(|id| ResourceId::new(r.resource_kind, id.clone())) {
                Some(id) => match provider.resource_get(&id).await? {
                    Some(x) if x.label() == label || by_operator => {}
                    Some(x) => unproven.push(fail(format!("label is {:?}, receipt says {label:?}", x.label()))),
                    None => unproven.push(fail("not visible with the new key".into())),
                },
                None => unproven.push(fail(
                    "the dispatch's outcome is unknown, so ownership cannot be proven; resolve it first, with the \
                     old key still in VULTR_API_KEY (`oduflow reconcile`, `oduflow adopt`), or give it up \
                     (`oduflow abandon`, which needs no key)"
                        .into(),
                )),
            }
        }
        rebind.push(oduflow_store::Rebind { client: c.id.clone(), old, proven: snapshot(&receipts_before) });
        names.push(c.name.clone());
    }
    if !unproven.is_empty() {
        return Ok(Err(unproven));
    }
    // The rebind is refused for a record whose receipts changed since they
    // were proven (a run recorded a resource in between): nothing is
    // rebound without proof.
    let changed = store.clients_rebind_key(&rebind, &new, actor, now_ms, attempts_max).await?;
    if !changed.is_empty() {
        let unproven = rebind
            .iter()
            .zip(&names)
            .filter(|(r, _)| changed.contains(&r.client))
            .map(|(_, n)| Unproven {
                client: n.clone(),
                kind: ResourceKind::Vm,
                resource: "-".into(),
                why: "its receipts changed while ownership was being proven; run the rotation again".into(),
            })
            .collect();
        return Ok(Err(unproven));
    }
    Ok(Ok(names))
}

/// What a record's receipts said when their ownership was proven.
fn snapshot(receipts: &[ReceiptRow]) -> Vec<(String, Option<String>)> {
    let mut v: Vec<_> = receipts.iter().map(|r| (r.operation_key.to_string(), r.resource_id.clone())).collect();
    v.sort();
    v
}

/// What an inventory pass found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Inventory {
    pub instances_listed: usize,
    pub blocks_listed: usize,
    /// Resources under our label prefix that no receipt accounts for (or whose
    /// dispatch was abandoned, or that duplicate a recorded one).
    pub orphans: Vec<InventoryItem>,
    /// Recorded resources expected to exist that the provider does not list.
    pub missing: Vec<InventoryItem>,
    /// Resources carrying the label of a receipt without id: the next run
    /// adopts them.
    pub unrecorded: Vec<InventoryItem>,
    /// With a `[dns] domain`: records at names carrying oduflow's owner
    /// marker that no live client owns, and records of deleted clients
    /// (filled by the caller's zone listing: [`crate::dns_inventory`]).
    pub dns_orphans: Vec<crate::dns_inventory::DnsOrphan>,
}

#[derive(Clone, Debug, Serialize)]
pub struct InventoryItem {
    pub kind: ResourceKind,
    pub id: String,
    pub label: String,
    pub client: Option<String>,
    pub note: String,
    /// For an orphan: the command that resolves it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolve: Option<String>,
}

/// `oduflow reconcile --all`: compares the provider's inventory under our
/// label prefix with the receipts, from list pages (two listings, not one GET
/// per resource). Clears a pending restore when it completes; after a
/// restore, every record not yet deleted is reconciled (observes again).
///
/// It lists at once: for a provider without listing lag (tests), or a
/// caller that waited itself. Commands use [`inventory_settled`].
pub async fn inventory<P: Provider>(store: &Store, provider: &P, now_ms: i64) -> Result<Inventory> {
    inventory_settled(store, provider, now_ms, 0).await
}

/// What a listing shows lags a create (docs/vultr.md): after a restore, a
/// resource the discarded timeline made just before the restore was
/// declared may be missing from a listing taken at once, and would then
/// be created a second time. The pass lists only once this long has passed
/// since the restore was declared (`ODUFLOW_LISTING_SETTLE_MS`).
pub const LISTING_SETTLE_MS_DEFAULT: i64 = 10_000;

/// [`inventory`], listing no sooner than `settle_ms` after a pending
/// restore was declared (at most `settle_ms` of waiting).
pub async fn inventory_settled<P: Provider>(
    store: &Store,
    provider: &P,
    now_ms: i64,
    settle_ms: i64,
) -> Result<Inventory> {
    let after_restore = store.restore_pending().await?.is_some();
    if after_restore && settle_ms > 0 {
        settle_after_restore(store, now_ms, settle_ms).await?;
    }
    let instances = provider.instance_list().await?;
    let blocks = provider.block_list().await?;
    let receipts = store.receipts_all().await?;
    let clients: HashMap<ClientId, ClientRow> =
        store.client_list().await?.into_iter().map(|c| (c.id.clone(), c)).collect();
    let by_label: HashMap<&str, &ReceiptRow> = receipts.iter().map(|r| (r.label.as_str(), r)).collect();
    let mut inv = Inventory { instances_listed: instances.len(), blocks_listed: blocks.len(), ..Default::default() };
    let listed: Vec<(ResourceKind, String, String)> = instances
        .iter()
        .map(|i| (ResourceKind::Vm, i.id.0.clone(), i.label.clone()))
        .chain(blocks.iter().map(|b| (ResourceKind::Volume, b.id.0.clone(), b.label.clone())))
        .collect();
    let mut seen_ids = HashSet::new();
    for (kind, id, label) in &listed {
        seen_ids.insert(id.clone());
        if !label.starts_with(LABEL_PREFIX) {
            continue;
        }
        let client_name = |r: &ReceiptRow| clients.get(&r.client_ref).map(|c| c.name.clone());
        let item = |client: Option<String>, note: &str| InventoryItem {
            kind: *kind,
            id: id.clone(),
            label: label.clone(),
            client,
            note: note.into(),
            resolve: None,
        };
        match by_label.get(label.as_str()) {
            // No receipt carries it (a restored copy lost the receipt, say):
            // the label itself names the client and the kind.
            None => match Label(label.clone()).owner() {
                Some((owner, k)) => {
                    let known = clients.get(&owner);
                    inv.orphans.push(item(known.map(|c| c.name.clone()), &unreceipted_note(&owner, k, known)))
                }
                None => inv.orphans.push(item(None, "no receipt carries this label, and it names no client")),
            },
            Some(r) if let Effect::Abandoned { by, .. } = r.effect() => {
                inv.orphans.push(item(client_name(r), &format!("label of a dispatch abandoned by {by}")))
            }
            // A deleted client owns nothing: whatever still carries one of
            // its labels was leaked, whatever its dispatch generation.
            Some(r) if clients.get(&r.client_ref).is_some_and(|c| c.infra.status == ClientStatus::Deleted) => {
                inv.orphans.push(item(
                    client_name(r),
                    "live resource of a deleted client (its receipt was never confirmed deleted)",
                ))
            }
            Some(r) => match &r.resource_id {
                Some(rid) if rid == id => {}
                Some(rid) => inv.orphans.push(item(client_name(r), &format!("duplicate: the receipt records {rid}"))),
                None => inv.unrecorded.push(item(client_name(r), "carries the label of a receipt without id")),
            },
        }
    }
    for o in inv.orphans.iter_mut() {
        let live = o.client.as_deref().and_then(|n| clients.values().find(|c| c.name == n));
        o.resolve = Some(orphan_resolutions(&o.id, live).join(", or "));
    }
    let found: Vec<oduflow_store::FoundOrphan> = inv
        .orphans
        .iter()
        .map(|o| oduflow_store::FoundOrphan {
            resource_id: o.id.clone(),
            kind: o.kind,
            label: o.label.clone(),
            client_ref: Label(o.label.clone())
                .owner()
                .map(|(c, _)| c)
                .or_else(|| by_label.get(o.label.as_str()).map(|r| r.client_ref.clone())),
            note: o.note.clone(),
        })
        .collect();
    record_orphans(store, &found, &clients, now_ms).await?;
    inv.missing = missing(&receipts, &clients, &seen_ids);
    if after_restore {
        trust_nothing_restored(store, &receipts, clients.values(), now_ms).await?;
    }
    store
        .restore_clear(
            serde_json::json!({
                "orphans": inv.orphans.len(), "missing": inv.missing.len(), "unrecorded": inv.unrecorded.len(),
                "instances_listed": inv.instances_listed, "blocks_listed": inv.blocks_listed,
            }),
            now_ms,
        )
        .await?;
    Ok(inv)
}

/// Records what the pass found. A client reported deleted while a live
/// resource carries a label naming it (a restored copy that says `deleted`
/// about a client the discarded timeline brought back, say) runs again:
/// its run finds the orphan and blocks `labelled_orphan` instead of staying
/// `deleted`.
async fn record_orphans(
    store: &Store,
    found: &[oduflow_store::FoundOrphan],
    clients: &HashMap<ClientId, ClientRow>,
    now_ms: i64,
) -> Result<()> {
    store.orphans_record(found, now_ms).await?;
    let mut owners: Vec<&ClientRow> = found
        .iter()
        .filter_map(|o| Label(o.label.clone()).owner())
        .filter_map(|(c, _)| clients.get(&c))
        .filter(|c| c.infra.status == ClientStatus::Deleted)
        .collect();
    owners.sort_by_key(|c| &c.name);
    owners.dedup_by_key(|c| &c.name);
    for c in owners {
        store.client_reconcile(&c.name, &[], "inventory: a live resource carries its label", now_ms, 20).await?;
    }
    Ok(())
}

/// What an orphan whose label names a client, and no receipt carries, is.
fn unreceipted_note(owner: &ClientId, kind: ResourceKind, known: Option<&ClientRow>) -> String {
    match known {
        Some(c) => format!("no receipt carries this label; it names {}'s {}", c.name, kind.as_str()),
        None => format!(
            "no receipt carries this label; it names client {owner}, unknown here (made after the backup this \
             copy was restored from?): `oduflow client create NAME --recover {owner}` with its spec brings it \
             back, and adopts it"
        ),
    }
}

/// Waits until `settle_ms` has passed since the pending restore was
/// declared, on the database's clock (as the declaration was stamped); at
/// most `settle_ms`.
async fn settle_after_restore(store: &Store, now_ms: i64, settle_ms: i64) -> Result<()> {
    let now = store.clock_now_ms(now_ms).await?;
    let declared = store.events_by_kind(EventKind::RestoreDeclared).await?.last().map_or(now, |e| e.at_ms);
    let wait = (declared + settle_ms - now).clamp(0, settle_ms);
    if wait > 0 {
        tracing::info!(wait_ms = wait, "inventory: waiting for the provider's listings to settle after the restore");
        tokio::time::sleep(std::time::Duration::from_millis(wait as u64)).await;
    }
    Ok(())
}

/// Recorded resources, not deleted, that the provider's listings do not show.
fn missing(
    receipts: &[ReceiptRow],
    clients: &HashMap<ClientId, ClientRow>,
    seen_ids: &HashSet<String>,
) -> Vec<InventoryItem> {
    let mut out = vec![];
    for r in receipts {
        let (Some(id), Some(c)) = (&r.resource_id, clients.get(&r.client_ref)) else { continue };
        if r.resource_kind == ResourceKind::Attach || !crate::current::is_open(r) {
            continue;
        }
        if !seen_ids.contains(id) {
            out.push(InventoryItem {
                kind: r.resource_kind,
                id: id.clone(),
                label: r.label.to_string(),
                client: Some(c.name.clone()),
                note: "recorded but not listed by the provider".into(),
                resolve: None,
            });
        }
    }
    out
}

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
    let label = match provider.resource_get(&ResourceId::new(o.kind, id)).await? {
        Some(Existing::Block(b)) if b.attached_to_instance.is_some() => {
            return refused(format!(
                "volume {id} is attached to instance {}: delete or detach that first",
                b.attached_to_instance.map(|i| i.0).unwrap_or_default()
            ));
        }
        x => x.map(|x| x.label().to_owned()),
    };
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
    let writer = ReceiptWriter::new(store.clone());
    let recorded: Vec<ReceiptRow> = store
        .receipts_all()
        .await?
        .into_iter()
        .filter(|r| crate::current::is_open(r) && r.resource_id.as_deref() == Some(id))
        .collect();
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
    for r in recorded.iter().filter(|r| r.seen_ms.is_none()) {
        writer.mark_seen(&r.operation_key, now_ms).await?;
    }
    let detail = serde_json::json!({ "id": id, "kind": o.kind, "label": o.label, "by": by, "reason": reason });
    match &client {
        Some(c) => ReceiptWriter::new(store.clone()).audit(c, EventKind::OrphanDeleteAttested, detail, now_ms).await?,
        None => store.event_global(EventKind::OrphanDeleteAttested, detail, now_ms).await?,
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

/// An orphan a live client's open receipt records, or whose label such a
/// receipt without id carries (its next run adopts it), is no orphan now.
async fn refuse_if_accounted(store: &Store, id: &str, label: &str) -> Result<()> {
    let clients: HashMap<ClientId, ClientRow> =
        store.client_list().await?.into_iter().map(|c| (c.id.clone(), c)).collect();
    let live = |r: &ReceiptRow| clients.get(&r.client_ref).is_some_and(|c| c.infra.status != ClientStatus::Deleted);
    for r in store.receipts_all().await?.iter().filter(|r| crate::current::is_open(r) && live(r)) {
        if r.resource_id.as_deref() == Some(id) {
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

/// After a restore, before the queue runs again. A restored copy cannot
/// prove a create "not sent" any more: the attempt after the backup may
/// have gone out. Such receipts are resolved by their label, never sent
/// again blindly; changes too (a PATCH recorded as unsent may
/// have left). And it may say `ready` about a VM deleted since the backup,
/// or `deleted` about nothing: every record not yet deleted observes again
/// before it is trusted.
async fn trust_nothing_restored<'c>(
    store: &Store,
    receipts: &[ReceiptRow],
    clients: impl Iterator<Item = &'c ClientRow>,
    now_ms: i64,
) -> Result<()> {
    let writer = ReceiptWriter::new(store.clone());
    for r in receipts.iter().filter(|r| r.effect().is_unsent()) {
        writer.doubt_not_sent(&r.operation_key, now_ms).await?;
    }
    writer.ledger().change_doubt_open(now_ms).await?;
    for c in clients.filter(|c| c.infra.status != ClientStatus::Deleted) {
        store.client_reconcile(&c.name, &[], "inventory after restore", now_ms, 20).await?;
    }
    Ok(())
}
