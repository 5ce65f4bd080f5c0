//! `oduflow import`: servers made outside oduflow brought under it without
//! a request that changes anything. One client per server and its one
//! attached volume, its spec read from what Vultr lists (so the run's own
//! check finds nothing to change), recorded `ready` and observed only
//! until an operator promotes it (`client promote`).

use super::*;
use oduflow_model::decide::{block_mismatch, instance_mismatch};
use oduflow_model::identity::{DnsZone, IdentityAdapter, Settle, ZoneRecord};
use oduflow_model::provider::{Block, Instance};

/// With a `[dns] domain`: the DNS adapter, and its zone, whose A and AAAA
/// records at an imported client's name that point at its server become
/// the client's (as `adopt --kind dns` makes them).
#[derive(Clone, Copy)]
pub struct ImportDns<'a> {
    pub adapter: &'a dyn IdentityAdapter,
    pub zone: &'a dyn DnsZone,
}

/// Which servers: every filter given must match.
#[derive(Clone, Debug, Default)]
pub struct ImportFilter {
    /// A label pattern (`*` for any run of characters).
    pub label: Option<String>,
    pub tag: Option<String>,
    pub region: Option<String>,
}

/// The filters, checked before anything is read, the same for the command
/// line and the API: a region id, and a label pattern or tag of printable
/// characters.
pub fn check_import_filter(f: &ImportFilter) -> std::result::Result<(), String> {
    if let Some(r) = &f.region {
        oduflow_model::check_region(r).map_err(|e| e.to_string())?;
    }
    for (what, v) in [("label pattern", &f.label), ("tag", &f.tag)] {
        if let Some(v) = v
            && (v.is_empty() || v.len() > 255 || v.chars().any(char::is_control))
        {
            return Err(format!("{what} {v:?}: 1 to 255 printable characters expected"));
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportOutcome {
    Imported,
    /// A dry run: it would be imported.
    WouldImport,
    /// It cannot be one client as oduflow manages them; `detail` says why.
    DoesNotFit,
    /// A receipt records it already.
    Recorded,
}

#[derive(Clone, Debug, Serialize)]
pub struct ImportItem {
    pub vm: String,
    pub label: String,
    /// The client it becomes (or would).
    pub name: Option<String>,
    pub volume: Option<String>,
    /// Its DNS records taken with it (ids).
    pub dns_records: Vec<String>,
    pub outcome: ImportOutcome,
    pub detail: String,
}

/// Lists the account once and imports (or, with `dry_run`, reports) each
/// server the filter selects, in label order. Refused while a restore is
/// pending.
pub async fn import<P: Provider>(
    store: &Store,
    provider: &P,
    filter: &ImportFilter,
    dns: Option<ImportDns<'_>>,
    actor: Actor<'_>,
    dry_run: bool,
) -> Result<Vec<ImportItem>> {
    check_import_filter(filter).map_err(OperatorError::Invalid)?;
    refuse_if_restored(store).await?;
    let mut instances = provider.instance_list().await?;
    let blocks = provider.block_list().await?;
    let zone: Vec<ZoneRecord> = match dns {
        Some(d) => d.zone.records().await?,
        None => vec![],
    };
    let receipts = store.receipts_all().await?;
    let recorded: HashSet<&str> = receipts.iter().filter_map(|r| r.id()).collect();
    let mut taken: HashSet<String> = store.client_list().await?.into_iter().map(|c| c.name).collect();
    taken.extend(receipts.iter().map(|r| format!("label:{}", r.label)));
    let mut labels: HashMap<&str, usize> = HashMap::new();
    for l in instances.iter().map(|i| i.label.as_str()).chain(blocks.iter().map(|b| b.label.as_str())) {
        *labels.entry(l).or_default() += 1;
    }
    let shared: HashSet<String> = labels.into_iter().filter(|(_, n)| *n > 1).map(|(l, _)| l.to_owned()).collect();
    instances.sort_by(|a, b| a.label.cmp(&b.label));
    let mut out = vec![];
    for i in instances.iter().filter(|i| selected(filter, i)) {
        let attached: Vec<&Block> = blocks.iter().filter(|b| b.attached_to_instance.as_ref() == Some(&i.id)).collect();
        let mut item = ImportItem {
            vm: i.id.0.clone(),
            label: i.label.clone(),
            name: None,
            volume: attached.first().map(|b| b.id.0.clone()),
            dns_records: vec![],
            outcome: ImportOutcome::DoesNotFit,
            detail: String::new(),
        };
        if recorded.contains(i.id.as_str()) {
            (item.outcome, item.detail) = (ImportOutcome::Recorded, "a receipt records it already".into());
            out.push(item);
            continue;
        }
        match fit(i, &attached, &shared, &taken) {
            Err(why) => item.detail = why,
            Ok((name, spec, b)) => {
                item.name = Some(name.to_string());
                item.dns_records = pointing_at(&zone, name.as_str(), i);
                taken.insert(name.to_string());
                (item.outcome, item.detail) = if dry_run {
                    (ImportOutcome::WouldImport, format!("would be {name}, observed only"))
                } else {
                    record(store, provider, i, b, &name, &spec, actor).await?
                };
                if let (ImportOutcome::Imported, Some(d)) = (item.outcome, dns) {
                    take_records(store, d.adapter, &name, &item.dns_records, actor).await?;
                }
            }
        }
        out.push(item);
    }
    Ok(out)
}

fn selected(f: &ImportFilter, i: &Instance) -> bool {
    !i.label.starts_with(LABEL_PREFIX)
        && f.label.as_deref().is_none_or(|p| oduflow_store::glob(p, &i.label))
        && f.tag.as_ref().is_none_or(|t| i.tags.contains(t))
        && f.region.as_ref().is_none_or(|r| i.region == *r)
}

/// The client one server becomes, or why it cannot be one.
fn fit<'b>(
    i: &Instance,
    attached: &[&'b Block],
    shared: &HashSet<String>,
    taken: &HashSet<String>,
) -> std::result::Result<(ClientName, ClientSpec, &'b Block), String> {
    let b = match attached {
        [b] => *b,
        [] => return Err("no volume attached: a client is a VM with one volume".into()),
        many => return Err(format!("{} volumes attached: a client is a VM with one volume", many.len())),
    };
    for label in [&i.label, &b.label] {
        if label.is_empty() || shared.contains(label.as_str()) || taken.contains(&format!("label:{label}")) {
            return Err(format!("label {label:?} is empty or not unique: oduflow tells resources by their labels"));
        }
    }
    let name = client_name(&i.label).ok_or_else(|| format!("label {:?} gives no client name", i.label))?;
    if taken.contains(name.as_str()) {
        return Err(format!("a client named {name} exists already"));
    }
    let vtype = if b.block_type.is_empty() { "high_perf" } else { b.block_type.as_str() };
    let mut spec =
        ClientSpec::parse(&i.region, &i.plan, i.os_id.max(1), b.size_gb, vtype).map_err(|e| e.to_string())?;
    spec.image = match (i.app_id, i.image_id.as_str()) {
        (0, "") => ImageSource::Os(i.os_id),
        (0, image) => ImageSource::Image(image.to_owned()),
        (app, _) => ImageSource::App(app),
    };
    spec.server.hostname = i.hostname.clone();
    spec.server.tags = i.tags.clone();
    spec.server.firewall_group = (!i.firewall_group_id.is_empty()).then(|| i.firewall_group_id.clone());
    spec.server.ipv6 = !i.v6_main_ip.is_empty();
    spec.server.check().map_err(|e| e.to_string())?;
    // What a run would check: the same spec read back must match.
    if let Some(why) = instance_mismatch(&spec, &i.label, i).or_else(|| block_mismatch(&spec, &b.label, b)) {
        return Err(format!("does not match the spec read from it: {why}"));
    }
    Ok((name, spec, b))
}

/// The A and AAAA records at `name` that point at the server's addresses.
fn pointing_at(zone: &[ZoneRecord], name: &str, i: &Instance) -> Vec<String> {
    zone.iter()
        .filter(|r| r.name == name && matches!(r.rtype.as_str(), "A" | "AAAA"))
        .filter(|r| !r.data.is_empty() && (r.data == i.main_ip || r.data == i.v6_main_ip))
        .map(|r| r.id.clone())
        .collect()
}

/// The records become the client's through its adapter's own adoption (it
/// reads each by id: nothing is changed), recorded as its ownership.
async fn take_records(
    store: &Store,
    adapter: &dyn IdentityAdapter,
    name: &ClientName,
    ids: &[String],
    actor: Actor<'_>,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let c = client(store, name.as_str()).await?;
    let target = super::settle::target(&c);
    let mut owned = serde_json::Value::Null;
    let ledger = oduflow_store::ReceiptLedger::acting_for(store.clone(), actor.by);
    for id in ids {
        let how = Settle::Adopt { id, by: actor.by, now_ms: actor.now_ms };
        let settled = adapter.settle(&target, &owned, how).await.map_err(|e| match e {
            oduflow_model::identity::SettleError::Refused(why) => OperatorError::Refused(why),
            oduflow_model::identity::SettleError::Provider(e) => OperatorError::Provider(e),
        })?;
        ledger.event_append(Some(&c.id), settled.event, &settled.detail, actor.now_ms).await?;
        owned = settled.owned;
    }
    ledger.adapter_owned_put(&c.id, adapter.name(), &owned, 0, actor.now_ms).await?;
    Ok(())
}

/// A client name from a label: lowercase, any other character a hyphen.
fn client_name(label: &str) -> Option<ClientName> {
    let mut s: String =
        label.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    ClientName::parse(s.trim_matches('-')).ok()
}

async fn record<P: Provider>(
    store: &Store,
    provider: &P,
    i: &Instance,
    b: &Block,
    name: &ClientName,
    spec: &ClientSpec,
    actor: Actor<'_>,
) -> Result<(ImportOutcome, String)> {
    let key = provider.key_fingerprint();
    let imp = oduflow_store::Import {
        name,
        spec,
        vm: (i.id.as_str(), &i.label),
        volume: (b.id.as_str(), &b.label),
        key: &key,
        outputs: &ServerOutputs {
            main_ip: i.main_ip.clone(),
            v6_main_ip: i.v6_main_ip.clone(),
            mount_id: b.mount_id.clone(),
        },
        by: actor.by,
    };
    match store.client_import(&imp, actor.now_ms).await {
        Ok(_) => Ok((ImportOutcome::Imported, format!("{name}, observed only"))),
        // Taken since the listing (a client, a DNS name, a label).
        Err(
            e @ (oduflow_store::StoreError::ClientExists(_)
            | oduflow_store::StoreError::DnsNameTaken { .. }
            | oduflow_store::StoreError::ReceiptExists(_)),
        ) => Ok((ImportOutcome::DoesNotFit, e.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// `oduflow client promote NAME`: an imported client is managed from now
/// on; a run is queued, which reads it by id and converges as any client.
pub async fn client_promote(store: &Store, name: &str, actor: Actor<'_>) -> Result<ClientRow> {
    refuse_if_restored(store).await?;
    client(store, name).await?;
    if !store.client_promote(name, actor.by, actor.now_ms).await? {
        return refused(format!("{name} is not observed only: nothing to promote"));
    }
    Ok(store.client_reconcile(name, &[], actor.by, actor.now_ms, actor.attempts_max).await?)
}

/// An imported client is observed only until promoted: every command that
/// could change it at the provider is refused.
pub(super) fn refuse_if_observed(c: &ClientRow) -> Result<()> {
    if c.infra.observe_only {
        return refused(format!(
            "{} is observed only (imported): nothing is changed for it until `oduflow client promote {}`",
            c.name, c.name
        ));
    }
    Ok(())
}
