//! Everything the commands print, for people and (`--json`) for programs.

use anyhow::Result;
use oduflow_engine::operator;
use oduflow_model::*;
use oduflow_store::{ClientRow, Store};

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
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let i = &r.infra;
    println!("name:       {}", r.name);
    match i.blocked_reason {
        Some(b) => println!("status:     blocked ({b})"),
        None => println!("status:     {}", i.status),
    }
    if let Some(d) = &i.blocked_detail {
        println!("evidence:   {d}");
    }
    if i.status == ClientStatus::Blocked {
        // The same commands the API and the dashboard suggest.
        let receipts = store.receipts_for_client(&r.id).await?;
        for res in oduflow_server::resolve::resolutions(r, &receipts) {
            println!("resolve:    {}  ({})", res.command, res.when);
        }
    }
    println!("target:     {} (generation {})", i.target, i.generation);
    println!(
        "spec:       region {} plan {} {} volume {} GB {}",
        i.spec.region,
        i.spec.plan,
        i.spec.image,
        i.spec.volume_gb,
        i.spec.volume_type.as_str()
    );
    print_server(i);
    println!("key:        {}", i.key_fingerprint.as_ref().map(|k| k.short()).unwrap_or("(not bound yet)"));
    println!("vm:         {}", i.vm_id.as_ref().map(|v| v.as_str()).unwrap_or("-"));
    println!("volume:     {}", i.volume_id.as_ref().map(|v| v.as_str()).unwrap_or("-"));
    if evidence {
        println!("receipts:");
        for rc in &receipts {
            let outcome = match (&rc.resource_id, rc.rejection_status) {
                (Some(id), _) => format!("id {id} ({})", rc.resource_id_source.map(|s| s.as_str()).unwrap_or("?")),
                (None, Some(s)) => format!("rejected {s}: {}", rc.rejection_message.as_deref().unwrap_or("")),
                (None, None) => "outcome unknown".into(),
            };
            println!(
                "  {:<8} dispatch {} label {} {} observations {}{}",
                rc.resource_kind.as_str(),
                rc.dispatch_generation,
                rc.label,
                outcome,
                rc.observation_count,
                rc.last_observation.as_deref().map(|o| format!(" (last: {o})")).unwrap_or_default()
            );
        }
        if !changes.is_empty() {
            println!("changes:");
            for c in &changes {
                println!("  {}", c.summary());
            }
        }
        if !adapters.is_empty() {
            println!("identities:");
            for a in &adapters {
                println!(
                    "  {:<10} {:<9} {}{}",
                    a.adapter,
                    a.state,
                    a.detail,
                    if a.failures > 0 { format!(" (failures: {})", a.failures) } else { String::new() }
                );
            }
        }
        println!("events (latest last):");
        for e in events.iter().rev().take(15).rev() {
            println!("  {} {:<28} {}", e.at_ms, e.kind, e.detail);
        }
    }
    Ok(())
}

pub(crate) fn print_inventory(inv: &operator::Inventory, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(inv)?);
        return Ok(());
    }
    println!("listed: {} instances, {} blocks", inv.instances_listed, inv.blocks_listed);
    for (title, items) in [("orphans", &inv.orphans), ("missing", &inv.missing), ("unrecorded", &inv.unrecorded)] {
        println!("{title}: {}", items.len());
        for i in items {
            println!(
                "  {:<6} {} label {} client {} — {}",
                i.kind.as_str(),
                i.id,
                i.label,
                i.client.as_deref().unwrap_or("-"),
                i.note
            );
            if let Some(r) = &i.resolve {
                println!("         resolve: {r}");
            }
        }
    }
    Ok(())
}

pub(crate) fn print_clients(rows: &[ClientRow], json: bool) -> Result<()> {
    if json {
        let v: Vec<_> = rows.iter().map(client_json).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{:<24} {:<13} {:<22} {:<38} VOLUME", "NAME", "STATUS", "BLOCKED", "VM");
    for r in rows {
        let i = &r.infra;
        println!(
            "{:<24} {:<13} {:<22} {:<38} {}",
            r.name,
            i.status,
            i.blocked_reason.map(|b| b.as_str()).unwrap_or("-"),
            i.vm_id.as_ref().map(|v| v.as_str()).unwrap_or("-"),
            i.volume_id.as_ref().map(|v| v.as_str()).unwrap_or("-"),
        );
    }
    Ok(())
}

pub(crate) fn print_orphans(list: &[oduflow_store::OrphanRow], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    println!("orphans: {} (as the last `oduflow reconcile --all` found them)", list.len());
    for o in list {
        let state = o.resolution.as_deref().map_or_else(|| "open".to_owned(), |r| format!("resolved: {r}"));
        println!(
            "  {:<6} {} label {} client {} — {} [{state}]",
            o.kind.as_str(),
            o.resource_id,
            o.label,
            o.client_ref.as_deref().unwrap_or("-"),
            o.note
        );
    }
    Ok(())
}

pub(crate) fn print_orphan_deleted(d: &operator::OrphanDeleted, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(d)?);
    } else {
        println!("{} {}: {}", d.kind.as_str(), d.id, d.note);
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
                println!("{}", serde_json::json!({ "rebound": names }));
            } else {
                println!("rebound {} record(s) to key {}", names.len(), key.short());
            }
            Ok(())
        }
        Err(unproven) => {
            if json {
                println!("{}", serde_json::json!({ "refused": unproven }));
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
        println!("{}", serde_json::to_string_pretty(s)?);
        return Ok(());
    }
    println!("paused:            {}", s.paused);
    println!("queued:            {} ({} runnable now)", s.queued, s.runnable);
    println!("done/stale/failed: {}/{}/{}", s.done, s.stale, s.failed);
    println!("unsettled clients: {}", s.unsettled_clients);
    if let Some(why) = restore_pending {
        println!("restore pending:   {why} (run `oduflow reconcile --all`)");
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
fn print_server(i: &oduflow_store::InfraRow) {
    let sv = &i.spec.server;
    println!("hostname:   {}", sv.hostname);
    if !sv.ssh_keys.is_empty() {
        println!("ssh keys:   {}", sv.ssh_keys.join(", "));
    }
    if !sv.tags.is_empty() {
        println!("tags:       {}", sv.tags.join(", "));
    }
    if let Some(f) = &sv.firewall_group {
        println!("firewall:   {f}");
    }
    if sv.ipv6 || !sv.vpcs.is_empty() {
        println!(
            "network:    ipv6 {}{}",
            if sv.ipv6 { "on" } else { "off" },
            if sv.vpcs.is_empty() { String::new() } else { format!(", vpcs {}", sv.vpcs.join(", ")) }
        );
    }
    if let Some(b) = sv.backups {
        println!("backups:    {b} (UTC)");
    }
    if let Some(u) = &sv.user_data {
        println!("user data:  {} bytes", u.len());
    }
    let o = &i.outputs;
    if !o.main_ip.is_empty() {
        println!("ipv4:       {}", o.main_ip);
    }
    if !o.v6_main_ip.is_empty() {
        println!("ipv6:       {}", o.v6_main_ip);
    }
    if !o.mount_id.is_empty() {
        println!("mount:      /dev/disk/by-id/virtio-{}", o.mount_id);
    }
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
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in checks {
        println!("{:<6}{:<width$}  {}", if c.ok { "ok" } else { "FAIL" }, c.name, c.detail);
    }
    Ok(())
}
