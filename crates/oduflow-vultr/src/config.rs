//! The adapter's settings. Everything but the key has a default that suits
//! the real Vultr API; tests shrink the timeouts and backoff.

use secrecy::SecretString;

/// Vultr's public API root (docs/vultr.md §1).
pub const DEFAULT_BASE_URL: &str = "https://api.vultr.com/v2";

/// Requests per second for a whole rate group (every process sharing one
/// source address). Vultr "may return 429" above 30 requests per second per
/// source address and does not say how it counts its second. Slots are evenly
/// spaced and never bunched, but a request can reach Vultr late (scheduling,
/// the network) and arrive next to the following one; at 25/s a request may be
/// up to 160 ms late before any one-second window can hold more than 30.
pub const DEFAULT_RATE_PER_SEC: u32 = 25;

/// A whole request (connect, send, answer). Vultr's own Go client waits 60 s;
/// we wait less because a create that hangs is "unknown" either way and the
/// engine resolves it by label search, not by waiting longer.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;

/// TCP + TLS set-up. Short: an unreachable API is a transport error to retry
/// (reads) or an unknown outcome (a create, which then was never sent).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Attempts for one read or DELETE, the first included. Four, like Vultr's Go
/// client (govultr: 1 + 3 retries); past that the engine re-enqueues the job
/// with its own, longer backoff, which is cheaper than holding a worker.
pub const READ_ATTEMPTS_MAX: u32 = 4;

/// First wait between read attempts; doubles each attempt.
pub const DEFAULT_BACKOFF_BASE_MS: u64 = 250;

/// Longest wait between two read attempts when Vultr gives no Retry-After.
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 5_000;

/// Longest Retry-After we honour inside one call. Beyond it we give the answer
/// back (the read fails) instead of sleeping in a worker for minutes: the job
/// is re-enqueued with a scheduled time instead.
pub const RETRY_AFTER_MAX_MS: u64 = 60_000;

/// Page size for listings, the one default the library and the CLI share:
/// Vultr's maximum (its own default is 100; docs/vultr.md §2), so that an
/// inventory takes the fewest requests from the group's rate budget.
pub const DEFAULT_PER_PAGE: u32 = PER_PAGE_MAX;

/// The largest page Vultr serves.
pub const PER_PAGE_MAX: u32 = 500;

/// Pages one listing may take. 1000 pages of 500 is 500 000 resources, far
/// beyond any account we manage; the bound only stops a cursor that never
/// ends (a server bug) from looping forever.
pub const LIST_PAGES_MAX: u32 = 1_000;

/// Receives the one-time root password Vultr gives each instance this
/// client creates, once, right when the create answer is read. Vultr's
/// password cannot be chosen and reads show it for about ten minutes; it is
/// nowhere else in oduflow: not stored, logged, traced or put in an event.
pub trait RootPasswordSink: Send + Sync {
    fn take(&self, label: &oduflow_model::Label, id: &oduflow_model::VultrInstanceId, password: SecretString);
}

/// Where root passwords go: nowhere (dropped) unless a sink is set.
#[derive(Clone, Default)]
pub struct RootPassword(pub Option<std::sync::Arc<dyn RootPasswordSink>>);

impl std::fmt::Debug for RootPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "RootPassword(sink)" } else { "RootPassword(dropped)" })
    }
}

/// How to reach Vultr and how hard to try. Build with [`VultrConfig::new`] and
/// override fields with struct update syntax.
#[derive(Debug, Clone)]
pub struct VultrConfig {
    /// API root without a trailing slash, e.g. `https://api.vultr.com/v2`, or
    /// the simulator's `http://127.0.0.1:PORT/v2`.
    pub base_url: String,
    /// The API key. Sent only in the `Authorization` header.
    pub api_key: SecretString,
    /// Requests per second for the whole rate group: every clone of the
    /// client, and every process sharing its budget.
    pub rate_per_sec: u32,
    pub request_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Attempts for one read or DELETE, the first included (at least 1).
    pub read_attempts_max: u32,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    pub retry_after_max_ms: u64,
    /// `per_page` sent with every listing (1..=[`PER_PAGE_MAX`]).
    pub per_page: u32,
    pub list_pages_max: u32,
    /// Where each new instance's root password goes (dropped by default).
    pub root_password: RootPassword,
}

impl VultrConfig {
    /// Defaults for the real API, with this key.
    pub fn new(api_key: SecretString) -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key,
            rate_per_sec: DEFAULT_RATE_PER_SEC,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            read_attempts_max: READ_ATTEMPTS_MAX,
            backoff_base_ms: DEFAULT_BACKOFF_BASE_MS,
            backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
            retry_after_max_ms: RETRY_AFTER_MAX_MS,
            per_page: DEFAULT_PER_PAGE,
            list_pages_max: LIST_PAGES_MAX,
            root_password: RootPassword::default(),
        }
    }
}
