//! A schedule in words: each step of a counterexample as an operator would
//! read it.

use crate::world::*;
use crate::{Act, Protocol, SendAs, run};
use std::fmt::Write;

/// One step, told from the state it was taken in.
pub fn describe(m: &Protocol, w: &World, act: Act) -> String {
    let worker = |i: u8| running(w, i);
    match act {
        Act::Claim(i, c) => {
            format!("worker {i} claims {} (fence {}, target {})", who(c), w.db.fences + 1, w.db.row(c).target)
        }
        Act::Step(i) => match worker(i).map(|r| (r.phase.clone(), r)) {
            Some((Phase::Decide, r)) if r.client != 0 => {
                let what = if r.target == oduflow_model::Target::Present { "ensure" } else { "removal" };
                format!("worker {i} runs the DNS adapter's {what} for the second client")
            }
            Some((Phase::Decide, r)) => {
                let d = run::decision(m, w, &r);
                let dns = match d {
                    oduflow_model::decide::Action::Ready if !matches!(w.db.client.dns_state, DnsState::Ensured(_)) => {
                        ": the DNS adapter's ensure first"
                    }
                    oduflow_model::decide::Action::Deleted if w.db.client.dns_state != DnsState::Removed => {
                        ": the DNS adapter's removal first"
                    }
                    _ => "",
                };
                format!("worker {i} decides {d:?}{dns}")
            }
            Some((Phase::Answered { receipt, answer, .. }, _)) => {
                format!("worker {i} records the answer to {} ({answer:?}) and ends its run", op(&receipt))
            }
            Some((Phase::PatchAnswered(c, answer), _)) => format!(
                "worker {i} records the answer to the resize of {} ({answer:?}) and ends its run",
                rid(w.db.changes[c].resource)
            ),
            Some((Phase::Leaving { receipt, how, .. }, _)) => {
                format!("worker {i}'s request for {} leaves ({how:?})", op(&receipt))
            }
            Some((Phase::DnsAnswered(o, answer), r)) => format!(
                "worker {i} records the answer to DNS record create (label {}) ({answer:?})",
                dns_label(w, r.client, o)
            ),
            Some((Phase::DnsDeleting(o, _), r)) => {
                format!("worker {i} sends the DELETE of DNS record {}", dns_id(w, r.client, o))
            }
            Some((Phase::DnsDeleted(o, answered), r)) => format!(
                "worker {i} records the DELETE of DNS record {} ({})",
                dns_id(w, r.client, o),
                if answered { "answered" } else { "a 404 so soon after its create: waits" }
            ),
            Some((Phase::DeleteSent(r), _)) => {
                format!("worker {i} records the DELETE of {} sent and ends its run", op(&w.db.receipts[r]))
            }
            _ => format!("worker {i} steps"),
        },
        Act::Send(i, how) => send(m, w, i, how),
        Act::Crash(i) => format!("worker {i} crashes"),
        Act::CommitFails(i) => format!("worker {i}'s commit fails (its writes roll back)"),
        Act::StartFails(i) => format!("worker {i} starts again and meets a transient failure"),
        Act::Expire(c) => format!("{}'s claim's lease runs out", who(c)),
        Act::Settle(id) => format!("GET by id finds {} (its 404 window ends)", rid(id)),
        Act::List(id) => format!("listings show {}", rid(id)),
        Act::Boot(id) => format!("{} becomes active", rid(id)),
        Act::Grow(id) => format!("the resize of {} is done", rid(id)),
        Act::Update => format!("the volume's size is updated (spec generation {})", w.db.spec + 1),
        Act::Flip(c) => format!("{}'s target is flipped from {}", who(c), w.db.row(c).target),
        Act::Arrive(a) if a == crate::run::RIVAL_VM => {
            "a second client is created with the first client's DNS name".to_owned()
        }
        Act::Arrive(a) => format!(
            "a second client is created with the first client's DNS name, its VM given the address {} had",
            rid(a)
        ),
        Act::Copy => "a copy of the database is taken".to_owned(),
        Act::Restore => "the copy is restored over the database".to_owned(),
        Act::Inventory => "the inventory pass runs".to_owned(),
        Act::ChangeKey => "the workers' API key is changed".to_owned(),
        Act::Rotate => "an operator rebinds the record to the new key".to_owned(),
        Act::Resolve => "an operator resolves the uncertain receipt from the console".to_owned(),
        Act::Reconcile => "an operator reconciles the blocked client".to_owned(),
    }
}

/// A send, told from the state it was taken in: what leaves and how it is
/// answered, or the guard that stops it.
fn send(m: &Protocol, w: &World, i: u8, how: SendAs) -> String {
    let what = match running(w, i).map(|r| (r.phase.clone(), r.client)) {
        Some((Phase::Claimed { receipt, .. }, _)) => op(&receipt),
        Some((Phase::DnsClaimed(o), c)) => {
            format!("{}'s DNS record create (label {})", who(c), dns_label(w, c, o))
        }
        Some((Phase::PatchClaimed(c), _)) => {
            let c = &w.db.changes[c];
            format!("the resize of {} to spec generation {}", rid(c.resource), c.spec)
        }
        _ => "?".to_owned(),
    };
    let how = match how {
        SendAs::Answered => "the provider answers",
        SendAs::Lost => "the provider applies it and the answer is lost",
        SendAs::Unapplied => "the answer is lost, and nothing was applied",
        SendAs::Refused => "the provider refuses it",
        SendAs::NotConnected => "the connection is never made",
    };
    match running(w, i) {
        Some(r) if !run::fence_holds(m, w, i, &r) => {
            format!("worker {i}'s guard stops {what}: its claim or the record's generation moved")
        }
        _ => format!("worker {i} marks {what} sent and sends it: {how}"),
    }
}

/// Worker `i`'s run, if it is running.
fn running(w: &World, i: u8) -> Option<Run> {
    match &w.workers[usize::from(i)] {
        Worker::Running(r) => Some(r.clone()),
        _ => None,
    }
}

/// The label of owned record `o` (a stale run's index may be gone).
fn dns_label(w: &World, c: u8, o: usize) -> String {
    w.db.row(c).dns.get(o).map_or("?".to_owned(), |x| x.label.to_string())
}

/// The id of owned record `o`, if known.
fn dns_id(w: &World, c: u8, o: usize) -> String {
    w.db.row(c).dns.get(o).and_then(|x| x.effect.id()).unwrap_or("?").to_owned()
}

/// A client by slot.
fn who(c: u8) -> &'static str {
    if c == 0 { "the client" } else { "the second client" }
}

/// `the vm create of generation 1 (label 0)`.
fn op(r: &Receipt) -> String {
    format!("the {} create of generation {} (label {})", r.kind.as_str(), r.generation, r.label)
}

/// A whole schedule from the initial state, numbered, up to the first
/// state that violates `property` (when named), with what the world holds
/// there.
pub fn schedule(m: &Protocol, acts: &[Act], property: Option<&str>) -> String {
    use stateright::Model;
    let violated = |w: &World| crate::properties().iter().any(|p| Some(p.name) == property && !(p.condition)(m, w));
    let mut w = m.init_states().remove(0);
    let mut out = String::new();
    for (n, act) in acts.iter().enumerate() {
        if violated(&w) {
            break;
        }
        let _ = writeln!(out, "{:>3}. {}", n + 1, describe(m, &w, *act));
        match m.next_state(&w, *act) {
            Some(next) => w = next,
            None => break,
        }
    }
    let mut live: Vec<String> = w
        .cloud
        .iter()
        .enumerate()
        .filter(|(_, r)| r.alive)
        .map(|(i, r)| format!("{} {}", r.kind.as_str(), rid(i as u8)))
        .collect();
    live.extend(w.zone.iter().enumerate().filter(|(_, r)| r.alive).map(|(z, r)| {
        let whose = if r.owner == w.db.client.id { "the client's" } else { "a second client's" };
        format!("DNS record {} ({whose})", rid(z as u8))
    }));
    let status = |c: &Client| format!("{}{}", c.status, c.reason.map(|r| format!(" ({r})")).unwrap_or_default());
    let rival = w.db.rival.as_ref().map(|r| format!("; second client {}", status(r))).unwrap_or_default();
    let _ =
        writeln!(out, "     then: client {}{rival}, live at the provider: [{}]", status(&w.db.client), live.join(", "));
    out
}
