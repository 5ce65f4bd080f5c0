//! The simulated account: resources, their lifecycles, the ledger, and the
//! per-request gate (rate limit, auth, fault draw). Everything here is
//! synchronous and runs under one mutex, so the order in which requests take
//! the lock *is* the arrival order that fault draws follow.

use crate::config::{Faults, Op, REDIRECT_STATUSES, Scripted, SimConfig};
use crate::rng::SplitMix64;
use crate::time::now_rfc3339;
use oduflow_model::KeyFingerprint;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::Duration;
use tokio::time::Instant;

/// Longest listing page Vultr serves (docs/vultr.md §2), and its default.
const PER_PAGE_MAX: usize = 500;
const PER_PAGE_DEFAULT: usize = 100;

/// Fault log entries kept; older ones are dropped so a long `oduflow sim` run
/// does not grow without bound. A test campaign stays far below it.
const FAULT_LOG_MAX: usize = 100_000;

/// Seconds a 429 asks the client to wait. One second: the limit is per second.
pub(crate) const RETRY_AFTER_SECS: u64 = 1;

/// Region ids and their options (a subset of Vultr's, docs/vultr.md §4). `mel`
/// deliberately offers no block storage.
const REGIONS: &[(&str, &str, &str, &str, &[&str])] = &[
    (
        "ewr",
        "New Jersey",
        "US",
        "North America",
        &["ddos_protection", "block_storage_high_perf", "block_storage_storage_opt", "load_balancers", "kubernetes"],
    ),
    (
        "ams",
        "Amsterdam",
        "NL",
        "Europe",
        &["ddos_protection", "block_storage_high_perf", "block_storage_storage_opt", "load_balancers", "kubernetes"],
    ),
    (
        "fra",
        "Frankfurt",
        "DE",
        "Europe",
        &["ddos_protection", "block_storage_storage_opt", "load_balancers", "kubernetes"],
    ),
    (
        "lax",
        "Los Angeles",
        "US",
        "North America",
        &["ddos_protection", "block_storage_high_perf", "block_storage_storage_opt", "kubernetes"],
    ),
    ("mel", "Melbourne", "AU", "Australia", &["load_balancers"]),
];

/// (id, vcpus, ram MB, disk GB, bandwidth GB, monthly cost, type, regions).
#[allow(clippy::type_complexity)]
const PLANS: &[(&str, i64, i64, i64, i64, i64, &str, &[&str])] = &[
    ("vc2-1c-1gb", 1, 1024, 25, 1024, 5, "vc2", &["ewr", "ams", "fra", "lax", "mel"]),
    ("vc2-1c-2gb", 1, 2048, 55, 2048, 10, "vc2", &["ewr", "ams", "fra", "lax", "mel"]),
    ("vc2-2c-4gb", 2, 4096, 80, 3072, 20, "vc2", &["ewr", "ams", "fra", "lax"]),
    ("vhf-1c-1gb", 1, 1024, 32, 1024, 6, "vhf", &["ewr", "ams"]),
];

/// Operating systems the simulator can "install" (id, name).
const OSES: &[(i64, &str)] = &[
    (215, "CentOS 7 x64"),
    (387, "Ubuntu 20.04 LTS x64"),
    (1743, "Ubuntu 22.04 LTS x64"),
    (2136, "Debian 12 x64"),
    (2284, "Ubuntu 24.04 LTS x64"),
];

/// How long after creation reads carry `default_password` (Vultr: "only
/// available for ten minutes after deployment").
const PASSWORD_VISIBLE: Duration = Duration::from_secs(600);

/// The one-time root password the simulator gives an instance: derived from
/// its id, so a test can search logs and databases for it.
pub fn sim_root_password(instance_id: &str) -> String {
    format!("Sim-root-{}!", &instance_id[..8.min(instance_id.len())])
}

/// The `update_instance_request` fields the simulator applies.
const MODELLED_PATCH: &[&str] = &["plan", "tags", "firewall_group_id", "label"];

/// The `update_instance_request` fields (OA:20076) the simulator does not
/// model: accepted where they change nothing ([`unchanged_by`]), refused
/// where they would.
const UNMODELLED_PATCH: &[&str] = &[
    "ddos_protection",
    "enable_ipv6",
    "backups",
    "user_scheme",
    "tag",
    "enable_vpc",
    "enable_vpc2",
    "enable_private_network",
    "attach_vpc",
    "attach_vpc2",
    "attach_private_network",
    "detach_vpc",
    "detach_vpc2",
    "detach_private_network",
];

/// PATCH fields that reinstall the instance (`snapshot_id` restores one):
/// the simulator never does, and oduflow never sends one (docs/vultr.md §8).
const REINSTALL_FIELDS: &[&str] = &["os_id", "app_id", "image_id", "snapshot_id", "user_data"];

/// Vultr's 404 for a block it does not hold, a deleted one included
/// (docs/vultr.md §8: Terraform's provider met these words, and its block
/// read takes them as gone).
const BLOCK_NOT_FOUND: &str = "Invalid block storage ID.";

const DNS_TYPES: &[&str] = &["A", "AAAA", "CNAME", "NS", "MX", "SRV", "TXT", "CAA", "SSHFP"];

/// A simulated answer: status, optional JSON body, optional Retry-After.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub body: Option<Value>,
    pub retry_after: Option<u64>,
}

impl Reply {
    fn json(status: u16, body: Value) -> Self {
        Self { status, body: Some(body), retry_after: None }
    }
    /// Vultr's error shape, `{"error": "...", "status": N}`.
    pub fn error(status: u16, msg: &str) -> Self {
        Self::json(status, json!({ "error": msg, "status": status }))
    }
    pub(crate) fn no_content() -> Self {
        Self { status: 204, body: None, retry_after: None }
    }
    pub fn too_many(retry_after_secs: u64) -> Self {
        Self {
            retry_after: Some(retry_after_secs),
            ..Self::error(429, "Rate limit exceeded. Please slow down your requests.")
        }
    }
}

/// What kind of resource a ledger entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    Instance,
    Block,
    DnsRecord,
}

/// One resource ever created, deleted or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerResource {
    pub kind: ResourceKind,
    pub id: String,
    /// The create's label (for a DNS record: `name.domain`).
    pub label: String,
    /// Region (for a DNS record: the domain).
    pub region: String,
    /// SHA-256 hex of the key that created it.
    pub key_fingerprint: String,
    pub created_at: String,
    pub deleted_at: Option<String>,
}

/// A fault the simulator injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    LostDrop,
    Lost5xx,
    LostStall,
    Error5xx,
    Burst429,
    /// Not applied; answered with a 3xx to the same URL.
    Redirect,
    /// Applied, then answered with a 3xx to the same URL.
    LostRedirect,
    /// A DNS record's GET answered 404 (`dns_get_404`).
    DnsGet404,
    /// A listing's page began with the item the previous page ended with
    /// (`page_repeat`).
    PageRepeat,
    /// A listing's page was answered, then the item it ended with and the
    /// item the next page would start with were deleted (`page_delete`).
    PageDelete,
}

/// One request that got a fault or added latency, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// Arrival number of the request (1-based, every /v2 request counts).
    pub seq: u64,
    pub op: Op,
    pub fault: Option<FaultKind>,
    pub latency_ms: u64,
    /// The status a `Redirect` or `LostRedirect` fault answered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_status: Option<u16>,
}

/// Everything the simulator has seen: `GET /sim/ledger`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub resources: Vec<LedgerResource>,
    /// Create requests *applied* per label (instances and blocks). A value
    /// above 1 means something was created twice.
    pub creates_per_label: BTreeMap<String, u64>,
    /// Attach requests applied per block id.
    pub attaches_per_block: BTreeMap<String, u64>,
    /// Requests by `METHOD /route`, every /v2 request counted (429s too).
    pub requests: BTreeMap<String, u64>,
    /// Responses by status code; 0 counts connections closed with no answer
    /// (the `lost_drop` fault).
    pub responses_by_status: BTreeMap<u16, u64>,
    /// 429s served because the client went over the rate.
    pub responses_429_rate_limit: u64,
    /// The most requests from one source address in one second, refused
    /// ones included (above `rate_per_sec` means some were answered 429).
    #[serde(default)]
    pub busiest_second: u64,
    /// 429s served by a `burst_429` fault.
    pub responses_429_fault: u64,
    pub faults: Vec<FaultEvent>,
    /// Create requests (instances and blocks) that *reached* the simulator
    /// per label, applied or not (refused by a fault, redirected, 429). A
    /// value above 1 means a create was sent twice.
    #[serde(default)]
    pub create_requests_per_label: BTreeMap<String, u64>,
    /// Every /v2 request in arrival order, for the campaign's invariants on
    /// who asked what when.
    #[serde(default)]
    pub request_log: Vec<RequestRecord>,
    /// The body of every instance create applied, in order: what a test
    /// reads to see each server field reach Vultr. Here as in the other
    /// bodies kept, a `null` member is left out: it counts as absent.
    #[serde(default)]
    pub instance_create_bodies: Vec<Value>,
    /// `POST /instances/{id}/backup-schedule` applied, per instance.
    #[serde(default)]
    pub backup_schedules_set: BTreeMap<String, u64>,
    /// Every `PATCH /instances/{id}` applied, in order: `{id, body}`.
    #[serde(default)]
    pub instance_patch_bodies: Vec<Value>,
    /// Every `PATCH /blocks/{id}` applied, in order: `{id, body}`.
    #[serde(default)]
    pub block_patch_bodies: Vec<Value>,
    /// Every `PATCH /domains/{d}/records/{id}` applied, in order: `{id, body}`.
    #[serde(default)]
    pub dns_patch_bodies: Vec<Value>,
}

/// One /v2 request as it arrived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Milliseconds since the Unix epoch, on arrival.
    pub at_ms: i64,
    pub method: String,
    /// The route template (`/v2/instances/{instance-id}`).
    pub route: String,
    /// The instance or block id in the path, if any.
    pub resource_id: Option<String>,
    /// A create's label, from its body.
    pub label: Option<String>,
    /// SHA-256 hex of the bearer key ("" without one).
    pub key_fingerprint: String,
    /// The address the request came from (what Vultr counts its limit by).
    #[serde(default)]
    pub source: String,
}

#[derive(Debug)]
struct SimInstance {
    id: String,
    label: String,
    region: String,
    plan: String,
    os_id: i64,
    app_id: i64,
    image_id: String,
    hostname: String,
    tags: Vec<String>,
    firewall_group_id: String,
    /// Created with `backups: "enabled"`.
    backups: bool,
    main_ip: String,
    /// `""` unless created with `enable_ipv6`.
    v6_main_ip: String,
    /// Set by `POST /instances/{id}/backup-schedule`.
    backup_schedule: Option<Value>,
    /// The create's `user_data` (base64), as `GET .../user-data` shows it.
    user_data: String,
    created: Instant,
    created_wall: String,
    deleted: Option<Instant>,
    locked_until: Option<Instant>,
    /// A plan change in progress: the instance is `resizing` until then,
    /// and shows the new plan after it.
    resizing: Option<(Instant, String)>,
    ledger_ix: usize,
}

#[derive(Debug)]
struct SimBlock {
    id: String,
    label: String,
    region: String,
    size_gb: i64,
    block_type: String,
    attached_to: Option<String>,
    mount_id: String,
    created: Instant,
    created_wall: String,
    deleted: Option<Instant>,
    /// A resize in progress: the new size shows from then on.
    resizing: Option<(Instant, i64)>,
    /// When the last resize was accepted: the next one, and a detach, are
    /// refused until `resize_interval_ms` later.
    resized: Option<Instant>,
    /// Until then, reads still show this attachment (the one before the
    /// last change of `attached_to`): an attach shows after
    /// `attach_visible_ms`, a VM's delete releases its volume after
    /// `release_on_vm_delete_ms`.
    shown_before: Option<(Instant, Option<String>)>,
    ledger_ix: usize,
}

#[derive(Debug)]
struct SimRecord {
    id: String,
    record_type: String,
    name: String,
    data: String,
    priority: i64,
    ttl: i64,
    deleted: bool,
    created: Instant,
    ledger_ix: usize,
}

/// The decision the gate made for one request.
#[derive(Debug, Clone)]
pub(crate) enum Gate {
    /// A test's scripted answer ([`Scripted`]).
    Scripted(Scripted),
    /// Answer this right away, without applying.
    Refuse(u16),
    /// Answer 429 with this `Retry-After` (seconds), without applying.
    TooMany(u64),
    /// Answer this redirect (to the request's own URL) right away, without
    /// applying.
    Redirect(u16),
    /// Apply (after `latency_ms`), then lose the answer in the given way, or
    /// deliver it. `redirect` is the status a `LostRedirect` answers with.
    Pass { latency_ms: u64, lost: Option<FaultKind>, redirect: Option<u16> },
}

/// Scripted answers for some operations: `left` more requests (`None`:
/// every one until the test clears it).
#[derive(Debug)]
struct Script {
    ops: Vec<Op>,
    answer: Scripted,
    left: Option<u32>,
}

pub(crate) struct World {
    cfg: SimConfig,
    scripts: Vec<Script>,
    keys: HashSet<String>,
    faults: Faults,
    fault_rng: SplitMix64,
    id_rng: SplitMix64,
    seq: u64,
    faults_injected: u64,
    burst_left: u32,
    /// Per source address, the accepted requests of the last second.
    windows: HashMap<IpAddr, VecDeque<Instant>>,
    next_ip: u32,
    instances: Vec<SimInstance>,
    blocks: Vec<SimBlock>,
    domains: BTreeMap<String, Vec<SimRecord>>,
    ledger: Ledger,
    /// How far a test has moved this simulator's clock ahead of tokio's
    /// ([`crate::SimControl::advance`]).
    skew: Duration,
}

fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

impl World {
    pub fn new(cfg: SimConfig) -> Self {
        let keys = cfg.api_keys.iter().map(|k| KeyFingerprint::of_key(k).0).collect();
        let domains = cfg.dns_domains.iter().map(|d| (d.clone(), Vec::new())).collect();
        Self {
            keys,
            scripts: Vec::new(),
            faults: cfg.faults.clone(),
            fault_rng: SplitMix64::new(cfg.seed),
            // A separate stream, so creating resources never shifts the fault
            // sequence (and the other way round).
            id_rng: SplitMix64::new(cfg.seed ^ 0x1D50_F1D5),
            seq: 0,
            faults_injected: 0,
            burst_left: 0,
            windows: HashMap::new(),
            next_ip: 1,
            instances: Vec::new(),
            blocks: Vec::new(),
            domains,
            ledger: Ledger::default(),
            skew: Duration::ZERO,
            cfg,
        }
    }

    /// The time every lifecycle, lag and rate window is read against:
    /// tokio's clock plus what a test has advanced.
    fn now(&self) -> Instant {
        Instant::now() + self.skew
    }

    pub fn advance(&mut self, by: Duration) {
        self.skew += by;
    }

    pub fn ledger(&self) -> Ledger {
        self.ledger.clone()
    }

    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    pub fn set_faults(&mut self, f: Faults) {
        self.faults = f;
        self.faults_injected = 0;
        self.burst_left = 0;
    }

    /// Answers the next `times` requests of `ops` (`None`: every one until
    /// [`World::unscript`]) with `answer`, after the rate limit and the key
    /// check and instead of a fault draw. Scripts are tried in the order
    /// they were given.
    pub fn script(&mut self, ops: &[Op], answer: Scripted, times: Option<u32>) {
        if times != Some(0) {
            self.scripts.push(Script { ops: ops.to_vec(), answer, left: times });
        }
    }

    /// Drops every scripted answer not yet used.
    pub fn unscript(&mut self) {
        self.scripts.clear();
    }

    /// Accepts these API keys from now on, and no other.
    pub fn set_api_keys(&mut self, keys: &[secrecy::SecretString]) {
        self.keys = keys.iter().map(|k| KeyFingerprint::of_key(k).0).collect();
    }

    /// How long new and existing instances stay `pending` after their create.
    pub fn set_pending_ms(&mut self, ms: u64) {
        self.cfg.pending_ms = ms;
    }

    fn scripted(&mut self, op: Op) -> Option<Scripted> {
        let ix = self.scripts.iter().position(|s| s.ops.contains(&op))?;
        let s = &mut self.scripts[ix];
        let answer = s.answer.clone();
        if let Some(n) = &mut s.left {
            *n -= 1;
            if *n == 0 {
                self.scripts.remove(ix);
            }
        }
        Some(answer)
    }

    /// Records a request on arrival (see [`Ledger::request_log`]).
    pub fn log_request(&mut self, rec: RequestRecord) {
        if let Some(label) = &rec.label {
            *self.ledger.create_requests_per_label.entry(label.clone()).or_default() += 1;
        }
        self.ledger.request_log.push(rec);
    }

    pub fn count_response(&mut self, status: u16) {
        *self.ledger.responses_by_status.entry(status).or_default() += 1;
    }

    /// Runs for every /v2 request on arrival: counts it, draws its faults
    /// (always two draws, so the stream position depends only on the number of
    /// requests), then applies the rate limit, authentication and the fault.
    pub fn gate(&mut self, route: &str, op: Op, key_fp: Option<&str>, needs_auth: bool, source: IpAddr) -> Gate {
        let now = self.now();
        self.seq += 1;
        *self.ledger.requests.entry(route.to_owned()).or_default() += 1;
        let u_fault = self.fault_rng.next_f64();
        let u_latency = self.fault_rng.next_f64();

        // Vultr's limit, per source address: more than `rate_per_sec`
        // requests in the last second, this one and refused ones included,
        // are answered 429 (counting refused requests too is the stricter
        // reading: a client that keeps knocking stays refused).
        let window = self.windows.entry(source).or_default();
        while window.front().is_some_and(|t| now.saturating_duration_since(*t) >= Duration::from_secs(1)) {
            window.pop_front();
        }
        window.push_back(now);
        let in_window = window.len() as u64;
        self.ledger.busiest_second = self.ledger.busiest_second.max(in_window);
        if in_window > u64::from(self.cfg.rate_per_sec.max(1)) {
            self.ledger.responses_429_rate_limit += 1;
            return Gate::TooMany(RETRY_AFTER_SECS);
        }

        if needs_auth && !key_fp.is_some_and(|k| self.keys.contains(k)) {
            return Gate::Refuse(401);
        }
        if let Some(answer) = self.scripted(op) {
            return Gate::Scripted(answer);
        }

        self.draw_fault(op, u_fault, u_latency)
    }

    /// The fault plan's answer for a request that passed the rate limit, the
    /// key and the scripts: `u_fault` and `u_latency` are its two draws.
    fn draw_fault(&mut self, op: Op, u_fault: f64, u_latency: f64) -> Gate {
        let f = &self.faults;
        if !f.targets(op) {
            return Gate::Pass { latency_ms: 0, lost: None, redirect: None };
        }
        let latency_ms = if f.latency_max_ms > 0 {
            let span = (f.latency_max_ms - f.latency_min_ms + 1) as f64;
            f.latency_min_ms + (u_latency * span) as u64
        } else {
            0
        };
        let budget_left = f.faults_max.is_none_or(|m| self.faults_injected < m);
        // Where the draw fell within the picked fault's share, in [0, 1): picks
        // a redirect's status without a third draw, so adding redirect faults
        // shifts no other seed's sequence.
        let mut within = 0.0;
        let fault = if self.burst_left > 0 {
            self.burst_left -= 1;
            Some(FaultKind::Burst429)
        } else if budget_left {
            let mut acc = 0.0;
            let mut pick = None;
            for (p, k) in [
                (f.lost_drop, FaultKind::LostDrop),
                (f.lost_5xx, FaultKind::Lost5xx),
                (f.lost_stall, FaultKind::LostStall),
                (f.error_5xx, FaultKind::Error5xx),
                (f.burst_429, FaultKind::Burst429),
                (f.redirect, FaultKind::Redirect),
                (f.lost_redirect, FaultKind::LostRedirect),
                (if op == Op::DnsRecordGet { f.dns_get_404 } else { 0.0 }, FaultKind::DnsGet404),
                (if op.is_scan() { f.page_repeat } else { 0.0 }, FaultKind::PageRepeat),
                (if op.is_scan() { f.page_delete } else { 0.0 }, FaultKind::PageDelete),
            ] {
                let start = acc;
                acc += p;
                if u_fault < acc {
                    pick = Some(k);
                    within = (u_fault - start) / p;
                    break;
                }
            }
            if pick == Some(FaultKind::Burst429) {
                self.burst_left = f.burst_429_len.saturating_sub(1);
            }
            if pick.is_some() {
                self.faults_injected += 1;
            }
            pick
        } else {
            None
        };
        let redirect_status = match fault {
            Some(FaultKind::Redirect | FaultKind::LostRedirect) => Some(f.redirect_status.unwrap_or_else(|| {
                let n = REDIRECT_STATUSES.len();
                REDIRECT_STATUSES[((within * n as f64) as usize).min(n - 1)]
            })),
            _ => None,
        };
        if fault.is_some() || latency_ms > 0 {
            if self.ledger.faults.len() >= FAULT_LOG_MAX {
                self.ledger.faults.remove(0);
            }
            self.ledger.faults.push(FaultEvent { seq: self.seq, op, fault, latency_ms, redirect_status });
        }
        match fault {
            Some(FaultKind::Burst429) => {
                self.ledger.responses_429_fault += 1;
                Gate::TooMany(f.retry_after_secs)
            }
            Some(FaultKind::Error5xx) => Gate::Refuse(500),
            Some(FaultKind::DnsGet404) => Gate::Refuse(404),
            Some(FaultKind::Redirect) => Gate::Redirect(redirect_status.expect("set for every redirect fault")),
            lost => Gate::Pass { latency_ms, lost, redirect: redirect_status },
        }
    }

    fn new_id(&mut self) -> String {
        let (a, b) = (self.id_rng.next_u64(), self.id_rng.next_u64());
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..].copy_from_slice(&b.to_le_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
    }

    fn ledger_push(&mut self, kind: ResourceKind, id: &str, label: &str, region: &str, key_fp: &str) -> usize {
        if kind != ResourceKind::DnsRecord {
            *self.ledger.creates_per_label.entry(label.to_owned()).or_default() += 1;
        }
        self.ledger.resources.push(LedgerResource {
            kind,
            id: id.to_owned(),
            label: label.to_owned(),
            region: region.to_owned(),
            key_fingerprint: key_fp.to_owned(),
            created_at: now_rfc3339(),
            deleted_at: None,
        });
        self.ledger.resources.len() - 1
    }

    fn ledger_delete(&mut self, ix: usize) {
        self.ledger.resources[ix].deleted_at = Some(now_rfc3339());
    }

    // ----- visibility and lifecycle -----

    /// GET-visible: not deleted and past the 404 window (this resource's:
    /// plus its share of `get_404_jitter_ms`).
    fn gettable(&self, id: &str, created: Instant, deleted: Option<Instant>, now: Instant) -> bool {
        let window = self.cfg.get_404_window_ms + jitter(id, 1, self.cfg.get_404_jitter_ms);
        deleted.is_none() && now >= created + ms(window)
    }

    /// Listing-visible: past the lag after create, and not yet past the lag
    /// after delete (this resource's: plus its share of
    /// `list_lag_jitter_ms`).
    fn listable(&self, id: &str, created: Instant, deleted: Option<Instant>, now: Instant) -> bool {
        let lag = ms(self.cfg.list_lag_ms + jitter(id, 2, self.cfg.list_lag_jitter_ms));
        now >= created + lag && deleted.is_none_or(|d| now < d + lag)
    }

    /// When an instance is `ok`: after its pending and installing times
    /// (installing plus its share of `installing_jitter_ms`).
    fn ok_at(&self, i: &SimInstance) -> Instant {
        i.created + ms(self.cfg.pending_ms + self.cfg.installing_ms + jitter(&i.id, 3, self.cfg.installing_jitter_ms))
    }

    /// (status, server_status) of an instance now.
    fn instance_state(&self, i: &SimInstance, now: Instant) -> (&'static str, &'static str) {
        let age = now.saturating_duration_since(i.created);
        if i.resizing.as_ref().is_some_and(|(until, _)| now < *until) {
            ("resizing", "locked")
        } else if age < ms(self.cfg.pending_ms) {
            ("pending", "none")
        } else if now < self.ok_at(i) {
            ("active", "installingbooting")
        } else if i.locked_until.is_some_and(|t| now < t) {
            ("active", "locked")
        } else {
            ("active", "ok")
        }
    }

    /// The plan an instance shows now: a resize's new plan once it is done.
    fn plan_now(i: &SimInstance, now: Instant) -> &str {
        match &i.resizing {
            Some((until, plan)) if now >= *until => plan,
            _ => &i.plan,
        }
    }

    fn instance_json(&self, i: &SimInstance, now: Instant) -> Value {
        let (status, server_status) = self.instance_state(i, now);
        let plan_id = Self::plan_now(i, now);
        let plan = PLANS.iter().find(|p| p.0 == plan_id);
        let (vcpu, ram, disk, bw) = plan.map(|p| (p.1, p.2, p.3, p.4)).unwrap_or((1, 1024, 25, 1024));
        let os = OSES.iter().find(|o| o.0 == i.os_id).map(|o| o.1).unwrap_or("Custom");
        let booted = status != "pending";
        let mut j = json!({
            "id": i.id,
            "os": os,
            "ram": ram,
            "disk": if booted { disk } else { 0 },
            "main_ip": if booted { i.main_ip.as_str() } else { "0.0.0.0" },
            "vcpu_count": vcpu,
            "region": i.region,
            "plan": plan_id,
            "date_created": i.created_wall,
            "status": status,
            "allowed_bandwidth": bw,
            "netmask_v4": if booted { "255.255.254.0" } else { "" },
            "gateway_v4": if booted { "10.0.0.1" } else { "0.0.0.0" },
            "power_status": "running",
            "server_status": server_status,
            // Flat v6 fields: what the API really returns (docs/vultr.md §2).
            "v6_network": v6_network_of(&i.v6_main_ip),
            "v6_main_ip": i.v6_main_ip,
            "v6_network_size": if i.v6_main_ip.is_empty() { 0 } else { 64 },
            "label": i.label,
            "internal_ip": "",
            "kvm": if booted { format!("https://my.vultr.com/subs/vps/novnc/api.php?data={}", i.id) } else { String::new() },
            "hostname": i.hostname,
            "os_id": i.os_id,
            "app_id": i.app_id,
            "image_id": i.image_id,
            "firewall_group_id": i.firewall_group_id,
            "features": if i.v6_main_ip.is_empty() { json!([]) } else { json!(["ipv6"]) },
            "tags": i.tags,
            "user_scheme": "root",
        });
        // On the create answer and on reads for the first ten minutes
        // (docs/vultr.md); one per instance, as Vultr's is.
        if now.saturating_duration_since(i.created) < PASSWORD_VISIBLE {
            j["default_password"] = json!(sim_root_password(&i.id));
        }
        j
    }

    /// A block's size now: a resize's new size once it is done.
    fn size_now(b: &SimBlock, now: Instant) -> i64 {
        match b.resizing {
            Some((until, gb)) if now >= until => gb,
            _ => b.size_gb,
        }
    }

    fn block_json(&self, b: &SimBlock, now: Instant) -> Value {
        let status = if now < b.created + ms(self.cfg.block_pending_ms) { "pending" } else { "active" };
        let size_gb = Self::size_now(b, now);
        json!({
            "id": b.id,
            "date_created": b.created_wall,
            // high_perf is $1/10 GB a month, storage_opt $1/40 GB; rounded up.
            "cost": if b.block_type == "storage_opt" { (size_gb + 39) / 40 } else { (size_gb + 9) / 10 },
            "status": status,
            "size_gb": size_gb,
            "region": b.region,
            "attached_to_instance": Self::attached_shown(b, now).unwrap_or(""),
            "label": b.label,
            "mount_id": b.mount_id,
            "block_type": b.block_type,
        })
    }

    /// The attachment reads show now.
    fn attached_shown(b: &SimBlock, now: Instant) -> Option<&str> {
        match &b.shown_before {
            Some((until, before)) if now < *until => before.as_deref(),
            _ => b.attached_to.as_deref(),
        }
    }

    /// Changes a block's attachment, shown to reads only after `lag_ms`.
    fn set_attached(b: &mut SimBlock, to: Option<String>, now: Instant, lag_ms: u64) {
        let before = Self::attached_shown(b, now).map(str::to_owned);
        b.shown_before = (lag_ms > 0).then(|| (now + ms(lag_ms), before));
        b.attached_to = to;
    }

    fn instance_ix(&self, id: &str, now: Instant) -> Option<usize> {
        self.instances.iter().position(|i| i.id == id && self.gettable(&i.id, i.created, i.deleted, now))
    }

    fn block_ix(&self, id: &str, now: Instant) -> Option<usize> {
        self.blocks.iter().position(|b| b.id == id && self.gettable(&b.id, b.created, b.deleted, now))
    }

    // ----- instances -----

    pub fn instance_create(&mut self, body: &Value, key_fp: &str) -> Reply {
        let Some(obj) = body.as_object() else {
            return Reply::error(400, "Bad request.");
        };
        let region = obj.get("region").and_then(Value::as_str);
        let plan = obj.get("plan").and_then(Value::as_str);
        let (Some(region), Some(plan)) = (region, plan) else {
            return Reply::error(400, "Both region and plan are required.");
        };
        if !REGIONS.iter().any(|r| r.0 == region) {
            return Reply::error(400, "Invalid region chosen.");
        }
        if !PLANS.iter().any(|p| p.0 == plan && p.7.contains(&region)) {
            return Reply::error(400, "Invalid plan chosen.");
        }
        let (os_id, app_id, image_id) = match crate::catalog::image_of(obj, OSES) {
            Ok(image) => image,
            Err(msg) => return Reply::error(400, &msg),
        };
        if let Err(msg) = crate::catalog::check_server_fields(obj, region) {
            return Reply::error(400, &msg);
        }
        let str_field = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let label = str_field("label");
        let tags = obj
            .get("tags")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let id = self.new_id();
        let ledger_ix = self.ledger_push(ResourceKind::Instance, &id, &label, region, key_fp);
        self.ledger.instance_create_bodies.push(body.clone());
        let ip = self.next_ip;
        self.next_ip += 1;
        let now = self.now();
        let inst = SimInstance {
            main_ip: format!("192.0.2.{}", ip % 254 + 1),
            id,
            label,
            region: region.to_owned(),
            plan: plan.to_owned(),
            os_id,
            app_id,
            image_id,
            hostname: str_field("hostname"),
            tags,
            firewall_group_id: str_field("firewall_group_id"),
            backups: str_field("backups") == "enabled",
            v6_main_ip: if obj.get("enable_ipv6") == Some(&json!(true)) {
                format!("2001:db8:{ip:x}::1")
            } else {
                String::new()
            },
            backup_schedule: None,
            user_data: str_field("user_data"),
            created: now,
            created_wall: now_rfc3339(),
            deleted: None,
            locked_until: None,
            resizing: None,
            ledger_ix,
        };
        let j = self.instance_json(&inst, now);
        self.instances.push(inst);
        Reply::json(202, json!({ "instance": j }))
    }

    /// `GET /instances/{id}/user-data` (OA): the create's user data,
    /// base64 as it was sent.
    pub fn instance_user_data(&self, id: &str) -> Reply {
        match self.instance_ix(id, self.now()) {
            Some(ix) => Reply::json(200, json!({ "user_data": { "data": self.instances[ix].user_data } })),
            None => Reply::error(404, "instance not found"),
        }
    }

    pub fn instance_get(&self, id: &str) -> Reply {
        let now = self.now();
        match self.instance_ix(id, now) {
            Some(ix) => Reply::json(200, json!({ "instance": self.instance_json(&self.instances[ix], now) })),
            None => Reply::error(404, "instance not found"),
        }
    }

    /// `fault`: `page_repeat` or `page_delete`, if either fell on this
    /// request.
    pub fn instance_list(&mut self, q: &BTreeMap<String, String>, fault: Option<FaultKind>) -> Reply {
        let now = self.now();
        // Vultr filters by each of these exactly (OA:7278-7340; `hostname`
        // in SPEC26); `tag` matches one of the instance's tags.
        let matches = |v: &Value| {
            ["label", "region", "main_ip", "hostname", "firewall_group_id"]
                .iter()
                .all(|f| q.get(*f).is_none_or(|want| v[*f].as_str() == Some(want)))
                && q.get("tag").is_none_or(|t| v["tags"].as_array().is_some_and(|ts| ts.iter().any(|x| x == t)))
        };
        let items = self
            .instances
            .iter()
            .map(|i| {
                let v = self.listable(&i.id, i.created, i.deleted, now).then(|| self.instance_json(i, now));
                (i.id.clone(), v.filter(matches))
            })
            .collect();
        let (reply, ends) = paginate("instances", items, q, fault == Some(FaultKind::PageRepeat));
        if fault == Some(FaultKind::PageDelete) {
            for id in ends.iter().flatten() {
                if let Some(ix) = self.instances.iter().position(|i| i.id == *id && i.deleted.is_none()) {
                    self.remove_instance(ix, now);
                }
            }
        }
        reply
    }

    pub fn instance_delete(&mut self, id: &str) -> Reply {
        let now = self.now();
        let Some(ix) = self.instance_ix(id, now) else {
            return Reply::error(404, "instance not found");
        };
        match self.instance_state(&self.instances[ix], now) {
            ("pending", _) => {
                return Reply::error(
                    500,
                    "Unable to destroy server: This subscription is not currently active, you cannot destroy it.",
                );
            }
            (_, "ok") => {}
            _ => {
                return Reply::error(500, "Unable to destroy server: Unable to remove VM: Server is currently locked");
            }
        }
        self.remove_instance(ix, now);
        Reply::no_content()
    }

    /// Deletes instance `ix` now: its ledger entry gets `deleted_at`, and
    /// the volumes attached to it are released (shown after
    /// `release_on_vm_delete_ms`).
    fn remove_instance(&mut self, ix: usize, now: Instant) {
        self.instances[ix].deleted = Some(now);
        let lix = self.instances[ix].ledger_ix;
        self.ledger_delete(lix);
        let lag = self.cfg.release_on_vm_delete_ms;
        let id = self.instances[ix].id.clone();
        for b in &mut self.blocks {
            if b.attached_to.as_deref() == Some(id.as_str()) {
                Self::set_attached(b, None, now, lag);
            }
        }
    }

    /// The plans an instance may move to: sold in its region, no smaller
    /// in memory or disk (a disk never shrinks), not the one it has.
    fn upgrades_of(&self, i: &SimInstance, now: Instant) -> Vec<&'static str> {
        let current = Self::plan_now(i, now);
        let Some(have) = PLANS.iter().find(|p| p.0 == current) else {
            return vec![];
        };
        PLANS
            .iter()
            .filter(|p| p.0 != current && p.7.contains(&i.region.as_str()) && p.2 >= have.2 && p.3 >= have.3)
            .map(|p| p.0)
            .collect()
    }

    /// `GET /instances/{id}/upgrades` (OA:9559): only `plans` is modelled.
    pub fn instance_upgrades(&self, id: &str) -> Reply {
        let now = self.now();
        match self.instance_ix(id, now) {
            Some(ix) => {
                let plans = self.upgrades_of(&self.instances[ix], now);
                Reply::json(200, json!({ "upgrades": { "os": [], "applications": [], "plans": plans } }))
            }
            None => Reply::error(404, "instance not found"),
        }
    }

    /// `PATCH /instances/{id}` (OA:7635): `plan` (an upgrade, listed by
    /// [`Self::instance_upgrades`]; the instance is `resizing` for
    /// `resize_ms`), `tags` (the whole list), `firewall_group_id` and
    /// `label`. The other documented fields are accepted where they change
    /// nothing ([`unchanged_by`]: govultr always sends `ddos_protection`),
    /// refused where they would; a reinstall is refused, and so is a field
    /// the document does not name. Refused while the instance is not
    /// `active / ok`; a PATCH that changes nothing is answered 400 "Nothing
    /// to change", as Vultr answers one to a block (docs/vultr.md §8; for
    /// instances our assumption).
    pub fn instance_patch(&mut self, id: &str, body: &Value) -> Reply {
        let now = self.now();
        let Some(obj) = body.as_object() else {
            return Reply::error(400, "Bad request.");
        };
        if let Some(k) = obj.keys().find(|k| REINSTALL_FIELDS.contains(&k.as_str())) {
            return Reply::error(400, &format!("The simulator does not reinstall instances ({k})."));
        }
        let known = |k: &str| MODELLED_PATCH.contains(&k) || UNMODELLED_PATCH.contains(&k);
        if let Some(k) = obj.keys().find(|k| !known(k)) {
            return Reply::error(400, &format!("The simulator does not model changing {k}."));
        }
        let Some(ix) = self.instance_ix(id, now) else {
            return Reply::error(404, "instance not found");
        };
        if self.instance_state(&self.instances[ix], now) != ("active", "ok") {
            return Reply::error(500, "Unable to update server: Server is currently locked");
        }
        let region = self.instances[ix].region.clone();
        if let Err(msg) = crate::catalog::check_server_fields(obj, &region) {
            return Reply::error(400, &msg);
        }
        for (k, v) in obj.iter().filter(|(k, _)| UNMODELLED_PATCH.contains(&k.as_str())) {
            match unchanged_by(&self.instances[ix], k, v) {
                Ok(true) => {}
                Ok(false) => return Reply::error(400, &format!("The simulator does not model changing {k}.")),
                Err(msg) => return Reply::error(400, &msg),
            }
        }
        let tags: Option<Vec<String>> = match obj.get("tags") {
            None => None,
            Some(t) => match t.as_array().and_then(|a| a.iter().map(|t| t.as_str().map(str::to_owned)).collect()) {
                Some(t) => Some(t),
                None => return Reply::error(400, "tags must be a list of strings."),
            },
        };
        let str_field = |k: &str| obj.get(k).map(|v| v.as_str().map(str::to_owned));
        let (plan, firewall, label) = (str_field("plan"), str_field("firewall_group_id"), str_field("label"));
        if [&plan, &firewall, &label].iter().any(|f| matches!(f, Some(None))) {
            return Reply::error(400, "Bad request.");
        }
        let i = &self.instances[ix];
        let current = Self::plan_now(i, now).to_owned();
        let plan = plan.flatten().filter(|p| *p != current);
        if let Some(p) = &plan
            && !self.upgrades_of(i, now).contains(&p.as_str())
        {
            return Reply::error(400, "Invalid plan chosen.");
        }
        let tags = tags.filter(|t| *t != i.tags);
        let firewall = firewall.flatten().filter(|f| *f != i.firewall_group_id);
        let label = label.flatten().filter(|l| *l != i.label);
        if plan.is_none() && tags.is_none() && firewall.is_none() && label.is_none() {
            return Reply::error(400, "Nothing to change");
        }
        self.ledger.instance_patch_bodies.push(json!({ "id": id, "body": body }));
        let resize_ms = self.cfg.resize_ms;
        let i = &mut self.instances[ix];
        i.plan = current;
        if let Some(p) = plan {
            i.resizing = Some((now + ms(resize_ms), p));
        }
        if let Some(t) = tags {
            i.tags = t;
        }
        if let Some(f) = firewall {
            i.firewall_group_id = f;
        }
        if let Some(l) = label {
            i.label = l;
        }
        let j = self.instance_json(&self.instances[ix], now);
        Reply::json(202, json!({ "instance": j }))
    }

    // ----- blocks -----

    pub fn block_create(&mut self, body: &Value, key_fp: &str) -> Reply {
        let Some(obj) = body.as_object() else {
            return Reply::error(400, "Bad request.");
        };
        let region = obj.get("region").and_then(Value::as_str);
        let size = obj.get("size_gb").and_then(Value::as_i64);
        let (Some(region), Some(size_gb)) = (region, size) else {
            return Reply::error(400, "Both region and size_gb are required.");
        };
        let Some(r) = REGIONS.iter().find(|r| r.0 == region) else {
            return Reply::error(400, "Invalid region chosen.");
        };
        // The document gives no default for block_type; high_perf is what the
        // portal preselects.
        let block_type = match obj.get("block_type") {
            None => "high_perf",
            // Not a string, so no type: refused below.
            Some(v) => v.as_str().unwrap_or(""),
        }
        .to_owned();
        let (min, max) = match block_type.as_str() {
            "high_perf" => (10, 10_000),
            "storage_opt" => (40, 40_000),
            _ => return Reply::error(400, "Invalid block_type. Use high_perf or storage_opt."),
        };
        if !r.4.contains(&format!("block_storage_{block_type}").as_str()) {
            return Reply::error(400, "Block storage of this type is not available in this region.");
        }
        if !(min..=max).contains(&size_gb) {
            return Reply::error(400, &format!("Invalid size_gb: {block_type} volumes are {min} to {max} GB."));
        }
        let label = obj.get("label").and_then(Value::as_str).unwrap_or("").to_owned();
        let id = self.new_id();
        let ledger_ix = self.ledger_push(ResourceKind::Block, &id, &label, region, key_fp);
        let now = self.now();
        let b = SimBlock {
            mount_id: format!("{region}-{}", &id[..13].replace('-', "")),
            id,
            label,
            region: region.to_owned(),
            size_gb,
            block_type,
            attached_to: None,
            created: now,
            created_wall: now_rfc3339(),
            deleted: None,
            resizing: None,
            resized: None,
            shown_before: None,
            ledger_ix,
        };
        let j = self.block_json(&b, now);
        self.blocks.push(b);
        Reply::json(202, json!({ "block": j }))
    }

    pub fn block_get(&self, id: &str) -> Reply {
        let now = self.now();
        match self.block_ix(id, now) {
            Some(ix) => Reply::json(200, json!({ "block": self.block_json(&self.blocks[ix], now) })),
            None => Reply::error(404, BLOCK_NOT_FOUND),
        }
    }

    /// `fault`: `page_repeat` or `page_delete`, if either fell on this
    /// request.
    pub fn block_list(&mut self, q: &BTreeMap<String, String>, fault: Option<FaultKind>) -> Reply {
        let now = self.now();
        let items = self
            .blocks
            .iter()
            .map(|b| (b.id.clone(), self.listable(&b.id, b.created, b.deleted, now).then(|| self.block_json(b, now))))
            .collect();
        let (reply, ends) = paginate("blocks", items, q, fault == Some(FaultKind::PageRepeat));
        if fault == Some(FaultKind::PageDelete) {
            for id in ends.iter().flatten() {
                if let Some(bix) = self.blocks.iter().position(|b| b.id == *id && b.deleted.is_none()) {
                    self.remove_block(bix, now);
                }
            }
        }
        reply
    }

    pub fn block_attach(&mut self, id: &str, body: &Value) -> Reply {
        let now = self.now();
        let Some(instance_id) = body.get("instance_id").and_then(Value::as_str) else {
            return Reply::error(400, "Missing instance_id.");
        };
        let live = body.get("live").and_then(Value::as_bool).unwrap_or(false);
        let Some(bix) = self.block_ix(id, now) else {
            return Reply::error(404, BLOCK_NOT_FOUND);
        };
        let Some(iix) = self.instance_ix(instance_id, now) else {
            return Reply::error(404, "instance not found");
        };
        if self.blocks[bix].attached_to.is_some() {
            return Reply::error(400, "Block storage volume is already attached to a server.");
        }
        if now < self.blocks[bix].created + ms(self.cfg.block_pending_ms) {
            return Reply::error(500, "Unable to attach block storage: Block storage is not currently active.");
        }
        if self.blocks[bix].region != self.instances[iix].region {
            return Reply::error(400, "Block storage and server must be in the same region.");
        }
        let ok_since = self.ok_at(&self.instances[iix]);
        if self.instance_state(&self.instances[iix], now).1 != "ok" || now < ok_since + ms(self.cfg.attach_young_ms) {
            return Reply::error(500, "Unable to attach block storage: Server is currently locked");
        }
        let lag = self.cfg.attach_visible_ms;
        Self::set_attached(&mut self.blocks[bix], Some(instance_id.to_owned()), now, lag);
        *self.ledger.attaches_per_block.entry(id.to_owned()).or_default() += 1;
        if !live && self.cfg.attach_lock_ms > 0 {
            // A non-live attach restarts the VM.
            self.instances[iix].locked_until = Some(now + ms(self.cfg.attach_lock_ms));
        }
        Reply::no_content()
    }

    pub fn block_detach(&mut self, id: &str) -> Reply {
        let now = self.now();
        let Some(bix) = self.block_ix(id, now) else {
            return Reply::error(404, BLOCK_NOT_FOUND);
        };
        if self.blocks[bix].attached_to.is_none() {
            return Reply::error(400, "Block storage volume is not currently attached to a server");
        }
        if let Some(r) = self.resize_too_soon(bix, now) {
            return r;
        }
        let lag = self.cfg.attach_visible_ms;
        Self::set_attached(&mut self.blocks[bix], None, now, lag);
        Reply::no_content()
    }

    /// Vultr's Ansible tests: "volumes size can only be modified every
    /// 60s", and they wait as long between a resize and a detach
    /// (docs/vultr.md §3; the refusal's words are not known).
    fn resize_too_soon(&self, bix: usize, now: Instant) -> Option<Reply> {
        let at = self.blocks[bix].resized?;
        (now < at + ms(self.cfg.resize_interval_ms))
            .then(|| Reply::error(400, "Block storage can only be resized or detached 60 seconds after a resize."))
    }

    /// `PATCH /blocks/{id}` (OA:3405): `size_gb` (grow only, within the
    /// type's range, at most one resize per `resize_interval_ms`; the new
    /// size shows after `resize_ms`) and `label`; 204. A PATCH that changes
    /// nothing is answered 400 "Nothing to change" (TF#660).
    pub fn block_patch(&mut self, id: &str, body: &Value) -> Reply {
        let now = self.now();
        let Some(obj) = body.as_object() else {
            return Reply::error(400, "Bad request.");
        };
        if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "size_gb" | "label")) {
            return Reply::error(400, &format!("The simulator does not model changing {k}."));
        }
        let Some(bix) = self.block_ix(id, now) else {
            return Reply::error(404, BLOCK_NOT_FOUND);
        };
        let b = &self.blocks[bix];
        let current = Self::size_now(b, now);
        let size = match obj.get("size_gb") {
            None => None,
            Some(v) => match v.as_i64() {
                Some(gb) if gb == current => None,
                Some(gb) => Some(gb),
                None => return Reply::error(400, "size_gb must be an integer."),
            },
        };
        let label = match obj.get("label") {
            None => None,
            Some(v) => match v.as_str() {
                Some(l) if l == b.label => None,
                Some(l) => Some(l.to_owned()),
                None => return Reply::error(400, "label must be a string."),
            },
        };
        if let Some(gb) = size {
            let max = if b.block_type == "storage_opt" { 40_000 } else { 10_000 };
            if gb < current {
                return Reply::error(400, "Block storage can only be resized to a larger size.");
            }
            if gb > max {
                return Reply::error(400, &format!("Invalid size ({gb}GB) - Must be at most {max}GB."));
            }
            if self.cfg.block_storage_limit_gb.is_some_and(|limit| gb > limit) {
                return Reply::error(400, "Block storage limit reached for this account.");
            }
        }
        if size.is_none() && label.is_none() {
            return Reply::error(400, "Nothing to change");
        }
        if size.is_some()
            && let Some(r) = self.resize_too_soon(bix, now)
        {
            return r;
        }
        self.ledger.block_patch_bodies.push(json!({ "id": id, "body": body }));
        let resize_ms = self.cfg.resize_ms;
        let b = &mut self.blocks[bix];
        b.size_gb = current;
        if let Some(gb) = size {
            b.resizing = Some((now + ms(resize_ms), gb));
            b.resized = Some(now);
        }
        if let Some(l) = label {
            b.label = l;
        }
        Reply::no_content()
    }

    pub fn block_delete(&mut self, id: &str) -> Reply {
        let now = self.now();
        let Some(bix) = self.block_ix(id, now) else {
            return Reply::error(404, BLOCK_NOT_FOUND);
        };
        if self.cfg.refuse_delete_attached && Self::attached_shown(&self.blocks[bix], now).is_some() {
            return Reply::error(400, "Unable to delete block storage: it is attached to a server.");
        }
        self.remove_block(bix, now);
        Reply::no_content()
    }

    /// Deletes block `bix` now, attached or not: its ledger entry gets
    /// `deleted_at`.
    fn remove_block(&mut self, bix: usize, now: Instant) {
        self.blocks[bix].deleted = Some(now);
        self.blocks[bix].attached_to = None;
        let lix = self.blocks[bix].ledger_ix;
        self.ledger_delete(lix);
    }

    // ----- account, regions, plans -----

    pub fn account_get(&self) -> Reply {
        Reply::json(
            200,
            json!({ "account": {
                "name": "Simulated User",
                "email": "sim@example.com",
                "acls": ["manage_users", "subscriptions_view", "subscriptions", "billing", "provisioning", "dns"],
                "balance": -25.5,
                "pending_charges": 3.25,
                "last_payment_date": "2024-01-01T00:00:00+00:00",
                "last_payment_amount": -50.0,
            }}),
        )
    }

    pub fn region_list(&self, q: &BTreeMap<String, String>) -> Reply {
        let items = REGIONS
            .iter()
            .map(|(id, city, country, continent, options)| {
                json!({ "id": id, "city": city, "country": country, "continent": continent, "options": options })
            })
            .collect();
        paginate("regions", listed(items), q, false).0
    }

    pub fn os_list(&self, q: &BTreeMap<String, String>) -> Reply {
        let mut items: Vec<Value> =
            OSES.iter().map(|(id, name)| json!({ "id": id, "name": name, "arch": "x64", "family": "linux" })).collect();
        for (id, name) in [(crate::catalog::OS_SNAPSHOT, "Snapshot"), (crate::catalog::OS_APPLICATION, "Application")] {
            items.push(json!({ "id": id, "name": name, "arch": "x64", "family": name.to_lowercase() }));
        }
        paginate("os", listed(items), q, false).0
    }

    /// `GET /regions/{id}/availability`: the plans sellable there now.
    pub fn region_availability(&self, region: &str) -> Reply {
        if !REGIONS.iter().any(|r| r.0 == region) {
            return Reply::error(404, "Invalid region.");
        }
        let plans: Vec<&str> = PLANS
            .iter()
            .filter(|p| p.7.contains(&region) && !self.cfg.sold_out.iter().any(|s| s == p.0))
            .map(|p| p.0)
            .collect();
        Reply::json(200, json!({ "available_plans": plans }))
    }

    pub fn catalog_list(&self, key: &str, q: &BTreeMap<String, String>) -> Reply {
        let items = match key {
            "ssh_keys" => crate::catalog::ssh_keys_json(),
            "firewall_groups" => crate::catalog::firewall_groups_json(),
            "snapshots" => crate::catalog::snapshots_json(),
            _ => crate::catalog::applications_json(),
        };
        paginate(key, listed(items), q, false).0
    }

    /// `POST /instances/{id}/backup-schedule` (OA:8847): only `type` is
    /// required; a weekly schedule needs `dow` and a monthly one `dom` (the
    /// day it runs), and what a type does not need defaults to what the GET
    /// then shows (hour 0, dow 1, dom 1). A value given must be in range,
    /// needed or not.
    pub fn backup_schedule_set(&mut self, id: &str, body: &Value) -> Reply {
        let now = self.now();
        let Some(ix) = self.instance_ix(id, now) else {
            return Reply::error(404, "instance not found");
        };
        let kinds = ["daily", "weekly", "monthly", "daily_alt_even", "daily_alt_odd"];
        let Some(kind) = body.get("type").and_then(Value::as_str).filter(|k| kinds.contains(k)) else {
            return Reply::error(400, "Invalid backup schedule type.");
        };
        let num = |k: &str, lo: i64, hi: i64, needed: bool| match body.get(k) {
            None if needed => Err(format!("{k} is required for a {kind} backup schedule.")),
            // Each default is its range's start.
            None => Ok(lo),
            Some(v) => {
                v.as_i64().filter(|n| (lo..=hi).contains(n)).ok_or_else(|| "Invalid backup schedule.".to_owned())
            }
        };
        let fields =
            (num("hour", 0, 23, false), num("dow", 1, 7, kind == "weekly"), num("dom", 1, 28, kind == "monthly"));
        let (hour, dow, dom) = match fields {
            (Ok(hour), Ok(dow), Ok(dom)) => (hour, dow, dom),
            (Err(msg), _, _) | (_, Err(msg), _) | (_, _, Err(msg)) => return Reply::error(400, &msg),
        };
        *self.ledger.backup_schedules_set.entry(id.to_owned()).or_default() += 1;
        self.instances[ix].backup_schedule =
            Some(json!({ "enabled": true, "type": kind, "hour": hour, "dow": dow, "dom": dom }));
        // 200 with no body, as the document has it.
        Reply { status: 200, body: None, retry_after: None }
    }

    pub fn backup_schedule_get(&self, id: &str) -> Reply {
        let now = self.now();
        let Some(ix) = self.instance_ix(id, now) else {
            return Reply::error(404, "instance not found");
        };
        let s = self.instances[ix].backup_schedule.clone().unwrap_or_else(|| json!({ "enabled": false }));
        Reply::json(200, json!({ "backup_schedule": s }))
    }

    pub fn plan_list(&self, q: &BTreeMap<String, String>) -> Reply {
        let items = PLANS
            .iter()
            .filter(|p| q.get("type").is_none_or(|t| t == "all" || t == p.6))
            .map(|(id, vcpu, ram, disk, bw, cost, kind, locations)| {
                json!({
                    "id": id, "vcpu_count": vcpu, "ram": ram, "disk": disk, "disk_count": 1,
                    "bandwidth": bw, "monthly_cost": cost, "type": kind, "locations": locations,
                })
            })
            .collect();
        paginate("plans", listed(items), q, false).0
    }

    // ----- DNS records -----

    fn record_json(r: &SimRecord) -> Value {
        json!({ "id": r.id, "type": r.record_type, "name": r.name, "data": r.data, "priority": r.priority, "ttl": r.ttl })
    }

    pub fn dns_record_create(&mut self, domain: &str, body: &Value, key_fp: &str) -> Reply {
        if !self.domains.contains_key(domain) {
            return Reply::error(404, "Domain not found.");
        }
        let Some(obj) = body.as_object() else {
            return Reply::error(400, "Bad request.");
        };
        let f = match RecordFields::of(obj) {
            Ok(f) => f,
            Err(r) => return r,
        };
        let rtype = obj.get("type").and_then(Value::as_str).map(str::to_owned);
        let (Some(name), Some(rtype), Some(data)) = (f.name, rtype, f.data) else {
            return Reply::error(400, "name, type and data are required.");
        };
        if !DNS_TYPES.contains(&rtype.as_str()) {
            return Reply::error(400, "Invalid record type.");
        }
        if matches!(rtype.as_str(), "MX" | "SRV") && f.priority.is_none() {
            return Reply::error(400, "priority is required for MX and SRV records.");
        }
        if let Err(r) = check_record_data(&rtype, &data) {
            return r;
        }
        let id = self.new_id();
        let label = if name.is_empty() { domain.to_owned() } else { format!("{name}.{domain}") };
        let ledger_ix = self.ledger_push(ResourceKind::DnsRecord, &id, &label, domain, key_fp);
        let r = SimRecord {
            id,
            record_type: rtype,
            name,
            data,
            priority: f.priority.unwrap_or(-1),
            ttl: f.ttl.unwrap_or(300),
            deleted: false,
            created: self.now(),
            ledger_ix,
        };
        let j = Self::record_json(&r);
        self.domains.get_mut(domain).expect("checked above").push(r);
        Reply::json(201, json!({ "record": j }))
    }

    pub fn dns_record_get(&self, domain: &str, id: &str) -> Reply {
        let now = self.now();
        let window = ms(self.cfg.dns_get_404_window_ms);
        let found = self
            .domains
            .get(domain)
            .and_then(|rs| rs.iter().find(|r| r.id == id && !r.deleted && now >= r.created + window));
        match found {
            Some(r) => Reply::json(200, json!({ "record": Self::record_json(r) })),
            None => Reply::error(404, "Record not found."),
        }
    }

    /// `GET /domains/{domain}`: the zone, or 404 for one the account
    /// does not hold.
    pub fn dns_domain_get(&self, domain: &str) -> Reply {
        if !self.domains.contains_key(domain) {
            return Reply::error(404, "Domain not found.");
        }
        Reply::json(
            200,
            json!({ "domain": { "domain": domain, "date_created": "2024-01-01T00:00:00+00:00", "dns_sec": "disabled" } }),
        )
    }

    /// `fault`: `page_repeat` or `page_delete`, if either fell on this
    /// request.
    pub fn dns_record_list(&mut self, domain: &str, q: &BTreeMap<String, String>, fault: Option<FaultKind>) -> Reply {
        let Some(rs) = self.domains.get(domain) else {
            return Reply::error(404, "Domain not found.");
        };
        let (now, lag) = (self.now(), ms(self.cfg.dns_list_lag_ms));
        let shown = |r: &SimRecord| !r.deleted && now >= r.created + lag;
        let items = rs.iter().map(|r| (r.id.clone(), shown(r).then(|| Self::record_json(r)))).collect();
        let (reply, ends) = paginate("records", items, q, fault == Some(FaultKind::PageRepeat));
        if fault == Some(FaultKind::PageDelete) {
            for id in ends.iter().flatten() {
                self.dns_record_delete(domain, id);
            }
        }
        reply
    }

    /// `update_dns_domain_record_request`: name, data, ttl and priority,
    /// each optional; 204. The type cannot change: a `type` (govultr's
    /// `DomainRecordUpdateReq` always sends one) is ignored when it is the
    /// record's and refused otherwise. A PATCH with nothing else is
    /// answered 400 "Nothing to change", as Vultr answers one to a block
    /// (TF#660); for DNS records **unconfirmed**. One that sets what the
    /// record already has is applied: oduflow repeats its PATCHes.
    pub fn dns_record_patch(&mut self, domain: &str, id: &str, body: &Value) -> Reply {
        let Some(obj) = body.as_object() else {
            return Reply::error(400, "Invalid request body.");
        };
        if let Some(k) = obj.keys().find(|k| !["name", "data", "ttl", "priority", "type"].contains(&k.as_str())) {
            return Reply::error(400, &format!("Invalid field: {k}."));
        }
        let f = match RecordFields::of(obj) {
            Ok(f) => f,
            Err(r) => return r,
        };
        let found = self.domains.get_mut(domain).and_then(|rs| rs.iter_mut().find(|r| r.id == id && !r.deleted));
        let Some(r) = found else {
            return Reply::error(404, "Record not found.");
        };
        if obj.get("type").is_some_and(|t| t.as_str() != Some(r.record_type.as_str())) {
            return Reply::error(400, "The record type cannot be changed.");
        }
        if f.name.is_none() && f.data.is_none() && f.ttl.is_none() && f.priority.is_none() {
            return Reply::error(400, "Nothing to change");
        }
        if let Some(d) = &f.data
            && let Err(reply) = check_record_data(&r.record_type, d)
        {
            return reply;
        }
        self.ledger.dns_patch_bodies.push(json!({ "id": id, "body": body }));
        if let Some(n) = f.name {
            r.name = n;
        }
        if let Some(d) = f.data {
            r.data = d;
        }
        if let Some(t) = f.ttl {
            r.ttl = t;
        }
        if let Some(p) = f.priority {
            r.priority = p;
        }
        Reply::no_content()
    }

    /// A test's stand-in for an address that changed under a running VM
    /// (Vultr moves none on its own; a reinstall or a reserved IP can).
    pub fn set_block_storage_limit(&mut self, gb: Option<i64>) {
        self.cfg.block_storage_limit_gb = gb;
    }

    pub fn instance_set_main_ip(&mut self, id: &str, ip: &str) -> bool {
        match self.instances.iter_mut().find(|i| i.id == id) {
            Some(i) => {
                i.main_ip = ip.to_owned();
                true
            }
            None => false,
        }
    }

    pub fn dns_record_delete(&mut self, domain: &str, id: &str) -> Reply {
        // A record in its 404 window is not found by id, by a DELETE either.
        let (now, window) = (self.now(), ms(self.cfg.dns_get_404_window_ms));
        let found = self
            .domains
            .get_mut(domain)
            .and_then(|rs| rs.iter_mut().find(|r| r.id == id && !r.deleted && now >= r.created + window));
        let Some(r) = found else {
            return Reply::error(404, "Record not found.");
        };
        r.deleted = true;
        let lix = r.ledger_ix;
        self.ledger_delete(lix);
        Reply::no_content()
    }
}

/// The /64 an instance's IPv6 address is in, as `v6_network` shows it
/// (`2001:db8:5::` for `2001:db8:5::1`); `""` without an address.
fn v6_network_of(ip: &str) -> String {
    ip.parse::<std::net::Ipv6Addr>()
        .map(|a| std::net::Ipv6Addr::from(u128::from(a) & !(u128::MAX >> 64)).to_string())
        .unwrap_or_default()
}

/// Whether `v`, given for `k` (one of [`UNMODELLED_PATCH`]), leaves
/// instance `i` as it is; `Err` for a value of the wrong kind.
fn unchanged_by(i: &SimInstance, k: &str, v: &Value) -> Result<bool, String> {
    let flag = || v.as_bool().ok_or_else(|| format!("{k} must be a boolean."));
    match k {
        // The simulator offers no DDoS protection: `false` is every
        // instance's.
        "ddos_protection" => flag().map(|b| !b),
        // IPv6 can only be switched on (OA:20095): `false` asks for nothing.
        "enable_ipv6" => flag().map(|b| !b || !i.v6_main_ip.is_empty()),
        // `true` adds a VPC (or private network); `false` adds none.
        "enable_vpc" | "enable_vpc2" | "enable_private_network" => flag().map(|b| !b),
        "backups" => match v.as_str() {
            Some("enabled") => Ok(i.backups),
            Some("disabled") => Ok(!i.backups),
            _ => Err("Backups option must be either enabled or disabled.".into()),
        },
        // Every simulated instance shows `root`.
        "user_scheme" => match v.as_str() {
            Some("root") => Ok(true),
            Some("limited") => Ok(false),
            _ => Err("user_scheme must be root or limited.".into()),
        },
        // The deprecated single tag: unchanged when it is the whole list.
        "tag" => match v.as_str() {
            Some("") => Ok(i.tags.is_empty()),
            Some(t) => Ok(i.tags == [t]),
            None => Err("tag must be a string.".into()),
        },
        // The VPC lists attach or detach each id named: an empty one, none.
        _ => v.as_array().map(Vec::is_empty).ok_or_else(|| format!("{k} must be a list.")),
    }
}

/// The fields of a DNS record's create or PATCH besides `type`, each of
/// the kind the document gives it.
struct RecordFields {
    name: Option<String>,
    data: Option<String>,
    ttl: Option<i64>,
    priority: Option<i64>,
}

impl RecordFields {
    fn of(obj: &serde_json::Map<String, Value>) -> Result<Self, Reply> {
        let text = |k: &str| match obj.get(k) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or_else(|| Reply::error(400, &format!("{k} must be a string."))),
        };
        let int = |k: &str| match obj.get(k) {
            None => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| Reply::error(400, &format!("{k} must be an integer."))),
        };
        Ok(Self { name: text("name")?, data: text("data")?, ttl: int("ttl")?, priority: int("priority")? })
    }
}

/// An A record's data must be an IPv4 address and an AAAA record's an IPv6
/// one; the other types' data is not checked.
fn check_record_data(rtype: &str, data: &str) -> Result<(), Reply> {
    let ok = match rtype {
        "A" => data.parse::<std::net::Ipv4Addr>().is_ok(),
        "AAAA" => data.parse::<std::net::Ipv6Addr>().is_ok(),
        _ => true,
    };
    if ok { Ok(()) } else { Err(Reply::error(400, &format!("Invalid {rtype} record data: {data}."))) }
}

/// This resource's share of a jitter of at most `max_ms`, the same on
/// every read (a hash of its id and `salt`, one per kind of delay).
fn jitter(id: &str, salt: u64, max_ms: u64) -> u64 {
    if max_ms == 0 {
        return 0;
    }
    let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64 ^ salt, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    h % (max_ms + 1)
}

/// Vultr's cursors are opaque (docs/vultr.md §2); this one is the hex of
/// `next__<id>`, the id of the item the next page starts with: a cursor
/// names a place in the listing's order, so deleting an item a scan has
/// passed skips nothing it has not reached (an offset would).
fn cursor_of(id: &str) -> String {
    format!("next__{id}").bytes().map(|b| format!("{b:02x}")).collect()
}

fn id_of(cursor: &str) -> Option<String> {
    if !cursor.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..cursor.len()).step_by(2).map(|i| u8::from_str_radix(cursor.get(i..i + 2)?, 16).ok()).collect();
    Some(String::from_utf8(bytes?).ok()?.strip_prefix("next__")?.to_owned())
}

/// A listing that never changes, every item shown, for [`paginate`].
fn listed(items: Vec<Value>) -> Vec<(String, Option<Value>)> {
    items.into_iter().map(|v| (id_text(&v["id"]), Some(v))).collect()
}

fn id_text(id: &Value) -> String {
    id.as_str().map_or_else(|| id.to_string(), str::to_owned)
}

/// One page of a listing under `key`, with Vultr's `meta`: `total` is the
/// number shown, `next`/`prev` are `""` when there is no such page. `order`
/// is every item the listing has ever held, in its order, each with its
/// JSON if it is shown now (not deleted, past the lag, matching the
/// filters): a cursor stays valid after its item is deleted. `repeat`
/// starts the page one shown item early, repeating the last of the page
/// before (the fault `page_repeat`). With the page, when a next one
/// follows: the id the page ends with and the id the next page starts with
/// (what the fault `page_delete` deletes).
fn paginate(
    key: &str,
    mut order: Vec<(String, Option<Value>)>,
    q: &BTreeMap<String, String>,
    repeat: bool,
) -> (Reply, Option<[String; 2]>) {
    let per_page = match q.get("per_page") {
        None => PER_PAGE_DEFAULT,
        Some(p) => match p.parse::<usize>() {
            Ok(n) if n >= 1 => n.min(PER_PAGE_MAX),
            _ => return (Reply::error(400, "Invalid per_page."), None),
        },
    };
    let start = match q.get("cursor").map(String::as_str) {
        None | Some("") => 0,
        Some(c) => match id_of(c).and_then(|id| order.iter().position(|(i, _)| *i == id)) {
            Some(p) => p,
            None => return (Reply::error(400, "Invalid cursor."), None),
        },
    };
    // The positions shown, in order: those before the page and the rest.
    let shown: Vec<usize> = (0..order.len()).filter(|&i| order[i].1.is_some()).collect();
    let mut split = shown.partition_point(|&i| i < start);
    if repeat {
        split = split.saturating_sub(1);
    }
    let (before, rest) = shown.split_at(split);
    let page = &rest[..rest.len().min(per_page)];
    let next = rest.get(page.len()).map_or_else(String::new, |_| cursor_of(&order[page[page.len() - 1] + 1].0));
    let prev = match before.len() {
        0 => String::new(),
        n => cursor_of(&order[before[n.saturating_sub(per_page)]].0),
    };
    let ends = rest.get(page.len()).map(|&first| [order[page[page.len() - 1]].0.clone(), order[first].0.clone()]);
    let total = shown.len();
    let page: Vec<Value> = page.iter().filter_map(|&i| order[i].1.take()).collect();
    let reply =
        Reply::json(200, json!({ key: page, "meta": { "total": total, "links": { "next": next, "prev": prev } } }));
    (reply, ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        for id in ["0", "ewr", "cb676a46-66fd-4dfb-b839-443f2e6c0b60"] {
            assert_eq!(id_of(&cursor_of(id)).as_deref(), Some(id));
        }
        assert_eq!(id_of("zz"), None);
        assert_eq!(id_of("6e657874"), None);
    }
}
