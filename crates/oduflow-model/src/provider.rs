//! The provider interface the engine drives, and the provider-neutral shapes
//! it speaks. Only `oduflow-vultr` turns these into Vultr's JSON.
//!
//! Classification happens at the edge: an implementation answers a create or
//! attach with exactly one of `Accepted`, `Rejected` (only for 400/401/403/422
//! answered to that very call), `NotSent` (the connection was never
//! established, so not one byte of the request left the process) or `Unknown`
//! (everything else, redirects included), and nothing downstream looks at HTTP
//! status codes again.

use crate::{ClientSpec, ImageSource, KeyFingerprint, Label, ServerSpec, VolumeType, VultrBlockId, VultrInstanceId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A VM to create: everything goes into the one create POST (the backup
/// schedule, set afterwards, excepted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRequest {
    pub region: String,
    pub plan: String,
    pub image: ImageSource,
    pub label: Label,
    /// Hostname, SSH keys, user data, tags, firewall group, IPv6, VPCs,
    /// backups.
    pub server: ServerSpec,
}

/// A block volume to create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRequest {
    pub region: String,
    pub size_gb: i64,
    pub block_type: VolumeType,
    pub label: Label,
}

/// A change to a running VM: only the fields that differ from what a read
/// showed (PATCH /instances/{id}; `tags` replaces the whole list).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// `""` detaches the firewall group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_group_id: Option<String>,
}

impl InstanceChange {
    /// What must change for `inst` to show the spec's plan, tags and
    /// firewall group; `None` when nothing differs.
    pub fn between(spec: &ClientSpec, inst: &Instance) -> Option<Self> {
        let mut have = inst.tags.clone();
        let mut want = spec.server.tags.clone();
        have.sort();
        want.sort();
        let firewall = spec.server.firewall_group.clone().unwrap_or_default();
        let c = Self {
            plan: (inst.plan != spec.plan).then(|| spec.plan.clone()),
            tags: (have != want).then(|| spec.server.tags.clone()),
            firewall_group_id: (inst.firewall_group_id != firewall).then_some(firewall),
        };
        (c != Self::default()).then_some(c)
    }
}

/// The answer to a create or attach POST, which is sent exactly once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome<T> {
    /// 2xx with what we asked for (the new id, or `()` for an attach).
    Accepted(T),
    /// A definitive refusal of this very call: 400, 401, 403 or 422.
    Rejected { status: u16, message: String },
    /// The request provably never left this process: the connection was never
    /// established (DNS failure, connection refused, TLS handshake failed,
    /// connect timeout); it may be sent again on the same receipt. Only a
    /// failure before any byte of the request could have been written is
    /// classified so; anything ambiguous is `Unknown`.
    NotSent { reason: String },
    /// Anything else: a transport error once connected, a timeout, 5xx, 429,
    /// a 3xx (redirects are never followed), or a 2xx whose body had no
    /// readable id. The request may or may not have been applied.
    Unknown { reason: String },
}

impl<T> Outcome<T> {
    /// One line for a log, a value rather than Rust's debug text:
    /// `accepted` and what `accepted` says of the id, `rejected 422:
    /// message`, `not sent: reason`, `unknown: reason`.
    pub fn summary(&self, accepted: impl FnOnce(&T) -> String) -> String {
        match self {
            Outcome::Accepted(t) => format!("accepted {}", accepted(t)).trim_end().to_owned(),
            Outcome::Rejected { status, message } => format!("rejected {status}: {message}"),
            Outcome::NotSent { reason } => format!("not sent: {reason}"),
            Outcome::Unknown { reason } => format!("unknown: {reason}"),
        }
    }
}

/// What a read says about an instance.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub id: VultrInstanceId,
    pub label: String,
    pub region: String,
    pub plan: String,
    pub os_id: i64,
    /// 0 when the VM was not deployed from an application.
    pub app_id: i64,
    /// `""` when the VM was not deployed from an application image.
    pub image_id: String,
    pub hostname: String,
    pub tags: Vec<String>,
    /// `""` when none.
    pub firewall_group_id: String,
    /// pending | active | suspended | resizing
    pub status: String,
    /// none | locked | installingbooting | ok
    pub server_status: String,
    pub main_ip: String,
    /// `""` when IPv6 is off.
    pub v6_main_ip: String,
}

impl Instance {
    /// Vultr refuses attachment while an instance installs; this is the state
    /// in which it accepts one.
    pub fn is_ready(&self) -> bool {
        self.status == "active" && self.server_status == "ok"
    }
}

/// What a read says about a block volume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub id: VultrBlockId,
    pub label: String,
    pub region: String,
    pub size_gb: i64,
    pub block_type: String,
    /// pending | active
    pub status: String,
    /// `None` when Vultr answers `""`: the only way attachment is visible.
    pub attached_to_instance: Option<VultrInstanceId>,
    /// The guest sees the volume as `/dev/disk/by-id/virtio-<mount_id>`;
    /// `""` before Vultr assigns one.
    pub mount_id: String,
}

/// What a preflight reads before anything is paid for: the
/// catalog for one region and the account's referenced objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// Every region id with its options (`block_storage_high_perf`, ...).
    pub regions: BTreeMap<String, Vec<String>>,
    /// Plans sellable in the region now (`GET /regions/{id}/availability`).
    pub available_plans: BTreeSet<String>,
    pub os_ids: BTreeSet<i64>,
    pub app_ids: BTreeSet<i64>,
    pub app_images: BTreeSet<String>,
    pub snapshots: BTreeSet<String>,
    pub ssh_keys: BTreeSet<String>,
    pub firewall_groups: BTreeSet<String>,
}

impl Catalog {
    /// Why `spec` cannot be provisioned as it stands, one line per problem;
    /// empty when every check passes. Nothing here is a guess: each line
    /// names what the catalog lacks.
    pub fn problems(&self, spec: &ClientSpec) -> Vec<String> {
        let mut why = vec![];
        match self.regions.get(&spec.region) {
            None => why.push(format!("region {} does not exist", spec.region)),
            Some(options) => {
                let need = format!("block_storage_{}", spec.volume_type.as_str());
                if !options.contains(&need) {
                    why.push(format!(
                        "region {} offers no {} block storage (its options: {})",
                        spec.region,
                        spec.volume_type.as_str(),
                        options.join(", ")
                    ));
                }
                if !self.available_plans.contains(&spec.plan) {
                    why.push(format!("plan {} is not sold in region {} now", spec.plan, spec.region));
                }
            }
        }
        let image_ok = match &spec.image {
            ImageSource::Os(n) => self.os_ids.contains(n),
            ImageSource::App(n) => self.app_ids.contains(n),
            ImageSource::Image(s) => self.app_images.contains(s),
            ImageSource::Snapshot(s) => self.snapshots.contains(s),
        };
        if !image_ok {
            why.push(format!("image source {} does not exist", spec.image));
        }
        for k in spec.server.ssh_keys.iter().filter(|k| !self.ssh_keys.contains(*k)) {
            why.push(format!("ssh key {k} does not exist in the account"));
        }
        if let Some(f) = spec.server.firewall_group.as_ref().filter(|f| !self.firewall_groups.contains(*f)) {
            why.push(format!("firewall group {f} does not exist in the account"));
        }
        why
    }
}

/// The answer to a DELETE (or detach). DELETE may be repeated; deletion is
/// established only by a later GET answering 404, never by this value alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DeleteOutcome {
    /// 2xx: the provider took the request.
    Sent,
    /// 404: the provider does not know the id (right now).
    NotFound,
    /// Anything else once the bounded retries are spent (500 "locked", ...).
    Refused { status: u16, message: String },
}

/// A read that failed after its bounded retries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("transport error: {0}")]
    Transport(String),
    #[error("provider answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("unreadable provider response: {0}")]
    Decode(String),
}

/// Compute and block storage, as the engine needs them. Reads retry within
/// bounds; create and attach are sent once.
pub trait Provider: Send + Sync + 'static {
    /// The fingerprint of the API key this provider sends.
    fn key_fingerprint(&self) -> KeyFingerprint;
    /// This provider, sending with `sending` instead of what it had (it
    /// shares everything else: connections, rate budget, state).
    fn sending_as(&self, sending: Sending) -> Self
    where
        Self: Sized;
    /// What this provider asks before each request.
    fn sending(&self) -> &Sending;
    /// This provider, with `mark` recorded right before its one create,
    /// attach or change leaves (and what it asked before, the run's guard).
    fn marked(&self, mark: Arc<dyn SendMark>) -> Self
    where
        Self: Sized,
    {
        self.sending_as(self.sending().marked(mark))
    }

    fn instance_create(&self, req: &InstanceRequest) -> impl Future<Output = Outcome<VultrInstanceId>> + Send;
    /// `Ok(None)` on 404.
    fn instance_get(
        &self,
        id: &VultrInstanceId,
    ) -> impl Future<Output = Result<Option<Instance>, ProviderError>> + Send;
    /// Every page of `GET /instances?label=`, matched exactly.
    fn instance_list_by_label(
        &self,
        label: &Label,
    ) -> impl Future<Output = Result<Vec<Instance>, ProviderError>> + Send;
    /// Every page of `GET /instances`.
    fn instance_list(&self) -> impl Future<Output = Result<Vec<Instance>, ProviderError>> + Send;
    fn instance_delete(
        &self,
        id: &VultrInstanceId,
    ) -> impl Future<Output = Result<DeleteOutcome, ProviderError>> + Send;

    fn block_create(&self, req: &BlockRequest) -> impl Future<Output = Outcome<VultrBlockId>> + Send;
    /// `Ok(None)` on 404.
    fn block_get(&self, id: &VultrBlockId) -> impl Future<Output = Result<Option<Block>, ProviderError>> + Send;
    /// Every page of `GET /blocks` (Vultr has no label filter there).
    fn block_list(&self) -> impl Future<Output = Result<Vec<Block>, ProviderError>> + Send;
    fn block_attach(&self, id: &VultrBlockId, instance: &VultrInstanceId) -> impl Future<Output = Outcome<()>> + Send;
    fn block_detach(&self, id: &VultrBlockId) -> impl Future<Output = Result<DeleteOutcome, ProviderError>> + Send;
    fn block_delete(&self, id: &VultrBlockId) -> impl Future<Output = Result<DeleteOutcome, ProviderError>> + Send;

    /// A VM or a volume by its typed id; `Ok(None)` on 404.
    fn resource_get(&self, id: &ResourceId) -> impl Future<Output = Result<Option<Existing>, ProviderError>> + Send {
        async move {
            Ok(match id {
                ResourceId::Instance(i) => self.instance_get(i).await?.map(Existing::Instance),
                ResourceId::Block(b) => self.block_get(b).await?.map(Existing::Block),
            })
        }
    }

    /// DELETE of a VM or a volume by its typed id.
    fn resource_delete(&self, id: &ResourceId) -> impl Future<Output = Result<DeleteOutcome, ProviderError>> + Send {
        async move {
            match id {
                ResourceId::Instance(i) => self.instance_delete(i).await,
                ResourceId::Block(b) => self.block_delete(b).await,
            }
        }
    }

    /// PATCH /instances/{id} with the change, sent once: an unknown outcome is
    /// resolved by reading, never by sending again.
    fn instance_update(
        &self,
        id: &VultrInstanceId,
        change: &InstanceChange,
    ) -> impl Future<Output = Outcome<()>> + Send;
    /// The plans GET /instances/{id}/upgrades lists: the only targets Vultr
    /// resizes an instance to.
    fn instance_upgrade_plans(
        &self,
        id: &VultrInstanceId,
    ) -> impl Future<Output = Result<Vec<String>, ProviderError>> + Send;
    /// PATCH /blocks/{id} with `{size_gb}`, sent once.
    fn block_resize(&self, id: &VultrBlockId, size_gb: i64) -> impl Future<Output = Outcome<()>> + Send;

    /// The reads a preflight needs for a client in `region`.
    fn catalog(&self, region: &str) -> impl Future<Output = Result<Catalog, ProviderError>> + Send;
    /// Sets the backup schedule of an instance (a repeatable set: sending it
    /// again changes nothing).
    fn backup_schedule_set(
        &self,
        id: &VultrInstanceId,
        schedule: &crate::BackupSchedule,
    ) -> impl Future<Output = Result<(), ProviderError>> + Send;
    /// The instance's backup schedule, `None` when backups are off.
    fn backup_schedule_get(
        &self,
        id: &VultrInstanceId,
    ) -> impl Future<Output = Result<Option<crate::BackupSchedule>, ProviderError>> + Send;
}

/// Asked right before each request leaves for the provider: after the rate
/// limiter's wait, before every retry of a read or DELETE and before a create
/// or attach. A run's provider carries one that checks its claim
/// ([`Sending`]), so a run whose claim was lost while it waited (its
/// connection terminated, its record moved on) sends nothing more, not even
/// the next retry of a read. `Err` names why;
/// the sender then sends nothing and answers as if the connection had never
/// been made (`NotSent`, or a read error that is not retried).
pub trait SendGuard: Send + Sync {
    fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// Records, durably, that a create, attach or change is leaving: asked by
/// the sender after the rate limiter's wait and after the [`SendGuard`]
/// passed, right before the request is written. `Err` names why it could
/// not be recorded; the sender then sends nothing and answers `NotSent`. A
/// request whose send was never recorded therefore never left, and one
/// stopped before it (by its slot's bounds, the guard, or a failed mark) is
/// known not to have left.
pub trait SendMark: Send + Sync {
    fn mark(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// What a provider asks before each request it sends, given to it
/// explicitly ([`Provider::sending_as`]): a run's provider carries its
/// guard, a create's or change's also its mark, and the bulk view's
/// listings say they are shared. A clone of the provider carries it along,
/// into whatever task it is used from; the provider a worker was built with
/// carries none.
#[derive(Clone, Default)]
pub struct Sending {
    guard: Option<Arc<dyn SendGuard>>,
    mark: Option<Arc<dyn SendMark>>,
    shared_listing: bool,
}

impl std::fmt::Debug for Sending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sending")
            .field("guarded", &self.guard.is_some())
            .field("marked", &self.mark.is_some())
            .field("shared_listing", &self.shared_listing)
            .finish()
    }
}

impl Sending {
    /// A run's requests: `guard` asked before each.
    pub fn guarded(guard: Arc<dyn SendGuard>) -> Self {
        Self { guard: Some(guard), ..Self::default() }
    }

    /// These requests, and one create, attach or change among them with
    /// `mark` recorded right before it leaves.
    pub fn marked(&self, mark: Arc<dyn SendMark>) -> Self {
        Self { mark: Some(mark), ..self.clone() }
    }

    /// The pages of a listing that many runs wait for (the bulk view's):
    /// they go ahead of this process's other requests in the rate budget's
    /// line, so a queue of creates does not hold up every run waiting for
    /// it. Such listings start at most one per kind per gap, so they cannot
    /// starve the creates in turn. No run's guard: the listing is not one
    /// run's.
    pub fn shared_listing() -> Self {
        Self { shared_listing: true, ..Self::default() }
    }

    pub fn is_shared_listing(&self) -> bool {
        self.shared_listing
    }

    /// What a sender calls right before each request; `Ok` without a guard.
    pub async fn check(&self) -> Result<(), String> {
        match &self.guard {
            Some(g) => g.check().await,
            None => Ok(()),
        }
    }

    /// What a sender calls right before a create, attach or change leaves,
    /// once its guard passed; `Ok` without a mark.
    pub async fn mark(&self) -> Result<(), String> {
        match &self.mark {
            Some(m) => m.mark().await,
            None => Ok(()),
        }
    }
}

/// A VM's or a volume's id at Vultr, typed by its kind: the one place a
/// recorded id becomes the provider's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResourceId {
    Instance(VultrInstanceId),
    Block(VultrBlockId),
}

impl ResourceId {
    /// The id recorded for a resource of `kind` (an attach's is its
    /// volume's).
    pub fn new(kind: crate::ResourceKind, id: impl Into<String>) -> Self {
        match kind {
            crate::ResourceKind::Vm => ResourceId::Instance(Self::vm(id)),
            crate::ResourceKind::Volume | crate::ResourceKind::Attach => ResourceId::Block(Self::volume(id)),
        }
    }

    /// A VM's recorded id, as the provider's.
    pub fn vm(id: impl Into<String>) -> VultrInstanceId {
        VultrInstanceId(id.into())
    }

    /// A volume's recorded id, as the provider's.
    pub fn volume(id: impl Into<String>) -> VultrBlockId {
        VultrBlockId(id.into())
    }

    pub fn as_str(&self) -> &str {
        match self {
            ResourceId::Instance(i) => &i.0,
            ResourceId::Block(b) => &b.0,
        }
    }
}

/// A VM or a volume as a GET by id read it.
#[derive(Clone, Debug, PartialEq)]
pub enum Existing {
    Instance(Instance),
    Block(Block),
}

impl Existing {
    pub fn label(&self) -> &str {
        match self {
            Existing::Instance(i) => &i.label,
            Existing::Block(b) => &b.label,
        }
    }
}
