//! `oduflow bench bulk`: the same fleet provisioned and deleted
//! with the bulk view off (a GET by id per resource per poll, as before) and
//! on (shared listings), under the default and the realistic simulator,
//! one after the other in one run, at each size.

use crate::bench::{Converged, Fleet, Section, converge_with};
use crate::campaign::Profile;
use anyhow::Result;

pub(crate) async fn bulk(
    sizes: &[(usize, u32)],
    views: &[bool],
    profiles: &[(Profile, u64, i64)],
    in_flight: usize,
    out: &mut Section,
) -> Result<()> {
    let which = match views {
        [false] => {
            "with the bulk view off (`ODUFLOW_BULK_VIEW=false`: a GET by id per resource per poll, what the view \
             replaces)"
        }
        [true] => "with the bulk view on (the default)",
        _ => {
            "with the bulk view off (`ODUFLOW_BULK_VIEW=false`: a GET by id per resource per poll, what the view \
             replaces) and on (the default)"
        }
    };
    out.line(&format!(
        "One `oduflow worker` process ({in_flight} jobs in flight) on PostgreSQL provisions, then deletes, each fleet \
         {which}, under each profile. The default profile is section 1's compressed lifecycle (2 s pending, 2 s \
         installing, 1 s block pending, 0.5 s post-create 404 window and listing lag, 0.5 s attach lock, poll \
         interval 2 s). The realistic profile is Vultr as reports show it (docs/vultr.md §7: a 404 window of 10 to \
         60 s after a create, listings that lag 30 s to 5 min, 30 s pending then installs of 1 to 4 min, each resource its own; \
         an attachment shown 5 s after its 204; a volume released 10 s after its VM's delete) in real time, with \
         the workers' production polling (60 observations, at a 5 s poll interval unless the row says another). \
         The smoke run paces both faster. Listings in \
         pages of 500; the simulator's 429 threshold is the rate × 30/25 (Vultr's 30 at the default 25). The \
         rate-limit bound is all calls / the rate. Time to ready runs from a client's creation (all at once) to \
         its `ready`. Peak RSS is the largest VmHWM of the worker processes.\n"
    ));
    out.line(
        "| clients | rate | profile | bulk view | calls per provisioned client (target ≤ 3.1) | calls per deleted client \
         (target 4.0) | time to ready, median / max | blocked by reason | wall time vs rate-limit bound | peak RSS \
         (target ≤ 150 MiB at 5,000) | 429s | final states |",
    );
    out.line("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut routes = vec![];
    for &(n, rate) in sizes {
        for &(profile, pace, poll_ms) in profiles {
            for &bulk in views {
                let r = converge_with(Fleet { n, processes: 1, in_flight, rate, bulk, profile, poll_ms, pace }).await?;
                let f = Figures::of(&r, n, rate);
                let on = if bulk { "on" } else { "off" };
                let p = format!("{}, poll {} s", format!("{profile:?}").to_lowercase(), poll_ms as f64 / 1000.0);
                println!(
                    "bulk: {n} clients at {rate}/s, {p} (pace {pace}), bulk view {on}: provisioning {:.2} \
                     calls per client in {:.1} s, ready in {} (median / max); deletion {:.2} in {:.1} s; wall {:.1} \
                     s vs bound {:.1} s = {:.2}x; peak RSS {:.1} MiB; 429s {}; blocked {:?}; {:?}",
                    f.per_prov,
                    r.provision_s,
                    f.ready,
                    f.per_del,
                    r.delete_s,
                    f.wall,
                    f.bound_s,
                    f.wall / f.bound_s,
                    f.rss_mib,
                    r.r429,
                    r.blocked,
                    r.counts
                );
                println!("  calls by route: {}", r.routes);
                for l in &r.worker_lines {
                    println!("  {l}");
                }
                let met = |ok: bool| if ok { "met" } else { "not met" };
                let blocked = if r.blocked.is_empty() {
                    "none".to_owned()
                } else {
                    r.blocked.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
                };
                out.line(&format!(
                    "| {n} | {rate}/s | {p} | {on} | **{:.2}** ({}) | **{:.2}** ({}) | {} | {blocked} | {:.1} s vs \
                     {:.1} s = {:.2}× | {:.1} MiB | {} | {:?} |",
                    f.per_prov,
                    met(f.per_prov <= 3.1),
                    f.per_del,
                    met(f.per_del <= 4.0),
                    f.ready,
                    f.wall,
                    f.bound_s,
                    f.wall / f.bound_s,
                    f.rss_mib,
                    r.r429,
                    r.counts
                ));
                routes.push(format!("{n} clients, {p}, bulk view {on}: {}.", r.routes));
            }
        }
    }
    out.line("");
    for r in routes {
        out.line(&format!("Calls by route, {r}\n"));
    }
    println!("  reproduce: cargo run --release -- bench bulk");
    Ok(())
}

/// One run's figures as the table prints them.
struct Figures {
    per_prov: f64,
    per_del: f64,
    bound_s: f64,
    wall: f64,
    rss_mib: f64,
    /// Time to ready, median / max, or what it is without ready clients.
    ready: String,
}

impl Figures {
    fn of(r: &Converged, n: usize, rate: u32) -> Figures {
        let ready = match (r.ready_s.get(r.ready_s.len() / 2), r.ready_s.last()) {
            (Some(median), Some(max)) => format!("{median:.1} s / {max:.1} s"),
            _ => "no client ready".to_owned(),
        };
        Figures {
            per_prov: r.calls_provision as f64 / n as f64,
            per_del: (r.calls_total - r.calls_provision) as f64 / n as f64,
            bound_s: r.calls_total as f64 / f64::from(rate),
            wall: r.provision_s + r.delete_s,
            rss_mib: r.peak_rss_kib as f64 / 1024.0,
            ready,
        }
    }
}
