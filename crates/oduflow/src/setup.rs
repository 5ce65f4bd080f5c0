//! What commands share: the clock, the store, the provider with its rate
//! budget, the identity adapters, and the restore check.

use crate::config::{BadInput, Config};
use crate::lineage;
use anyhow::Result;
use oduflow_engine::{Clock, SystemClock};
use oduflow_store::Store;
use std::sync::Arc;

pub(crate) fn now_ms() -> i64 {
    SystemClock.now_ms()
}

pub(crate) async fn open(cfg: &Config) -> Result<Store> {
    Ok(Store::connect(&cfg.database_url, false).await?)
}

/// Operator actions that act on the provider wait, like the queue, until a
/// restored copy has been reconciled with the provider's inventory (this
/// host's high-water mark tells, or a declared restore).
pub(crate) async fn refuse_if_restored(store: &Store) -> Result<()> {
    if let Some(why) = lineage::check(store, now_ms()).await? {
        anyhow::bail!("restore pending ({why}): run `oduflow reconcile --all` first");
    }
    Ok(())
}

/// The provider the worker drives: Vultr (or `oduflow sim`) at
/// `ODUFLOW_VULTR_URL`, its requests taking their slots from the rate group's
/// budget in the database, shared with every other process of the group.
/// `role` names this process in the budget's metrics.
pub(crate) fn provider(cfg: &Config, store: &Store, role: &str) -> Result<Arc<oduflow_vultr::VultrClient>> {
    let scheme = cfg.vultr_url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("https" | "http")) {
        return Err(BadInput(format!(
            "ODUFLOW_VULTR_URL {:?}: the scheme must be https (or http for a local simulator)",
            cfg.vultr_url
        ))
        .into());
    }
    let key = cfg.api_key()?.clone();
    let vc = oduflow_vultr::VultrConfig {
        base_url: cfg.vultr_url.clone(),
        rate_per_sec: cfg.rate_per_sec,
        per_page: cfg.per_page,
        request_timeout_ms: cfg.request_timeout_ms,
        ..oduflow_vultr::VultrConfig::new(key)
    };
    let budget =
        oduflow_store::SharedBudget::new(store.clone(), &cfg.rate_group, &process_name(role)).map_err(BadInput)?;
    Ok(Arc::new(oduflow_vultr::VultrClient::with_budget(vc, Arc::new(budget)).map_err(|e| BadInput(e.to_string()))?))
}

/// `<host>/<role>-<pid>`: how this process is named in the rate budget's
/// metrics.
pub(crate) fn process_name(role: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}/{role}-{}", std::process::id())
}

/// The configured identity adapters, DNS first.
pub(crate) fn identity_adapters(
    cfg: &Config,
    vultr: &oduflow_vultr::VultrClient,
) -> Result<Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>>> {
    let mut out: Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>> = vec![];
    if let Some(d) = &cfg.dns {
        out.push(Arc::new(oduflow_vultr::dns_adapter::DnsAdapter::new(vultr.clone(), d.domain.clone(), d.ttl)));
    }
    for a in &cfg.adapters {
        out.push(Arc::new(oduflow_engine::command_adapter::CommandAdapter::new(a.clone()).map_err(BadInput)?));
    }
    Ok(out)
}
