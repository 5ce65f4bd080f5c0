//! The simulator's settings and its fault plan.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

/// Vultr's documented limit: 429 above 30 requests per second (docs/vultr.md §1).
pub const DEFAULT_RATE_PER_SEC: u32 = 30;

/// How long a stalled answer is held when no `stall_ms` is given: longer than
/// any client timeout a test sets, short enough not to hang a demo.
pub const DEFAULT_STALL_MS: u64 = 5_000;

/// Consecutive 429s in one burst when no length is given.
pub const DEFAULT_BURST_429_LEN: u32 = 5;
/// Vultr's interval between two resizes of one block, and between a resize
/// and a detach (docs/vultr.md §3).
pub const RESIZE_INTERVAL_MS: u64 = 60_000;

/// The redirect statuses a `redirect` or `lost_redirect` fault answers with,
/// one drawn per fault unless `redirect_status` fixes it. 307 and 308 keep the
/// method and body (a client that follows them sends the POST again); 301,
/// 302 and 303 turn a POST into a GET in every common client.
pub const REDIRECT_STATUSES: [u16; 5] = [301, 302, 303, 307, 308];

/// What the simulator is and how it behaves. Lifecycle delays are real Vultr
/// timings scaled down (Vultr takes minutes; tests want milliseconds).
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seeds fault draws and generated ids: the same seed and the same request
    /// sequence give the same faults and the same ids.
    pub seed: u64,
    /// Requests from one source address in any one second; more are
    /// answered 429 with `Retry-After`. Vultr counts its limit per source
    /// address and does not say how it counts its second, so this counts the
    /// strictest way: a sliding window of the last second, refused requests
    /// included (a client under it is under any fixed window or token bucket
    /// too).
    pub rate_per_sec: u32,
    /// An instance stays `pending / none` this long after create.
    pub pending_ms: u64,
    /// Then `active / installingbooting` this long, then `active / ok`.
    pub installing_ms: u64,
    /// A block stays `pending` this long after create, then `active`.
    pub block_pending_ms: u64,
    /// GET by id (and DELETE, attach) answer 404 this long after create, as
    /// Vultr did in terraform-provider-vultr#462.
    pub get_404_window_ms: u64,
    /// A resource appears in listings this long after create, and stays in
    /// them this long after delete (kubermatic/machine-controller#1704).
    pub list_lag_ms: u64,
    /// A non-live attach restarts the instance: it is `locked` this long.
    pub attach_lock_ms: u64,
    /// A plan change keeps the instance `resizing` this long; then it shows
    /// the new plan. A block shows its new size after as long.
    pub resize_ms: u64,
    /// Each resource's 404 window, listing lag and install take up to this
    /// much longer than the fixed part, its own share drawn from its id:
    /// Vultr's are irregular (docs/vultr.md §7).
    pub get_404_jitter_ms: u64,
    pub list_lag_jitter_ms: u64,
    pub installing_jitter_ms: u64,
    /// A new DNS record is left out of the zone's listing, and answers GET
    /// 404, this long after its 201. Vultr's behaviour is unknown (the
    /// review of the simulator found neither): off by default, drawn by
    /// the campaign.
    pub dns_list_lag_ms: u64,
    pub dns_get_404_window_ms: u64,
    /// An attach (or a detach) shows in `attached_to_instance` this long
    /// after its 204: vultr-csi polls up to 15 s for it (docs/vultr.md §3).
    pub attach_visible_ms: u64,
    /// An attach to an instance that reached `ok` less than this long ago is
    /// refused 500 "Server is currently locked" (Vultr's own Ansible tests
    /// wait 20 s after a create, then retry an attach three times 10 s
    /// apart). 0: none.
    pub attach_young_ms: u64,
    /// A VM's delete releases its volume this long after the 204 (reads
    /// show the attachment until then). Vultr's behaviour is unconfirmed.
    pub release_on_vm_delete_ms: u64,
    /// A block's DELETE is refused 400 while it shows attached. Vultr's
    /// behaviour is unconfirmed (vultr-csi detaches before it deletes).
    pub refuse_delete_attached: bool,
    /// A block resized is refused another resize, and a detach, until this
    /// long after (Vultr: 60 s, docs/vultr.md §3).
    pub resize_interval_ms: u64,
    /// Keys accepted as `Authorization: Bearer <key>`; any other gets 401.
    /// Only their SHA-256 fingerprints are kept once the simulator starts.
    pub api_keys: Vec<SecretString>,
    /// DNS zones that exist (records can be created under them).
    pub dns_domains: Vec<String>,
    /// Faults active from the start; replaceable at run time.
    pub faults: Faults,
    /// Plans sold nowhere right now: left out of every
    /// `GET /regions/{id}/availability` (a preflight must refuse them).
    pub sold_out: Vec<String>,
    /// The account's block storage limit: a PATCH that would grow a volume
    /// past it is refused with a 400, as Vultr refuses a grow over the
    /// account's limit (a definitive refusal of that change). `None`: none.
    pub block_storage_limit_gb: Option<i64>,
}

impl Default for SimConfig {
    /// Fast lifecycles for tests and demos, no keys (add one), no faults.
    fn default() -> Self {
        Self {
            seed: 0,
            rate_per_sec: DEFAULT_RATE_PER_SEC,
            pending_ms: 300,
            installing_ms: 300,
            block_pending_ms: 200,
            get_404_window_ms: 100,
            list_lag_ms: 200,
            attach_lock_ms: 200,
            resize_ms: 300,
            resize_interval_ms: RESIZE_INTERVAL_MS,
            get_404_jitter_ms: 0,
            list_lag_jitter_ms: 0,
            installing_jitter_ms: 0,
            dns_list_lag_ms: 0,
            dns_get_404_window_ms: 0,
            attach_visible_ms: 0,
            attach_young_ms: 0,
            release_on_vm_delete_ms: 0,
            refuse_delete_attached: false,
            api_keys: Vec::new(),
            dns_domains: vec!["example.com".to_owned()],
            faults: Faults::default(),
            sold_out: Vec::new(),
            block_storage_limit_gb: None,
        }
    }
}

impl SimConfig {
    /// Adds an accepted API key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.api_keys.push(SecretString::from(key.into()));
        self
    }

    /// Vultr as slow and irregular as reports show it, `pace` times faster
    /// (1: real time): a 404 window after a create of 10 to 60 s (TF#462
    /// needed 60 s), listings that lag 30 s to 5 min (kubermatic#1704 polls
    /// up to 5 min), installs of 1 to 4 min, an attachment shown 5 s after
    /// its 204 (vultr-csi polls up to 15 s), a volume a VM's delete releases
    /// 10 s later, resizes of a minute and one resize a minute
    /// (docs/vultr.md §7, §12). Faults and keys as `self`'s.
    pub fn realistic(self, pace: u64) -> Self {
        let p = |ms: u64| ms / pace.max(1);
        Self {
            pending_ms: p(30_000),
            installing_ms: p(60_000),
            installing_jitter_ms: p(180_000),
            block_pending_ms: p(10_000),
            get_404_window_ms: p(10_000),
            get_404_jitter_ms: p(50_000),
            list_lag_ms: p(30_000),
            list_lag_jitter_ms: p(270_000),
            attach_lock_ms: p(30_000),
            attach_visible_ms: p(5_000),
            release_on_vm_delete_ms: p(10_000),
            resize_ms: p(60_000),
            resize_interval_ms: p(RESIZE_INTERVAL_MS),
            ..self
        }
    }

    /// No lifecycle delays, no 404 window, no lag: for tests that exercise
    /// something else.
    pub fn instant(mut self) -> Self {
        self.pending_ms = 0;
        self.installing_ms = 0;
        self.block_pending_ms = 0;
        self.get_404_window_ms = 0;
        self.list_lag_ms = 0;
        self.attach_lock_ms = 0;
        self.resize_ms = 0;
        self.resize_interval_ms = 0;
        self.get_404_jitter_ms = 0;
        self.list_lag_jitter_ms = 0;
        self.installing_jitter_ms = 0;
        self.attach_visible_ms = 0;
        self.release_on_vm_delete_ms = 0;
        self
    }
}

/// An operation of the simulated API, for per-operation fault targeting and
/// the fault log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    AccountGet,
    RegionList,
    PlanList,
    InstanceCreate,
    InstanceGet,
    InstanceList,
    InstanceDelete,
    BlockCreate,
    BlockGet,
    BlockList,
    BlockAttach,
    BlockDetach,
    BlockDelete,
    /// `PATCH /instances/{id}`.
    InstancePatch,
    /// `PATCH /blocks/{id}`.
    BlockPatch,
    /// `GET /domains/{domain}` (`oduflow check`).
    DnsDomainGet,
    DnsRecordCreate,
    DnsRecordGet,
    DnsRecordList,
    DnsRecordDelete,
    /// `PATCH /domains/{domain}/records/{id}`.
    DnsRecordPatch,
    /// The read-only catalog a preflight reads: `GET /os`, `/ssh-keys`,
    /// `/firewalls`, `/snapshots`, `/applications`,
    /// `/regions/{id}/availability`.
    CatalogRead,
    /// `GET` or `POST /instances/{id}/backup-schedule`.
    BackupSchedule,
}

impl Op {
    /// A listing whose pages a scan follows by cursor.
    pub fn is_scan(self) -> bool {
        matches!(self, Op::InstanceList | Op::BlockList | Op::DnsRecordList)
    }
}

/// An answer a test in the same process scripts for the next requests of
/// some operations ([`crate::SimControl::script`]), ahead of the seeded
/// faults: what a fault plan drawn by chance cannot say (a refusal in
/// Vultr's own words, an answer held until the test lets it go).
#[derive(Debug, Clone)]
pub enum Scripted {
    /// Not applied; answered with this status and Vultr's error body.
    Refuse { status: u16, message: String },
    /// Applied; then the connection closes with no answer.
    LoseAnswer,
    /// Not applied; answered 204 as if it had been: for a DELETE (or a
    /// detach) Vultr accepts and then never carries out.
    AnswerWithoutApplying,
    /// Applied; then the answer is held until the test notifies it. Each
    /// `notify_one` lets one held answer go.
    HoldAfter(std::sync::Arc<tokio::sync::Notify>),
}

/// The fault plan: the body of `POST /sim/faults`. Each request draws once;
/// the probabilities are tried in the order of the fields (lost_drop,
/// lost_5xx, lost_stall, error_5xx, burst_429, redirect, lost_redirect,
/// dns_get_404, page_repeat, page_delete) and must add up to at most 1 for
/// each operation, so a request gets at most one fault. Latency is drawn
/// separately.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Applied, then the connection is closed with no answer.
    pub lost_drop: f64,
    /// Applied, then answered 500 as if it had failed.
    pub lost_5xx: f64,
    /// Applied, then the answer is held `stall_ms` (past the client's timeout).
    pub lost_stall: f64,
    /// Not applied; answered 500.
    pub error_5xx: f64,
    /// Not applied; answered 429 with Retry-After, and so are the next
    /// `burst_429_len - 1` requests.
    pub burst_429: f64,
    pub burst_429_len: u32,
    /// The `Retry-After` (seconds) a `burst_429` fault answers with.
    pub retry_after_secs: u64,
    /// Not applied; answered with a 3xx (see [`REDIRECT_STATUSES`]) whose
    /// `Location` is the same path and query on this same server. A client
    /// that follows it sends the request again; one that does not must not
    /// read the 3xx as a success, a refusal or a 404.
    pub redirect: f64,
    /// Applied, then answered with such a redirect instead of the real
    /// answer (a proxy that forwards, then redirects). A client that follows
    /// a 307/308 here creates a duplicate, which the ledger shows.
    pub lost_redirect: f64,
    /// The status every redirect fault answers with; `None`: drawn from
    /// [`REDIRECT_STATUSES`] by the same seeded draw that picked the fault.
    pub redirect_status: Option<u16>,
    /// Only for `GET /domains/{d}/records/{id}`: answered 404 without
    /// looking (a temporary 404 for a record that exists, which must never
    /// make a client forget it). Other operations draw no fault from this
    /// share.
    pub dns_get_404: f64,
    /// Only for the listings of instances, blocks and DNS records: the page
    /// begins with the item the page before ended with, as an opaque cursor
    /// may (an item that moved in the order while a scan ran). A client
    /// that does not drop the repeat sees two resources where one is. A
    /// first page has nothing to repeat. Other operations draw no fault
    /// from this share.
    pub page_repeat: f64,
    /// Only for the listings of instances, blocks and DNS records: once a
    /// page that has a next one is answered, the item it ended with and the
    /// item the next page would start with are deleted, as a deletion in
    /// the console while the scan ran (gone at once, `deleted_at` in the
    /// ledger). A client whose next page starts by position skips an item
    /// still there; a keyset cursor skips nothing. A last page deletes
    /// nothing. Other operations draw no fault from this share. It deletes
    /// resources a test may still manage: only a test that expects it
    /// should set it.
    pub page_delete: f64,
    pub stall_ms: u64,
    /// Added to every faultable request, uniform in [min, max].
    pub latency_min_ms: u64,
    pub latency_max_ms: u64,
    /// Only these operations get faults (latency included); empty means all.
    pub ops: Vec<Op>,
    /// Stop injecting faults after this many (latency not counted); `None`:
    /// no limit. Lets a test fault exactly the next request.
    pub faults_max: Option<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            lost_drop: 0.0,
            lost_5xx: 0.0,
            lost_stall: 0.0,
            error_5xx: 0.0,
            burst_429: 0.0,
            burst_429_len: DEFAULT_BURST_429_LEN,
            retry_after_secs: 1,
            redirect: 0.0,
            lost_redirect: 0.0,
            redirect_status: None,
            dns_get_404: 0.0,
            page_repeat: 0.0,
            page_delete: 0.0,
            stall_ms: DEFAULT_STALL_MS,
            latency_min_ms: 0,
            latency_max_ms: 0,
            ops: Vec::new(),
            faults_max: None,
        }
    }
}

impl Faults {
    /// Every request of `ops` answered 500 without being applied, nothing
    /// else faulted: a create whose outcome stays unknown.
    pub fn server_errors_on(ops: Vec<Op>) -> Faults {
        Faults { error_5xx: 1.0, ops, ..Faults::default() }
    }

    /// Why the plan cannot be used, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        let ps = [
            self.lost_drop,
            self.lost_5xx,
            self.lost_stall,
            self.error_5xx,
            self.burst_429,
            self.redirect,
            self.lost_redirect,
            self.dns_get_404,
            self.page_repeat,
            self.page_delete,
        ];
        if ps.iter().any(|p| !(0.0..=1.0).contains(p)) {
            return Err("every probability must be within 0..=1".into());
        }
        // dns_get_404 falls on a DNS record's GET, page_repeat and
        // page_delete on a scan's page: a request draws from one of those
        // shares at most.
        let scan = self.page_repeat + self.page_delete;
        let shared = ps.iter().sum::<f64>() - self.dns_get_404 - scan;
        if shared + self.dns_get_404.max(scan) > 1.0 + 1e-9 {
            return Err("the fault probabilities add up to more than 1".into());
        }
        if let Some(s) = self.redirect_status
            && !REDIRECT_STATUSES.contains(&s)
        {
            return Err(format!("redirect_status {s} is not one of {REDIRECT_STATUSES:?}"));
        }
        if self.latency_min_ms > self.latency_max_ms {
            return Err("latency_min_ms is above latency_max_ms".into());
        }
        Ok(())
    }

    pub(crate) fn targets(&self, op: Op) -> bool {
        self.ops.is_empty() || self.ops.contains(&op)
    }
}
