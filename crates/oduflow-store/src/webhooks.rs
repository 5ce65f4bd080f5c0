//! Webhook endpoints and their delivery state. The event feed is the
//! outbox: every event is written in the transaction of the change it
//! records, and an endpoint reads the feed from a cursor of its own, so a
//! receiver that is down loses nothing. One process at a time delivers to
//! an endpoint (a lease on the database's clock); a delivery is recorded
//! after the receiver answered, so an event may reach it twice (at least
//! once), never out of feed order except a dead letter replayed later.

use crate::feed::FeedEvent;
use crate::rows::RowExt;
use crate::{Result, Store, StoreError, both};
use oduflow_model::EventKind;
use serde::Serialize;

/// What an endpoint's row shows (never a secret: none is stored).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WebhookRow {
    pub id: String,
    pub name: String,
    pub url: String,
    /// The event kinds delivered; empty: every kind.
    pub kinds: Vec<String>,
    /// The last feed position delivered, dead-lettered or skipped.
    pub cursor: i64,
    /// Failed attempts at the event after the cursor.
    pub attempts: i64,
    pub next_attempt_ms: i64,
    pub last_error: Option<String>,
    pub delivered: i64,
    /// Dead letters not yet delivered.
    pub dead: i64,
    pub created_ms: i64,
    pub created_by: String,
}

/// A dead letter: an event an endpoint refused, or could not take, within
/// its attempts.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeadLetter {
    pub position: i64,
    pub attempts: i64,
    pub last_error: String,
    pub dead_ms: i64,
    /// When a replay was asked for (delivered at the next pass).
    pub replay_ms: Option<i64>,
}

/// How one attempt at an event ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Attempt {
    Delivered,
    /// Failed: try again at `retry_at_ms`, or, with `dead`, give it up to
    /// the dead letters and move on.
    Failed {
        error: String,
        retry_at_ms: i64,
        dead: bool,
    },
}

const ENDPOINT_COLUMNS: &str = "e.id, e.name, e.url, e.kinds, e.cursor, e.attempts, e.next_attempt_ms, e.last_error, \
     e.delivered, e.created_ms, e.created_by, \
     (SELECT count(*) FROM webhook_dead_letters d WHERE d.endpoint_id = e.id AND d.delivered_ms IS NULL) AS dead";

fn endpoint_from_row(r: &impl RowExt) -> Result<WebhookRow> {
    let kinds = r.text("kinds")?;
    Ok(WebhookRow {
        id: r.text("id")?,
        name: r.text("name")?,
        url: r.text("url")?,
        kinds: serde_json::from_str(&kinds)
            .map_err(|e| StoreError::Corrupt(format!("webhook kinds {kinds:?}: {e}")))?,
        cursor: r.int("cursor")?,
        attempts: r.int("attempts")?,
        next_attempt_ms: r.int("next_attempt_ms")?,
        last_error: r.text_opt("last_error")?,
        delivered: r.int("delivered")?,
        dead: r.int("dead")?,
        created_ms: r.int("created_ms")?,
        created_by: r.text("created_by")?,
    })
}

impl Store {
    /// Adds an endpoint reading the feed after `cursor` (the head: only
    /// what happens from now on; 0: every event). A live endpoint of the
    /// same name is refused.
    pub async fn webhook_add(
        &self,
        name: &str,
        url: &str,
        kinds: &[String],
        cursor: i64,
        by: &str,
        now_ms: i64,
    ) -> Result<WebhookRow> {
        crate::named("webhook_add", async move {
            let id = uuid::Uuid::new_v4().to_string();
            let kinds = serde_json::to_string(kinds).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let live: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_endpoints WHERE name = $1 AND removed_ms IS NULL")
                    .bind(name).fetch_one(&mut *tx).await?;
                if live > 0 {
                    return Err(StoreError::WebhookExists(name.to_owned()));
                }
                sqlx::query(
                    "INSERT INTO webhook_endpoints (id, name, url, kinds, cursor, created_ms, created_by) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)")
                    .bind(&id).bind(name).bind(url).bind(&kinds).bind(cursor).bind(now_ms).bind(by)
                    .execute(&mut *tx).await
                    .map_err(|e| crate::unique_to(e, || StoreError::WebhookExists(name.to_owned())))?;
                let detail = serde_json::json!({ "name": name, "id": id, "url": url, "kinds": kinds, "cursor": cursor });
                crate::queue::event_by(&mut *tx, by, None, EventKind::WebhookAdded, &detail, now_ms).await?;
                tx.commit().await?;
            });
            self.webhook_get(name).await?.ok_or_else(|| StoreError::WebhookNotFound(name.to_owned()))
        })
        .await
    }

    /// The live endpoint named `name`.
    pub async fn webhook_get(&self, name: &str) -> Result<Option<WebhookRow>> {
        crate::named("webhook_get", async move {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints e WHERE e.name = $1 AND e.removed_ms IS NULL"
            ));
            both!(self, p => {
                let row = sqlx::query(sql).bind(name).fetch_optional(p).await?;
                row.as_ref().map(endpoint_from_row).transpose()
            })
        })
        .await
    }

    /// Every live endpoint, by name.
    pub async fn webhook_list(&self) -> Result<Vec<WebhookRow>> {
        crate::named("webhook_list", async move {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints e WHERE e.removed_ms IS NULL ORDER BY e.name"
            ));
            both!(self, p => {
                let rows = sqlx::query(sql).fetch_all(p).await?;
                rows.iter().map(endpoint_from_row).collect()
            })
        })
        .await
    }

    /// Removes the live endpoint `name`: nothing more is delivered to it
    /// (a delivery under way ends with its attempt).
    pub async fn webhook_remove(&self, name: &str, by: &str, now_ms: i64) -> Result<()> {
        crate::named("webhook_remove", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let n = sqlx::query("UPDATE webhook_endpoints SET removed_ms = $2 WHERE name = $1 AND removed_ms IS NULL")
                    .bind(name).bind(now_ms).execute(&mut *tx).await?.rows_affected();
                if n == 0 {
                    return Err(StoreError::WebhookNotFound(name.to_owned()));
                }
                let detail = serde_json::json!({ "name": name });
                crate::queue::event_by(&mut *tx, by, None, EventKind::WebhookRemoved, &detail, now_ms).await?;
                tx.commit().await?;
                Ok(())
            })
        })
        .await
    }

    /// Takes the endpoint for `lease_ms` as `owner` when it is live, not
    /// held by another, and due; its row as taken.
    pub async fn webhook_claim(&self, id: &str, owner: &str, lease_ms: i64, now_ms: i64) -> Result<Option<WebhookRow>> {
        crate::named("webhook_claim", async move {
            let n = both!(self, p => {
                sqlx::query(
                    "UPDATE webhook_endpoints SET lease_owner = $2, lease_until_ms = $3 + $4 \
                     WHERE id = $1 AND removed_ms IS NULL AND next_attempt_ms <= $3 \
                     AND (lease_until_ms <= $3 OR lease_owner = $2)")
                    .bind(id).bind(owner).bind(now_ms).bind(lease_ms).execute(p).await?.rows_affected()
            });
            if n == 0 {
                return Ok(None);
            }
            let sql =
                sqlx::AssertSqlSafe(format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints e WHERE e.id = $1"));
            both!(self, p => {
                let row = sqlx::query(sql).bind(id).fetch_optional(p).await?;
                row.as_ref().map(endpoint_from_row).transpose()
            })
        })
        .await
    }

    /// Lets the endpoint go, for any process to take.
    pub async fn webhook_release(&self, id: &str, owner: &str) -> Result<()> {
        crate::named("webhook_release", async move {
            both!(self, p => {
                sqlx::query("UPDATE webhook_endpoints SET lease_owner = NULL, lease_until_ms = 0 WHERE id = $1 AND lease_owner = $2")
                    .bind(id).bind(owner).execute(p).await?;
            });
            Ok(())
        })
        .await
    }

    /// Moves the cursor past events the endpoint does not take, while it
    /// holds the lease.
    pub async fn webhook_skip(&self, id: &str, owner: &str, to: i64, now_ms: i64) -> Result<bool> {
        crate::named("webhook_skip", async move {
            both!(self, p => {
                let n = sqlx::query(
                    "UPDATE webhook_endpoints SET cursor = $3 WHERE id = $1 AND lease_owner = $2 AND cursor < $3 \
                     AND lease_until_ms > $4")
                    .bind(id).bind(owner).bind(to).bind(now_ms).execute(p).await?.rows_affected();
                Ok(n == 1)
            })
        })
        .await
    }

    /// Records how the attempt at the event at `position` (the one after
    /// the cursor) ended, while `owner` holds the lease; false when it no
    /// longer does (nothing recorded).
    pub async fn webhook_attempted(
        &self,
        id: &str,
        owner: &str,
        position: i64,
        attempt: &Attempt,
        now_ms: i64,
    ) -> Result<bool> {
        crate::named("webhook_attempted", async move {
            let lock = match &self.db {
                crate::Db::Pg(..) => {
                    "SELECT attempts FROM webhook_endpoints WHERE id = $1 AND lease_owner = $2 AND cursor < $3 \
                     AND lease_until_ms > $4 FOR UPDATE"
                }
                crate::Db::Sqlite(_) => {
                    "SELECT attempts FROM webhook_endpoints WHERE id = $1 AND lease_owner = $2 AND cursor < $3 \
                     AND lease_until_ms > $4"
                }
            };
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                // Locked (PostgreSQL) for the writes below: held, unexpired,
                // and the cursor not yet past this event.
                let held: Option<i64> = sqlx::query_scalar(lock)
                    .bind(id).bind(owner).bind(position).bind(now_ms).fetch_optional(&mut *tx).await?;
                let Some(attempts) = held else { return Ok(false) };
                match attempt {
                    Attempt::Delivered => {
                        sqlx::query(
                            "UPDATE webhook_endpoints SET cursor = $2, attempts = 0, next_attempt_ms = 0, \
                             last_error = NULL, delivered = delivered + 1 WHERE id = $1")
                            .bind(id).bind(position).execute(&mut *tx).await?;
                    }
                    Attempt::Failed { error, dead: true, .. } => {
                        sqlx::query(
                            "INSERT INTO webhook_dead_letters (endpoint_id, position, attempts, last_error, dead_ms) \
                             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (endpoint_id, position) DO UPDATE SET \
                             attempts = excluded.attempts, last_error = excluded.last_error, dead_ms = excluded.dead_ms, \
                             replay_ms = NULL, delivered_ms = NULL")
                            .bind(id).bind(position).bind(attempts + 1).bind(error).bind(now_ms)
                            .execute(&mut *tx).await?;
                        sqlx::query(
                            "UPDATE webhook_endpoints SET cursor = $2, attempts = 0, next_attempt_ms = 0, \
                             last_error = $3 WHERE id = $1")
                            .bind(id).bind(position).bind(error).execute(&mut *tx).await?;
                    }
                    Attempt::Failed { error, retry_at_ms, dead: false } => {
                        sqlx::query(
                            "UPDATE webhook_endpoints SET attempts = attempts + 1, next_attempt_ms = $2, \
                             last_error = $3 WHERE id = $1")
                            .bind(id).bind(retry_at_ms).bind(error).execute(&mut *tx).await?;
                    }
                }
                tx.commit().await?;
                Ok(true)
            })
        })
        .await
    }

    /// The endpoint's dead letters not yet delivered, oldest first.
    pub async fn webhook_dead_letters(&self, id: &str) -> Result<Vec<DeadLetter>> {
        crate::named("webhook_dead_letters", async move {
            both!(self, p => {
                let rows: Vec<(i64, i64, String, i64, Option<i64>)> = sqlx::query_as(
                    "SELECT position, attempts, last_error, dead_ms, replay_ms FROM webhook_dead_letters \
                     WHERE endpoint_id = $1 AND delivered_ms IS NULL ORDER BY position")
                    .bind(id).fetch_all(p).await?;
                Ok(rows.into_iter()
                    .map(|(position, attempts, last_error, dead_ms, replay_ms)| DeadLetter {
                        position, attempts, last_error, dead_ms, replay_ms,
                    })
                    .collect())
            })
        })
        .await
    }

    /// Asks for the endpoint's dead letters (only the one at `position`,
    /// if given) to be delivered again; how many.
    pub async fn webhook_replay(&self, name: &str, position: Option<i64>, by: &str, now_ms: i64) -> Result<u64> {
        crate::named("webhook_replay", async move {
            let Some(e) = self.webhook_get(name).await? else {
                return Err(StoreError::WebhookNotFound(name.to_owned()));
            };
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let n = sqlx::query(
                    "UPDATE webhook_dead_letters SET replay_ms = $2 WHERE endpoint_id = $1 \
                     AND delivered_ms IS NULL AND ($3 < 0 OR position = $3)")
                    .bind(&e.id).bind(now_ms).bind(position.unwrap_or(-1)).execute(&mut *tx).await?.rows_affected();
                let detail = serde_json::json!({ "name": name, "position": position, "dead_letters": n });
                crate::queue::event_by(&mut *tx, by, None, EventKind::WebhookReplayAsked, &detail, now_ms).await?;
                tx.commit().await?;
                Ok(n)
            })
        })
        .await
    }

    /// Records how a replayed dead letter's attempt ended: delivered, or
    /// dead again with the new error (a replay is one attempt); only while
    /// `owner` holds the endpoint and the replay is still asked for.
    pub async fn webhook_replayed(
        &self,
        id: &str,
        owner: &str,
        position: i64,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("webhook_replayed", async move {
            both!(self, p => {
                sqlx::query(
                    "UPDATE webhook_dead_letters SET replay_ms = NULL, attempts = attempts + 1, \
                     delivered_ms = CASE WHEN $3 = '' THEN $4 END, \
                     last_error = CASE WHEN $3 = '' THEN last_error ELSE $3 END \
                     WHERE endpoint_id = $1 AND position = $2 AND replay_ms IS NOT NULL AND delivered_ms IS NULL \
                     AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = $1 AND e.lease_owner = $5 \
                       AND e.lease_until_ms > $4)")
                    .bind(id).bind(position).bind(error.unwrap_or_default()).bind(now_ms).bind(owner)
                    .execute(p).await?;
            });
            Ok(())
        })
        .await
    }

    /// The highest feed position stamped so far, read only (no stamping
    /// pass): what the metrics measure an endpoint's lag against.
    pub async fn feed_head(&self) -> Result<i64> {
        crate::named("feed_head", async move {
            both!(self, p => {
                Ok(sqlx::query_scalar("SELECT coalesce(max(position), 0) FROM events").fetch_one(p).await?)
            })
        })
        .await
    }

    /// The events at these feed positions, with their clients' names.
    pub async fn feed_at(&self, positions: &[i64]) -> Result<Vec<FeedEvent>> {
        let mut out = vec![];
        for &at in positions {
            out.extend(self.feed_after(at - 1, 1).await?.events.into_iter().filter(|e| e.position == at));
        }
        Ok(out)
    }
}
