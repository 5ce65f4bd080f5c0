//! `oduflow import`: servers made outside oduflow, as observed clients.

use crate::config::{BadInput, Config};
use crate::output::{outln, print_table};
use crate::setup::{compare_lineage, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor, ImportFilter, ImportItem, ImportOutcome};

pub async fn run(cfg: &Config, filter: ImportFilter, dry_run: bool, by: &str, json: bool) -> Result<()> {
    operator::check_import_filter(&filter).map_err(BadInput)?;
    let store = open(cfg).await?;
    let provider = provider(cfg, &store, "import")?;
    compare_lineage(&store).await?;
    let actor = Actor { by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
    let zone = crate::setup::dns_adapter(cfg, &provider);
    let dns = zone.as_ref().map(|z| operator::ImportDns { adapter: z, zone: z });
    let items = operator::import(&store, provider.as_ref(), &filter, dns, actor, dry_run).await?;
    provider.flush_budget().await;
    print_items(&items, dry_run, json)
}

fn print_items(items: &[ImportItem], dry_run: bool, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(items)?)?;
        return Ok(());
    }
    let word = |o: ImportOutcome| match o {
        ImportOutcome::Imported => "imported",
        ImportOutcome::WouldImport => "would import",
        ImportOutcome::DoesNotFit => "does not fit",
        ImportOutcome::Recorded => "recorded",
    };
    let rows: Vec<[String; 5]> = items
        .iter()
        .map(|i| {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            let dns = if i.dns_records.is_empty() {
                String::new()
            } else {
                format!(" (DNS records {})", i.dns_records.join(", "))
            };
            [i.label.clone(), i.vm.clone(), dash(&i.volume), word(i.outcome).into(), format!("{}{dns}", i.detail)]
        })
        .collect();
    print_table(["LABEL", "VM", "VOLUME", "OUTCOME", "DETAIL"], &rows)?;
    let n = |o| items.iter().filter(|i| i.outcome == o).count();
    let done = if dry_run { n(ImportOutcome::WouldImport) } else { n(ImportOutcome::Imported) };
    outln!(
        "{}{} servers: {done} {}, {} do not fit, {} recorded already",
        if dry_run { "dry run, nothing recorded: " } else { "" },
        items.len(),
        if dry_run { "would be imported" } else { "imported (observed only: `oduflow client promote NAME` to manage)" },
        n(ImportOutcome::DoesNotFit),
        n(ImportOutcome::Recorded),
    )?;
    Ok(())
}
