//! The test command's walk: every reachable state, each checked against
//! the safety properties as it is found, then liveness.
//!
//! Liveness: from every reachable state, some schedule still settles the
//! client (ready, deleted, or blocked with a reason, nothing queued, every
//! worker stopped). In a finite world, that and a fair scheduler (every
//! step enabled for ever is taken at some point) mean every run ends so.
//! stateright's own `eventually` holds only on acyclic worlds, and waits
//! make this one cyclic, so the graph is explored here.

use crate::world::*;
use crate::{Act, Protocol, SendAs};
use oduflow_model::{ClientStatus, Target};
use stateright::Model;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// What the liveness check found.
#[derive(Debug)]
pub struct Liveness {
    pub states: usize,
    pub edges: usize,
    /// The shortest schedule to a state from which the client can never
    /// settle.
    pub stuck: Option<Vec<Act>>,
    /// The first safety property a state broke, in breadth-first order
    /// (so with a shortest schedule): one walk checks both.
    pub violated: Option<(&'static str, Vec<Act>)>,
}

/// Settled: a state every client rests in until someone acts, and one that
/// answers its target (ready only when present, deleted only when absent).
pub fn settled(w: &World) -> bool {
    w.db.rows().all(|(_, r)| rests(r))
        && !w.db.restore_pending
        && w.workers.iter().all(|x| !matches!(x, Worker::Running(_)))
}

/// A client's row rests, answering its target.
pub fn rests(r: &Client) -> bool {
    let answers = match r.status {
        ClientStatus::Ready => r.target == Target::Present,
        ClientStatus::Deleted => r.target == Target::Absent,
        ClientStatus::Blocked => true,
        _ => false,
    };
    answers && r.reason.is_some() == (r.status == ClientStatus::Blocked) && !r.queued
}

fn fingerprint(s: &std::hash::RandomState, w: &World) -> u64 {
    s.hash_one(w)
}

/// Whether a step may be counted on to happen: the workers' own steps (a
/// send answered), the provider's lags ending, a dead holder's lease
/// running out and the inventory pass; not a fault, a change of intent or
/// an operator's command, which nothing guarantees.
fn fair(w: &World, act: Act) -> bool {
    match act {
        Act::Claim(..) | Act::Step(_) | Act::Send(_, SendAs::Answered) => true,
        Act::Settle(_) | Act::List(_) | Act::Boot(_) | Act::Grow(_) | Act::Inventory => true,
        Act::Expire(c) => w.db.row(c).claim.is_some_and(
            |(holder, fence)| !matches!(&w.workers[usize::from(holder)], Worker::Running(r) if r.fence == fence),
        ),
        _ => false,
    }
}

/// Explores the whole graph (by fingerprint), then walks it backwards from
/// the settled states over fair steps only.
pub fn check(m: &Protocol) -> Liveness {
    let hasher = std::hash::RandomState::new();
    let init = m.init_states().remove(0);
    let mut index: HashMap<u64, u32> = HashMap::new();
    let mut parent: Vec<Option<(u32, Act)>> = vec![None];
    let mut preds: Vec<Vec<u32>> = vec![vec![]];
    let mut goal: Vec<bool> = vec![settled(&init)];
    index.insert(fingerprint(&hasher, &init), 0);
    let properties = crate::properties();
    let broken = |w: &World| properties.iter().find(|p| !(p.condition)(m, w)).map(|p| p.name);
    let mut violated: Option<(&'static str, u32)> = broken(&init).map(|p| (p, 0));
    let mut frontier = vec![(0u32, init)];
    let mut edges = 0;
    let mut acts = vec![];
    while !frontier.is_empty() {
        let mut next = vec![];
        for (id, w) in frontier {
            acts.clear();
            m.actions(&w, &mut acts);
            for &act in &acts {
                let Some(s) = m.next_state(&w, act) else { continue };
                edges += 1;
                let f = fingerprint(&hasher, &s);
                let to = match index.get(&f) {
                    Some(&to) => to,
                    None => {
                        let to = parent.len() as u32;
                        index.insert(f, to);
                        parent.push(Some((id, act)));
                        preds.push(vec![]);
                        goal.push(settled(&s));
                        if violated.is_none() {
                            violated = broken(&s).map(|p| (p, to));
                        }
                        // A runaway state is not expanded: it settles
                        // nothing (and breaks a safety property too).
                        if m.within_boundary(&s) {
                            next.push((to, s));
                        }
                        to
                    }
                };
                if fair(&w, act) {
                    preds[to as usize].push(id);
                }
            }
        }
        frontier = next;
    }
    let mut reaches = goal.clone();
    let mut stack: Vec<u32> = (0..goal.len() as u32).filter(|&i| goal[i as usize]).collect();
    while let Some(s) = stack.pop() {
        for &p in &preds[s as usize] {
            if !reaches[p as usize] {
                reaches[p as usize] = true;
                stack.push(p);
            }
        }
    }
    // States are numbered in breadth-first order: the first stuck one is
    // the nearest.
    let path = |s: u32| {
        let mut path = vec![];
        let mut at = s;
        while let Some((p, act)) = parent[at as usize] {
            path.push(act);
            at = p;
        }
        path.reverse();
        path
    };
    let stuck = reaches.iter().position(|r| !r).map(|s| path(s as u32));
    let violated = violated.map(|(p, s)| (p, path(s)));
    Liveness { states: parent.len(), edges, stuck, violated }
}
