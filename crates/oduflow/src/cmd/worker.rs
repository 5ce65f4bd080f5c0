//! `oduflow worker`: runs jobs until stopped (or, `--until-settled`, until
//! nothing is left to do), and stops if the database turns out to be a
//! restored copy.

use crate::config::{BadInput, Config};
use crate::lineage;
use crate::setup::{identity_adapters, provider};
use anyhow::{Context, Result};
use oduflow_engine::{DbClock, SharedClock, Worker};
use oduflow_model::provider::Provider;

/// How often a running worker checks this host's high-water mark.
const LINEAGE_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// `TimeoutStopSec` of `deploy/oduflow-worker@.service`: a grace at least
/// this long is warned about at start (test `deploy::units_…` keeps the
/// two equal).
const UNIT_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

/// How long an idle worker's loops may take to see a stop once the grace
/// has ended (they check it before each claim and while idle).
const IDLE_STOP_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a stopping worker (SIGTERM or SIGINT) lets its runs under way
/// finish: `shutdown_grace_ms` (`ODUFLOW_SHUTDOWN_GRACE_MS`), 60 s by
/// default. A run makes one side effect plus bounded reads, each under the
/// request timeout (30 s by default), so runs end well within it; the
/// service units give the process 90 s (`TimeoutStopSec`) before a SIGKILL.
/// Runs still under way when it ends are cut as a crash would cut them
/// (safe by the protocol: every create's receipt is committed before it is
/// sent), and the worker exits 1 saying so. Their claims end with the
/// process: a PostgreSQL transaction rolls back when its connection closes,
/// a SQLite client's lock is the process's own.
fn shutdown_grace(cfg: &Config) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(cfg.shutdown_grace_ms).unwrap_or(0))
}

/// The start-up warnings about this worker's settings: ignored ones, and a
/// grace the service units' stop timeout does not cover.
fn warn_of_settings(cfg: &Config) {
    for line in &cfg.deprecated {
        tracing::warn!("{line}");
    }
    if shutdown_grace(cfg) >= UNIT_STOP_TIMEOUT {
        tracing::warn!(
            "shutdown grace {} ms (ODUFLOW_SHUTDOWN_GRACE_MS) is not below the {} s the units in deploy/ give a \
             stopping worker before SIGKILL (TimeoutStopSec): raise that too, or runs will be killed, not cut",
            cfg.shutdown_grace_ms,
            UNIT_STOP_TIMEOUT.as_secs()
        );
    }
}

pub async fn run(
    cfg: &Config,
    until_settled: bool,
    concurrency: Option<usize>,
    metrics_listen: Option<std::net::SocketAddr>,
) -> Result<()> {
    // First: a signal during start-up stops the worker before its first
    // claim, rather than killing it.
    let stop = crate::signals::install("worker")?;
    let mut engine = cfg.engine();
    match concurrency {
        Some(0) => return Err(BadInput("--concurrency must be at least 1".into()).into()),
        Some(n) => engine.concurrency = n,
        None => {}
    }
    // A database or a Vultr API that does not answer yet is waited for, within
    // `startup_retry_ms` (crate::startup); a stop ends the worker before it claims.
    let Some(store) = crate::startup::store(cfg, 2 * engine.concurrency as u32 + 4, &stop).await? else {
        crate::logs::say("oduflow worker: stopped during start-up");
        return Ok(());
    };
    // Test builds: the store's share of a planted bug (the engine has its own).
    let store = store.with_planted(engine.planted);
    let provider = provider(cfg, &store, "worker")?;
    // Every time this worker writes or compares is the database's clock's
    // (docs/protocol.md §4.1): a host clock off by hours misleads nothing.
    let clock: SharedClock =
        again("reading the database's clock", || async { Ok(DbClock::start(&store).await?) }).await?;
    if let Some(why) = again("checking for a restore", || lineage::check(&store, clock.now_ms())).await? {
        anyhow::bail!("restore pending ({why}): run `oduflow reconcile --all` before starting workers");
    }
    // Its footing before anything else: the base URL answers as Vultr and
    // accepts the key (GET /account). A wrong URL or key would otherwise turn
    // every unbound client's create into a rejection; here it is one line
    // and nothing is sent.
    if crate::startup::account(cfg, &provider, &stop).await?.is_none() {
        crate::logs::say("oduflow worker: stopped during start-up");
        return Ok(());
    }
    let adapters = identity_adapters(cfg, provider.as_ref(), &clock)?;
    // Bound before the first claim: a busy address is one line, and no job
    // has been touched.
    let metrics_listener = match metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("oduflow worker: cannot listen on {addr} for --metrics-listen"))?,
        ),
        None => None,
    };
    let worker = Worker::new(store.clone(), provider.clone(), engine, clock.clone()).with_adapters(adapters);
    let metrics_at = serve_metrics(metrics_listener, &worker)?;
    let started = format!(
        "oduflow worker {}: database {}, Vultr {} (key {}), rate group {} at {}/s, {} run(s) at once, {metrics_at}",
        worker.cfg.worker_id,
        crate::setup::redacted_url(&cfg.database_url),
        cfg.vultr_url,
        provider.fingerprint().short(),
        provider.rate_group(),
        cfg.rate_per_sec,
        worker.cfg.concurrency,
    );
    crate::logs::say(&started);
    warn_of_settings(cfg);
    // Keep this host's high-water mark fresh, and stop if the database turns
    // out to be a restored copy while running.
    let (watch_store, watch_clock) = (store.clone(), clock.clone());
    let watch = tokio::spawn(async move {
        loop {
            tokio::time::sleep(LINEAGE_CHECK_EVERY).await;
            if let Ok(Some(why)) = lineage::check(&watch_store, watch_clock.now_ms()).await {
                return why;
            }
        }
    });
    let webhooks = webhooks(cfg, &store, &worker.cfg.worker_id, &clock).await;
    let (stats, probe) = (worker.stats.clone(), worker.clone());
    tokio::select! {
        r = drain(worker, until_settled, stop, shutdown_grace(cfg)) => r?,
        why = watch => anyhow::bail!("restore pending ({}): run `oduflow reconcile --all`", why.unwrap_or_default()),
    }
    // A delivery cut here is repeated by the next process (at least once).
    if let Some(w) = webhooks {
        w.abort();
    }
    provider.flush_budget().await;
    again("recording this host's high-water mark", || lineage::check(&store, clock.now_ms())).await?;
    let view = view_summary(probe.view_figures());
    crate::logs::say(&format!(
        "oduflow worker: stopped ({} run(s) done, {} to run again, {} failed{view})",
        stats.runs(oduflow_engine::RunResult::Done),
        stats.runs(oduflow_engine::RunResult::RunAgain),
        stats.runs(oduflow_engine::RunResult::Failed)
    ));
    Ok(())
}

/// The webhook delivery loop, beside the runs (a slow receiver holds up
/// only its endpoint), when the key is set; without it, one warn line if
/// endpoints are waiting (best effort: a database that fails this read
/// stops no worker).
async fn webhooks(
    cfg: &Config,
    store: &oduflow_store::Store,
    worker_id: &str,
    clock: &SharedClock,
) -> Option<tokio::task::JoinHandle<()>> {
    use oduflow_engine::webhook::{Deliverer, WebhookConfig};
    let Some(key) = cfg.webhook_key.clone() else {
        match store.webhook_list().await.map(|l| l.len()) {
            Ok(0) => {}
            Ok(n) => tracing::warn!("{n} webhook endpoint(s) and no ODUFLOW_WEBHOOK_KEY: this worker delivers nothing"),
            Err(e) => tracing::warn!(error = %e, "could not read the webhook endpoints; this worker delivers nothing"),
        }
        return None;
    };
    let deliverer = Deliverer::new(store.clone(), key, worker_id, clock.clone(), WebhookConfig::default());
    let (_keep, stop) = tokio::sync::watch::channel(false);
    Some(tokio::spawn(async move {
        let _keep = _keep;
        deliverer.run(stop).await
    }))
}

/// Tries of one database call at the edges of a worker's life (its first
/// readings, its last high-water mark) that fails on a connection the
/// server closed (a failover, an administrator's termination): the pool
/// opens another for the next try.
const EDGE_TRIES_MAX: u32 = 5;
/// The pause between those tries.
const EDGE_TRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs `f` again while it fails with a transient database error, at most
/// [`EDGE_TRIES_MAX`] times, each retry a warn line; any other error, or the
/// last, is returned.
async fn again<T, F, Fut>(what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut n = 1;
    loop {
        match f().await {
            Err(e)
                if n < EDGE_TRIES_MAX
                    && e.downcast_ref::<oduflow_store::StoreError>().is_some_and(|s| s.is_transient()) =>
            {
                tracing::warn!("{what}: {}; trying again ({n} of {EDGE_TRIES_MAX})", crate::chain(&e));
                tokio::time::sleep(EDGE_TRY_PAUSE).await;
                n += 1;
            }
            r => return r,
        }
    }
}

/// Serves the worker's `/metrics` on `listener`, until the process ends (a
/// scrape while the worker drains still answers); where, for the start-up
/// line.
fn serve_metrics(
    listener: Option<tokio::net::TcpListener>,
    worker: &Worker<oduflow_vultr::VultrClient>,
) -> Result<String> {
    let Some(listener) = listener else {
        return Ok("no metrics listener (--metrics-listen ADDR)".to_owned());
    };
    let at = listener.local_addr()?;
    let m = oduflow_server::WorkerMetrics {
        store: worker.store.clone(),
        provider: worker.provider.clone(),
        runs: worker.stats.clone(),
        clock: worker.clock.clone(),
    };
    tokio::spawn(async move {
        if let Err(e) = oduflow_server::serve_worker_metrics(m, listener, std::future::pending()).await {
            tracing::error!(error = %e, "worker metrics listener failed");
        }
    });
    Ok(format!("metrics on http://{at}/metrics"))
}

/// What the bulk view cost, for the worker's last line (empty if unused).
fn view_summary(v: oduflow_engine::ViewFigures) -> String {
    if v.asks == 0 {
        return String::new();
    }
    format!(
        "; bulk view: {} read(s) took {:.1} s in all, {} told to come back, {} listing(s) {:.1} s in all, the \
         longest {} ms",
        v.asks,
        v.asked_us as f64 / 1e6,
        v.deferred,
        v.listings,
        v.listing_us as f64 / 1e6,
        v.listing_us_max / 1000
    )
}

/// Runs `worker` until settled (with `until_settled`) or until `stop`
/// turns: then no job is claimed any more and the runs under way finish and
/// commit (which ends their claims: a PostgreSQL transaction, a SQLite
/// lock), within `grace` ([`shutdown_grace`]).
async fn drain<P: Provider>(
    worker: Worker<P>,
    until_settled: bool,
    stop: tokio::sync::watch::Receiver<bool>,
    grace: std::time::Duration,
) -> Result<()> {
    let stats = worker.stats.clone();
    let stopped = crate::signals::stopped(stop.clone());
    let work = worker.run(until_settled, stop);
    tokio::pin!(work);
    tokio::select! {
        r = &mut work => return r.context("worker"),
        _ = stopped => {}
    }
    match tokio::time::timeout(grace, &mut work).await {
        Ok(r) => r.context("worker"),
        // Nothing under way: the loops are only still to see the stop (a
        // grace of 0 ms, or a few on a loaded host); an idle worker's stop
        // is not a cut.
        Err(_) if stats.in_flight() == 0 => match tokio::time::timeout(IDLE_STOP_MAX, &mut work).await {
            Ok(r) => r.context("worker"),
            Err(_) => anyhow::bail!("the worker's loops did not stop within {IDLE_STOP_MAX:?} with no run under way"),
        },
        Err(_) => anyhow::bail!(
            "{} run(s) still under way after the shutdown grace of {} ms (ODUFLOW_SHUTDOWN_GRACE_MS) were cut, as a \
             crash would cut them (safe by the protocol: each create's receipt is committed before it is sent); their \
             claims end with this process and the next worker takes their jobs up",
            stats.in_flight(),
            grace.as_millis()
        ),
    }
}
