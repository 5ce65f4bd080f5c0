//! The inventory's DNS half: records in the configured zone that carry
//! oduflow's owner marker (a TXT `oduflow-owner=<client id>` at their name,
//! docs/protocol.md §3.5) and that no live client's ownership record holds,
//! and records a deleted client still owns. A restored database lost the
//! ownership of every client made after its backup; the marker still names
//! them, so they are traced like labelled VMs and volumes, each with the
//! command that resolves it.

use crate::operator::OperatorError;
pub use oduflow_model::identity::ZoneRecord;
use oduflow_model::identity::{DnsZone, dns_marker_owner};
use oduflow_model::provider::DeleteOutcome;
use oduflow_model::*;
use oduflow_store::{ClientRow, Store};
use serde::Serialize;
use std::collections::HashMap;

/// A record the inventory found that no live client owns.
#[derive(Clone, Debug, Serialize)]
pub struct DnsOrphan {
    pub id: String,
    #[serde(rename = "type")]
    pub rtype: String,
    /// The full name (`acme.example.com`).
    pub name: String,
    /// What it points at (the A/AAAA address, the marker's text).
    pub data: String,
    /// The client the owner marker at its name names (or the deleted client
    /// whose ownership record still holds it).
    pub client_id: String,
    /// That client's name, when this database knows it.
    pub client: Option<String>,
    pub note: String,
    /// The commands that resolve it.
    pub resolve: String,
}

/// The record types oduflow makes at a client's name.
const TRACED: [&str; 3] = ["A", "AAAA", "TXT"];

/// Every DNS record of `records` (one listing of `zone`) that carries, or
/// sits at a name carrying, an owner marker and that no live client owns,
/// and every record a deleted client still owns.
pub async fn dns_orphans(store: &Store, zone: &str, records: &[ZoneRecord]) -> Result<Vec<DnsOrphan>, OperatorError> {
    let clients: HashMap<ClientId, ClientRow> =
        store.client_list().await?.into_iter().map(|c| (c.id.clone(), c)).collect();
    let mut owner_of: HashMap<String, ClientId> = HashMap::new();
    for c in clients.values() {
        for s in store.adapter_states(&c.id).await?.iter().filter(|s| s.adapter == "dns") {
            for r in s.owned["records"].as_array().into_iter().flatten() {
                if let Some(id) = r["id"].as_str() {
                    owner_of.insert(id.to_owned(), c.id.clone());
                }
            }
        }
    }
    let mut markers: HashMap<&str, Vec<&str>> = HashMap::new();
    for r in records.iter().filter(|r| r.rtype == "TXT") {
        if let Some(id) = dns_marker_owner(&r.data) {
            markers.entry(r.name.as_str()).or_default().push(id);
        }
    }
    let deleted = |id: &ClientId| clients.get(id).is_none_or(|c| c.infra.status == ClientStatus::Deleted);
    let mut out = vec![];
    for r in records.iter().filter(|r| TRACED.contains(&r.rtype.as_str())) {
        let named: Vec<&str> = match (r.rtype.as_str(), dns_marker_owner(&r.data)) {
            ("TXT", Some(id)) => vec![id],
            ("TXT", None) => vec![],
            _ => markers.get(r.name.as_str()).cloned().unwrap_or_default(),
        };
        let client_id = match owner_of.get(&r.id) {
            Some(owner) if !deleted(owner) => continue,
            Some(owner) => owner.as_str().to_owned(),
            None if named.is_empty() => continue,
            None => named.join(","),
        };
        let fqdn = if r.name.is_empty() { zone.to_owned() } else { format!("{}.{zone}", r.name) };
        let (note, resolve) = orphan_note(&r.id, &client_id, &clients);
        out.push(DnsOrphan {
            id: r.id.clone(),
            rtype: r.rtype.clone(),
            name: fqdn,
            data: r.data.clone(),
            client: clients.get(&ClientId::from(client_id.as_str())).map(|c| c.name.clone()),
            client_id,
            note,
            resolve,
        });
    }
    Ok(out)
}

/// Why record `id` is an orphan, and what resolves it.
fn orphan_note(id: &str, client_id: &str, clients: &HashMap<ClientId, ClientRow>) -> (String, String) {
    let delete = format!("oduflow orphan delete {id} --by WHO --reason WHY");
    match clients.get(&ClientId::from(client_id)) {
        None => (
            format!(
                "its owner marker names client {client_id}, unknown here (made after the backup this copy was \
                 restored from?)"
            ),
            format!(
                "oduflow client create NAME --recover {client_id} with its spec (its first provisioning takes its \
                 records back), or {delete}"
            ),
        ),
        Some(c) if c.infra.status == ClientStatus::Deleted => {
            (format!("left behind by {}, which is deleted", c.name), delete)
        }
        Some(c) => (
            format!("its owner marker names {}, whose ownership record does not hold it", c.name),
            format!(
                "oduflow reconcile {} (at its DNS name, its next run takes it back; elsewhere, once {} is deleted, \
                 it is deleted by id)",
                c.name, c.name
            ),
        ),
    }
}

/// The inventory's DNS half: one listing of the zone, and its orphans.
pub async fn dns_inventory(store: &Store, zone: &dyn DnsZone) -> Result<Vec<DnsOrphan>, OperatorError> {
    let records = zone.records().await?;
    dns_orphans(store, zone.zone(), &records).await
}

/// What `oduflow orphan delete RECORD` did.
#[derive(Clone, Debug, Serialize)]
pub struct DnsOrphanDeleted {
    pub id: String,
    /// Always `dns` (beside a VM's or a volume's `OrphanDeleted`).
    pub kind: &'static str,
    #[serde(rename = "type")]
    pub rtype: String,
    pub name: String,
    pub data: String,
    /// True once a GET after the DELETE answered 404.
    pub confirmed: bool,
    pub note: String,
}

/// `oduflow orphan delete RECORD --by WHO --reason WHY` for a DNS record the
/// inventory reported: checked again in a listing taken now, the
/// attestation recorded, deleted by id, and confirmed by a GET 404.
pub async fn dns_orphan_delete(
    store: &Store,
    zone: &dyn DnsZone,
    id: &str,
    (by, reason): (&str, &str),
    now_ms: i64,
) -> Result<DnsOrphanDeleted, OperatorError> {
    if by.trim().is_empty() || reason.trim().is_empty() {
        return Err(OperatorError::Refused(
            "deleting an orphan needs an attestation: --by WHO and --reason WHY".into(),
        ));
    }
    crate::operator::refuse_if_restored(store).await?;
    let o = dns_orphan_to_delete(store, zone, id).await?;
    let detail = serde_json::json!({
        "id": id, "type": o.rtype, "name": o.name, "data": o.data, "client_id": o.client_id, "by": by, "reason": reason,
    });
    store.event_global(EventKind::DnsOrphanDeleteAttested, detail, Some(by), now_ms).await?;
    if let DeleteOutcome::Refused { status, message } = zone.delete(id).await? {
        return Err(OperatorError::Refused(format!(
            "Vultr refused the DELETE of record {id} with {status}: {message}; nothing changed"
        )));
    }
    let confirmed = !zone.exists(id).await?;
    let note = if confirmed {
        "deleted; GET answers 404"
    } else {
        "DELETE accepted, but Vultr still shows it; `oduflow reconcile --all` shows whether it is gone"
    };
    Ok(DnsOrphanDeleted {
        id: id.into(),
        kind: "dns",
        rtype: o.rtype,
        name: o.name,
        data: o.data,
        confirmed,
        note: note.into(),
    })
}

/// Before `oduflow orphan delete ID` of a DNS record: the orphan `id` is
/// in a listing taken now, and the client it names is unknown or deleted
/// (a live client's record, its create in flight, say, is that client's).
async fn dns_orphan_to_delete(store: &Store, zone: &dyn DnsZone, id: &str) -> Result<DnsOrphan, OperatorError> {
    let records = zone.records().await?;
    let zone = zone.zone();
    let Some(o) = dns_orphans(store, zone, &records).await?.into_iter().find(|o| o.id == id) else {
        return Err(OperatorError::Refused(format!(
            "{id} is not a DNS orphan now (not in {zone}, owned by a live client, or not at a name carrying \
             oduflow's owner marker); nothing was deleted"
        )));
    };
    for named in o.client_id.split(',') {
        if let Some(c) = store.client_get_by_id(&ClientId::from(named)).await?
            && c.infra.status != ClientStatus::Deleted
        {
            return Err(OperatorError::Refused(format!(
                "record {id} is marked as {}'s, a live client: `oduflow reconcile {}` takes it back; nothing was \
                 deleted",
                c.name, c.name
            )));
        }
    }
    Ok(o)
}
