//! `oduflow reconcile NAME [--new-dispatch]` and `oduflow reconcile --all`
//! (the inventory).

use crate::config::{BadInput, Config};
use crate::output::{print_client, print_inventory};
use crate::setup::{compare_lineage, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor};
use oduflow_model::*;

pub async fn run(
    cfg: &Config,
    name: Option<String>,
    all: bool,
    new_dispatch: bool,
    by: &str,
    json: bool,
) -> Result<()> {
    if all {
        let store = open(cfg).await?;
        let provider = provider(cfg, &store, "reconcile")?;
        let mut inv =
            operator::inventory_settled(&store, provider.as_ref(), now_ms(&store).await?, cfg.listing_settle_ms)
                .await?;
        if let Some(dns) = &cfg.dns {
            let records = zone_records(provider.as_ref(), &dns.domain).await?;
            inv.dns_orphans = oduflow_engine::dns_inventory::dns_orphans(&store, &dns.domain, &records).await?;
        }
        provider.flush_budget().await;
        return print_inventory(&inv, json);
    }
    let Some(name) = name else {
        return Err(BadInput("name a client, or use --all".into()).into());
    };
    ClientName::parse(&name)?;
    let store = open(cfg).await?;
    let provider = provider(cfg, &store, "reconcile")?;
    compare_lineage(&store).await?;
    let actor = Actor { by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
    let row = operator::reconcile(&store, provider.as_ref(), &name, new_dispatch, actor).await?;
    print_client(&store, &row, json, false).await
}

/// One listing of the DNS zone, as the inventory reads it.
pub(crate) async fn zone_records(
    vultr: &oduflow_vultr::VultrClient,
    zone: &str,
) -> Result<Vec<oduflow_engine::dns_inventory::ZoneRecord>> {
    oduflow_server::api::zone_records(vultr, zone).await.map_err(|e| anyhow::anyhow!("listing the {zone} zone: {e}"))
}
