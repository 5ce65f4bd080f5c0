//! Webhook delivery: each endpoint's events, in feed order, each POSTed as
//! JSON with an HMAC-SHA256 signature over a timestamp and the body, until
//! the receiver answers 2xx. A failed attempt is tried again after a
//! backoff that doubles up to a cap; after [`WebhookConfig::attempts_max`]
//! attempts the event becomes a dead letter and the endpoint moves on. Its
//! state is in the database, so a restart resumes where it was; a slow
//! receiver holds up its own endpoint only (a task of its own, every
//! attempt bounded by a timeout), never a worker's runs.
//!
//! The signing secret of an endpoint is derived from the webhook key
//! (`ODUFLOW_WEBHOOK_KEY`, held in memory only) and the endpoint's id:
//! nothing secret is stored.

use crate::Clock;
use hmac::{Hmac, Mac};
use oduflow_store::{Attempt, FeedEvent, Store, WebhookRow};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;
use std::sync::Arc;
use std::time::Duration;

/// The shortest webhook key accepted, in characters.
pub const WEBHOOK_KEY_LEN_MIN: usize = 32;
/// How long a receiver has to answer one delivery.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one process holds an endpoint; a pass stops taking new events
/// once half of it has gone, so it never delivers past its lease.
pub const WEBHOOK_LEASE_MS: i64 = 60_000;
/// Events read from the feed at a time.
const WEBHOOK_PAGE: i64 = 100;
/// How often the delivery loop looks for new events.
pub const WEBHOOK_POLL: Duration = Duration::from_secs(1);
/// How old a signature's timestamp a receiver should accept, at most
/// (documented for receivers; a replayed dead letter is signed anew).
pub const WEBHOOK_TOLERANCE_S: i64 = 300;

/// The master key endpoints' secrets are derived from.
#[derive(Clone)]
pub struct WebhookKey(SecretString);

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookKey(..)")
    }
}

impl WebhookKey {
    /// A key of at least [`WEBHOOK_KEY_LEN_MIN`] printable characters.
    pub fn new(key: SecretString) -> Result<Self, String> {
        let k = key.expose_secret();
        if k.chars().count() < WEBHOOK_KEY_LEN_MIN || k.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(format!(
                "ODUFLOW_WEBHOOK_KEY must be at least {WEBHOOK_KEY_LEN_MIN} characters, none of them spaces"
            ));
        }
        Ok(Self(key))
    }

    /// The signing secret of the endpoint with this id: what its receiver
    /// is given once, at `webhook add`.
    pub fn secret_for(&self, endpoint_id: &str) -> String {
        hex(&mac(self.0.expose_secret().as_bytes(), format!("oduflow-webhook:{endpoint_id}").as_bytes()))
    }
}

fn mac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(msg);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `Oduflow-Signature` header's value for a body sent at `timestamp`
/// (seconds since the epoch): `v1=` and the hex HMAC-SHA256, keyed with
/// the endpoint's secret, of `"{timestamp}.{body}"`.
pub fn signature(secret: &str, timestamp: i64, body: &str) -> String {
    format!("v1={}", hex(&mac(secret.as_bytes(), format!("{timestamp}.{body}").as_bytes())))
}

/// An endpoint's URL: `http` or `https`, a host, no user or password (it
/// would be stored and shown).
pub fn url_check(url: &str) -> Result<(), String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("webhook URL {url:?}: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(format!("webhook URL {url:?}: use http:// or https:// and a host"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("webhook URL: no user or password in it (they would be stored); the signature authenticates".into());
    }
    Ok(())
}

/// The event kinds an endpoint takes: each one oduflow writes.
pub fn kinds_check(kinds: &[String]) -> Result<(), String> {
    match kinds.iter().find(|k| oduflow_model::EventKind::parse(k).is_none()) {
        Some(k) => Err(format!("event kind {k:?}: not one oduflow writes")),
        None => Ok(()),
    }
}

/// Delivery settings; the defaults suit production.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// How long one process holds an endpoint.
    pub lease_ms: i64,
    pub attempts_max: i64,
    pub backoff_base_ms: i64,
    pub backoff_max_ms: i64,
    pub timeout: Duration,
}

impl Default for WebhookConfig {
    /// 20 attempts, 1 s doubling to 15 min: about 2 h 45 min of trying
    /// before an event becomes a dead letter, so a receiver down for an
    /// hour misses nothing.
    fn default() -> Self {
        Self {
            lease_ms: WEBHOOK_LEASE_MS,
            attempts_max: 20,
            backoff_base_ms: 1_000,
            backoff_max_ms: 15 * 60_000,
            timeout: WEBHOOK_TIMEOUT,
        }
    }
}

impl WebhookConfig {
    /// The wait after the `n`th failed attempt (1-based).
    pub fn backoff_ms(&self, n: i64) -> i64 {
        let doublings = u32::try_from((n - 1).clamp(0, 30)).unwrap_or(30);
        self.backoff_base_ms.saturating_mul(1_i64 << doublings).min(self.backoff_max_ms)
    }
}

/// What one pass did, over every endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    pub delivered: u64,
    pub failed: u64,
    pub dead: u64,
    pub replayed: u64,
}

impl PassReport {
    fn add(&mut self, r: &PassReport) {
        self.delivered += r.delivered;
        self.failed += r.failed;
        self.dead += r.dead;
        self.replayed += r.replayed;
    }
}

/// Endpoints one process delivers to at the same time, at most.
pub const WEBHOOK_ENDPOINTS_AT_ONCE: usize = 16;

/// Delivers every endpoint's events, as one process among any number;
/// each endpoint in a task of its own, so a slow receiver holds up only
/// its own.
#[derive(Clone)]
pub struct Deliverer(Arc<Inner>);

struct Inner {
    store: Store,
    http: reqwest::Client,
    key: WebhookKey,
    /// Unique to this deliverer (two containers' workers may share a name).
    owner: String,
    clock: Arc<dyn Clock>,
    cfg: WebhookConfig,
}

type Failure = String;

impl Deliverer {
    pub fn new(store: Store, key: WebhookKey, owner: &str, clock: Arc<dyn Clock>, cfg: WebhookConfig) -> Self {
        let http = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent("oduflow-webhooks")
            .build()
            .expect("the HTTP client builds");
        let owner = format!("{owner}-{}", uuid::Uuid::new_v4().simple());
        Self(Arc::new(Inner { store, http, key, owner, clock, cfg }))
    }

    /// Until `stop` turns true: a pass, then [`WEBHOOK_POLL`]. A failed
    /// pass (the database) is logged and tried again at the next poll.
    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        while !*stop.borrow() {
            if let Err(e) = self.pass().await {
                tracing::warn!(error = %e, "webhook delivery: a pass failed; trying again");
            }
            tokio::select! {
                _ = tokio::time::sleep(WEBHOOK_POLL) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One pass over every live endpoint that is due and not held by
    /// another process, each in a task of its own (at most
    /// [`WEBHOOK_ENDPOINTS_AT_ONCE`]); an endpoint whose pass fails is
    /// logged and does not stop the others.
    pub async fn pass(&self) -> oduflow_store::Result<PassReport> {
        let mut report = PassReport::default();
        let endpoints = self.0.store.webhook_list().await?;
        let now = self.0.clock.now_ms();
        let due: Vec<WebhookRow> = endpoints.into_iter().filter(|e| e.next_attempt_ms <= now).collect();
        for batch in due.chunks(WEBHOOK_ENDPOINTS_AT_ONCE) {
            let mut tasks = tokio::task::JoinSet::new();
            for e in batch.iter().cloned() {
                let d = self.clone();
                tasks.spawn(async move { (d.claimed(&e).await, e.name) });
            }
            while let Some(done) = tasks.join_next().await {
                match done {
                    Ok((Ok(r), _)) => report.add(&r),
                    Ok((Err(err), name)) => {
                        tracing::warn!(endpoint = %name, error = %err, "webhook delivery: this endpoint's pass failed")
                    }
                    Err(err) => tracing::warn!(error = %err, "webhook delivery: a pass's task ended"),
                }
            }
        }
        Ok(report)
    }

    /// The endpoint's pass, if this process can take it now.
    async fn claimed(&self, e: &WebhookRow) -> oduflow_store::Result<PassReport> {
        let Inner { store, owner, clock, cfg, .. } = &*self.0;
        let now = clock.now_ms();
        let mut report = PassReport::default();
        let Some(e) = store.webhook_claim(&e.id, owner, cfg.lease_ms, now).await? else { return Ok(report) };
        let done = self.endpoint(&e, now, &mut report).await;
        store.webhook_release(&e.id, owner).await?;
        done.map(|()| report)
    }

    /// Whether this process may send once more: half its lease is left.
    fn in_lease(&self, claimed_ms: i64) -> bool {
        self.0.clock.now_ms() - claimed_ms < self.0.cfg.lease_ms / 2
    }

    /// The endpoint's replays, then its events after the cursor, until one
    /// fails, the feed is read to its end, or half the lease has gone.
    async fn endpoint(&self, e: &WebhookRow, claimed_ms: i64, report: &mut PassReport) -> oduflow_store::Result<()> {
        let dead = self.0.store.webhook_dead_letters(&e.id).await?;
        let replays: Vec<i64> = dead.iter().filter(|d| d.replay_ms.is_some()).map(|d| d.position).collect();
        for ev in self.0.store.feed_at(&replays).await? {
            if !self.in_lease(claimed_ms) {
                return Ok(());
            }
            let failed = self.send(e, &ev).await.err();
            let now = self.0.clock.now_ms();
            self.0.store.webhook_replayed(&e.id, &self.0.owner, ev.position, failed.as_deref(), now).await?;
            report.replayed += u64::from(failed.is_none());
        }
        let mut cursor = e.cursor;
        // Failed attempts at the event after the cursor (an event skipped
        // as another kind has none).
        let mut attempts = e.attempts;
        while self.in_lease(claimed_ms) {
            let page = self.0.store.feed_after(cursor, WEBHOOK_PAGE).await?;
            let Some(last) = page.events.last().map(|ev| ev.position) else { return Ok(()) };
            for ev in &page.events {
                if !e.kinds.is_empty() && !e.kinds.contains(&ev.kind) {
                    continue;
                }
                if !self.in_lease(claimed_ms) {
                    return Ok(());
                }
                let attempt = match self.send(e, ev).await {
                    Ok(()) => Attempt::Delivered,
                    Err(error) => {
                        attempts += 1;
                        let now = self.0.clock.now_ms();
                        let dead = attempts >= self.0.cfg.attempts_max;
                        Attempt::Failed { error, retry_at_ms: now + self.0.cfg.backoff_ms(attempts), dead }
                    }
                };
                if !self
                    .0
                    .store
                    .webhook_attempted(&e.id, &self.0.owner, ev.position, &attempt, self.0.clock.now_ms())
                    .await?
                {
                    return Ok(());
                }
                match attempt {
                    Attempt::Delivered => report.delivered += 1,
                    Attempt::Failed { dead: true, .. } => report.dead += 1,
                    Attempt::Failed { error, .. } => {
                        report.failed += 1;
                        tracing::warn!(endpoint = %e.name, position = ev.position, attempts, error = %error,
                            "webhook delivery failed; trying again later");
                        return Ok(());
                    }
                }
                attempts = 0;
            }
            self.0.store.webhook_skip(&e.id, &self.0.owner, last, self.0.clock.now_ms()).await?;
            cursor = last;
        }
        Ok(())
    }

    /// POSTs one event, signed; `Err` says why it was not taken.
    async fn send(&self, e: &WebhookRow, ev: &FeedEvent) -> Result<(), Failure> {
        let body = serde_json::to_string(ev).map_err(|e| e.to_string())?;
        let timestamp = self.0.clock.now_ms().div_euclid(1000);
        let sig = signature(&self.0.key.secret_for(&e.id), timestamp, &body);
        let answer = self
            .0
            .http
            .post(&e.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("Oduflow-Timestamp", timestamp.to_string())
            .header("Oduflow-Signature", sig)
            .header("Oduflow-Position", ev.position.to_string())
            .body(body)
            .send()
            .await;
        match answer {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("the receiver answered {}", r.status().as_u16())),
            Err(err) if err.is_timeout() => Err(format!("no answer within {} ms", self.0.cfg.timeout.as_millis())),
            Err(err) if err.is_connect() => Err("could not connect".to_owned()),
            Err(_) => Err("the request failed".to_owned()),
        }
    }
}
