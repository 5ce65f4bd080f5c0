//! `oduflow orphan list|adopt|delete`.

use crate::cli::OrphanCmd;
use crate::config::Config;
use crate::output::{print_client, print_orphan_deleted, print_orphans};
use crate::setup::{compare_lineage, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor};
use oduflow_model::EventKind;

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
            let actor = Actor { by: &by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
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
            if let Some(dns) = &cfg.dns
                && store.orphan_get(&id).await?.is_none()
            {
                operator::refuse_if_restored(&store).await?;
                let now = now_ms(&store).await?;
                return delete_dns(&store, provider.as_ref(), &dns.domain, &id, (&by, &reason), now, json).await;
            }
            let actor = Actor { by: &by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
            let d = operator::orphan_delete(&store, provider.as_ref(), &id, &reason, actor).await?;
            print_orphan_deleted(&d, json)
        }
    }
}

/// `oduflow orphan delete RECORD --by WHO --reason WHY` for a DNS record
/// `reconcile --all` reported: checked again in a listing taken now (an
/// orphan whose owner marker names no live client), the attestation
/// recorded, deleted by id, and confirmed by a GET 404.
async fn delete_dns(
    store: &oduflow_store::Store,
    vultr: &oduflow_vultr::VultrClient,
    zone: &str,
    id: &str,
    (by, reason): (&str, &str),
    now: i64,
    json: bool,
) -> Result<()> {
    let records = crate::cmd::reconcile::zone_records(vultr, zone).await?;
    let o = oduflow_engine::dns_inventory::dns_orphan_to_delete(store, zone, &records, id).await?;
    let detail = serde_json::json!({
        "id": id, "type": o.rtype, "name": o.name, "data": o.data, "client_id": o.client_id, "by": by, "reason": reason,
    });
    store.event_global(EventKind::DnsOrphanDeleteAttested, detail, now).await?;
    let rid = oduflow_vultr::DnsRecordId(id.to_owned());
    if let oduflow_model::provider::DeleteOutcome::Refused { status, message } =
        vultr.dns_record_delete(zone, &rid).await?
    {
        anyhow::bail!("Vultr refused the DELETE of record {id} with {status}: {message}; nothing changed");
    }
    let gone = vultr.dns_record_get(zone, &rid).await?.is_none();
    let note = if gone {
        "deleted; GET answers 404"
    } else {
        "DELETE accepted, but Vultr still shows it; `oduflow reconcile --all` shows whether it is gone"
    };
    if json {
        let v = serde_json::json!({ "id": id, "kind": "dns", "type": o.rtype, "name": o.name, "confirmed": gone, "note": note });
        crate::output::outln!("{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        crate::output::outln!("dns {id} ({} {} -> {}): {note}", o.rtype, o.name, o.data)?;
    }
    Ok(())
}
