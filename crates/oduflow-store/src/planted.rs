//! Planted bugs (test builds only): a deliberate protocol violation switched
//! on by name, so the fault campaign can show that it catches the hole the
//! bug re-opens.
//!
//! A process learns its bug once, at the top, from `ODUFLOW_PLANTED_BUG`
//! ([`PlantedBug::from_env`]: the one place that reads it; the campaign sets
//! it on the worker processes it spawns). From there the bug is a value the
//! worker's configuration and the store carry: the product code asks that
//! value, never the environment, so tests that share a process (threads,
//! plain `cargo test`) can plant a bug in one store or worker without the
//! others seeing it.

use std::sync::Arc;

/// The environment variable a process reads its planted bug from.
pub const PLANTED_BUG_ENV: &str = "ODUFLOW_PLANTED_BUG";

/// The bug planted in a worker or store, if any (none by default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlantedBug(Option<Arc<str>>);

impl PlantedBug {
    /// No bug: the real protocol.
    pub fn none() -> PlantedBug {
        PlantedBug(None)
    }

    /// The bug of that name (see the `planted_bug_is_caught` tests for the
    /// names the product knows).
    pub fn named(name: &str) -> PlantedBug {
        PlantedBug(Some(name.into()))
    }

    /// This process's bug: `ODUFLOW_PLANTED_BUG`, read once by whoever builds
    /// the worker's configuration and store. An empty value is no bug.
    pub fn from_env() -> PlantedBug {
        match std::env::var(PLANTED_BUG_ENV) {
            Ok(name) if !name.is_empty() => PlantedBug::named(&name),
            _ => PlantedBug::none(),
        }
    }

    /// The bug's name, if one is planted.
    pub fn name(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// Whether the bug `name` is the one planted.
    pub fn is(&self, name: &str) -> bool {
        self.name() == Some(name)
    }
}
