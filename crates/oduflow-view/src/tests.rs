//! The bulk view's scheduling, one kind's slot at a time.

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
        gap_times_last: 0,
        defer_max: std::time::Duration::from_millis(400),
        wait_max: VIEW_WAIT_MAX,
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
        tasks.push(tokio::spawn(async move { snapshot(slot.get(ask(100, false), now, list).await).await.started_ms }));
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
    let s = Snapshot::new(1, std::time::Instant::now(), vec![It("a".into(), "l".into()), It("a".into(), "l".into())]);
    assert_eq!((s.len(), s.with_label("l").len()), (1, 1));
}

#[tokio::test]
async fn an_edit_reaches_the_newest_snapshot_and_the_listing_under_way() {
    let slot: Arc<Slot<It>> = Arc::default();
    let (started, gate) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let lists = Arc::new(AtomicU32::new(0));
    // A listing that shows `a` and `b`, and lands only when let go.
    let gated: Lister<It> = {
        let (started, gate, lists) = (started.clone(), gate.clone(), lists.clone());
        Arc::new(move || {
            let (started, gate, lists) = (started.clone(), gate.clone(), lists.clone());
            Box::pin(async move {
                lists.fetch_add(1, Ordering::SeqCst);
                started.notify_one();
                gate.notified().await;
                Ok(vec![It("a".into(), "l".into()), It("b".into(), "l".into())])
            })
        })
    };
    let now: Now = Arc::new(|| 100);
    let asked = Ask { gap: std::time::Duration::ZERO, ..ask(50, false) };
    let waiter = {
        let (slot, now, gated) = (slot.clone(), now.clone(), gated.clone());
        tokio::spawn(async move { slot.get(asked, now, gated).await })
    };
    // A change made while the listing is under way (it may have started
    // before the change was applied): the listing lands with it.
    started.notified().await;
    slot.edit(|v| {
        if !v.iter().any(|x| x.0 == "c") {
            v.push(It("c".into(), "l".into()))
        }
    });
    gate.notify_one();
    let s = snapshot(waiter.await.unwrap()).await;
    assert!(s.get("c").is_some(), "the edit made during the listing was lost");
    assert_eq!(s.len(), 3);
    // A change after it: the newest snapshot shows it at once, with no
    // new listing, and still counts as started when the listing did.
    slot.edit(|v| v.retain(|x| x.0 != "a"));
    let s = snapshot(slot.get(asked, now, gated).await).await;
    assert_eq!((s.get("a").is_none(), s.len(), s.started_ms), (true, 2, 100));
    assert_eq!(lists.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn listings_made_one_after_another_keep_the_gap_the_last_listing_sets() {
    // Listings of 50 ms, at least four times that apart: the one a run
    // asks for while another is under way starts 200 ms after it, not as
    // soon as it lands (the listing task goes on for it).
    let slot: Arc<Slot<It>> = Arc::default();
    let (lists, fail) = (Arc::new(AtomicU32::new(0)), Arc::default());
    let list = lister(lists.clone(), fail);
    let now: Now = Arc::new(|| 10);
    let spaced = Ask { gap: std::time::Duration::ZERO, gap_times_last: 4, ..ask(5, false) };
    let first = {
        let (slot, now, list) = (slot.clone(), now.clone(), list.clone());
        tokio::spawn(async move { slot.get(spaced, now, list).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let newer = Ask { since: Some(std::time::Instant::now()), ..spaced };
    let s2 = snapshot(slot.get(newer, now.clone(), list.clone()).await).await;
    let s1 = snapshot(first.await.unwrap()).await;
    let apart = s2.started_at - s1.started_at;
    assert!(apart >= std::time::Duration::from_millis(200), "listings {apart:?} apart");
    assert_eq!(lists.load(Ordering::SeqCst), 2);
}
