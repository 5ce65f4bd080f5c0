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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub(crate) use oduflow_view::{Ask, Got, Listed};
use oduflow_view::{Lister, Slot};

/// What a run asks the view for: a listing started after `after_ms` (and
/// `since`), the listings at least half a poll interval apart, a run told
/// to come back at most a poll interval later, or waiting up to
/// [`oduflow_view::VIEW_WAIT_MAX`].
pub(crate) fn ask(after_ms: i64, since: Option<std::time::Instant>, may_defer: bool, poll: std::time::Duration) -> Ask {
    Ask {
        after_ms,
        since,
        may_defer,
        gap: poll / 2,
        gap_times_last: 0,
        defer_max: poll,
        wait_max: oduflow_view::VIEW_WAIT_MAX,
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
