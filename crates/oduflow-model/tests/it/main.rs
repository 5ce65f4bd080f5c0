//! The decision function as a table: each case is a small state, an
//! observation and the one action expected.

use oduflow_model::decide::*;
use oduflow_model::{BlockedReason as B, ResourceKind as K, Target};

const MAX: i64 = 5;

fn res(receipt: ReceiptFacts, seen: Seen) -> Resource {
    Resource {
        receipt,
        seen,
        progress: DeleteProgress::default(),
        overdue: false,
        updated: false,
        change: ChangeFacts::None,
        update_overdue: false,
        resize_settling: false,
        plan_change: false,
        orphans: vec![],
    }
}

fn none() -> Resource {
    res(ReceiptFacts::None, Seen::NotRead)
}

fn unknown(n: i64, seen: Seen) -> Resource {
    res(ReceiptFacts::Unknown { observations: n }, seen)
}

fn known(id: &str, n: i64, seen: Seen) -> Resource {
    res(ReceiptFacts::Known { id: id.into(), observations: n }, seen)
}

fn ok(id: &str) -> Facts {
    Facts {
        id: id.into(),
        mismatch: None,
        ready: true,
        attached_to: None,
        state: "active/ok".into(),
        outputs: Default::default(),
        drift: None,
        size_gb: None,
    }
}

fn vol(id: &str, attached: Option<&str>) -> Facts {
    Facts { attached_to: attached.map(Into::into), ..ok(id) }
}

fn present(vm: Resource, volume: Resource, attach: ReceiptFacts) -> Inputs {
    Inputs { target: Target::Present, key_changed: false, vm, volume, attach, observations_max: MAX }
}

fn absent(vm: Resource, volume: Resource) -> Inputs {
    Inputs { target: Target::Absent, ..present(vm, volume, ReceiptFacts::None) }
}

#[track_caller]
fn check(i: Inputs, expect: Action) {
    assert_eq!(decide(&i), expect, "inputs: {i:#?}");
}

#[track_caller]
fn check_block(i: Inputs, reason: B) {
    match decide(&i) {
        Action::Block(r, detail) => {
            assert_eq!(r, reason, "{detail}");
            assert!(!detail.is_empty());
        }
        other => panic!("expected Block({reason}), got {other:?} for {i:#?}"),
    }
}

#[test]
fn nothing_yet_dispatches_the_vm_first() {
    check(present(none(), none(), ReceiptFacts::None), Action::Dispatch(K::Vm));
}

#[test]
fn key_change_blocks_before_anything() {
    let mut i = present(none(), none(), ReceiptFacts::None);
    i.key_changed = true;
    check_block(i.clone(), B::CredentialChanged);
    i.target = Target::Absent;
    check_block(i, B::CredentialChanged);
}

#[test]
fn unknown_outcome_is_observed_never_redispatched() {
    let v = || known("v-1", 0, Seen::NotRead);
    check(present(unknown(0, Seen::NotRead), v(), ReceiptFacts::None), Action::Observe(K::Vm));
    check(present(unknown(0, Seen::ByLabel(vec![])), none(), ReceiptFacts::None), Action::CountObservation(K::Vm));
    check(present(unknown(3, Seen::ByLabel(vec![])), none(), ReceiptFacts::None), Action::CountObservation(K::Vm));
    check_block(present(unknown(4, Seen::ByLabel(vec![])), none(), ReceiptFacts::None), B::UncertainCreate);
}

#[test]
fn one_label_match_is_adopted_after_verification() {
    check(
        present(unknown(2, Seen::ByLabel(vec![ok("i-1")])), none(), ReceiptFacts::None),
        Action::Adopt(K::Vm, "i-1".into()),
    );
    let wrong = Facts { mismatch: Some("region ams != ewr".into()), ..ok("i-1") };
    check_block(present(unknown(0, Seen::ByLabel(vec![wrong])), none(), ReceiptFacts::None), B::ConfigMismatch);
}

#[test]
fn duplicate_label_matches_block() {
    check_block(
        present(unknown(0, Seen::ByLabel(vec![ok("i-1"), ok("i-2")])), none(), ReceiptFacts::None),
        B::DuplicateMatches,
    );
    check_block(absent(unknown(0, Seen::ByLabel(vec![ok("i-1"), ok("i-2")])), none()), B::DuplicateMatches);
}

#[test]
fn rejection_blocks_and_is_not_retried() {
    let r = res(ReceiptFacts::Rejected { status: 422, message: "bad".into() }, Seen::NotRead);
    check_block(present(r.clone(), none(), ReceiptFacts::None), B::CreateRejected);
    // Nothing to delete for a rejected create.
    check(absent(r, none()), Action::Deleted);
}

#[test]
fn known_id_404_keeps_the_id_then_blocks() {
    check(
        present(known("i-1", 0, Seen::NotRead), known("v-1", 0, Seen::NotRead), ReceiptFacts::None),
        Action::Observe(K::Vm),
    );
    check(present(known("i-1", 0, Seen::Missing), none(), ReceiptFacts::None), Action::CountObservation(K::Vm));
    check_block(present(known("i-1", 4, Seen::Missing), none(), ReceiptFacts::None), B::KnownResourceMissing);
}

#[test]
fn config_mismatch_on_known_id_blocks() {
    let f = Facts { mismatch: Some("plan x != y".into()), ..ok("i-1") };
    check_block(present(known("i-1", 0, Seen::Present(f)), none(), ReceiptFacts::None), B::ConfigMismatch);
}

#[test]
fn volume_is_dispatched_once_the_vm_create_is_out() {
    check(present(known("i-1", 0, Seen::NotRead), none(), ReceiptFacts::None), Action::Dispatch(K::Volume));
    check(present(unknown(0, Seen::NotRead), none(), ReceiptFacts::None), Action::Dispatch(K::Volume));
    // Not after a refused VM create: that blocks first.
    let r = res(ReceiptFacts::Rejected { status: 400, message: "m".into() }, Seen::NotRead);
    check_block(present(r, none(), ReceiptFacts::None), B::CreateRejected);
}

#[test]
fn volume_follows_a_verified_vm() {
    check(present(known("i-1", 0, Seen::Present(ok("i-1"))), none(), ReceiptFacts::None), Action::Dispatch(K::Volume));
}

#[test]
fn attach_waits_for_ready_then_dispatches_once() {
    let not_ready = Facts { ready: false, ..ok("i-1") };
    let vm = known("i-1", 0, Seen::Present(not_ready));
    let volume = known("v-1", 0, Seen::Present(vol("v-1", None)));
    check(present(vm, volume.clone(), ReceiptFacts::None), Action::Wait);
    let vm = known("i-1", 0, Seen::Present(ok("i-1")));
    check(present(vm.clone(), volume.clone(), ReceiptFacts::None), Action::Dispatch(K::Attach));
    // Sent (whatever the answer): never again; only observed.
    check(
        present(vm.clone(), volume.clone(), ReceiptFacts::Unknown { observations: 0 }),
        Action::CountObservation(K::Attach),
    );
    check(
        present(vm.clone(), volume.clone(), ReceiptFacts::Known { id: "i-1".into(), observations: 1 }),
        Action::CountObservation(K::Attach),
    );
    check_block(present(vm.clone(), volume, ReceiptFacts::Unknown { observations: 4 }), B::UncertainAttach);
    let attached = known("v-1", 0, Seen::Present(vol("v-1", Some("i-1"))));
    check(present(vm.clone(), attached, ReceiptFacts::Unknown { observations: 4 }), Action::Ready);
    let foreign = known("v-1", 0, Seen::Present(vol("v-1", Some("i-9"))));
    check_block(present(vm.clone(), foreign, ReceiptFacts::None), B::ForeignAttachment);
    let rejected = ReceiptFacts::Rejected { status: 400, message: "no".into() };
    check_block(present(vm, known("v-1", 0, Seen::Present(vol("v-1", None))), rejected), B::AttachRejected);
}

#[test]
fn deletion_sends_delete_first_and_confirms_by_a_404_after_it() {
    // Nothing dispatched: nothing to delete.
    check(absent(none(), none()), Action::Deleted);
    // Known id, never seen: read first (a 404 now would prove nothing).
    check(absent(known("i-1", 0, Seen::NotRead), none()), Action::Observe(K::Vm));
    // Seen by id (a GET, or the attach's 2xx), no DELETE yet: the DELETE
    // goes first, with no read before it.
    let mut seen = known("i-1", 0, Seen::NotRead);
    seen.progress.seen = true;
    check(absent(seen.clone(), none()), Action::Delete(K::Vm, "i-1".into()));
    // After a DELETE, a read tells.
    seen.progress.delete_sent = true;
    check(absent(seen, none()), Action::Observe(K::Vm));
    // Present but never marked seen: mark first.
    check(absent(known("i-1", 0, Seen::Present(ok("i-1"))), none()), Action::MarkSeen(K::Vm));
    let mut vm = known("i-1", 0, Seen::Present(ok("i-1")));
    vm.progress.seen = true;
    check(absent(vm.clone(), none()), Action::Delete(K::Vm, "i-1".into()));
    // DELETE sent, still there: DELETE again (repeatable).
    vm.progress.delete_sent = true;
    check(absent(vm.clone(), none()), Action::Delete(K::Vm, "i-1".into()));
    // GET 404 after DELETE: confirmed.
    vm.seen = Seen::Missing;
    check(absent(vm.clone(), none()), Action::ConfirmDeleted(K::Vm));
    vm.progress.deleted = true;
    check(absent(vm.clone(), known("v-1", 0, Seen::NotRead)), Action::Observe(K::Volume));
    let mut v = known("v-1", 0, Seen::Missing);
    v.progress = DeleteProgress { seen: true, delete_sent: true, deleted: true, listed: false };
    check(absent(vm, v), Action::Deleted);
}

#[test]
fn a_404_before_ever_seen_proves_nothing() {
    // The new-VM 404 window: never counted as deleted.
    check(absent(known("i-1", 0, Seen::Missing), none()), Action::CountObservation(K::Vm));
    check_block(absent(known("i-1", 4, Seen::Missing), none()), B::UncertainDelete);
    // The evidence tells what did show it: nothing, or a listing only.
    let detail = |listed: bool| {
        let mut vm = known("i-1", 4, Seen::Missing);
        vm.progress.listed = listed;
        match decide(&absent(vm, none())) {
            Action::Block(B::UncertainDelete, d) => d,
            other => panic!("{other:?}"),
        }
    };
    assert!(detail(false).contains("neither a listing nor a request by id ever showed it"), "{}", detail(false));
    assert!(detail(true).contains("a listing showed it, but no request by id ever did"), "{}", detail(true));
}

#[test]
fn uncertain_create_then_delete_searches_and_never_assumes_absence() {
    check(absent(unknown(0, Seen::NotRead), none()), Action::Observe(K::Vm));
    check(absent(unknown(0, Seen::ByLabel(vec![])), none()), Action::CountObservation(K::Vm));
    check_block(absent(unknown(4, Seen::ByLabel(vec![])), none()), B::UncertainDelete);
    check(absent(unknown(1, Seen::ByLabel(vec![ok("i-7")])), none()), Action::Adopt(K::Vm, "i-7".into()));
}

#[test]
fn vm_deleted_before_volume() {
    let mut vm = known("i-1", 0, Seen::Present(ok("i-1")));
    vm.progress.seen = true;
    let mut v = known("v-1", 0, Seen::Present(vol("v-1", Some("i-1"))));
    v.progress.seen = true;
    check(absent(vm, v), Action::Delete(K::Vm, "i-1".into()));
}

#[test]
fn present_again_finishes_an_interrupted_deletion_first() {
    let mut vm = known("i-1", 0, Seen::Present(ok("i-1")));
    vm.progress = DeleteProgress { seen: true, delete_sent: true, deleted: false, listed: false };
    check(present(vm.clone(), none(), ReceiptFacts::None), Action::Delete(K::Vm, "i-1".into()));
    vm.seen = Seen::Missing;
    check(present(vm, none(), ReceiptFacts::None), Action::ConfirmDeleted(K::Vm));
}

/// Every sequence of observations keeps the rule "never dispatch when a
/// receipt exists", whatever the target and the facts.
#[test]
fn never_dispatches_over_an_existing_receipt() {
    let receipts = [
        ReceiptFacts::Unknown { observations: 0 },
        ReceiptFacts::Unknown { observations: 4 },
        ReceiptFacts::Known { id: "x".into(), observations: 0 },
        ReceiptFacts::Rejected { status: 400, message: "m".into() },
    ];
    let seens = [
        Seen::NotRead,
        Seen::Missing,
        Seen::Present(ok("x")),
        Seen::ByLabel(vec![]),
        Seen::ByLabel(vec![ok("x")]),
        Seen::ByLabel(vec![ok("x"), ok("y")]),
    ];
    for target in [Target::Present, Target::Absent] {
        for r in &receipts {
            for s in &seens {
                for seen_flag in [false, true] {
                    let mut vm = res(r.clone(), s.clone());
                    vm.progress.seen = seen_flag;
                    let i = Inputs { target, ..present(vm, none(), ReceiptFacts::None) };
                    let a = decide(&i);
                    assert_ne!(a, Action::Dispatch(K::Vm), "{i:#?}");
                    if let Action::Delete(_, _) | Action::ConfirmDeleted(_) = a {
                        assert!(i.vm.progress.seen, "deleting something never seen: {i:#?}");
                    }
                }
            }
        }
    }
}

// ----- changes to a running client -----

fn plan_drift(id: &str) -> Facts {
    let change = oduflow_model::provider::InstanceChange { plan: Some("vc2-2c-4gb".into()), ..Default::default() };
    Facts {
        drift: Some(Box::new(Drift { change: Change::Instance(change), what: "plan vc2-1c-1gb != vc2-2c-4gb".into() })),
        ..ok(id)
    }
}

fn drifted_vm(change: ChangeFacts, facts: Facts) -> Resource {
    Resource { updated: true, change, ..known("v-1", 0, Seen::Present(facts)) }
}

fn attached_volume() -> Resource {
    known("b-1", 0, Seen::Present(vol("b-1", Some("v-1"))))
}

#[test]
fn an_update_sends_one_change_once_the_server_is_ready() {
    let i = present(drifted_vm(ChangeFacts::None, plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    check(i, Action::Change(K::Vm));
    // Locked or resizing: wait, and block only past the readiness wait.
    let busy = Facts { ready: false, state: "active/locked".into(), ..plan_drift("v-1") };
    let i = present(drifted_vm(ChangeFacts::None, busy.clone()), attached_volume(), ReceiptFacts::None);
    check(i, Action::Wait);
    let mut late = drifted_vm(ChangeFacts::None, busy);
    late.update_overdue = true;
    check_block(present(late, attached_volume(), ReceiptFacts::None), B::NotReady);
}

/// Vultr refuses a volume's resize within 60 s of the last one: a change
/// whose resource resized less than that ago waits (not a refusal, not a
/// block), and is sent once the interval has passed; a change already sent
/// is only read.
#[test]
fn a_resize_waits_out_the_interval_since_the_last_one() {
    let settling = |change| Resource { resize_settling: true, ..drifted_vm(change, plan_drift("v-1")) };
    check(present(settling(ChangeFacts::None), attached_volume(), ReceiptFacts::None), Action::Wait);
    let not_sent = ChangeFacts::NotSent { count: 1, reason: "connection refused".into() };
    check(present(settling(not_sent), attached_volume(), ReceiptFacts::None), Action::Wait);
    let sent = ChangeFacts::Sent { observations: 0 };
    check(present(settling(sent), attached_volume(), ReceiptFacts::None), Action::CountChange(K::Vm));
    let settled = Resource { resize_settling: false, ..settling(ChangeFacts::None) };
    check(present(settled, attached_volume(), ReceiptFacts::None), Action::Change(K::Vm));
}

#[test]
fn a_resize_no_change_of_the_client_explains_blocks_instead_of_ready() {
    // Vultr shows the old plan while it resizes: a resize oduflow never
    // sent (the console, or the timeline a restore discarded) would show
    // another plan once done, after the client was reported ready.
    let resizing = Facts { ready: false, state: "resizing/locked".into(), ..ok("v-1") };
    let rejected = ChangeFacts::Rejected { status: 400, message: "no".into() };
    // A tag change of this generation, confirmed, does not explain it (the
    // plan change was sent after a backup a restore went back to).
    let tags = |change| Resource { updated: true, change, ..known("v-1", 0, Seen::Present(resizing.clone())) };
    for vm in [tags(ChangeFacts::None), tags(rejected), tags(ChangeFacts::Confirmed)] {
        check_block(present(vm, attached_volume(), ReceiptFacts::None), B::ConfigMismatch);
    }
    // After its own plan change, the resize is that change's, whichever
    // plan Vultr shows meanwhile.
    let own = |change| Resource { plan_change: true, ..tags(change) };
    check(
        present(own(ChangeFacts::Sent { observations: 1 }), attached_volume(), ReceiptFacts::None),
        Action::ConfirmChange(K::Vm),
    );
    check(present(own(ChangeFacts::Confirmed), attached_volume(), ReceiptFacts::None), Action::Ready);
    // Not once a restore came after its confirmation: the timeline the
    // restore discarded may have sent the resize under way.
    let restored = own(ChangeFacts::ConfirmedBeforeRestore);
    check_block(present(restored, attached_volume(), ReceiptFacts::None), B::ConfigMismatch);
    // Locked for a backup, say: no plan change, still ready.
    let locked = Facts { ready: false, state: "active/locked".into(), ..ok("v-1") };
    check(present(known("v-1", 0, Seen::Present(locked)), attached_volume(), ReceiptFacts::None), Action::Ready);
    // Its own change in flight shows as a drift, counted as before.
    let own = Facts { ready: false, state: "resizing/locked".into(), ..plan_drift("v-1") };
    let i = present(drifted_vm(ChangeFacts::Sent { observations: 0 }, own), attached_volume(), ReceiptFacts::None);
    check(i, Action::CountChange(K::Vm));
}

#[test]
fn a_sent_change_is_confirmed_only_by_a_read_and_never_sent_again() {
    let sent = |n| ChangeFacts::Sent { observations: n };
    // The old value is accepted while the change is in flight: no block,
    // no second PATCH, only reads up to the limit.
    let i = present(drifted_vm(sent(0), plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    check(i, Action::CountChange(K::Vm));
    let i = present(drifted_vm(sent(MAX - 1), plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    check_block(i, B::UncertainUpdate);
    // The read shows the new value: confirm, then ready.
    let i = present(drifted_vm(sent(2), ok("v-1")), attached_volume(), ReceiptFacts::None);
    check(i, Action::ConfirmChange(K::Vm));
    let i = present(drifted_vm(ChangeFacts::Confirmed, ok("v-1")), attached_volume(), ReceiptFacts::None);
    check(i, Action::Ready);
}

#[test]
fn a_drift_nobody_asked_for_blocks_and_a_rejected_change_blocks() {
    // Never updated: someone changed it behind oduflow's back.
    let mut i = present(drifted_vm(ChangeFacts::None, plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    i.vm.updated = false;
    check_block(i, B::ConfigMismatch);
    // Changed again after this generation's change was confirmed.
    let i = present(drifted_vm(ChangeFacts::Confirmed, plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    check_block(i, B::ConfigMismatch);
    let rejected = ChangeFacts::Rejected { status: 400, message: "Invalid plan chosen.".into() };
    let i = present(drifted_vm(rejected, plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    check_block(i, B::UpdateRejected);
    // What no PATCH can change still blocks, whatever was asked.
    let region = Facts { mismatch: Some("region ams != ewr".into()), ..plan_drift("v-1") };
    let i = present(drifted_vm(ChangeFacts::None, region), attached_volume(), ReceiptFacts::None);
    check_block(i, B::ConfigMismatch);
}

#[test]
fn a_change_that_never_left_is_sent_again_up_to_the_limit() {
    let unsent = |count| ChangeFacts::NotSent { count, reason: "connection refused".into() };
    let i = present(drifted_vm(unsent(1), plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    check(i, Action::Change(K::Vm));
    let i = present(drifted_vm(unsent(MAX), plan_drift("v-1")), attached_volume(), ReceiptFacts::None);
    check_block(i, B::ProviderUnavailable);
}

fn orphan(id: &str, facts: Option<Facts>) -> Orphan {
    Orphan { id: id.into(), facts }
}

fn with_orphans(mut r: Resource, orphans: Vec<Orphan>) -> Resource {
    r.orphans = orphans;
    r
}

#[test]
fn a_first_create_adopts_the_one_matching_labelled_orphan_instead() {
    // The VM's first create: a matching orphan is adopted, never created again.
    let vm = with_orphans(none(), vec![orphan("vm-1", Some(ok("vm-1")))]);
    check(present(vm, none(), ReceiptFacts::None), Action::AdoptOrphan(K::Vm, "vm-1".into()));
    // The volume's first create right behind the VM's: the same.
    let vm_out = unknown(0, Seen::NotRead);
    let volume = with_orphans(none(), vec![orphan("vol-1", Some(vol("vol-1", None)))]);
    check(present(vm_out, volume, ReceiptFacts::None), Action::AdoptOrphan(K::Volume, "vol-1".into()));
}

#[test]
fn a_first_create_blocks_on_an_orphan_it_cannot_adopt() {
    let mismatched = Facts { mismatch: Some("region ewr != ams".into()), ..ok("vm-1") };
    for orphans in [
        vec![orphan("vm-1", Some(mismatched))],
        vec![orphan("vm-1", None)],
        vec![orphan("vm-1", Some(ok("vm-1"))), orphan("vm-2", Some(ok("vm-2")))],
    ] {
        check_block(present(with_orphans(none(), orphans), none(), ReceiptFacts::None), B::LabelledOrphan);
    }
    let volume = with_orphans(none(), vec![orphan("vol-1", None)]);
    check_block(present(unknown(0, Seen::NotRead), volume, ReceiptFacts::None), B::LabelledOrphan);
}

#[test]
fn a_client_is_never_deleted_while_a_labelled_orphan_lives() {
    let volume = with_orphans(none(), vec![orphan("vol-9", Some(vol("vol-9", None)))]);
    check_block(absent(none(), volume), B::LabelledOrphan);
    // Its recorded resources are deleted first, as ever.
    let vm = with_orphans(known("vm-1", 0, Seen::NotRead), vec![orphan("vm-2", Some(ok("vm-2")))]);
    check(absent(vm, none()), Action::Observe(K::Vm));
}

#[test]
fn an_unmarked_receipt_is_looked_for_by_label_once_then_sent_again() {
    let unmarked = |seen| res(ReceiptFacts::Unmarked { count: 0 }, seen);
    check(present(unmarked(Seen::NotRead), none(), ReceiptFacts::None), Action::Observe(K::Vm));
    // Nothing carries its label: it never left; sent again on this receipt.
    check(present(unmarked(Seen::ByLabel(vec![])), none(), ReceiptFacts::None), Action::Dispatch(K::Vm));
    // A restored copy lost its mark: what carries its label is adopted.
    check(
        present(unmarked(Seen::ByLabel(vec![ok("vm-1")])), none(), ReceiptFacts::None),
        Action::Adopt(K::Vm, "vm-1".into()),
    );
    check_block(
        present(unmarked(Seen::ByLabel(vec![ok("a"), ok("b")])), none(), ReceiptFacts::None),
        B::DuplicateMatches,
    );
}

/// A ledger state, as the decision reads it for each target: a claim never
/// marked sent is sent again (after one label search) only to create;
/// deleting, it and an abandoned one are looked for like any unknown
/// outcome.
#[test]
fn each_ledger_state_reads_as_its_facts() {
    use oduflow_model::ledger::{Effect, IdSource};
    let unmarked = Effect::Unmarked { not_sent: 2, observations: 4 };
    assert_eq!(ReceiptFacts::of(Some(unmarked.clone()), Target::Present), ReceiptFacts::Unmarked { count: 2 });
    assert_eq!(ReceiptFacts::of(Some(unmarked), Target::Absent), ReceiptFacts::Unknown { observations: 4 });
    let abandoned = Effect::Abandoned { by: "ops".into(), reason: "r".into(), id: None, observations: 1 };
    assert_eq!(ReceiptFacts::of(Some(abandoned), Target::Present), ReceiptFacts::Unknown { observations: 1 });
    let known = Effect::Known { id: "i".into(), source: Some(IdSource::AdoptedByLabel), observations: 3 };
    assert_eq!(ReceiptFacts::of(Some(known), Target::Absent), ReceiptFacts::Known { id: "i".into(), observations: 3 });
    let not_sent = Effect::NotSent { count: 1, reason: "r".into() };
    assert_eq!(
        ReceiptFacts::of(Some(not_sent), Target::Present),
        ReceiptFacts::NotSent { count: 1, reason: "r".into() }
    );
    let rejected = Effect::Rejected { status: 422, message: "m".into() };
    assert_eq!(
        ReceiptFacts::of(Some(rejected), Target::Absent),
        ReceiptFacts::Rejected { status: 422, message: "m".into() }
    );
    assert_eq!(ReceiptFacts::of(None, Target::Present), ReceiptFacts::None);
}

/// A change receipt's state, as the decision reads it: a claim never marked
/// sent is sent again like one that provably never left; an unknown outcome
/// waits for reads; a read's confirmation is final.
#[test]
fn each_ledger_state_of_a_change_reads_as_its_facts() {
    use oduflow_model::ledger::{Effect, IdSource};
    let unmarked = ChangeFacts::of(Some(Effect::Unmarked { not_sent: 1, observations: 0 }));
    assert!(matches!(unmarked, ChangeFacts::NotSent { count: 1, .. }), "{unmarked:?}");
    assert_eq!(ChangeFacts::of(Some(Effect::Unknown { observations: 2 })), ChangeFacts::Sent { observations: 2 });
    let confirmed = Effect::Known { id: "i".into(), source: Some(IdSource::ConfirmedByRead), observations: 2 };
    assert_eq!(ChangeFacts::of(Some(confirmed)), ChangeFacts::Confirmed);
    let rejected = Effect::Rejected { status: 400, message: "m".into() };
    assert_eq!(ChangeFacts::of(Some(rejected)), ChangeFacts::Rejected { status: 400, message: "m".into() });
    assert_eq!(ChangeFacts::of(None), ChangeFacts::None);
}

/// The one rule for a create of unknown outcome, for dispatches and DNS
/// records alike: one match is the one sent, several or none in `max` looks
/// block, none before that is looked for again; never a send again.
#[test]
fn a_lost_create_is_resolved_by_looking_the_same_way_for_every_kind() {
    let max = 3;
    let cases: [(Vec<&str>, i64, Looked<&str>); 6] = [
        (vec![], 0, Looked::Again),
        (vec![], 1, Looked::Again),
        (vec![], 2, Looked::Uncertain),
        (vec!["r-1"], 2, Looked::One("r-1")),
        (vec!["r-1"], 0, Looked::One("r-1")),
        (vec!["r-1", "r-2"], 0, Looked::Several(vec!["r-1", "r-2"])),
    ];
    for (found, observations, want) in cases {
        assert_eq!(lost_create_looked(found.clone(), observations, max), want, "{found:?} after {observations}");
    }
    // The dispatch's decision follows it, at its own limit.
    check_block(present(unknown(MAX - 1, Seen::ByLabel(vec![])), none(), ReceiptFacts::None), B::UncertainCreate);
    check(
        present(unknown(MAX - 2, Seen::ByLabel(vec![])), none(), ReceiptFacts::None),
        Action::CountObservation(K::Vm),
    );
    check(
        present(unknown(MAX - 1, Seen::ByLabel(vec![ok("i-1")])), none(), ReceiptFacts::None),
        Action::Adopt(K::Vm, "i-1".into()),
    );
}
