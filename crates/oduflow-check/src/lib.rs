//! The dispatch protocol as a model, checked in every state a small world
//! can reach (docs/protocol.md §8.1, "The model check").
//!
//! The world is one client, a second one that wants its DNS name, two or
//! three workers, the provider and the database. The workers run the protocol as the executor does: a claim
//! with a fence, reads of the receipts, the real [`oduflow_model::decide::decide`]
//! over the real [`oduflow_model::ledger::Effect`], a receipt claimed before
//! each send and marked right before it leaves, the answer recorded after,
//! one commit at the end of the run. Everything else is a nondeterministic
//! choice, bounded by a [`Budget`]: answers lost (applied or not), refusals,
//! sends that never connect, the provider's post-create 404 window and
//! listing lag, crashes at every step, claims lost, failed commits and
//! starts, target flips, a key changed, an operator's resolutions, a
//! restore of an older copy of the database and the inventory pass after
//! it.
//!
//! [`stateright`] explores every interleaving breadth first and checks the
//! safety properties ([`properties`]) in each state; [`live`] checks that
//! from every reachable state the client can still settle. A [`Flaw`]
//! switched on re-opens a planted bug or a fixed hole, and the check must
//! then find a counterexample, printed by [`trace`] as a readable schedule.

mod dns;
mod env;
pub mod live;
mod props;
mod run;
pub mod trace;
pub mod world;

pub use props::{PROPERTIES, properties};
pub use world::{Budget, World};

use stateright::{Checker, Model, Property};
use world::*;

/// A deliberate protocol violation, switched on in the model: the store's
/// planted bugs (under the names `ODUFLOW_PLANTED_BUG` gives them) and the
/// holes fixed before, re-opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flaw {
    /// Re-send a create whose answer was lost, as a naive client would.
    ResendAfterLost,
    /// Send a change's PATCH again while its outcome is unknown.
    ResendChange,
    /// Send creates without claiming a receipt first.
    ForgetReceipt,
    /// A deletion looks only at the dispatch generations the record's last
    /// committed run recorded, not at every receipt that may own a resource.
    SkipOpenReceipts,
    /// Never look for labelled orphans.
    SkipLabelCheck,
    /// Send with a key the record is not bound to.
    IgnoreKeyChange,
    /// Take a listing's sighting for a GET's.
    ListingTakenAsSeen,
    /// A claim whose fence is never checked again (a lease a paused worker
    /// outlives).
    LeaseOverlap,
    /// Hole: a create marked sent when its receipt is claimed, not right
    /// before it leaves, so a send the guard stops is recorded as sent.
    MarkAtClaim,
    /// Hole: a recorded id forgotten after one 404 (the post-create window),
    /// and its resource created again.
    ForgetIdOn404,
    /// Hole: the fence checks the claim but not the record's generation, so
    /// a run keeps sending for a target flipped under it.
    FenceIgnoresFlips,
    /// Hole: an owned DNS record taken as gone after one 404 (a fresh
    /// record's window), and made again.
    DnsGoneAfterOne404,
    /// Hole (found by this model): a 404 to a DNS record's DELETE taken as
    /// proof once a DELETE was recorded as sent, even so soon after the
    /// create (a run that recorded it may have died before sending it).
    DnsDelete404Trusted,
    /// Hole: the claim of a worker that died is never released (a worker
    /// that never recovers holds its clients for ever). Liveness.
    ClaimNeverExpires,
    /// Hole: after a restore, a receipt the copy shows never sent (not
    /// connected, or never marked) is trusted, though the discarded
    /// timeline may have sent it since.
    RestoreTrustsUnsent,
    /// Hole: the store gives a DNS name a live client holds to a second
    /// client (no unique index), and two workers' checks of the zone race.
    NameNotUnique,
    /// Hole: the DNS adapter creates a record without first looking in the
    /// zone for a record at the name that another client's marker names.
    NameNotCheckedInZone,
    /// Hole: `reconcile` after a definitive refusal of a change clears the
    /// refusal, and the same PATCH is sent again.
    ReconcileResendsRefused,
    /// Hole: a worker whose commit failed never recovers (every later
    /// claim fails on its broken connection). Liveness.
    FailedCommitSticks,
    /// Hole: a transient failure at a worker's start ends it for good (an
    /// exit its service manager does not restart). Liveness.
    StartFailureIsFatal,
    /// Hole (found by this model): after a restore, a DNS identity the copy
    /// records `ensured` is trusted, though the discarded timeline may have
    /// deleted its record.
    RestoreTrustsEnsured,
}

impl Flaw {
    /// Every flaw, with its name: a planted bug's is the store's.
    pub const ALL: [(Flaw, &'static str); 21] = [
        (Flaw::ResendAfterLost, "resend_after_lost"),
        (Flaw::ForgetReceipt, "forget_receipt"),
        (Flaw::ResendChange, "resend_change"),
        (Flaw::SkipOpenReceipts, "skip_open_receipts"),
        (Flaw::SkipLabelCheck, "skip_label_check"),
        (Flaw::IgnoreKeyChange, "ignore_key_change"),
        (Flaw::ListingTakenAsSeen, "listing_taken_as_seen"),
        (Flaw::LeaseOverlap, "lease_overlap"),
        (Flaw::MarkAtClaim, "hole:mark_at_claim"),
        (Flaw::ForgetIdOn404, "hole:forget_id_on_404"),
        (Flaw::FenceIgnoresFlips, "hole:fence_ignores_flips"),
        (Flaw::RestoreTrustsUnsent, "hole:restore_trusts_unsent"),
        (Flaw::ClaimNeverExpires, "hole:claim_never_expires"),
        (Flaw::DnsGoneAfterOne404, "hole:dns_gone_after_one_404"),
        (Flaw::DnsDelete404Trusted, "hole:dns_delete_404_trusted"),
        (Flaw::NameNotUnique, "hole:name_not_unique"),
        (Flaw::NameNotCheckedInZone, "hole:name_not_checked_in_zone"),
        (Flaw::ReconcileResendsRefused, "hole:reconcile_resends_refused"),
        (Flaw::FailedCommitSticks, "hole:failed_commit_sticks"),
        (Flaw::StartFailureIsFatal, "hole:start_failure_is_fatal"),
        (Flaw::RestoreTrustsEnsured, "hole:restore_trusts_ensured"),
    ];

    /// Planted bugs of the store the model does not carry, and why.
    pub const NOT_MODELLED: [(&'static str, &'static str); 0] = [];

    pub fn name(self) -> &'static str {
        Flaw::ALL.iter().find(|(f, _)| *f == self).map_or("", |(_, n)| n)
    }

    pub fn named(name: &str) -> Option<Flaw> {
        Flaw::ALL.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }
}

/// The size of the world and the flaw switched on, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub workers: u8,
    /// The polling limit (`observations_max`).
    pub observations_max: i64,
    /// Runs that end in a wait before a resource short of ready is overdue.
    pub waits_max: u8,
    /// Decisions per run.
    pub steps_max: u8,
    pub budget: Budget,
    pub flaw: Option<Flaw>,
    /// An operator's abandon waits for no request of the receipt still in
    /// flight. Off, the model shows the limit docs/protocol.md §8 states:
    /// a request stalled past its guard for the whole polling limit lands
    /// after the abandon, and a second VM is made.
    pub abandon_after_in_flight: bool,
    /// The second client's VM may get an address a VM of the first had
    /// (the nightly run's: it grows the names worlds by half).
    pub reused_addresses: bool,
}

impl Config {
    /// Two workers and no fault: the happy path and its interleavings.
    pub fn calm() -> Config {
        Config {
            workers: 2,
            observations_max: 2,
            waits_max: 1,
            steps_max: 6,
            budget: Budget::default(),
            flaw: None,
            abandon_after_in_flight: true,
            reused_addresses: false,
        }
    }

    /// The worlds the test command checks, each the calm one with a set of
    /// faults at most once: all faults at once is out of reach of a test
    /// (the nightly run takes bigger combinations).
    pub fn worlds() -> Vec<(&'static str, Config)> {
        let with = |spec: &str| {
            let mut c = Config::calm();
            c.set_budget(spec).map(|()| c)
        };
        [
            (
                "sends: crashes, lost answers, refusals, no connection, an operator",
                "crashes=1,lost_answers=1,refusals=1,unconnected=1,operator=1",
            ),
            ("claims: a paused worker's claim lost, a flip", "claim_losses=1,flips=1"),
            ("restores: a copy restored, a lost answer", "restores=1,lost_answers=1"),
            ("restores: a copy restored, a size updated", "restores=1,updates=1"),
            ("restores: a copy restored, a crash, no connection", "restores=1,crashes=1,unconnected=1"),
            (
                "keys and updates: a key changed, a size updated and refused, an operator",
                "key_changes=1,operator=1,updates=1,refusals=1",
            ),
            ("names: the DNS name handed to a second client and back", "rivals=2,flips=2"),
            (
                "names: the client deleted, a second given its DNS name and deleted, a copy restored",
                "rivals=2,flips=1,restores=1",
            ),
            (
                "workers: commits and starts that fail, a paused worker's claim lost",
                "failed_commits=2,start_failures=2,claim_losses=1",
            ),
        ]
        .into_iter()
        .filter_map(|(name, spec)| with(spec).ok().map(|c| (name, c)))
        .collect()
    }

    /// The nightly world: bigger combinations of faults, three workers.
    pub fn nightly() -> Vec<(&'static str, Config)> {
        let mut out = vec![];
        for (name, spec) in [
            ("nightly claims: claim lost, a flip, a crash", "claim_losses=1,flips=1,crashes=1"),
            ("nightly sends and an operator after a claim lost", "crashes=1,lost_answers=1,claim_losses=1,operator=1"),
            ("nightly churn: three flips", "flips=3"),
            ("nightly churn: two flips, a refusal", "flips=2,refusals=1"),
            ("nightly restores, updates, an operator", "restores=1,lost_answers=1,operator=1,updates=1"),
            (
                "nightly keys: a key changed, a crash, an update, an operator",
                "key_changes=1,operator=1,crashes=1,updates=1",
            ),
            ("nightly three workers", "workers=3,crashes=1,lost_answers=1,flips=1"),
            ("nightly names: a restore, a crash", "rivals=1,flips=1,restores=1,crashes=1"),
            ("nightly names: a restore, a lost answer", "rivals=1,flips=1,restores=1,lost_answers=1"),
            ("nightly names: handed over and back, addresses reused", "rivals=2,flips=2"),
            ("nightly names: given, deleted, restored, addresses reused", "rivals=2,flips=1,restores=1"),
            (
                "nightly workers: failures, a crash, a claim lost",
                "failed_commits=2,start_failures=2,crashes=1,claim_losses=1",
            ),
        ] {
            let mut c = Config::calm();
            c.reused_addresses = true;
            if c.set_budget(spec).is_ok() {
                out.push((name, c));
            }
        }
        out
    }

    /// Sets budgets from `crashes=2,flips=0,...` (and `workers=N`).
    pub fn set_budget(&mut self, spec: &str) -> Result<(), String> {
        for part in spec.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("{part:?}: expected NAME=N"))?;
            let v: u8 = v.parse().map_err(|_| format!("{part:?}: not a small number"))?;
            let b = &mut self.budget;
            let slot = match k {
                "workers" => &mut self.workers,
                "crashes" => &mut b.crashes,
                "lost_answers" => &mut b.lost_answers,
                "refusals" => &mut b.refusals,
                "unconnected" => &mut b.unconnected,
                "claim_losses" => &mut b.claim_losses,
                "flips" => &mut b.flips,
                "restores" => &mut b.restores,
                "key_changes" => &mut b.key_changes,
                "operator" => &mut b.operator,
                "updates" => &mut b.updates,
                "rivals" => &mut b.rivals,
                "failed_commits" => &mut b.failed_commits,
                "start_failures" => &mut b.start_failures,
                _ => return Err(format!("{k:?}: not a budget")),
            };
            *slot = v;
        }
        Ok(())
    }

    /// The calm world with a flaw switched on and the faults it needs to
    /// show (the search stops at its first counterexample).
    pub fn with_flaw(flaw: Flaw) -> Config {
        let mut c = Config::calm();
        let needs = match flaw {
            Flaw::ResendAfterLost => "lost_answers=1",
            Flaw::ResendChange => "updates=1",
            Flaw::ForgetReceipt => "crashes=1",
            // A deletion, a creation again, and a deletion again.
            Flaw::SkipOpenReceipts => "flips=3",
            Flaw::SkipLabelCheck => "restores=1,crashes=1",
            Flaw::RestoreTrustsUnsent => "restores=1,unconnected=1",
            Flaw::IgnoreKeyChange => "key_changes=1",
            Flaw::ListingTakenAsSeen | Flaw::FenceIgnoresFlips => "flips=1",
            Flaw::LeaseOverlap | Flaw::MarkAtClaim => "claim_losses=1",
            Flaw::ForgetIdOn404 | Flaw::DnsGoneAfterOne404 => "",
            Flaw::DnsDelete404Trusted => "claim_losses=1,flips=1",
            Flaw::ClaimNeverExpires => "crashes=1",
            Flaw::NameNotUnique => "rivals=1",
            // The first client deleted, its name given to a second, and a
            // copy from before restored over it: the first, back, makes its
            // record again while the second's stands.
            Flaw::NameNotCheckedInZone => "rivals=1,flips=1,restores=1",
            Flaw::ReconcileResendsRefused => "updates=1,refusals=1,operator=1",
            // Both workers out.
            Flaw::FailedCommitSticks => "failed_commits=2",
            Flaw::StartFailureIsFatal => "start_failures=2",
            // The second client made ready, a copy taken, the client deleted
            // with its record, the copy restored.
            Flaw::RestoreTrustsEnsured => "rivals=2,flips=1,restores=1",
        };
        let _ = c.set_budget(needs);
        c.flaw = Some(flaw);
        c
    }
}

/// The model: a [`Config`] and the rules.
#[derive(Clone, Debug)]
pub struct Protocol {
    pub cfg: Config,
}

/// One step of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Act {
    /// A worker claims a client's due job (worker, client).
    Claim(u8, u8),
    /// A worker's next step: decide, record, commit.
    Step(u8),
    /// A worker sends the claimed request, and the provider answers so.
    Send(u8, SendAs),
    Crash(u8),
    /// A client's claim's lease runs out (its holder crashed, or is paused).
    Expire(u8),
    /// The provider's GET by id finds the resource (the 404 window ends).
    Settle(u8),
    /// Listings show the resource.
    List(u8),
    /// The resource becomes active.
    Boot(u8),
    /// A client's target is flipped (`client delete`, or `client create`
    /// again: refused while another client holds its DNS name).
    Flip(u8),
    /// A second client is created with the first one's DNS name (refused
    /// while the first is not deleted), its VM at this address.
    Arrive(u8),
    /// A copy of the database is taken (a backup).
    Copy,
    /// The copy is restored over the database.
    Restore,
    /// The inventory pass after a restore (`reconcile --all`), once the
    /// listings have settled.
    Inventory,
    /// `client update`: the volume's size grows (a new spec generation).
    Update,
    /// A volume's resize under way is done.
    Grow(u8),
    /// The API key workers are configured with is changed.
    ChangeKey,
    /// An operator rebinds the record to the new key (`key rotate`).
    Rotate,
    /// An operator resolves an uncertain outcome from the console: adopts
    /// what carries the receipt's label, or abandons it on attestation.
    Resolve,
    /// An operator asks a blocked client to be reconciled.
    Reconcile,
    /// A worker's run ends in a commit that fails.
    CommitFails(u8),
    /// A stopped worker starts again and meets a transient failure.
    StartFails(u8),
}

/// How the provider answers a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendAs {
    Answered,
    /// Applied, and the answer lost.
    Lost,
    /// Not applied, and the answer lost.
    Unapplied,
    /// Refused definitively.
    Refused,
    /// The connection was never made.
    NotConnected,
}

impl Model for Protocol {
    type State = World;
    type Action = Act;

    fn init_states(&self) -> Vec<World> {
        vec![World {
            db: Db {
                client: Client {
                    id: 0,
                    address: 0,
                    target: oduflow_model::Target::Present,
                    generation: 0,
                    status: oduflow_model::ClientStatus::Pending,
                    reason: None,
                    queued: true,
                    claim: None,
                    waits: 0,
                    dns: vec![],
                    dns_state: world::DnsState::Unset,
                },
                rival: None,
                fences: 0,
                receipts: vec![],
                spec: 0,
                changes: vec![],
                infra_generation: [1, 1, 1],
                bound_key: None,
                orphans: vec![],
                restore_pending: false,
            },
            copy: None,
            cloud: vec![],
            zone: vec![],
            key: 0,
            workers: vec![Worker::Idle; usize::from(self.cfg.workers)],
            labels: 0,
            ids: 1,
            budget: self.cfg.budget.clone(),
            ghost: Ghost::default(),
        }]
    }

    fn actions(&self, w: &World, out: &mut Vec<Act>) {
        for i in 0..self.cfg.workers {
            run::actions(w, i, out);
        }
        env::actions(self, w, out);
    }

    fn next_state(&self, w: &World, act: Act) -> Option<World> {
        let mut next = w.clone();
        match act {
            Act::Claim(i, c) => run::claim(self, &mut next, i, c),
            Act::Step(i) => run::step(self, &mut next, i),
            Act::Send(i, how) => run::send(self, &mut next, i, how),
            other => env::apply(self, &mut next, other),
        }
        props::witness(&mut next);
        normalize(&mut next);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties()
    }

    /// A runaway world (see the last property) is not explored further.
    fn within_boundary(&self, w: &World) -> bool {
        w.labels < 60 && w.cloud.len() < 60 && w.zone.len() < 60
    }

    fn format_step(&self, last: &World, act: Act) -> Option<String> {
        Some(trace::describe(self, last, act))
    }
}

/// Fences matter only as equal or not: the ones in use are renumbered 1,
/// 2, ... in order, so that a run claimed again and again is one state, not
/// a new one per claim.
fn normalize(w: &mut World) {
    let mut used: Vec<u8> = w.db.rows().filter_map(|(_, r)| r.claim.map(|(_, f)| f)).collect();
    for worker in &w.workers {
        if let Worker::Running(r) = worker {
            used.push(r.fence);
        }
    }
    used.sort_unstable();
    used.dedup();
    let new = |f: u8| used.iter().position(|&u| u == f).map_or(0, |p| p as u8 + 1);
    for row in w.db.rows_mut() {
        if let Some((_, f)) = &mut row.claim {
            *f = new(*f);
        }
    }
    for worker in &mut w.workers {
        if let Worker::Running(r) = worker {
            r.fence = new(r.fence);
        }
    }
    w.db.fences = used.len() as u8;
}

/// What one check found.
#[derive(Debug)]
pub struct Report {
    pub states: usize,
    pub unique: usize,
    pub depth: usize,
    pub seconds: f64,
    /// Each violated property, with the shortest schedule to it (as
    /// actions, replayable from the initial state).
    pub violations: Vec<(&'static str, Vec<Act>)>,
}

/// The name the liveness property's counterexamples go by.
pub const LIVENESS: &str = "every client ends ready, deleted or blocked with a reason";

impl Protocol {
    pub fn new(cfg: Config) -> Protocol {
        Protocol { cfg }
    }

    /// The shortest counterexample: to a safety property first, else to
    /// liveness (a schedule after which the client can never settle).
    pub fn counterexample(&self, threads: usize) -> (Report, Option<(&'static str, Vec<Act>)>) {
        let r = self.check(threads);
        if let Some(v) = r.violations.first().cloned() {
            return (r, Some(v));
        }
        let stuck = live::check(self).stuck.map(|acts| (LIVENESS, acts));
        (r, stuck)
    }

    /// Explores every reachable state (stopping at the first violation when
    /// a flaw is on) and reports the safety properties violated.
    pub fn check(&self, threads: usize) -> Report {
        let started = std::time::Instant::now();
        let mut b = self.clone().checker().threads(threads);
        if self.cfg.flaw.is_some() {
            b = b.finish_when(stateright::HasDiscoveries::AnyFailures);
        }
        let c = b.spawn_bfs().join();
        let mut violations: Vec<(&'static str, Vec<Act>)> =
            c.discoveries().into_iter().map(|(name, path)| (name, path.into_actions())).collect();
        violations.sort_by_key(|(_, acts)| acts.len());
        Report {
            states: c.state_count(),
            unique: c.unique_state_count(),
            depth: c.max_depth(),
            seconds: started.elapsed().as_secs_f64(),
            violations,
        }
    }
}
