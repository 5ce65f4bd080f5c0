//! Orphans: resources under our label prefix that no receipt accounts for,
//! as the last inventory pass found them, each with how to resolve it. The inventory
//! writes them; the API, the dashboard and `oduflow orphan list` read them;
//! `oduflow orphan adopt|delete` record how each was resolved.

use crate::rows::RowExt;
use crate::{Result, Store, both};
use oduflow_model::*;
use serde::Serialize;

/// One orphan as an inventory pass found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundOrphan {
    pub resource_id: String,
    pub kind: ResourceKind,
    pub label: String,
    pub client_ref: Option<ClientId>,
    pub note: String,
}

/// Every orphan recorded when an inventory pass began, open (`None`) or
/// resolved at that time ([`Store::orphans_before`]).
#[derive(Clone, Debug, Default)]
pub struct OrphansBefore(std::collections::HashMap<String, Option<i64>>);

/// A recorded orphan, open or resolved.
#[derive(Clone, Debug, Serialize)]
pub struct OrphanRow {
    pub resource_id: String,
    pub kind: ResourceKind,
    pub label: String,
    /// The client its label (or receipt) names, if any.
    pub client_ref: Option<String>,
    pub note: String,
    pub found_ms: i64,
    pub last_seen_ms: i64,
    pub resolved_ms: Option<i64>,
    pub resolution: Option<String>,
}

const SELECT: &str = "SELECT resource_id, kind, label, client_ref, note, found_ms, last_seen_ms, resolved_ms, resolution \
                      FROM orphans";

fn from_row(r: &impl RowExt) -> Result<OrphanRow> {
    let kind = r.text("kind")?;
    Ok(OrphanRow {
        resource_id: r.text("resource_id")?,
        kind: ResourceKind::parse(&kind).ok_or(crate::StoreError::Corrupt(kind))?,
        label: r.text("label")?,
        client_ref: r.text_opt("client_ref")?,
        note: r.text("note")?,
        found_ms: r.int("found_ms")?,
        last_seen_ms: r.int("last_seen_ms")?,
        resolved_ms: r.int_opt("resolved_ms")?,
        resolution: r.text_opt("resolution")?,
    })
}

/// What a pass writes, in id order: each orphan it found (`Some`), and
/// each one open when it began that it did not find (`None`: resolved).
fn orphan_writes<'a>(found: &'a [FoundOrphan], before: &'a OrphansBefore) -> Vec<(&'a str, Option<&'a FoundOrphan>)> {
    let found_ids: std::collections::HashSet<&str> = found.iter().map(|o| o.resource_id.as_str()).collect();
    let gone = before.0.iter().filter(|(id, at)| at.is_none() && !found_ids.contains(id.as_str()));
    let mut writes: Vec<_> = found
        .iter()
        .map(|o| (o.resource_id.as_str(), Some(o)))
        .chain(gone.map(|(id, _)| (id.as_str(), None)))
        .collect();
    writes.sort_by_key(|(id, _)| *id);
    writes
}

impl Store {
    /// The orphans recorded now, each open or resolved when: what an
    /// inventory pass reads before it lists, for [`Store::orphans_record`].
    pub async fn orphans_before(&self) -> Result<OrphansBefore> {
        crate::named("orphans_before", async move {
            both!(self, p => {
                let rows: Vec<(String, Option<i64>)> =
                    sqlx::query_as("SELECT resource_id, resolved_ms FROM orphans").fetch_all(p).await?;
                Ok(OrphansBefore(rows.into_iter().collect()))
            })
        })
        .await
    }

    /// Records what a complete inventory pass found: each orphan is opened
    /// (again) or refreshed; an open one the pass no longer found is resolved
    /// as "no longer an orphan" (listed no more, or accounted for now).
    /// Passes side by side commit in either order, so a pass writes only
    /// what its listing is newer than: `before` is what was recorded when
    /// it began (read before it listed), `now_ms` when that was. An orphan
    /// is reopened only if it is still resolved as it was then (one
    /// resolved since, by an operator or a run's adoption, whatever the
    /// resolution's stamp, or recorded since by another pass, is not); one
    /// is resolved only if it was open then and no later pass has seen it;
    /// a sighting never moves back. The next pass decides the rest.
    /// `by` ran the pass: its `orphan_found` events name them.
    pub async fn orphans_record(
        &self,
        found: &[FoundOrphan],
        before: &OrphansBefore,
        by: &str,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("orphans_record", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                // One pass over the rows in id order: passes side by side
                // lock them in the same order (on PostgreSQL two in
                // different orders deadlocked, and one failed).
                for (id, w) in orphan_writes(found, before) {
                    match w {
                        Some(o) => {
                            // Found by this pass when the row it leaves was
                            // found now (inserted or reopened); one found by
                            // a pass side by side keeps that pass's time.
                            let found_ms: Option<i64> = sqlx::query_scalar(
                            "INSERT INTO orphans (resource_id, kind, label, client_ref, note, found_ms, last_seen_ms) \
                             VALUES ($1, $2, $3, $4, $5, $6, $6) \
                             ON CONFLICT (resource_id) DO UPDATE SET kind = excluded.kind, label = excluded.label, \
                             client_ref = excluded.client_ref, note = excluded.note, last_seen_ms = excluded.last_seen_ms, \
                             found_ms = CASE WHEN orphans.resolved_ms IS NULL THEN orphans.found_ms ELSE excluded.found_ms END, \
                             resolved_ms = NULL, resolution = NULL \
                             WHERE orphans.last_seen_ms <= excluded.last_seen_ms \
                             AND (orphans.resolved_ms IS NULL OR orphans.resolved_ms = $7) RETURNING found_ms")
                            .bind(id).bind(o.kind.as_str()).bind(&o.label)
                            .bind(o.client_ref.as_ref().map(|c| c.as_str())).bind(&o.note).bind(now_ms)
                            .bind(before.0.get(id).copied().flatten())
                            .fetch_optional(&mut *tx).await?;
                            if found_ms == Some(now_ms) && !matches!(before.0.get(id), Some(None)) {
                                crate::queue::event_by(&mut *tx, by, o.client_ref.as_ref(), EventKind::OrphanFound,
                                    &serde_json::json!({ "resource_id": id, "kind": o.kind, "label": o.label, "note": o.note }),
                                    now_ms).await?;
                            }
                        }
                        None => {
                            sqlx::query(
                            "UPDATE orphans SET resolved_ms = $2, resolution = $3 WHERE resource_id = $1 \
                             AND resolved_ms IS NULL AND last_seen_ms < $2")
                            .bind(id).bind(now_ms).bind("no longer an orphan at the last inventory pass")
                            .execute(&mut *tx).await?;
                        }
                    }
                }
                tx.commit().await?;
            });
            Ok(())
        })
        .await
    }

    /// Open orphans, oldest first; with `all`, resolved ones too.
    pub async fn orphans_list(&self, all: bool) -> Result<Vec<OrphanRow>> {
        crate::named("orphans_list", async move {
            let sql = if all {
                format!("{SELECT} ORDER BY found_ms, resource_id")
            } else {
                format!("{SELECT} WHERE resolved_ms IS NULL ORDER BY found_ms, resource_id")
            };
            both!(self, p => {
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(p).await?;
                rows.iter().map(from_row).collect()
            })
        })
        .await
    }

    /// The open orphans recorded for one client (named by their label or
    /// by a receipt), oldest first: a run reads them before a first create
    /// and before `deleted`.
    pub async fn orphans_open_for_client(&self, client: &ClientId) -> Result<Vec<OrphanRow>> {
        crate::named("orphans_open_for_client", async move {
            let sql = format!("{SELECT} WHERE resolved_ms IS NULL AND client_ref = $1 ORDER BY found_ms, resource_id");
            both!(self, p => {
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(client.as_str()).fetch_all(p).await?;
                rows.iter().map(from_row).collect()
            })
        })
        .await
    }

    pub async fn orphan_get(&self, resource_id: &str) -> Result<Option<OrphanRow>> {
        crate::named("orphan_get", async move {
            let sql = format!("{SELECT} WHERE resource_id = $1");
            both!(self, p => {
                let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(resource_id).fetch_optional(p).await?;
                row.as_ref().map(from_row).transpose()
            })
        })
        .await
    }

    /// Marks an orphan resolved, saying how. `false` if it was not open.
    pub async fn orphan_resolve(&self, resource_id: &str, resolution: &str, now_ms: i64) -> Result<bool> {
        crate::named("orphan_resolve", async move {
            both!(self, p => {
                let n = sqlx::query("UPDATE orphans SET resolved_ms = $2, resolution = $3 WHERE resource_id = $1 AND resolved_ms IS NULL")
                    .bind(resource_id).bind(now_ms).bind(resolution)
                    .execute(p).await?.rows_affected();
                Ok(n == 1)
            })
        })
        .await
    }
}
