//! The decision function: from what is recorded (the infra record's target and
//! key binding, the receipts of the current dispatch generations, deletion
//! progress) and what was just observed, choose the one next action.
//!
//! It is pure: no IO, no clock. The executor gathers the facts with bounded
//! reads, calls [`decide`], performs at most one side effect, and runs again.
//! Every rule of docs/protocol.md §3 that can be stated without IO lives here, so it
//! can be tested as a table of small cases.

use crate::ledger::Effect;
use crate::{BlockedReason, ResourceKind, Target};
use serde::{Deserialize, Serialize};

/// What the receipt of the current dispatch generation says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReceiptFacts {
    /// No dispatch yet at this generation.
    None,
    /// Claimed, no id, no rejection: the request may or may not have been
    /// applied (crash before sending, or a lost response). Never re-sent.
    Unknown { observations: i64 },
    /// A definitive 400/401/403/422 answered to the create call itself.
    Rejected { status: u16, message: String },
    /// Claimed, and its last send provably never left the process (the
    /// connection was never established): it may be sent again on this
    /// same receipt, up to the polling limit.
    NotSent { count: i64, reason: String },
    /// Claimed and never marked sent (the mark is recorded right before a
    /// request leaves): its request never left, unless the mark was lost
    /// with a database restored from a backup taken between the claim and
    /// the mark. One label search decides: what carries its label is
    /// adopted; nothing, and it is sent again on this receipt.
    Unmarked { count: i64 },
    /// The provider's id is recorded.
    Known { id: String, observations: i64 },
}

impl ReceiptFacts {
    /// What a receipt's effect says to a record whose target is `target`:
    /// a claim never marked sent may be sent again (after one label search)
    /// only to create; deleting, it may own what it made, so it is looked
    /// for like any unknown outcome. (An abandoned receipt is never a
    /// current one: the next dispatch generation replaces it.)
    pub fn of(effect: Option<Effect>, target: Target) -> Self {
        match effect {
            None => ReceiptFacts::None,
            Some(Effect::Known { id, observations, .. }) => ReceiptFacts::Known { id, observations },
            Some(Effect::Rejected { status, message }) => ReceiptFacts::Rejected { status, message },
            Some(Effect::NotSent { count, reason }) => ReceiptFacts::NotSent { count, reason },
            Some(Effect::Unmarked { not_sent, .. }) if target == Target::Present => {
                ReceiptFacts::Unmarked { count: not_sent }
            }
            Some(Effect::Abandoned { id: Some(id), observations, .. }) => ReceiptFacts::Known { id, observations },
            Some(
                Effect::Unmarked { observations, .. }
                | Effect::Abandoned { id: None, observations, .. }
                | Effect::Unknown { observations },
            ) => ReceiptFacts::Unknown { observations },
        }
    }
}

/// The latest read of one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seen {
    /// Not read in this run.
    NotRead,
    /// GET by the known id answered 404.
    Missing,
    /// GET by id answered with the resource.
    Present(Facts),
    /// A label search (for a receipt without id) found these.
    ByLabel(Vec<Facts>),
}

/// What a read says, reduced to what decisions need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    pub id: String,
    /// `None` when region and configuration match the spec; otherwise why not.
    pub mismatch: Option<String>,
    /// VM: active with server_status ok. Volume: active.
    pub ready: bool,
    /// Volume only: the instance it is attached to.
    pub attached_to: Option<String>,
    /// The provider's words for its state (`pending/none`, ...): evidence
    /// when it never becomes ready.
    pub state: String,
    /// VM: its addresses; volume: its mount id.
    #[serde(default)]
    pub outputs: crate::ServerOutputs,
    /// What differs from the spec and can be changed in place (a VM's plan,
    /// tags and firewall group; a volume's size, upwards). `mismatch` holds
    /// the rest.
    #[serde(default)]
    pub drift: Option<Box<Drift>>,
    /// Volume only: its size as read. A run records it (the infra row's
    /// `progress`), so `client update` knows the size the volume really has.
    #[serde(default)]
    pub size_gb: Option<i64>,
}

impl Facts {
    /// A VM Vultr shows `resizing` (its status): a plan change is under
    /// way, and the old plan shows until it is done.
    pub fn resizing(&self) -> bool {
        self.state.starts_with("resizing/")
    }
}

/// A difference from the spec that a PATCH can remove.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    pub change: Change,
    /// What differs, for evidence (`plan vc2-1c-1gb != vc2-2c-4gb`).
    pub what: String,
}

/// The PATCH that removes a drift.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Instance(crate::provider::InstanceChange),
    VolumeSize(i64),
}

/// What the change receipt of the current spec generation says, for one
/// resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeFacts {
    /// No change claimed for this resource at this spec generation.
    #[default]
    None,
    /// Claimed, and its send provably never left the process: it may be
    /// sent again on the same receipt, up to the polling limit.
    NotSent { count: i64, reason: String },
    /// Sent (accepted, or with an unknown outcome): only reads confirm it.
    Sent { observations: i64 },
    /// A definitive refusal of this very PATCH.
    Rejected { status: u16, message: String },
    /// A read showed the spec after the change.
    Confirmed,
    /// Confirmed, and claimed before a restore the inventory pass
    /// reconciled: a resize the provider shows since may be one the
    /// discarded timeline sent.
    ConfirmedBeforeRestore,
}

impl ChangeFacts {
    /// What a change receipt's effect says: a claim never marked sent
    /// never left (a restored copy doubts it first, marking it sent), so it
    /// is sent again like one that provably never left; an unknown outcome
    /// waits for reads.
    pub fn of(effect: Option<Effect>) -> Self {
        match effect {
            None => ChangeFacts::None,
            Some(Effect::Known { .. }) => ChangeFacts::Confirmed,
            Some(Effect::Rejected { status, message }) => ChangeFacts::Rejected { status, message },
            Some(Effect::NotSent { count, reason }) => ChangeFacts::NotSent { count, reason },
            Some(Effect::Unmarked { not_sent, .. }) => ChangeFacts::NotSent {
                count: not_sent,
                reason: "claimed, but the worker stopped before sending".to_owned(),
            },
            Some(Effect::Unknown { observations } | Effect::Abandoned { observations, .. }) => {
                ChangeFacts::Sent { observations }
            }
        }
    }
}

/// Deletion progress of the current dispatch of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeleteProgress {
    /// A request by id has shown the resource at least once: a GET that
    /// returned it, or the attach answered 2xx (the volume's id in its
    /// path, the VM's in its body). Until then a 404 may be the provider's
    /// post-create lag, so it proves nothing.
    pub seen: bool,
    /// A DELETE was sent after the resource was seen.
    pub delete_sent: bool,
    /// A GET answered 404 after that DELETE: the resource is gone.
    pub deleted: bool,
    /// A listing showed it by its id (not a sighting: requests by id may
    /// still answer 404 then); told in the evidence of a deletion that
    /// cannot be confirmed.
    #[serde(default)]
    pub listed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    pub receipt: ReceiptFacts,
    pub seen: Seen,
    pub progress: DeleteProgress,
    /// Sent longer ago than the readiness wait: if it is still not ready,
    /// it is not going to be by itself.
    pub overdue: bool,
    /// The spec was updated since the client was created: a drift is then
    /// a change to make, not a change someone made behind oduflow's back.
    #[serde(default)]
    pub updated: bool,
    /// The change receipt for this resource at the current spec generation.
    #[serde(default)]
    pub change: ChangeFacts,
    /// The update was asked for longer ago than the readiness wait.
    #[serde(default)]
    pub update_overdue: bool,
    /// A resize of this resource was sent less than the provider's
    /// interval between resizes ago: the next would be refused, so it
    /// waits (a wait bounded by that interval).
    #[serde(default)]
    pub resize_settling: bool,
    /// This spec generation's change of the resource carries a new plan:
    /// a VM's resize after it was sent is its own.
    #[serde(default)]
    pub plan_change: bool,
    /// Live resources whose label names this client and kind and that no
    /// receipt accounts for (the inventory pass after a restore recorded
    /// them as orphans), each read by id. A first create never goes out
    /// while one exists, and the client is never `deleted` while one does.
    #[serde(default)]
    pub orphans: Vec<Orphan>,
}

/// A labelled orphan of this client and kind, as a GET by id showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Orphan {
    pub id: String,
    /// `None`: the GET answered 404 (gone, or Vultr's lag: an inventory
    /// pass, which lists, tells).
    pub facts: Option<Facts>,
}

/// The attach dispatch: receipt only; its confirmation is the volume's
/// `attached_to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    pub target: Target,
    /// The bound key differs from the one configured now.
    pub key_changed: bool,
    pub vm: Resource,
    pub volume: Resource,
    pub attach: ReceiptFacts,
    /// The polling limit before an outcome is declared uncertain.
    pub observations_max: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Read this resource (by id, or by label when the id is unknown), then
    /// decide again.
    Observe(ResourceKind),
    /// Count a fruitless observation on the receipt, then wait.
    CountObservation(ResourceKind),
    /// Commit this id, found by the dispatch's label, on the receipt.
    Adopt(ResourceKind, String),
    /// Claim a receipt for this labelled orphan (it names this client and
    /// kind, and it matches the spec) and commit its id: the first create
    /// it stands for is never sent.
    AdoptOrphan(ResourceKind, String),
    /// Claim a receipt and send the create (or attach) once.
    Dispatch(ResourceKind),
    /// Send DELETE for this id (repeatable).
    Delete(ResourceKind, String),
    /// Record that the resource is confirmed gone (GET 404 after DELETE).
    ConfirmDeleted(ResourceKind),
    /// Record that the resource has been seen (deletion bookkeeping).
    MarkSeen(ResourceKind),
    /// Claim a change receipt and send the PATCH once.
    Change(ResourceKind),
    /// Record that a read shows the change made.
    ConfirmChange(ResourceKind),
    /// Count a read that does not show the change yet, then wait.
    CountChange(ResourceKind),
    /// Nothing to do until the provider moves; look again later.
    Wait,
    Block(BlockedReason, String),
    Ready,
    Deleted,
}

/// Chooses the next action. See the module documentation.
pub fn decide(i: &Inputs) -> Action {
    if i.key_changed {
        return Action::Block(
            BlockedReason::CredentialChanged,
            "the configured API key differs from the one this record is bound to".into(),
        );
    }
    match i.target {
        Target::Present => decide_present(i),
        Target::Absent => decide_absent(i),
    }
}

/// Where one resource stands on the way to existing.
enum Have {
    Act(Action),
    /// Exists, verified; `ready` tells whether it may be attached.
    Verified(Facts),
}

fn create_step(kind: ResourceKind, r: &Resource, max: i64) -> Have {
    let uncertain = match kind {
        ResourceKind::Attach => BlockedReason::UncertainAttach,
        _ => BlockedReason::UncertainCreate,
    };
    match (&r.receipt, &r.seen) {
        // An earlier deletion of this very dispatch must finish first; the
        // executor then starts a new dispatch generation.
        (_, _) if r.progress.delete_sent && !r.progress.deleted => {
            Have::Act(absent_step(kind, r, max).unwrap_or(Action::Wait))
        }
        (ReceiptFacts::None, _) => Have::Act(first_create(kind, r)),
        (ReceiptFacts::NotSent { count, reason }, _) if *count >= max => Have::Act(Action::Block(
            BlockedReason::ProviderUnavailable,
            format!("{} create could not connect to the provider {count} times; last: {reason}", kind.as_str()),
        )),
        // Provably never sent: send again, on the same receipt.
        (ReceiptFacts::NotSent { .. }, _) => Have::Act(Action::Dispatch(kind)),
        (ReceiptFacts::Unmarked { .. }, Seen::NotRead | Seen::Present(_) | Seen::Missing) => {
            Have::Act(Action::Observe(kind))
        }
        (ReceiptFacts::Unmarked { .. }, Seen::ByLabel(found)) if found.is_empty() => Have::Act(Action::Dispatch(kind)),
        (ReceiptFacts::Unmarked { .. }, Seen::ByLabel(found)) => {
            Have::Act(looked_action(kind, lost_create_looked(found.iter().collect(), 0, max), uncertain, max))
        }
        (ReceiptFacts::Rejected { status, message }, _) => Have::Act(Action::Block(
            BlockedReason::CreateRejected,
            format!("{} create rejected with {status}: {message}", kind.as_str()),
        )),
        (ReceiptFacts::Unknown { .. }, Seen::NotRead | Seen::Present(_) | Seen::Missing) => {
            Have::Act(Action::Observe(kind))
        }
        (ReceiptFacts::Unknown { observations }, Seen::ByLabel(found)) => Have::Act(looked_action(
            kind,
            lost_create_looked(found.iter().collect(), *observations, max),
            uncertain,
            max,
        )),
        (ReceiptFacts::Known { .. }, Seen::NotRead | Seen::ByLabel(_)) => Have::Act(Action::Observe(kind)),
        (ReceiptFacts::Known { id, observations }, Seen::Missing) => {
            if *observations + 1 >= max {
                Have::Act(Action::Block(
                    BlockedReason::KnownResourceMissing,
                    format!("{} after {max} observations", missing_evidence(kind, id)),
                ))
            } else {
                // A temporary 404 right after create: the id stays.
                Have::Act(Action::CountObservation(kind))
            }
        }
        (ReceiptFacts::Known { id, .. }, Seen::Present(f)) => match (&f.mismatch, &f.drift) {
            (Some(why), _) => {
                Have::Act(Action::Block(BlockedReason::ConfigMismatch, format!("{} {id}: {why}", kind.as_str())))
            }
            (None, None) if matches!(r.change, ChangeFacts::Sent { .. } | ChangeFacts::NotSent { .. }) => {
                Have::Act(Action::ConfirmChange(kind))
            }
            (None, None) => Have::Verified(f.clone()),
            (None, Some(d)) => Have::Act(change_step(kind, id, r, f, d, max)),
        },
    }
}

/// What one look for a create of unknown outcome found: the resources that
/// carry its mark (a dispatch's label; a DNS record's name, type and data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Looked<T> {
    /// Exactly one: it is the one sent.
    One(T),
    /// None yet: the look is counted, and another follows later (a fresh
    /// resource may not be listed yet).
    Again,
    /// None, in `max` looks: only an operator can tell (the console).
    Uncertain,
    /// Several: only an operator can tell which, if any, was sent.
    Several(Vec<T>),
}

/// "Resolve a lost answer by looking", the one rule for every create whose
/// outcome is unknown (a VM, a volume, an attach, a DNS record): `found`
/// by this look, after `observations` looks that found none, with `max`
/// looks in all before an absence is uncertain. Never a send again.
pub fn lost_create_looked<T>(mut found: Vec<T>, observations: i64, max: i64) -> Looked<T> {
    match found.len() {
        0 if observations + 1 >= max => Looked::Uncertain,
        0 => Looked::Again,
        1 => Looked::One(found.remove(0)),
        _ => Looked::Several(found),
    }
}

/// What a label search decides: the one match is adopted when it matches
/// the spec; a mismatch or several block; none is counted, and blocks
/// `uncertain` at the limit.
fn looked_action(kind: ResourceKind, looked: Looked<&Facts>, uncertain: BlockedReason, max: i64) -> Action {
    match looked {
        Looked::One(one) => match &one.mismatch {
            None => Action::Adopt(kind, one.id.clone()),
            Some(why) => Action::Block(BlockedReason::ConfigMismatch, format!("{} {}: {why}", kind.as_str(), one.id)),
        },
        Looked::Again => Action::CountObservation(kind),
        Looked::Uncertain => Action::Block(
            uncertain,
            format!("{} create outcome unknown; nothing carries its label after {max} observations", kind.as_str()),
        ),
        Looked::Several(many) => several_match(&many),
    }
}

/// Several resources carry one dispatch's label: only an operator can tell.
fn several_match(many: &[&Facts]) -> Action {
    Action::Block(
        BlockedReason::DuplicateMatches,
        format!(
            "{} resources carry this dispatch's label: {}",
            many.len(),
            many.iter().map(|f| f.id.as_str()).collect::<Vec<_>>().join(", ")
        ),
    )
}

/// A first create, unless a live resource already carries a label naming
/// this client and kind with no receipt for it (a restored copy lost the
/// receipt): then that one is adopted when it matches the spec, and
/// anything else blocks (docs/protocol.md §7).
fn first_create(kind: ResourceKind, r: &Resource) -> Action {
    match r.orphans.as_slice() {
        [] => Action::Dispatch(kind),
        [Orphan { id, facts: Some(f) }] if f.mismatch.is_none() => Action::AdoptOrphan(kind, id.clone()),
        orphans => Action::Block(BlockedReason::LabelledOrphan, orphan_evidence(kind, orphans, "nothing was created")),
    }
}

/// `volume vol-1, vol-2: 2 live resource(s) … (vol-1: …; vol-2: …); …`:
/// the orphans that stand in the way, their ids first (the resolutions
/// read them there), then what each read showed.
fn orphan_evidence(kind: ResourceKind, orphans: &[Orphan], outcome: &str) -> String {
    let ids: Vec<&str> = orphans.iter().map(|o| o.id.as_str()).collect();
    let each: Vec<String> = orphans
        .iter()
        .map(|o| match &o.facts {
            None => format!("{}: GET answers 404", o.id),
            Some(Facts { mismatch: Some(why), .. }) => format!("{}: does not match the spec: {why}", o.id),
            Some(f) => format!("{}: {}", o.id, f.state),
        })
        .collect();
    format!(
        "{} {}: {} live resource(s) carry a label naming this client's {}, and no receipt accounts for them ({}); \
         {outcome}",
        kind.as_str(),
        ids.join(", "),
        orphans.len(),
        kind.as_str(),
        each.join("; ")
    )
}

/// A resource that differs from the spec in what a PATCH can change. Until
/// a read shows the change, the old value is accepted (the client waits,
/// it is not blocked); once confirmed, a drift is someone else's change.
fn change_step(kind: ResourceKind, id: &str, r: &Resource, f: &Facts, d: &Drift, max: i64) -> Action {
    let what = format!("{} {id}: {}", kind.as_str(), d.what);
    match &r.change {
        // Never updated, or this generation's change was confirmed: changed
        // behind oduflow's back (the console, say). `client update` to
        // either value resolves it.
        _ if !r.updated => Action::Block(BlockedReason::ConfigMismatch, what),
        ChangeFacts::Confirmed | ChangeFacts::ConfirmedBeforeRestore => {
            Action::Block(BlockedReason::ConfigMismatch, format!("{what} (after the change)"))
        }
        ChangeFacts::None | ChangeFacts::NotSent { .. } if !f.ready && r.update_overdue => Action::Block(
            BlockedReason::NotReady,
            format!("{what}: still {} past the readiness wait, so the change was not sent", f.state),
        ),
        // Vultr refuses a change while the server is locked or resizing.
        ChangeFacts::None | ChangeFacts::NotSent { .. } if !f.ready => Action::Wait,
        ChangeFacts::NotSent { count, reason } if *count >= max => Action::Block(
            BlockedReason::ProviderUnavailable,
            format!("{what}: the change could not connect to the provider {count} times; last: {reason}"),
        ),
        ChangeFacts::None | ChangeFacts::NotSent { .. } if r.resize_settling => Action::Wait,
        ChangeFacts::None | ChangeFacts::NotSent { .. } => Action::Change(kind),
        ChangeFacts::Sent { observations } if *observations + 1 >= max => Action::Block(
            BlockedReason::UncertainUpdate,
            format!("{what}: the change was sent, and {max} reads since have not shown it"),
        ),
        ChangeFacts::Sent { .. } => Action::CountChange(kind),
        ChangeFacts::Rejected { status, message } => Action::Block(
            BlockedReason::UpdateRejected,
            format!("{what}: the change was rejected with {status}: {message}"),
        ),
    }
}

fn decide_present(i: &Inputs) -> Action {
    let max = i.observations_max;
    // The volume does not depend on the VM until attachment: once the VM's
    // create is out (and not refused), the volume's goes out too, without
    // first spending a read on a VM that is surely still pending. (What a
    // read has already shown about the VM is decided on first.)
    let vm_out = matches!(i.vm.receipt, ReceiptFacts::Unknown { .. } | ReceiptFacts::Known { .. })
        && (!i.vm.progress.delete_sent || i.vm.progress.deleted);
    if vm_out && i.vm.seen == Seen::NotRead && i.volume.receipt == ReceiptFacts::None {
        return first_create(ResourceKind::Volume, &i.volume);
    }
    let vm = match create_step(ResourceKind::Vm, &i.vm, max) {
        Have::Act(a) => return a,
        Have::Verified(f) => f,
    };
    // A VM that matches the spec and resizes with no plan change of this
    // client sent at this spec generation is taking one oduflow never sent
    // (the simulator shows the old plan until it is done): reported ready,
    // it would show another plan once done, with no run left to read it.
    // After its own plan change (sent or confirmed) a resize is that
    // change's, whichever plan Vultr shows meanwhile; not after a restore
    // since its confirmation (the discarded timeline may have sent another).
    let own = i.vm.plan_change && matches!(i.vm.change, ChangeFacts::Sent { .. } | ChangeFacts::Confirmed);
    if vm.resizing() && !own {
        return Action::Block(
            BlockedReason::ConfigMismatch,
            format!(
                "vm {}: resizing ({}) though no plan change of this client was sent: one oduflow did not send \
                 (the console, or the timeline a restore discarded); once it is done, `client update --plan` to \
                 the plan it shows",
                vm.id, vm.state
            ),
        );
    }
    let volume = match create_step(ResourceKind::Volume, &i.volume, max) {
        Have::Act(a) => return a,
        Have::Verified(f) => f,
    };
    match volume.attached_to.as_deref() {
        Some(id) if id == vm.id => return Action::Ready,
        Some(other) => {
            return Action::Block(
                BlockedReason::ForeignAttachment,
                format!("volume {} is attached to instance {other}, not to {}", volume.id, vm.id),
            );
        }
        None => {}
    }
    match &i.attach {
        // Vultr refuses attachment while the instance installs.
        ReceiptFacts::None if vm.ready && volume.ready => Action::Dispatch(ResourceKind::Attach),
        ReceiptFacts::None if !vm.ready && i.vm.overdue => Action::Block(
            BlockedReason::NotReady,
            format!("vm {} is still {} past the readiness wait", vm.id, vm.state),
        ),
        ReceiptFacts::None if !volume.ready && i.volume.overdue => Action::Block(
            BlockedReason::NotReady,
            format!("volume {} is still {} past the readiness wait", volume.id, volume.state),
        ),
        ReceiptFacts::None => Action::Wait,
        ReceiptFacts::NotSent { count, reason } if *count >= max => Action::Block(
            BlockedReason::ProviderUnavailable,
            format!(
                "attach not applied {count} times (never sent, or the volume or VM not found by id); last: {reason}"
            ),
        ),
        // (An attach already made shows as the volume's attachment, above.)
        ReceiptFacts::NotSent { .. } | ReceiptFacts::Unmarked { .. } if vm.ready && volume.ready => {
            Action::Dispatch(ResourceKind::Attach)
        }
        ReceiptFacts::NotSent { .. } | ReceiptFacts::Unmarked { .. } => Action::Wait,
        ReceiptFacts::Rejected { status, message } => {
            Action::Block(BlockedReason::AttachRejected, format!("attach rejected with {status}: {message}"))
        }
        ReceiptFacts::Unknown { observations } | ReceiptFacts::Known { observations, .. } => {
            if *observations + 1 >= max {
                Action::Block(
                    BlockedReason::UncertainAttach,
                    format!("attachment of {} to {} not visible after {max} observations", volume.id, vm.id),
                )
            } else {
                Action::CountObservation(ResourceKind::Attach)
            }
        }
    }
}

/// The next deletion step for one resource, or `None` when it is gone (or
/// never existed).
fn absent_step(kind: ResourceKind, r: &Resource, max: i64) -> Option<Action> {
    if r.progress.deleted {
        return None;
    }
    match (&r.receipt, &r.seen) {
        // Nothing was ever sent (or provably not), or it was refused:
        // nothing to delete.
        (ReceiptFacts::None | ReceiptFacts::Rejected { .. } | ReceiptFacts::NotSent { .. }, _) => None,
        // Only a creating run reads a receipt as unmarked.
        (ReceiptFacts::Unmarked { .. }, _) => Some(Action::Observe(kind)),
        (ReceiptFacts::Unknown { .. }, Seen::NotRead | Seen::Present(_) | Seen::Missing) => Some(Action::Observe(kind)),
        (ReceiptFacts::Unknown { observations }, Seen::ByLabel(found)) => {
            Some(match lost_create_looked(found.iter().collect(), *observations, max) {
                // Absence from a listing does not prove the create never landed.
                Looked::Uncertain => Action::Block(
                    BlockedReason::UncertainDelete,
                    format!(
                        "{} create outcome unknown and nothing carries its label after {max} observations; \
                         absence from a listing does not prove it was never created",
                        kind.as_str()
                    ),
                ),
                Looked::Again => Action::CountObservation(kind),
                // Deleting: whatever carries its label is its own, and goes.
                Looked::One(one) => Action::Adopt(kind, one.id.clone()),
                Looked::Several(many) => several_match(&many),
            })
        }
        // Seen by id, no DELETE taken yet: the DELETE goes first, with no
        // read before it (what a read would show, the sighting, is on
        // record; any 404 now is final).
        (ReceiptFacts::Known { id, .. }, Seen::NotRead) if r.progress.seen && !r.progress.delete_sent => {
            Some(Action::Delete(kind, id.clone()))
        }
        (ReceiptFacts::Known { .. }, Seen::NotRead | Seen::ByLabel(_)) => Some(Action::Observe(kind)),
        (ReceiptFacts::Known { id, .. }, Seen::Present(_)) => {
            if !r.progress.seen {
                Some(Action::MarkSeen(kind))
            } else {
                // DELETE may be repeated until a GET answers 404.
                Some(Action::Delete(kind, id.clone()))
            }
        }
        (ReceiptFacts::Known { id, observations }, Seen::Missing) => {
            if r.progress.seen && r.progress.delete_sent {
                Some(Action::ConfirmDeleted(kind))
            } else if r.progress.seen {
                // Seen, now 404, but no DELETE on record (a worker may have
                // died right after sending it): DELETE again, which is
                // harmless, so the 404 that confirms follows a DELETE.
                Some(Action::Delete(kind, id.clone()))
            } else if *observations + 1 >= max {
                let shown = match r.progress.listed {
                    true => "a listing showed it, but no request by id ever did",
                    false => "neither a listing nor a request by id ever showed it",
                };
                Some(Action::Block(
                    BlockedReason::UncertainDelete,
                    format!(
                        "{} {id} answers 404; {shown}, so the 404 may be Vultr's post-create window and it \
                         may still appear: its deletion cannot be confirmed",
                        kind.as_str()
                    ),
                ))
            } else {
                Some(Action::CountObservation(kind))
            }
        }
    }
}

fn decide_absent(i: &Inputs) -> Action {
    let max = i.observations_max;
    // The VM first: deleting it releases the volume's attachment.
    if let Some(a) = absent_step(ResourceKind::Vm, &i.vm, max) {
        return a;
    }
    if let Some(a) = absent_step(ResourceKind::Volume, &i.volume, max) {
        return a;
    }
    // Never deleted while a live resource carries a label naming it.
    for (kind, r) in [(ResourceKind::Vm, &i.vm), (ResourceKind::Volume, &i.volume)] {
        if !r.orphans.is_empty() {
            return Action::Block(
                BlockedReason::LabelledOrphan,
                orphan_evidence(kind, &r.orphans, "the client is not deleted while they live"),
            );
        }
    }
    Action::Deleted
}

/// Why a VM does not match the spec, if it does not: every field the
/// instance object shows is checked (region, plan, label, image source,
/// hostname, tags, firewall group, IPv6). SSH keys, user data, VPCs and
/// the backup setting are not in the object: they are not verified here
/// (docs/vultr.md, "What a found VM can be checked for").
pub fn instance_mismatch(spec: &crate::ClientSpec, label: &str, inst: &crate::provider::Instance) -> Option<String> {
    let why: Vec<String> = [instance_fixed_mismatch(spec, label, inst), instance_drift(spec, inst).map(|d| d.what)]
        .into_iter()
        .flatten()
        .collect();
    (!why.is_empty()).then(|| why.join("; "))
}

/// What differs from the spec that no PATCH can change (region, image,
/// label, hostname, IPv6).
pub fn instance_fixed_mismatch(
    spec: &crate::ClientSpec,
    label: &str,
    inst: &crate::provider::Instance,
) -> Option<String> {
    use crate::ImageSource;
    let mut why = vec![];
    if inst.region != spec.region {
        why.push(format!("region {} != {}", inst.region, spec.region));
    }
    match &spec.image {
        ImageSource::Os(n) if inst.os_id != *n => why.push(format!("os_id {} != {n}", inst.os_id)),
        ImageSource::App(n) if inst.app_id != *n => why.push(format!("app_id {} != {n}", inst.app_id)),
        ImageSource::Image(i) if inst.image_id != *i => why.push(format!("image_id {:?} != {i:?}", inst.image_id)),
        // The instance object names no snapshot: a snapshot source cannot
        // be checked once deployed.
        _ => {}
    }
    if inst.label != label {
        why.push(format!("label {:?} != {label:?}", inst.label));
    }
    let s = &spec.server;
    if !s.hostname.is_empty() && !inst.hostname.is_empty() && inst.hostname != s.hostname {
        why.push(format!("hostname {:?} != {:?}", inst.hostname, s.hostname));
    }
    if s.ipv6 && inst.v6_main_ip.is_empty() && inst.is_ready() {
        why.push("IPv6 asked for, but the instance has no IPv6 address".to_owned());
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// What differs from the spec that PATCH /instances/{id} can change: the
/// plan, the tags (as a set) and the firewall group.
pub fn instance_drift(spec: &crate::ClientSpec, inst: &crate::provider::Instance) -> Option<Drift> {
    let change = crate::provider::InstanceChange::between(spec, inst)?;
    let mut why = vec![];
    if change.plan.is_some() {
        why.push(format!("plan {} != {}", inst.plan, spec.plan));
    }
    if change.tags.is_some() {
        let mut have = inst.tags.clone();
        let mut want = spec.server.tags.clone();
        have.sort();
        want.sort();
        why.push(format!("tags {have:?} != {want:?}"));
    }
    if let Some(f) = &change.firewall_group_id {
        why.push(format!("firewall group {:?} != {f:?}", inst.firewall_group_id));
    }
    Some(Drift { change: Change::Instance(change), what: why.join("; ") })
}

/// A volume smaller than the spec: PATCH /blocks/{id} can grow it.
pub fn block_drift(spec: &crate::ClientSpec, b: &crate::provider::Block) -> Option<Drift> {
    (b.size_gb < spec.volume_gb).then(|| Drift {
        change: Change::VolumeSize(spec.volume_gb),
        what: format!("size {} GB != {} GB", b.size_gb, spec.volume_gb),
    })
}

/// Why a volume does not match the spec, if it does not.
pub fn block_mismatch(spec: &crate::ClientSpec, label: &str, b: &crate::provider::Block) -> Option<String> {
    let why: Vec<String> =
        [block_fixed_mismatch(spec, label, b), block_drift(spec, b).map(|d| d.what)].into_iter().flatten().collect();
    (!why.is_empty()).then(|| why.join("; "))
}

/// What differs from the spec that no PATCH can change: region, type,
/// label, and a volume larger than the spec (volumes only grow).
pub fn block_fixed_mismatch(spec: &crate::ClientSpec, label: &str, b: &crate::provider::Block) -> Option<String> {
    let mut why = vec![];
    if b.region != spec.region {
        why.push(format!("region {} != {}", b.region, spec.region));
    }
    if b.size_gb > spec.volume_gb {
        why.push(format!("size {} GB != {} GB (volumes only grow)", b.size_gb, spec.volume_gb));
    }
    if !b.block_type.is_empty() && b.block_type != spec.volume_type.as_str() {
        why.push(format!("type {} != {}", b.block_type, spec.volume_type.as_str()));
    }
    if b.label != label {
        why.push(format!("label {:?} != {label:?}", b.label));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// How a `known_resource_missing` block's evidence names the resource
/// (`vm ID answers 404`): an operator may abandon that resource's dispatch
/// to build it again.
pub fn missing_evidence(kind: ResourceKind, id: &str) -> String {
    format!("{} {id} answers 404", kind.as_str())
}

/// A ready client's resources as recorded and as the listings show them.
pub struct Listed<'a> {
    pub spec: &'a crate::ClientSpec,
    /// The VM's id, its receipt's label and its main IP as recorded.
    pub vm: (&'a str, &'a str, &'a str),
    /// The volume's id and its receipt's label.
    pub volume: (&'a str, &'a str),
    pub instance: Option<&'a crate::provider::Instance>,
    pub block: Option<&'a crate::provider::Block>,
}

/// For the verification pass: what the listings show differing from the
/// spec and the record, one item per difference with the resource it is
/// about (empty: nothing). A listing that leaves a resource out proves
/// nothing by itself (listings lag): the run the pass queues decides, by
/// id; each item is evidence for that run and for the operator.
pub fn listed_drift(l: &Listed<'_>) -> Vec<(ResourceKind, String)> {
    let ((vm, vm_label, ip), (vol, vol_label)) = (l.vm, l.volume);
    let mut out = vec![];
    let mut on_vm = |why: String| out.push((ResourceKind::Vm, why));
    match l.instance {
        None => on_vm(format!("vm {vm} is not listed")),
        Some(i) => {
            if let Some(why) = instance_mismatch(l.spec, vm_label, i) {
                on_vm(format!("vm {vm}: {why}"));
            }
            if !ip.is_empty() && !i.main_ip.is_empty() && i.main_ip != ip {
                on_vm(format!("vm {vm}: main IP {} != {ip} (recorded)", i.main_ip));
            }
        }
    }
    let mut on_volume = |why: String| out.push((ResourceKind::Volume, why));
    match l.block {
        None => on_volume(format!("volume {vol} is not listed")),
        Some(b) => {
            if let Some(why) = block_mismatch(l.spec, vol_label, b) {
                on_volume(format!("volume {vol}: {why}"));
            }
            match b.attached_to_instance.as_ref().map(|v| v.as_str()) {
                Some(to) if to == vm => {}
                Some(other) => on_volume(format!("volume {vol} is attached to instance {other}, not to {vm}")),
                None => on_volume(format!("volume {vol} is detached (not attached to vm {vm})")),
            }
        }
    }
    out
}
