//! The HTTP surface: Vultr's routes under `/v2`, the simulator's controls
//! under `/sim`, and the gate every `/v2` request passes (rate limit, key,
//! faults). Handlers are thin: the semantics live in `world.rs`.

use crate::config::{Faults, Op, Scripted};
use crate::world::{FaultKind, Gate, Reply, World};
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use oduflow_model::KeyFingerprint;
use secrecy::SecretString;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// State shared by every connection.
pub(crate) struct Shared {
    world: Mutex<World>,
}

impl Shared {
    pub fn new(world: World) -> Self {
        Self { world: Mutex::new(world) }
    }

    /// The world, even if a handler panicked while holding it: the simulator
    /// should keep answering so the test that caused it can report.
    pub fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Closes the connection the request came on (set by the accept loop).
#[derive(Clone)]
pub(crate) struct ConnKill(pub Arc<Notify>);

/// The address a request's connection came from: Vultr counts its rate limit
/// per source address, and so does the simulator.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source(pub IpAddr);

/// Who is calling: the fingerprint of the key that passed the gate.
#[derive(Clone)]
struct Caller(String);

/// The fault that fell on this listing request: `page_repeat` or
/// `page_delete`.
#[derive(Clone)]
struct PageFault(FaultKind);

type Q = Query<BTreeMap<String, String>>;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let v2 = Router::new()
        .route("/v2/account", get(account_get))
        .route("/v2/regions", get(region_list))
        .route("/v2/plans", get(plan_list))
        .route("/v2/instances", get(instance_list).post(instance_create))
        .route("/v2/instances/{id}", get(instance_get).delete(instance_delete).patch(instance_patch))
        .route("/v2/instances/{id}/upgrades", get(instance_upgrades))
        .route("/v2/instances/{id}/user-data", get(instance_user_data))
        .route("/v2/blocks", get(block_list).post(block_create))
        .route("/v2/blocks/{id}", get(block_get).delete(block_delete).patch(block_patch))
        .route("/v2/blocks/{id}/attach", post(block_attach))
        .route("/v2/blocks/{id}/detach", post(block_detach))
        .route("/v2/os", get(os_list))
        .route("/v2/regions/{id}/availability", get(region_availability))
        .route("/v2/ssh-keys", get(|s: State<Arc<Shared>>, q: Q| catalog(s, q, "ssh_keys")))
        .route("/v2/firewalls", get(|s: State<Arc<Shared>>, q: Q| catalog(s, q, "firewall_groups")))
        .route("/v2/snapshots", get(|s: State<Arc<Shared>>, q: Q| catalog(s, q, "snapshots")))
        .route("/v2/applications", get(|s: State<Arc<Shared>>, q: Q| catalog(s, q, "applications")))
        .route("/v2/instances/{id}/backup-schedule", get(backup_schedule_get).post(backup_schedule_set))
        .route("/v2/domains/{domain}", get(dns_domain_get))
        .route("/v2/domains/{domain}/records", get(dns_record_list).post(dns_record_create))
        .route(
            "/v2/domains/{domain}/records/{id}",
            get(dns_record_get).delete(dns_record_delete).patch(dns_record_patch),
        )
        .route_layer(middleware::from_fn_with_state(shared.clone(), gate));
    Router::new()
        .merge(v2)
        .route("/sim/ledger", get(ledger_get))
        .route("/sim/faults", get(faults_get).post(faults_set))
        .fallback(|| async { render(Reply::error(404, "Not found.")) })
        // A route that exists, asked with another method: Vultr's error
        // body as everywhere else (the words are the simulator's).
        .method_not_allowed_fallback(|| async { render(Reply::error(405, "Method not allowed.")) })
        .with_state(shared)
}

fn op_of(method: &Method, route: &str) -> Option<Op> {
    let op = match (method.as_str(), route) {
        ("GET", "/v2/account") => Op::AccountGet,
        ("GET", "/v2/regions") => Op::RegionList,
        ("GET", "/v2/plans") => Op::PlanList,
        ("GET", "/v2/instances") => Op::InstanceList,
        ("POST", "/v2/instances") => Op::InstanceCreate,
        ("GET", "/v2/instances/{id}") => Op::InstanceGet,
        ("DELETE", "/v2/instances/{id}") => Op::InstanceDelete,
        ("GET", "/v2/blocks") => Op::BlockList,
        ("POST", "/v2/blocks") => Op::BlockCreate,
        ("GET", "/v2/blocks/{id}") => Op::BlockGet,
        ("DELETE", "/v2/blocks/{id}") => Op::BlockDelete,
        ("PATCH", "/v2/instances/{id}") => Op::InstancePatch,
        ("PATCH", "/v2/blocks/{id}") => Op::BlockPatch,
        ("POST", "/v2/blocks/{id}/attach") => Op::BlockAttach,
        ("POST", "/v2/blocks/{id}/detach") => Op::BlockDetach,
        ("GET", "/v2/domains/{domain}") => Op::DnsDomainGet,
        ("GET", "/v2/domains/{domain}/records") => Op::DnsRecordList,
        ("POST", "/v2/domains/{domain}/records") => Op::DnsRecordCreate,
        ("GET", "/v2/domains/{domain}/records/{id}") => Op::DnsRecordGet,
        ("DELETE", "/v2/domains/{domain}/records/{id}") => Op::DnsRecordDelete,
        ("PATCH", "/v2/domains/{domain}/records/{id}") => Op::DnsRecordPatch,
        (
            "GET",
            "/v2/os"
            | "/v2/ssh-keys"
            | "/v2/firewalls"
            | "/v2/snapshots"
            | "/v2/applications"
            | "/v2/regions/{id}/availability"
            | "/v2/instances/{id}/upgrades"
            | "/v2/instances/{id}/user-data",
        ) => Op::CatalogRead,
        ("GET" | "POST", "/v2/instances/{id}/backup-schedule") => Op::BackupSchedule,
        _ => return None,
    };
    Some(op)
}

pub(crate) fn render(r: Reply) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = match r.body {
        Some(v) => (status, Json(v)).into_response(),
        None => (status, Body::empty()).into_response(),
    };
    if let Some(secs) = r.retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// A redirect fault's answer: `status`, a `Location` naming the very URL the
/// request was sent to (same server, same path and query), and Vultr's error
/// body shape so a client that reads it as an error still gets a message.
fn render_redirect(status: u16, location: &str) -> Response {
    let mut resp = render(Reply::error(status, "Moved."));
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// The request's own absolute URL: `http://<Host><path?query>`, or just the
/// path and query when the request had no Host header.
fn own_url(req: &Request) -> String {
    let pq = req.uri().path_and_query().map(|pq| pq.as_str().to_owned()).unwrap_or_else(|| req.uri().path().to_owned());
    match req.headers().get(header::HOST).and_then(|h| h.to_str().ok()) {
        Some(host) => format!("http://{host}{pq}"),
        None => pq,
    }
}

/// The fingerprint of the bearer key, if any. The key itself goes no further.
fn bearer_fingerprint(req: &Request) -> Option<String> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let key = v.strip_prefix("Bearer ")?;
    Some(KeyFingerprint::of_key(&SecretString::from(key.to_owned())).0)
}

async fn gate(State(s): State<Arc<Shared>>, mut req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| req.uri().path().to_owned());
    let Some(op) = op_of(req.method(), &route) else {
        return next.run(req).await;
    };
    let key_fp = bearer_fingerprint(&req);
    let source = req.extensions().get::<Source>().map_or(IpAddr::from([0, 0, 0, 0]), |s| s.0);
    // A create's label is in its body: read it here, so a create that a
    // fault refuses still counts as sent.
    let create = req.method() == axum::http::Method::POST && (route == "/v2/instances" || route == "/v2/blocks");
    let mut label_sent = None;
    if create {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
        label_sent = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("label").and_then(|l| l.as_str()).map(str::to_owned));
        req = Request::from_parts(parts, axum::body::Body::from(bytes));
    }
    let resource_id = resource_id_in(req.uri().path());
    s.world().log_request(crate::world::RequestRecord {
        at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
        method: req.method().to_string(),
        route: route.clone(),
        resource_id,
        label: label_sent,
        key_fingerprint: key_fp.clone().unwrap_or_default(),
        source: source.to_string(),
    });
    // `security: []` in the document: no key needed.
    let open = ["/v2/os", "/v2/applications", "/v2/regions/{id}/availability"].contains(&route.as_str());
    let needs_auth = !matches!(op, Op::RegionList | Op::PlanList) && !open;
    let label = format!("{} {route}", req.method());
    let decision = s.world().gate(&label, op, key_fp.as_deref(), needs_auth, source);
    let (decision, mut hold_after) = scripted_pass(decision);
    let resp = match decision {
        Gate::Scripted(Scripted::Refuse { status, message }) => render(Reply::error(status, &message)),
        Gate::Scripted(Scripted::AnswerWithoutApplying) => render(Reply::no_content()),
        Gate::Scripted(other) => unreachable!("{other:?} became a pass in scripted_pass"),
        Gate::TooMany(secs) => render(Reply::too_many(secs)),
        Gate::Refuse(401) => render(Reply::error(401, "Invalid API token.")),
        Gate::Refuse(404) => render(Reply::error(404, "Record not found.")),
        Gate::Refuse(status) => render(Reply::error(status, "Internal server error.")),
        Gate::Redirect(status) => {
            tracing::debug!(%label, status, "fault: not applied, redirecting to itself");
            render_redirect(status, &own_url(&req))
        }
        Gate::Pass { latency_ms, lost, redirect } => {
            if latency_ms > 0 {
                tokio::time::sleep(Duration::from_millis(latency_ms)).await;
            }
            let location = own_url(&req);
            let kill = req.extensions().get::<ConnKill>().cloned();
            req.extensions_mut().insert(Caller(key_fp.unwrap_or_default()));
            if let Some(k @ (FaultKind::PageRepeat | FaultKind::PageDelete)) = lost {
                req.extensions_mut().insert(PageFault(k));
            }
            let resp = next.run(req).await;
            if let Some(n) = hold_after.take() {
                tracing::debug!(%label, "scripted: applied, the answer held");
                n.notified().await;
            }
            match lost {
                Some(FaultKind::LostDrop) if kill.is_some() => {
                    tracing::debug!(%label, "fault: applied, dropping the connection");
                    s.world().count_response(0);
                    kill.expect("checked").0.notify_one();
                    // The accept loop closes the connection; never answer.
                    return std::future::pending().await;
                }
                Some(FaultKind::LostDrop | FaultKind::Lost5xx) => {
                    tracing::debug!(%label, "fault: applied, answering 500");
                    render(Reply::error(500, "Internal server error."))
                }
                Some(FaultKind::LostStall) => {
                    let stall_ms = s.world().faults().stall_ms;
                    tracing::debug!(%label, stall_ms, "fault: applied, stalling the answer");
                    tokio::time::sleep(Duration::from_millis(stall_ms)).await;
                    resp
                }
                Some(FaultKind::LostRedirect) => {
                    let status = redirect.expect("set for every redirect fault");
                    tracing::debug!(%label, status, "fault: applied, redirecting to itself");
                    render_redirect(status, &location)
                }
                _ => resp,
            }
        }
    };
    s.world().count_response(resp.status().as_u16());
    resp
}

/// The instance or block id in a request's path, if any.
fn resource_id_in(path: &str) -> Option<String> {
    let segs: Vec<&str> = path.split('/').collect();
    segs.iter()
        .position(|s| *s == "instances" || *s == "blocks")
        .and_then(|i| segs.get(i + 1))
        .filter(|s| !s.is_empty())
        .map(|s| (*s).to_owned())
}

/// A scripted hold or lost answer as the pass it becomes, with the hold to
/// wait on once it is applied.
fn scripted_pass(decision: Gate) -> (Gate, Option<Arc<Notify>>) {
    let pass = |lost| Gate::Pass { latency_ms: 0, lost, redirect: None };
    match decision {
        Gate::Scripted(Scripted::HoldAfter(n)) => (pass(None), Some(n)),
        Gate::Scripted(Scripted::LoseAnswer) => (pass(Some(FaultKind::LostDrop)), None),
        other => (other, None),
    }
}

/// A JSON request body; anything that is not JSON is Vultr's 400. A
/// member whose value is `null` counts as absent, as Vultr takes it:
/// govultr and Vultr's Ansible collection send every field they know,
/// unset ones as `null`.
fn parse(body: &Bytes) -> Result<Value, Reply> {
    let mut v: Value = serde_json::from_slice(body).map_err(|_| Reply::error(400, "Bad request."))?;
    if let Some(obj) = v.as_object_mut() {
        obj.retain(|_, v| !v.is_null());
    }
    Ok(v)
}

async fn account_get(State(s): State<Arc<Shared>>) -> Response {
    render(s.world().account_get())
}
async fn region_list(State(s): State<Arc<Shared>>, Query(q): Q) -> Response {
    render(s.world().region_list(&q))
}
async fn os_list(State(s): State<Arc<Shared>>, Query(q): Q) -> Response {
    render(s.world().os_list(&q))
}
async fn region_availability(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().region_availability(&id))
}
async fn catalog(State(s): State<Arc<Shared>>, Query(q): Q, key: &'static str) -> Response {
    render(s.world().catalog_list(key, &q))
}
async fn backup_schedule_get(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().backup_schedule_get(&id))
}
async fn backup_schedule_set(State(s): State<Arc<Shared>>, Path(id): Path<String>, body: Bytes) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().backup_schedule_set(&id, &v)),
        Err(r) => render(r),
    }
}
async fn plan_list(State(s): State<Arc<Shared>>, Query(q): Q) -> Response {
    render(s.world().plan_list(&q))
}
async fn instance_list(State(s): State<Arc<Shared>>, Query(q): Q, f: Option<Extension<PageFault>>) -> Response {
    render(s.world().instance_list(&q, f.map(|f| f.0.0)))
}
async fn instance_create(State(s): State<Arc<Shared>>, Extension(c): Extension<Caller>, body: Bytes) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().instance_create(&v, &c.0)),
        Err(r) => render(r),
    }
}
async fn instance_user_data(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().instance_user_data(&id))
}
async fn instance_get(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().instance_get(&id))
}
async fn instance_delete(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().instance_delete(&id))
}
async fn instance_patch(State(s): State<Arc<Shared>>, Path(id): Path<String>, body: Bytes) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().instance_patch(&id, &v)),
        Err(r) => render(r),
    }
}
async fn instance_upgrades(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().instance_upgrades(&id))
}
async fn block_patch(State(s): State<Arc<Shared>>, Path(id): Path<String>, body: Bytes) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().block_patch(&id, &v)),
        Err(r) => render(r),
    }
}
async fn block_list(State(s): State<Arc<Shared>>, Query(q): Q, f: Option<Extension<PageFault>>) -> Response {
    render(s.world().block_list(&q, f.map(|f| f.0.0)))
}
async fn block_create(State(s): State<Arc<Shared>>, Extension(c): Extension<Caller>, body: Bytes) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().block_create(&v, &c.0)),
        Err(r) => render(r),
    }
}
async fn block_get(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().block_get(&id))
}
async fn block_delete(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    render(s.world().block_delete(&id))
}
async fn block_attach(State(s): State<Arc<Shared>>, Path(id): Path<String>, body: Bytes) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().block_attach(&id, &v)),
        Err(r) => render(r),
    }
}
async fn block_detach(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    // The body (`{"live": bool}`) changes nothing the simulator shows.
    render(s.world().block_detach(&id))
}
async fn dns_domain_get(State(s): State<Arc<Shared>>, Path(domain): Path<String>) -> Response {
    render(s.world().dns_domain_get(&domain))
}
async fn dns_record_list(
    State(s): State<Arc<Shared>>,
    Path(domain): Path<String>,
    Query(q): Q,
    f: Option<Extension<PageFault>>,
) -> Response {
    render(s.world().dns_record_list(&domain, &q, f.map(|f| f.0.0)))
}
async fn dns_record_create(
    State(s): State<Arc<Shared>>,
    Extension(c): Extension<Caller>,
    Path(domain): Path<String>,
    body: Bytes,
) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().dns_record_create(&domain, &v, &c.0)),
        Err(r) => render(r),
    }
}
async fn dns_record_get(State(s): State<Arc<Shared>>, Path((domain, id)): Path<(String, String)>) -> Response {
    render(s.world().dns_record_get(&domain, &id))
}
async fn dns_record_patch(
    State(s): State<Arc<Shared>>,
    Path((domain, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    match parse(&body) {
        Ok(v) => render(s.world().dns_record_patch(&domain, &id, &v)),
        Err(r) => render(r),
    }
}
async fn dns_record_delete(State(s): State<Arc<Shared>>, Path((domain, id)): Path<(String, String)>) -> Response {
    render(s.world().dns_record_delete(&domain, &id))
}

async fn ledger_get(State(s): State<Arc<Shared>>) -> Response {
    Json(s.world().ledger()).into_response()
}
async fn faults_get(State(s): State<Arc<Shared>>) -> Response {
    Json(s.world().faults()).into_response()
}
async fn faults_set(State(s): State<Arc<Shared>>, Json(f): Json<Faults>) -> Response {
    if let Err(e) = f.validate() {
        return render(Reply::error(400, &e));
    }
    s.world().set_faults(f.clone());
    Json(f).into_response()
}
