//! Typed rows, decoded the same way from either backend.

use crate::{Result, StoreError};
use oduflow_model::*;
use serde::Serialize;
use sqlx::Row;

/// Column access shared by both backends' rows.
pub(crate) trait RowExt {
    fn text(&self, col: &str) -> Result<String>;
    fn text_opt(&self, col: &str) -> Result<Option<String>>;
    fn int(&self, col: &str) -> Result<i64>;
    fn int_opt(&self, col: &str) -> Result<Option<i64>>;
}

macro_rules! row_ext {
    ($row:ty) => {
        impl RowExt for $row {
            fn text(&self, col: &str) -> Result<String> {
                Ok(self.try_get::<String, _>(col)?)
            }
            fn text_opt(&self, col: &str) -> Result<Option<String>> {
                Ok(self.try_get::<Option<String>, _>(col)?)
            }
            fn int(&self, col: &str) -> Result<i64> {
                Ok(self.try_get::<i64, _>(col)?)
            }
            fn int_opt(&self, col: &str) -> Result<Option<i64>> {
                Ok(self.try_get::<Option<i64>, _>(col)?)
            }
        }
    };
}
row_ext!(sqlx::postgres::PgRow);
row_ext!(sqlx::sqlite::SqliteRow);

/// A row whose columns of one table carry a prefix (`i_status`), so that one
/// query can return a job and its infra record together.
pub(crate) struct Prefixed<'a, R>(pub &'a R, pub &'static str);

impl<R: RowExt> RowExt for Prefixed<'_, R> {
    fn text(&self, col: &str) -> Result<String> {
        self.0.text(&format!("{}{col}", self.1))
    }
    fn text_opt(&self, col: &str) -> Result<Option<String>> {
        self.0.text_opt(&format!("{}{col}", self.1))
    }
    fn int(&self, col: &str) -> Result<i64> {
        self.0.int(&format!("{}{col}", self.1))
    }
    fn int_opt(&self, col: &str) -> Result<Option<i64>> {
        self.0.int_opt(&format!("{}{col}", self.1))
    }
}

/// The infra record's columns as `i_<name>`, for [`Prefixed`] with `"i_"`.
pub(crate) const INFRA_COLUMNS_PREFIXED: &str = "i.client_id AS i_client_id, i.region AS i_region, \
    i.plan AS i_plan, i.os_id AS i_os_id, i.volume_gb AS i_volume_gb, i.volume_type AS i_volume_type, \
    i.target AS i_target, i.generation AS i_generation, i.status AS i_status, \
    i.blocked_reason AS i_blocked_reason, i.blocked_detail AS i_blocked_detail, \
    i.key_fingerprint AS i_key_fingerprint, i.vm_id AS i_vm_id, i.volume_id AS i_volume_id, \
    i.vm_dispatch_generation AS i_vm_dispatch_generation, \
    i.volume_dispatch_generation AS i_volume_dispatch_generation, \
    i.attach_dispatch_generation AS i_attach_dispatch_generation, \
    i.updated_ms AS i_updated_ms, i.image AS i_image, i.server AS i_server, i.outputs AS i_outputs, \
    i.spec_generation AS i_spec_generation, i.spec_updated_ms AS i_spec_updated_ms, i.dns_name AS i_dns_name, \
    i.preflight_read_failures AS i_preflight_read_failures, \
    i.upgrades_read_failures_generation AS i_upgrades_read_failures_generation, \
    i.upgrades_read_failures AS i_upgrades_read_failures, i.updated_generation AS i_updated_generation, \
    i.backup_schedule AS i_backup_schedule, i.backup_schedule_sets AS i_backup_schedule_sets, \
    i.volume_size_id AS i_volume_size_id, i.volume_size_gb AS i_volume_size_gb, \
    i.observe_only AS i_observe_only";

fn parse<T>(what: &str, s: &str, f: impl Fn(&str) -> Option<T>) -> Result<T> {
    f(s).ok_or_else(|| StoreError::Corrupt(format!("{what} {s:?}")))
}

/// One client with its infra record.
#[derive(Clone, Debug, Serialize)]
pub struct ClientRow {
    pub id: ClientId,
    pub name: String,
    pub created_ms: i64,
    pub infra: InfraRow,
}

/// The infra record: desired spec, target, generation and what is known.
#[derive(Clone, Debug, Serialize)]
pub struct InfraRow {
    pub client_id: ClientId,
    pub spec: ClientSpec,
    pub target: Target,
    pub generation: i64,
    pub status: ClientStatus,
    pub blocked_reason: Option<BlockedReason>,
    pub blocked_detail: Option<String>,
    pub key_fingerprint: Option<KeyFingerprint>,
    pub vm_id: Option<VultrInstanceId>,
    pub volume_id: Option<VultrBlockId>,
    pub vm_dispatch_generation: i64,
    pub volume_dispatch_generation: i64,
    pub attach_dispatch_generation: i64,
    /// Progress of the current target that is not a provider id.
    pub progress: Progress,
    pub updated_ms: i64,
    /// Addresses and mount id, as last seen ready.
    pub outputs: oduflow_model::ServerOutputs,
    /// The generation of the last `client update` (0: never updated).
    pub spec_generation: i64,
    /// When that update was asked for.
    pub spec_updated_ms: Option<i64>,
    /// Imported and not yet promoted: tracked and reported, never changed.
    pub observe_only: bool,
}

impl InfraRow {
    pub fn dispatch_generation(&self, kind: ResourceKind) -> i64 {
        match kind {
            ResourceKind::Vm => self.vm_dispatch_generation,
            ResourceKind::Volume => self.volume_dispatch_generation,
            ResourceKind::Attach => self.attach_dispatch_generation,
        }
    }
}

pub(crate) fn infra_from_row(r: &impl RowExt, id_col: &str) -> Result<InfraRow> {
    let volume_type = r.text("volume_type")?;
    Ok(InfraRow {
        client_id: ClientId(r.text(id_col)?),
        spec: ClientSpec {
            region: r.text("region")?,
            plan: r.text("plan")?,
            image: match r.text_opt("image")? {
                Some(j) => serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(format!("image {j:?}: {e}")))?,
                None => oduflow_model::ImageSource::Os(r.int("os_id")?),
            },
            volume_gb: r.int("volume_gb")?,
            volume_type: VolumeType::parse(&volume_type)
                .map_err(|_| StoreError::Corrupt(format!("volume_type {volume_type:?}")))?,
            server: {
                let j = r.text("server")?;
                serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(format!("server {e}")))?
            },
            dns_name: r.text_opt("dns_name")?,
        },
        target: parse("target", &r.text("target")?, Target::parse)?,
        generation: r.int("generation")?,
        status: parse("status", &r.text("status")?, ClientStatus::parse)?,
        blocked_reason: r
            .text_opt("blocked_reason")?
            .map(|s| parse("blocked_reason", &s, BlockedReason::parse))
            .transpose()?,
        blocked_detail: r.text_opt("blocked_detail")?,
        key_fingerprint: r.text_opt("key_fingerprint")?.map(KeyFingerprint),
        vm_id: r.text_opt("vm_id")?.map(VultrInstanceId),
        volume_id: r.text_opt("volume_id")?.map(VultrBlockId),
        vm_dispatch_generation: r.int("vm_dispatch_generation")?,
        volume_dispatch_generation: r.int("volume_dispatch_generation")?,
        attach_dispatch_generation: r.int("attach_dispatch_generation")?,
        progress: Progress::read(r)?,
        updated_ms: r.int("updated_ms")?,
        outputs: {
            let j = r.text("outputs")?;
            serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(format!("outputs {e}")))?
        },
        spec_generation: r.int("spec_generation")?,
        spec_updated_ms: r.int_opt("spec_updated_ms")?,
        observe_only: r.int("observe_only")? != 0,
    })
}

pub(crate) fn client_from_row(r: &impl RowExt) -> Result<ClientRow> {
    Ok(ClientRow {
        id: ClientId(r.text("id")?),
        name: r.text("name")?,
        created_ms: r.int("created_ms")?,
        infra: infra_from_row(r, "id")?,
    })
}

/// What a client's runs keep between them for its current target that is
/// not a provider id: counts toward a limit and what a read confirmed. Kept
/// in typed columns of the infra row (`preflight_read_failures` and the
/// rest), written with the run's other writes, cleared by a `client
/// delete`; also as JSON in `progress`, for an older binary running on
/// this schema during an upgrade (migration 14).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Progress {
    /// Failed reads of the preflight's label search (toward the polling
    /// limit: then `provider_unavailable`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preflight_read_failures: i64,
    /// Failed reads of the VM's upgrades, counted per spec generation (an
    /// update or a reconcile starts the count again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrades_read_failures: Option<GenerationCount>,
    /// The spec generation the identity adapters were last updated for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub updated_generation: i64,
    /// The backup schedule Vultr last read back as the wanted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_schedule: Option<String>,
    /// Sets of the backup schedule sent (toward their limit).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backup_schedule_sets: i64,
    /// The size the last read showed the client's volume to have, so a
    /// `client update` can go back to it after a refused grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<VolumeSize>,
}

/// A count at one spec generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GenerationCount {
    pub generation: i64,
    pub count: i64,
}

/// A volume's size as a read showed it, with the volume's id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct VolumeSize {
    pub id: String,
    pub gb: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl Progress {
    /// The run's progress from its typed columns.
    fn read(r: &impl RowExt) -> Result<Self> {
        Ok(Self {
            preflight_read_failures: r.int("preflight_read_failures")?,
            upgrades_read_failures: match r.int_opt("upgrades_read_failures_generation")? {
                Some(generation) => Some(GenerationCount { generation, count: r.int("upgrades_read_failures")? }),
                None => None,
            },
            updated_generation: r.int("updated_generation")?,
            backup_schedule: r.text_opt("backup_schedule")?,
            backup_schedule_sets: r.int("backup_schedule_sets")?,
            volume_size: match (r.text_opt("volume_size_id")?, r.int_opt("volume_size_gb")?) {
                (Some(id), Some(gb)) => Some(VolumeSize { id, gb }),
                _ => None,
            },
        })
    }

    /// The upgrades' failed reads at `generation` (0 at another).
    pub fn upgrades_read_failures_at(&self, generation: i64) -> i64 {
        self.upgrades_read_failures.as_ref().filter(|f| f.generation == generation).map_or(0, |f| f.count)
    }
}

pub(crate) fn json_col(s: &str) -> Result<serde_json::Value> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("json {e}")))
}

/// One queued unit of work.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRow {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: JobId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub client_id: ClientId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub kind: JobKind,
    pub generation: i64,
    pub identity_key: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub state: JobState,
    pub attempts: i64,
    pub attempts_max: i64,
    pub run_after_ms: i64,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub payload: serde_json::Value,
    pub last_error: Option<String>,
    pub created_ms: i64,
    pub finished_ms: Option<i64>,
}

pub(crate) const JOB_COLUMNS: &str = "j.id, j.client_id, j.kind, j.generation, j.identity_key, \
    j.state, j.attempts, j.attempts_max, j.run_after_ms, j.payload, j.last_error, j.created_ms, j.finished_ms";

pub(crate) fn job_from_row(r: &impl RowExt) -> Result<JobRow> {
    Ok(JobRow {
        id: JobId(r.int("id")?),
        client_id: ClientId(r.text("client_id")?),
        kind: parse("job kind", &r.text("kind")?, JobKind::parse)?,
        generation: r.int("generation")?,
        identity_key: r.text_opt("identity_key")?,
        state: parse("job state", &r.text("state")?, JobState::parse)?,
        attempts: r.int("attempts")?,
        attempts_max: r.int("attempts_max")?,
        run_after_ms: r.int("run_after_ms")?,
        payload: json_col(&r.text("payload")?)?,
        last_error: r.text_opt("last_error")?,
        created_ms: r.int("created_ms")?,
        finished_ms: r.int_opt("finished_ms")?,
    })
}

pub use oduflow_model::decide::DeleteProgress;
pub use oduflow_model::ledger::{Effect, IdSource};

/// The durable record of one dispatch. Who and what it is for are public;
/// how far its create has come is read only through [`ReceiptRow::effect`],
/// [`ReceiptRow::progress`] and the accessors below, never from its
/// columns, so that one reading of them serves every caller.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReceiptRow {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub operation_key: OperationKey,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub client_ref: ClientId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub resource_kind: ResourceKind,
    pub dispatch_generation: i64,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub label: Label,
    pub region: String,
    pub spec_digest: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub key_fingerprint: KeyFingerprint,
    claimed_ms: i64,
    sent_ms: Option<i64>,
    resource_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    resource_id_source: Option<IdSource>,
    rejection_status: Option<i64>,
    rejection_message: Option<String>,
    observation_count: i64,
    /// Observations before this were spent before an explicit reconciliation.
    observation_base: i64,
    last_observation: Option<String>,
    abandoned_by: Option<String>,
    abandoned_reason: Option<String>,
    seen_ms: Option<i64>,
    /// When a listing (the bulk view) first showed the resource by its id:
    /// it exists, so its outcome is known; not `seen_ms`.
    listed_ms: Option<i64>,
    delete_sent_ms: Option<i64>,
    deleted_ms: Option<i64>,
    /// Set when the last send provably never left the process (no
    /// connection); cleared before the next send on this receipt.
    not_sent_ms: Option<i64>,
    not_sent_reason: Option<String>,
    /// How many sends on this receipt could not connect.
    not_sent_count: i64,
}

impl ReceiptRow {
    /// Whether the receipt may still own a live resource: not confirmed
    /// deleted, and its create neither refused, abandoned nor provably
    /// unsent.
    pub fn is_open(&self) -> bool {
        self.deleted_ms.is_none() && self.effect().may_own()
    }
}

pub(crate) const RECEIPT_COLUMNS: &str = "operation_key, client_ref, resource_kind, dispatch_generation, \
    label, region, spec_digest, key_fingerprint, claimed_ms, sent_ms, resource_id, resource_id_source, \
    rejection_status, rejection_message, observation_count, observation_base, last_observation, abandoned_by, abandoned_reason, seen_ms, listed_ms, delete_sent_ms, deleted_ms, \
    not_sent_ms, not_sent_reason, not_sent_count";

pub(crate) fn receipt_from_row(r: &impl RowExt) -> Result<ReceiptRow> {
    Ok(ReceiptRow {
        operation_key: OperationKey(r.text("operation_key")?),
        client_ref: ClientId(r.text("client_ref")?),
        resource_kind: parse("resource kind", &r.text("resource_kind")?, ResourceKind::parse)?,
        dispatch_generation: r.int("dispatch_generation")?,
        label: Label(r.text("label")?),
        region: r.text("region")?,
        spec_digest: r.text("spec_digest")?,
        key_fingerprint: KeyFingerprint(r.text("key_fingerprint")?),
        claimed_ms: r.int("claimed_ms")?,
        sent_ms: r.int_opt("sent_ms")?,
        resource_id: r.text_opt("resource_id")?,
        resource_id_source: r
            .text_opt("resource_id_source")?
            .map(|s| parse("id source", &s, IdSource::parse))
            .transpose()?,
        rejection_status: r.int_opt("rejection_status")?,
        rejection_message: r.text_opt("rejection_message")?,
        observation_count: r.int("observation_count")?,
        observation_base: r.int("observation_base")?,
        last_observation: r.text_opt("last_observation")?,
        abandoned_by: r.text_opt("abandoned_by")?,
        abandoned_reason: r.text_opt("abandoned_reason")?,
        seen_ms: r.int_opt("seen_ms")?,
        listed_ms: r.int_opt("listed_ms")?,
        delete_sent_ms: r.int_opt("delete_sent_ms")?,
        deleted_ms: r.int_opt("deleted_ms")?,
        not_sent_ms: r.int_opt("not_sent_ms")?,
        not_sent_reason: r.text_opt("not_sent_reason")?,
        not_sent_count: r.int("not_sent_count")?,
    })
}

impl ReceiptRow {
    /// Observations that count against the polling limit.
    pub fn observations(&self) -> i64 {
        self.observation_count - self.observation_base
    }

    /// When its request left, or, never marked sent, when it was claimed.
    pub fn sent_or_claimed_ms(&self) -> i64 {
        self.sent_ms.unwrap_or(self.claimed_ms)
    }

    /// A listing (the bulk view) showed it by its id: it exists, though it
    /// is not yet seen for deletion's bookkeeping.
    pub fn listed(&self) -> bool {
        self.listed_ms.is_some()
    }

    /// When its DELETE was first sent.
    pub fn delete_sent_at(&self) -> Option<i64> {
        self.delete_sent_ms
    }

    /// When the provider's answer to that DELETE, or a read after it,
    /// showed what it made gone.
    pub fn deleted_at(&self) -> Option<i64> {
        self.deleted_ms
    }

    /// When it was claimed: recorded before anything was sent.
    pub fn claimed_ms(&self) -> i64 {
        self.claimed_ms
    }

    /// When its request was marked sent, right before it left.
    pub fn sent_at(&self) -> Option<i64> {
        self.sent_ms
    }

    /// The provider's id of what it made, as [`Effect::id`] reads it (an
    /// abandoned receipt keeps its id as evidence), without building the
    /// effect.
    pub fn id(&self) -> Option<&str> {
        self.resource_id.as_deref()
    }

    /// That id, typed by the receipt's kind as [`provider::ResourceId::new`]
    /// types it (reads by id are of VMs and volumes).
    pub fn resource(&self) -> Option<provider::ResourceId> {
        self.id().map(|id| provider::ResourceId::new(self.resource_kind, id.to_string()))
    }

    /// How the id became known.
    pub fn id_source(&self) -> Option<IdSource> {
        self.resource_id_source
    }

    /// Reads of an outcome, every one (the polling limit counts only those
    /// since the last reconciliation: [`ReceiptRow::observations`]).
    pub fn observation_count(&self) -> i64 {
        self.observation_count
    }

    /// What the last read showed.
    pub fn last_observation(&self) -> Option<&str> {
        self.last_observation.as_deref()
    }

    /// Sends on this receipt that could not connect, every one.
    pub fn not_sent_count(&self) -> i64 {
        self.not_sent_count
    }

    /// When its last send was recorded as provably never having left; the
    /// next send clears it, whatever became known since.
    pub fn not_sent_at(&self) -> Option<i64> {
        self.not_sent_ms
    }

    /// How far the deletion of what it made has come.
    pub fn progress(&self) -> DeleteProgress {
        DeleteProgress {
            seen: self.seen_ms.is_some(),
            delete_sent: self.delete_sent_ms.is_some(),
            deleted: self.deleted_ms.is_some(),
            listed: self.listed(),
        }
    }

    /// Where its create stands: the one reading of the columns that record
    /// it. An operator's abandonment outranks everything (it keeps the id
    /// it gave up on as evidence); then an id, a refusal, a send that
    /// provably never left, a claim never marked sent.
    pub fn effect(&self) -> Effect {
        if let Some(by) = &self.abandoned_by {
            return Effect::Abandoned {
                by: by.clone(),
                reason: self.abandoned_reason.clone().unwrap_or_default(),
                id: self.resource_id.clone(),
                observations: self.observations(),
            };
        }
        match (&self.resource_id, self.rejection_status) {
            (Some(id), _) => {
                Effect::Known { id: id.clone(), source: self.resource_id_source, observations: self.observations() }
            }
            (None, Some(status)) => Effect::Rejected {
                status: u16::try_from(status).unwrap_or(0),
                message: self.rejection_message.clone().unwrap_or_default(),
            },
            (None, None) if self.not_sent_ms.is_some() => {
                Effect::NotSent { count: self.not_sent_count, reason: self.not_sent_reason.clone().unwrap_or_default() }
            }
            (None, None) if self.sent_ms.is_none() => {
                Effect::Unmarked { not_sent: self.not_sent_count, observations: self.observations() }
            }
            (None, None) => Effect::Unknown { observations: self.observations() },
        }
    }
}

/// [`ReceiptRow::effect`]'s reading in SQL, as [`Effect::outcome`] names
/// it, for counting receipts by outcome in one `GROUP BY` (the metrics):
/// the same order (an abandonment first, then an id, a refusal, a send
/// that provably never left, a claim never marked sent).
pub(crate) const RECEIPT_OUTCOME_SQL: &str = "CASE \
    WHEN abandoned_by IS NOT NULL THEN 'abandoned' \
    WHEN resource_id IS NOT NULL AND coalesce(resource_id_source, 'response') = 'response' THEN 'accepted' \
    WHEN resource_id IS NOT NULL THEN resource_id_source \
    WHEN rejection_status IS NOT NULL THEN 'rejected' \
    WHEN not_sent_ms IS NOT NULL THEN 'not_sent' \
    WHEN sent_ms IS NULL THEN 'not_marked_sent' \
    ELSE 'unknown' END";

/// One audit event.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventRow {
    pub id: i64,
    pub client_ref: Option<String>,
    pub kind: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub detail: serde_json::Value,
    pub at_ms: i64,
    /// Who asked for the change it records: `api-token:NAME`, the command
    /// line's actor, or a pass of oduflow's own; none for what a run
    /// records of itself.
    pub actor: Option<String>,
}

pub(crate) fn event_from_row(r: &impl RowExt) -> Result<EventRow> {
    Ok(EventRow {
        id: r.int("id")?,
        client_ref: r.text_opt("client_ref")?,
        kind: r.text("kind")?,
        detail: json_col(&r.text("detail")?)?,
        at_ms: r.int("at_ms")?,
        actor: r.text_opt("actor")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed() -> ReceiptRow {
        ReceiptRow {
            operation_key: OperationKey("k".into()),
            client_ref: ClientId("c".into()),
            resource_kind: ResourceKind::Vm,
            dispatch_generation: 1,
            label: Label("l".into()),
            region: "ewr".into(),
            spec_digest: "d".into(),
            key_fingerprint: KeyFingerprint("f".into()),
            claimed_ms: 1,
            sent_ms: None,
            resource_id: None,
            resource_id_source: None,
            rejection_status: None,
            rejection_message: None,
            observation_count: 5,
            observation_base: 2,
            last_observation: None,
            abandoned_by: None,
            abandoned_reason: None,
            seen_ms: None,
            listed_ms: None,
            delete_sent_ms: None,
            deleted_ms: None,
            not_sent_ms: None,
            not_sent_reason: None,
            not_sent_count: 0,
        }
    }

    /// Each state of a create, read from the columns that record it, with
    /// their precedence: an abandonment outranks an id, an id a refusal, a
    /// refusal a send that never left, that a missing mark.
    #[test]
    fn the_ledger_reads_each_state_of_a_create() {
        let r = claimed();
        assert_eq!(r.effect(), Effect::Unmarked { not_sent: 0, observations: 3 });
        let sent = ReceiptRow { sent_ms: Some(2), ..claimed() };
        assert_eq!(sent.effect(), Effect::Unknown { observations: 3 });
        let not_sent = ReceiptRow {
            sent_ms: Some(2),
            not_sent_ms: Some(3),
            not_sent_reason: Some("no connection".into()),
            not_sent_count: 2,
            ..claimed()
        };
        assert_eq!(not_sent.effect(), Effect::NotSent { count: 2, reason: "no connection".into() });
        let rejected =
            ReceiptRow { rejection_status: Some(422), rejection_message: Some("no".into()), ..not_sent.clone() };
        assert_eq!(rejected.effect(), Effect::Rejected { status: 422, message: "no".into() });
        let known =
            ReceiptRow { resource_id: Some("i-1".into()), resource_id_source: Some(IdSource::Response), ..rejected };
        assert_eq!(
            known.effect(),
            Effect::Known { id: "i-1".into(), source: Some(IdSource::Response), observations: 3 }
        );
        let abandoned =
            ReceiptRow { abandoned_by: Some("ops".into()), abandoned_reason: Some("why".into()), ..known.clone() };
        assert_eq!(
            abandoned.effect(),
            Effect::Abandoned { by: "ops".into(), reason: "why".into(), id: Some("i-1".into()), observations: 3 }
        );
        assert!(!abandoned.is_open() && known.is_open() && !not_sent.is_open() && sent.is_open());
        assert_eq!(known.effect().id(), Some("i-1"));
        assert!(!known.effect().is_uncertain() && r.effect().is_uncertain());
    }
}
