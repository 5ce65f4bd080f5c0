//! Everything that is not a worker: the provider's lags, crashes, lost
//! claims, changes of intent, backups and restores, the inventory pass,
//! the key, and the operator's commands.

use crate::world::*;
use crate::{Act, Protocol};
use oduflow_model::ledger::{Effect, IdSource};
use oduflow_model::{BlockedReason, ClientStatus, Target};

pub fn actions(m: &Protocol, w: &World, out: &mut Vec<Act>) {
    let b = &w.budget;
    for i in 0..m.cfg.workers {
        let running = matches!(w.workers[usize::from(i)], Worker::Running(_));
        if b.crashes > 0 && running {
            out.push(Act::Crash(i));
        }
        // Between two steps of a run: the commit its next step would end
        // with fails.
        let between = matches!(&w.workers[usize::from(i)], Worker::Running(r) if r.phase == Phase::Decide);
        if b.failed_commits > 0 && between {
            out.push(Act::CommitFails(i));
        }
        if b.start_failures > 0 && w.workers[usize::from(i)] == Worker::Idle {
            out.push(Act::StartFails(i));
        }
    }
    for (c, row) in w.db.rows() {
        if let Some((holder, fence)) = row.claim {
            let paused = matches!(&w.workers[usize::from(holder)], Worker::Running(r) if r.fence == fence);
            let never = m.cfg.flaw == Some(crate::Flaw::ClaimNeverExpires);
            if (!paused && !never) || (paused && b.claim_losses > 0) {
                out.push(Act::Expire(c));
            }
        }
    }
    for (id, r) in w.cloud.iter().enumerate() {
        let id = id as u8;
        if r.alive && !r.by_id {
            out.push(Act::Settle(id));
        }
        if r.alive && !r.listed {
            out.push(Act::List(id));
        }
        if r.alive && r.by_id && !r.ready {
            out.push(Act::Boot(id));
        }
        if r.alive && r.resizing_to.is_some() {
            out.push(Act::Grow(id));
        }
    }
    if w.db.restore_pending {
        // `listing_settle_ms` covers the listing lag and a resize's time.
        if w.cloud.iter().all(|r| !r.alive || (r.listed && r.resizing_to.is_none())) {
            out.push(Act::Inventory);
        }
        return;
    }
    let unique = m.cfg.flaw != Some(crate::Flaw::NameNotUnique);
    for (c, row) in w.db.rows() {
        // `client create` again refuses a DNS name another client holds.
        let refused = row.target == Target::Absent && unique && w.db.name_held_against(c);
        let left = if c == 0 { b.flips } else { b.rivals };
        if left > 0 && !refused {
            out.push(Act::Flip(c));
        }
    }
    if b.rivals > 0 && w.db.rival.is_none() && !(unique && w.db.name_held_against(1)) {
        out.push(Act::Arrive(crate::run::RIVAL_VM));
        // Or an address a VM of the first client's had.
        for (id, r) in w.cloud.iter().enumerate() {
            if m.cfg.reused_addresses && r.kind == oduflow_model::ResourceKind::Vm && !r.alive {
                out.push(Act::Arrive(id as u8));
            }
        }
    }
    if b.restores > 0 {
        out.push(if w.copy.is_none() { Act::Copy } else { Act::Restore });
    }
    if b.key_changes > 0 {
        out.push(Act::ChangeKey);
    }
    if b.updates > 0 && w.db.client.target == Target::Present {
        out.push(Act::Update);
    }
    if b.operator > 0 && w.db.client.status == ClientStatus::Blocked && !w.db.client.queued {
        match w.db.client.reason {
            Some(BlockedReason::CredentialChanged) => out.push(Act::Rotate),
            Some(_) if uncertain(w).is_some_and(|r| !in_flight(m, w, r)) => out.push(Act::Resolve),
            _ => {}
        }
        out.push(Act::Reconcile);
    }
}

/// The receipt an operator resolves: one whose outcome only the console
/// can tell.
fn uncertain(w: &World) -> Option<usize> {
    w.db.receipts.iter().position(|r| {
        r.effect.is_uncertain()
            || (!r.progress.deleted
                && matches!(&r.effect, Effect::Known { id, .. } if parse_rid(id).is_some_and(|x| !w.res(x).alive)))
    })
}

/// A request of receipt `r` passed its guard and has not left yet (the
/// model's abandon waits for it unless told not to).
fn in_flight(m: &Protocol, w: &World, r: usize) -> bool {
    let label = w.db.receipts[r].label;
    m.cfg.abandon_after_in_flight
        && w.workers.iter().any(|x| matches!(x, Worker::Running(Run { phase: Phase::Leaving { receipt, .. }, .. }) if receipt.label == label))
}

/// The intent changed: a run begun before is stale, and a job is due.
fn intent_moved(c: &mut Client) {
    c.generation += 1;
    c.status = ClientStatus::Pending;
    c.reason = None;
    c.queued = true;
    c.waits = 0;
}

pub fn apply(m: &Protocol, w: &mut World, act: Act) {
    match act {
        Act::CommitFails(i) => {
            // Its writes roll back; its claim is left to its lease. The
            // connection is dropped and the worker goes on.
            w.budget.failed_commits -= 1;
            let sticks = m.cfg.flaw == Some(crate::Flaw::FailedCommitSticks);
            w.workers[usize::from(i)] = if sticks { Worker::Broken } else { Worker::Idle };
        }
        Act::StartFails(i) => {
            // Retried with a bounded backoff until the failure passes.
            w.budget.start_failures -= 1;
            if m.cfg.flaw == Some(crate::Flaw::StartFailureIsFatal) {
                w.workers[usize::from(i)] = Worker::Broken;
            }
        }
        Act::Crash(i) => {
            w.budget.crashes -= 1;
            if let Worker::Running(Run { phase: Phase::Leaving { receipt, .. }, .. }) = &w.workers[usize::from(i)] {
                w.ghost.died_marked.push(receipt.label);
            }
            w.workers[usize::from(i)] = Worker::Idle;
        }
        Act::Expire(c) => {
            if let Some((holder, fence)) = w.db.row(c).claim
                && matches!(&w.workers[usize::from(holder)], Worker::Running(r) if r.fence == fence)
            {
                w.budget.claim_losses -= 1;
            }
            w.db.row_mut(c).claim = None;
        }
        Act::Settle(id) => w.cloud[usize::from(id)].by_id = true,
        Act::List(id) => w.cloud[usize::from(id)].listed = true,
        Act::Boot(id) => w.cloud[usize::from(id)].ready = true,
        Act::Grow(id) => {
            let r = &mut w.cloud[usize::from(id)];
            r.size = r.resizing_to.take().unwrap_or(r.size);
        }
        Act::Update => {
            w.budget.updates -= 1;
            w.db.spec += 1;
            intent_moved(&mut w.db.client);
        }
        Act::Flip(c) => {
            match c {
                0 => w.budget.flips -= 1,
                _ => w.budget.rivals -= 1,
            }
            let row = w.db.row_mut(c);
            row.target = match row.target {
                Target::Present => Target::Absent,
                Target::Absent => Target::Present,
            };
            intent_moved(row);
        }
        Act::Arrive(address) => arrive(w, address),
        Act::Copy => {
            // Claims are not in a copy: a restore stops every worker.
            let mut copy = w.db.clone();
            copy.rows_mut().for_each(|r| r.claim = None);
            copy.fences = 0;
            w.copy = Some(copy);
        }
        Act::Restore => restore(w),
        Act::Inventory => inventory(m, w),
        Act::ChangeKey => {
            w.budget.key_changes -= 1;
            w.key = 1 - w.key;
        }
        Act::Rotate => {
            w.budget.operator -= 1;
            w.db.bound_key = Some(w.key);
            intent_moved(&mut w.db.client);
        }
        Act::Resolve => resolve(w),
        Act::Reconcile => {
            w.budget.operator -= 1;
            if m.cfg.flaw == Some(crate::Flaw::ReconcileResendsRefused) {
                for c in w.db.changes.iter_mut().filter(|c| matches!(c.effect, Effect::Rejected { .. })) {
                    c.effect = Effect::Unmarked { not_sent: 0, observations: 0 };
                }
            }
            intent_moved(&mut w.db.client);
        }
        Act::Claim(..) | Act::Step(_) | Act::Send(..) => {}
    }
}

/// The second client is created with the first one's DNS name, its VM at
/// `address`.
fn arrive(w: &mut World, address: u8) {
    w.budget.rivals -= 1;
    w.db.rival = Some(Client {
        id: w.ids,
        address,
        target: Target::Present,
        generation: 0,
        status: ClientStatus::Pending,
        reason: None,
        queued: true,
        claim: None,
        waits: 0,
        dns: vec![],
        dns_state: DnsState::Unset,
    });
    w.ids += 1;
}

/// The copy is put back; the workers were stopped for it, and the queue
/// claims nothing until the inventory pass.
fn restore(w: &mut World) {
    w.budget.restores -= 1;
    let Some(copy) = w.copy.take() else { return };
    w.db = copy;
    w.ghost.creates.clear();
    w.ghost.patches.clear();
    w.db.restore_pending = true;
    for worker in &mut w.workers {
        // Stopped for the restore, as by a crash.
        if let Worker::Running(Run { phase: Phase::Leaving { receipt, .. }, .. }) = worker {
            w.ghost.died_marked.push(receipt.label);
        }
        if *worker != Worker::Broken {
            *worker = Worker::Idle;
        }
    }
}

/// The inventory pass (its listings settled): every claim not known to be
/// unsent is doubted, every live resource no receipt accounts for is an
/// orphan, and every record not deleted is read again.
fn inventory(m: &Protocol, w: &mut World) {
    let trust = m.cfg.flaw == Some(crate::Flaw::RestoreTrustsUnsent);
    for r in &mut w.db.receipts {
        let doubt = !trust && r.effect.is_unsent();
        if doubt {
            r.effect = Effect::Unknown { observations: 0 };
            w.ghost.doubted.push(r.label);
        }
    }
    // A change the copy shows unsent may have been sent since.
    for c in &mut w.db.changes {
        if !trust && c.effect.is_unsent() {
            c.effect = Effect::Unknown { observations: 0 };
        }
    }
    for (id, res) in w.cloud.iter().enumerate() {
        let id = id as u8;
        let explained = w.db.receipts.iter().any(|r| r.label == res.label || r.effect.id() == Some(&rid(id)));
        if res.alive && !explained && !w.db.orphans.contains(&id) {
            w.db.orphans.push(id);
        }
    }
    w.db.restore_pending = false;
    // An identity's recorded state proves nothing for a client not deleted:
    // the discarded timeline may have made or deleted its records since.
    let trust_ensured = m.cfg.flaw == Some(crate::Flaw::RestoreTrustsEnsured);
    for row in w.db.rows_mut() {
        let ensured = matches!(row.dns_state, DnsState::Ensured(_));
        if row.status != ClientStatus::Deleted && (row.dns_state == DnsState::Removed || ensured && !trust_ensured) {
            row.dns_state = DnsState::Unset;
        }
    }
    if w.db.client.status == ClientStatus::Deleted && !w.db.orphans.is_empty() {
        w.db.client.status = ClientStatus::Blocked;
        w.db.client.reason = Some(BlockedReason::LabelledOrphan);
    }
    for row in w.db.rows_mut().filter(|r| !matches!(r.status, ClientStatus::Deleted | ClientStatus::Blocked)) {
        row.queued = true;
    }
}

/// An operator looks in the console: what carries the receipt's label is
/// adopted; nothing, and the receipt is abandoned on attestation.
fn resolve(w: &mut World) {
    w.budget.operator -= 1;
    let Some(r) = uncertain(w) else { return };
    let label = w.db.receipts[r].label;
    let found = w.cloud.iter().position(|x| x.alive && x.label == label);
    let observations = 0;
    w.db.receipts[r].effect = match (found, w.db.receipts[r].effect.id()) {
        (Some(x), None) => Effect::Known { id: rid(x as u8), source: Some(IdSource::AdoptedByOperator), observations },
        (_, id) => Effect::Abandoned {
            by: "operator".to_owned(),
            reason: "nothing live carries its label".to_owned(),
            id: id.map(str::to_owned),
            observations,
        },
    };
    intent_moved(&mut w.db.client);
}
