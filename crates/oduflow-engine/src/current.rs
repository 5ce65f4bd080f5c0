//! Which receipt a run works on, for each kind.
//!
//! The receipts are the truth, not the infra row: a run that rolled back (or
//! whose writes were dropped as stale) may have claimed a receipt at a
//! dispatch generation the infra row never recorded. So the dispatch
//! generation of a kind is the highest of the infra row's and its receipts',
//! moved on by one past a receipt whose resource is confirmed deleted or
//! whose dispatch an operator abandoned. A run that sends a create at a new
//! generation has thereby made that generation durable: its receipt.
//!
//! Deletion works on every receipt that still may own a resource: one not
//! confirmed deleted, not rejected and not abandoned, whatever its
//! generation. A client is deleted only when no such receipt is left.

use oduflow_model::ledger::Effect;
use oduflow_model::{ResourceKind, Target};
use oduflow_store::{InfraRow, ReceiptRow};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The receipts one run step works on, and the dispatch generations in
/// force.
#[derive(Clone, Debug, Default)]
pub struct Current {
    pub vm: Option<ReceiptRow>,
    pub volume: Option<ReceiptRow>,
    pub attach: Option<ReceiptRow>,
    pub vm_generation: i64,
    pub volume_generation: i64,
    pub attach_generation: i64,
}

impl Current {
    pub fn receipt(&self, kind: ResourceKind) -> Option<&ReceiptRow> {
        match kind {
            ResourceKind::Vm => self.vm.as_ref(),
            ResourceKind::Volume => self.volume.as_ref(),
            ResourceKind::Attach => self.attach.as_ref(),
        }
    }

    pub fn generation(&self, kind: ResourceKind) -> i64 {
        match kind {
            ResourceKind::Vm => self.vm_generation,
            ResourceKind::Volume => self.volume_generation,
            ResourceKind::Attach => self.attach_generation,
        }
    }
}

/// A digest of what a dispatch asked for, kept on its receipt as evidence.
pub fn spec_digest(v: &impl Serialize) -> String {
    let json = serde_json::to_vec(v).unwrap_or_default();
    Sha256::digest(&json).iter().map(|b| format!("{b:02x}")).collect()
}

/// The spec digest of the attach of this volume to this VM.
pub fn attach_digest(vm_id: Option<&str>, volume_id: Option<&str>) -> String {
    spec_digest(&(vm_id, volume_id))
}

/// Whether a receipt may still own a live resource: not confirmed deleted,
/// not rejected, not abandoned, and not provably unsent.
pub fn is_open(r: &ReceiptRow) -> bool {
    r.is_open()
}

fn at(receipts: &[ReceiptRow], kind: ResourceKind, dg: i64) -> Option<&ReceiptRow> {
    receipts.iter().find(|r| r.resource_kind == kind && r.dispatch_generation == dg)
}

fn generation(infra: &InfraRow, receipts: &[ReceiptRow], kind: ResourceKind) -> i64 {
    let latest = receipts
        .iter()
        .filter(|r| r.resource_kind == kind)
        .map(|r| r.dispatch_generation)
        .chain([infra.dispatch_generation(kind)])
        .max()
        .unwrap_or(1);
    match at(receipts, kind, latest) {
        // Gone for good, or given up on an attestation: a present target
        // needs a new dispatch (a new operation key and label).
        Some(r) if r.progress().deleted || matches!(r.effect(), Effect::Abandoned { .. }) => latest + 1,
        _ => latest,
    }
}

/// What a worker's run step works on: [`current`], or (test builds with the
/// planted bug `skip_open_receipts`) a deletion that looks
/// only at the dispatch generations the infra row recorded.
pub fn current_planted(
    infra: &InfraRow,
    target: Target,
    receipts: &[ReceiptRow],
    planted: crate::PlantedBug,
) -> Current {
    if target == Target::Absent && planted.is(crate::Bug::SkipOpenReceipts) {
        let g = |k| infra.dispatch_generation(k);
        let r = |k| at(receipts, k, g(k)).cloned();
        return Current {
            vm: r(ResourceKind::Vm),
            volume: r(ResourceKind::Volume),
            attach: r(ResourceKind::Attach),
            vm_generation: g(ResourceKind::Vm),
            volume_generation: g(ResourceKind::Volume),
            attach_generation: g(ResourceKind::Attach),
        };
    }
    current(infra, target, receipts)
}

/// The receipts a run step works on for this record's target.
pub fn current(infra: &InfraRow, target: Target, receipts: &[ReceiptRow]) -> Current {
    let vm_generation = generation(infra, receipts, ResourceKind::Vm);
    let volume_generation = generation(infra, receipts, ResourceKind::Volume);
    let pick = |kind: ResourceKind, dg: i64| -> Option<ReceiptRow> {
        if target == Target::Absent {
            // Every receipt that may still own a resource, oldest first.
            let mut open: Vec<&ReceiptRow> =
                receipts.iter().filter(|r| r.resource_kind == kind && is_open(r)).collect();
            open.sort_by_key(|r| r.dispatch_generation);
            if let Some(r) = open.first() {
                return Some((*r).clone());
            }
        }
        at(receipts, kind, dg).cloned()
    };
    let vm = pick(ResourceKind::Vm, vm_generation);
    let volume = pick(ResourceKind::Volume, volume_generation);
    // An attach belongs to one VM and one volume: once either has moved on
    // to a new resource, the recorded attach is for an earlier pair.
    let mut attach_generation = generation(infra, receipts, ResourceKind::Attach);
    if let (Some(a), Some(vm_id), Some(vol_id)) = (
        at(receipts, ResourceKind::Attach, attach_generation),
        vm.as_ref().and_then(|r| r.id()),
        volume.as_ref().and_then(|r| r.id()),
    ) && a.spec_digest != attach_digest(Some(vm_id), Some(vol_id))
    {
        attach_generation += 1;
    }
    let attach = at(receipts, ResourceKind::Attach, attach_generation).cloned();
    Current { vm, volume, attach, vm_generation, volume_generation, attach_generation }
}
