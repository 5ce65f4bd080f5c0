//! `cargo run --release -p oduflow-check --example check -- [--nightly] [--flaw NAME|all]`:
//! the model checked, its figures printed; with a flaw, the shortest
//! counterexample as a schedule. Exits 1 when a property fails without a
//! flaw, or when a flaw goes unnoticed.

use oduflow_check::{Config, Flaw, Protocol, live, trace};

/// Checks one world; whether it failed.
fn check_world(name: &str, cfg: Config, threads: usize) -> bool {
    let m = Protocol::new(cfg);
    let r = m.check(threads);
    println!("{name}: {} states ({} unique), depth {}, {:.1} s", r.states, r.unique, r.depth, r.seconds);
    let mut failed = false;
    for (name, acts) in &r.violations {
        failed = true;
        println!("VIOLATED: {name}\n{}", trace::schedule(&m, acts, Some(name)));
    }
    let t = std::time::Instant::now();
    let l = live::check(&m);
    println!("  liveness: {} states, {} steps, {:.1} s", l.states, l.edges, t.elapsed().as_secs_f64());
    if let Some(acts) = &l.stuck {
        failed = true;
        println!("STUCK: the client can never settle after\n{}", trace::schedule(&m, acts, None));
    }
    failed
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nightly = args.iter().any(|a| a == "--nightly");
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let flaws: Vec<Flaw> = match args.iter().position(|a| a == "--flaw").and_then(|i| args.get(i + 1)) {
        Some(all) if all == "all" => Flaw::ALL.iter().map(|(f, _)| *f).collect(),
        Some(name) => match Flaw::named(name) {
            Some(f) => vec![f],
            None => {
                let names: Vec<&str> = Flaw::ALL.iter().map(|(_, n)| *n).collect();
                eprintln!("unknown flaw {name:?}; known: {}", names.join(", "));
                std::process::exit(2);
            }
        },
        None => vec![],
    };
    let mut failed = false;
    if flaws.is_empty() {
        let mut worlds = if nightly { Config::nightly() } else { Config::worlds() };
        if let Some(spec) = args.iter().position(|a| a == "--budget").and_then(|i| args.get(i + 1)) {
            let mut cfg = Config::calm();
            if let Err(e) = cfg.set_budget(spec) {
                eprintln!("{e}");
                std::process::exit(2);
            }
            worlds = vec![("--budget", cfg)];
        }
        for (name, cfg) in worlds {
            failed |= check_world(name, cfg, threads);
        }
    }
    for flaw in flaws {
        let m = Protocol::new(Config::with_flaw(flaw));
        match m.counterexample(threads) {
            (r, Some((name, acts))) => println!(
                "{}: {name} ({} states, {:.1} s)\n{}",
                flaw.name(),
                r.unique,
                r.seconds,
                trace::schedule(&m, &acts, Some(name))
            ),
            (r, None) => {
                failed = true;
                println!("{}: NOT CAUGHT ({} states, {:.1} s)", flaw.name(), r.unique, r.seconds);
            }
        }
    }
    std::process::exit(i32::from(failed));
}
