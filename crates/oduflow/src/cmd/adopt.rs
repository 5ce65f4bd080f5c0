//! `oduflow adopt` and `oduflow abandon`: an operator settles a dispatch
//! whose outcome the machine could not decide.

use crate::config::{BadInput, Config};
use crate::output::print_client;
use crate::setup::{compare_lineage, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor};
use oduflow_model::*;
use oduflow_store::StoreError;
use oduflow_vultr::dns_adapter::{DnsAdapter, Owned};

pub async fn adopt(cfg: &Config, name: &str, kind: &str, id: &str, by: &str) -> Result<()> {
    // Vultr's instance, block and DNS record ids are UUIDs: the API's rule,
    // checked before the database or the provider is asked.
    check_resource_id(id).map_err(|e| BadInput(format!("--id: {e}; nothing was recorded")))?;
    if kind == "dns" {
        return adopt_dns(cfg, name, id, by).await;
    }
    ClientName::parse(name)?;
    let kind = ResourceKind::parse(kind).expect("clap checked");
    let store = open(cfg).await?;
    let provider = provider(cfg, &store, "adopt")?;
    compare_lineage(&store).await?;
    let actor = Actor { by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
    let row = operator::adopt(&store, provider.as_ref(), name, kind, id, actor).await?;
    print_client(&store, &row, false, false).await
}

pub async fn abandon(cfg: &Config, name: &str, kind: &str, by: &str, reason: &str) -> Result<()> {
    let (by, reason) = attestation(by, reason)?;
    let (by, reason) = (by.as_str(), reason.as_str());
    if kind == "dns" {
        return abandon_dns(cfg, name, by, reason).await;
    }
    ClientName::parse(name)?;
    let kind = ResourceKind::parse(kind).expect("clap checked");
    let store = open(cfg).await?;
    compare_lineage(&store).await?;
    let actor = Actor { by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
    let row = operator::abandon(&store, name, kind, reason, actor).await?;
    print_client(&store, &row, false, false).await
}

/// `--by` and `--reason`, trimmed, by the API's rule (not empty, bounded,
/// no control characters); anything else is bad input, before anything is
/// opened.
pub(crate) fn attestation(by: &str, reason: &str) -> Result<(String, String)> {
    use oduflow_model::audit::{BY_LEN_MAX, REASON_LEN_MAX, attestation};
    let bad = |e: String| BadInput(format!("{e}: --by WHO and --reason WHY are the attestation; nothing was recorded"));
    Ok((
        attestation("--by", by, BY_LEN_MAX).map_err(bad)?,
        attestation("--reason", reason, REASON_LEN_MAX).map_err(bad)?,
    ))
}

/// The client's DNS ownership record as the store holds it, and the
/// adapter to read Vultr with.
struct DnsOwnership {
    store: oduflow_store::Store,
    row: oduflow_store::ClientRow,
    adapter: DnsAdapter,
    owned: Owned,
    version: i64,
}

impl DnsOwnership {
    /// `command` (`adopt`, `abandon`) names the command in a refusal.
    async fn load(cfg: &Config, name: &str, command: &str) -> Result<Self> {
        ClientName::parse(name)?;
        let Some(dns) = &cfg.dns else {
            return Err(BadInput("no [dns] domain is configured: this client has no DNS identity".into()).into());
        };
        let store = open(cfg).await?;
        let vultr = provider(cfg, &store, command)?;
        compare_lineage(&store).await?;
        operator::refuse_if_restored(&store).await?;
        let row = store.client_get(name).await?.ok_or_else(|| StoreError::ClientNotFound(name.to_owned()))?;
        // Only a client the machine has stopped for: a run in flight may be
        // creating a record this very moment.
        let dns_block = matches!(
            row.infra.blocked_reason,
            Some(BlockedReason::DnsRecordForeign | BlockedReason::UncertainDnsRecord)
        );
        if row.infra.status != ClientStatus::Blocked || !dns_block {
            return Err(BadInput(format!(
                "{name} is {} ({}), not blocked dns_record_foreign or uncertain_dns_record: its DNS records are the \
                 machine's to settle; nothing was recorded",
                row.infra.status.as_str(),
                row.infra.blocked_reason.map_or("no block", |r| r.as_str())
            ))
            .into());
        }
        let states = store.adapter_states(&row.id).await?;
        let st = states.iter().find(|s| s.adapter == "dns");
        let owned = Owned::from_value(st.map_or(&serde_json::Value::Null, |s| &s.owned)).map_err(BadInput)?;
        let version = st.map_or(0, |s| s.owned_version);
        let adapter = DnsAdapter::new(vultr.as_ref().clone(), dns.domain.clone(), dns.ttl);
        Ok(Self { store, row, adapter, owned, version })
    }

    /// Records the new ownership (refused if a run recorded meanwhile), the
    /// operator's event, and queues the client's work again.
    async fn save(
        self,
        cfg: &Config,
        event: oduflow_model::EventKind,
        detail: serde_json::Value,
        by: &str,
    ) -> Result<()> {
        let ledger = oduflow_store::ReceiptLedger::new(self.store.clone());
        let now = now_ms(&self.store).await?;
        let put = ledger.adapter_owned_put(&self.row.id, "dns", &self.owned.to_value(), self.version, now).await?;
        if put.is_none() {
            anyhow::bail!(
                "{}'s DNS ownership changed while this command ran (a worker recorded it): run it again",
                self.row.name
            );
        }
        ledger.event_append(Some(&self.row.id), event, &detail, now).await?;
        let row = self.store.client_reconcile(&self.row.name, &[], by, now, cfg.attempts_max).await?;
        print_client(&self.store, &row, false, false).await
    }
}

/// `oduflow adopt NAME --kind dns --id RECORD`: an existing record at the
/// client's DNS name becomes the client's (oduflow then points it at the VM
/// and deletes it with the client).
pub async fn adopt_dns(cfg: &Config, name: &str, id: &str, by: &str) -> Result<()> {
    let mut d = DnsOwnership::load(cfg, name, "adopt").await?;
    let domain = d.adapter.domain().to_owned();
    let rec = d
        .adapter
        .record(id)
        .await
        .map_err(|e| anyhow::anyhow!(e))?
        .ok_or_else(|| BadInput(format!("record {id} does not exist in {domain}; nothing was recorded")))?;
    let dns_name = d.row.infra.spec.dns_name.clone().unwrap_or_else(|| name.to_owned());
    if rec.name != dns_name {
        return Err(BadInput(format!(
            "record {id} is {} {}.{domain}, not at the client's DNS name {dns_name}.{domain}; nothing was recorded",
            rec.record_type, rec.name
        ))
        .into());
    }
    if !matches!(rec.record_type.as_str(), "A" | "AAAA") {
        return Err(BadInput(format!(
            "record {id} is a {} record: only A and AAAA records can be adopted (remove it in the Vultr console, or \
             give the client another --dns-name); nothing was recorded",
            rec.record_type
        ))
        .into());
    }
    let owners = d.store.adapter_owners_of("dns", id).await?;
    if let Some(other) = owners.iter().find(|c| **c != d.row.id) {
        return Err(BadInput(format!(
            "record {id} is owned by another client ({other}): a record belongs to one client; give {name} another \
             --dns-name; nothing was recorded"
        ))
        .into());
    }
    d.owned
        .adopt(&domain, &rec, by, now_ms(&d.store).await?)
        .map_err(|e| BadInput(format!("{e}; nothing was recorded")))?;
    let detail = serde_json::json!({ "by": by, "record": id, "type": rec.record_type, "data": rec.data });
    d.save(cfg, oduflow_model::EventKind::DnsRecordAdopted, detail, by).await
}

/// `oduflow abandon NAME --kind dns`: the operator attests that Vultr has
/// none of the records whose create had an unknown outcome; the next run
/// creates them.
pub async fn abandon_dns(cfg: &Config, name: &str, by: &str, reason: &str) -> Result<()> {
    let mut d = DnsOwnership::load(cfg, name, "abandon").await?;
    let lost = d.owned.abandon_lost();
    if lost.is_empty() {
        return Err(BadInput(format!(
            "no DNS record create of {name} has an unknown outcome: nothing to abandon; nothing was recorded"
        ))
        .into());
    }
    let records: Vec<String> = lost.iter().map(|r| format!("{} {} -> {}", r.rtype, r.name, r.data)).collect();
    let detail = serde_json::json!({ "by": by, "reason": reason, "records": records });
    d.save(cfg, oduflow_model::EventKind::DnsCreateAbandoned, detail, by).await
}
