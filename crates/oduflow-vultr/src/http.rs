//! The HTTP layer: the rate budget, two reqwest clients, the read retry loop,
//! pagination and the classification of create/attach answers.
//!
//! Why two clients: reads and DELETE go through a pooled client. Create and
//! attach go through a client whose pool keeps no idle connection, so every
//! POST opens a fresh connection.
//!
//! Nothing below us can send a create twice, because every layer that could
//! re-send one is switched off on both clients:
//! - No redirects (`redirect::Policy::none()`). reqwest's default follows up
//!   to ten: a 307/308 would re-send the POST with the same body, a
//!   301/302/303 would turn it into a GET whose 4xx could read as a
//!   rejection, and a redirected GET or DELETE could end on a 404 that reads
//!   as "deleted". A 3xx is handed to us as it came: an `Unknown` outcome for
//!   a create or attach, an error for a read or DELETE, never followed.
//! - No retries in reqwest (its retry policy is `never`); the only retry loop
//!   is ours, and it serves reads and DELETE only.
//! - No connection reuse for create and attach. hyper re-sends a request that
//!   was cancelled because a *reused* pooled connection closed under it; with
//!   no reuse that path cannot fire.
//! - HTTP/1 only: no HTTP/2 GOAWAY/REFUSED_STREAM replay.
//!
//! The cost, one extra TCP+TLS set-up per create, is nothing next to a VM's
//! provisioning time.
//!
//! A create that fails while its connection is being established (reqwest's
//! `is_connect()`: DNS, TCP connect refused or timed out after
//! `connect_timeout`, TLS handshake) provably never left this process: hyper
//! writes the request only on an established connection. That is
//! `Outcome::NotSent`. Any failure after that, the request's own timeout
//! included, stays `Unknown`; the connect timeout in force is at most three
//! quarters of the request timeout, so a connect that outlasts either is a
//! connect error, never the request timeout firing while connecting.

use crate::config::VultrConfig;
use crate::error::VultrError;
use oduflow_model::KeyFingerprint;
use oduflow_model::provider::{Outcome, Sending};
use oduflow_model::rate::{LocalBudget, RateBudget};
use reqwest::header::{AUTHORIZATION, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Method, Url};
use secrecy::ExposeSecret;
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `tracing::warn!`, or `debug!` for a client whose caller reports its
/// failures itself ([`VultrClient::failures_reported_by_caller`]).
macro_rules! warn_unless_reported {
    ($client:expr, $($t:tt)*) => {
        if $client.failures_reported_by_caller {
            tracing::debug!($($t)*)
        } else {
            tracing::warn!($($t)*)
        }
    };
}

/// Longest piece of a non-JSON error body we quote in a message: enough to
/// recognise an nginx error page, short enough for a log line.
const BODY_EXCERPT_CHARS_MAX: usize = 200;

/// A Vultr API client. Cheap to clone: every clone shares the same HTTP
/// connections and the same rate budget. Built with [`VultrClient::new`] the
/// budget is this process's alone; every oduflow command builds it with
/// [`VultrClient::with_budget`] and the store's shared budget, so all
/// processes of one rate group stay under the rate together.
#[derive(Clone)]
pub struct VultrClient {
    pub(crate) inner: Arc<Inner>,
    /// What is asked before each request (a run's guard, a create's mark).
    pub(crate) sending: Sending,
    /// Failed exchanges logged at debug, not warn: the caller reports them.
    pub(crate) failures_reported_by_caller: bool,
}

pub(crate) struct Inner {
    base: Url,
    cfg: VultrConfig,
    fingerprint: KeyFingerprint,
    /// Pooled; for reads and DELETE, which may be repeated.
    reads: reqwest::Client,
    /// Never reuses a connection; for create and attach, sent once.
    once: reqwest::Client,
    /// The group's send slots, and this process's passes to them.
    budget: Arc<dyn RateBudget>,
    turnstile: crate::budget::Turnstile,
    /// Between two slots: one second over the rate.
    interval: Duration,
    /// Request and rate-budget counters for `/metrics`.
    stats: Arc<crate::stats::Stats>,
}

impl fmt::Debug for VultrClient {
    /// Names the endpoint and the key's short fingerprint, never the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VultrClient")
            .field("base_url", &self.inner.base.as_str())
            .field("key_fingerprint", &self.inner.fingerprint.short())
            .field("rate_per_sec", &self.inner.cfg.rate_per_sec)
            .field("rate_group", &self.inner.budget.group())
            .finish_non_exhaustive()
    }
}

/// What one HTTP exchange gave.
#[derive(Debug)]
pub(crate) enum Reply {
    /// An answer was read in full.
    Answer(Answer),
    /// The connection was never established (reqwest's `is_connect()`: DNS,
    /// TCP connect, connect timeout, TLS handshake), so no byte of the
    /// request was written.
    NotSent(String),
    /// No (complete) answer once a connection may have carried the request:
    /// send, timeout or body read failed.
    Transport(String),
    /// The run's send guard refused right before sending (its claim is
    /// lost): nothing was sent, and nothing is retried.
    Stopped(String),
}

#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    retry_after: Option<Duration>,
    /// The `Location` header, kept to name a redirect we did not follow.
    location: Option<String>,
}

impl Answer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// A 3xx: some hop asked us to go elsewhere. We never do.
    pub fn is_redirect(&self) -> bool {
        (300..400).contains(&self.status)
    }

    /// `307 (Location: https://...)`, or `307 (no Location header)`.
    fn redirect_description(&self) -> String {
        match &self.location {
            Some(l) => format!("{} (Location: {l})", self.status),
            None => format!("{} (no Location header)", self.status),
        }
    }

    /// What a read or DELETE answered with a 3xx becomes: an error, never a
    /// 404 and never retried.
    pub fn redirect_error(&self) -> VultrError {
        VultrError::Status {
            status: self.status,
            message: format!(
                "the provider redirected with {}; redirects are never followed",
                self.redirect_description()
            ),
        }
    }

    /// Vultr's `{"error": "...", "status": N}` text, or an excerpt of the body.
    pub fn message(&self) -> String {
        error_message(&self.body)
    }

    pub fn to_error(&self) -> VultrError {
        VultrError::Status { status: self.status, message: self.message() }
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T, VultrError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| VultrError::Decode(format!("answer {} is not the documented JSON: {e}", self.status)))
    }
}

pub(crate) fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ApiError {
        error: String,
    }
    if let Ok(e) = serde_json::from_slice::<ApiError>(body) {
        return e.error;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() { "(empty body)".to_owned() } else { text.chars().take(BODY_EXCERPT_CHARS_MAX).collect() }
}

/// Whether a read may be tried again after this answer: Vultr's rate limit and
/// server errors are transient (500 is also its "locked" refusal).
fn is_retryable(status: u16) -> bool {
    status == 429 || status >= 500
}

/// Statuses that definitively refuse a create or attach (docs/vultr.md §1 and
/// DESIGN §3.1): the request was read and will not be applied.
fn is_rejection(status: u16) -> bool {
    matches!(status, 400 | 401 | 403 | 422)
}

/// reqwest's error with its whole source chain, which names the failing step
/// (connect, timeout, body) but holds no header values, so never the key.
fn describe(err: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut s = if err.is_timeout() { format!("timeout: {err}") } else { err.to_string() };
    let mut cause = err.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

impl VultrClient {
    /// This client with its warnings about failed exchanges (429, 5xx, no
    /// connection) lowered to debug: for a caller that reports the failure
    /// itself, in one line (the worker's check of its footing at start,
    /// whose refusal names the error).
    pub fn failures_reported_by_caller(&self) -> Self {
        Self { failures_reported_by_caller: true, ..self.clone() }
    }

    /// A client with a budget of its own (tests, tools): only this process's
    /// requests count against its rate.
    pub fn new(cfg: VultrConfig) -> Result<Self, VultrError> {
        Self::with_budget(cfg, Arc::new(LocalBudget::new("local")))
    }

    /// A client whose requests take their slots from `budget`, shared with
    /// every other process of its group.
    pub fn with_budget(cfg: VultrConfig, budget: Arc<dyn RateBudget>) -> Result<Self, VultrError> {
        let base = Url::parse(cfg.base_url.trim_end_matches('/'))
            .map_err(|e| VultrError::Config(format!("base_url {:?}: {e}", cfg.base_url)))?;
        if base.cannot_be_a_base() {
            return Err(VultrError::Config(format!("base_url {:?} cannot hold a path", cfg.base_url)));
        }
        if cfg.rate_per_sec == 0 {
            return Err(VultrError::Config("rate_per_sec must be at least 1".into()));
        }
        // Rounded up to the microsecond: 30/s must never space slots by
        // 33,333 µs, which fits 31 in one second.
        let interval = Duration::from_micros(1_000_000u64.div_ceil(u64::from(cfg.rate_per_sec)));
        if cfg.read_attempts_max == 0 {
            return Err(VultrError::Config("read_attempts_max must be at least 1".into()));
        }
        if !(1..=crate::PER_PAGE_MAX).contains(&cfg.per_page) {
            return Err(VultrError::Config(format!("per_page must be within 1..={}", crate::PER_PAGE_MAX)));
        }
        let builder = || {
            reqwest::Client::builder()
                .http1_only()
                // See the module comment: nothing below us may send twice.
                .redirect(reqwest::redirect::Policy::none())
                .retry(reqwest::retry::never())
                .timeout(Duration::from_millis(cfg.request_timeout_ms))
                .connect_timeout(Duration::from_millis(connect_timeout_in_force(&cfg)))
                .user_agent(concat!("oduflow/", env!("CARGO_PKG_VERSION")))
        };
        let reads = builder().build().map_err(|e| VultrError::Config(format!("HTTP client: {}", describe(&e))))?;
        let once = builder()
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| VultrError::Config(format!("HTTP client: {}", describe(&e))))?;
        let fingerprint = KeyFingerprint::of_key(&cfg.api_key);
        Ok(Self {
            sending: Sending::default(),
            failures_reported_by_caller: false,
            inner: Arc::new(Inner {
                base,
                cfg,
                fingerprint,
                reads,
                once,
                budget,
                turnstile: crate::budget::Turnstile::new(crate::budget::RESERVATIONS_AHEAD_MAX),
                interval,
                stats: Arc::default(),
            }),
        })
    }

    pub fn config(&self) -> &VultrConfig {
        &self.inner.cfg
    }

    pub fn fingerprint(&self) -> &KeyFingerprint {
        &self.inner.fingerprint
    }

    /// This process's request counters (shared by every clone).
    pub fn stats(&self) -> &crate::stats::Stats {
        &self.inner.stats
    }

    /// `base` + path segments, each escaped, so an id can never change the
    /// route it is sent to.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.inner.base.clone();
        url.path_segments_mut().expect("checked in new: the base can hold a path").pop_if_empty().extend(segments);
        url
    }

    /// The same client (endpoint, settings, rate budget, counters) with
    /// another API key: for a key rotation.
    pub fn with_key(&self, api_key: secrecy::SecretString) -> Result<Self, VultrError> {
        let cfg = VultrConfig { api_key, ..self.inner.cfg.clone() };
        let mut next = Self::with_budget(cfg, self.inner.budget.clone())?;
        let inner = Arc::get_mut(&mut next.inner).expect("not shared yet");
        inner.stats = self.inner.stats.clone();
        Ok(next)
    }

    /// The rate group this client's requests count against.
    pub fn rate_group(&self) -> &str {
        self.inner.budget.group()
    }

    /// Writes this process's slot waits to the group's metrics now (before
    /// exiting; otherwise they are written every few seconds).
    pub async fn flush_budget(&self) {
        if let Err(e) = self.inner.budget.flush().await {
            tracing::debug!(error = %e, "rate budget usage not flushed");
        }
    }

    /// One HTTP exchange after waiting for a slot in the rate budget.
    async fn exchange(
        &self,
        once: bool,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Reply {
        let inner = &self.inner;
        // Creates, attaches, detaches and deletes go before this process's
        // waiting reads (crate::budget).
        let change = once || method != Method::GET;
        match crate::budget::wait_for_slot(
            &inner.turnstile,
            inner.budget.as_ref(),
            inner.interval,
            crate::budget::Line::of(change, &self.sending),
        )
        .await
        {
            Ok(waited) => inner.stats.record_limiter_wait(waited),
            Err(why) => {
                tracing::warn!(%method, why = %why, "vultr request not sent: no slot in the rate budget");
                inner.stats.record_budget_refusal();
                return Reply::Stopped(why);
            }
        }
        // After the wait, which can be long: a run whose claim was lost
        // meanwhile sends nothing (`oduflow_model::provider::SendGuard`).
        if let Err(why) = self.sending.check().await {
            tracing::debug!(%method, why = %why, "vultr request stopped by the run's guard");
            return Reply::Stopped(why);
        }
        // A create, attach or change is recorded as sent only now, after
        // the slot and the guard: one stopped before this never left
        // (`oduflow_model::provider::SendMark`).
        if once && let Err(why) = self.sending.mark().await {
            tracing::debug!(%method, why = %why, "vultr request stopped: its send could not be recorded");
            return Reply::Stopped(why);
        }
        let url = self.url(segments);
        let route = url.path().to_owned();
        let mut auth = HeaderValue::try_from(format!("Bearer {}", inner.cfg.api_key.expose_secret()))
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer invalid-key-characters"));
        auth.set_sensitive(true);
        let client = if once { &inner.once } else { &inner.reads };
        let mut req = client.request(method.clone(), url).header(AUTHORIZATION, auth);
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let started = Instant::now();
        let reply = match req.send().await {
            // hyper_util reports a connector failure (DNS, TCP, TLS, and
            // reqwest's connect timeout, which wraps the connector) as a
            // connect error; the request is written only once connected.
            Err(e) if e.is_connect() => Reply::NotSent(describe(&e)),
            Err(e) => Reply::Transport(describe(&e)),
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let location = resp.headers().get(LOCATION).map(|v| {
                    v.to_str()
                        .map(|l| l.chars().take(BODY_EXCERPT_CHARS_MAX).collect())
                        .unwrap_or_else(|_| "(not readable as text)".to_owned())
                });
                match resp.bytes().await {
                    Ok(b) => Reply::Answer(Answer { status, body: b.to_vec(), retry_after, location }),
                    Err(e) => Reply::Transport(format!("answer {status} cut short: {}", describe(&e))),
                }
            }
        };
        let ms = started.elapsed().as_millis() as u64;
        self.note_reply(&method, segments, &route, &reply, ms).await;
        reply
    }

    /// What an exchange tells beyond its answer. A 429 pauses the rate
    /// group. A 429, a 5xx and an exchange that failed are logged at warn
    /// (the default level: an operator sees a provider in trouble), one line
    /// each, naming the method, the route as a template (never an id), the
    /// status or the kind of failure: never the key, never a body. Inside
    /// [`VultrClient::failures_reported_by_caller`] those lines are debug. Everything
    /// else is debug.
    async fn note_reply(&self, method: &Method, segments: &[&str], route: &str, reply: &Reply, ms: u64) {
        let inner = &self.inner;
        let template = crate::stats::route_template(inner.base.path(), segments);
        let status = match reply {
            Reply::Answer(a) => Some(a.status),
            Reply::NotSent(_) | Reply::Transport(_) | Reply::Stopped(_) => None,
        };
        inner.stats.record_request(method.as_str(), template.clone(), status);
        match reply {
            Reply::Answer(a) if a.status == 429 => {
                // Vultr counts per source address: the whole group pauses,
                // for as long as it asks (within our bound).
                let pause = a
                    .retry_after
                    .unwrap_or(crate::budget::PAUSE_MIN)
                    .max(crate::budget::PAUSE_MIN)
                    .min(Duration::from_millis(inner.cfg.retry_after_max_ms));
                // This process at once; the group through the database.
                inner.turnstile.pause_locally(pause);
                warn_unless_reported!(
                    self,
                    %method, route = %template, status = 429, pause_ms = pause.as_millis() as u64,
                    group = inner.budget.group(), "vultr answered 429: pausing the rate group"
                );
                let recorded = tokio::time::timeout(crate::budget::BUDGET_ASK_TIMEOUT, inner.budget.pause(pause))
                    .await
                    .unwrap_or_else(|_| Err("no answer in time".into()));
                if let Err(e) = recorded {
                    tracing::warn!(error = %e, "the rate group could not be paused");
                }
            }
            Reply::Answer(a) if a.status >= 500 => {
                warn_unless_reported!(self, %method, route = %template, status = a.status, ms, "vultr answered {}", a.status)
            }
            Reply::Answer(a) => tracing::debug!(%method, %route, status = a.status, ms, "vultr request"),
            Reply::NotSent(e) => {
                tracing::debug!(%method, %route, error = %e, ms, "vultr request not sent");
                warn_unless_reported!(
                    self,
                    %method, route = %template, error = "connect", ms,
                    "vultr request not sent: no connection could be established"
                );
            }
            Reply::Transport(e) => {
                tracing::debug!(%method, %route, error = %e, ms, "vultr request failed");
                let kind = if e.starts_with("timeout") {
                    "timeout"
                } else if e.starts_with("answer ") {
                    "answer cut short"
                } else {
                    "connection failed"
                };
                warn_unless_reported!(self, %method, route = %template, error = kind, ms, "vultr request failed: {kind}");
            }
            Reply::Stopped(_) => {}
        }
    }

    /// Sends a create or attach POST exactly once and hands back what came.
    pub(crate) async fn post_once(&self, segments: &[&str], body: &serde_json::Value) -> Reply {
        self.exchange(true, Method::POST, segments, &[], Some(body)).await
    }

    /// Sends a change PATCH exactly once and hands back what came.
    pub(crate) async fn patch_once(&self, segments: &[&str], body: &serde_json::Value) -> Reply {
        self.exchange(true, Method::PATCH, segments, &[], Some(body)).await
    }

    /// Classifies a create answer; `id` reads the new resource out of a 2xx.
    pub(crate) fn classify<T>(reply: Reply, id: impl FnOnce(&Answer) -> Option<T>) -> Outcome<T> {
        match reply {
            Reply::NotSent(e) => {
                Outcome::NotSent { reason: format!("connection never established, request not sent: {e}") }
            }
            Reply::Stopped(e) => Outcome::NotSent { reason: format!("request not sent: {e}") },
            Reply::Transport(e) => Outcome::Unknown { reason: format!("transport error: {e}") },
            // Whoever answered may have applied the create before
            // redirecting (a proxy or a load balancer in front of the API):
            // neither Accepted nor Rejected, and never followed.
            Reply::Answer(a) if a.is_redirect() => Outcome::Unknown {
                reason: format!(
                    "the provider redirected with {}; redirects are never followed, so the \
                     request was not sent again",
                    a.redirect_description()
                ),
            },
            Reply::Answer(a) if a.is_success() => match id(&a) {
                Some(v) => Outcome::Accepted(v),
                None => Outcome::Unknown { reason: format!("Vultr answered {} without a readable id", a.status) },
            },
            Reply::Answer(a) if is_rejection(a.status) => Outcome::Rejected { status: a.status, message: a.message() },
            Reply::Answer(a) => Outcome::Unknown { reason: format!("Vultr answered {}: {}", a.status, a.message()) },
        }
    }

    /// A read or DELETE, repeated within bounds on 429, 5xx and transport
    /// errors. Returns the last answer (any status but 3xx) or, if the last
    /// attempt got no answer, the transport error. A 3xx is an error at once:
    /// never followed, never retried, so never read as a 404.
    pub(crate) async fn request_retrying(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, VultrError> {
        let cfg = &self.inner.cfg;
        let mut attempt = 1;
        loop {
            let reply = self.exchange(false, method.clone(), segments, query, body).await;
            let retry_after = match &reply {
                Reply::Stopped(e) => return Err(VultrError::Transport(format!("request not sent: {e}"))),
                Reply::Answer(a) if a.is_redirect() => return Err(a.redirect_error()),
                Reply::Answer(a) if !is_retryable(a.status) => return finish(reply),
                Reply::Answer(a) => a.retry_after,
                Reply::NotSent(_) | Reply::Transport(_) => None,
            };
            if attempt >= cfg.read_attempts_max {
                return finish(reply);
            }
            let wait = match retry_after {
                Some(d) if d.as_millis() as u64 > cfg.retry_after_max_ms => {
                    tracing::debug!(secs = d.as_secs(), "Retry-After beyond our bound; giving up");
                    return finish(reply);
                }
                Some(d) => d,
                None => backoff(cfg, attempt),
            };
            tracing::debug!(attempt, wait_ms = wait.as_millis() as u64, "retrying vultr read");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }

        fn finish(reply: Reply) -> Result<Answer, VultrError> {
            match reply {
                Reply::Answer(a) if a.is_redirect() => Err(a.redirect_error()),
                Reply::Answer(a) => Ok(a),
                Reply::NotSent(e) | Reply::Transport(e) | Reply::Stopped(e) => Err(VultrError::Transport(e)),
            }
        }
    }

    /// GET whose 2xx body is `T`; `Ok(None)` on 404 (answered to this very
    /// URL: a 3xx is an error from `request_retrying`, never followed).
    pub(crate) async fn get_one<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<Option<T>, VultrError> {
        let a = self.request_retrying(Method::GET, segments, &[], None).await?;
        match a.status {
            404 => Ok(None),
            _ if a.is_success() => a.json().map(Some),
            _ => Err(a.to_error()),
        }
    }

    /// Every page of a listing whose items sit under `key`, following
    /// `meta.links.next` until Vultr answers `""`. Each id is kept once, as
    /// first listed: Vultr's cursors are opaque, and a page may repeat an
    /// item an earlier one held (docs/vultr.md §2), which would read as
    /// two resources.
    pub(crate) async fn list_all<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        key: &str,
        filter: &[(&str, String)],
    ) -> Result<Vec<T>, VultrError> {
        let cfg = &self.inner.cfg;
        let mut items = Vec::new();
        let mut cursor = String::new();
        let mut seen = HashSet::new();
        let mut ids = HashSet::new();
        for _page in 0..cfg.list_pages_max {
            let mut query: Vec<(&str, String)> = filter.to_vec();
            query.push(("per_page", cfg.per_page.to_string()));
            if !cursor.is_empty() {
                query.push(("cursor", cursor.clone()));
            }
            let a = self.request_retrying(Method::GET, segments, &query, None).await?;
            if !a.is_success() {
                return Err(a.to_error());
            }
            let mut page: serde_json::Value = a.json()?;
            let list = page
                .get_mut(key)
                .map(serde_json::Value::take)
                .ok_or_else(|| VultrError::Decode(format!("listing has no {key:?} array")))?;
            let list = match list {
                serde_json::Value::Array(l) => {
                    l.into_iter().filter(|i| i.get("id").is_none_or(|id| ids.insert(id.to_string()))).collect()
                }
                other => other,
            };
            let mut batch: Vec<T> =
                serde_json::from_value(list).map_err(|e| VultrError::Decode(format!("listing {key:?}: {e}")))?;
            items.append(&mut batch);
            // Vultr ends a listing with next == "" (not null); a missing meta
            // is read the same way, since there is nothing to follow.
            let next = page.pointer("/meta/links/next").and_then(|v| v.as_str()).unwrap_or("").to_owned();
            if next.is_empty() {
                return Ok(items);
            }
            if !seen.insert(next.clone()) {
                return Err(VultrError::Pagination(format!("cursor {next:?} came back twice")));
            }
            cursor = next;
        }
        Err(VultrError::Pagination(format!("more than {} pages", cfg.list_pages_max)))
    }
}

/// The connect timeout, at most three quarters of the request timeout: a
/// connect that outlasts it is a connect error (never sent), where the
/// request timeout firing first could not be told from one after the
/// request was written (Unknown).
fn connect_timeout_in_force(cfg: &VultrConfig) -> u64 {
    cfg.connect_timeout_ms.min(cfg.request_timeout_ms.saturating_mul(3) / 4).max(1)
}

fn backoff(cfg: &VultrConfig, attempt: u32) -> Duration {
    let exp = cfg.backoff_base_ms.saturating_mul(1u64 << (attempt - 1).min(20));
    Duration::from_millis(exp.min(cfg.backoff_max_ms))
}
