//! The bulk view (issue 19): one listing of every instance and one of every
//! block, shared by all the runs of this process, so that watching a fleet
//! become ready costs list pages (up to 500 resources each) instead of one
//! GET by id per resource per poll.
//!
//! A run asks for a snapshot whose listing *started* after a given instant
//! (after the create or attach it is waiting for was sent, and at most one
//! poll interval before the run began, see `Converge::view_after`). The
//! newest snapshot is reused when it qualifies; otherwise one refresh runs,
//! single-flight: the runs that asked meanwhile wait for it and share it.
//! So a busy process lists each kind at most about once per poll interval,
//! whatever the number of runs.
//!
//! What a snapshot is trusted with is decided by the executor (see
//! `docs/protocol.md` §3.6): progress from what it shows (exists, ready,
//! attached to our VM) while a client is first provisioned; never an
//! absence, a block, a counted observation, deletion bookkeeping or a
//! change's confirmation, which keep their GET by id.

use oduflow_model::provider::{Block, Instance, Provider, ProviderError};
use std::collections::HashMap;
use std::sync::Arc;

/// Something a listing returns: an id and a label.
pub(crate) trait Listed: Clone + Send + Sync + 'static {
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
pub(crate) struct Snapshot<T> {
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

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items.len()
    }
}

/// The longest a run waits for a listing (its own or another run's) before
/// it reads by id instead.
pub const VIEW_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(20);

/// The newest snapshot of one kind, refreshed single-flight.
struct Slot<T> {
    cur: tokio::sync::Mutex<Option<Arc<Snapshot<T>>>>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self { cur: tokio::sync::Mutex::new(None) }
    }
}

impl<T: Listed> Slot<T> {
    /// The newest snapshot if its listing started after `after_ms`, else a
    /// fresh one (the lock is held while listing: whoever asks meanwhile
    /// waits and gets it).
    async fn get<F, Fut>(
        &self,
        after_ms: i64,
        since: Option<std::time::Instant>,
        now: impl Fn() -> i64,
        list: F,
    ) -> Result<Arc<Snapshot<T>>, ProviderError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>, ProviderError>>,
    {
        let get = async {
            let mut cur = self.cur.lock().await;
            let fits = |s: &&Arc<Snapshot<T>>| s.started_ms > after_ms && since.is_none_or(|t| s.started_at >= t);
            if let Some(s) = cur.as_ref().filter(fits) {
                return Ok(s.clone());
            }
            let (started_ms, started_at) = (now(), std::time::Instant::now());
            let items = list().await?;
            let s = Arc::new(Snapshot::new(started_ms, started_at, items));
            *cur = Some(s.clone());
            Ok(s)
        };
        // Bounded: past it the run reads by id instead (a listing held up by
        // the rate budget must not hold every waiting run).
        tokio::time::timeout(VIEW_WAIT_MAX, get).await.unwrap_or_else(|_| {
            Err(ProviderError::Transport(format!("bulk view: no listing within {} s", VIEW_WAIT_MAX.as_secs())))
        })
    }
}

/// Shared by every clone of a [`crate::Worker`].
#[derive(Default)]
pub struct FleetView {
    instances: Slot<Instance>,
    blocks: Slot<Block>,
    refreshes: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for FleetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetView").field("refreshes", &self.refreshes()).finish_non_exhaustive()
    }
}

impl FleetView {
    pub(crate) async fn instances<P: Provider>(
        &self,
        p: &P,
        after_ms: i64,
        since: Option<std::time::Instant>,
        now: impl Fn() -> i64,
    ) -> Result<Arc<Snapshot<Instance>>, ProviderError> {
        self.instances
            .get(after_ms, since, now, || {
                self.refreshes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                p.instance_list()
            })
            .await
    }

    pub(crate) async fn blocks<P: Provider>(
        &self,
        p: &P,
        after_ms: i64,
        since: Option<std::time::Instant>,
        now: impl Fn() -> i64,
    ) -> Result<Arc<Snapshot<Block>>, ProviderError> {
        self.blocks
            .get(after_ms, since, now, || {
                self.refreshes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                p.block_list()
            })
            .await
    }

    /// Listings made so far (both kinds).
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

    #[derive(Clone)]
    struct It(String, String);
    impl Listed for It {
        fn id(&self) -> &str {
            &self.0
        }
        fn label(&self) -> &str {
            &self.1
        }
    }

    #[tokio::test]
    async fn a_snapshot_is_reused_only_if_it_started_after_the_asked_instant_and_refreshes_are_shared() {
        let slot: Arc<Slot<It>> = Arc::default();
        let clock = Arc::new(AtomicI64::new(100));
        let lists = Arc::new(AtomicU32::new(0));
        let list = |lists: Arc<AtomicU32>| async move {
            lists.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Ok::<_, ProviderError>(vec![It("a".into(), "l".into()), It("b".into(), "l".into())])
        };
        let now = |c: Arc<AtomicI64>| move || c.load(Ordering::SeqCst);
        let s = slot.get(50, None, now(clock.clone()), || list(lists.clone())).await.unwrap();
        assert_eq!((s.started_ms, s.len(), s.with_label("l").len()), (100, 2, 2));
        assert!(s.get("a").is_some() && s.get("c").is_none());
        // Started at 100: good for anything asked after 99, not after 100.
        slot.get(99, None, now(clock.clone()), || list(lists.clone())).await.unwrap();
        assert_eq!(lists.load(Ordering::SeqCst), 1);
        // A run that began after it needs a listing of its own, whatever
        // the wall clock says (it may have stepped back).
        let later = std::time::Instant::now();
        let s2 = slot.get(0, Some(later), now(clock.clone()), || list(lists.clone())).await.unwrap();
        assert!(s2.started_at >= later);
        assert_eq!(lists.load(Ordering::SeqCst), 2);
        clock.store(200, Ordering::SeqCst);
        // Eight runs ask at once for a listing newer than 100: one refresh.
        let mut tasks = vec![];
        for _ in 0..8 {
            let (slot, clock, lists) = (slot.clone(), clock.clone(), lists.clone());
            tasks.push(tokio::spawn(async move {
                slot.get(100, None, now(clock), || list(lists)).await.unwrap().started_ms
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
        assert_eq!(lists.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_repeated_item_is_kept_once() {
        let s =
            Snapshot::new(1, std::time::Instant::now(), vec![It("a".into(), "l".into()), It("a".into(), "l".into())]);
        assert_eq!((s.len(), s.with_label("l").len()), (1, 1));
    }
}
