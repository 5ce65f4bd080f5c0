//! `oduflow bulk reconcile|abandon`: one action over a selection.

use crate::cli::{BulkCmd, BulkFlags};
use crate::config::{BadInput, Config};
use crate::output::{outln, print_table};
use crate::setup::{compare_lineage, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor, BulkAction, BulkOutcome, BulkReport};
use oduflow_model::*;
use oduflow_vultr::VultrClient;

pub async fn run(cfg: &Config, c: BulkCmd) -> Result<()> {
    match c {
        BulkCmd::Reconcile { select, by, out } => {
            let select = crate::cmd::client::selection(select)?;
            let store = open(cfg).await?;
            let provider = provider(cfg, &store, "reconcile")?;
            compare_lineage(&store).await?;
            let actor = Actor { by: cfg.by(&by), now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
            let action = BulkAction::Reconcile { provider: provider.as_ref() };
            let report = operator::bulk(&store, &select, action, actor, out.dry_run).await?;
            print_report(&report, &out)
        }
        BulkCmd::Abandon { select, kind, by, why, out } => {
            let select = crate::cmd::client::selection(select)?;
            let (by, why) = attestation(&by, &why)?;
            let kind = ResourceKind::parse(&kind).expect("clap checked");
            let store = open(cfg).await?;
            compare_lineage(&store).await?;
            let actor = Actor { by: &by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
            let action: BulkAction<'_, VultrClient> = BulkAction::Abandon { kind, reason: &why };
            let report = operator::bulk(&store, &select, action, actor, out.dry_run).await?;
            print_report(&report, &out)
        }
    }
}

/// `--by` and `--why`, by the rule of `abandon`'s `--by` and `--reason`.
fn attestation(by: &str, why: &str) -> Result<(String, String)> {
    use oduflow_model::audit::{BY_LEN_MAX, REASON_LEN_MAX, attestation};
    let bad = |e: String| BadInput(format!("{e}: --by WHO and --why WHY are the attestation; nothing was recorded"));
    Ok((attestation("--by", by, BY_LEN_MAX).map_err(bad)?, attestation("--why", why, REASON_LEN_MAX).map_err(bad)?))
}

/// One line per client, then the counts. A bulk action (not a dry run)
/// that left a client refused or not reached ends with exit code 1, after
/// the report.
fn print_report(r: &BulkReport, out: &BulkFlags) -> Result<()> {
    if out.json {
        outln!("{}", serde_json::to_string_pretty(r)?)?;
    } else {
        let word = |o: BulkOutcome| match o {
            BulkOutcome::Done => "done",
            BulkOutcome::WouldDo => "would",
            BulkOutcome::Refused => "refused",
            BulkOutcome::NotReached => "not reached",
        };
        let rows: Vec<[String; 3]> =
            r.items.iter().map(|i| [i.name.clone(), word(i.outcome).to_owned(), i.detail.clone()]).collect();
        print_table(["NAME", "OUTCOME", "DETAIL"], &rows)?;
        let done = if r.dry_run { r.count(BulkOutcome::WouldDo) } else { r.count(BulkOutcome::Done) };
        outln!(
            "{}{}: {} selected, {done} {}, {} refused, {} not reached{}",
            r.action,
            if r.dry_run { " (dry run, nothing recorded)" } else { "" },
            r.items.len(),
            if r.dry_run { "would be done" } else { "done" },
            r.count(BulkOutcome::Refused),
            r.count(BulkOutcome::NotReached),
            r.stopped.as_ref().map_or(String::new(), |s| format!("; stopped {s}")),
        )?;
    }
    let refused = r.count(BulkOutcome::Refused);
    match &r.stopped {
        Some(why) => anyhow::bail!("bulk {} stopped {why}", r.action),
        None if refused > 0 && !r.dry_run => anyhow::bail!("bulk {}: {refused} clients refused", r.action),
        None => Ok(()),
    }
}
