//! Shared listings: the newest complete listing of one kind of resource,
//! and the listings planned, shared by every run of a process that asks for
//! one started after a given instant (see [`Slot`]).

use oduflow_model::provider::{Block, Instance, ProviderError};
use std::collections::HashMap;
use std::sync::Arc;

mod slot;
#[cfg(test)]
mod tests;

pub use slot::{BoxFuture, Lister, Slot};

/// Something a listing returns: an id and a label.
pub trait Listed: Clone + Send + Sync + 'static {
    fn id(&self) -> &str;
    fn label(&self) -> &str;
}

impl Listed for Instance {
    fn id(&self) -> &str {
        &self.id.0
    }
    fn label(&self) -> &str {
        &self.label
    }
}

impl Listed for Block {
    fn id(&self) -> &str {
        &self.id.0
    }
    fn label(&self) -> &str {
        &self.label
    }
}

/// One complete listing of a kind.
pub struct Snapshot<T> {
    /// When the listing's first page was asked for (the worker's clock).
    pub started_ms: i64,
    /// The same instant on this process's monotonic clock.
    pub started_at: std::time::Instant,
    items: Vec<T>,
    by_id: HashMap<String, usize>,
    by_label: HashMap<String, Vec<usize>>,
}

impl<T: Listed> Snapshot<T> {
    fn new(started_ms: i64, started_at: std::time::Instant, listed: Vec<T>) -> Self {
        let mut by_id = HashMap::with_capacity(listed.len());
        let mut by_label: HashMap<String, Vec<usize>> = HashMap::new();
        let mut items = Vec::with_capacity(listed.len());
        for it in listed {
            // Pages that drift may repeat an item: once is enough (twice
            // would read as two resources under one label).
            if by_id.contains_key(it.id()) {
                continue;
            }
            by_id.insert(it.id().to_owned(), items.len());
            by_label.entry(it.label().to_owned()).or_default().push(items.len());
            items.push(it);
        }
        Self { started_ms, started_at, items, by_id, by_label }
    }

    pub fn get(&self, id: &str) -> Option<&T> {
        self.by_id.get(id).map(|i| &self.items[*i])
    }

    pub fn with_label(&self, label: &str) -> Vec<T> {
        self.by_label.get(label).map(|ix| ix.iter().map(|i| self.items[*i].clone()).collect()).unwrap_or_default()
    }

    /// Every item, in the listing's order (a repeated one once).
    pub fn items(&self) -> &[T] {
        &self.items
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

/// The longest a run of the bulk view waits for a listing (its own or
/// another run's) before it reads by id instead.
pub const VIEW_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(20);

/// How long a listing is guessed to take before one was made.
pub(crate) const FIRST_LISTING_GUESS: std::time::Duration = std::time::Duration::from_millis(100);

/// What a run gets when it asks the view.
pub enum Got<T> {
    /// A snapshot that qualifies.
    Snapshot(Arc<Snapshot<T>>),
    /// None qualifies yet; one that will is planned or under way and should
    /// be done after this long: the run comes back then instead of holding
    /// its place among the jobs in flight while it waits.
    Later(std::time::Duration),
}

/// What a run asks for.
#[derive(Clone, Copy)]
pub struct Ask {
    /// The listing must have started after this (the worker's clock) ...
    pub after_ms: i64,
    /// ... and at or after this (this process's monotonic clock).
    pub since: Option<std::time::Instant>,
    /// Whether the run may come back later instead of waiting.
    pub may_defer: bool,
    /// The least time between two listings' starts ...
    pub gap: std::time::Duration,
    /// ... and the least multiple of the last listing's length (0: none):
    /// listings then take at most `1 / gap_times_last` of the time.
    pub gap_times_last: u32,
    /// The longest a run may be told to stay away (see [`Slot::get`]).
    pub defer_max: std::time::Duration,
    /// The longest a run waits for a listing (its own or another run's).
    pub wait_max: std::time::Duration,
}

impl Ask {
    /// The gap after a listing that took `took`.
    fn gap_after(&self, took: std::time::Duration) -> std::time::Duration {
        self.gap.max(took * self.gap_times_last)
    }
}
