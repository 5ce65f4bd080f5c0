//! oduflow's vocabulary: typed ids, the client's desired spec with its
//! validation, the states a record moves through, the closed set of reasons a
//! record can be blocked for, and the provider interface the engine drives.
//!
//! Invariant: this crate performs no IO and reads no clock. Anything that
//! depends on time takes `now_ms` as a parameter.

pub mod audit;
pub mod decide;
pub mod identity;
pub mod ids;
pub mod ledger;
pub mod provider;
pub mod rate;
pub mod server;
pub mod spec;
pub mod state;
pub mod time;
pub mod update;

pub use ids::*;
pub use server::{BackupSchedule, ImageSource, ServerOutputs, ServerSpec, SpecDefaults, SpecInput};
pub use spec::*;
pub use state::*;
