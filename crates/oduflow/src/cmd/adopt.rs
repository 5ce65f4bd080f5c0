//! `oduflow adopt` and `oduflow abandon`: an operator settles a dispatch
//! whose outcome the machine could not decide.

use crate::config::{BadInput, Config};
use crate::output::print_client;
use crate::setup::{compare_lineage, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor};
use oduflow_model::identity::Settle;
use oduflow_model::*;
use oduflow_vultr::dns_adapter::DnsAdapter;

pub async fn adopt(cfg: &Config, name: &str, kind: &str, id: &str, by: &str) -> Result<()> {
    // Vultr's instance, block and DNS record ids are UUIDs: the API's rule,
    // checked before the database or the provider is asked.
    check_resource_id(id).map_err(|e| BadInput(format!("--id: {e}; nothing was recorded")))?;
    ClientName::parse(name)?;
    if kind == "dns" {
        return adopt_dns(cfg, name, id, by).await;
    }
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
    ClientName::parse(name)?;
    if kind == "dns" {
        return abandon_dns(cfg, name, by, reason).await;
    }
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

/// The DNS adapter an operator settles a client's DNS block through, and
/// the store; refused when no `[dns] domain` is configured.
async fn dns_settling(cfg: &Config, command: &str) -> Result<(oduflow_store::Store, DnsAdapter)> {
    if cfg.dns.is_none() {
        return Err(BadInput("no [dns] domain is configured: this client has no DNS identity".into()).into());
    }
    let store = open(cfg).await?;
    let vultr = provider(cfg, &store, command)?;
    compare_lineage(&store).await?;
    let adapter = crate::setup::dns_adapter(cfg, &vultr).expect("[dns] is configured");
    Ok((store, adapter))
}

/// `oduflow adopt NAME --kind dns --id RECORD`: an existing record at the
/// client's DNS name becomes the client's (oduflow then points it at the VM
/// and deletes it with the client).
pub async fn adopt_dns(cfg: &Config, name: &str, id: &str, by: &str) -> Result<()> {
    let (store, adapter) = dns_settling(cfg, "adopt").await?;
    let now_ms = now_ms(&store).await?;
    let actor = Actor { by, now_ms, attempts_max: cfg.attempts_max };
    let row = operator::identity_settle(&store, &adapter, name, Settle::Adopt { id, by, now_ms }, actor).await?;
    print_client(&store, &row, false, false).await
}

/// `oduflow abandon NAME --kind dns`: the operator attests that Vultr has
/// none of the records whose create had an unknown outcome; the next run
/// creates them.
pub async fn abandon_dns(cfg: &Config, name: &str, by: &str, reason: &str) -> Result<()> {
    let (store, adapter) = dns_settling(cfg, "abandon").await?;
    let actor = Actor { by, now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
    let row = operator::identity_settle(&store, &adapter, name, Settle::Abandon { by, reason }, actor).await?;
    print_client(&store, &row, false, false).await
}
