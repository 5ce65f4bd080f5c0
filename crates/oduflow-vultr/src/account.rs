//! Account, regions and plans: reads used for the credential check and for
//! validating a spec before anything is dispatched.

use crate::{VultrClient, VultrError};
use serde::{Deserialize, Serialize};

/// `GET /account`. Vultr gives no account id (docs/vultr.md §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Account {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub email: String,
    #[serde(default)]
    pub acls: Vec<String>,
    #[serde(default)]
    pub balance: f64,
    #[serde(default)]
    pub pending_charges: f64,
}

/// One entry of `GET /regions`. Block storage availability is in `options`
/// (`block_storage_high_perf`, `block_storage_storage_opt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub id: String,
    #[serde(default)]
    pub city: String,
    #[serde(default)]
    pub country: String,
    #[serde(default)]
    pub continent: String,
    #[serde(default)]
    pub options: Vec<String>,
}

/// One entry of `GET /plans`. Plan ids are opaque: never parse them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub id: String,
    #[serde(default)]
    pub vcpu_count: i64,
    /// MB.
    #[serde(default)]
    pub ram: i64,
    /// GB.
    #[serde(default)]
    pub disk: i64,
    #[serde(default)]
    pub monthly_cost: f64,
    #[serde(default, rename = "type")]
    pub plan_type: String,
    /// Regions where the plan can be deployed.
    #[serde(default)]
    pub locations: Vec<String>,
}

/// What one `GET /account` with the configured key says about the base URL
/// and the key, kept apart (`oduflow check`): a URL that is not Vultr's API
/// must not read as a refused key, nor the other way round.
#[derive(Debug, Clone, PartialEq)]
pub enum AccountProbe {
    /// A 2xx with Vultr's account object: Vultr, and the key is accepted.
    Accepted(Account),
    /// A 401 or 403 with Vultr's error JSON (`{"error": "...", "status": N}`):
    /// Vultr, and it refused the key (or the caller's address, for a key
    /// limited to some addresses).
    KeyRefused { status: u16, message: String },
    /// Vultr's error JSON with another status (a 5xx, a 429 past the read's
    /// retries): Vultr, but not able to say now.
    Unavailable { status: u16, message: String },
    /// Something answered, but not as Vultr does: a 404 (Vultr's `/account`
    /// exists), a body that is not Vultr's JSON, a redirect.
    NotVultr(String),
    /// No answer: nothing listening, DNS, TLS, timeout (after the read's
    /// bounded retries), or no slot in the rate budget.
    Unreachable(String),
}

/// Whether a body is Vultr's error shape: a JSON object with an `error`
/// string (docs/vultr.md §1).
fn is_vultr_error(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| v.get("error").is_some_and(|e| e.is_string()))
}

impl VultrClient {
    /// `GET /account`, classified ([`AccountProbe`]). Bounded like every
    /// read: `request_timeout_ms` per attempt, `read_attempts_max` attempts.
    pub async fn account_probe(&self) -> AccountProbe {
        #[derive(Deserialize)]
        struct Envelope {
            account: Account,
        }
        let a = match self.request_retrying(reqwest::Method::GET, &["account"], &[], None).await {
            Ok(a) => a,
            // A redirect: someone answered, and Vultr's API does not redirect.
            Err(VultrError::Status { status, message }) => {
                return AccountProbe::NotVultr(format!("answered {status}: {message}"));
            }
            Err(e) => return AccountProbe::Unreachable(e.to_string()),
        };
        let excerpt = || crate::http::error_message(&a.body);
        match a.status {
            _ if a.is_success() => match a.json::<Envelope>() {
                Ok(e) => AccountProbe::Accepted(e.account),
                Err(_) => {
                    AccountProbe::NotVultr(format!("answered {} without an account object: {}", a.status, excerpt()))
                }
            },
            401 | 403 if is_vultr_error(&a.body) => AccountProbe::KeyRefused { status: a.status, message: excerpt() },
            s if s != 404 && is_vultr_error(&a.body) => AccountProbe::Unavailable { status: s, message: excerpt() },
            s => AccountProbe::NotVultr(format!("answered {s}, not Vultr's JSON for /account: {}", excerpt())),
        }
    }

    pub async fn account_get(&self) -> Result<Account, VultrError> {
        #[derive(Deserialize)]
        struct Envelope {
            account: Account,
        }
        let a = self.request_retrying(reqwest::Method::GET, &["account"], &[], None).await?;
        if !a.is_success() {
            return Err(a.to_error());
        }
        Ok(a.json::<Envelope>()?.account)
    }

    pub async fn region_list(&self) -> Result<Vec<Region>, VultrError> {
        self.list_all(&["regions"], "regions", &[]).await
    }

    pub async fn plan_list(&self) -> Result<Vec<Plan>, VultrError> {
        self.list_all(&["plans"], "plans", &[]).await
    }
}
