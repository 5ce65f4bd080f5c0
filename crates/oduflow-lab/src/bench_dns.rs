//! `oduflow bench dns`: provider calls per client for the DNS identity with
//! every client in one zone, through the DNS adapter itself
//! against the in-process simulator: ensure and check for each client, then
//! remove and check. Figures, not assertions.

use anyhow::Result;
use oduflow_model::identity::{IdentityAdapter, IdentityTarget, MemoryOwnership, Presence};
use oduflow_sim::{Sim, SimConfig};
use oduflow_vultr::dns_adapter::DnsAdapter;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

const KEY: &str = "bench-key";
const ZONE: &str = "example.com";

fn target(i: usize, removing: bool) -> IdentityTarget {
    let name = format!("c{i}");
    IdentityTarget {
        client_id: name.clone(),
        dns_name: name.clone(),
        client: name,
        main_ip: Some(format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255)),
        outputs: oduflow_model::ServerOutputs::default(),
        hostname: String::new(),
        plan: String::new(),
        volume_gb: 0,
        removing,
    }
}

/// DNS requests by route so far.
fn dns_requests(sim: &oduflow_sim::SimHandle) -> BTreeMap<String, u64> {
    sim.ledger().requests.into_iter().filter(|(k, _)| k.contains("/domains/")).collect()
}

fn minus(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    a.iter().map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0))).filter(|(_, v)| *v > 0).collect()
}

fn per_client(m: &BTreeMap<String, u64>, n: usize) -> (f64, String) {
    let total: u64 = m.values().sum();
    let routes: Vec<String> = m.iter().map(|(k, v)| format!("{k} {:.2}", *v as f64 / n as f64)).collect();
    (total as f64 / n as f64, routes.join(", "))
}

/// Runs `f` for every client, `in_flight` at a time.
async fn each<F, Fut>(n: usize, in_flight: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..in_flight {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                f(i).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

pub(crate) async fn dns(n: usize, out: &mut crate::bench::Section) -> Result<()> {
    let cfg = SimConfig { rate_per_sec: 1_000_000, ..SimConfig::default().instant() }.with_key(KEY);
    let sim = Sim::start(cfg, "127.0.0.1:0".parse()?).await?;
    let client = oduflow_vultr::VultrClient::new(oduflow_vultr::VultrConfig {
        base_url: sim.base_url.clone(),
        rate_per_sec: 1_000_000,
        per_page: 500,
        ..oduflow_vultr::VultrConfig::new(secrecy::SecretString::from(KEY.to_owned()))
    })?;
    let adapter = Arc::new(DnsAdapter::new(client, ZONE.into(), 300));
    let owned: Arc<Vec<MemoryOwnership>> = Arc::new((0..n).map(|_| MemoryOwnership::default()).collect());
    let t0 = Instant::now();
    let (a, o) = (adapter.clone(), owned.clone());
    each(n, 32, move |i| {
        let (a, o) = (a.clone(), o.clone());
        async move {
            let t = target(i, false);
            a.ensure(&t, &o[i]).await.map_err(|e| anyhow::anyhow!("ensure c{i}: {e}"))?;
            let p = a.check(&t, &o[i]).await.map_err(|e| anyhow::anyhow!("check c{i}: {e}"))?;
            anyhow::ensure!(matches!(p, Presence::Present(_)), "c{i} absent after ensure");
            Ok(())
        }
    })
    .await?;
    let provisioned = dns_requests(&sim);
    let provision_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let (a, o) = (adapter.clone(), owned.clone());
    each(n, 32, move |i| {
        let (a, o) = (a.clone(), o.clone());
        async move {
            let t = target(i, true);
            a.remove(&t, &o[i]).await.map_err(|e| anyhow::anyhow!("remove c{i}: {e}"))?;
            let p = a.check(&t, &o[i]).await.map_err(|e| anyhow::anyhow!("check c{i}: {e}"))?;
            anyhow::ensure!(p == Presence::Absent, "c{i} present after remove");
            Ok(())
        }
    })
    .await?;
    let delete_s = t1.elapsed().as_secs_f64();
    let deleted = minus(&dns_requests(&sim), &provisioned);
    let (p, p_routes) = per_client(&provisioned, n);
    let (d, d_routes) = per_client(&deleted, n);
    // A zone scan at n records, as an adapter that does not own its records
    // by id would make one on every ensure, check and remove (pages of 500).
    let pages = n.div_ceil(500) as f64;
    let before_p = 2.0 * (pages / 2.0).max(1.0) + 1.0;
    let before_d = 2.0 * (pages / 2.0).max(1.0) + 1.0;
    let line = format!(
        "{n} clients in one zone: provisioning {p:.2} calls/client ({p_routes}) in {provision_s:.1} s; deletion \
         {d:.2} calls/client ({d_routes}) in {delete_s:.1} s"
    );
    println!("dns: {line}");
    out.line(&format!("- {line}."));
    out.line(&format!(
        "- Before (an adapter that did not own its records by id: a whole-zone listing on every ensure, check and remove, \
         {pages:.0} pages of 500 at {n} records, half that on average while the zone fills or empties): about \
         {before_p:.0} calls/client to provision and {before_d:.0} to delete."
    ));
    out.line(
        "- The zone listing that decides a name is free is started after each create's check began, shared only \
         by the checks waiting when it starts (32 in flight here): its pages are counted above.",
    );
    sim.shutdown().await;
    Ok(())
}
