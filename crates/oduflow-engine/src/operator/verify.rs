//! Verifying ready clients from the listings: `ready` is a live claim.
//! Two listings (instances, blocks; a page per 100) show every ready
//! client's VM and volume; a client whose listing differs from its spec or
//! its record (a VM gone or resized, tags or firewall changed in the
//! console, the volume detached, another main IP) gets a `drift_seen`
//! event with the evidence and a run, which reads by id and decides: ready
//! again (a listing that lagged), or blocked for the reason `decide` gives
//! (`known_resource_missing`, `config_mismatch`, `uncertain_attach`).
//! Run by `reconcile --all` and, every `verify_interval_ms`, by one worker.

use super::*;
use oduflow_model::decide::{Listed, listed_drift};
use oduflow_model::provider::{Block, Instance};

/// The periodic pass: lists once, queues a run for each drifted client.
/// Skipped (nothing listed) while a restore is pending: the inventory the
/// operator runs then reconciles every client.
pub async fn verify<P: Provider>(
    store: &Store,
    provider: &P,
    now_ms: i64,
    grace_ms: i64,
) -> Result<Vec<InventoryItem>> {
    if store.restore_pending().await?.is_some() {
        return Ok(vec![]);
    }
    let instances = provider.instance_list().await?;
    let blocks = provider.block_list().await?;
    let receipts = store.receipts_all().await?;
    let clients: Vec<ClientRow> = store.client_list().await?;
    let found = drifted(&receipts, &clients, &instances, &blocks, now_ms, grace_ms);
    queue_drifted(store, &found, now_ms).await?;
    Ok(found)
}

/// The periodic pass, when it is due and this caller claims it (one
/// worker of all that share the database). A failure is logged and the
/// next pass comes an interval later: it never stops the worker.
pub async fn verify_if_due<P: Provider>(store: &Store, provider: &P, cfg: &crate::EngineConfig, now_ms: i64) {
    if cfg.verify_interval_ms <= 0 {
        return;
    }
    match store.verify_claim(now_ms, cfg.verify_interval_ms).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "verification: could not claim the pass");
            return;
        }
    }
    match verify(store, provider, now_ms, cfg.verify_grace_ms).await {
        Ok(found) => tracing::info!(drifted = found.len(), "verification: ready clients checked against the listings"),
        Err(e) => tracing::warn!(
            error = %e,
            next_in_s = cfg.verify_interval_ms / 1000,
            "verification failed; the next pass comes an interval later"
        ),
    }
}

/// Each ready client, ready for at least `grace_ms` (a listing lags a
/// create), whose listed VM or volume differs: one item per difference.
pub(super) fn drifted(
    receipts: &[ReceiptRow],
    clients: &[ClientRow],
    instances: &[Instance],
    blocks: &[Block],
    now_ms: i64,
    grace_ms: i64,
) -> Vec<InventoryItem> {
    let instances: HashMap<&str, &Instance> = instances.iter().map(|i| (i.id.as_str(), i)).collect();
    let blocks: HashMap<&str, &Block> = blocks.iter().map(|b| (b.id.as_str(), b)).collect();
    let label = |id: &str| receipts.iter().find(|r| r.id() == Some(id)).map_or("", |r| r.label.as_str());
    let mut out = vec![];
    for c in clients {
        let i = &c.infra;
        let (ClientStatus::Ready, Some(vm), Some(vol)) = (i.status, &i.vm_id, &i.volume_id) else { continue };
        if now_ms - i.updated_ms < grace_ms {
            continue;
        }
        let listed = Listed {
            spec: &i.spec,
            vm: (vm.as_str(), label(vm.as_str()), &i.outputs.main_ip),
            volume: (vol.as_str(), label(vol.as_str())),
            instance: instances.get(vm.as_str()).copied(),
            block: blocks.get(vol.as_str()).copied(),
        };
        for (kind, note) in listed_drift(&listed) {
            let id = if kind == ResourceKind::Vm { vm.as_str() } else { vol.as_str() };
            out.push(InventoryItem {
                kind,
                id: id.to_owned(),
                label: label(id).to_owned(),
                client: Some(c.name.clone()),
                note,
                resolve: None,
            });
        }
    }
    out
}

/// A `drift_seen` event with the evidence, then a run, for each client the
/// pass found drifted.
pub(super) async fn queue_drifted(store: &Store, found: &[InventoryItem], now_ms: i64) -> Result<()> {
    let writer = ReceiptWriter::new(store.clone());
    let mut names: Vec<&str> = found.iter().filter_map(|f| f.client.as_deref()).collect();
    names.dedup();
    for name in names {
        let c = client(store, name).await?;
        let evidence: Vec<&str> =
            found.iter().filter(|f| f.client.as_deref() == Some(name)).map(|f| f.note.as_str()).collect();
        tracing::warn!(client = name, evidence = %evidence.join("; "), "verification: the listings differ from a ready client");
        writer.audit(&c.id, EventKind::DriftSeen, serde_json::json!({ "evidence": evidence }), now_ms).await?;
        store.client_reconcile(name, &[], "verification", now_ms, VERIFY_ATTEMPTS_MAX).await?;
    }
    Ok(())
}

/// The attempt budget of a run the verification queues.
const VERIFY_ATTEMPTS_MAX: i32 = 20;
