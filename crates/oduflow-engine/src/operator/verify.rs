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
use oduflow_store::IdSource;

/// The periodic pass: the inventory (orphans recorded too: a label given
/// up by a rebuild stays watched), then a run for each drifted client.
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
    Ok(super::inventory_settled(store, provider, VERIFICATION, now_ms, grace_ms).await?.drifted)
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
    clients: &[&ClientRow],
    instances: &[Instance],
    blocks: &[Block],
    now_ms: i64,
    grace_ms: i64,
) -> Vec<InventoryItem> {
    let instances: HashMap<&str, &Instance> = instances.iter().map(|i| (i.id.as_str(), i)).collect();
    let blocks: HashMap<&str, &Block> = blocks.iter().map(|b| (b.id.as_str(), b)).collect();
    // The label each recorded resource is held to; one an operator adopted
    // is held to none (as a run holds it: `adopt` verified the rest).
    let held: HashMap<(ResourceKind, &str), Option<&str>> = receipts
        .iter()
        .filter(|r| r.resource_kind != ResourceKind::Attach)
        .filter_map(|r| {
            let label = (r.id_source() != Some(IdSource::AdoptedByOperator)).then_some(r.label.as_str());
            Some(((r.resource_kind, r.id()?), label))
        })
        .collect();
    let mut out = vec![];
    for c in clients {
        let i = &c.infra;
        let (ClientStatus::Ready, Some(vm), Some(vol)) = (i.status, &i.vm_id, &i.volume_id) else { continue };
        if now_ms - i.updated_ms < grace_ms {
            continue;
        }
        let (instance, block) = (instances.get(vm.as_str()).copied(), blocks.get(vol.as_str()).copied());
        let label = |kind, id: &str, listed: Option<&str>| {
            held.get(&(kind, id)).copied().flatten().or(listed).unwrap_or_default().to_owned()
        };
        let vm_label = label(ResourceKind::Vm, vm.as_str(), instance.map(|x| x.label.as_str()));
        let vol_label = label(ResourceKind::Volume, vol.as_str(), block.map(|x| x.label.as_str()));
        let listed = Listed {
            spec: &i.spec,
            vm: (vm.as_str(), &vm_label, &i.outputs.main_ip),
            volume: (vol.as_str(), &vol_label),
            instance,
            block,
        };
        for (kind, note) in listed_drift(&listed) {
            let (id, label) =
                if kind == ResourceKind::Vm { (vm.as_str(), &vm_label) } else { (vol.as_str(), &vol_label) };
            let (id, label, client) = (id.to_owned(), label.clone(), Some(c.name.clone()));
            out.push(InventoryItem { kind, id, label, client, note, resolve: None });
        }
    }
    out
}

/// A `drift_seen` event with the evidence for each client the pass found
/// drifted, then a run for at most [`VERIFY_RUNS_MAX`] of them, each only
/// if it is still ready at the generation read (a client that blocked or
/// changed since keeps what it has). An observed client is only reported.
pub(super) async fn queue_drifted(store: &Store, found: &[InventoryItem], by: &str, now_ms: i64) -> Result<()> {
    let writer = ReceiptWriter::acting_for(store.clone(), by);
    let mut names: Vec<&str> = found.iter().filter_map(|f| f.client.as_deref()).collect();
    names.dedup();
    let mut runs = 0;
    for name in names {
        let Some(c) = store.client_get(name).await? else { continue };
        let evidence: Vec<&str> =
            found.iter().filter(|f| f.client.as_deref() == Some(name)).map(|f| f.note.as_str()).collect();
        tracing::warn!(client = name, evidence = %evidence.join("; "), "verification: the listings differ from a ready client");
        writer.audit(&c.id, EventKind::DriftSeen, serde_json::json!({ "evidence": evidence }), now_ms).await?;
        if c.infra.observe_only || c.infra.status != ClientStatus::Ready {
            continue;
        }
        if runs >= VERIFY_RUNS_MAX {
            tracing::warn!(
                client = name,
                "verification: {VERIFY_RUNS_MAX} runs queued this pass; this one waits for the next"
            );
            continue;
        }
        let again = store.client_recheck(&c.id, c.infra.generation, by, now_ms, VERIFY_ATTEMPTS_MAX).await?;
        runs += usize::from(again);
    }
    Ok(())
}

/// The most runs one pass queues: a listing that showed nothing at all
/// (an outage answered 200) would otherwise put a whole fleet to work.
pub const VERIFY_RUNS_MAX: usize = 200;

/// The attempt budget of a run the verification queues.
const VERIFY_ATTEMPTS_MAX: i32 = 20;

/// Who the verification pass's events name as asking.
pub const VERIFICATION: &str = "verification";
