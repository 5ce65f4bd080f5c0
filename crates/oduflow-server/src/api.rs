//! The JSON API under `/api/v1`: thin handlers that validate with the model's
//! own parsers (the CLI's rules, exactly), call the store or the engine's
//! operator actions, and shape the answer. Every handler's OpenAPI
//! description sits on it, so the document is generated from this code.

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, ApiQuery, ClientPath};
use crate::resolve::{Resolution, resolutions};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use oduflow_engine::operator;
use oduflow_model::identity::Settle;
use oduflow_model::{BlockedReason, ClientId, ClientSpec, ClientStatus, ImageSource, ResourceKind, Target};
use oduflow_store::{ClientRow, EventRow, JobRow, ReceiptRow};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::{IntoParams, ToSchema};

/// Events returned when no `limit` is given: a screenful.
const EVENTS_LIMIT_DEFAULT: i64 = 100;
/// Most events one request may ask for: bounds the answer's size.
const EVENTS_LIMIT_MAX: i64 = 1000;
/// Longest attestation fields: a name and a sentence or two, not a document.
use oduflow_model::audit::{BY_LEN_MAX, REASON_LEN_MAX};
/// Longest event kind filter (kinds are short snake_case words).
const EVENT_KIND_LEN_MAX: usize = 64;

fn string_enum(values: impl IntoIterator<Item = &'static str>) -> Object {
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some(values)).build()
}
fn status_schema() -> Object {
    string_enum(ClientStatus::ALL.iter().map(|s| s.as_str()))
}
fn reason_schema() -> Object {
    string_enum(BlockedReason::ALL.iter().map(|s| s.as_str()))
}
/// A blocked reason, or null (a client that is not blocked).
fn reason_or_null_schema() -> Object {
    let values = BlockedReason::ALL.iter().map(|s| serde_json::Value::from(s.as_str()));
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(values.chain([serde_json::Value::Null])))
        .build()
}
fn target_schema() -> Object {
    string_enum(Target::ALL.iter().map(|s| s.as_str()))
}

// ---- views ---------------------------------------------------------------

/// A client with its infra record, as shown to operators. The key appears
/// only as the first 12 hex digits of its SHA-256 fingerprint.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClientView {
    pub id: String,
    pub name: String,
    #[schema(schema_with = status_schema)]
    pub status: ClientStatus,
    #[schema(schema_with = reason_or_null_schema)]
    pub blocked_reason: Option<BlockedReason>,
    /// The engine's evidence for the block.
    pub blocked_detail: Option<String>,
    #[schema(schema_with = target_schema)]
    pub target: Target,
    pub generation: i64,
    pub region: String,
    pub plan: String,
    /// The image source, e.g. `os_id 2284` or `snapshot_id <id>`.
    pub image: String,
    /// Set when the image source is an operating system.
    pub os_id: Option<i64>,
    pub volume_gb: i64,
    pub volume_type: String,
    pub hostname: String,
    /// The DNS record name (relative to the DNS domain).
    pub dns_name: String,
    pub ssh_keys: Vec<String>,
    pub tags: Vec<String>,
    pub firewall_group: Option<String>,
    /// IPv6 asked for.
    pub enable_ipv6: bool,
    pub vpcs: Vec<String>,
    /// The backup schedule, e.g. `weekly:1:3`; `null` when off.
    pub backups: Option<String>,
    /// Bytes of user data sent (its text is readable through Vultr's API,
    /// and not repeated here).
    pub user_data_bytes: usize,
    /// Main IPv4, IPv6 and the volume's mount id (the guest device is
    /// `/dev/disk/by-id/virtio-<id>`) as last seen ready; `""` until then.
    pub ipv4: String,
    pub ipv6: String,
    pub volume_mount_id: String,
    pub vm_id: Option<String>,
    pub volume_id: Option<String>,
    pub key_fingerprint: Option<String>,
    /// Imported and not yet promoted: tracked and verified, never changed.
    pub observe_only: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl From<&ClientRow> for ClientView {
    fn from(r: &ClientRow) -> Self {
        let i = &r.infra;
        ClientView {
            id: r.id.to_string(),
            name: r.name.clone(),
            status: i.status,
            blocked_reason: i.blocked_reason,
            blocked_detail: i.blocked_detail.clone(),
            target: i.target,
            generation: i.generation,
            region: i.spec.region.clone(),
            plan: i.spec.plan.clone(),
            image: i.spec.image.to_string(),
            os_id: i.spec.image.os_id(),
            volume_gb: i.spec.volume_gb,
            volume_type: i.spec.volume_type.as_str().to_owned(),
            hostname: i.spec.server.hostname.clone(),
            dns_name: i.spec.dns_name.clone().unwrap_or_else(|| r.name.clone()),
            ssh_keys: i.spec.server.ssh_keys.clone(),
            tags: i.spec.server.tags.clone(),
            firewall_group: i.spec.server.firewall_group.clone(),
            enable_ipv6: i.spec.server.ipv6,
            vpcs: i.spec.server.vpcs.clone(),
            backups: i.spec.server.backups.map(|b| b.to_string()),
            user_data_bytes: i.spec.server.user_data.as_ref().map_or(0, String::len),
            ipv4: i.outputs.main_ip.clone(),
            ipv6: i.outputs.v6_main_ip.clone(),
            volume_mount_id: i.outputs.mount_id.clone(),
            vm_id: i.vm_id.as_ref().map(|v| v.to_string()),
            volume_id: i.volume_id.as_ref().map(|v| v.to_string()),
            key_fingerprint: i.key_fingerprint.as_ref().map(|k| k.short().to_owned()),
            observe_only: i.observe_only,
            created_ms: r.created_ms,
            updated_ms: i.updated_ms,
        }
    }
}

/// One client with its evidence: receipts (the durable record of every
/// dispatch), jobs, and for a blocked client the commands that resolve it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClientDetail {
    pub client: ClientView,
    pub receipts: Vec<ReceiptRow>,
    pub jobs: Vec<JobRow>,
    pub resolutions: Vec<Resolution>,
    /// Change receipts (`client update`): one per resource and spec
    /// generation, with the PATCH sent and what reads confirmed.
    pub changes: Vec<oduflow_store::ChangeRow>,
    /// The identity adapters' state (DNS record, VPN peer, Salt key...):
    /// ensured or failed, what each owns, as `client show --json` has it.
    pub adapters: Vec<oduflow_store::AdapterStateRow>,
}

/// A change to a client's spec. Every field is optional; at least one is
/// needed. In place: a larger `plan`, a larger `volume_gb`, `tags` (the
/// whole list) and `firewall_group` (`""` detaches it); `region` only while
/// nothing was created yet. What Vultr cannot do in place is answered 422.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientUpdate {
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub plan: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub volume_gb: Option<i64>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub firewall_group: Option<String>,
    /// Another DNS record name (`""`: the client's name); the records are
    /// renamed in place.
    #[serde(default)]
    pub dns_name: Option<String>,
    /// Refused with 422: another image means a reinstall (out of scope).
    #[serde(default)]
    pub os_id: Option<i64>,
    #[serde(default)]
    pub snapshot_id: Option<String>,
    #[serde(default)]
    pub app_id: Option<i64>,
    #[serde(default)]
    pub image_id: Option<String>,
}

/// The answer to a create or delete: the intent and its job are committed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    pub client: ClientView,
    /// The queued job that carries the change out.
    pub job_id: Option<i64>,
}

/// A blocked client awaiting an operator.
#[derive(Debug, Serialize, ToSchema)]
pub struct Intervention {
    pub client: ClientView,
    #[schema(schema_with = reason_schema)]
    pub reason: BlockedReason,
    /// The engine's evidence text.
    pub evidence: Option<String>,
    /// The client's receipts: what was sent, what came back, observations.
    pub receipts: Vec<ReceiptRow>,
    pub resolutions: Vec<Resolution>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QueueView {
    pub paused: bool,
    pub queued: i64,
    pub runnable: i64,
    pub done: i64,
    pub stale: i64,
    pub failed: i64,
    pub next_run_after_ms: Option<i64>,
    pub unsettled_clients: i64,
    /// Set after a restore until `oduflow reconcile --all` has run; the queue
    /// claims nothing meanwhile.
    pub restore_pending: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    /// `ok`: it answered a query just now.
    pub database: String,
}

// ---- requests ------------------------------------------------------------

/// Intent for a new client: the fields of `oduflow client create`, with the
/// same rules. `profile` names a `[profile.NAME]` of the server's config
/// file, whose fields the others override; without one, region, plan,
/// volume_gb and exactly one image source are required.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCreate {
    /// Lowercase letters, digits and hyphens; starts with a letter, does not
    /// end with a hyphen; at most 63 characters.
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", min_length = 1, max_length = 63)]
    pub name: String,
    #[serde(default)]
    pub profile: Option<String>,
    /// Vultr region id, e.g. ewr.
    #[serde(default)]
    #[schema(pattern = "^[a-z]{3,4}$")]
    pub region: Option<String>,
    /// Vultr plan id, e.g. vc2-1c-1gb.
    #[serde(default)]
    #[schema(pattern = "^[a-z][a-z0-9-]{0,63}$")]
    pub plan: Option<String>,
    /// Image source: exactly one of os_id, snapshot_id, app_id, image_id.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub os_id: Option<i64>,
    #[serde(default)]
    pub snapshot_id: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub app_id: Option<i64>,
    #[serde(default)]
    pub image_id: Option<String>,
    /// 10..=10000 for high_perf, 40..=40000 for storage_opt.
    #[serde(default)]
    #[schema(minimum = 10, maximum = 40000)]
    pub volume_gb: Option<i64>,
    /// high_perf (default) or storage_opt.
    #[serde(default)]
    pub volume_type: Option<VolumeTypeParam>,
    /// Vultr SSH key ids.
    #[serde(default)]
    pub ssh_keys: Option<Vec<String>>,
    /// cloud-init user data (the text; base64 is done for you). The
    /// variables {{oduflow.client}}, {{oduflow.hostname}}, {{oduflow.region}}
    /// and {{oduflow.plan}} are substituted. Readable through Vultr's API and
    /// inside the VM: no secrets.
    #[serde(default)]
    #[schema(max_length = 65536)]
    pub user_data: Option<String>,
    /// Default: `<name>.<hostname_domain>`, else the client's name.
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub firewall_group: Option<String>,
    #[serde(default)]
    pub ipv6: Option<bool>,
    #[serde(default)]
    pub vpcs: Option<Vec<String>>,
    /// daily:HOUR, weekly:DOW:HOUR, monthly:DOM:HOUR, daily_alt_even:HOUR,
    /// daily_alt_odd:HOUR (UTC), or disabled.
    #[serde(default)]
    pub backups: Option<String>,
    /// The DNS record name, relative to the configured DNS domain (default:
    /// the client's name).
    #[serde(default)]
    pub dns_name: Option<String>,
    /// Check the spec against Vultr's catalog before anything is stored, as
    /// `oduflow client create` does: a spec the catalog refuses (a region or
    /// plan that does not exist, a firewall group the account lacks) is
    /// answered 422 with the CLI's words and nothing is stored; a catalog
    /// that cannot be read, 502. Default true; `false` skips it, as
    /// `--no-preflight` does (a catalog read costs several requests of the
    /// shared rate budget), and the worker checks before the first create.
    #[serde(default)]
    pub preflight: Option<bool>,
    /// The id of a client a restored copy of the database lost, which its
    /// resources' labels name: its first provisioning adopts them instead
    /// of creating them again (`oduflow client create --recover`).
    #[serde(default)]
    pub recover: Option<String>,
}

#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VolumeTypeParam {
    HighPerf,
    StorageOpt,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// Allocate the next dispatch generation; allowed only after a
    /// definitive rejection (400/401/403/422) of the current create.
    #[serde(default)]
    pub new_dispatch: bool,
}

#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdoptKind {
    Vm,
    Volume,
    /// A record at the client's DNS name (a client blocked
    /// `dns_record_foreign` or `uncertain_dns_record`).
    Dns,
}

#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AbandonKind {
    Vm,
    Volume,
    Attach,
    /// The DNS record creates whose outcome is unknown (a client blocked
    /// `uncertain_dns_record`).
    Dns,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdoptRequest {
    pub kind: AdoptKind,
    /// The Vultr id (a UUID) of the resource to record.
    #[schema(pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")]
    pub id: String,
}

/// Who attests an action on an orphan, and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    /// Who attests that the orphan is to be deleted.
    #[schema(min_length = 1, max_length = 100)]
    pub by: String,
    /// Why (what was checked).
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AbandonRequest {
    pub kind: AbandonKind,
    /// Who attests that the dispatch is to be given up.
    #[schema(min_length = 1, max_length = 100)]
    pub by: String,
    /// Why (what was checked).
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: String,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DryRun {
    /// Report what would be done; record nothing.
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ClientFilter {
    /// Only clients in this status.
    #[param(schema_with = status_schema)]
    pub status: Option<ClientStatus>,
    /// Only clients blocked for this reason.
    #[param(schema_with = reason_schema)]
    pub blocked_reason: Option<BlockedReason>,
    /// Only clients with this target.
    #[param(schema_with = target_schema)]
    pub target: Option<Target>,
    /// Only clients in this region (three or four lowercase letters).
    #[param(pattern = "^[a-z]{3,4}$")]
    pub region: Option<String>,
    /// Only clients whose name matches: `*` stands for any run of
    /// characters (shop-*).
    #[param(pattern = "^[a-z0-9*-]{1,63}$")]
    pub name: Option<String>,
    /// Only clients whose record has not changed for at least this long
    /// (90s, 15m, 2h, 3d; at most 365 days).
    #[param(pattern = "^[0-9]{1,6}[smhd]$")]
    pub unchanged_for: Option<String>,
    /// A page of the list: at most this many clients (1 to 1,000), in
    /// name order; the header `X-Total-Count` says how many are selected.
    /// Lists only (a bulk action takes the whole selection).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Clients skipped before the page.
    pub offset: Option<usize>,
}

impl ClientFilter {
    /// The selection `client list` makes from the same words; a bad
    /// pattern, region or duration is refused (422) with its text.
    fn select(self) -> ApiResult<oduflow_store::ClientSelect> {
        if self.limit.is_some_and(|l| !(1..=LIST_LIMIT_MAX).contains(&l)) {
            return Err(ApiError::InvalidInput(format!("limit: from 1 to {LIST_LIMIT_MAX}")));
        }
        let typed = oduflow_store::ClientSelect {
            status: self.status,
            blocked_reason: self.blocked_reason,
            target: self.target,
            ..Default::default()
        };
        typed
            .with_words(self.region.as_deref(), self.name.as_deref(), self.unchanged_for.as_deref())
            .map_err(ApiError::InvalidInput)
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventFilter {
    /// Only events of this kind (e.g. client_created, reconcile_requested):
    /// one of the kinds oduflow writes; any other is refused (422).
    #[param(pattern = "^[a-z0-9_]{1,64}$")]
    pub kind: Option<String>,
    /// At most this many, newest first (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

// ---- helpers -------------------------------------------------------------

async fn client_or_404(s: &AppState, name: &str) -> ApiResult<ClientRow> {
    s.store().client_get(name).await?.ok_or_else(|| ApiError::NotFound(format!("no client named {name}")))
}

async fn latest_queued_job(s: &AppState, c: &ClientRow) -> ApiResult<Option<i64>> {
    Ok(s.store()
        .jobs_for_client(&c.id)
        .await?
        .iter()
        .rev()
        .find(|j| j.state == oduflow_model::JobState::Queued)
        .map(|j| j.id.0))
}

/// Free text recorded in the audit trail (`oduflow_model::audit`: the CLI's
/// rule too): trimmed, bounded, no control characters.
fn attestation(field: &str, v: &str, max: usize) -> ApiResult<String> {
    oduflow_model::audit::attestation(field, v, max).map_err(ApiError::InvalidInput)
}

// ---- handlers ------------------------------------------------------------

/// How long `/health` waits for the database's answer to one query.
pub const HEALTH_DB_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Liveness, and whether the database answers one query within
/// [`HEALTH_DB_WAIT`] (else 503 `database_down`); the only route open
/// without a token. Says nothing about the data.
#[utoipa::path(get, path = "/health", tag = "system", security(()),
    responses((status = 200, body = Health), (status = 503, body = ErrorBody)))]
pub async fn health(State(s): State<AppState>) -> ApiResult<Json<Health>> {
    match tokio::time::timeout(HEALTH_DB_WAIT, s.store().schema_version()).await {
        Ok(Ok(_)) => Ok(Json(Health { status: "ok".into(), database: "ok".into() })),
        Ok(Err(e)) => Err(ApiError::DatabaseDown(Some(e))),
        Err(_) => Err(ApiError::DatabaseDown(None)),
    }
}

/// Every client, optionally filtered.
#[utoipa::path(get, path = "/api/v1/clients", tag = "clients", params(ClientFilter),
    responses((status = 200, body = Vec<ClientView>), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clients_list(State(s): State<AppState>, ApiQuery(f): ApiQuery<ClientFilter>) -> ApiResult<Response> {
    let (limit, offset) = (f.limit.unwrap_or(usize::MAX), f.offset.unwrap_or(0));
    let select = f.select()?;
    let rows = s.store().client_list().await?;
    let now = s.now_ms();
    let selected: Vec<&ClientRow> = rows.iter().filter(|c| select.matches(c, now)).collect();
    let page: Vec<ClientView> = selected.iter().skip(offset).take(limit).map(|c| ClientView::from(*c)).collect();
    Ok(([("x-total-count", selected.len().to_string())], Json(page)).into_response())
}

/// The most clients one page of `GET /api/v1/clients` holds.
pub const LIST_LIMIT_MAX: usize = 1000;

/// A bulk action takes its whole selection: a page of it is refused.
fn whole(f: &ClientFilter) -> ApiResult<()> {
    match f.limit.is_some() || f.offset.is_some() {
        true => {
            Err(ApiError::InvalidInput("limit and offset page a list; a bulk action takes the whole selection".into()))
        }
        false => Ok(()),
    }
}

/// Records intent for a new client (`present`) and enqueues provisioning.
/// Answered only after the intent and its job are committed.
#[utoipa::path(post, path = "/api/v1/clients", tag = "clients", request_body = ClientCreate,
    responses((status = 201, body = Accepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 502, description = "preflight asked, and Vultr's catalog could not be read", body = ErrorBody)))]
pub async fn clients_create(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<ClientCreate>,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let name = oduflow_model::ClientName::parse(&req.name)?;
    let recover = req.recover.as_deref().map(ClientId::parse).transpose().map_err(ApiError::InvalidInput)?;
    let checker = s.provider().filter(|_| req.preflight.unwrap_or(true));
    let spec = spec_of(&s, &name, req)?;
    let row = operator::client_create(
        s.store(),
        checker.as_deref(),
        &name,
        &spec,
        recover.as_ref(),
        s.actor(&caller.actor()),
    )
    .await?;
    let job_id = latest_queued_job(&s, &row).await?;
    Ok((StatusCode::CREATED, Json(Accepted { client: (&row).into(), job_id })))
}

/// States a client's whole desired spec in one idempotent call, the body
/// that of `POST /api/v1/clients` (its `name` the path's): a client that
/// does not exist (or was deleted) is created (201, after the same
/// preflight); one whose spec differs is updated with what differs (202,
/// refused as `PATCH` would be, or 422 naming a field no update changes);
/// one that already has it is left alone (200, no job).
#[utoipa::path(put, path = "/api/v1/clients/{name}", tag = "clients", request_body = ClientCreate,
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = Accepted, description = "the client already has this spec"),
        (status = 201, body = Accepted), (status = 202, body = Accepted),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 502, body = ErrorBody)))]
pub async fn clients_put(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ClientPath(name): ClientPath,
    ApiJson(req): ApiJson<ClientCreate>,
) -> ApiResult<Response> {
    if req.name != name.as_str() {
        return Err(ApiError::InvalidInput(format!("the body names {:?}, the path {name}", req.name)));
    }
    if req.recover.is_some() {
        return Err(ApiError::InvalidInput("recover is for POST /api/v1/clients only".into()));
    }
    let checker = s.provider().filter(|_| req.preflight.unwrap_or(true));
    let spec = spec_of(&s, &name, req)?;
    let current = s.store().client_get(name.as_str()).await?;
    let Some(c) = current.filter(|c| c.infra.target == oduflow_model::Target::Present) else {
        let by = caller.actor();
        let row = operator::client_create(s.store(), checker.as_deref(), &name, &spec, None, s.actor(&by)).await?;
        let job_id = latest_queued_job(&s, &row).await?;
        return Ok((StatusCode::CREATED, Json(Accepted { client: (&row).into(), job_id })).into_response());
    };
    let update =
        oduflow_model::update::desired_update(name.as_str(), &c.infra.spec, &spec).map_err(ApiError::InvalidInput)?;
    if update == oduflow_model::update::SpecUpdate::default() {
        return Ok((StatusCode::OK, Json(Accepted { client: (&c).into(), job_id: None })).into_response());
    }
    let by = caller.actor();
    let row = operator::client_update(s.store(), checker.as_deref(), name.as_str(), &update, s.actor(&by)).await?.row;
    let job_id = latest_queued_job(&s, &row).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { client: (&row).into(), job_id })).into_response())
}

/// The request over its profile, validated into a spec.
fn spec_of(s: &AppState, name: &oduflow_model::ClientName, req: ClientCreate) -> ApiResult<ClientSpec> {
    let profile = req.profile.clone();
    let over = oduflow_model::SpecInput {
        region: req.region,
        plan: req.plan,
        os_id: req.os_id,
        snapshot_id: req.snapshot_id,
        app_id: req.app_id,
        image_id: req.image_id,
        volume_gb: req.volume_gb,
        volume_type: req.volume_type.map(|v| match v {
            VolumeTypeParam::HighPerf => "high_perf".to_owned(),
            VolumeTypeParam::StorageOpt => "storage_opt".to_owned(),
        }),
        ssh_keys: req.ssh_keys,
        user_data: req.user_data,
        hostname: req.hostname,
        tags: req.tags,
        firewall_group: req.firewall_group,
        ipv6: req.ipv6,
        vpcs: req.vpcs,
        backups: req.backups,
        dns_name: req.dns_name,
    };
    let input = oduflow_model::SpecInput::from_profile(s.profiles(), profile.as_deref(), over)
        .map_err(|e| ApiError::InvalidInput(e.to_string()))?;
    Ok(input.resolve(name, s.spec_defaults())?)
}

/// Status, evidence, receipts, jobs and resolutions of one client.
#[utoipa::path(get, path = "/api/v1/clients/{name}", tag = "clients",
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = ClientDetail), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn clients_show(State(s): State<AppState>, ClientPath(name): ClientPath) -> ApiResult<Json<ClientDetail>> {
    let c = client_or_404(&s, name.as_str()).await?;
    let receipts = s.store().receipts_for_client(&c.id).await?;
    let jobs = s.store().jobs_for_client(&c.id).await?;
    let resolutions = resolutions(&c, &receipts);
    let changes = s.store().changes_for_client(&c.id).await?;
    let adapters = s.store().adapter_states(&c.id).await?;
    Ok(Json(ClientDetail { client: (&c).into(), receipts, jobs, resolutions, changes, adapters }))
}

/// Changes the client's spec in place and enqueues the change (a blocked
/// client keeps its block until reconciled). Answered only after the new
/// spec, the new generation and the job are committed.
/// With `?dry_run=true`: 200 and field by field what would change and
/// what each change does, refused as the update would be; nothing recorded.
#[utoipa::path(patch, path = "/api/v1/clients/{name}", tag = "clients", request_body = ClientUpdate,
    params(("name" = String, Path, description = "client name", example = "acme"), DryRun),
    responses((status = 202, body = Accepted), (status = 200, description = "a dry run: name, changes (field, from, to, effect), stays_blocked, plan_unchecked", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clients_update(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ClientPath(name): ClientPath,
    ApiQuery(dry): ApiQuery<DryRun>,
    ApiJson(req): ApiJson<ClientUpdate>,
) -> ApiResult<Response> {
    let image = [
        req.os_id.map(ImageSource::Os),
        req.snapshot_id.map(ImageSource::Snapshot),
        req.app_id.map(ImageSource::App),
        req.image_id.map(ImageSource::Image),
    ]
    .into_iter()
    .flatten()
    .next();
    let update = oduflow_model::update::SpecUpdate {
        region: req.region,
        plan: req.plan,
        volume_gb: req.volume_gb,
        tags: req.tags,
        firewall_group: req.firewall_group,
        dns_name: req.dns_name,
        image,
    };
    // A plan not checked now (a failed read) the worker checks before it
    // sends anything.
    let provider = s.provider();
    if dry.dry_run {
        let plan = operator::client_update_plan(s.store(), provider.as_deref(), name.as_str(), &update).await?;
        return Ok(Json(plan).into_response());
    }
    let row = operator::client_update(s.store(), provider.as_deref(), name.as_str(), &update, s.actor(&caller.actor()))
        .await?
        .row;
    let job_id = latest_queued_job(&s, &row).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { client: (&row).into(), job_id })).into_response())
}

/// Sets the target to `absent` and enqueues deletion. Answered only after
/// the intent and its job are committed. Deleting again changes nothing.
/// With `?dry_run=true`: 200 and what deletion would remove (resources
/// and identities); nothing recorded.
#[utoipa::path(delete, path = "/api/v1/clients/{name}", tag = "clients",
    params(("name" = String, Path, description = "client name", example = "acme"), DryRun),
    responses((status = 202, body = Accepted), (status = 200, description = "a dry run: name, already_absent, deletes (what, detail)", body = Object),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clients_delete(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ClientPath(name): ClientPath,
    ApiQuery(dry): ApiQuery<DryRun>,
) -> ApiResult<Response> {
    if dry.dry_run {
        return Ok(Json(operator::client_delete_plan(s.store(), name.as_str()).await?).into_response());
    }
    let row = operator::client_delete(s.store(), name.as_str(), s.actor(&caller.actor())).await?;
    let job_id = latest_queued_job(&s, &row).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { client: (&row).into(), job_id })).into_response())
}

/// The client's receipts (read-only; receipts are never changed here).
#[utoipa::path(get, path = "/api/v1/clients/{name}/receipts", tag = "evidence",
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = Vec<ReceiptRow>), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn clients_receipts(
    State(s): State<AppState>,
    ClientPath(name): ClientPath,
) -> ApiResult<Json<Vec<ReceiptRow>>> {
    let c = client_or_404(&s, name.as_str()).await?;
    Ok(Json(s.store().receipts_for_client(&c.id).await?))
}

/// The client's audit events, oldest first.
#[utoipa::path(get, path = "/api/v1/clients/{name}/events", tag = "evidence",
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = Vec<EventRow>), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn clients_events(State(s): State<AppState>, ClientPath(name): ClientPath) -> ApiResult<Json<Vec<EventRow>>> {
    let c = client_or_404(&s, name.as_str()).await?;
    Ok(Json(s.store().events_for_client(&c.id).await?))
}

/// Observe again (a fresh polling budget), or with `new_dispatch` start the
/// next dispatch generation after a definitive rejection.
#[utoipa::path(post, path = "/api/v1/clients/{name}/reconcile", tag = "actions", request_body = ReconcileRequest,
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = ClientView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "refused by the protocol, or bound to another API key than the server's (key_mismatch)", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clients_reconcile(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ClientPath(name): ClientPath,
    ApiJson(req): ApiJson<ReconcileRequest>,
) -> ApiResult<Json<ClientView>> {
    let row = operator::reconcile(
        s.store(),
        s.acting_provider()?.as_ref(),
        name.as_str(),
        req.new_dispatch,
        s.actor(&caller.actor()),
    )
    .await?;
    Ok(Json((&row).into()))
}

/// Records a named resource for a dispatch whose outcome is unknown, after
/// verifying its region, configuration and that nothing else records it.
#[utoipa::path(post, path = "/api/v1/clients/{name}/adopt", tag = "actions", request_body = AdoptRequest,
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = ClientView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "refused by the protocol, or bound to another API key than the server's (key_mismatch)", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clients_adopt(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ClientPath(name): ClientPath,
    ApiJson(req): ApiJson<AdoptRequest>,
) -> ApiResult<Json<ClientView>> {
    // Vultr ids are hyphenated UUIDs; anything else is refused before the
    // provider is asked (the CLI's `adopt` checks the same rule).
    oduflow_model::check_resource_id(&req.id).map_err(ApiError::InvalidInput)?;
    let kind = match req.kind {
        AdoptKind::Vm => ResourceKind::Vm,
        AdoptKind::Volume => ResourceKind::Volume,
        AdoptKind::Dns => {
            let (by, adapter) = (caller.actor(), s.dns_adapter()?);
            let actor = s.actor(&by);
            let how = Settle::Adopt { id: &req.id, by: &by, now_ms: actor.now_ms };
            let row = operator::identity_settle(s.store(), &adapter, name.as_str(), how, actor).await?;
            return Ok(Json((&row).into()));
        }
    };
    client_or_404(&s, name.as_str()).await?;
    let row = operator::adopt(
        s.store(),
        s.acting_provider()?.as_ref(),
        name.as_str(),
        kind,
        &req.id,
        s.actor(&caller.actor()),
    )
    .await?;
    Ok(Json((&row).into()))
}

/// Gives up an uncertain dispatch on a recorded attestation (who and why);
/// its label stays on the inventory watch list.
#[utoipa::path(post, path = "/api/v1/clients/{name}/abandon", tag = "actions", request_body = AbandonRequest,
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = ClientView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "refused by the protocol", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clients_abandon(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ClientPath(name): ClientPath,
    ApiJson(req): ApiJson<AbandonRequest>,
) -> ApiResult<Json<ClientView>> {
    let by = attestation("by", &req.by, BY_LEN_MAX)?;
    let reason = attestation("reason", &req.reason, REASON_LEN_MAX)?;
    // The attestation names a person; the token that sent it is kept too.
    let by = format!("{by} (via {})", caller.actor());
    let kind = match req.kind {
        AbandonKind::Vm => ResourceKind::Vm,
        AbandonKind::Volume => ResourceKind::Volume,
        AbandonKind::Attach => ResourceKind::Attach,
        AbandonKind::Dns => {
            let how = Settle::Abandon { by: &by, reason: &reason };
            let row = operator::identity_settle(s.store(), &s.dns_adapter()?, name.as_str(), how, s.actor(&by)).await?;
            return Ok(Json((&row).into()));
        }
    };
    let row = operator::abandon(s.store(), name.as_str(), kind, &reason, s.actor(&by)).await?;
    Ok(Json((&row).into()))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReconcileRequest {
    /// Report what each selected client would get; record nothing.
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkAbandonRequest {
    /// vm, volume or attach.
    pub kind: AbandonKind,
    /// Who attests, for every selected client.
    #[schema(min_length = 1, max_length = 100)]
    pub by: String,
    /// Why (what was checked), recorded with each client.
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: String,
    #[serde(default)]
    pub dry_run: bool,
}

/// `oduflow bulk reconcile` over HTTP: the clients the query selects (as
/// `GET /api/v1/clients` does; at least one parameter, at most 1,000
/// clients) each reconciled, each with its own outcome and audit record.
#[utoipa::path(post, path = "/api/v1/bulk/reconcile", tag = "actions", params(ClientFilter),
    request_body = BulkReconcileRequest,
    responses((status = 200, body = Object, description = "action, dry_run, items (name, outcome: done, would_do, refused or not_reached, detail), stopped"),
        (status = 401, body = ErrorBody), (status = 409, description = "no selection, too many clients, a pending restore, or a read-only server", body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn bulk_reconcile(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(f): ApiQuery<ClientFilter>,
    ApiJson(req): ApiJson<BulkReconcileRequest>,
) -> ApiResult<Json<operator::BulkReport>> {
    whole(&f)?;
    let select = f.select()?;
    let provider = s.acting_provider()?;
    let action = operator::BulkAction::Reconcile { provider: provider.as_ref() };
    let by = caller.actor();
    Ok(Json(operator::bulk(s.store(), &select, action, s.actor(&by), req.dry_run).await?))
}

/// `oduflow bulk abandon` over HTTP: the selected clients' uncertain
/// dispatches of one kind given up on one attestation, recorded with each.
#[utoipa::path(post, path = "/api/v1/bulk/abandon", tag = "actions", params(ClientFilter),
    request_body = BulkAbandonRequest,
    responses((status = 200, body = Object, description = "action, dry_run, items (name, outcome: done, would_do, refused or not_reached, detail), stopped"),
        (status = 401, body = ErrorBody), (status = 409, description = "no selection, too many clients, a pending restore, or a read-only server", body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn bulk_abandon(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(f): ApiQuery<ClientFilter>,
    ApiJson(req): ApiJson<BulkAbandonRequest>,
) -> ApiResult<Json<operator::BulkReport>> {
    whole(&f)?;
    let select = f.select()?;
    let by = attestation("by", &req.by, BY_LEN_MAX)?;
    let reason = attestation("reason", &req.reason, REASON_LEN_MAX)?;
    let by = format!("{by} (via {})", caller.actor());
    let kind = match req.kind {
        AbandonKind::Vm => ResourceKind::Vm,
        AbandonKind::Volume => ResourceKind::Volume,
        AbandonKind::Attach => ResourceKind::Attach,
        AbandonKind::Dns => {
            return Err(ApiError::InvalidInput(
                "kind dns: a bulk abandon takes vm, volume or attach; abandon DNS records one client at a time".into(),
            ));
        }
    };
    let action: operator::BulkAction<'_, oduflow_vultr::VultrClient> =
        operator::BulkAction::Abandon { kind, reason: &reason };
    Ok(Json(operator::bulk(s.store(), &select, action, s.actor(&by), req.dry_run).await?))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// Only servers whose label matches (`*` for any run of characters).
    pub label: Option<String>,
    /// Only servers carrying this tag.
    pub tag: Option<String>,
    /// Only servers in this region.
    pub region: Option<String>,
    /// Report what would be imported and what does not fit; record nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `oduflow import` over HTTP: servers made outside oduflow, each with its
/// one attached volume, recorded as clients that are ready and observed
/// only; nothing is sent but listings.
#[utoipa::path(post, path = "/api/v1/import", tag = "actions", request_body = ImportRequest,
    responses((status = 200, body = Object, description = "one item per server: vm, label, name, volume, outcome (imported, would_import, does_not_fit, recorded), detail"),
        (status = 401, body = ErrorBody), (status = 409, description = "a pending restore, or a read-only server", body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn import(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<ImportRequest>,
) -> ApiResult<Json<Vec<operator::ImportItem>>> {
    let filter = operator::ImportFilter { label: req.label, tag: req.tag, region: req.region };
    operator::check_import_filter(&filter).map_err(ApiError::InvalidInput)?;
    let provider = s.acting_provider()?;
    let by = caller.actor();
    let zone = match s.dns_zone() {
        Some(_) => Some(s.dns_adapter()?),
        None => None,
    };
    let dns = zone.as_ref().map(|z| operator::ImportDns { adapter: z, zone: z });
    let items = operator::import(s.store(), provider.as_ref(), &filter, dns, s.actor(&by), req.dry_run).await?;
    provider.flush_budget().await;
    Ok(Json(items))
}

/// Ends the observation of an imported client: managed from now on.
#[utoipa::path(post, path = "/api/v1/clients/{name}/promote", tag = "actions",
    params(("name" = String, Path, description = "client name", example = "acme")),
    responses((status = 200, body = ClientView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "not observed only, a pending restore, or a read-only server", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clients_promote(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ClientPath(name): ClientPath,
) -> ApiResult<Json<ClientView>> {
    let row = operator::client_promote(s.store(), name.as_str(), s.actor(&caller.actor())).await?;
    Ok(Json((&row).into()))
}

/// Blocked clients with their reason, evidence and resolving commands.
/// A page of a list: `limit` (1 to [`LIST_LIMIT_MAX`]) items after
/// `offset`; the header `X-Total-Count` says how many there are.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct Page {
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    pub offset: Option<usize>,
}

impl Page {
    /// The page of `all`, with their count in `X-Total-Count`.
    fn of<T: Serialize>(&self, all: Vec<T>) -> ApiResult<Response> {
        let total = all.len();
        let page: Vec<T> = self.cut(all)?;
        Ok(([("x-total-count", total.to_string())], Json(page)).into_response())
    }

    fn cut<T>(&self, all: Vec<T>) -> ApiResult<Vec<T>> {
        if self.limit.is_some_and(|l| !(1..=LIST_LIMIT_MAX).contains(&l)) {
            return Err(ApiError::InvalidInput(format!("limit: from 1 to {LIST_LIMIT_MAX}")));
        }
        Ok(all.into_iter().skip(self.offset.unwrap_or(0)).take(self.limit.unwrap_or(usize::MAX)).collect())
    }
}

/// Blocked clients with their reason, evidence and resolving commands, in
/// name order; `limit` and `offset` page them (only the page's receipts
/// are read).
#[utoipa::path(get, path = "/api/v1/interventions", tag = "actions", params(Page),
    responses((status = 200, body = Vec<Intervention>), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn interventions(State(s): State<AppState>, ApiQuery(page): ApiQuery<Page>) -> ApiResult<Response> {
    let blocked: Vec<(ClientRow, BlockedReason)> = s
        .store()
        .client_list()
        .await?
        .into_iter()
        .filter_map(|c| {
            let reason = c.infra.blocked_reason.filter(|_| c.infra.status == ClientStatus::Blocked)?;
            Some((c, reason))
        })
        .collect();
    let total = blocked.len();
    let mut out = vec![];
    for (c, reason) in page.cut(blocked)? {
        let receipts = s.store().receipts_for_client(&c.id).await?;
        out.push(Intervention {
            client: (&c).into(),
            reason,
            evidence: c.infra.blocked_detail.clone(),
            resolutions: resolutions(&c, &receipts),
            receipts,
        });
    }
    Ok(([("x-total-count", total.to_string())], Json(out)).into_response())
}

/// Every receipt (read-only).
#[utoipa::path(get, path = "/api/v1/receipts", tag = "evidence", params(Page),
    responses((status = 200, body = Vec<ReceiptRow>), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn receipts(State(s): State<AppState>, ApiQuery(page): ApiQuery<Page>) -> ApiResult<Response> {
    page.of(s.store().receipts_all().await?)
}

/// Resources under oduflow's label prefix that no receipt accounts for, as
/// the last inventory pass (`oduflow reconcile --all`) recorded them: open
/// ones, each with the command that resolves it. Read-only: the list costs
/// no provider call.
#[utoipa::path(get, path = "/api/v1/orphans", tag = "evidence",
    responses((status = 200, body = Vec<Object>), (status = 401, body = ErrorBody)))]
pub async fn orphans(State(s): State<AppState>) -> ApiResult<Json<Vec<Orphan>>> {
    Ok(Json(orphans_list(&s).await?))
}

/// One open orphan and how to resolve it.
#[derive(Serialize)]
pub struct Orphan {
    #[serde(flatten)]
    pub row: oduflow_store::OrphanRow,
    /// The client's name, when its label (or receipt) names a known client.
    pub client: Option<String>,
    pub resolve: Vec<String>,
}

pub(crate) async fn orphans_list(s: &AppState) -> ApiResult<Vec<Orphan>> {
    let mut out = vec![];
    for row in s.store().orphans_list(false).await? {
        let c = match &row.client_ref {
            Some(id) => s.store().client_get_by_id(&ClientId::from(id.as_str())).await?,
            None => None,
        };
        let resolve = operator::orphan_resolutions(&row.resource_id, c.as_ref());
        out.push(Orphan { row, client: c.map(|c| c.name), resolve });
    }
    Ok(out)
}

/// An orphan id in a path: a Vultr id (a UUID), checked before anything is
/// read.
fn orphan_id(id: &str) -> ApiResult<()> {
    oduflow_model::check_resource_id(id).map_err(|e| ApiError::InvalidInput(format!("{e}; nothing was recorded")))
}

/// Adopts an orphan into the client its label names (`oduflow orphan
/// adopt`), after the same checks as an adoption by id.
#[utoipa::path(post, path = "/api/v1/orphans/{id}/adopt", tag = "actions",
    params(("id" = String, Path, description = "the orphan's Vultr id")),
    responses((status = 200, body = ClientView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "refused by the protocol", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn orphans_adopt(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult<Json<ClientView>> {
    orphan_id(&id)?;
    let by = caller.actor();
    let row = operator::orphan_adopt(s.store(), s.acting_provider()?.as_ref(), &id, s.actor(&by)).await?;
    Ok(Json((&row).into()))
}

/// What an orphan's deletion did: a VM's or volume's, or a DNS record's.
#[derive(Serialize)]
#[serde(untagged)]
pub enum OrphanDeletedView {
    Resource(operator::OrphanDeleted),
    Dns(oduflow_engine::dns_inventory::DnsOrphanDeleted),
}

/// Deletes an orphan on a recorded attestation (`oduflow orphan delete`):
/// a VM or volume of the last inventory pass, or a DNS record a listing
/// taken now shows is one, after checking again that no live client
/// accounts for it.
#[utoipa::path(post, path = "/api/v1/orphans/{id}/delete", tag = "actions", request_body = Attestation,
    params(("id" = String, Path, description = "the orphan's Vultr id")),
    responses((status = 200, body = Object, description = "id, kind, confirmed, note"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "refused by the protocol", body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 502, body = ErrorBody)))]
pub async fn orphans_delete(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(id): axum::extract::Path<String>,
    ApiJson(req): ApiJson<Attestation>,
) -> ApiResult<Json<OrphanDeletedView>> {
    orphan_id(&id)?;
    let by = attestation("by", &req.by, BY_LEN_MAX)?;
    let reason = attestation("reason", &req.reason, REASON_LEN_MAX)?;
    let by = format!("{by} (via {})", caller.actor());
    // A DNS record the inventory traced is no row of the orphans table.
    if s.dns_zone().is_some() && s.store().orphan_get(&id).await?.is_none() {
        let zone = s.dns_adapter()?;
        let d =
            oduflow_engine::dns_inventory::dns_orphan_delete(s.store(), &zone, &id, (&by, &reason), s.now_ms()).await?;
        return Ok(Json(OrphanDeletedView::Dns(d)));
    }
    let d = operator::orphan_delete(s.store(), s.acting_provider()?.as_ref(), &id, &reason, s.actor(&by)).await?;
    Ok(Json(OrphanDeletedView::Resource(d)))
}

/// Recent audit events, newest first.
#[utoipa::path(get, path = "/api/v1/events", tag = "evidence", params(EventFilter),
    responses((status = 200, body = Vec<EventRow>), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn events(State(s): State<AppState>, ApiQuery(f): ApiQuery<EventFilter>) -> ApiResult<Json<Vec<EventRow>>> {
    let limit = f.limit.unwrap_or(EVENTS_LIMIT_DEFAULT);
    if !(1..=EVENTS_LIMIT_MAX).contains(&limit) {
        return Err(ApiError::InvalidInput(format!("limit must be within 1..={EVENTS_LIMIT_MAX}")));
    }
    let rows = match f.kind {
        Some(kind) => {
            // Event kinds are snake_case words; anything else cannot match,
            // and refusing it keeps odd bytes (NUL, which PostgreSQL text
            // cannot hold) away from the database.
            let snake = kind.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if kind.is_empty() || kind.len() > EVENT_KIND_LEN_MAX || !snake {
                return Err(ApiError::InvalidInput(format!(
                    "kind must be 1 to {EVENT_KIND_LEN_MAX} lowercase letters, digits or '_'"
                )));
            }
            let Some(kind) = oduflow_model::EventKind::parse(&kind) else {
                return Err(ApiError::InvalidInput(format!("kind {kind:?} is not an event kind oduflow writes")));
            };
            let mut rows = s.store().events_by_kind(kind).await?;
            rows.reverse();
            rows.truncate(limit as usize);
            rows
        }
        None => s.store().events_recent(limit).await?,
    };
    Ok(Json(rows))
}

async fn queue_view(s: &AppState) -> ApiResult<QueueView> {
    let q = s.store().queue_status(s.now_ms()).await?;
    Ok(QueueView {
        paused: q.paused,
        queued: q.queued,
        runnable: q.runnable,
        done: q.done,
        stale: q.stale,
        failed: q.failed,
        next_run_after_ms: q.next_run_after_ms,
        unsettled_clients: q.unsettled_clients,
        restore_pending: s.store().restore_pending().await?,
    })
}

/// Queue counts, paused flag and restore guard.
#[utoipa::path(get, path = "/api/v1/queue", tag = "queue",
    responses((status = 200, body = QueueView), (status = 401, body = ErrorBody)))]
pub async fn queue(State(s): State<AppState>) -> ApiResult<Json<QueueView>> {
    Ok(Json(queue_view(&s).await?))
}

/// Stops workers claiming jobs (running jobs finish).
#[utoipa::path(post, path = "/api/v1/queue/pause", tag = "queue",
    responses((status = 200, body = QueueView), (status = 401, body = ErrorBody)))]
pub async fn queue_pause(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<QueueView>> {
    s.store().queue_set_paused(true, &caller.actor(), s.now_ms()).await?;
    Ok(Json(queue_view(&s).await?))
}

/// Lets workers claim jobs again; refused while a restore is pending.
#[utoipa::path(post, path = "/api/v1/queue/resume", tag = "queue",
    responses((status = 200, body = QueueView), (status = 401, body = ErrorBody),
        (status = 409, description = "a restore is pending", body = ErrorBody)))]
pub async fn queue_resume(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<QueueView>> {
    operator::queue_resume(s.store(), &caller.actor(), s.now_ms()).await?;
    Ok(Json(queue_view(&s).await?))
}

/// `POST /api/v1/credentials/rotate`'s body: the new key, in the body
/// only (never in a URL), held in memory, never stored or echoed.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateRequest {
    /// The new Vultr API key.
    #[schema(example = "NEWKEY0123456789")]
    pub api_key: String,
}

impl std::fmt::Debug for RotateRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotateRequest").finish_non_exhaustive()
    }
}

/// What a rotation did.
#[derive(Debug, Serialize, ToSchema)]
pub struct RotateView {
    /// The clients whose records were rebound to the new key.
    pub rebound: Vec<String>,
    /// The new key's short fingerprint (never the key).
    pub key_fingerprint: String,
}

/// Longest API key accepted in a rotation body: Vultr's are 36 characters.
const API_KEY_LEN_MAX: usize = 256;

/// `oduflow credentials rotate` over HTTP: with the new key, proves
/// ownership of every recorded resource of every record bound to another
/// key, then rebinds them; refused (409, nothing rebound) when any cannot be
/// proven. The key is first checked with `GET /account` (422 if Vultr
/// refuses it). On success this server acts with the new key from then on.
#[utoipa::path(post, path = "/api/v1/credentials/rotate", tag = "actions", request_body = RotateRequest,
    responses((status = 200, body = RotateView), (status = 401, body = ErrorBody),
        (status = 409, description = "read-only server, a pending restore, or ownership not proven (nothing rebound)",
            body = ErrorBody),
        (status = 422, description = "the key is malformed or Vultr refused it", body = ErrorBody),
        (status = 502, body = ErrorBody)))]
pub async fn credentials_rotate(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<RotateRequest>,
) -> ApiResult<Json<RotateView>> {
    let key = req.api_key.trim();
    if key.is_empty() || key.len() > API_KEY_LEN_MAX || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::InvalidInput(format!(
            "api_key must be 1 to {API_KEY_LEN_MAX} printable ASCII characters without spaces"
        )));
    }
    let current = s.acting_provider()?;
    let new = Arc::new(
        current
            .with_key(secrecy::SecretString::from(key.to_owned()))
            .map_err(|e| ApiError::InvalidInput(format!("api_key: {e}")))?,
    );
    match new.account_get().await {
        Ok(_) => {}
        Err(oduflow_vultr::VultrError::Status { status: 401 | 403, .. }) => {
            return Err(ApiError::InvalidInput(format!(
                "Vultr refused the new key (fingerprint {}) on GET /account; nothing was rebound",
                new.fingerprint().short()
            )));
        }
        Err(e) => return Err(ApiError::Provider(e.into())),
    }
    let by = caller.actor();
    let actor = s.actor(&by);
    match operator::credentials_rotate(s.store(), new.as_ref(), actor).await? {
        Ok(rebound) => {
            let key_fingerprint = new.fingerprint().short().to_string();
            s.replace_provider(new);
            tracing::info!(key = %key_fingerprint, rebound = rebound.len(), "API key rotated; serve acts with the new key");
            Ok(Json(RotateView { rebound, key_fingerprint }))
        }
        Err(unproven) => {
            let list: Vec<String> = unproven
                .iter()
                .map(|u| format!("{} {} {}: {}", u.client, u.kind.as_str(), u.resource, u.why))
                .collect();
            Err(ApiError::Refused(format!(
                "rotation refused, nothing rebound; the new key could not prove ownership of: {}",
                list.join("; ")
            )))
        }
    }
}

/// `oduflow reconcile --all` over HTTP: compares the provider's inventory
/// under oduflow's label prefix with the receipts, from list pages, records
/// orphans, and clears a pending restore when it completes.
#[utoipa::path(post, path = "/api/v1/inventory", tag = "actions",
    responses((status = 200, body = Object, description = "instances_listed, blocks_listed, orphans, missing, unrecorded, dns_orphans"),
        (status = 401, body = ErrorBody), (status = 409, description = "read-only server", body = ErrorBody),
        (status = 502, body = ErrorBody)))]
pub async fn inventory(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<operator::Inventory>> {
    let provider = s.acting_provider()?;
    let by = caller.actor();
    let mut inv =
        operator::inventory_settled(s.store(), provider.as_ref(), &by, s.now_ms(), s.listing_settle_ms()).await?;
    if s.dns_zone().is_some() {
        inv.dns_orphans = oduflow_engine::dns_inventory::dns_inventory(s.store(), &s.dns_adapter()?).await?;
    }
    provider.flush_budget().await;
    Ok(Json(inv))
}
