//! A client's external identities beyond its VM and volume: a DNS record, a
//! VPN peer, a configuration-management key. Each adapter can ensure, check
//! and remove its identity; a removal counts only once a later check reports
//! absence, whatever `remove` answered. The VM's disappearance proves nothing
//! about any of them.

use std::future::Future;
use std::pin::Pin;

/// A boxed future, so adapters can be held as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The TXT record oduflow keeps beside a client's DNS records, at the same
/// name, naming the client (external-dns's TXT registry): the record set
/// itself carries whose it is, so a restored database that lost the
/// ownership record can still trace it. Quoted, as Vultr takes TXT data.
pub const DNS_OWNER_PREFIX: &str = "oduflow-owner=";

/// The owner marker's TXT data for client `id`.
pub fn dns_owner_marker(client_id: &str) -> String {
    format!("\"{DNS_OWNER_PREFIX}{client_id}\"")
}

/// The client id a TXT record's data names, when it is an owner marker
/// (quoted or not: the answer may carry the quotes or not).
pub fn dns_marker_owner(data: &str) -> Option<&str> {
    let d = data.trim();
    let d = d.strip_prefix('"').and_then(|d| d.strip_suffix('"')).unwrap_or(d);
    d.strip_prefix(DNS_OWNER_PREFIX).filter(|id| !id.is_empty() && !id.contains(char::is_whitespace))
}

/// Whom an identity belongs to, and the facts it is ensured with. For a
/// removal these are the facts recorded when the identity was last ensured
/// (the VM is usually gone by then).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityTarget {
    pub client: String,
    pub client_id: String,
    /// The VM's main IP, when known (ensure needs it).
    pub main_ip: Option<String>,
    /// The VM's IPv6 address, its hostname and the volume's mount id, when
    /// known (`""` for none).
    pub outputs: crate::ServerOutputs,
    pub hostname: String,
    /// The name of the client's DNS records, relative to the DNS domain
    /// (the spec's `dns_name`, else the client's name).
    pub dns_name: String,
    /// The plan and volume size of the spec (after a change: the new ones).
    pub plan: String,
    pub volume_gb: i64,
    /// The client is being deleted: a check answers whether anything of the
    /// identity is left, not whether it is right.
    pub removing: bool,
}

impl IdentityTarget {
    /// The facts recorded with an ensured identity: when they differ from a
    /// later run's, the identity is ensured again (a new address, a new DNS
    /// name), and a removal gets them back. (Plan and volume size are not
    /// among them: a change to those runs the adapters' `update`.)
    pub fn facts(&self) -> serde_json::Value {
        serde_json::json!({
            "ipv4": self.main_ip.as_deref().unwrap_or(""),
            "ipv6": self.outputs.v6_main_ip,
            "volume_mount_id": self.outputs.mount_id,
            "hostname": self.hostname,
            "dns_name": self.dns_name,
        })
    }

    /// `self` with the recorded facts in place of the current ones (each
    /// fact the record lacks keeps its current value).
    pub fn with_facts(mut self, f: &serde_json::Value) -> Self {
        let s = |k: &str| f.get(k).and_then(serde_json::Value::as_str).map(str::to_owned);
        if let Some(ip) = s("ipv4").filter(|ip| !ip.is_empty()) {
            self.main_ip = Some(ip);
        }
        macro_rules! take {
            ($($k:literal => $dst:expr),*) => { $( if let Some(v) = s($k) { $dst = v; } )* };
        }
        take!("ipv6" => self.outputs.v6_main_ip, "volume_mount_id" => self.outputs.mount_id,
            "hostname" => self.hostname, "dns_name" => self.dns_name);
        self
    }
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    Present(String),
    Absent,
}

/// Why an adapter step did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdapterError {
    /// A failed step: tried again with backoff; past the limit the client
    /// blocks `adapter_failed`.
    Failed(String),
    /// Not done and not failed: a lost answer being resolved. Comes back
    /// after a poll interval; the adapter bounds how many times (and then
    /// answers `Blocked`).
    Pending(String),
    /// Not done, and nothing worth asking before `until_ms` (on the clock
    /// the adapter was given, the worker's): comes back then, not after a
    /// poll interval. The adapter bounds how many times.
    Waiting { until_ms: i64, detail: String },
    /// Only an operator can decide: the client blocks with this reason.
    Blocked(crate::BlockedReason, String),
}

impl From<String> for AdapterError {
    fn from(s: String) -> Self {
        Self::Failed(s)
    }
}

impl From<&str> for AdapterError {
    fn from(s: &str) -> Self {
        Self::Failed(s.to_owned())
    }
}

impl std::fmt::Display for AdapterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed(s) | Self::Pending(s) | Self::Waiting { detail: s, .. } => f.write_str(s),
            Self::Blocked(r, s) => write!(f, "{r}: {s}"),
        }
    }
}

/// An adapter's durable record of what it owns for one client (a DNS
/// record's id, a create whose answer is awaited): kept by oduflow, given
/// back on every later step, whichever worker runs it.
pub trait Ownership: Send + Sync {
    /// What was recorded; `Value::Null` when nothing was.
    fn get(&self) -> serde_json::Value;
    /// Records `v` durably before it returns (an independent commit that
    /// survives the job rolling back). Refused when another run recorded
    /// something since this one read: this run is stale and must stop.
    fn put(&self, v: serde_json::Value) -> BoxFuture<'_, Result<(), String>>;
    /// What the adapter's requests to the provider carry: the run's guard,
    /// so a run whose claim was lost sends nothing more. None outside a run.
    fn sending(&self) -> crate::provider::Sending {
        crate::provider::Sending::default()
    }
    /// The adapter reached a named step of its own protocol
    /// (`"dns-record-created"`): a test build's worker can be killed there.
    fn reached(&self, _step: &str) {}
}

/// An [`Ownership`] held in memory only: for tests and for adapters run
/// outside a worker (a benchmark).
#[derive(Default)]
pub struct MemoryOwnership(std::sync::Mutex<serde_json::Value>);

impl Ownership for MemoryOwnership {
    fn get(&self) -> serde_json::Value {
        self.0.lock().expect("not poisoned").clone()
    }
    fn put(&self, v: serde_json::Value) -> BoxFuture<'_, Result<(), String>> {
        *self.0.lock().expect("not poisoned") = v;
        Box::pin(async { Ok(()) })
    }
}

/// An identity adapter held in memory, named `vpn`: for tests, as
/// [`MemoryOwnership`] is. It can be told to fail its ensure or its check,
/// and counts its removals.
#[derive(Default)]
pub struct MemoryAdapter {
    pub present: std::sync::Mutex<bool>,
    pub fail_ensure: std::sync::atomic::AtomicBool,
    pub fail_check: std::sync::atomic::AtomicBool,
    pub removes: std::sync::atomic::AtomicUsize,
}

impl MemoryAdapter {
    fn failing(flag: &std::sync::atomic::AtomicBool) -> bool {
        flag.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn set_present(&self, present: bool) {
        *self.present.lock().expect("not poisoned") = present;
    }
}

impl IdentityAdapter for MemoryAdapter {
    fn name(&self) -> &str {
        "vpn"
    }
    fn ensure<'a>(&'a self, _t: &'a IdentityTarget, _own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            if Self::failing(&self.fail_ensure) {
                return Err("peer API answered 503".into());
            }
            self.set_present(true);
            Ok("peer added".into())
        })
    }
    fn check<'a>(&'a self, _t: &'a IdentityTarget, _own: &'a dyn Ownership) -> Step<'a, Presence> {
        Box::pin(async move {
            if Self::failing(&self.fail_check) {
                return Err("check failed".into());
            }
            let present = *self.present.lock().expect("not poisoned");
            Ok(if present { Presence::Present("peer".into()) } else { Presence::Absent })
        })
    }
    fn remove<'a>(&'a self, _t: &'a IdentityTarget, _own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            self.removes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.set_present(false);
            Ok("peer removed".into())
        })
    }
}

/// The answer of an adapter step.
pub type Step<'a, T> = BoxFuture<'a, Result<T, AdapterError>>;

/// One DNS record as a zone listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneRecord {
    pub id: String,
    pub rtype: String,
    /// Relative to the zone (`""` for its apex).
    pub name: String,
    pub data: String,
}

/// The configured DNS zone as an operator's action reads and changes it
/// (the inventory's listing, an orphan record's deletion), outside any run.
pub trait DnsZone: Send + Sync {
    /// The zone's domain.
    fn zone(&self) -> &str;
    /// One listing of the whole zone.
    fn records(&self) -> BoxFuture<'_, Result<Vec<ZoneRecord>, crate::provider::ProviderError>>;
    /// A DELETE of one record, by id.
    fn delete<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<crate::provider::DeleteOutcome, crate::provider::ProviderError>>;
    /// Whether a GET of the record by id finds it (`false` on 404).
    fn exists<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, crate::provider::ProviderError>>;
}

/// How an operator settles what an adapter blocked its client on.
#[derive(Clone, Copy, Debug)]
pub enum Settle<'a> {
    /// An existing resource, by id, becomes the client's.
    Adopt { id: &'a str, by: &'a str, now_ms: i64 },
    /// The creates whose outcome is unknown are attested never made: the
    /// next run makes them.
    Abandon { by: &'a str, reason: &'a str },
}

/// Why an operator's settlement was not made (nothing was recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettleError {
    /// The request does not fit what the adapter owns or finds: bad input.
    Refused(String),
    /// The provider could not be read: the request may be right.
    Provider(crate::provider::ProviderError),
}

impl From<String> for SettleError {
    fn from(why: String) -> Self {
        SettleError::Refused(why)
    }
}

/// What an operator's settlement changes: the adapter's new ownership record
/// (the caller records it by compare-and-set), and the event that says so.
#[derive(Clone, Debug)]
pub struct Settled {
    pub owned: serde_json::Value,
    pub event: crate::EventKind,
    pub detail: serde_json::Value,
}

pub trait IdentityAdapter: Send + Sync + 'static {
    /// A stable name: the key of its state and the subject of its events.
    fn name(&self) -> &str;
    /// Creates or updates the identity. Must be safe to repeat.
    fn ensure<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, String>;
    fn check<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, Presence>;
    /// Removes the identity. Must be safe to repeat.
    fn remove<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, String>;
    /// After a change to the server or volume has been confirmed by a read
    /// (growing the filesystem onto a larger volume, say): `None` when the
    /// adapter has nothing to do then. Must be safe to repeat.
    fn update<'a>(&'a self, _t: &'a IdentityTarget, _own: &'a dyn Ownership) -> Option<Step<'a, String>> {
        None
    }
    /// The blocked reasons an operator settles through this adapter
    /// ([`IdentityAdapter::settle`]); none by default.
    fn settles(&self) -> &'static [crate::BlockedReason] {
        &[]
    }
    /// An operator's settlement of a client this adapter blocked, from the
    /// ownership `owned` as recorded: what changes, or why not (the request
    /// does not fit what the adapter owns or finds; nothing is recorded).
    /// The caller has checked that the client is blocked for one of
    /// [`IdentityAdapter::settles`].
    fn settle<'a>(
        &'a self,
        _t: &'a IdentityTarget,
        _owned: &'a serde_json::Value,
        _how: Settle<'a>,
    ) -> BoxFuture<'a, Result<Settled, SettleError>> {
        Box::pin(async { Err(format!("the {} adapter has nothing an operator settles", self.name()).into()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_gets_the_facts_recorded_at_ensure() {
        let ensured = IdentityTarget {
            client: "acme".into(),
            client_id: "c-1".into(),
            main_ip: Some("192.0.2.7".into()),
            outputs: crate::ServerOutputs {
                main_ip: "192.0.2.7".into(),
                v6_main_ip: "2001:db8::7".into(),
                mount_id: "m".into(),
            },
            hostname: "acme.example.com".into(),
            dns_name: "mail".into(),
            plan: "vc2-1c-1gb".into(),
            volume_gb: 40,
            removing: false,
        };
        let facts = ensured.facts();
        // The VM is gone: no address now.
        let now = IdentityTarget {
            main_ip: None,
            outputs: crate::ServerOutputs::default(),
            removing: true,
            ..ensured.clone()
        };
        let back = now.clone().with_facts(&facts);
        assert_eq!(back.main_ip.as_deref(), Some("192.0.2.7"));
        assert_eq!((back.outputs.v6_main_ip.as_str(), back.dns_name.as_str()), ("2001:db8::7", "mail"));
        assert!(back.removing);
        // Recorded before facts existed: the current ones stay.
        assert_eq!(now.clone().with_facts(&serde_json::json!({})), now);
        assert_ne!(IdentityTarget { main_ip: Some("192.0.2.8".into()), ..ensured.clone() }.facts(), facts);
    }
}

/// Where a client's identity with one adapter stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdapterState {
    /// Being made or corrected (or its last ensure failed).
    Ensuring,
    /// Confirmed present with the facts recorded beside it.
    Ensured,
    /// Being removed (or its last removal failed).
    Removing,
    /// Confirmed absent.
    Removed,
}

impl AdapterState {
    pub const fn as_str(self) -> &'static str {
        match self {
            AdapterState::Ensuring => "ensuring",
            AdapterState::Ensured => "ensured",
            AdapterState::Removing => "removing",
            AdapterState::Removed => "removed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [AdapterState::Ensuring, AdapterState::Ensured, AdapterState::Removing, AdapterState::Removed]
            .into_iter()
            .find(|a| a.as_str() == s)
    }
}

impl std::fmt::Display for AdapterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
