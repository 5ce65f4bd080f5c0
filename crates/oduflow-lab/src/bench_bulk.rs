//! `oduflow bench bulk`: the same fleet provisioned and deleted
//! with the bulk view off (a GET by id per resource per poll, as before) and
//! on (shared listings), one after the other in one run, at each size.

use crate::bench::{Fleet, Section, converge_with};
use anyhow::Result;

pub(crate) async fn bulk(
    sizes: &[(usize, u32)],
    views: &[bool],
    in_flight: usize,
    pace: u64,
    out: &mut Section,
) -> Result<()> {
    let which = match views {
        [false] => {
            "once, with the bulk view off (`ODUFLOW_BULK_VIEW=false`: a GET by id per resource per poll, \
                    what the view replaces)"
        }
        [true] => "once, with the bulk view on (the default)",
        _ => {
            "twice: with the bulk view off (`ODUFLOW_BULK_VIEW=false`: a GET by id per resource per poll, what the \
              view replaces) and on (the default)"
        }
    };
    out.line(&format!(
        "One `oduflow worker` process ({in_flight} jobs in flight) on PostgreSQL provisions, then deletes, each fleet \
         {which}. Same simulator lifecycle as section 1 (2 s pending, 2 s installing, 1 s block pending, 0.5 s \
         post-create 404 window and listing lag, 0.5 s attach lock, poll interval 2 s; a quarter of each in the smoke run); listings in pages of 500; the \
         simulator's 429 threshold is the rate × 30/25 (Vultr's 30 at the default 25). The rate-limit bound is all \
         calls / the rate. Peak RSS is the largest VmHWM of the worker processes.\n"
    ));
    out.line("| clients | rate | bulk view | calls per provisioned client (target ≤ 4.0) | calls per deleted client | wall time vs rate-limit bound (target ≤ 1.10×) | peak RSS (target ≤ 150 MiB at 5,000) | 429s | final states |");
    out.line("|---|---|---|---|---|---|---|---|---|");
    let mut routes = vec![];
    for &(n, rate) in sizes {
        for &bulk in views {
            let r = converge_with(Fleet { n, processes: 1, in_flight, rate, bulk, pace }).await?;
            let per_prov = r.calls_provision as f64 / n as f64;
            let per_del = (r.calls_total - r.calls_provision) as f64 / n as f64;
            let bound_s = r.calls_total as f64 / f64::from(rate);
            let wall = r.provision_s + r.delete_s;
            let rss_mib = r.peak_rss_kib as f64 / 1024.0;
            let on = if bulk { "on" } else { "off" };
            println!(
                "bulk: {n} clients at {rate}/s, bulk view {on}: provisioning {per_prov:.2} calls per client in {:.1} s, \
                 deletion {per_del:.2} in {:.1} s; wall {wall:.1} s vs bound {bound_s:.1} s = {:.2}x; peak RSS \
                 {rss_mib:.1} MiB; 429s {}; {:?}",
                r.provision_s,
                r.delete_s,
                wall / bound_s,
                r.r429,
                r.counts
            );
            println!("  calls by route: {}", r.routes);
            for l in &r.worker_lines {
                println!("  {l}");
            }
            let met = |ok: bool| if ok { "met" } else { "not met" };
            out.line(&format!(
                "| {n} | {rate}/s | {on} | **{per_prov:.2}** ({}) | {per_del:.2} | **{wall:.1} s vs {bound_s:.1} s = {:.2}×** ({}) | {rss_mib:.1} MiB | {} | {:?} |",
                met(per_prov <= 4.0),
                wall / bound_s,
                met(wall / bound_s <= 1.10),
                r.r429,
                r.counts
            ));
            routes.push(format!("{n} clients, bulk view {on}: {}.", r.routes));
        }
    }
    out.line("");
    for r in routes {
        out.line(&format!("Calls by route, {r}\n"));
    }
    println!("  reproduce: cargo run --release -- bench bulk");
    Ok(())
}
