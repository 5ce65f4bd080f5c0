//! One kind's shared listings: the newest snapshot, and the
//! listings planned, at most one under way and each at least a gap after
//! the one before; what a run that asks gets (a snapshot that qualifies, or
//! when to come back); and the spawned task that lists.

use super::*;

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
    /// The spacing the latest ask asked for (the next listing's gap).
    spacing: Option<Ask>,
    /// Edits made while a listing was under way: applied to it too when it
    /// lands (it may have started before the change they record).
    edits: Vec<Edit<T>>,
}

/// A change this process made, applied to the listed items so that the
/// runs asking next see it before the next listing does.
type Edit<T> = Arc<dyn Fn(&mut Vec<T>) + Send + Sync>;

/// The newest snapshot of one kind, and the listings planned: at most one
/// under way, each starting at least a gap after the one before.
pub struct Slot<T> {
    state: std::sync::Mutex<SlotState<T>>,
    /// Counts the listings done: a waiter wakes at each and looks again.
    done: tokio::sync::watch::Sender<u64>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self {
            state: std::sync::Mutex::new(SlotState {
                cur: None,
                failed: None,
                next: None,
                again: false,
                last: None,
                spacing: None,
                edits: Vec::new(),
            }),
            done: tokio::sync::watch::channel(0).0,
        }
    }
}

/// How to list one kind, from a spawned task.
pub type Lister<T> = Arc<dyn Fn() -> BoxFuture<Result<Vec<T>, ProviderError>> + Send + Sync>;

pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// How long after a planned listing should be done a run comes back.
const DEFER_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);

impl<T: Listed> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest snapshot if its listing started after `ask.after_ms`
    /// (and `ask.since`); else a listing that will qualify is planned (one
    /// under way, or the next, a gap after the last one started), and the
    /// run waits for it, bounded by `ask.wait_max`, or is told when to
    /// come back.
    pub async fn get(
        self: &Arc<Self>,
        ask: Ask,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
        list: Lister<T>,
    ) -> Result<Got<T>, ProviderError> {
        let deadline = tokio::time::Instant::now() + ask.wait_max;
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
                    "shared listing: none within {} s",
                    ask.wait_max.as_secs()
                )));
            }
        }
    }

    /// Applies `edit` (a change this process made and was answered for)
    /// to the newest snapshot, and to the listing under way when it lands.
    /// An edit is idempotent: it may meet a listing that shows the change.
    pub fn edit(&self, edit: impl Fn(&mut Vec<T>) + Send + Sync + 'static) {
        let edit: Edit<T> = Arc::new(edit);
        let mut s = self.lock();
        if let Some(c) = s.cur.take() {
            let mut items = c.items().to_vec();
            edit(&mut items);
            s.cur = Some(Arc::new(Snapshot::new(c.started_ms, c.started_at, items)));
        }
        if s.next.as_ref().is_some_and(|n| n.started) {
            s.edits.push(edit);
        }
    }

    /// Plans the listing `ask` needs, unless the newest snapshot, or one
    /// under way or planned, qualifies already; never waits.
    pub fn plan(self: &Arc<Self>, ask: Ask, now: &Arc<dyn Fn() -> i64 + Send + Sync>, list: &Lister<T>) {
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
            return Err(ProviderError::Transport(format!("shared listing: the listing failed: {e}")));
        }
        let took = s.last.map_or(FIRST_LISTING_GUESS, |l| l.1);
        let gap = ask.gap_after(s.last.map_or(std::time::Duration::ZERO, |l| l.1));
        s.spacing = Some(ask);
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
                    "shared listing: none started now would be newer than the bound asked for".to_owned(),
                ));
            }
            // It does not: the one after it will (it starts once this one
            // is done, so after now).
            Some(n) => {
                let until = n.start_at.saturating_duration_since(now_at) + took.max(gap) + took;
                s.again = true;
                Look::Planned(until)
            }
            None => {
                let at = s.last.map_or(now_at, |(started, _)| (started + gap).max(now_at));
                let wait = at - now_at;
                s.next = Some(Next { start_ms: now() + wait.as_millis() as i64, start_at: at, started: false });
                tokio::spawn(self.clone().refresh(now.clone(), list.clone()));
                Look::Planned(wait + took)
            }
        })
    }

    /// Makes the listings planned in `next`, one after the other, each a
    /// gap after the one before started (as the latest ask spaces them),
    /// while runs want them.
    async fn refresh(self: Arc<Self>, now: Arc<dyn Fn() -> i64 + Send + Sync>, list: Lister<T>) {
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
                    s.edits.clear();
                    drop(s);
                    self.0.done.send_modify(|n| *n += 1);
                }
            }
        }
        let mut ended = Ended(&self, false);
        self.refresh_while_wanted(now, list).await;
        ended.1 = true;
    }

    async fn refresh_while_wanted(&self, now: Arc<dyn Fn() -> i64 + Send + Sync>, list: Lister<T>) {
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
                let edits = std::mem::take(&mut s.edits);
                match r {
                    Ok(mut items) => {
                        edits.iter().for_each(|edit| edit(&mut items));
                        s.cur = Some(Arc::new(Snapshot::new(started_ms, started_at, items)));
                        s.failed = None;
                    }
                    Err(e) => s.failed = Some((started_ms, started_at, e.to_string())),
                }
                s.last = Some((started_at, took));
                let more = std::mem::take(&mut s.again);
                s.next = more.then(|| {
                    let gap = s.spacing.map_or(std::time::Duration::ZERO, |a| a.gap_after(took));
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
