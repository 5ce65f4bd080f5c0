//! The event feed: every event, oldest first, from a cursor that stays
//! valid, so an integration or an audit export can page through the whole
//! history and wait for what comes next.
//!
//! The cursor is an event's *position*, not its id. An id is drawn when an
//! insert begins, and on PostgreSQL a transaction that commits later may
//! hold a lower id than one a reader has already been given: paging by id
//! would skip it for good. A position is stamped on committed events only,
//! in id order, by one stamping pass at a time (an advisory lock on
//! PostgreSQL, the write lock on SQLite), each pass numbering after the
//! highest position any earlier pass committed. So a reader that has seen
//! position N has seen every event that will ever be below N. Positions
//! also follow the database's clock ([`POSITIONS_PER_MS`]), so a restore
//! from an older copy does not hand out again positions a reader has
//! already passed.

use crate::rows::{RowExt, json_col};
use crate::{BeginWrite, Result, Store, StoreError, both};
use serde::Serialize;

/// Events stamped with a position by one pass, at most: a feed that nobody
/// read for a long time is stamped over several reads.
const FEED_STAMP_MAX: i64 = 10_000;
/// The PostgreSQL advisory lock (transaction-scoped) a stamping pass holds.
const FEED_STAMP_LOCK: i64 = 0x6f64_6600_6665_6564;
/// Positions a millisecond of the database's clock spans: a pass numbers
/// its events from the newest one's time (in milliseconds) times this, or
/// on from the last position when that is higher. So events written after
/// a restore from an older copy are placed past every position the lost
/// timeline gave out (its events were written earlier), and a reader whose
/// cursor came from that timeline reads them instead of skipping them.
const POSITIONS_PER_MS: i64 = 1_000;
/// Events one page of the feed holds, at most.
pub const FEED_LIMIT_MAX: i64 = 1_000;
/// Events one page holds unless asked otherwise.
pub const FEED_LIMIT_DEFAULT: i64 = 100;
/// Seconds a reader may wait for the next events, at most (a request held
/// open that long is still answered well within common proxy timeouts).
pub const FEED_WAIT_MAX_S: u64 = 30;
/// How often a waiting read looks for new events.
const FEED_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// One event of the feed, with its client's name beside its id.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FeedEvent {
    /// Its place in the feed: the cursor to read on from.
    pub position: i64,
    pub id: i64,
    pub client_id: Option<String>,
    /// The client's name (names are never reused for another client).
    pub client: Option<String>,
    pub kind: String,
    pub detail: serde_json::Value,
    pub at_ms: i64,
    /// Who asked for the change it records (none for a run's own).
    pub actor: Option<String>,
}

/// A page of the feed.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FeedPage {
    /// Oldest first.
    pub events: Vec<FeedEvent>,
    /// The cursor for the next page: the last event's position, or the one
    /// asked after when there was none.
    pub next: i64,
    /// The highest position stamped so far.
    pub head: i64,
}

/// What a reader asks of the feed, checked: the CLI and the HTTP API refuse
/// the same things with the same words.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FeedQuery {
    pub after: i64,
    pub limit: i64,
    pub wait_s: u64,
}

impl FeedQuery {
    pub fn new(after: Option<i64>, limit: Option<i64>, wait_s: Option<u64>) -> std::result::Result<Self, String> {
        let (after, limit, wait_s) = (after.unwrap_or(0), limit.unwrap_or(FEED_LIMIT_DEFAULT), wait_s.unwrap_or(0));
        if after < 0 {
            return Err(format!("after must be a feed position, 0 or more (0: from the first event); got {after}"));
        }
        if !(1..=FEED_LIMIT_MAX).contains(&limit) {
            return Err(format!("limit must be within 1..={FEED_LIMIT_MAX}; got {limit}"));
        }
        if wait_s > FEED_WAIT_MAX_S {
            return Err(format!("wait must be within 0..={FEED_WAIT_MAX_S} seconds; got {wait_s}"));
        }
        Ok(Self { after, limit, wait_s })
    }
}

impl Store {
    /// Stamps the events committed since the last pass with the next
    /// positions, in id order; returns how many it stamped.
    pub async fn feed_stamp(&self) -> Result<u64> {
        crate::named("feed_stamp", async move {
            both!(self, p => {
                // Most reads find nothing to stamp: no write lock for them.
                let pending: Option<i64> = sqlx::query_scalar("SELECT id FROM events WHERE position IS NULL LIMIT 1")
                    .fetch_optional(p).await?;
                if pending.is_none() {
                    return Ok(0);
                }
                let mut tx = p.begin_write().await?;
                if matches!(self.db, crate::Db::Pg(..)) {
                    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(FEED_STAMP_LOCK).execute(&mut *tx).await?;
                }
                // Read after the lock: the last pass's positions are committed.
                let last: i64 = sqlx::query_scalar("SELECT coalesce(max(position), 0) FROM events")
                    .fetch_one(&mut *tx).await?;
                let newest: i64 = sqlx::query_scalar(
                    "SELECT coalesce(max(at_ms), 0) FROM (SELECT at_ms FROM events WHERE position IS NULL \
                     ORDER BY id LIMIT $1) batch")
                    .bind(FEED_STAMP_MAX).fetch_one(&mut *tx).await?;
                let base = last.max(newest.saturating_mul(POSITIONS_PER_MS));
                let n = sqlx::query(
                    "WITH todo AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM events \
                                   WHERE position IS NULL ORDER BY id LIMIT $2) \
                     UPDATE events SET position = $1 + todo.n FROM todo WHERE events.id = todo.id")
                    .bind(base).bind(FEED_STAMP_MAX).execute(&mut *tx).await?.rows_affected();
                tx.commit().await?;
                Ok(n)
            })
        })
        .await
    }

    /// The page `q` asks for: as [`Store::feed_after`], waiting up to
    /// `q.wait_s` for an event when there is none yet. A cursor past the
    /// highest position is refused ([`StoreError::FeedCursorAhead`]).
    pub async fn feed_read(&self, q: &FeedQuery) -> Result<FeedPage> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(q.wait_s);
        loop {
            let page = self.feed_after(q.after, q.limit).await?;
            if q.after > page.head {
                return Err(StoreError::FeedCursorAhead { after: q.after, head: page.head });
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if !page.events.is_empty() || left.is_zero() {
                return Ok(page);
            }
            tokio::time::sleep(FEED_POLL.min(left)).await;
        }
    }

    /// The events after position `after`, oldest first, at most `limit`,
    /// once the events committed so far are stamped.
    pub async fn feed_after(&self, after: i64, limit: i64) -> Result<FeedPage> {
        self.feed_stamp().await?;
        crate::named("feed_after", async move {
            both!(self, p => {
                let rows = sqlx::query(
                    "SELECT e.position, e.id, e.client_ref, c.name, e.kind, e.detail, e.at_ms, e.actor FROM events e \
                     LEFT JOIN clients c ON c.id = e.client_ref \
                     WHERE e.position > $1 ORDER BY e.position LIMIT $2")
                    .bind(after).bind(limit).fetch_all(p).await?;
                // Read after the page (positions only grow), so the head is
                // never below the page's last position, whatever a stamping
                // pass committed in between.
                let head: i64 = sqlx::query_scalar("SELECT coalesce(max(position), 0) FROM events")
                    .fetch_one(p).await?;
                let events = rows.iter().map(feed_event).collect::<Result<Vec<_>>>()?;
                let next = events.last().map_or(after, |e| e.position);
                Ok(FeedPage { events, next, head })
            })
        })
        .await
    }
}

fn feed_event(r: &impl RowExt) -> Result<FeedEvent> {
    Ok(FeedEvent {
        position: r.int("position")?,
        id: r.int("id")?,
        client_id: r.text_opt("client_ref")?,
        client: r.text_opt("name")?,
        kind: r.text("kind")?,
        detail: json_col(&r.text("detail")?)?,
        at_ms: r.int("at_ms")?,
        actor: r.text_opt("actor")?,
    })
}
