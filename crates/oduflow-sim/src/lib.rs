//! An in-memory Vultr API v2 simulator with deterministic faults.
//!
//! It serves the subset oduflow uses (instances, blocks, attach/detach,
//! account, regions, plans, DNS records) over real HTTP, faithful to
//! Vultr's documented and observed behaviour (its OpenAPI document is in
//! `crates/oduflow-vultr/tests/data`): 202 with a pending instance that moves to
//! active/installingbooting and then ok; GET 404 for a while after create;
//! listings that lag; 500 "locked" for DELETE and attach while an instance is
//! not ready; 429 with Retry-After above the rate; 401 for an unknown key;
//! `{"error", "status"}` bodies; `""` cursors at the end of a list; 204 with
//! no body for delete, attach and detach.
//!
//! Faults ([`Faults`]) are drawn from a seeded PRNG in request-arrival order,
//! so the same seed and the same request sequence give the same faults. The
//! ledger ([`Ledger`], `GET /sim/ledger`) keeps every resource ever created,
//! deleted ones included, and counts create requests applied per label, so a
//! test can prove that nothing was created twice.
//!
//! Time: lifecycles run on `tokio::time::Instant` plus a skew a test moves
//! with [`SimControl::advance`], so a test steps past a listing lag or a 404
//! window instead of sleeping through it; wall-clock time is used only for the `date_created` strings and the
//! ledger's timestamps, which nothing decides on.

mod api;
pub mod catalog;
mod config;
mod rng;
mod server;
mod time;
mod world;

pub use config::{DEFAULT_RATE_PER_SEC, Faults, Op, REDIRECT_STATUSES, Scripted, SimConfig};
pub use server::{Sim, SimControl, SimError, SimHandle, serve};
pub use world::{FaultEvent, FaultKind, Ledger, LedgerResource, RequestRecord, ResourceKind, sim_root_password};
