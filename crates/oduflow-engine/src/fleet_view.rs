//! The bulk view: one listing of every instance and one of every
//! block, shared by all the runs of this process, so that watching a fleet
//! become ready costs list pages (up to 500 resources each) instead of one
//! GET by id per resource per poll.
//!
//! A run asks for a snapshot whose listing *started* after a given instant
//! (after the create or attach it is waiting for was sent, and at most one
//! poll interval before the run was due, see `Converge::read_via`). The
//! newest snapshot is reused when it qualifies; otherwise a listing is
//! planned, at least a gap (half a poll interval) after the last one
//! started, and made by a spawned task, shared by every run that asked.
//! A run that may come back is told when it should be done and ends rather
//! than hold its place among the jobs in flight; a label search waits for
//! it. So a process lists each kind at most twice per poll interval, and
//! only while runs ask, whatever their number.
//!
//! What a snapshot is trusted with is decided by the executor (see
//! `docs/protocol.md` §3.6): progress from what it shows (exists, ready,
//! attached to our VM) while a client is first provisioned; never an
//! absence, a block, a counted observation, deletion bookkeeping or a
//! change's confirmation, which keep their GET by id.

use oduflow_model::provider::{Block, Instance, Provider, ProviderError, Sending};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

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

/// How long a listing is guessed to take before one was made.
const FIRST_LISTING_GUESS: std::time::Duration = std::time::Duration::from_millis(100);

/// What a run gets when it asks the view.
pub(crate) enum Got<T> {
    /// A snapshot that qualifies.
    Snapshot(Arc<Snapshot<T>>),
    /// None qualifies yet; one that will is planned or under way and should
    /// be done after this long: the run comes back then instead of holding
    /// its place among the jobs in flight while it waits.
    Later(std::time::Duration),
}

/// What a slot has for an ask.
enum Look<T> {
    Snapshot(Arc<Snapshot<T>>),
    /// One that qualifies is planned, and should be done after this long.
    Planned(std::time::Duration),
    /// One that qualifies is under way.
    UnderWay,
}

/// A listing planned or under way.
struct Next {
    /// When it starts (planned) or started: never earlier than this.
    start_ms: i64,
    start_at: std::time::Instant,
    /// It is under way.
    started: bool,
}

struct SlotState<T> {
    cur: Option<Arc<Snapshot<T>>>,
    /// The latest listing that failed: when it started, and why.
    failed: Option<(i64, std::time::Instant, String)>,
    next: Option<Next>,
    /// Some run needs a listing that starts after `next` does.
    again: bool,
    /// When the latest listing started, and how long it took.
    last: Option<(std::time::Instant, std::time::Duration)>,
}

/// The newest snapshot of one kind, and the listings planned: at most one
/// under way, each starting at least a gap after the one before.
struct Slot<T> {
    state: std::sync::Mutex<SlotState<T>>,
    /// Counts the listings done: a waiter wakes at each and looks again.
    done: tokio::sync::watch::Sender<u64>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self {
            state: std::sync::Mutex::new(SlotState { cur: None, failed: None, next: None, again: false, last: None }),
            done: tokio::sync::watch::channel(0).0,
        }
    }
}

/// How to list one kind, from a spawned task.
type Lister<T> = Arc<dyn Fn() -> BoxFuture<Result<Vec<T>, ProviderError>> + Send + Sync>;

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// What a run asks for.
#[derive(Clone, Copy)]
pub(crate) struct Ask {
    /// The listing must have started after this (the worker's clock) ...
    pub after_ms: i64,
    /// ... and at or after this (this process's monotonic clock).
    pub since: Option<std::time::Instant>,
    /// Whether the run may come back later instead of waiting.
    pub may_defer: bool,
    /// The least time between two listings' starts.
    pub gap: std::time::Duration,
    /// The longest a run may be told to stay away (see [`Slot::get`]).
    pub defer_max: std::time::Duration,
}

/// How long after a planned listing should be done a run comes back.
const DEFER_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);

impl<T: Listed> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest snapshot if its listing started after `ask.after_ms`
    /// (and `ask.since`); else a listing that will qualify is planned (one
    /// under way, or the next, a gap after the last one started), and the
    /// run waits for it, bounded by [`VIEW_WAIT_MAX`], or is told when to
    /// come back.
    async fn get(
        self: &Arc<Self>,
        ask: Ask,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
        list: Lister<T>,
    ) -> Result<Got<T>, ProviderError> {
        let deadline = tokio::time::Instant::now() + VIEW_WAIT_MAX;
        loop {
            let mut done = self.done.subscribe();
            match self.look(ask, &now, &list)? {
                Look::Snapshot(s) => return Ok(Got::Snapshot(s)),
                // Back a little after it should be done, if that is sooner
                // than a poll interval (`defer_max`): the listing planned
                // then starts after the run's freshness bound on its return
                // (a poll interval before it is due), so one return finds
                // it, or finds it under way and waits for it.
                Look::Planned(until_done) if ask.may_defer && until_done + DEFER_MARGIN < ask.defer_max => {
                    return Ok(Got::Later(until_done + DEFER_MARGIN));
                }
                Look::Planned(_) | Look::UnderWay => {}
            }
            if tokio::time::timeout_at(deadline, done.changed()).await.is_err() {
                return Err(ProviderError::Transport(format!(
                    "bulk view: no listing within {} s",
                    VIEW_WAIT_MAX.as_secs()
                )));
            }
        }
    }

    /// Plans the listing `ask` needs, unless the newest snapshot, or one
    /// under way or planned, qualifies already; never waits.
    fn plan(self: &Arc<Self>, ask: Ask, now: &Arc<dyn Fn() -> i64 + Send + Sync>, list: &Lister<T>) {
        let _ = self.look(ask, now, list);
    }

    /// What there is for `ask`, planning the listing it needs if none is.
    fn look(
        self: &Arc<Self>,
        ask: Ask,
        now: &Arc<dyn Fn() -> i64 + Send + Sync>,
        list: &Lister<T>,
    ) -> Result<Look<T>, ProviderError> {
        let fits = |ms: i64, at: std::time::Instant| ms > ask.after_ms && ask.since.is_none_or(|t| at >= t);
        let mut s = self.lock();
        if let Some(c) = s.cur.as_ref().filter(|c| fits(c.started_ms, c.started_at)) {
            return Ok(Look::Snapshot(c.clone()));
        }
        // A listing that would have qualified failed: read by id.
        if let Some((_, _, e)) = s.failed.as_ref().filter(|f| fits(f.0, f.1)) {
            return Err(ProviderError::Transport(format!("bulk view: the listing failed: {e}")));
        }
        let took = s.last.map_or(FIRST_LISTING_GUESS, |l| l.1);
        let now_at = std::time::Instant::now();
        Ok(match s.next.as_ref() {
            // Under way, and it qualifies: its end is near.
            Some(n) if n.started && fits(n.start_ms, n.start_at) => Look::UnderWay,
            // Planned, and it qualifies.
            Some(n) if fits(n.start_ms, n.start_at) => {
                Look::Planned(n.start_at.saturating_duration_since(now_at) + took)
            }
            // Neither it nor any listing planned now can qualify (the
            // bound is later than the clock says: a clock stepped back, or
            // another host's clock is ahead): read by id.
            _ if !fits(now(), now_at) => {
                return Err(ProviderError::Transport(
                    "bulk view: no listing started now would be newer than the send".to_owned(),
                ));
            }
            // It does not: the one after it will (it starts once this one
            // is done, so after now).
            Some(n) => {
                let until = n.start_at.saturating_duration_since(now_at) + took.max(ask.gap) + took;
                s.again = true;
                Look::Planned(until)
            }
            None => {
                let at = s.last.map_or(now_at, |(started, _)| (started + ask.gap).max(now_at));
                let wait = at - now_at;
                s.next = Some(Next { start_ms: now() + wait.as_millis() as i64, start_at: at, started: false });
                tokio::spawn(self.clone().refresh(ask.gap, now.clone(), list.clone()));
                Look::Planned(wait + took)
            }
        })
    }

    /// Makes the listings planned in `next`, one after the other, each a
    /// `gap` after the one before started, while runs want them.
    async fn refresh(
        self: Arc<Self>,
        gap: std::time::Duration,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
        list: Lister<T>,
    ) {
        // Should this task end any other way than by returning (a panic in
        // a listing, the runtime shutting down), nothing stays planned for
        // ever and whoever waits for it reads by id.
        struct Ended<'a, T: Listed>(&'a Slot<T>, bool);
        impl<T: Listed> Drop for Ended<'_, T> {
            fn drop(&mut self) {
                if !self.1 {
                    let mut s = self.0.lock();
                    // As a failure of the listing it was to make: whoever
                    // waited for that one reads by id, a later ask lists again.
                    if let Some(n) = s.next.take() {
                        s.failed = Some((n.start_ms, n.start_at, "the listing task ended".to_owned()));
                    }
                    s.again = false;
                    drop(s);
                    self.0.done.send_modify(|n| *n += 1);
                }
            }
        }
        let mut ended = Ended(&self, false);
        self.refresh_while_wanted(gap, now, list).await;
        ended.1 = true;
    }

    async fn refresh_while_wanted(
        &self,
        gap: std::time::Duration,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
        list: Lister<T>,
    ) {
        loop {
            let Some(at) = self.lock().next.as_ref().map(|n| n.start_at) else { return };
            tokio::time::sleep_until(at.into()).await;
            let (started_ms, started_at) = (now(), std::time::Instant::now());
            if let Some(n) = self.lock().next.as_mut() {
                (n.start_ms, n.start_at, n.started) = (started_ms.max(n.start_ms), started_at, true);
            }
            let (r, took) = (list().await, started_at.elapsed());
            let more = {
                let mut s = self.lock();
                match r {
                    Ok(items) => {
                        s.cur = Some(Arc::new(Snapshot::new(started_ms, started_at, items)));
                        s.failed = None;
                    }
                    Err(e) => s.failed = Some((started_ms, started_at, e.to_string())),
                }
                s.last = Some((started_at, took));
                let more = std::mem::take(&mut s.again);
                s.next = more.then(|| {
                    let at = (started_at + gap).max(std::time::Instant::now());
                    let wait = at.saturating_duration_since(std::time::Instant::now());
                    Next { start_ms: now() + wait.as_millis() as i64, start_at: at, started: false }
                });
                more
            };
            self.done.send_modify(|n| *n += 1);
            if !more {
                return;
            }
        }
    }
}

/// Shared by every clone of a [`crate::Worker`].
#[derive(Default)]
pub struct FleetView {
    instances: Arc<Slot<Instance>>,
    blocks: Arc<Slot<Block>>,
    stats: Arc<ViewStats>,
}

/// What the view cost its runs, for the benchmark's profile.
#[derive(Default)]
struct ViewStats {
    asks: AtomicU64,
    deferred: AtomicU64,
    asked_us: AtomicU64,
    listings: AtomicU64,
    listing_us: AtomicU64,
    listing_us_max: AtomicU64,
}

impl ViewStats {
    /// One listing, counted and timed.
    async fn timed<T>(
        &self,
        list: impl std::future::Future<Output = Result<Vec<T>, ProviderError>>,
    ) -> Result<Vec<T>, ProviderError> {
        self.listings.fetch_add(1, Relaxed);
        let t = std::time::Instant::now();
        let r = list.await;
        let us = t.elapsed().as_micros() as u64;
        self.listing_us.fetch_add(us, Relaxed);
        self.listing_us_max.fetch_max(us, Relaxed);
        r
    }
}

/// [`FleetView::stats`]: totals since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewFigures {
    /// Reads that asked the view for a listing.
    pub asks: u64,
    /// Of those, the ones told to come back later.
    pub deferred: u64,
    /// Their total time, waits for a listing included (µs).
    pub asked_us: u64,
    /// Listings made (both kinds).
    pub listings: u64,
    /// Their total and longest duration (µs).
    pub listing_us: u64,
    pub listing_us_max: u64,
}

impl std::fmt::Debug for FleetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetView").field("refreshes", &self.refreshes()).finish_non_exhaustive()
    }
}

impl FleetView {
    pub(crate) async fn instances<P: Provider>(
        &self,
        p: &Arc<P>,
        ask: Ask,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Result<Got<Instance>, ProviderError> {
        let got = self.asked(self.instances.get(ask, now.clone(), self.instance_lister(p))).await;
        if matches!(got, Ok(Got::Later(_))) {
            // The run comes back to read the volume too.
            self.blocks.plan(ask, &now, &self.block_lister(p));
        }
        got
    }

    pub(crate) async fn blocks<P: Provider>(
        &self,
        p: &Arc<P>,
        ask: Ask,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Result<Got<Block>, ProviderError> {
        let got = self.asked(self.blocks.get(ask, now.clone(), self.block_lister(p))).await;
        if matches!(got, Ok(Got::Later(_))) {
            // The run comes back to read the VM too.
            self.instances.plan(ask, &now, &self.instance_lister(p));
        }
        got
    }

    /// Pages go as a shared listing, never with the asking run's guard.
    fn instance_lister<P: Provider>(&self, p: &Arc<P>) -> Lister<Instance> {
        let (p, stats) = (Arc::new(p.sending_as(Sending::shared_listing())), self.stats.clone());
        Arc::new(move || {
            let (p, stats) = (p.clone(), stats.clone());
            Box::pin(async move { stats.timed(p.instance_list()).await })
        })
    }

    fn block_lister<P: Provider>(&self, p: &Arc<P>) -> Lister<Block> {
        let (p, stats) = (Arc::new(p.sending_as(Sending::shared_listing())), self.stats.clone());
        Arc::new(move || {
            let (p, stats) = (p.clone(), stats.clone());
            Box::pin(async move { stats.timed(p.block_list()).await })
        })
    }

    async fn asked<T>(
        &self,
        got: impl std::future::Future<Output = Result<Got<T>, ProviderError>>,
    ) -> Result<Got<T>, ProviderError> {
        let t = std::time::Instant::now();
        let r = got.await;
        let s = &self.stats;
        s.asks.fetch_add(1, Relaxed);
        s.asked_us.fetch_add(t.elapsed().as_micros() as u64, Relaxed);
        if matches!(r, Ok(Got::Later(_))) {
            s.deferred.fetch_add(1, Relaxed);
        }
        r
    }

    /// Listings made so far (both kinds).
    pub fn refreshes(&self) -> u64 {
        self.stats.listings.load(Relaxed)
    }

    /// What the view cost so far.
    pub fn stats(&self) -> ViewFigures {
        let s = &self.stats;
        ViewFigures {
            asks: s.asks.load(Relaxed),
            deferred: s.deferred.load(Relaxed),
            asked_us: s.asked_us.load(Relaxed),
            listings: s.listings.load(Relaxed),
            listing_us: s.listing_us.load(Relaxed),
            listing_us_max: s.listing_us_max.load(Relaxed),
        }
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

    type Now = Arc<dyn Fn() -> i64 + Send + Sync>;

    /// A lister that counts its listings, takes 50 ms, and fails while
    /// `fail` is set.
    fn lister(lists: Arc<AtomicU32>, fail: Arc<std::sync::atomic::AtomicBool>) -> Lister<It> {
        Arc::new(move || {
            let (lists, fail) = (lists.clone(), fail.clone());
            Box::pin(async move {
                lists.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                if fail.load(Ordering::SeqCst) {
                    return Err(ProviderError::Transport("down".into()));
                }
                Ok(vec![It("a".into(), "l".into()), It("b".into(), "l".into())])
            })
        })
    }

    fn ask(after_ms: i64, may_defer: bool) -> Ask {
        Ask {
            after_ms,
            since: None,
            may_defer,
            gap: std::time::Duration::from_millis(200),
            defer_max: std::time::Duration::from_millis(400),
        }
    }

    async fn snapshot(g: Result<Got<It>, ProviderError>) -> Arc<Snapshot<It>> {
        match g.unwrap() {
            Got::Snapshot(s) => s,
            Got::Later(d) => panic!("told to come back after {d:?}"),
        }
    }

    #[tokio::test]
    async fn a_snapshot_is_reused_only_if_it_started_after_the_asked_instant_and_refreshes_are_shared() {
        let slot: Arc<Slot<It>> = Arc::default();
        let clock = Arc::new(AtomicI64::new(100));
        let (lists, fail) = (Arc::new(AtomicU32::new(0)), Arc::default());
        let list = lister(lists.clone(), fail);
        let now: Now = {
            let c = clock.clone();
            Arc::new(move || c.load(Ordering::SeqCst))
        };
        let s = snapshot(slot.get(ask(50, false), now.clone(), list.clone()).await).await;
        assert_eq!((s.started_ms, s.len(), s.with_label("l").len()), (100, 2, 2));
        assert!(s.get("a").is_some() && s.get("c").is_none());
        // Started at 100: good for anything asked after 99, not after 100.
        snapshot(slot.get(ask(99, false), now.clone(), list.clone()).await).await;
        assert_eq!(lists.load(Ordering::SeqCst), 1);
        // A run that began after it needs a listing of its own, whatever
        // the wall clock says (it may have stepped back).
        let later = std::time::Instant::now();
        let own = Ask { since: Some(later), ..ask(0, false) };
        let s2 = snapshot(slot.get(own, now.clone(), list.clone()).await).await;
        assert!(s2.started_at >= later);
        assert_eq!(lists.load(Ordering::SeqCst), 2);
        // ... started no sooner than a gap after the one before.
        assert!(s2.started_at >= s.started_at + std::time::Duration::from_millis(200));
        clock.store(200, Ordering::SeqCst);
        // Eight runs ask at once for a listing newer than 100 and wait: one
        // refresh.
        let mut tasks = vec![];
        for _ in 0..8 {
            let (slot, now, list) = (slot.clone(), now.clone(), list.clone());
            tasks.push(tokio::spawn(
                async move { snapshot(slot.get(ask(100, false), now, list).await).await.started_ms },
            ));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
        assert_eq!(lists.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_run_that_may_come_back_is_told_when_and_then_finds_the_listing_planned_for_it() {
        let slot: Arc<Slot<It>> = Arc::default();
        let (lists, fail) = (Arc::new(AtomicU32::new(0)), Arc::default());
        let list = lister(lists.clone(), fail);
        let ms = Arc::new(AtomicI64::new(1_000));
        let now: Now = {
            let c = ms.clone();
            Arc::new(move || c.load(Ordering::SeqCst))
        };
        // Nothing listed yet: come back after about one listing.
        let Got::Later(d) = slot.get(ask(900, true), now.clone(), list.clone()).await.unwrap() else {
            panic!("no listing yet, yet a snapshot");
        };
        assert!(d >= std::time::Duration::from_millis(50) && d <= std::time::Duration::from_secs(1), "{d:?}");
        // Ten more ask meanwhile: no second listing is planned for them.
        for _ in 0..10 {
            assert!(matches!(slot.get(ask(900, true), now.clone(), list.clone()).await.unwrap(), Got::Later(_)));
        }
        tokio::time::sleep(d).await;
        // Back: it is done, or under way (a loaded machine) and waited for;
        // either way no second listing.
        let s = snapshot(slot.get(ask(900, false), now.clone(), list.clone()).await).await;
        assert_eq!((s.started_ms, lists.load(Ordering::SeqCst)), (1_000, 1));
        // A run needing a newer one is told to come back too; the next
        // listing starts a gap after the last one started, never sooner.
        ms.store(2_000, Ordering::SeqCst);
        let Got::Later(d) = slot.get(ask(1_500, true), now.clone(), list.clone()).await.unwrap() else {
            panic!("the old snapshot does not qualify");
        };
        tokio::time::sleep(d).await;
        let s2 = snapshot(slot.get(ask(1_500, false), now.clone(), list.clone()).await).await;
        assert!(s2.started_ms > 1_500 && s2.started_at >= s.started_at + std::time::Duration::from_millis(200));
        assert_eq!(lists.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_listing_that_would_have_qualified_sends_the_run_to_read_by_id() {
        let slot: Arc<Slot<It>> = Arc::default();
        let (lists, fail) = (Arc::new(AtomicU32::new(0)), Arc::new(std::sync::atomic::AtomicBool::new(true)));
        let list = lister(lists.clone(), fail.clone());
        let now: Now = Arc::new(|| 10);
        let e = slot.get(ask(5, false), now.clone(), list.clone()).await.err().expect("the listing failed");
        assert!(e.to_string().contains("down"), "{e}");
        // Asked again for the same instant: the failure answers, no new listing.
        assert!(slot.get(ask(5, true), now.clone(), list.clone()).await.is_err());
        assert_eq!(lists.load(Ordering::SeqCst), 1);
        // A newer one is listed again.
        fail.store(false, Ordering::SeqCst);
        let now: Now = Arc::new(|| 20);
        snapshot(slot.get(ask(15, false), now, list).await).await;
        assert_eq!(lists.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_listing_task_that_dies_sends_its_waiters_to_read_by_id_and_the_next_ask_lists_again() {
        let slot: Arc<Slot<It>> = Arc::default();
        let lists = Arc::new(AtomicU32::new(0));
        let panicking: Lister<It> = {
            let lists = lists.clone();
            Arc::new(move || {
                lists.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { panic!("a listing task dies") })
            })
        };
        let now: Now = Arc::new(|| 10);
        let t = std::time::Instant::now();
        let e = slot.get(ask(5, false), now.clone(), panicking).await.err().expect("no listing came");
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "waited {:?} for a dead task", t.elapsed());
        assert!(e.to_string().contains("ended"), "{e}");
        // Nothing is left planned: a newer ask lists again.
        let (ok, fail) = (Arc::new(AtomicU32::new(0)), Arc::default());
        let now: Now = Arc::new(|| 20);
        snapshot(slot.get(ask(15, false), now, lister(ok.clone(), fail)).await).await;
        assert_eq!((lists.load(Ordering::SeqCst), ok.load(Ordering::SeqCst)), (1, 1));
    }

    #[tokio::test]
    async fn a_listing_that_could_not_qualify_is_never_promised() {
        // The run's bound is later than the clock now says (the clock
        // stepped back, or another host's clock is ahead): no listing
        // planned now can qualify, so the run reads by id at once.
        let slot: Arc<Slot<It>> = Arc::default();
        let (lists, fail) = (Arc::new(AtomicU32::new(0)), Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let now: Now = Arc::new(|| 1_000);
        for may_defer in [true, false] {
            let r = slot.get(ask(60_000, may_defer), now.clone(), lister(lists.clone(), fail.clone())).await;
            assert!(r.is_err(), "may_defer {may_defer}: promised a listing that cannot qualify");
        }
        assert_eq!(lists.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_repeated_item_is_kept_once() {
        let s =
            Snapshot::new(1, std::time::Instant::now(), vec![It("a".into(), "l".into()), It("a".into(), "l".into())]);
        assert_eq!((s.len(), s.with_label("l").len()), (1, 1));
    }
}
