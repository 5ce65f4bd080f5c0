//! Vultr's JSON, as the OpenAPI document (2023-12) names it. Request bodies
//! are built here and nowhere else; the conformance test validates them
//! against the document's request schemas.

use oduflow_model::provider::{Block, BlockRequest, Instance, InstanceRequest};
use oduflow_model::{VultrBlockId, VultrInstanceId};
use serde::Deserialize;
use serde_json::{Value, json};

/// `create_instance_request`: region, plan and one image source (`os_id`).
pub(crate) fn instance_create_body(req: &InstanceRequest) -> Value {
    json!({
        "region": req.region,
        "plan": req.plan,
        "os_id": req.os_id,
        "label": req.label.as_str(),
        "hostname": req.hostname,
    })
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
    status: String,
    #[serde(default)]
    server_status: String,
    #[serde(default)]
    main_ip: String,
}

impl From<WireInstance> for Instance {
    fn from(w: WireInstance) -> Self {
        Instance {
            id: VultrInstanceId(w.id),
            label: w.label,
            region: w.region,
            plan: w.plan,
            os_id: w.os_id,
            status: w.status,
            server_status: w.server_status,
            main_ip: w.main_ip,
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
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct BlockEnvelope {
    pub block: WireBlock,
}

/// The new resource's id in a create answer (`{"instance": {"id": ...}}` or
/// `{"block": {"id": ...}}`), if it is there and not empty.
pub(crate) fn created_id(body: &[u8], key: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let id = v.get(key)?.get("id")?.as_str()?;
    (!id.trim().is_empty()).then(|| id.to_owned())
}
