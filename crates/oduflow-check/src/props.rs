//! The properties checked in every reachable state, and the ghost's
//! bookkeeping after each step.

use crate::Protocol;
use crate::world::*;
use oduflow_model::ClientStatus;
use oduflow_model::ledger::Effect;
use stateright::Property;

/// The safety properties, by name (the liveness one is [`crate::live`]'s).
pub const PROPERTIES: [&str; 19] = [
    "at most one create request per dispatch label",
    "at most one create request per operation key between restores",
    "at most one live resource per kind",
    "a client reported deleted has nothing live",
    "a receipt's evidence is written once",
    "no request with a key the record is not bound to",
    "a recorded id is never given up for a temporary 404",
    "nothing sent after a run lost its claim",
    "a create recorded as sent left, or its run died right after the mark, or a restore doubted it",
    "every decision is one the model carries out",
    "at most one change request per change key between restores",
    "at most one live DNS record per client",
    "at most one create request per DNS record claim",
    "a settled client's live DNS records are all accounted for",
    "a client settles only as its target asks",
    "no DNS name has address records of two clients",
    "a client settled ready has its DNS record live, pointing at its VM",
    "no DNS record is owned by two clients",
    "creations stay bounded (fewer than 60 dispatches, resources, records)",
];

/// Live zone records whose owner marker names client `id`.
fn records_of(w: &World, id: u8) -> impl Iterator<Item = (usize, &ZoneRecord)> {
    w.zone.iter().enumerate().filter(move |(_, r)| r.alive && r.owner == id)
}

pub fn properties() -> Vec<Property<Protocol>> {
    vec![
        Property::always(PROPERTIES[0], |_, w: &World| no_repeat(&w.ghost.create_labels)),
        Property::always(PROPERTIES[1], |_, w: &World| no_repeat(&w.ghost.creates)),
        Property::always(PROPERTIES[2], |_, w: &World| {
            w.live(oduflow_model::ResourceKind::Vm) <= 1 && w.live(oduflow_model::ResourceKind::Volume) <= 1
        }),
        Property::always(PROPERTIES[3], |_, w: &World| {
            (w.db.client.status != ClientStatus::Deleted || w.cloud.iter().all(|r| !r.alive))
                && w.db.rows().all(|(_, c)| c.status != ClientStatus::Deleted || records_of(w, c.id).next().is_none())
        }),
        Property::always(PROPERTIES[4], |_, w: &World| !w.ghost.rewritten),
        Property::always(PROPERTIES[5], |_, w: &World| !w.ghost.unbound_send),
        Property::always(PROPERTIES[6], |_, w: &World| {
            w.db.receipts
                .iter()
                .all(|r| !r.progress.deleted || r.effect.id().and_then(parse_rid).is_none_or(|id| !w.res(id).alive))
        }),
        Property::always(PROPERTIES[7], |_, w: &World| !w.ghost.unfenced_send),
        Property::always(PROPERTIES[8], |_, w: &World| {
            w.db.receipts.iter().all(|r| {
                !matches!(r.effect, Effect::Unknown { .. })
                    || w.ghost.left.contains(&r.label)
                    || w.ghost.doubted.contains(&r.label)
                    || w.ghost.died_marked.contains(&r.label)
                    || w.workers.iter().any(|x| {
                        matches!(x, Worker::Running(Run { phase: Phase::Leaving { receipt, .. }, .. }) if receipt.label == r.label)
                    })
            })
        }),
        Property::always(PROPERTIES[9], |_, w: &World| !w.ghost.unmodelled),
        Property::always(PROPERTIES[10], |_, w: &World| no_repeat(&w.ghost.patches)),
        Property::always(PROPERTIES[11], |_, w: &World| (0..w.ids).all(|id| records_of(w, id).count() <= 1)),
        Property::always(PROPERTIES[15], |_, w: &World| {
            w.zone.iter().filter(|r| r.alive).all(|r| w.zone.iter().all(|x| !x.alive || x.owner == r.owner))
        }),
        Property::always(PROPERTIES[12], |_, w: &World| no_repeat(&w.ghost.dns_creates)),
        Property::always(PROPERTIES[16], |m, w: &World| {
            let points = |c: u8, row: &Client| {
                let vm = if c == 0 { crate::run::vm_of(m, w) } else { Some(row.address) };
                row.dns.iter().any(|o| {
                    o.effect.id().and_then(parse_rid).is_some_and(|z| {
                        let r = &w.zone[usize::from(z)];
                        r.alive && Some(r.data) == vm
                    })
                })
            };
            !crate::live::settled(w) || w.db.rows().all(|(c, row)| row.status != ClientStatus::Ready || points(c, row))
        }),
        Property::always(PROPERTIES[17], |_, w: &World| {
            let ids = |c: &Client| c.dns.iter().filter_map(|o| o.effect.id().map(str::to_owned)).collect::<Vec<_>>();
            match &w.db.rival {
                Some(r) => ids(&w.db.client).iter().all(|id| !ids(r).contains(id)),
                None => true,
            }
        }),
        Property::always(PROPERTIES[18], |_, w: &World| w.labels < 60 && w.cloud.len() < 60 && w.zone.len() < 60),
        Property::always(PROPERTIES[14], |_, w: &World| {
            w.workers.iter().any(|x| matches!(x, Worker::Running(_)))
                || w.db.rows().all(|(_, c)| {
                    let (ready, deleted) = (c.status == ClientStatus::Ready, c.status == ClientStatus::Deleted);
                    c.queued
                        || (!ready || c.target == oduflow_model::Target::Present)
                            && (!deleted || c.target == oduflow_model::Target::Absent)
                })
        }),
        Property::always(PROPERTIES[13], |_, w: &World| {
            // Owned by id, or the lost create a listing settles.
            let accounted = |c: &Client, z: usize, r: &ZoneRecord| {
                c.dns
                    .iter()
                    .any(|o| o.effect.id() == Some(&rid(z as u8)) || (o.effect.id().is_none() && o.data == r.data))
            };
            !crate::live::settled(w)
                || w.db.rows().all(|(_, c)| {
                    c.status == ClientStatus::Blocked || records_of(w, c.id).all(|(z, r)| accounted(c, z, r))
                })
        }),
    ]
}

fn no_repeat<T: PartialEq>(v: &[T]) -> bool {
    v.iter().enumerate().all(|(n, x)| !v[..n].contains(x))
}

/// The evidence a receipt holds, if any: what must never be written over.
fn evidence(e: &Effect) -> Option<String> {
    match e {
        Effect::Known { id, .. } => Some(format!("id {id}")),
        Effect::Rejected { status, .. } => Some(format!("rejected {status}")),
        _ => None,
    }
}

/// After every step: the first evidence of each receipt is remembered, and
/// any other evidence written for it later is a violation. (A restore that
/// loses a receipt's evidence writes nothing; an attestation that abandons
/// it keeps its id as evidence.)
pub fn witness(w: &mut World) {
    for r in &w.db.receipts {
        let Some(now) = evidence(&r.effect) else { continue };
        match w.ghost.evidence.iter().find(|(l, _)| *l == r.label) {
            Some((_, first)) if *first != now => w.ghost.rewritten = true,
            Some(_) => {}
            None => w.ghost.evidence.push((r.label, now)),
        }
    }
}
