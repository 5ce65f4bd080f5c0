//! The DNS adapter's part of a run, as `crates/oduflow-vultr/src/dns_adapter.rs`
//! takes it for the client's A record: before `ready`, ensure (a lost
//! create looked for in a zone listing with the real `lost_create_looked`,
//! a record the ownership record lacks reclaimed by its owner marker, a
//! create claimed before its POST, every owned record read back by id);
//! before `deleted`, remove (every owned record deleted by id, confirmed by
//! a GET 404 after an answered DELETE).
//!
//! Time is abstract here as elsewhere: the adapter's bounds on a fresh
//! record's 404s (`RECORD_GET_LAG_MS`, `RECORD_MISSING_MS`) are taken to
//! cover Vultr's window, so a 404 it counts or waits on ends the window.

use crate::run::{Next, fence_holds, finish, halt, next_decision, request_left, truly_holds};
use crate::world::*;
use crate::{Flaw, Protocol, SendAs};
use oduflow_model::decide::{Looked, lost_create_looked};
use oduflow_model::ledger::{Effect, IdSource};
use oduflow_model::{BlockedReason, ClientStatus};

/// Zone listings that find nothing for a lost create before the client
/// blocks (the adapter's `LOST_CREATE_LISTINGS_MAX`, smaller here).
const LISTINGS_MAX: i64 = 2;

/// 404s in a row before an owned record is taken as gone
/// (`RECORD_MISSING_MAX`, smaller here).
const MISSING_MAX: u8 = 2;

/// Whether a run may write the ownership record: the adapter saves it
/// under a version check, so a run another has overtaken writes nothing
/// (the model asks the fence instead).
fn saves(m: &Protocol, w: &World, i: u8, run: &Run, o: usize) -> bool {
    let c = run.client;
    o < w.db.row(c).dns.len() && fence_holds(m, w, i, run)
}

fn id_of(o: &Owned) -> Option<u8> {
    o.effect.id().and_then(parse_rid)
}

/// Client `row`'s ownership record has zone record `z` by id.
fn owns(row: &Client, z: u8) -> bool {
    row.dns.iter().any(|o| id_of(o) == Some(z))
}

/// 404s in a row before an owned record is taken as gone (one, with the
/// hole re-opened).
fn missing_max(m: &Protocol) -> u8 {
    if m.cfg.flaw == Some(Flaw::DnsGoneAfterOne404) { 1 } else { MISSING_MAX }
}

/// Live records in the zone carrying client `c`'s owner marker that its
/// ownership record lacks (what a reclaim by marker takes back).
fn unowned(w: &World, c: u8) -> Vec<u8> {
    let row = w.db.row(c);
    (0..w.zone.len() as u8)
        .filter(|&z| {
            let r = &w.zone[usize::from(z)];
            r.alive && r.owner == row.id && !owns(row, z)
        })
        .collect()
}

/// Live records at the name pointing at `data` that client `c` does not
/// own, whoever's marker stands beside them: what the adapter's look for a
/// lost create matches (type, name and data).
fn matching(w: &World, c: u8, data: u8) -> Vec<u8> {
    let row = w.db.row(c);
    (0..w.zone.len() as u8)
        .filter(|&z| {
            let r = &w.zone[usize::from(z)];
            r.alive && r.data == data && !owns(row, z)
        })
        .collect()
}

/// A live record at the name that client `c` does not own (another
/// client's, by its marker): before a create, the adapter's listing finds
/// it, touches nothing and blocks.
fn foreign(w: &World, c: u8) -> bool {
    let row = w.db.row(c);
    w.zone.iter().enumerate().any(|(z, r)| r.alive && r.owner != row.id && !owns(row, z as u8))
}

/// Looks for each lost create in a zone listing: `Some` when the step is
/// taken (the run goes on, waits or blocks).
fn resolve_lost(m: &Protocol, w: &mut World, i: u8, run: &Run) -> Option<()> {
    let c = run.client;
    let o = w.db.row(c).dns.iter().position(|o| o.effect.id().is_none())?;
    let found = matching(w, c, w.db.row(c).dns[o].data);
    let observations = match w.db.row(c).dns[o].effect {
        Effect::Unknown { observations } => observations,
        _ => 0,
    };
    match lost_create_looked(found, observations, LISTINGS_MAX) {
        Looked::One(z) => {
            w.db.row_mut(c).dns[o].effect =
                Effect::Known { id: rid(z), source: Some(IdSource::AdoptedByLabel), observations };
            next_decision(m, w, i, run.clone());
        }
        Looked::Again => {
            w.db.row_mut(c).dns[o].effect = Effect::Unknown { observations: observations + 1 };
            finish(m, w, i, run, Next::Wait);
        }
        Looked::Uncertain => {
            w.db.row_mut(c).dns[o].effect = Effect::Unknown { observations: observations + 1 };
            let reason = Some(BlockedReason::UncertainDnsRecord);
            finish(m, w, i, run, Next::Done(ClientStatus::Blocked, reason));
        }
        Looked::Several(_) => {
            let reason = Some(BlockedReason::UncertainDnsRecord);
            finish(m, w, i, run, Next::Done(ClientStatus::Blocked, reason));
        }
    }
    Some(())
}

/// Records carrying the client's marker that its ownership record lacks
/// (made after the copy a restore brought back) are reclaimed; several
/// block.
fn reclaim(m: &Protocol, w: &mut World, i: u8, run: &Run) -> Option<()> {
    let c = run.client;
    match unowned(w, c).as_slice() {
        [] => None,
        [z] => {
            let label = w.labels;
            w.labels = w.labels.saturating_add(1);
            let (id, source) = (rid(*z), Some(IdSource::ReclaimedByMarker));
            let data = w.zone[usize::from(*z)].data;
            let effect = Effect::Known { id, source, observations: 0 };
            w.db.row_mut(c).dns.push(Owned { label, data, effect, missing: 0, gone: false, deletion: Deletion::None });
            next_decision(m, w, i, run.clone());
            Some(())
        }
        _ => {
            let reason = Some(BlockedReason::DnsRecordForeign);
            finish(m, w, i, run, Next::Done(ClientStatus::Blocked, reason));
            Some(())
        }
    }
}

/// Records the DELETE of owned record `o` as sent, before it is sent.
fn delete(w: &mut World, i: u8, mut run: Run, o: usize) {
    let c = run.client;
    let earlier = w.db.row(c).dns[o].deletion != Deletion::None;
    w.db.row_mut(c).dns[o].deletion = Deletion::Sent;
    run.phase = Phase::DnsDeleting(o, earlier);
    w.workers[usize::from(i)] = Worker::Running(run);
}

/// Sends the DELETE of owned record `o` (fenced): a 404 so soon after the
/// create proves nothing yet (the fresh record's window, waited out),
/// whether or not a DELETE was recorded before.
pub fn send_delete(m: &Protocol, w: &mut World, i: u8, mut run: Run, o: usize, earlier: bool) {
    let c = run.client;
    if !saves(m, w, i, &run, o) {
        return halt(w, i, &run);
    }
    if !truly_holds(w, i, &run) {
        w.ghost.unfenced_send = true;
    }
    let Some(z) = id_of(&w.db.row(c).dns[o]) else { return halt(w, i, &run) };
    let trusted = earlier && m.cfg.flaw == Some(Flaw::DnsDelete404Trusted);
    let r = &mut w.zone[usize::from(z)];
    let answered = match (r.alive, r.by_id) {
        (true, true) => {
            r.alive = false;
            true
        }
        // Gone already (deleted in the console, or by a DELETE whose answer
        // was not recorded).
        (false, _) => true,
        // The hole: a 404 after a DELETE recorded as sent taken as proof.
        (true, false) if trusted => true,
        // A 404 so soon after the create: waited out, the window ends.
        (true, false) => {
            r.by_id = true;
            false
        }
    };
    run.phase = Phase::DnsDeleted(o, answered);
    w.workers[usize::from(i)] = Worker::Running(run);
}

/// Reads every owned record back by id; `true` when all were found.
fn check(m: &Protocol, w: &mut World, i: u8, run: &Run) -> bool {
    let c = run.client;
    if !fence_holds(m, w, i, run) {
        halt(w, i, run);
        return false;
    }
    let max = missing_max(m);
    let mut all = true;
    let mut o = 0;
    while o < w.db.row(c).dns.len() {
        let Some(z) = id_of(&w.db.row(c).dns[o]) else {
            o += 1;
            continue;
        };
        let r = w.zone[usize::from(z)].clone();
        let rec = &mut w.db.row_mut(c).dns[o];
        match (r.alive && r.by_id, rec.deletion) {
            (true, _) => rec.missing = 0,
            // A GET 404 after a DELETE of ours was answered: deleted.
            (false, Deletion::Answered) => {
                w.db.row_mut(c).dns.remove(o);
                continue;
            }
            (false, _) if rec.gone || rec.deletion == Deletion::Sent => all = false,
            (false, _) => {
                rec.missing += 1;
                rec.gone = rec.missing >= max;
                // Counted over the adapter's minute: the window ends.
                w.zone[usize::from(z)].by_id = r.alive;
                all = false;
            }
        }
        o += 1;
    }
    all
}

/// One step of the DNS adapter's ensure, before `ready`; `false` when it is
/// done (the record ensured and read back).
pub fn ensure(m: &Protocol, w: &mut World, i: u8, run: &Run, vm: u8) -> bool {
    let c = run.client;
    if w.db.row(c).dns_state == DnsState::Ensured(vm) {
        return false;
    }
    if !fence_holds(m, w, i, run) {
        halt(w, i, run);
        return true;
    }
    // Ensuring from here on (the adapter's state row, written on the
    // ownership's version): a removal done before no longer stands.
    w.db.row_mut(c).dns_state = DnsState::Unset;
    if resolve_lost(m, w, i, run).is_some() {
        return true;
    }
    // A record taken as gone is deleted by id; a new one is made below.
    if let Some(o) = w.db.row(c).dns.iter().position(|o| o.gone && o.deletion != Deletion::Answered) {
        delete(w, i, run.clone(), o);
        return true;
    }
    // As the adapter's `ensure_one`: a record whose DELETE was sent but not
    // answered is still the client's record at its name.
    match w.db.row(c).dns.iter().position(|o| o.deletion != Deletion::Answered && !o.gone) {
        Some(o) if w.db.row(c).dns[o].data == vm => {
            if check(m, w, i, run) {
                w.db.row_mut(c).dns_state = DnsState::Ensured(vm);
            }
            if matches!(w.workers[usize::from(i)], Worker::Running(_)) {
                finish(m, w, i, run, Next::Wait);
            }
        }
        // Another VM's address: one PATCH by id; a 404 to it is counted
        // like a GET's.
        Some(o) => {
            if !truly_holds(w, i, run) {
                w.ghost.unfenced_send = true;
            }
            let Some(z) = id_of(&w.db.row(c).dns[o]) else { return true };
            let r = &mut w.zone[usize::from(z)];
            if r.alive && r.by_id {
                r.data = vm;
                let rec = &mut w.db.row_mut(c).dns[o];
                (rec.data, rec.missing) = (vm, 0);
                next_decision(m, w, i, run.clone());
            } else {
                let max = missing_max(m);
                r.by_id = r.alive;
                let rec = &mut w.db.row_mut(c).dns[o];
                rec.missing += 1;
                rec.gone = rec.missing >= max;
                finish(m, w, i, run, Next::Wait);
            }
        }
        None if reclaim(m, w, i, run).is_some() => {}
        None if foreign(w, c) && m.cfg.flaw != Some(Flaw::NameNotCheckedInZone) => {
            let reason = Some(BlockedReason::DnsRecordForeign);
            finish(m, w, i, run, Next::Done(ClientStatus::Blocked, reason));
        }
        None => {
            let label = w.labels;
            w.labels = w.labels.saturating_add(1);
            let effect = Effect::Unknown { observations: 0 };
            w.db.row_mut(c).dns.push(Owned {
                label,
                data: vm,
                effect,
                missing: 0,
                gone: false,
                deletion: Deletion::None,
            });
            let mut run = run.clone();
            run.phase = Phase::DnsClaimed(w.db.row(c).dns.len() - 1);
            w.workers[usize::from(i)] = Worker::Running(run);
        }
    }
    true
}

/// One step of the DNS adapter's remove, before `deleted`; `false` when
/// nothing of the client's is left in the zone that its ownership record
/// knows of.
pub fn remove(m: &Protocol, w: &mut World, i: u8, run: &Run) -> bool {
    let c = run.client;
    if w.db.row(c).dns_state == DnsState::Removed {
        return false;
    }
    if !fence_holds(m, w, i, run) {
        halt(w, i, run);
        return true;
    }
    // Removing from here on: an ensure done before no longer stands.
    w.db.row_mut(c).dns_state = DnsState::Unset;
    // A lost create must be found to be deleted.
    if resolve_lost(m, w, i, run).is_some() || reclaim(m, w, i, run).is_some() {
        return true;
    }
    if let Some(o) = w.db.row(c).dns.iter().position(|o| o.deletion != Deletion::Answered) {
        delete(w, i, run.clone(), o);
        return true;
    }
    check(m, w, i, run);
    if matches!(w.workers[usize::from(i)], Worker::Running(_)) {
        if w.db.row(c).dns.is_empty() {
            w.db.row_mut(c).dns_state = DnsState::Removed;
        }
        finish(m, w, i, run, Next::Wait);
    }
    true
}

/// The POST of claimed record `o`, answered so.
pub fn send(m: &Protocol, w: &mut World, i: u8, run: Run, o: usize, how: SendAs) {
    let c = run.client;
    if !saves(m, w, i, &run, o) {
        return halt(w, i, &run);
    }
    w.budget.spend(how);
    let answer = match how {
        SendAs::NotConnected => Answer::NotConnected,
        _ => {
            w.ghost.dns_creates.push(w.db.row(c).dns[o].label);
            request_left(w, i, &run);
            let made = |w: &mut World| {
                let (owner, data) = (w.db.row(c).id, w.db.row(c).dns[o].data);
                w.zone.push(ZoneRecord { owner, data, alive: true, by_id: false });
                (w.zone.len() - 1) as u8
            };
            match how {
                SendAs::Refused => Answer::Refused,
                SendAs::Lost => {
                    made(w);
                    Answer::Lost
                }
                SendAs::Unapplied => Answer::Unapplied,
                _ => Answer::Made(made(w)),
            }
        }
    };
    w.workers[usize::from(i)] = Worker::Running(Run { phase: Phase::DnsAnswered(o, answer), ..run });
}

/// A POST's answer recorded: its id, or a lost create for a zone listing
/// to settle, or (refused, never sent) the claim dropped.
pub fn record(m: &Protocol, w: &mut World, i: u8, run: &Run, o: usize, answer: Answer) {
    let c = run.client;
    if !saves(m, w, i, run, o) {
        return halt(w, i, run);
    }
    match answer {
        Answer::Made(z) => {
            w.db.row_mut(c).dns[o].effect =
                Effect::Known { id: rid(z), source: Some(IdSource::Response), observations: 0 };
        }
        Answer::Lost | Answer::Unapplied => {}
        Answer::Refused | Answer::NotConnected => {
            w.db.row_mut(c).dns.remove(o);
        }
    }
    finish(m, w, i, run, Next::Wait);
}

/// A DELETE's answer recorded.
pub fn deleted(m: &Protocol, w: &mut World, i: u8, run: &Run, o: usize, answered: bool) {
    let c = run.client;
    if !saves(m, w, i, run, o) {
        return halt(w, i, run);
    }
    if answered {
        w.db.row_mut(c).dns[o].deletion = Deletion::Answered;
        next_decision(m, w, i, run.clone());
    } else {
        finish(m, w, i, run, Next::Wait);
    }
}
