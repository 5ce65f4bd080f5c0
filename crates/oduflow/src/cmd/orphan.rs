//! `oduflow orphan list|adopt|delete`.

use crate::cli::OrphanCmd;
use crate::config::Config;
use crate::output::{print_client, print_dns_orphan_deleted, print_orphan_deleted, print_orphans};
use crate::setup::{compare_lineage, dns_adapter, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::dns_inventory;
use oduflow_engine::operator::{self, Actor};

pub async fn run(cfg: &Config, c: OrphanCmd) -> Result<()> {
    match c {
        OrphanCmd::List { all, json } => {
            let store = open(cfg).await?;
            print_orphans(&store.orphans_list(all).await?, json)
        }
        OrphanCmd::Adopt { id, by } => {
            let store = open(cfg).await?;
            let provider = provider(cfg, &store, "orphan adopt")?;
            compare_lineage(&store).await?;
            let actor = Actor { by: cfg.by(&by), now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
            let row = operator::orphan_adopt(&store, provider.as_ref(), &id, actor).await?;
            print_client(&store, &row, false, false).await
        }
        OrphanCmd::Delete { id, by, reason, json } => {
            let (by, reason) = crate::cmd::adopt::attestation(&by, &reason)?;
            let store = open(cfg).await?;
            let provider = provider(cfg, &store, "orphan delete")?;
            compare_lineage(&store).await?;
            // A DNS record the inventory traced is no row of the orphans
            // table: it is found again in a listing taken now.
            if let Some(zone) = dns_adapter(cfg, &provider)
                && store.orphan_get(&id).await?.is_none()
            {
                let now = now_ms(&store).await?;
                let d = dns_inventory::dns_orphan_delete(&store, &zone, &id, (&by, &reason), now).await?;
                return print_dns_orphan_deleted(&d, json);
            }
            let actor = Actor { by: &by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
            let d = operator::orphan_delete(&store, provider.as_ref(), &id, &reason, actor).await?;
            print_orphan_deleted(&d, json)
        }
    }
}
