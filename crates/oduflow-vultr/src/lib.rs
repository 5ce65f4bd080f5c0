//! The Vultr API v2 adapter: the only crate that knows Vultr's JSON.
//!
//! [`VultrClient`] implements [`oduflow_model::provider::Provider`] for
//! instances and block storage, and has inherent methods for the account,
//! regions, plans and (in [`dns`]) DNS records.
//!
//! Invariants this crate keeps, whatever the caller does:
//! - A create or attach POST is sent at most once per call: no retry here, none
//!   in reqwest (its retry policy is set to `never`), no redirect followed
//!   (a 307/308 would re-send it), none in the connection pool (create and
//!   attach go through a client that never reuses a connection, so hyper's
//!   "retry a request cancelled on a stale pooled connection" path cannot
//!   fire), and HTTP/1 only (no HTTP/2 GOAWAY replay).
//! - Every create or attach answer is classified here, once, into `Accepted`,
//!   `Rejected` (400/401/403/422 answered to that call), `NotSent` (the
//!   connection was never established) or `Unknown` (everything else, 3xx
//!   included).
//! - Reads and DELETE retry within bounds on 429, 5xx and transport errors,
//!   honouring `Retry-After`. A 3xx to a read or DELETE is an error at once:
//!   never followed, never retried, never read as a 404.
//! - Every request, retries included, waits for the one rate limiter shared by
//!   all clones of a client.
//! - The API key is held in a `SecretString` and leaves it only to build the
//!   `Authorization` header (marked sensitive). It is in no log line, error
//!   message or `Debug` output.

mod account;
pub mod budget;
mod catalog;
mod config;
pub mod dns;
pub mod dns_adapter;
pub mod dns_owned;
mod error;
mod http;
mod provider;
pub mod stats;
#[cfg(feature = "testing")]
pub mod testing;
mod wire;

pub use account::{Account, AccountProbe, Plan, Region};
pub use config::*;
pub use dns::{DnsDomain, DnsRecord, DnsRecordId, DnsRecordPatch, DnsRecordRequest};
pub use error::VultrError;
pub use http::VultrClient;
