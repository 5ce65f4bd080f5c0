//! Hostile review of the labelled-orphan, send-mark and clock changes:
//! each test is a schedule under which the new code misbehaves.

use super::*;
use oduflow_engine::operator;

oduflow_store::on_both_stores!(
    crate::store_of =>
    review_an_abandoned_dispatchs_late_vm_is_adopted_or_blocked_not_a_crash_loop,
    review_a_receipt_restored_from_a_backup_taken_during_the_slot_wait_is_sent_again,
);

/// A VM create's outcome is unknown and no listing finds it: the client
/// blocks `uncertain_create`, and the operator abandons the dispatch (its
/// label stays watched). The VM then shows up; the inventory records it as
/// an orphan naming the client. The next run is the kind's first create of
/// the new dispatch generation, so it reads the client's orphans, finds
/// this one matching the spec and decides `AdoptOrphan`, which claims a
/// receipt under the orphan's label: the abandoned receipt holds that
/// label (unique), the claim is refused `ReceiptExists`, and the run
/// fails. Every run fails the same way until `attempts_exhausted`: the
/// client never says `labelled_orphan` with the orphan as evidence, and a
/// reconcile only repeats the crash loop.
async fn review_an_abandoned_dispatchs_late_vm_is_adopted_or_blocked_not_a_crash_loop(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    p.with(|s| s.unknown_unapplied_creates = 1);
    drain(&w, 50).await;
    let blocked = status(&store, "acme").await;
    assert_eq!(blocked.infra.blocked_reason, Some(BlockedReason::UncertainCreate), "{blocked:?}");
    let vm0 = store
        .receipts_for_client(&c.id)
        .await?
        .into_iter()
        .find(|r| r.resource_kind == ResourceKind::Vm)
        .unwrap();
    operator::abandon(&store, "acme", ResourceKind::Vm, "console shows nothing", actor("ops")).await?;
    // The abandoned create did land after all (Vultr's lag), before the
    // next run; an inventory pass records it as an orphan naming acme.
    p.with(|s| s.put_vm("vm-late", vm0.label.as_str()));
    let inv = operator::inventory(&store, p.as_ref(), now()).await?;
    assert_eq!(inv.orphans.len(), 1, "{inv:?}");
    let outs = drain(&w, 50).await;
    let after = status(&store, "acme").await;
    let failed: Vec<_> = outs.iter().filter(|o| matches!(o, RunOutcome::Failed { .. })).collect();
    assert!(
        failed.is_empty(),
        "runs failed instead of deciding about the orphan: {failed:?}; client now {:?} {:?}",
        after.infra.blocked_reason,
        after.infra.blocked_detail
    );
    assert!(
        after.infra.status == ClientStatus::Ready
            || after.infra.blocked_reason == Some(BlockedReason::LabelledOrphan),
        "{after:?}"
    );
    p.with(|s| assert_eq!(s.instances.len(), 1, "a second VM was made: {:?}", s.instances));
    Ok(())
}

/// A backup is taken while the VM create waits for its rate slot: the
/// receipt is claimed, not yet marked (the mark now comes after the slot,
/// up to 180 s later). The discarded timeline then marked and sent it: the
/// VM lives under the receipt's label. The copy is restored where the
/// worker host has no mark of the lineage (a new host, or its state
/// directory lost), so no restore is detected and no inventory runs. The
/// run reads "claimed, never marked" as "not sent" and sends the create a
/// second time on the same label: two paid VMs. Before f9f2553..HEAD the
/// mark followed the claim at once, a receipt claimed and not marked was
/// unknown, and the run searched by label and adopted the one VM.
async fn review_a_receipt_restored_from_a_backup_taken_during_the_slot_wait_is_sent_again(store: Store) -> Result<()> {
    let p = Arc::new(MemoryProvider::new(key("k1")));
    let w = worker(&store, p.clone());
    let c = create(&store, "acme").await;
    let dg = c.infra.dispatch_generation(ResourceKind::Vm);
    let label = Label::new_dispatch(&c.id, ResourceKind::Vm);
    ReceiptLedger::new(store.clone())
        .receipt_claim(&NewReceipt {
            operation_key: OperationKey::new(&c.id, ResourceKind::Vm, dg),
            client_ref: c.id.clone(),
            resource_kind: ResourceKind::Vm,
            dispatch_generation: dg,
            label: label.clone(),
            region: c.infra.spec.region.clone(),
            spec_digest: "as the backup had it".into(),
            key_fingerprint: key("k1"),
            claimed_ms: now(),
        })
        .await?;
    // The discarded timeline's send, after the backup.
    p.with(|s| s.put_vm("vm-after-backup", label.as_str()));
    drain(&w, 50).await;
    p.with(|s| {
        let same: Vec<_> = s.instances.values().filter(|i| i.label == label.as_str()).map(|i| i.id.0.clone()).collect();
        assert_eq!(same.len(), 1, "a second VM under one receipt's label: {same:?}; creates {:?}", s.creates_per_label)
    });
    Ok(())
}
