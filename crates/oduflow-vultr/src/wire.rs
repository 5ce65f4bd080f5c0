//! Vultr's JSON, as the OpenAPI document (2023-12) names it. Request bodies
//! are built here and nowhere else; the conformance test validates them
//! against the document's request schemas.

use oduflow_model::provider::{Block, BlockRequest, Instance, InstanceChange, InstanceRequest};
use oduflow_model::{BackupSchedule, ImageSource, VultrBlockId, VultrInstanceId};
use serde::Deserialize;
use serde_json::{Value, json};

/// `create_instance_request`: region, plan, exactly one image source and
/// every server field. `activation_email` is sent as false explicitly (as
/// Terraform's provider does) so no mail goes out whatever the account's
/// default; `user_data` is base64 on the wire. Empty lists and absent
/// options are left out rather than sent empty.
pub(crate) fn instance_create_body(req: &InstanceRequest) -> Value {
    use base64::Engine as _;
    let s = &req.server;
    let mut body = json!({
        "region": req.region,
        "plan": req.plan,
        "label": req.label.as_str(),
        "hostname": s.hostname,
        "enable_ipv6": s.ipv6,
        "backups": if s.backups.is_some() { "enabled" } else { "disabled" },
        "activation_email": false,
    });
    body[req.image.field()] = match &req.image {
        ImageSource::Os(n) | ImageSource::App(n) => json!(n),
        ImageSource::Snapshot(id) | ImageSource::Image(id) => json!(id),
    };
    if !s.ssh_keys.is_empty() {
        body["sshkey_id"] = json!(s.ssh_keys);
    }
    if let Some(u) = &s.user_data {
        body["user_data"] = json!(base64::engine::general_purpose::STANDARD.encode(u));
    }
    if !s.tags.is_empty() {
        body["tags"] = json!(s.tags);
    }
    if let Some(f) = &s.firewall_group {
        body["firewall_group_id"] = json!(f);
    }
    if !s.vpcs.is_empty() {
        body["attach_vpc"] = json!(s.vpcs);
    }
    body
}

/// `create_instance_backup_schedule_request`: `type`, `hour`, `dow`, `dom`.
pub(crate) fn backup_schedule_body(b: &BackupSchedule) -> Value {
    let (hour, dow, dom) = b.fields();
    json!({ "type": b.kind(), "hour": hour, "dow": dow, "dom": dom })
}

/// `create_block_request`. `block_type` is always sent: the document calls it
/// "soon to become required" and gives no default.
pub(crate) fn block_create_body(req: &BlockRequest) -> Value {
    json!({
        "region": req.region,
        "size_gb": req.size_gb,
        "label": req.label.as_str(),
        "block_type": req.block_type.as_str(),
    })
}

/// `update_instance_request`: only the fields that change (`tags` is the
/// whole list: a PATCH replaces it).
pub(crate) fn instance_update_body(c: &InstanceChange) -> Value {
    let mut body = json!({});
    if let Some(p) = &c.plan {
        body["plan"] = json!(p);
    }
    if let Some(t) = &c.tags {
        body["tags"] = json!(t);
    }
    if let Some(f) = &c.firewall_group_id {
        body["firewall_group_id"] = json!(f);
    }
    body
}

/// `update_block_request` with only `size_gb`.
pub(crate) fn block_resize_body(size_gb: i64) -> Value {
    json!({ "size_gb": size_gb })
}

/// The `plans` of `get_instance_upgrades_200_response`.
pub(crate) fn upgrade_plans_of(body: &[u8]) -> Option<Vec<String>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let plans = v.get("upgrades")?.get("plans")?.as_array()?;
    plans.iter().map(|p| p.as_str().map(str::to_owned)).collect()
}

/// `attach_block_request`. `live: true` attaches without restarting the
/// instance, so the attach does not lock the VM we just waited to be ready.
pub(crate) fn block_attach_body(instance: &VultrInstanceId) -> Value {
    json!({ "instance_id": instance.as_str(), "live": true })
}

/// `detach_block_request`, live for the same reason as attach.
pub(crate) fn block_detach_body() -> Value {
    json!({ "live": true })
}

/// The fields of `instance` we read. Everything but `id` defaults when
/// missing, so an extra or absent cosmetic field never makes a read fail.
#[derive(Debug, Deserialize)]
pub(crate) struct WireInstance {
    id: String,
    #[serde(default)]
    label: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    plan: String,
    #[serde(default)]
    os_id: i64,
    #[serde(default)]
    app_id: i64,
    #[serde(default)]
    image_id: String,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    firewall_group_id: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    server_status: String,
    #[serde(default)]
    main_ip: String,
    /// Flat, as Vultr sends it (docs/vultr.md: the document's `v6_networks`
    /// is never sent).
    #[serde(default)]
    v6_main_ip: String,
}

impl From<WireInstance> for Instance {
    fn from(w: WireInstance) -> Self {
        Instance {
            id: VultrInstanceId(w.id),
            label: w.label,
            region: w.region,
            plan: w.plan,
            os_id: w.os_id,
            app_id: w.app_id,
            image_id: w.image_id,
            hostname: w.hostname,
            tags: w.tags,
            firewall_group_id: w.firewall_group_id,
            status: w.status,
            server_status: w.server_status,
            main_ip: w.main_ip,
            v6_main_ip: w.v6_main_ip,
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct InstanceEnvelope {
    pub instance: WireInstance,
}

/// The fields of `blockstorage` we read.
#[derive(Debug, Deserialize)]
pub(crate) struct WireBlock {
    id: String,
    #[serde(default)]
    label: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    size_gb: i64,
    #[serde(default)]
    block_type: String,
    #[serde(default)]
    status: String,
    /// `""` when detached (docs/vultr.md §3).
    #[serde(default)]
    attached_to_instance: String,
    #[serde(default)]
    mount_id: String,
}

impl From<WireBlock> for Block {
    fn from(w: WireBlock) -> Self {
        Block {
            id: VultrBlockId(w.id),
            label: w.label,
            region: w.region,
            size_gb: w.size_gb,
            block_type: w.block_type,
            status: w.status,
            attached_to_instance: (!w.attached_to_instance.is_empty())
                .then_some(VultrInstanceId(w.attached_to_instance)),
            mount_id: w.mount_id,
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct BlockEnvelope {
    pub block: WireBlock,
}

/// The schedule in a `GET /instances/{id}/backup-schedule` answer; `None`
/// when backups are off or the answer is not one we can read.
pub(crate) fn backup_schedule_of(body: &[u8]) -> Option<BackupSchedule> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let s = v.get("backup_schedule")?;
    if s.get("enabled").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let n = |k: &str| s.get(k).and_then(Value::as_u64).unwrap_or(1);
    let text = match s.get("type")?.as_str()? {
        "weekly" => format!("weekly:{}:{}", n("dow"), n("hour")),
        "monthly" => format!("monthly:{}:{}", n("dom"), n("hour")),
        other => format!("{other}:{}", n("hour")),
    };
    BackupSchedule::parse(&text).ok()
}

/// Vultr's one-time root password in a create answer, if there.
pub(crate) fn created_password(body: &[u8]) -> Option<secrecy::SecretString> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let p = v.get("instance")?.get("default_password")?.as_str()?;
    (!p.is_empty()).then(|| secrecy::SecretString::from(p.to_owned()))
}

/// The new resource's id in a create answer (`{"instance": {"id": ...}}` or
/// `{"block": {"id": ...}}`), if it is there and not empty.
pub(crate) fn created_id(body: &[u8], key: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let id = v.get(key)?.get("id")?.as_str()?;
    (!id.trim().is_empty()).then(|| id.to_owned())
}
