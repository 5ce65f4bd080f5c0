//! `Provider` for Vultr instances and block storage.

use crate::http::VultrClient;
use crate::wire;
use oduflow_model::provider::{
    Block, BlockRequest, Catalog, DeleteOutcome, Instance, InstanceChange, InstanceRequest, Outcome, Provider,
    ProviderError, Sending,
};
use oduflow_model::{BackupSchedule, KeyFingerprint, Label, VultrBlockId, VultrInstanceId};
use reqwest::Method;
use std::collections::HashMap;

impl VultrClient {
    /// DELETE (or detach) with bounded retries: 2xx is `Sent`, 404 `NotFound`,
    /// any other answer (after the retries, for 429 and 5xx) `Refused`. A 3xx
    /// never gets here: `request_retrying` makes it an error, so a redirect
    /// to some page that answers 404 can never confirm a deletion.
    pub(crate) async fn delete_like(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&serde_json::Value>,
    ) -> Result<DeleteOutcome, crate::VultrError> {
        let a = self.request_retrying(method, segments, &[], body).await?;
        Ok(match a.status {
            404 => DeleteOutcome::NotFound,
            _ if a.is_success() => DeleteOutcome::Sent,
            status => DeleteOutcome::Refused { status, message: a.message() },
        })
    }

    /// One scan of every block page, matched client-side against many labels
    /// at once (Vultr's block listing has no label filter, docs/vultr.md §3), so
    /// all pending lookups share a single pass.
    pub async fn block_find_by_labels(&self, labels: &[Label]) -> Result<HashMap<Label, Vec<Block>>, ProviderError> {
        let mut found: HashMap<Label, Vec<Block>> = labels.iter().map(|l| (l.clone(), Vec::new())).collect();
        for block in self.block_list().await? {
            if let Some(v) = found.get_mut(&Label(block.label.clone())) {
                v.push(block);
            }
        }
        Ok(found)
    }
}

impl Provider for VultrClient {
    fn key_fingerprint(&self) -> KeyFingerprint {
        self.fingerprint().clone()
    }

    fn sending_as(&self, sending: Sending) -> Self {
        Self { sending, ..self.clone() }
    }

    fn sending(&self) -> &Sending {
        &self.sending
    }

    async fn instance_create(&self, req: &InstanceRequest) -> Outcome<VultrInstanceId> {
        let reply = self.post_once(&["instances"], &wire::instance_create_body(req)).await;
        let outcome = Self::classify(reply, |a| {
            let id = wire::created_id(&a.body, "instance").map(VultrInstanceId)?;
            // Handed over once, then dropped: never kept, logged or returned.
            if let (Some(sink), Some(p)) = (&self.config().root_password.0, wire::created_password(&a.body)) {
                sink.take(&req.label, &id, p);
            }
            Some(id)
        });
        tracing::info!(label = %req.label, outcome = %outcome.summary(|id| id.to_string()), "instance create sent");
        outcome
    }

    async fn instance_get(&self, id: &VultrInstanceId) -> Result<Option<Instance>, ProviderError> {
        let env: Option<wire::InstanceEnvelope> = self.get_one(&["instances", id.as_str()]).await?;
        Ok(env.map(|e| e.instance.into()))
    }

    async fn instance_list_by_label(&self, label: &Label) -> Result<Vec<Instance>, ProviderError> {
        let all: Vec<wire::WireInstance> =
            self.list_all(&["instances"], "instances", &[("label", label.as_str().to_owned())]).await?;
        // The server filters already; matching again costs nothing and keeps
        // a looser server-side match (prefix, case) from adopting a stranger.
        Ok(all.into_iter().map(Instance::from).filter(|i| i.label == label.as_str()).collect())
    }

    async fn instance_list(&self) -> Result<Vec<Instance>, ProviderError> {
        let all: Vec<wire::WireInstance> = self.list_all(&["instances"], "instances", &[]).await?;
        Ok(all.into_iter().map(Instance::from).collect())
    }

    async fn instance_delete(&self, id: &VultrInstanceId) -> Result<DeleteOutcome, ProviderError> {
        Ok(self.delete_like(Method::DELETE, &["instances", id.as_str()], None).await?)
    }

    async fn block_create(&self, req: &BlockRequest) -> Outcome<VultrBlockId> {
        let reply = self.post_once(&["blocks"], &wire::block_create_body(req)).await;
        let outcome = Self::classify(reply, |a| wire::created_id(&a.body, "block").map(VultrBlockId));
        tracing::info!(label = %req.label, outcome = %outcome.summary(|id| id.to_string()), "block create sent");
        outcome
    }

    async fn block_get(&self, id: &VultrBlockId) -> Result<Option<Block>, ProviderError> {
        let env: Option<wire::BlockEnvelope> = self.get_one(&["blocks", id.as_str()]).await?;
        Ok(env.map(|e| e.block.into()))
    }

    async fn block_list(&self) -> Result<Vec<Block>, ProviderError> {
        let all: Vec<wire::WireBlock> = self.list_all(&["blocks"], "blocks", &[]).await?;
        Ok(all.into_iter().map(Block::from).collect())
    }

    async fn block_attach(&self, id: &VultrBlockId, instance: &VultrInstanceId) -> Outcome<()> {
        let body = wire::block_attach_body(instance);
        let reply = self.post_once(&["blocks", id.as_str(), "attach"], &body).await;
        let outcome = match reply {
            // Vultr found no such volume or VM by id: a listing can show a
            // new one while requests by id still answer 404 (its
            // post-create window). Nothing was applied, so it is sent again
            // on its receipt, as a request that never left.
            crate::http::Reply::Answer(a) if a.status == 404 => Outcome::NotSent {
                reason: format!(
                    "Vultr answered 404 ({}): the volume or the VM is not found by id yet, so the attach was not \
                     applied",
                    a.message()
                ),
            },
            // 204 with no body: attachment is confirmed only by reading the block.
            reply => Self::classify(reply, |_| Some(())),
        };
        tracing::info!(block = %id, %instance, outcome = %outcome.summary(|_| String::new()), "block attach sent");
        outcome
    }

    async fn block_detach(&self, id: &VultrBlockId) -> Result<DeleteOutcome, ProviderError> {
        let body = wire::block_detach_body();
        Ok(self.delete_like(Method::POST, &["blocks", id.as_str(), "detach"], Some(&body)).await?)
    }

    async fn block_delete(&self, id: &VultrBlockId) -> Result<DeleteOutcome, ProviderError> {
        Ok(self.delete_like(Method::DELETE, &["blocks", id.as_str()], None).await?)
    }

    async fn instance_update(&self, id: &VultrInstanceId, change: &InstanceChange) -> Outcome<()> {
        let reply = self.patch_once(&["instances", id.as_str()], &wire::instance_update_body(change)).await;
        // 202 with the instance as it was: the change shows only on later reads.
        let outcome = Self::classify(reply, |_| Some(()));
        let change = serde_json::to_string(change).unwrap_or_default();
        tracing::info!(instance = %id, %change, outcome = %outcome.summary(|_| String::new()), "instance update sent");
        outcome
    }

    async fn instance_upgrade_plans(&self, id: &VultrInstanceId) -> Result<Vec<String>, ProviderError> {
        Ok(self.upgrade_plans_read(id).await?)
    }

    async fn block_resize(&self, id: &VultrBlockId, size_gb: i64) -> Outcome<()> {
        let reply = self.patch_once(&["blocks", id.as_str()], &wire::block_resize_body(size_gb)).await;
        // 204 with no body.
        let outcome = Self::classify(reply, |_| Some(()));
        tracing::info!(block = %id, size_gb, outcome = %outcome.summary(|_| String::new()), "block resize sent");
        outcome
    }

    async fn catalog(&self, region: &str) -> Result<Catalog, ProviderError> {
        Ok(self.catalog_read(region).await?)
    }

    async fn backup_schedule_set(&self, id: &VultrInstanceId, schedule: &BackupSchedule) -> Result<(), ProviderError> {
        Ok(self.backup_schedule_post(id, schedule).await?)
    }

    async fn backup_schedule_get(&self, id: &VultrInstanceId) -> Result<Option<BackupSchedule>, ProviderError> {
        Ok(self.backup_schedule_read(id).await?)
    }
}
