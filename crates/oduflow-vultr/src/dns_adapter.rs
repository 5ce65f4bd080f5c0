//! The DNS identity: an A record `<client>.<domain>` pointing at the VM's main
//! IP, through Vultr's DNS API. Ensure is check-first (an existing record with
//! the right data is kept, a stale one is replaced); remove deletes every A
//! record of that name; absence is established by a later listing.

use crate::VultrClient;
use crate::dns::{DnsRecord, DnsRecordRequest};
use oduflow_model::identity::*;
use oduflow_model::provider::Outcome;

pub struct DnsAdapter {
    client: VultrClient,
    domain: String,
    ttl: i64,
}

impl DnsAdapter {
    pub fn new(client: VultrClient, domain: String, ttl: i64) -> Self {
        Self { client, domain, ttl }
    }

    async fn records(&self, name: &str) -> Result<Vec<DnsRecord>, String> {
        Ok(self
            .client
            .dns_record_list(&self.domain)
            .await
            .map_err(|e| format!("listing {} records: {e}", self.domain))?
            .into_iter()
            .filter(|r| r.record_type == "A" && r.name == name)
            .collect())
    }
}

impl IdentityAdapter for DnsAdapter {
    fn name(&self) -> &str {
        "dns"
    }

    fn ensure<'a>(&'a self, t: &'a IdentityTarget) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let ip = t.main_ip.as_deref().ok_or("the VM's main IP is not known yet")?;
            let existing = self.records(&t.client).await?;
            if existing.iter().any(|r| r.data == ip) {
                return Ok(format!("{}.{} A {ip} (kept)", t.client, self.domain));
            }
            for r in &existing {
                let _ = self.client.dns_record_delete(&self.domain, &r.id).await;
            }
            let req = DnsRecordRequest {
                name: t.client.clone(),
                record_type: "A".into(),
                data: ip.to_owned(),
                ttl: Some(self.ttl),
                priority: None,
            };
            match self.client.dns_record_create(&self.domain, &req).await {
                Outcome::Accepted(r) => Ok(format!("{}.{} A {ip} (record {})", t.client, self.domain, r.id.as_str())),
                // Whatever happened, the next check decides (a record is
                // cheap and found by name, so a repeat does no harm).
                Outcome::Unknown { reason } => Ok(format!("create outcome unknown ({reason}); check decides")),
                Outcome::Rejected { status, message } => Err(format!("DNS record rejected with {status}: {message}")),
                // Nothing reached Vultr: this ensure failed and created nothing.
                Outcome::NotSent { reason } => Err(format!("DNS record create not sent: {reason}")),
            }
        })
    }

    fn check<'a>(&'a self, t: &'a IdentityTarget) -> BoxFuture<'a, Result<Presence, String>> {
        Box::pin(async move {
            let found = self.records(&t.client).await?;
            Ok(match found.first() {
                None => Presence::Absent,
                Some(r) => {
                    Presence::Present(format!("{}.{} A {} ({} record(s))", t.client, self.domain, r.data, found.len()))
                }
            })
        })
    }

    fn remove<'a>(&'a self, t: &'a IdentityTarget) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let found = self.records(&t.client).await?;
            for r in &found {
                self.client
                    .dns_record_delete(&self.domain, &r.id)
                    .await
                    .map_err(|e| format!("deleting record {}: {e}", r.id.as_str()))?;
            }
            Ok(format!("{} record(s) deleted", found.len()))
        })
    }
}
