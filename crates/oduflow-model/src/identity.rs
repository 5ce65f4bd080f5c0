//! A client's external identities beyond its VM and volume: a DNS record, a
//! VPN peer, a configuration-management key. Each adapter can ensure, check
//! and remove its identity; a removal counts only once a later check reports
//! absence, whatever `remove` answered. The VM's disappearance proves nothing
//! about any of them.

use std::future::Future;
use std::pin::Pin;

/// A boxed future, so adapters can be held as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whom an identity belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityTarget {
    pub client: String,
    pub client_id: String,
    /// The VM's main IP, when known (ensure needs it; check and remove do not).
    pub main_ip: Option<String>,
    /// The VM's IPv6 address, its hostname and the volume's mount id, when
    /// known (`""` for none).
    pub outputs: crate::ServerOutputs,
    pub hostname: String,
    /// The plan and volume size of the spec (after a change: the new ones).
    pub plan: String,
    pub volume_gb: i64,
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    Present(String),
    Absent,
}

pub trait IdentityAdapter: Send + Sync + 'static {
    /// A stable name: the key of its state and the subject of its events.
    fn name(&self) -> &str;
    /// Creates or updates the identity. Must be safe to repeat.
    fn ensure<'a>(&'a self, t: &'a IdentityTarget) -> BoxFuture<'a, Result<String, String>>;
    fn check<'a>(&'a self, t: &'a IdentityTarget) -> BoxFuture<'a, Result<Presence, String>>;
    /// Removes the identity. Must be safe to repeat.
    fn remove<'a>(&'a self, t: &'a IdentityTarget) -> BoxFuture<'a, Result<String, String>>;
    /// After a change to the server or volume has been confirmed by a read
    /// (growing the filesystem onto a larger volume, say): `None` when the
    /// adapter has nothing to do then. Must be safe to repeat.
    fn update<'a>(&'a self, _t: &'a IdentityTarget) -> Option<BoxFuture<'a, Result<String, String>>> {
        None
    }
}
