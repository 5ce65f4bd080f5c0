//! `oduflow reconcile NAME [--new-dispatch]` and `oduflow reconcile --all`
//! (the inventory).

use crate::config::{BadInput, Config};
use crate::output::{print_client, print_inventory};
use crate::setup::{compare_lineage, dns_adapter, now_ms, open, provider};
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
            operator::inventory_settled(&store, provider.as_ref(), by, now_ms(&store).await?, cfg.listing_settle_ms)
                .await?;
        if let Some(zone) = dns_adapter(cfg, &provider) {
            inv.dns_orphans = oduflow_engine::dns_inventory::dns_inventory(&store, &zone).await?;
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
