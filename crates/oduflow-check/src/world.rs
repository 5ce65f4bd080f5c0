//! The state of the modelled world: the clients' rows in the database (and
//! an older copy of them, for a restore), the provider's resources, the
//! workers, what is left of each kind of fault, and the ghost record the
//! properties are checked against.

use oduflow_model::decide::DeleteProgress;
use oduflow_model::ledger::Effect;
use oduflow_model::{BlockedReason, ClientStatus, ResourceKind, Target};

/// The kinds a client's dispatches are of, in the order the arrays below
/// keep them.
pub const KINDS: [ResourceKind; 3] = [ResourceKind::Vm, ResourceKind::Volume, ResourceKind::Attach];

/// The index of a kind in [`KINDS`].
pub fn slot(kind: ResourceKind) -> usize {
    match kind {
        ResourceKind::Vm => 0,
        ResourceKind::Volume => 1,
        ResourceKind::Attach => 2,
    }
}

/// A receipt: the ledger's record of one dispatch, its lifecycle the
/// model's own [`Effect`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Receipt {
    pub kind: ResourceKind,
    /// The dispatch generation: with the client and kind, the operation key.
    pub generation: u8,
    /// The dispatch's label: unique, never given twice (a resource carries
    /// the label of the dispatch that made it).
    pub label: u8,
    pub effect: Effect,
    pub progress: DeleteProgress,
    /// An attach: the VM and the volume it names.
    pub pair: Option<(u8, u8)>,
    /// The spec generation it was dispatched at.
    pub spec: u8,
}

/// A change receipt: one PATCH (a volume's resize), recorded before it is
/// sent, confirmed only by a read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Change {
    /// The spec generation it brings the volume to (its size, in the model).
    pub spec: u8,
    /// The volume it resizes.
    pub resource: u8,
    pub effect: Effect,
}

/// A DNS record the DNS adapter owns for the client (its ownership
/// record, kept in the database): the create of the client's A record, on
/// the ledger's lifecycle (`Unknown` from its claim until its id is
/// recorded).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owned {
    /// Unique per claim (the ghost tells its sends apart by it).
    pub label: u8,
    /// The address it points to: the VM's id, in the model.
    pub data: u8,
    pub effect: Effect,
    /// 404s in a row to its GET.
    pub missing: u8,
    /// Taken as gone: the next ensure makes a new one and deletes this id.
    pub gone: bool,
    pub deletion: Deletion,
}

/// How far a DELETE of an owned record has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deletion {
    None,
    /// Recorded before it is sent.
    Sent,
    /// Answered (a 204, or a 404 after an earlier DELETE): a GET 404 then
    /// confirms it.
    Answered,
}

/// Where the DNS adapter stands for the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DnsState {
    Unset,
    /// Ensured with these facts: the VM's address (an ensure with other
    /// facts runs again, as the executor's `ensured` compares them).
    Ensured(u8),
    Removed,
}

/// A record in the zone, at the one DNS name both clients want (the
/// model's record stands for the A record and the owner marker beside it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ZoneRecord {
    /// The client its owner marker names.
    pub owner: u8,
    pub data: u8,
    pub alive: bool,
    /// A GET by id finds it (a fresh record may answer 404 for a while).
    pub by_id: bool,
}

/// A client's row: its intent, status, claim and DNS ownership.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its id, as its DNS owner marker names it (never given twice).
    pub id: u8,
    /// The second client's VM address (the first's is its VM receipt's
    /// id): a new one, or one the provider gave the first client's VM
    /// before (addresses are reassigned).
    pub address: u8,
    pub target: Target,
    /// Moved by every change of intent: a run begun before it is stale.
    pub generation: u8,
    pub status: ClientStatus,
    pub reason: Option<BlockedReason>,
    /// A job is due for the client.
    pub queued: bool,
    /// Who holds the client's claim: (worker, fence).
    pub claim: Option<(u8, u8)>,
    /// Runs that ended in a wait since the intent last changed: time, as
    /// far as the readiness wait is concerned.
    pub waits: u8,
    /// The DNS adapter's ownership record and state.
    pub dns: Vec<Owned>,
    pub dns_state: DnsState,
}

/// The database's rows: what a restore puts back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Db {
    pub client: Client,
    /// A second client, created later with the first one's DNS name (the
    /// store gives the name to one client not deleted at a time): its VM
    /// is taken as made, its runs are the DNS adapter's ensure and remove.
    pub rival: Option<Client>,
    /// The last fence handed out.
    pub fences: u8,
    pub receipts: Vec<Receipt>,
    /// The spec generation: `client update` moves it, and the volume's size
    /// with it (the model's only change).
    pub spec: u8,
    pub changes: Vec<Change>,
    /// The dispatch generation of each kind, as the record's last committed
    /// run left it.
    pub infra_generation: [u8; 3],
    /// The API key the record is bound to (at its first run).
    pub bound_key: Option<u8>,
    /// Resources the inventory recorded as orphans of this client.
    pub orphans: Vec<u8>,
    /// Restored from a copy: nothing is claimed until the inventory pass.
    pub restore_pending: bool,
}

/// One resource at the provider. Every resource carries a label of the
/// first client's (the second's VM is taken as made).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Res {
    pub kind: ResourceKind,
    pub label: u8,
    pub alive: bool,
    /// A GET by id finds it (until then it answers 404: the post-create
    /// window).
    pub by_id: bool,
    /// Listings show it (they lag a create).
    pub listed: bool,
    /// Active (a VM: installed and running).
    pub ready: bool,
    /// A volume: the VM it is attached to.
    pub attached_to: Option<u8>,
    /// A volume: its size (the spec generation it was made or resized
    /// for), and the size a resize under way brings it to.
    pub size: u8,
    pub resizing_to: Option<u8>,
}

/// How the provider answered the last send of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Made, with this id in the answer.
    Made(u8),
    /// Made, and the answer lost.
    Lost,
    /// Not applied, and the answer lost (a timeout).
    Unapplied,
    /// Refused definitively (a 422).
    Refused,
    /// Never left: no connection.
    NotConnected,
}

/// Where a worker's run stands between two of its steps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Next: read the receipts and decide.
    Decide,
    /// The receipt of a send is claimed (at `index`; `None` when a flaw
    /// claims none); next: the send.
    Claimed { receipt: Receipt, index: Option<usize> },
    /// Marked sent past its guard; next: the request leaves, answered so.
    Leaving { receipt: Receipt, index: Option<usize>, how: crate::SendAs },
    /// The send is answered; next: its answer recorded on the receipt.
    Answered { receipt: Receipt, index: Option<usize>, answer: Answer },
    /// A DELETE was sent (applied or not); next: recorded on the receipt.
    DeleteSent(usize),
    /// A DNS record's create is claimed (index); next: the POST.
    DnsClaimed(usize),
    /// The POST is answered; next: recorded.
    DnsAnswered(usize, Answer),
    /// A DELETE of an owned record (index) is recorded as sent (`true`:
    /// after an earlier one); next: the DELETE.
    DnsDeleting(usize, bool),
    /// A DELETE of an owned record (index) was answered so (`true`: a 204,
    /// or a 404 after an earlier DELETE); next: recorded.
    DnsDeleted(usize, bool),
    /// The change receipt (index) is claimed; next: the PATCH.
    PatchClaimed(usize),
    /// The PATCH is answered; next: its answer recorded.
    PatchAnswered(usize, Answer),
}

/// What a read showed of one resource.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sight {
    pub id: u8,
    pub ready: bool,
    pub attached_to: Option<u8>,
    pub size: u8,
}

/// What a run's read of one resource showed, for the receipt (label) it
/// was made for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Read {
    NotRead,
    Missing(u8),
    Present(u8, Sight),
    ByLabel(u8, Vec<Sight>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// Whose run: 0 the client, 1 the second client.
    pub client: u8,
    pub fence: u8,
    /// The record's generation when the run began.
    pub generation: u8,
    pub target: Target,
    /// The API key the worker was started with.
    pub key: u8,
    /// The latest read of the VM and of the volume.
    pub reads: [Read; 2],
    pub phase: Phase,
    /// Decisions taken in this run (the executor's per-run limit).
    pub steps: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Worker {
    Idle,
    Running(Run),
    /// Out for good (a flaw: a failed commit or a failed start it never
    /// recovers from).
    Broken,
}

/// What is left of each fault and each operator action: the bounds that
/// keep the world small.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Budget {
    pub crashes: u8,
    pub lost_answers: u8,
    pub refusals: u8,
    pub unconnected: u8,
    pub claim_losses: u8,
    pub flips: u8,
    pub restores: u8,
    pub key_changes: u8,
    pub operator: u8,
    pub updates: u8,
    /// The second client's changes of intent: its creation with the first
    /// one's DNS name, its deletion, its creation again.
    pub rivals: u8,
    /// A run's commit fails (a full disk, a read-only file, a dropped
    /// connection).
    pub failed_commits: u8,
    /// A worker restarts and its start meets a transient failure (no
    /// connection to the database or the provider, a 500).
    pub start_failures: u8,
}

impl Budget {
    /// Spends the fault a send's answer stands for, when the answer is
    /// chosen (an answered send spends nothing).
    pub fn spend(&mut self, how: crate::SendAs) {
        let left = match how {
            crate::SendAs::Answered => return,
            crate::SendAs::Lost | crate::SendAs::Unapplied => &mut self.lost_answers,
            crate::SendAs::Refused => &mut self.refusals,
            crate::SendAs::NotConnected => &mut self.unconnected,
        };
        *left = left.saturating_sub(1);
    }

    /// Every fault of this budget is in `other` at least as often: a world
    /// with `other` reaches every schedule of one with this (so a property
    /// that holds there holds here).
    pub fn within(&self, other: &Budget) -> bool {
        let a = [
            self.crashes,
            self.lost_answers,
            self.refusals,
            self.unconnected,
            self.claim_losses,
            self.flips,
            self.restores,
            self.key_changes,
            self.operator,
            self.updates,
            self.rivals,
            self.failed_commits,
            self.start_failures,
        ];
        let b = [
            other.crashes,
            other.lost_answers,
            other.refusals,
            other.unconnected,
            other.claim_losses,
            other.flips,
            other.restores,
            other.key_changes,
            other.operator,
            other.updates,
            other.rivals,
            other.failed_commits,
            other.start_failures,
        ];
        a.iter().zip(b).all(|(x, y)| *x <= y)
    }
}

/// What really happened, for the properties: never restored, never read
/// by the protocol.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// The operation key (kind, dispatch generation) of every create
    /// request that left a worker since the last restore: a restored copy
    /// hands out again the generations the discarded timeline used (the
    /// label tells the two apart, and the inventory accounts for what the
    /// first made).
    pub creates: Vec<(ResourceKind, u8)>,
    /// The change key (volume, spec generation) of every PATCH that left
    /// since the last restore (as with creates, a restored copy may send
    /// again a change the discarded timeline sent and that made nothing:
    /// one that made its change shows it once the listings settle).
    pub patches: Vec<(u8, u8)>,
    /// The labels of the DNS record creates that left.
    pub dns_creates: Vec<u8>,
    /// The labels of the requests that left (attaches included), ever.
    pub left: Vec<u8>,
    /// The labels of the creates that left, ever (an attach answered 404
    /// is sent again on its receipt, by the protocol).
    pub create_labels: Vec<u8>,
    /// Labels whose run died between the mark and the request.
    pub died_marked: Vec<u8>,
    /// Labels the inventory doubted after a restore (marked sent without
    /// knowing).
    pub doubted: Vec<u8>,
    /// The first evidence each label's receipt held: (label, evidence).
    pub evidence: Vec<(u8, String)>,
    /// A receipt's evidence was written over.
    pub rewritten: bool,
    /// A request left with a key the record is not bound to.
    pub unbound_send: bool,
    /// A request left from a run whose claim was lost or superseded.
    pub unfenced_send: bool,
    /// A decision the model does not carry out (a change, say): the model
    /// would be silently incomplete, so it is a property of its own.
    pub unmodelled: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub db: Db,
    /// A copy of the rows taken earlier, which a restore puts back.
    pub copy: Option<Db>,
    pub cloud: Vec<Res>,
    /// The client's DNS zone.
    pub zone: Vec<ZoneRecord>,
    /// The API key workers are configured with now.
    pub key: u8,
    pub workers: Vec<Worker>,
    /// The next dispatch label.
    pub labels: u8,
    /// The next client id (ids are never given twice, restores or not).
    pub ids: u8,
    pub budget: Budget,
    pub ghost: Ghost,
}

impl Db {
    /// Client `c`'s row (0: the first, 1: the second, once created).
    pub fn row(&self, c: u8) -> &Client {
        match c {
            0 => &self.client,
            _ => self.rival.as_ref().expect("no run of the second client outlives its row"),
        }
    }

    pub fn row_mut(&mut self, c: u8) -> &mut Client {
        match c {
            0 => &mut self.client,
            _ => self.rival.as_mut().expect("no run of the second client outlives its row"),
        }
    }

    /// The rows there are, to write.
    pub fn rows_mut(&mut self) -> impl Iterator<Item = &mut Client> {
        std::iter::once(&mut self.client).chain(self.rival.as_mut())
    }

    /// The rows there are, by slot.
    pub fn rows(&self) -> impl Iterator<Item = (u8, &Client)> {
        std::iter::once((0, &self.client)).chain(self.rival.iter().map(|r| (1, r)))
    }

    /// The DNS name is held by a client other than `c` that is not deleted
    /// (what the store's unique index refuses a create or an update).
    pub fn name_held_against(&self, c: u8) -> bool {
        self.rows().any(|(s, r)| s != c && r.status != ClientStatus::Deleted)
    }
}

impl World {
    /// The receipt index of the current dispatch of `label`, if any.
    pub fn receipt_of_label(&self, label: u8) -> Option<usize> {
        self.db.receipts.iter().position(|r| r.label == label)
    }

    /// The resource the provider knows by this id.
    pub fn res(&self, id: u8) -> &Res {
        &self.cloud[usize::from(id)]
    }

    /// Live resources of a kind.
    pub fn live(&self, kind: ResourceKind) -> usize {
        self.cloud.iter().filter(|r| r.kind == kind && r.alive).count()
    }
}

/// A resource id as the provider spells it in the model.
pub fn rid(id: u8) -> String {
    format!("r{id}")
}

/// The id back from its spelling.
pub fn parse_rid(s: &str) -> Option<u8> {
    s.strip_prefix('r')?.parse().ok()
}
