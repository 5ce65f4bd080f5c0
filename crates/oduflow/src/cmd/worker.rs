//! `oduflow worker`: runs jobs until stopped (or, `--until-settled`, until
//! nothing is left to do), and stops if the database turns out to be a
//! restored copy.

use crate::config::{BadInput, Config};
use crate::lineage;
use crate::setup::{identity_adapters, now_ms, provider};
use anyhow::{Context, Result};
use oduflow_engine::{SystemClock, Worker};
use oduflow_model::provider::Provider;
use oduflow_store::Store;
use std::sync::Arc;

/// How often a running worker checks this host's high-water mark.
const LINEAGE_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

pub async fn run(cfg: &Config, until_settled: bool, concurrency: Option<usize>) -> Result<()> {
    let mut engine = cfg.engine();
    if let Some(n) = concurrency {
        if n == 0 {
            return Err(BadInput("--concurrency must be at least 1".into()).into());
        }
        engine.concurrency = n;
    }
    let store = Store::connect_sized(&cfg.database_url, false, 2 * engine.concurrency as u32 + 4).await?;
    let provider = provider(cfg, &store, "worker")?;
    if let Some(why) = lineage::check(&store, now_ms()).await? {
        anyhow::bail!("restore pending ({why}): run `oduflow reconcile --all` before starting workers");
    }
    // Its footing before anything else: the base URL answers as Vultr and
    // accepts the key (GET /account). A wrong URL or key would otherwise turn
    // every unbound client's create into a rejection; here it is one line
    // and nothing is sent.
    // Its refusal is the one line that reports a failure here: the
    // adapter's warnings about it would repeat it.
    if let Err(e) = oduflow_vultr::failures_reported_by_caller(provider.account_get()).await {
        return Err(BadInput(format!(
            "preflight: GET {}/account failed with the configured key ({}): {e}; nothing was sent",
            cfg.vultr_url.trim_end_matches('/'),
            provider.fingerprint().short()
        ))
        .into());
    }
    let adapters = identity_adapters(cfg, provider.as_ref())?;
    let worker = Worker::new(store.clone(), provider.clone(), engine, Arc::new(SystemClock)).with_adapters(adapters);
    // Keep this host's high-water mark fresh, and stop if the database turns
    // out to be a restored copy while running.
    let watch_store = store.clone();
    let watch = tokio::spawn(async move {
        loop {
            tokio::time::sleep(LINEAGE_CHECK_EVERY).await;
            if let Ok(Some(why)) = lineage::check(&watch_store, now_ms()).await {
                return why;
            }
        }
    });
    tokio::select! {
        r = run_worker(worker, until_settled) => r?,
        why = watch => anyhow::bail!("restore pending ({}): run `oduflow reconcile --all`", why.unwrap_or_default()),
    }
    provider.flush_budget().await;
    lineage::check(&store, now_ms()).await?;
    Ok(())
}

/// Runs `worker` until Ctrl-C (or settled).
pub(crate) async fn run_worker<P: Provider>(worker: Worker<P>, until_settled: bool) -> Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    worker.run(until_settled, rx).await.context("worker")?;
    Ok(())
}
