//! The reads a preflight makes before a client's first receipt,
//! and the backup schedule, which Vultr sets with a call of its own.

use crate::{VultrClient, VultrError, wire};
use oduflow_model::provider::Catalog;
use oduflow_model::{BackupSchedule, VultrInstanceId};
use reqwest::Method;
use serde::Deserialize;

#[derive(Deserialize)]
struct Id<T> {
    id: T,
}

#[derive(Deserialize)]
struct App {
    id: i64,
    #[serde(default)]
    image_id: String,
}

impl VultrClient {
    /// Regions, the plans sellable in `region` now, operating systems,
    /// applications, snapshots, SSH keys and firewall groups: eight reads
    /// (more for accounts with over 500 of one kind), each retried within
    /// the usual bounds.
    pub async fn catalog_read(&self, region: &str) -> Result<Catalog, VultrError> {
        #[derive(Deserialize)]
        struct Availability {
            #[serde(default)]
            available_plans: Vec<String>,
        }
        let regions = self.region_list().await?;
        let mut c = Catalog { regions: regions.into_iter().map(|r| (r.id, r.options)).collect(), ..Catalog::default() };
        if c.regions.contains_key(region) {
            let a = self.request_retrying(Method::GET, &["regions", region, "availability"], &[], None).await?;
            if !a.is_success() {
                return Err(a.to_error());
            }
            c.available_plans = a.json::<Availability>()?.available_plans.into_iter().collect();
        }
        c.os_ids = self.list_all::<Id<i64>>(&["os"], "os", &[]).await?.into_iter().map(|o| o.id).collect();
        let apps: Vec<App> = self.list_all(&["applications"], "applications", &[]).await?;
        c.app_ids = apps.iter().map(|a| a.id).collect();
        c.app_images = apps.into_iter().map(|a| a.image_id).filter(|i| !i.is_empty()).collect();
        c.snapshots = ids(self.list_all(&["snapshots"], "snapshots", &[]).await?);
        c.ssh_keys = ids(self.list_all(&["ssh-keys"], "ssh_keys", &[]).await?);
        c.firewall_groups = ids(self.list_all(&["firewalls"], "firewall_groups", &[]).await?);
        Ok(c)
    }

    /// `POST /instances/{id}/backup-schedule`. A set, not a create: sending
    /// it twice leaves one schedule, so it is retried like a read.
    pub async fn backup_schedule_post(&self, id: &VultrInstanceId, s: &BackupSchedule) -> Result<(), VultrError> {
        let body = wire::backup_schedule_body(s);
        let a = self
            .request_retrying(Method::POST, &["instances", id.as_str(), "backup-schedule"], &[], Some(&body))
            .await?;
        if !a.is_success() {
            return Err(a.to_error());
        }
        Ok(())
    }

    /// `GET /instances/{id}/upgrades?type=plans`: the plans the instance
    /// may be resized to.
    pub async fn upgrade_plans_read(&self, id: &VultrInstanceId) -> Result<Vec<String>, VultrError> {
        let q = [("type", "plans".to_owned())];
        let a = self.request_retrying(Method::GET, &["instances", id.as_str(), "upgrades"], &q, None).await?;
        if !a.is_success() {
            return Err(a.to_error());
        }
        wire::upgrade_plans_of(&a.body).ok_or_else(|| VultrError::Decode("upgrades without a list of plans".to_owned()))
    }

    /// `GET /instances/{id}/backup-schedule`; `None` when backups are off.
    pub async fn backup_schedule_read(&self, id: &VultrInstanceId) -> Result<Option<BackupSchedule>, VultrError> {
        let a = self.request_retrying(Method::GET, &["instances", id.as_str(), "backup-schedule"], &[], None).await?;
        if !a.is_success() {
            return Err(a.to_error());
        }
        Ok(wire::backup_schedule_of(&a.body))
    }
}

fn ids(v: Vec<Id<String>>) -> std::collections::BTreeSet<String> {
    v.into_iter().map(|x| x.id).collect()
}
