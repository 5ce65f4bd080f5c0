//! Planted bugs (test builds only): a deliberate protocol violation switched
//! on by name, so the fault campaign can show that it catches the hole the
//! bug re-opens.
//!
//! A process learns its bug once, at the top, from `ODUFLOW_PLANTED_BUG`
//! ([`PlantedBug::from_env`]: the one place that reads it; the campaign sets
//! it on the worker processes it spawns). From there the bug is a value the
//! worker's configuration and the store carry: the product code asks that
//! value ([`PlantedBug::is`]), never the environment, so tests that share a
//! process (threads, plain `cargo test`) can plant a bug in one store or
//! worker without the others seeing it.
//!
//! Without the `failpoints` feature nothing reads the environment and
//! [`PlantedBug::is`] is a constant `false`: a product build cannot plant a
//! bug, and the compiler drops the branches that would.

/// The environment variable a process reads its planted bug from.
pub const PLANTED_BUG_ENV: &str = "ODUFLOW_PLANTED_BUG";

/// Every protocol violation the product knows how to plant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// Re-send a create whose answer was lost, as a naive client would.
    ResendAfterLost,
    /// Send creates without claiming a receipt first.
    ForgetReceipt,
    /// Send a change's PATCH again while its outcome is unknown.
    ResendChange,
    /// A deletion looks only at the dispatch generations the infra row
    /// recorded, not at every receipt that may still own a resource.
    SkipOpenReceipts,
    /// Never look for labelled orphans.
    SkipLabelCheck,
    /// Send with a key the record is not bound to.
    IgnoreKeyChange,
    /// Take a resource missing from a bulk listing as seen gone.
    ListingTakenAsSeen,
    /// A SQLite claim held by a timed lease, without the fence that stops a
    /// worker paused past it.
    LeaseOverlap,
}

impl Bug {
    /// Every bug, with the name `ODUFLOW_PLANTED_BUG` gives it.
    pub const ALL: [(Bug, &'static str); 8] = [
        (Bug::ResendAfterLost, "resend_after_lost"),
        (Bug::ForgetReceipt, "forget_receipt"),
        (Bug::ResendChange, "resend_change"),
        (Bug::SkipOpenReceipts, "skip_open_receipts"),
        (Bug::SkipLabelCheck, "skip_label_check"),
        (Bug::IgnoreKeyChange, "ignore_key_change"),
        (Bug::ListingTakenAsSeen, "listing_taken_as_seen"),
        (Bug::LeaseOverlap, "lease_overlap"),
    ];

    /// The bug's name.
    pub fn name(self) -> &'static str {
        Bug::ALL.iter().find(|(b, _)| *b == self).map_or("", |(_, n)| n)
    }
}

/// The bug planted in a worker or store, if any (none by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlantedBug(Option<Bug>);

impl PlantedBug {
    /// No bug: the real protocol.
    pub fn none() -> PlantedBug {
        PlantedBug(None)
    }

    /// That bug.
    pub fn of(bug: Bug) -> PlantedBug {
        PlantedBug(Some(bug))
    }

    /// The bug of that name; an unknown name is refused with the known ones,
    /// so a misspelt campaign cannot pass for one that caught nothing.
    pub fn named(name: &str) -> Result<PlantedBug, String> {
        match Bug::ALL.iter().find(|(_, n)| *n == name) {
            Some((b, _)) => Ok(PlantedBug::of(*b)),
            None => {
                let known: Vec<&str> = Bug::ALL.iter().map(|(_, n)| *n).collect();
                Err(format!("{PLANTED_BUG_ENV}: unknown planted bug {name:?} (known: {})", known.join(", ")))
            }
        }
    }

    /// This process's bug: `ODUFLOW_PLANTED_BUG`, read once by whoever builds
    /// the worker's configuration and store. An empty value is no bug; a
    /// build without the `failpoints` feature never reads it.
    pub fn from_env() -> Result<PlantedBug, String> {
        if !cfg!(feature = "failpoints") {
            return Ok(PlantedBug::none());
        }
        match std::env::var(PLANTED_BUG_ENV) {
            Ok(name) if !name.is_empty() => PlantedBug::named(&name),
            _ => Ok(PlantedBug::none()),
        }
    }

    /// The bug planted, if any.
    pub fn bug(self) -> Option<Bug> {
        self.0
    }

    /// Whether `bug` is the one planted (always `false` in a product build).
    #[inline]
    pub fn is(self, bug: Bug) -> bool {
        cfg!(feature = "failpoints") && self.0 == Some(bug)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_bug_and_an_unknown_one_is_refused() {
        for (bug, name) in Bug::ALL {
            assert_eq!(PlantedBug::named(name), Ok(PlantedBug::of(bug)));
            assert_eq!(bug.name(), name);
        }
        let e = PlantedBug::named("lease_overlapp").unwrap_err();
        assert!(e.contains("unknown planted bug \"lease_overlapp\"") && e.contains("lease_overlap"), "{e}");
    }
}
