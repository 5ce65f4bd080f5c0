//! The inventory pass (`oduflow reconcile --all`): the provider's listing
//! under oduflow's label prefix compared with the receipts; orphans and
//! missing resources reported, and a pending restore cleared once it ran
//! (docs/protocol.md §6, §7).

use super::*;

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
    /// Ready clients whose listed VM or volume differs from the spec or the
    /// record (see [`super::verify`]): each gets a run that decides.
    pub drifted: Vec<InventoryItem>,
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
/// Its events name `inventory` as who asked (tests, the laboratory).
pub async fn inventory<P: Provider>(store: &Store, provider: &P, now_ms: i64) -> Result<Inventory> {
    inventory_settled(store, provider, "inventory", now_ms, 0).await
}

/// [`inventory`], listing no sooner than `settle_ms` after a pending
/// restore was declared (at most `settle_ms` of waiting).
pub async fn inventory_settled<P: Provider>(
    store: &Store,
    provider: &P,
    by: &str,
    now_ms: i64,
    settle_ms: i64,
) -> Result<Inventory> {
    let seen = store.restore_seen().await?;
    let after_restore = seen.pending();
    if after_restore && settle_ms > 0 {
        settle_after_restore(store, now_ms, settle_ms).await?;
    }
    let before = store.orphans_before().await?;
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
    let seen_ids = sort_listed(&mut inv, &listed, &by_label, &clients);
    let found = found_orphans(&inv, &by_label);
    record_orphans(store, &found, &before, &clients, by, now_ms).await?;
    inv.missing = missing(&receipts, &clients, &seen_ids);
    let mut by_name: Vec<&ClientRow> = clients.values().collect();
    by_name.sort_by_key(|c| &c.name);
    inv.drifted = super::verify::drifted(&receipts, &by_name, &instances, &blocks, now_ms, settle_ms);
    if after_restore {
        trust_nothing_restored(store, &receipts, clients.values(), by, now_ms).await?;
    } else {
        super::verify::queue_drifted(store, &inv.drifted, by, now_ms).await?;
    }
    store
        .restore_clear(
            &seen,
            serde_json::json!({
                "orphans": inv.orphans.len(), "missing": inv.missing.len(), "unrecorded": inv.unrecorded.len(),
                "drifted": inv.drifted.len(),
                "instances_listed": inv.instances_listed, "blocks_listed": inv.blocks_listed,
            }),
            Some(by),
            now_ms,
        )
        .await?;
    Ok(inv)
}

/// Sorts each listed resource carrying oduflow's label into the pass's
/// orphans and unrecorded resources; the ids listed.
fn sort_listed(
    inv: &mut Inventory,
    listed: &[(ResourceKind, String, String)],
    by_label: &HashMap<&str, &ReceiptRow>,
    clients: &HashMap<ClientId, ClientRow>,
) -> HashSet<String> {
    let mut seen_ids = HashSet::new();
    for (kind, id, label) in listed {
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
            Some(r) => match r.id() {
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
    seen_ids
}

/// The orphans as the store records them, each with the client its label
/// or its receipt names.
fn found_orphans(inv: &Inventory, by_label: &HashMap<&str, &ReceiptRow>) -> Vec<oduflow_store::FoundOrphan> {
    inv.orphans
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
        .collect()
}

/// Records what the pass found. A client reported deleted while a live
/// resource carries a label naming it (a restored copy that says `deleted`
/// about a client the discarded timeline brought back, say) runs again:
/// its run finds the orphan and blocks `labelled_orphan` instead of staying
/// `deleted`.
async fn record_orphans(
    store: &Store,
    found: &[oduflow_store::FoundOrphan],
    before: &oduflow_store::OrphansBefore,
    clients: &HashMap<ClientId, ClientRow>,
    by: &str,
    now_ms: i64,
) -> Result<()> {
    store.orphans_record(found, before, by, now_ms).await?;
    let mut owners: Vec<&ClientRow> = found
        .iter()
        .filter_map(|o| Label(o.label.clone()).owner())
        .filter_map(|(c, _)| clients.get(&c))
        .filter(|c| c.infra.status == ClientStatus::Deleted)
        .collect();
    owners.sort_by_key(|c| &c.name);
    owners.dedup_by_key(|c| &c.name);
    for c in owners {
        store.client_reconcile(&c.name, &[], by, now_ms, 20).await?;
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
        let (Some(id), Some(c)) = (r.id(), clients.get(&r.client_ref)) else { continue };
        if r.resource_kind == ResourceKind::Attach || !crate::current::is_open(r) {
            continue;
        }
        if !seen_ids.contains(id) {
            out.push(InventoryItem {
                kind: r.resource_kind,
                id: id.to_string(),
                label: r.label.to_string(),
                client: Some(c.name.clone()),
                note: "recorded but not listed by the provider".into(),
                resolve: None,
            });
        }
    }
    out
}

/// After a restore, before the queue runs again. A restored copy cannot
/// prove a create "not sent" any more: the attempt after the backup may
/// have gone out. Such receipts are resolved by their label, never sent
/// again blindly; changes too (a PATCH recorded as unsent may
/// have left). And it may say `ready` about a VM deleted since the backup,
/// or `deleted` about nothing: every record not yet deleted observes again
/// before it is trusted. An identity it says `removed` for a client not
/// deleted is looked for again, one it says `ensured` read back again.
async fn trust_nothing_restored<'c>(
    store: &Store,
    receipts: &[ReceiptRow],
    clients: impl Iterator<Item = &'c ClientRow>,
    by: &str,
    now_ms: i64,
) -> Result<()> {
    let writer = ReceiptWriter::acting_for(store.clone(), by);
    for r in receipts.iter().filter(|r| r.effect().is_unsent()) {
        writer.doubt_not_sent(&r.operation_key, now_ms).await?;
    }
    writer.ledger().change_doubt_open(now_ms).await?;
    writer.ledger().adapter_doubt_restored(now_ms).await?;
    for c in clients.filter(|c| c.infra.status != ClientStatus::Deleted) {
        store.client_reconcile(&c.name, &[], by, now_ms, 20).await?;
    }
    Ok(())
}
