//! DNS records of a Vultr-hosted domain. Kept apart from compute and storage
//! (the DNS identity adapter is their only user). A record create is sent
//! once and classified like a VM create, so a lost answer never becomes a
//! duplicate record; a PATCH sets name, data and TTL, so it may be repeated.

use crate::{VultrClient, VultrError};
use oduflow_model::provider::{DeleteOutcome, Outcome};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A DNS record id chosen by Vultr.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DnsRecordId(pub String);

impl DnsRecordId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DnsRecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A record to create (`create_dns_domain_record_request`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsRecordRequest {
    /// Host part, e.g. `www`, or `""` for the apex.
    pub name: String,
    /// A, AAAA, CNAME, NS, MX, SRV, TXT, CAA or SSHFP.
    #[serde(rename = "type")]
    pub record_type: String,
    pub data: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
    /// Only for MX and SRV.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}

/// What a record PATCH sets (`update_dns_domain_record_request`; the type
/// cannot be changed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DnsRecordPatch {
    pub name: String,
    pub data: String,
    pub ttl: i64,
}

/// A record as Vultr shows it (`dns-record`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsRecord {
    pub id: DnsRecordId,
    #[serde(rename = "type", default)]
    pub record_type: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub ttl: i64,
}

#[derive(Deserialize)]
struct Envelope {
    record: DnsRecord,
}

/// A DNS domain (zone) of the account, as `GET /domains/{domain}` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsDomain {
    pub domain: String,
    #[serde(default)]
    pub date_created: String,
    #[serde(default)]
    pub dns_sec: String,
}

impl VultrClient {
    /// `POST /domains/{domain}/records`, sent once (201 with the record).
    pub async fn dns_record_create(&self, domain: &str, req: &DnsRecordRequest) -> Outcome<DnsRecord> {
        let body = serde_json::to_value(req).expect("a record request always serializes");
        let reply = self.post_once(&["domains", domain, "records"], &body).await;
        Self::classify(reply, |a| {
            serde_json::from_slice::<Envelope>(&a.body).ok().map(|e| e.record).filter(|r| !r.id.0.is_empty())
        })
    }

    /// `GET /domains/{domain}`: the zone, `Ok(None)` on 404 (not in this
    /// account). Read by `oduflow check`.
    pub async fn dns_domain_get(&self, domain: &str) -> Result<Option<DnsDomain>, VultrError> {
        #[derive(Deserialize)]
        struct DomainEnvelope {
            domain: DnsDomain,
        }
        let env: Option<DomainEnvelope> = self.get_one(&["domains", domain]).await?;
        Ok(env.map(|e| e.domain))
    }

    /// `Ok(None)` on 404.
    pub async fn dns_record_get(&self, domain: &str, id: &DnsRecordId) -> Result<Option<DnsRecord>, VultrError> {
        let env: Option<Envelope> = self.get_one(&["domains", domain, "records", id.as_str()]).await?;
        Ok(env.map(|e| e.record))
    }

    /// Every page of the domain's records.
    pub async fn dns_record_list(&self, domain: &str) -> Result<Vec<DnsRecord>, VultrError> {
        self.list_all(&["domains", domain, "records"], "records", &[]).await
    }

    /// `PATCH /domains/{domain}/records/{id}` (204): the record's name, data
    /// and TTL set in place, its id kept. Sent once per call; repeatable. A
    /// 404 is `Rejected { status: 404 }` (the change was not applied).
    pub async fn dns_record_patch(&self, domain: &str, id: &DnsRecordId, p: &DnsRecordPatch) -> Outcome<()> {
        let body = serde_json::to_value(p).expect("a record patch always serializes");
        let reply = self.patch_once(&["domains", domain, "records", id.as_str()], &body).await;
        match reply {
            // Not applied: no record with that id right now. Unlike a
            // create's (a zone that is not the account's), a PATCH's 404 is
            // about the record itself; the caller counts it as a sighting of
            // its absence, never as proof on its own.
            crate::http::Reply::Answer(a) if a.status == 404 => Outcome::Rejected { status: 404, message: a.message() },
            reply => Self::classify(reply, |_| Some(())),
        }
    }

    pub async fn dns_record_delete(&self, domain: &str, id: &DnsRecordId) -> Result<DeleteOutcome, VultrError> {
        self.delete_like(Method::DELETE, &["domains", domain, "records", id.as_str()], None).await
    }
}
