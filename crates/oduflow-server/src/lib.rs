//! oduflow's operator surfaces over HTTP (`oduflow serve`): the JSON API
//! under `/api/v1`, its OpenAPI document at `/openapi.json`, Prometheus
//! metrics at `/metrics` and a server-rendered dashboard at `/`.
//!
//! Invariants kept here:
//! - this is the only crate that knows HTTP status codes: library errors
//!   become [`ApiError`] and a status once, in `error.rs`;
//! - every route but `/health` needs a bearer token (`auth.rs`); the
//!   dashboard also takes it from a login cookie or `?token=`;
//! - every error answer is `{"error": {"code", "message"}}` with a stable
//!   code; bad input is a 4xx that stores nothing and calls no provider;
//! - neither the Vultr API key nor a bearer token appears in an answer, a log
//!   line or a metric: tokens are kept as SHA-256 digests, the key only as its
//!   fingerprint, and request logs name the path without its query.
//!
//! Handlers are thin: they validate with the model's parsers (the CLI's
//! rules), then call the store or `oduflow_engine::operator`.

pub mod api;
pub mod auth;
pub mod dashboard;
pub mod error;
mod extract;
pub mod feed;
pub mod idempotency;
pub mod listen;
mod metrics;
mod openapi;
pub mod resolve;

pub use error::{ApiError, ErrorBody};
pub use metrics::{WorkerMetrics, serve_worker_metrics, worker_text};
pub use openapi::openapi_json;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use oduflow_engine::{SharedClock, SystemClock};
use oduflow_store::Store;
use oduflow_vultr::VultrClient;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

/// Largest request body accepted. The biggest legitimate body (an abandon
/// attestation) is about 1 KiB; 64 KiB leaves room and keeps a flood of
/// large bodies cheap to refuse.
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// For operator actions that must ask the provider (reconcile, adopt,
    /// the inventory, key rotation); its request counters feed `/metrics`.
    /// `None`: started without a key, the server is read-only. Replaced by a
    /// successful `POST /api/v1/credentials/rotate`, so the server acts with
    /// the key every record is bound to from then on.
    provider: std::sync::RwLock<Option<Arc<VultrClient>>>,
    clock: SharedClock,
    /// Attempts given to the jobs this server enqueues.
    attempts_max: i32,
    /// `[profile.NAME]` sets a create may name, and the hostname default.
    profiles: std::collections::BTreeMap<String, oduflow_model::SpecInput>,
    spec_defaults: oduflow_model::SpecDefaults,
    /// How long after a declared restore the inventory lists
    /// (`oduflow_engine::operator::inventory_settled`).
    listing_settle_ms: i64,
    /// `[dns] domain` and its TTL: the inventory also lists this zone for
    /// records carrying oduflow's owner marker that no live client owns, and
    /// an operator settles a client's DNS block through its adapter.
    dns: Option<(String, i64)>,
    /// Mark the dashboard's cookies `Secure` whatever the request says (a
    /// TLS proxy in front that sends no `X-Forwarded-Proto`).
    secure_cookies: bool,
}

impl AppState {
    pub fn new(store: Store, provider: Arc<VultrClient>, attempts_max: i32) -> Self {
        Self::with_clock(store, provider, attempts_max, Arc::new(SystemClock))
    }

    pub fn with_clock(store: Store, provider: Arc<VultrClient>, attempts_max: i32, clock: SharedClock) -> Self {
        Self::build(store, Some(provider), attempts_max, clock)
    }

    /// A server without a Vultr API key: the dashboard, every read and
    /// `/metrics` work; every action (any POST, PATCH or DELETE under
    /// `/api/v1`) answers 409 `read_only`, before it touches anything.
    pub fn read_only(store: Store, attempts_max: i32) -> Self {
        Self::build(store, None, attempts_max, Arc::new(SystemClock))
    }

    fn build(store: Store, provider: Option<Arc<VultrClient>>, attempts_max: i32, clock: SharedClock) -> Self {
        let (profiles, spec_defaults) = Default::default();
        let provider = std::sync::RwLock::new(provider);
        let listing_settle_ms = oduflow_engine::operator::LISTING_SETTLE_MS_DEFAULT;
        let inner = Inner {
            store,
            provider,
            clock,
            attempts_max,
            profiles,
            spec_defaults,
            listing_settle_ms,
            dns: None,
            secure_cookies: false,
        };
        Self { inner: Arc::new(inner) }
    }

    /// How long after a declared restore `POST /api/v1/inventory` lists
    /// (`ODUFLOW_LISTING_SETTLE_MS`, as `oduflow reconcile --all`).
    pub fn with_listing_settle_ms(mut self, ms: i64) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("settings are set before the state is shared");
        inner.listing_settle_ms = ms;
        self
    }

    pub(crate) fn listing_settle_ms(&self) -> i64 {
        self.inner.listing_settle_ms
    }

    /// The DNS zone (`[dns] domain`) and record TTL: `POST
    /// /api/v1/inventory` lists the zone (as `oduflow reconcile --all`), and
    /// adopt and abandon of `kind: dns` go through its adapter.
    pub fn with_dns(mut self, zone_ttl: Option<(String, i64)>) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("settings are set before the state is shared");
        inner.dns = zone_ttl;
        self
    }

    /// Cookies `Secure` always (`serve --secure-cookies`).
    pub fn with_secure_cookies(mut self, on: bool) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("settings are set before the state is shared");
        inner.secure_cookies = on;
        self
    }

    /// Whether the browser's cookies are `Secure`: always when told so,
    /// else when a TLS proxy in front says the request came over TLS.
    pub(crate) fn secure_cookies(&self, headers: &axum::http::HeaderMap) -> bool {
        self.inner.secure_cookies || auth::over_tls(headers)
    }

    pub(crate) fn dns_zone(&self) -> Option<&str> {
        self.inner.dns.as_ref().map(|(zone, _)| zone.as_str())
    }

    /// The DNS adapter an operator's action settles a client's DNS block
    /// through; without a `[dns] domain`, bad input.
    pub(crate) fn dns_adapter(&self) -> Result<oduflow_vultr::dns_adapter::DnsAdapter, ApiError> {
        let Some((zone, ttl)) = &self.inner.dns else {
            return Err(ApiError::InvalidInput(
                "no [dns] domain is configured: this client has no DNS identity; nothing was recorded".into(),
            ));
        };
        Ok(oduflow_vultr::dns_adapter::DnsAdapter::new(self.acting_provider()?.as_ref().clone(), zone.clone(), *ttl))
    }

    /// Times its writes on `clock` (`oduflow serve`: the database's clock,
    /// so they order with the workers' times).
    pub fn with_shared_clock(mut self, clock: SharedClock) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("the clock is set before the state is shared");
        inner.clock = clock;
        self
    }

    /// The profiles `POST /api/v1/clients` may name, and the defaults its
    /// specs resolve with (as `oduflow client create` has them).
    pub fn with_profiles(
        mut self,
        profiles: std::collections::BTreeMap<String, oduflow_model::SpecInput>,
        defaults: oduflow_model::SpecDefaults,
    ) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("profiles are set before the state is shared");
        inner.profiles = profiles;
        inner.spec_defaults = defaults;
        self
    }

    pub fn profiles(&self) -> &std::collections::BTreeMap<String, oduflow_model::SpecInput> {
        &self.inner.profiles
    }

    pub fn spec_defaults(&self) -> &oduflow_model::SpecDefaults {
        &self.inner.spec_defaults
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The provider client, or `None` on a read-only server.
    pub fn provider(&self) -> Option<Arc<VultrClient>> {
        self.inner.provider.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The provider client for an action; a read-only server never gets
    /// here (its actions are refused first), but says why if it did.
    pub(crate) fn acting_provider(&self) -> Result<Arc<VultrClient>, ApiError> {
        self.provider().ok_or(ApiError::ReadOnly)
    }

    /// From now on, actions use `provider` (after a key rotation proved it).
    pub(crate) fn replace_provider(&self, provider: Arc<VultrClient>) {
        *self.inner.provider.write().unwrap_or_else(|p| p.into_inner()) = Some(provider);
    }

    /// True when started without a key.
    pub fn is_read_only(&self) -> bool {
        self.provider().is_none()
    }

    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    pub fn attempts_max(&self) -> i32 {
        self.inner.attempts_max
    }

    /// `by` acting now, with this server's attempt budget.
    pub(crate) fn actor<'a>(&self, by: &'a str) -> oduflow_engine::operator::Actor<'a> {
        oduflow_engine::operator::Actor { by, now_ms: self.now_ms(), attempts_max: self.attempts_max() }
    }
}

/// Logs each request's method, path (never the query, which may carry a
/// dashboard token), status and duration.
async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    tracing::debug!(%method, %path, status = resp.status().as_u16(), ms = started.elapsed().as_millis() as u64, "http request");
    resp
}

/// A read-only server (no key) refuses every action before anything runs:
/// reads (GET, HEAD) pass.
async fn refuse_actions_when_read_only(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    use axum::response::IntoResponse;
    if state.is_read_only() && !matches!(*req.method(), axum::http::Method::GET | axum::http::Method::HEAD) {
        return ApiError::ReadOnly.into_response();
    }
    next.run(req).await
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// The whole application, for `serve` and for tests on port 0.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/api/v1/clients", get(api::clients_list).post(api::clients_create))
        .route(
            "/api/v1/clients/{name}",
            get(api::clients_show).delete(api::clients_delete).patch(api::clients_update).put(api::clients_put),
        )
        .route("/api/v1/clients/{name}/receipts", get(api::clients_receipts))
        .route("/api/v1/clients/{name}/events", get(api::clients_events))
        .route("/api/v1/clients/{name}/reconcile", post(api::clients_reconcile))
        .route("/api/v1/clients/{name}/adopt", post(api::clients_adopt))
        .route("/api/v1/clients/{name}/abandon", post(api::clients_abandon))
        .route("/api/v1/clients/{name}/promote", post(api::clients_promote))
        .route("/api/v1/import", post(api::import))
        .route("/api/v1/bulk/reconcile", post(api::bulk_reconcile))
        .route("/api/v1/bulk/abandon", post(api::bulk_abandon))
        .route("/api/v1/interventions", get(api::interventions))
        .route("/api/v1/receipts", get(api::receipts))
        .route("/api/v1/orphans", get(api::orphans))
        .route("/api/v1/orphans/{id}/adopt", post(api::orphans_adopt))
        .route("/api/v1/orphans/{id}/delete", post(api::orphans_delete))
        .route("/api/v1/events", get(api::events))
        .route("/api/v1/events/feed", get(feed::events_feed))
        .route("/api/v1/queue", get(api::queue))
        .route("/api/v1/queue/pause", post(api::queue_pause))
        .route("/api/v1/queue/resume", post(api::queue_resume))
        .route("/api/v1/inventory", post(api::inventory))
        .route("/api/v1/credentials/rotate", post(api::credentials_rotate))
        .route("/openapi.json", get(openapi::serve_openapi))
        .route("/metrics", get(metrics::metrics))
        // Layers run outermost last-added first: the token, then its scope,
        // are checked before the read-only refusal, so a caller learns
        // nothing it may not; an idempotency key is looked up last.
        .route_layer(middleware::from_fn_with_state(state.clone(), idempotency::idempotency))
        .route_layer(middleware::from_fn_with_state(state.clone(), refuse_actions_when_read_only))
        .route_layer(middleware::from_fn(auth::require_scope))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_bearer));
    let dashboard = Router::new()
        .route("/", get(dashboard::dashboard))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_browser));
    Router::new()
        .route("/health", get(api::health))
        .route("/login", post(dashboard::login))
        .route("/logout", post(dashboard::logout))
        .merge(api)
        .merge(dashboard)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Serves until `shutdown` completes, then finishes in-flight requests
/// (within `listen`'s bounds: header read timeout, connection cap).
pub async fn serve(
    state: AppState,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    serve_on(state, listener, shutdown).await
}

/// As [`serve`], on a listener the caller bound (tests bind port 0 and read
/// the address first).
pub async fn serve_on(
    state: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "oduflow serve listening");
    listen::serve_router(listener, router(state), shutdown, listen::ListenLimits::default()).await
}
