//! A worker's run, step by step, as the executor takes it: claim, read the
//! receipts, decide with the real `decide`, act (one provider request a
//! step at most), commit once at the end under the fence.

use crate::world::*;
use crate::{Act, Flaw, Protocol, SendAs};
use oduflow_model::decide::{self, Action, ChangeFacts, Drift, Facts, Inputs, Orphan, ReceiptFacts, Resource, Seen};
use oduflow_model::ledger::{Effect, IdSource};
use oduflow_model::{BlockedReason, ClientStatus, ResourceKind, Target};

/// What a finished run commits.
pub(crate) enum Next {
    /// Run again later.
    Wait,
    /// Settled so.
    Done(ClientStatus, Option<BlockedReason>),
}

pub fn actions(w: &World, i: u8, out: &mut Vec<Act>) {
    match &w.workers[usize::from(i)] {
        Worker::Idle => {
            for (c, row) in w.db.rows() {
                if row.queued && row.claim.is_none() && !w.db.restore_pending {
                    out.push(Act::Claim(i, c));
                }
            }
        }
        Worker::Broken => {}
        Worker::Running(run) => match run.phase {
            Phase::Claimed { .. } | Phase::PatchClaimed(_) | Phase::DnsClaimed(_) => {
                out.push(Act::Send(i, SendAs::Answered));
                let b = &w.budget;
                for (left, how) in [
                    (b.lost_answers, SendAs::Lost),
                    (b.lost_answers, SendAs::Unapplied),
                    (b.refusals, SendAs::Refused),
                    (b.unconnected, SendAs::NotConnected),
                ] {
                    if left > 0 {
                        out.push(Act::Send(i, how));
                    }
                }
            }
            _ => out.push(Act::Step(i)),
        },
    }
}

pub fn claim(_m: &Protocol, w: &mut World, i: u8, c: u8) {
    w.db.fences += 1;
    let fence = w.db.fences;
    w.db.row_mut(c).claim = Some((i, fence));
    if w.db.bound_key.is_none() && c == 0 {
        w.db.bound_key = Some(w.key);
    }
    let row = w.db.row(c);
    w.workers[usize::from(i)] = Worker::Running(Run {
        client: c,
        fence,
        generation: row.generation,
        target: row.target,
        key: w.key,
        reads: [Read::NotRead, Read::NotRead],
        phase: Phase::Decide,
        steps: 0,
    });
}

/// The run of a worker that is running (only those are offered steps).
fn running(w: &World, i: u8) -> Option<Run> {
    match &w.workers[usize::from(i)] {
        Worker::Running(run) => Some(run.clone()),
        _ => None,
    }
}

/// The claim still holds this client at the run's generation, as the
/// fence sees it (a flaw may blind it).
pub(crate) fn fence_holds(m: &Protocol, w: &World, i: u8, run: &Run) -> bool {
    match m.cfg.flaw {
        Some(Flaw::LeaseOverlap) => true,
        Some(Flaw::FenceIgnoresFlips) => w.db.row(run.client).claim == Some((i, run.fence)),
        _ => truly_holds(w, i, run),
    }
}

pub(crate) fn truly_holds(w: &World, i: u8, run: &Run) -> bool {
    let row = w.db.row(run.client);
    row.claim == Some((i, run.fence)) && row.generation == run.generation
}

/// The run stops (its guard refused a request, or it found a conflict):
/// nothing more is sent or written; a claim still its own is released.
pub(crate) fn halt(w: &mut World, i: u8, run: &Run) {
    let row = w.db.row_mut(run.client);
    if row.claim == Some((i, run.fence)) {
        row.claim = None;
    }
    w.workers[usize::from(i)] = Worker::Idle;
}

/// The run's one commit, under its fence: a stale run's writes are dropped.
pub(crate) fn finish(m: &Protocol, w: &mut World, i: u8, run: &Run, next: Next) {
    let row = w.db.row(run.client);
    let held = row.claim == Some((i, run.fence));
    let current = held && (row.generation == run.generation || m.cfg.flaw == Some(Flaw::FenceIgnoresFlips));
    if current {
        if run.client == 0 {
            w.db.infra_generation = current_receipts(m, w, run.target).0;
        }
        let row = w.db.row_mut(run.client);
        match next {
            Next::Wait => {
                row.queued = true;
                row.waits = row.waits.saturating_add(1).min(m.cfg.waits_max);
            }
            Next::Done(status, reason) => {
                row.queued = false;
                row.status = status;
                row.reason = reason;
            }
        }
    }
    halt(w, i, run);
}

/// The receipt at a kind's dispatch generation.
fn at(w: &World, kind: ResourceKind, g: u8) -> Option<usize> {
    w.db.receipts.iter().position(|r| r.kind == kind && r.generation == g)
}

/// A kind's dispatch generation: the highest of the record's and its
/// receipts', moved on past a receipt confirmed deleted or abandoned (the
/// engine's `current`).
fn generation(w: &World, kind: ResourceKind) -> u8 {
    let latest =
        w.db.receipts
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.generation)
            .chain([w.db.infra_generation[slot(kind)]])
            .max()
            .unwrap_or(1);
    match at(w, kind, latest).map(|r| &w.db.receipts[r]) {
        Some(r) if r.progress.deleted || matches!(r.effect, Effect::Abandoned { .. }) => latest + 1,
        _ => latest,
    }
}

fn is_open(r: &Receipt) -> bool {
    !r.progress.deleted && r.effect.may_own()
}

/// The receipts a run step works on and the generations in force (the
/// engine's `current`, and its planted `skip_open_receipts`).
pub fn current_receipts(m: &Protocol, w: &World, target: Target) -> ([u8; 3], [Option<usize>; 3]) {
    if target == Target::Absent && m.cfg.flaw == Some(Flaw::SkipOpenReceipts) {
        let g = w.db.infra_generation;
        return (
            g,
            [at(w, ResourceKind::Vm, g[0]), at(w, ResourceKind::Volume, g[1]), at(w, ResourceKind::Attach, g[2])],
        );
    }
    let mut gens = [generation(w, ResourceKind::Vm), generation(w, ResourceKind::Volume), 0];
    let pick = |kind: ResourceKind, g: u8| {
        if target == Target::Absent {
            let open = (0..w.db.receipts.len())
                .filter(|&r| w.db.receipts[r].kind == kind && is_open(&w.db.receipts[r]))
                .min_by_key(|&r| w.db.receipts[r].generation);
            if open.is_some() {
                return open;
            }
        }
        at(w, kind, g)
    };
    let vm = pick(ResourceKind::Vm, gens[0]);
    let volume = pick(ResourceKind::Volume, gens[1]);
    gens[2] = generation(w, ResourceKind::Attach);
    let id = |r: Option<usize>| r.and_then(|r| w.db.receipts[r].effect.id().and_then(parse_rid));
    if let (Some(a), Some(vm_id), Some(vol_id)) = (at(w, ResourceKind::Attach, gens[2]), id(vm), id(volume))
        && w.db.receipts[a].pair != Some((vm_id, vol_id))
    {
        gens[2] += 1;
    }
    (gens, [vm, volume, at(w, ResourceKind::Attach, gens[2])])
}

/// What a read of a resource shows, against the spec (a volume's size:
/// smaller is a drift a resize removes, larger a mismatch).
fn facts(w: &World, s: &Sight) -> Facts {
    let volume = w.res(s.id).kind == ResourceKind::Volume;
    let what = format!("size {} != {}", s.size, w.db.spec);
    Facts {
        id: rid(s.id),
        mismatch: (volume && s.size > w.db.spec).then(|| what.clone()),
        ready: s.ready,
        attached_to: s.attached_to.map(rid),
        state: if s.ready { "active/ok" } else { "pending/none" }.to_owned(),
        outputs: Default::default(),
        drift: (volume && s.size < w.db.spec)
            .then(|| Box::new(Drift { change: decide::Change::VolumeSize(i64::from(w.db.spec)), what })),
        size_gb: None,
    }
}

/// What a read of a resource now shows.
fn sight(w: &World, id: u8) -> Sight {
    let r = w.res(id);
    Sight { id, ready: r.ready, attached_to: r.attached_to, size: r.size }
}

/// What a run's read says, if it was made for this receipt.
fn seen_of(w: &World, read: &Read, label: Option<u8>) -> Seen {
    match read {
        Read::Missing(l) if Some(*l) == label => Seen::Missing,
        Read::Present(l, s) if Some(*l) == label => Seen::Present(facts(w, s)),
        Read::ByLabel(l, found) if Some(*l) == label => Seen::ByLabel(found.iter().map(|s| facts(w, s)).collect()),
        _ => Seen::NotRead,
    }
}

fn orphans(m: &Protocol, w: &World, kind: ResourceKind, needed: bool) -> Vec<Orphan> {
    if !needed || m.cfg.flaw == Some(Flaw::SkipLabelCheck) {
        return vec![];
    }
    w.db.orphans
        .iter()
        .filter(|&&o| w.res(o).kind == kind && !w.db.receipts.iter().any(|r| r.effect.id() == Some(&rid(o))))
        .map(|&o| Orphan { id: rid(o), facts: (w.res(o).alive && w.res(o).by_id).then(|| facts(w, &sight(w, o))) })
        .collect()
}

/// The first client's VM, by its current receipt's id.
pub fn vm_of(m: &Protocol, w: &World) -> Option<u8> {
    current_receipts(m, w, Target::Present).1[0].and_then(|r| rid_of(&w.db.receipts[r]))
}

/// The facts a decision is taken on, as the executor gathers them.
pub fn inputs(m: &Protocol, w: &World, run: &Run) -> (Inputs, [Option<usize>; 3], [u8; 3]) {
    let (gens, cur) = current_receipts(m, w, run.target);
    let key_changed = w.db.bound_key != Some(run.key) && m.cfg.flaw != Some(Flaw::IgnoreKeyChange);
    let needed = run.target == Target::Absent || cur[0].is_none() || cur[1].is_none();
    let effect = |r: Option<usize>| r.map(|r| w.db.receipts[r].effect.clone());
    let resource = |kind: ResourceKind| {
        let r = cur[slot(kind)];
        let change = r.and_then(|r| change_of(w, &w.db.receipts[r]));
        Resource {
            receipt: ReceiptFacts::of(effect(r), run.target),
            seen: seen_of(w, &run.reads[slot(kind)], r.map(|r| w.db.receipts[r].label)),
            progress: r.map(|r| w.db.receipts[r].progress.clone()).unwrap_or_default(),
            overdue: w.db.client.waits >= m.cfg.waits_max,
            // Updated, and this resource was made at another spec or
            // changed since: a drift is then a change to make.
            updated: w.db.spec > 0
                && r.is_some_and(|r| {
                    let rec = &w.db.receipts[r];
                    kind == ResourceKind::Volume
                        && (rec.spec != w.db.spec || w.db.changes.iter().any(|c| Some(c.resource) == rid_of(rec)))
                }),
            change: change.map_or_else(Default::default, |c| ChangeFacts::of(Some(w.db.changes[c].effect.clone()))),
            update_overdue: w.db.spec > 0 && w.db.client.waits >= m.cfg.waits_max,
            resize_settling: false,
            plan_change: false,
            orphans: orphans(m, w, kind, needed),
        }
    };
    let i = Inputs {
        target: run.target,
        key_changed,
        vm: resource(ResourceKind::Vm),
        volume: resource(ResourceKind::Volume),
        attach: ReceiptFacts::of(effect(cur[2]), run.target),
        observations_max: m.cfg.observations_max,
    };
    (i, cur, gens)
}

fn rid_of(r: &Receipt) -> Option<u8> {
    r.effect.id().and_then(parse_rid)
}

/// The change receipt of a receipt's resource at the current spec.
fn change_of(w: &World, r: &Receipt) -> Option<usize> {
    let id = rid_of(r)?;
    w.db.changes.iter().position(|c| c.resource == id && c.spec == w.db.spec)
}

/// The decision a running worker in its deciding phase takes next.
pub fn decision(m: &Protocol, w: &World, run: &Run) -> Action {
    decide::decide(&inputs(m, w, run).0)
}

pub fn step(m: &Protocol, w: &mut World, i: u8) {
    let Some(run) = running(w, i) else { return };
    match run.phase.clone() {
        Phase::Decide if run.client != 0 => rival_step(m, w, i, run),
        Phase::Decide => decide_step(m, w, i, run),
        Phase::Answered { receipt, index, answer } => {
            record(w, receipt, index, answer);
            finish(m, w, i, &run, Next::Wait);
        }
        Phase::PatchAnswered(c, answer) => {
            record_patch(w, c, answer);
            finish(m, w, i, &run, Next::Wait);
        }
        Phase::DeleteSent(r) => {
            // A run's one side effect is done: it ends, and the next reads
            // by id again.
            w.db.receipts[r].progress.delete_sent = true;
            finish(m, w, i, &run, Next::Wait);
        }
        Phase::Leaving { receipt, index, how } => leave(w, i, run, receipt, index, how),
        Phase::DnsAnswered(o, answer) => crate::dns::record(m, w, i, &run, o, answer),
        Phase::DnsDeleting(o, earlier) => crate::dns::send_delete(m, w, i, run, o, earlier),
        Phase::DnsDeleted(o, answered) => crate::dns::deleted(m, w, i, &run, o, answered),
        Phase::Claimed { .. } | Phase::PatchClaimed(_) | Phase::DnsClaimed(_) => {}
    }
}

/// One more decision in this run, or a wait at the run's limit.
pub(crate) fn next_decision(m: &Protocol, w: &mut World, i: u8, mut run: Run) {
    run.steps += 1;
    run.phase = Phase::Decide;
    if run.steps >= m.cfg.steps_max {
        finish(m, w, i, &run, Next::Wait);
    } else {
        w.workers[usize::from(i)] = Worker::Running(run);
    }
}

/// An address no VM of the first client's ever had (the second client's VM
/// is taken as made).
pub const RIVAL_VM: u8 = 100;

/// A run of the second client: `decide` would answer `Ready` (its VM taken
/// as made) or `Deleted`, and the DNS adapter runs first, as for the first.
fn rival_step(m: &Protocol, w: &mut World, i: u8, run: Run) {
    let done = match run.target {
        Target::Present => !crate::dns::ensure(m, w, i, &run, w.db.row(1).address),
        Target::Absent => !crate::dns::remove(m, w, i, &run),
    };
    if done {
        let status = if run.target == Target::Present { ClientStatus::Ready } else { ClientStatus::Deleted };
        finish(m, w, i, &run, Next::Done(status, None));
    }
}

fn decide_step(m: &Protocol, w: &mut World, i: u8, run: Run) {
    let (inputs, cur, gens) = inputs(m, w, &run);
    let receipt = |kind: ResourceKind| cur[slot(kind)];
    match decide::decide(&inputs) {
        Action::Observe(kind) => observe(m, w, i, run, kind, receipt(kind)),
        Action::CountObservation(kind) => {
            if let Some(r) = receipt(kind) {
                count(&mut w.db.receipts[r].effect);
            }
            finish(m, w, i, &run, Next::Wait);
        }
        Action::Adopt(kind, id) => {
            if let Some(r) = receipt(kind) {
                let observations = 0;
                w.db.receipts[r].effect = Effect::Known { id, source: Some(IdSource::AdoptedByLabel), observations };
            }
            next_decision(m, w, i, run);
        }
        Action::AdoptOrphan(kind, id) => {
            let Some(o) = parse_rid(&id) else { return halt(w, i, &run) };
            if at(w, kind, gens[slot(kind)]).is_some() {
                return halt(w, i, &run);
            }
            w.db.receipts.push(Receipt {
                kind,
                generation: gens[slot(kind)],
                label: w.res(o).label,
                effect: Effect::Known { id, source: Some(IdSource::AdoptedByLabel), observations: 0 },
                progress: Default::default(),
                pair: None,
                spec: w.db.spec,
            });
            w.db.orphans.retain(|&x| x != o);
            next_decision(m, w, i, run);
        }
        Action::Dispatch(kind) => dispatch(m, w, i, run, kind, &cur, gens[slot(kind)]),
        Action::Delete(kind, id) => delete(m, w, i, run, receipt(kind), &id),
        Action::ConfirmDeleted(kind) => {
            if let Some(r) = receipt(kind) {
                w.db.receipts[r].progress.deleted = true;
            }
            next_decision(m, w, i, run);
        }
        Action::MarkSeen(kind) => {
            if let Some(r) = receipt(kind) {
                w.db.receipts[r].progress.seen = true;
            }
            next_decision(m, w, i, run);
        }
        Action::Change(kind) => change(w, i, run, receipt(kind)),
        Action::ConfirmChange(kind) => {
            let r = receipt(kind);
            let c = r.and_then(|r| change_of(w, &w.db.receipts[r]));
            if let (Some(c), Some(id)) = (c, r.and_then(|r| w.db.receipts[r].effect.id().map(str::to_owned))) {
                let observations = 0;
                w.db.changes[c].effect = Effect::Known { id, source: Some(IdSource::ConfirmedByRead), observations };
            }
            next_decision(m, w, i, run);
        }
        Action::CountChange(kind) => {
            if let Some(c) = receipt(kind).and_then(|r| change_of(w, &w.db.receipts[r])) {
                if m.cfg.flaw == Some(Flaw::ResendChange) && fence_holds(m, w, i, &run) {
                    // The planted bug: the PATCH sent again while its
                    // outcome is unknown.
                    patch_sent(w, i, &run, c);
                    resize(w, c);
                }
                count(&mut w.db.changes[c].effect);
            }
            finish(m, w, i, &run, Next::Wait);
        }
        Action::Wait => finish(m, w, i, &run, Next::Wait),
        Action::Block(reason, _) => finish(m, w, i, &run, Next::Done(ClientStatus::Blocked, Some(reason))),
        Action::Ready => {
            // The identities first: the DNS record, ensured and read back.
            let vm = receipt(ResourceKind::Vm).and_then(|r| rid_of(&w.db.receipts[r]));
            if crate::dns::ensure(m, w, i, &run, vm.unwrap_or(0)) {
                return;
            }
            // The attach a read has now shown made: its receipt records the
            // VM's id (an attach marked sent whose answer was lost).
            if let (Some(a), Some(vm)) = (receipt(ResourceKind::Attach), receipt(ResourceKind::Vm))
                && let Effect::Unknown { observations } = w.db.receipts[a].effect
                && let Some(id) = w.db.receipts[vm].effect.id().map(str::to_owned)
            {
                w.db.receipts[a].effect = Effect::Known { id, source: Some(IdSource::ConfirmedByRead), observations };
            }
            finish(m, w, i, &run, Next::Done(ClientStatus::Ready, None));
        }
        Action::Deleted => {
            if crate::dns::remove(m, w, i, &run) {
                return;
            }
            finish(m, w, i, &run, Next::Done(ClientStatus::Deleted, None))
        }
    }
}

/// A fruitless look, counted on the receipt.
fn count(e: &mut Effect) {
    match e {
        Effect::Unknown { observations }
        | Effect::Unmarked { observations, .. }
        | Effect::Known { observations, .. }
        | Effect::Abandoned { observations, .. } => *observations += 1,
        Effect::NotSent { .. } | Effect::Rejected { .. } => {}
    }
}

fn observe(m: &Protocol, w: &mut World, i: u8, mut run: Run, kind: ResourceKind, r: Option<usize>) {
    let Some(r) = r else { return halt(w, i, &run) };
    if !fence_holds(m, w, i, &run) {
        return halt(w, i, &run);
    }
    let rec = w.db.receipts[r].clone();
    if m.cfg.flaw == Some(Flaw::ResendAfterLost)
        && (rec.effect.is_uncertain() || rec.effect.is_unsent())
        && kind != ResourceKind::Attach
    {
        // The planted bug: the create sent again, as a naive client would.
        sent(w, &run, &rec);
        make(w, &rec);
    }
    let read = match rec.effect.id().and_then(parse_rid) {
        Some(id) => {
            let res = w.res(id);
            // The planted bug: a listing's sighting taken for a GET's,
            // which deletion's bookkeeping then trusts.
            let listing = m.cfg.flaw == Some(Flaw::ListingTakenAsSeen) && res.listed && !rec.progress.seen;
            let shows = res.alive && (res.by_id || listing);
            if shows {
                Read::Present(rec.label, sight(w, id))
            } else {
                if m.cfg.flaw == Some(Flaw::ForgetIdOn404) && res.alive && !res.by_id && !rec.progress.seen {
                    // The hole: a temporary 404 taken as gone for good.
                    w.db.receipts[r].progress.deleted = true;
                }
                Read::Missing(rec.label)
            }
        }
        None => {
            let found = (0..w.cloud.len() as u8)
                .filter(|&x| w.res(x).alive && w.res(x).listed && w.res(x).label == rec.label)
                .map(|x| sight(w, x))
                .collect();
            Read::ByLabel(rec.label, found)
        }
    };
    run.reads[slot(if kind == ResourceKind::Attach { ResourceKind::Volume } else { kind })] = read;
    next_decision(m, w, i, run);
}

/// A create request leaves this run: the ghost's record of it.
fn sent(w: &mut World, run: &Run, rec: &Receipt) {
    // An attach answered 404 is sent again on its receipt, by the
    // protocol: only creates count.
    if rec.kind != ResourceKind::Attach {
        w.ghost.creates.push((rec.kind, rec.generation));
        w.ghost.create_labels.push(rec.label);
    }
    w.ghost.left.push(rec.label);
    if w.db.bound_key != Some(run.key) {
        w.ghost.unbound_send = true;
    }
    // (A request that passed its guard may leave after the claim is lost:
    // the window no fence closes, docs/protocol.md §8. The guard's own
    // check is what the property watches, in `send`.)
}

/// The provider applies a create: the new resource's id (an attach: the
/// VM's, or `None` when either is not found by id).
fn make(w: &mut World, rec: &Receipt) -> Option<u8> {
    if rec.kind == ResourceKind::Attach {
        let (vm, vol) = rec.pair?;
        let ok = [vm, vol].iter().all(|&x| w.res(x).alive && w.res(x).by_id);
        if ok {
            w.cloud[usize::from(vol)].attached_to = Some(vm);
        }
        return ok.then_some(vm);
    }
    w.cloud.push(Res {
        kind: rec.kind,
        label: rec.label,
        alive: true,
        by_id: false,
        listed: false,
        ready: false,
        attached_to: None,
        size: rec.spec,
        resizing_to: None,
    });
    Some((w.cloud.len() - 1) as u8)
}

fn dispatch(m: &Protocol, w: &mut World, i: u8, mut run: Run, kind: ResourceKind, cur: &[Option<usize>; 3], g: u8) {
    if let Some(r) = cur[slot(kind)].filter(|&r| w.db.receipts[r].effect.is_unsent()) {
        // Provably never sent: sent again on the same receipt.
        run.phase = Phase::Claimed { receipt: w.db.receipts[r].clone(), index: Some(r) };
    } else {
        if at(w, kind, g).is_some() {
            // The operation key is taken (a stale run's claim): the insert fails.
            return halt(w, i, &run);
        }
        let id = |k: ResourceKind| cur[slot(k)].and_then(|r| w.db.receipts[r].effect.id().and_then(parse_rid));
        let pair = match kind {
            ResourceKind::Attach => Some((id(ResourceKind::Vm).unwrap_or(0), id(ResourceKind::Volume).unwrap_or(0))),
            _ => None,
        };
        let unmarked = Effect::Unmarked { not_sent: 0, observations: 0 };
        let effect = match m.cfg.flaw {
            Some(Flaw::MarkAtClaim) => Effect::Unknown { observations: 0 },
            _ => unmarked,
        };
        let progress = Default::default();
        let rec = Receipt { kind, generation: g, label: w.labels, effect, progress, pair, spec: w.db.spec };
        w.labels = w.labels.saturating_add(1);
        let forget = m.cfg.flaw == Some(Flaw::ForgetReceipt) && kind != ResourceKind::Attach;
        let index = match forget {
            true => None,
            false => {
                w.db.receipts.push(rec.clone());
                Some(w.db.receipts.len() - 1)
            }
        };
        run.phase = Phase::Claimed { receipt: rec, index };
    }
    w.workers[usize::from(i)] = Worker::Running(run);
}

pub fn send(m: &Protocol, w: &mut World, i: u8, how: SendAs) {
    let Some(run) = running(w, i) else { return };
    if !fence_holds(m, w, i, &run) {
        // The guard stops it: a create never marked is recorded as not
        // sent (`mark_stopped`), its run knowing it did not leave.
        if let Phase::Claimed { index: Some(r), .. } = run.phase
            && let Effect::Unmarked { not_sent, .. } | Effect::NotSent { count: not_sent, .. } = w.db.receipts[r].effect
        {
            let reason = "stopped by its run's guard".to_owned();
            w.db.receipts[r].effect = Effect::NotSent { count: not_sent + 1, reason };
        }
        return halt(w, i, &run);
    }
    if let Phase::PatchClaimed(c) = run.phase {
        return send_patch(w, i, run, c, how);
    }
    if let Phase::DnsClaimed(o) = run.phase {
        return crate::dns::send(m, w, i, run, o, how);
    }
    let Phase::Claimed { receipt, index } = run.phase.clone() else { return };
    if !truly_holds(w, i, &run) {
        w.ghost.unfenced_send = true;
    }
    if how == SendAs::NotConnected {
        w.budget.spend(how);
        let answer = Answer::NotConnected;
        w.workers[usize::from(i)] = Worker::Running(Run { phase: Phase::Answered { receipt, index, answer }, ..run });
        return;
    }
    // Marked sent right before it leaves, by a compare-and-set: a receipt
    // another run marked (or resolved) meanwhile is not sent again.
    if let Some(r) = index {
        if !w.db.receipts[r].effect.is_unsent() && m.cfg.flaw != Some(Flaw::MarkAtClaim) {
            return halt(w, i, &run);
        }
        if w.db.receipts[r].effect.is_unsent() {
            w.db.receipts[r].effect = Effect::Unknown { observations: 0 };
        }
    }
    // The answer is chosen here, past the guard and the mark: its fault is
    // spent now, not when the request leaves (another run's send may
    // choose meanwhile).
    w.budget.spend(how);
    let phase = Phase::Leaving { receipt, index, how };
    w.workers[usize::from(i)] = Worker::Running(Run { phase, ..run });
}

/// The marked request leaves (a step of its own: a worker may die, or
/// lose its claim, between the mark and the write).
fn leave(w: &mut World, i: u8, run: Run, receipt: Receipt, index: Option<usize>, how: SendAs) {
    sent(w, &run, &receipt);
    let answer = match how {
        SendAs::Refused => Answer::Refused,
        SendAs::Lost => {
            make(w, &receipt);
            Answer::Lost
        }
        SendAs::Unapplied => Answer::Unapplied,
        _ => make(w, &receipt).map_or(Answer::NotConnected, Answer::Made),
    };
    w.workers[usize::from(i)] = Worker::Running(Run { phase: Phase::Answered { receipt, index, answer }, ..run });
}

/// The answer recorded on the receipt (the receipt claimed now, with the
/// planted `forget_receipt`).
fn record(w: &mut World, receipt: Receipt, index: Option<usize>, answer: Answer) {
    let effect = match answer {
        Answer::Made(id) => Effect::Known { id: rid(id), source: Some(IdSource::Response), observations: 0 },
        Answer::Lost | Answer::Unapplied => return,
        Answer::Refused => Effect::Rejected { status: 422, message: "refused".to_owned() },
        Answer::NotConnected => {
            let count = match index.map(|r| &w.db.receipts[r].effect) {
                Some(Effect::NotSent { count, .. }) => count + 1,
                Some(Effect::Unmarked { not_sent, .. }) => not_sent + 1,
                _ => 1,
            };
            Effect::NotSent { count, reason: "no connection".to_owned() }
        }
    };
    match index {
        Some(r) => w.db.receipts[r].effect = effect,
        None => w.db.receipts.push(Receipt { effect, ..receipt }),
    }
}

fn delete(m: &Protocol, w: &mut World, i: u8, mut run: Run, r: Option<usize>, id: &str) {
    let (Some(r), Some(id)) = (r, parse_rid(id)) else { return halt(w, i, &run) };
    if !fence_holds(m, w, i, &run) {
        return halt(w, i, &run);
    }
    if !truly_holds(w, i, &run) {
        w.ghost.unfenced_send = true;
    }
    // A DELETE by an id in the post-create window answers 404 and does nothing.
    if w.res(id).alive && w.res(id).by_id {
        w.cloud[usize::from(id)].alive = false;
        for res in w.cloud.iter_mut().filter(|x| x.attached_to == Some(id)) {
            res.attached_to = None;
        }
    }
    run.phase = Phase::DeleteSent(r);
    w.workers[usize::from(i)] = Worker::Running(run);
}

/// Claims the change receipt of the volume's resize to the current spec
/// (or sends it again on it, if provably never sent).
fn change(w: &mut World, i: u8, mut run: Run, r: Option<usize>) {
    let Some(id) = r.and_then(|r| rid_of(&w.db.receipts[r])) else { return halt(w, i, &run) };
    let spec = w.db.spec;
    let c = match w.db.changes.iter().position(|c| c.resource == id && c.spec == spec) {
        Some(c) if w.db.changes[c].effect.is_unsent() => c,
        // The change key is taken (a stale run's claim): the insert fails.
        Some(_) => return halt(w, i, &run),
        None => {
            let effect = Effect::Unmarked { not_sent: 0, observations: 0 };
            w.db.changes.push(Change { spec, resource: id, effect });
            w.db.changes.len() - 1
        }
    };
    run.phase = Phase::PatchClaimed(c);
    w.workers[usize::from(i)] = Worker::Running(run);
}

/// A PATCH leaves this run: the ghost's record of it.
fn patch_sent(w: &mut World, i: u8, run: &Run, c: usize) {
    let ch = &w.db.changes[c];
    w.ghost.patches.push((ch.resource, ch.spec));
    request_left(w, i, run);
}

/// A request whose guard and sending are one step left this run: the
/// ghost notes a key the record is not bound to, or a claim or generation
/// lost.
pub(crate) fn request_left(w: &mut World, i: u8, run: &Run) {
    if run.client == 0 && w.db.bound_key != Some(run.key) {
        w.ghost.unbound_send = true;
    }
    if !truly_holds(w, i, run) {
        w.ghost.unfenced_send = true;
    }
}

/// The provider starts the resize (it shows once done).
fn resize(w: &mut World, c: usize) {
    let ch = &w.db.changes[c];
    let vol = &mut w.cloud[usize::from(ch.resource)];
    if vol.alive && vol.by_id && vol.size < ch.spec {
        vol.resizing_to = Some(ch.spec);
    }
}

fn send_patch(w: &mut World, i: u8, run: Run, c: usize, how: SendAs) {
    w.budget.spend(how);
    let answer = match how {
        SendAs::NotConnected => Answer::NotConnected,
        _ => {
            if w.db.changes[c].effect.is_unsent() {
                w.db.changes[c].effect = Effect::Unknown { observations: 0 };
            }
            patch_sent(w, i, &run, c);
            match how {
                SendAs::Refused => Answer::Refused,
                SendAs::Unapplied => Answer::Unapplied,
                SendAs::Lost => {
                    resize(w, c);
                    Answer::Lost
                }
                _ => {
                    resize(w, c);
                    Answer::Made(w.db.changes[c].resource)
                }
            }
        }
    };
    w.workers[usize::from(i)] = Worker::Running(Run { phase: Phase::PatchAnswered(c, answer), ..run });
}

/// A PATCH's answer on its receipt: accepted or lost, it waits for a read.
fn record_patch(w: &mut World, c: usize, answer: Answer) {
    let e = &mut w.db.changes[c].effect;
    *e = match (answer, &*e) {
        (Answer::Refused, _) => Effect::Rejected { status: 422, message: "refused".to_owned() },
        (Answer::NotConnected, Effect::NotSent { count, .. }) => {
            Effect::NotSent { count: count + 1, reason: "no connection".to_owned() }
        }
        (Answer::NotConnected, _) => Effect::NotSent { count: 1, reason: "no connection".to_owned() },
        _ => return,
    };
}
