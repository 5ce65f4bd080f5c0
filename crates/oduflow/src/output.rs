//! Everything the commands print, for people and (`--json`) for programs.
//!
//! Standard output is written only through [`outln!`] (the tidy test keeps
//! `println!` out of this crate): a reader that goes away early (`oduflow
//! client list | head -1`) ends the command quietly with exit code 0, as it
//! ends `ls`, where `println!` panicked (exit code 101).
//!
//! Why not restore SIGPIPE's default action at start, as C programs have
//! it? Then every write to any closed pipe would kill the process on the
//! spot: a worker handing a root password to `root_password_command`, or
//! input to an identity adapter's command, would die with its run half done
//! whenever that command exited without reading. Only standard output's
//! reader going away means "stop now"; everywhere else EPIPE stays an error
//! to handle.

use anyhow::Result;
use oduflow_engine::operator;
use oduflow_model::*;
use oduflow_store::{ClientRow, Store};

/// Standard output's reader has gone: the command stops printing and ends
/// with exit code 0 (see `main`). Not an error, and nothing is logged.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed by its reader")]
pub(crate) struct StdoutClosed;

/// Writes one line to standard output (see [`write_text`]).
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) -> Result<()> {
    write_text(format_args!("{args}\n"))
}

/// Writes to standard output and flushes. A closed pipe is
/// [`StdoutClosed`]; any other failure (a full disk) is an error naming
/// standard output.
pub(crate) fn write_text(args: std::fmt::Arguments<'_>) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// `println!` that hands a failed write back (use it with `?`).
macro_rules! outln {
    () => {
        $crate::output::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// A client as `--json` shows it: the HTTP API's `ClientView`, so the two
/// public shapes are one (never the store's row as it is).
pub(crate) fn client_json(r: &ClientRow) -> serde_json::Value {
    serde_json::to_value(oduflow_server::api::ClientView::from(r)).unwrap_or_default()
}

pub(crate) async fn print_client(store: &Store, r: &ClientRow, json: bool, evidence: bool) -> Result<()> {
    let receipts = if evidence { store.receipts_for_client(&r.id).await? } else { vec![] };
    let adapters = if evidence { store.adapter_states(&r.id).await? } else { vec![] };
    let events = if evidence { store.events_for_client(&r.id).await? } else { vec![] };
    let changes = if evidence { store.changes_for_client(&r.id).await? } else { vec![] };
    if json {
        let mut v = client_json(r);
        if r.infra.status == ClientStatus::Blocked {
            let receipts = store.receipts_for_client(&r.id).await?;
            v["resolve"] = serde_json::to_value(oduflow_server::resolve::resolutions(r, &receipts))?;
        }
        if evidence {
            v["receipts"] = serde_json::to_value(&receipts)?;
            v["adapters"] = serde_json::to_value(&adapters)?;
            v["events"] = serde_json::to_value(&events)?;
            v["changes"] = serde_json::to_value(&changes)?;
        }
        outln!("{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    let i = &r.infra;
    outln!("name:       {}", r.name)?;
    match i.blocked_reason {
        Some(b) => outln!("status:     blocked ({b})")?,
        None => outln!("status:     {}", i.status)?,
    }
    if let Some(d) = &i.blocked_detail {
        outln!("evidence:   {d}")?;
    }
    if i.status == ClientStatus::Blocked {
        // The same commands the API and the dashboard suggest.
        let receipts = store.receipts_for_client(&r.id).await?;
        for res in oduflow_server::resolve::resolutions(r, &receipts) {
            outln!("resolve:    {}  ({})", res.command, res.when)?;
        }
    }
    outln!("target:     {} (generation {})", i.target, i.generation)?;
    outln!(
        "spec:       region {} plan {} {} volume {} GB {}",
        i.spec.region,
        i.spec.plan,
        i.spec.image,
        i.spec.volume_gb,
        i.spec.volume_type.as_str()
    )?;
    print_server(i)?;
    outln!("key:        {}", i.key_fingerprint.as_ref().map(|k| k.short()).unwrap_or("(not bound yet)"))?;
    outln!("vm:         {}", i.vm_id.as_ref().map(|v| v.as_str()).unwrap_or("-"))?;
    outln!("volume:     {}", i.volume_id.as_ref().map(|v| v.as_str()).unwrap_or("-"))?;
    if evidence {
        outln!("receipts:")?;
        for rc in &receipts {
            let outcome = rc.effect();
            outln!(
                "  {:<8} dispatch {} label {} {} observations {}{}",
                rc.resource_kind.as_str(),
                rc.dispatch_generation,
                rc.label,
                outcome,
                rc.observation_count(),
                rc.last_observation().map(|o| format!(" (last: {o})")).unwrap_or_default()
            )?;
        }
        if !changes.is_empty() {
            outln!("changes:")?;
            for c in &changes {
                outln!("  {}", c.summary())?;
            }
        }
        if !adapters.is_empty() {
            outln!("identities:")?;
            for a in &adapters {
                outln!(
                    "  {:<10} {:<9} {}{}",
                    a.adapter,
                    a.state,
                    a.detail,
                    if a.failures > 0 { format!(" (failures: {})", a.failures) } else { String::new() }
                )?;
            }
        }
        outln!("events (latest last):")?;
        for e in events.iter().rev().take(15).rev() {
            let by = e.actor.as_deref().map(|a| format!(" by {a}")).unwrap_or_default();
            outln!("  {} {:<28} {}{by}", time::rfc3339(e.at_ms), e.kind, e.detail)?;
        }
    }
    Ok(())
}

pub(crate) fn print_inventory(inv: &operator::Inventory, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(inv)?)?;
        return Ok(());
    }
    outln!("listed: {} instances, {} blocks", inv.instances_listed, inv.blocks_listed)?;
    let drifted = "drifted (ready clients; each runs again to decide)";
    for (title, items) in
        [("orphans", &inv.orphans), ("missing", &inv.missing), ("unrecorded", &inv.unrecorded), (drifted, &inv.drifted)]
    {
        outln!("{title}: {}", items.len())?;
        for i in items {
            outln!(
                "  {:<6} {} label {} client {} — {}",
                i.kind.as_str(),
                i.id,
                i.label,
                i.client.as_deref().unwrap_or("-"),
                i.note
            )?;
            if let Some(r) = &i.resolve {
                outln!("         resolve: {r}")?;
            }
        }
    }
    if !inv.dns_orphans.is_empty() {
        outln!("dns orphans: {}", inv.dns_orphans.len())?;
        for d in &inv.dns_orphans {
            outln!(
                "  {:<6} {} {} -> {} client {} — {}",
                d.rtype,
                d.id,
                d.name,
                d.data,
                d.client.as_deref().unwrap_or(&d.client_id),
                d.note
            )?;
            outln!("         resolve: {}", d.resolve)?;
        }
    }
    Ok(())
}

/// `client update --dry-run`: a table of the changes, then what stays.
pub(crate) fn print_update_plan(p: &operator::UpdatePlan, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(p)?)?;
        return Ok(());
    }
    outln!("{}: dry run, nothing recorded", p.name)?;
    let rows: Vec<[String; 4]> =
        p.changes.iter().map(|c| [c.field.to_owned(), c.from.clone(), c.to.clone(), c.effect.to_owned()]).collect();
    print_table(["FIELD", "FROM", "TO", "EFFECT"], &rows)?;
    if let Some(r) = p.stays_blocked {
        outln!("{} stays blocked ({}): `oduflow reconcile {}` applies the change", p.name, r.as_str(), p.name)?;
    }
    Ok(())
}

/// `client delete --dry-run`: each resource and identity, and what
/// deletion does with it.
pub(crate) fn print_delete_plan(p: &operator::DeletePlan, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(p)?)?;
        return Ok(());
    }
    let asked = if p.already_absent { " (deletion was asked already: nothing would change)" } else { "" };
    outln!("{}: dry run, nothing recorded{asked}", p.name)?;
    let rows: Vec<[String; 2]> = p.deletes.iter().map(|d| [d.what.clone(), d.detail.clone()]).collect();
    print_table(["WHAT", "DELETION"], &rows)
}

pub(crate) fn print_clients(rows: &[ClientRow], json: bool) -> Result<()> {
    if json {
        let v: Vec<_> = rows.iter().map(client_json).collect();
        outln!("{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            let i = &r.infra;
            [
                r.name.clone(),
                i.status.as_str().to_owned(),
                i.blocked_reason.map_or("-", |b| b.as_str()).to_owned(),
                i.vm_id.as_ref().map_or("-", |v| v.as_str()).to_owned(),
                i.volume_id.as_ref().map_or("-", |v| v.as_str()).to_owned(),
            ]
        })
        .collect();
    print_table(["NAME", "STATUS", "BLOCKED", "VM", "VOLUME"], &cells)
}

/// A table for people: each column as wide as its widest cell (the
/// header's included), two spaces apart, the last one unpadded.
pub(crate) fn print_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> Result<()> {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; N]| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 < N {
                l.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                l.push_str(cell);
            }
        }
        l
    };
    outln!("{}", line(header))?;
    for row in rows {
        outln!("{}", line(row.each_ref().map(String::as_str)))?;
    }
    Ok(())
}

pub(crate) fn print_orphans(list: &[oduflow_store::OrphanRow], json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(());
    }
    outln!("orphans: {} (as the last `oduflow reconcile --all` found them)", list.len())?;
    for o in list {
        let state = o.resolution.as_deref().map_or_else(|| "open".to_owned(), |r| format!("resolved: {r}"));
        outln!(
            "  {:<6} {} label {} client {} — {} [{state}]",
            o.kind.as_str(),
            o.resource_id,
            o.label,
            o.client_ref.as_deref().unwrap_or("-"),
            o.note
        )?;
    }
    Ok(())
}

pub(crate) fn print_orphan_deleted(d: &operator::OrphanDeleted, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(d)?)?;
    } else {
        outln!("{} {}: {}", d.kind.as_str(), d.id, d.note)?;
    }
    Ok(())
}

pub(crate) fn print_dns_orphan_deleted(d: &oduflow_engine::dns_inventory::DnsOrphanDeleted, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(d)?)?;
    } else {
        outln!("dns {} ({} {} -> {}): {}", d.id, d.rtype, d.name, d.data, d.note)?;
    }
    Ok(())
}

/// A rotation's outcome; a refusal lists what could not be proven, and is
/// the command's error.
pub(crate) fn print_rotation(
    done: std::result::Result<Vec<String>, Vec<operator::Unproven>>,
    key: &KeyFingerprint,
    json: bool,
) -> Result<()> {
    match done {
        Ok(names) => {
            if json {
                outln!("{}", serde_json::json!({ "rebound": names }))?;
            } else {
                outln!("rebound {} record(s) to key {}", names.len(), key.short())?;
            }
            Ok(())
        }
        Err(unproven) => {
            if json {
                outln!("{}", serde_json::json!({ "refused": unproven }))?;
            }
            let list: Vec<String> = unproven
                .iter()
                .map(|u| format!("{} {} {}: {}", u.client, u.kind.as_str(), u.resource, u.why))
                .collect();
            anyhow::bail!("rotation refused; the new key could not prove ownership of:\n  {}", list.join("\n  "));
        }
    }
}

pub(crate) fn print_queue_status(
    s: &oduflow_store::QueueStatus,
    restore_pending: Option<&str>,
    json: bool,
) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(s)?)?;
        return Ok(());
    }
    outln!("paused:            {}", s.paused)?;
    outln!("queued:            {} ({} runnable now)", s.queued, s.runnable)?;
    outln!("done/stale/failed: {}/{}/{}", s.done, s.stale, s.failed)?;
    outln!("unsettled clients: {}", s.unsettled_clients)?;
    if let Some(why) = restore_pending {
        outln!("restore pending:   {why} (run `oduflow reconcile --all`)")?;
    }
    Ok(())
}

/// This process's peak resident memory (for `oduflow bench inventory`,
/// which runs a pass in a child process and reads this line).
pub(crate) fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The server fields of a spec and what the ready server shows.
fn print_server(i: &oduflow_store::InfraRow) -> Result<()> {
    let sv = &i.spec.server;
    outln!("hostname:   {}", sv.hostname)?;
    if !sv.ssh_keys.is_empty() {
        outln!("ssh keys:   {}", sv.ssh_keys.join(", "))?;
    }
    if !sv.tags.is_empty() {
        outln!("tags:       {}", sv.tags.join(", "))?;
    }
    if let Some(f) = &sv.firewall_group {
        outln!("firewall:   {f}")?;
    }
    if sv.ipv6 || !sv.vpcs.is_empty() {
        outln!(
            "network:    ipv6 {}{}",
            if sv.ipv6 { "on" } else { "off" },
            if sv.vpcs.is_empty() { String::new() } else { format!(", vpcs {}", sv.vpcs.join(", ")) }
        )?;
    }
    if let Some(b) = sv.backups {
        outln!("backups:    {b} (UTC)")?;
    }
    if let Some(u) = &sv.user_data {
        outln!("user data:  {} bytes", u.len())?;
    }
    let o = &i.outputs;
    if !o.main_ip.is_empty() {
        outln!("ipv4:       {}", o.main_ip)?;
    }
    if !o.v6_main_ip.is_empty() {
        outln!("ipv6:       {}", o.v6_main_ip)?;
    }
    if !o.mount_id.is_empty() {
        outln!("mount:      /dev/disk/by-id/virtio-{}", o.mount_id)?;
    }
    Ok(())
}

/// `oduflow check`'s report: `ok    NAME  DETAIL` / `FAIL  NAME  DETAIL`,
/// or `{"ok": BOOL, "checks": [{"name", "ok", "detail"}]}`.
pub(crate) fn print_checks(checks: &[crate::cmd::check::Check], json: bool) -> Result<()> {
    if json {
        #[derive(serde::Serialize)]
        struct Report<'a> {
            ok: bool,
            checks: &'a [crate::cmd::check::Check],
        }
        let report = Report { ok: checks.iter().all(|c| c.ok), checks };
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in checks {
        outln!("{:<6}{:<width$}  {}", if c.ok { "ok" } else { "FAIL" }, c.name, c.detail)?;
    }
    Ok(())
}
