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

impl VultrClient {
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
