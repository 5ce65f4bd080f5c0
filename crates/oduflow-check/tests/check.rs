//! The model checked in the test command: every world of
//! [`Config::worlds`] green (safety in every state, liveness from every
//! state), each with its state counts printed; every flaw caught.

use oduflow_check::{Config, Flaw, Protocol, live, trace};

/// One world, walked once: every state checked against the safety
/// properties as it is found, then liveness over the whole graph (the
/// nightly run and the flaws use `stateright`'s own search).
fn world(n: usize) {
    let worlds = Config::worlds();
    let (name, cfg) = worlds[n].clone();
    let m = Protocol::new(cfg);
    let started = std::time::Instant::now();
    let l = live::check(&m);
    println!("{name}: {} states, {} steps, {:.1} s", l.states, l.edges, started.elapsed().as_secs_f64());
    if let Some((p, acts)) = &l.violated {
        panic!("{name}: violated {p}:\n{}", trace::schedule(&m, acts, Some(p)));
    }
    if let Some(acts) = &l.stuck {
        panic!("{name}: the client can never settle after\n{}", trace::schedule(&m, acts, None));
    }
}

/// The walk finds what `stateright` finds: the same states, and a broken
/// property when a flaw is on.
#[test]
fn the_walk_and_stateright_agree() {
    let mut cfg = Config::calm();
    cfg.set_budget("crashes=1,lost_answers=1").unwrap();
    let m = Protocol::new(cfg);
    assert_eq!(live::check(&m).states, m.check(1).unique);
    let m = Protocol::new(Config::with_flaw(Flaw::ForgetReceipt));
    assert!(live::check(&m).violated.is_some(), "the walk checks the safety properties");
}

#[test]
fn the_worlds_are_nine() {
    // A world dropped from the list would pass unseen: each has its test.
    assert_eq!(Config::worlds().len(), 9);
}

#[test]
fn world_0_sends() {
    world(0)
}

#[test]
fn world_1_claims() {
    world(1)
}

#[test]
fn world_2_restores_and_lost_answers() {
    world(2)
}

#[test]
fn world_3_restores_and_updates() {
    world(3)
}

#[test]
fn world_4_restores_crashes_and_no_connection() {
    world(4)
}

#[test]
fn world_5_keys_updates_refusals_and_an_operator() {
    world(5)
}

#[test]
fn world_6_a_dns_name_handed_to_a_second_client_and_back() {
    world(6)
}

#[test]
fn world_7_a_dns_name_given_to_a_second_client_and_a_restore() {
    world(7)
}

#[test]
fn world_8_failed_commits_and_starts() {
    world(8)
}

/// Every flaw yields a counterexample; the property it breaks is printed.
#[test]
fn every_flaw_is_caught() {
    let mut missed = vec![];
    for (flaw, name) in Flaw::ALL {
        let m = Protocol::new(Config::with_flaw(flaw));
        match m.counterexample(2) {
            (r, Some((property, acts))) => {
                println!("{name}: {property} ({} states)\n{}", r.unique, trace::schedule(&m, &acts, Some(property)))
            }
            (r, None) => missed.push(format!("{name} ({} states)", r.unique)),
        }
    }
    assert!(missed.is_empty(), "flaws the model did not catch: {missed:?}");
}

/// A flaw's counterexample is the flaw's, not the world's: each flaw's
/// world without the flaw is within a world checked green, here (every
/// fault at most as often, same workers) or in the nightly run.
#[test]
fn every_flaws_world_is_checked_without_it() {
    let green: Vec<(&str, Config)> = Config::worlds().into_iter().chain(Config::nightly()).collect();
    for (flaw, name) in Flaw::ALL {
        let c = Config::with_flaw(flaw);
        let by = green.iter().find(|(_, g)| c.budget.within(&g.budget) && c.workers == g.workers);
        match by {
            Some((world, g)) if Config::worlds().iter().any(|(w, _)| w == world) => {
                println!("{name}: its world without it is within {world:?}, checked here ({:?})", g.budget)
            }
            Some((world, _)) => println!("{name}: its world without it is within {world:?}, checked NIGHTLY only"),
            None => panic!("{name}: its world ({:?}) is within no world checked green", c.budget),
        }
    }
}

/// The limit docs/protocol.md §8 states, shown: a create past its guard and
/// mark stalls while its claim is lost, the receipt blocks
/// `uncertain_create`, an operator abandons it (nothing carries its label
/// yet), the next dispatch makes a VM, and the stalled request lands: a
/// second VM. The checked worlds assume the abandon comes after it.
#[test]
fn an_abandon_before_a_stalled_request_lands_makes_a_second_vm() {
    let mut cfg = Config::calm();
    cfg.set_budget("claim_losses=1,operator=1").unwrap();
    cfg.abandon_after_in_flight = false;
    let m = Protocol::new(cfg);
    let r = m.check(1);
    let (name, acts) = r.violations.first().expect("the limit is reachable");
    println!("{name}:\n{}", trace::schedule(&m, acts, Some(name)));
    assert_eq!(*name, "at most one live resource per kind");
}

/// The store's planted bugs, read from its source: each is a flaw of the
/// model, or named as not modelled (and said so loudly).
#[test]
fn every_planted_bug_of_the_store_is_a_flaw() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../oduflow-store/src/planted.rs")).unwrap();
    let names: Vec<&str> =
        src.lines().filter(|l| l.trim_start().starts_with("(Bug::")).filter_map(|l| l.split('"').nth(1)).collect();
    assert!(names.len() >= 8, "the planted bugs were not found in planted.rs: {names:?}");
    for name in names {
        if let Some((_, why)) = Flaw::NOT_MODELLED.iter().find(|(n, _)| *n == name) {
            eprintln!("NOT CHECKED BY THE MODEL: planted bug {name}: {why}");
            continue;
        }
        assert!(Flaw::named(name).is_some(), "planted bug {name} is not a flaw of the model");
    }
}
