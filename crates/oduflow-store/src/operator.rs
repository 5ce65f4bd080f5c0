//! Operator actions on an infra record: explicit reconciliation (with an
//! optional new dispatch generation), key rebinding after a proven rotation,
//! and the restore guard that keeps the queue stopped until an inventory pass
//! has run.

use crate::Db;
use crate::queue::{Conn as _, NewJob, event_by, job_insert};
use crate::{ClientRow, Result, Store, StoreError, both, locking};
use oduflow_model::*;

/// One record to rebind to a new key, with the receipts (operation key and
/// resource id, sorted) its ownership was proven for.
#[derive(Clone, Debug)]
pub struct Rebind {
    pub client: ClientId,
    pub old: KeyFingerprint,
    pub proven: Vec<(String, Option<String>)>,
}

/// Set while a restored database has not been reconciled with the provider.
pub const SETTING_RESTORE_PENDING: &str = "restore_pending";
/// A random id written at `init`; with the local high-water mark it tells a
/// restored copy from the live database.
pub const SETTING_LINEAGE: &str = "lineage";
/// A random id written with each declared restore: two declarations with
/// the same reason are told apart.
pub const SETTING_RESTORE_DECLARED: &str = "restore_declared";

/// The pending restore an inventory pass saw when it began (its reason and
/// its declaration's id; neither when none was pending): the one its end
/// may clear.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreSeen {
    why: Option<String>,
    id: Option<String>,
}

impl RestoreSeen {
    /// Whether a restore was pending.
    pub fn pending(&self) -> bool {
        self.why.is_some()
    }
}

impl Store {
    /// A run for a ready client the verification pass saw drift on: only
    /// if it is still ready, present, managed and at `generation` (a client
    /// that blocked or changed since keeps what it has: no block is lifted
    /// here). Whether the run was queued.
    pub async fn client_recheck(
        &self,
        id: &ClientId,
        generation: i64,
        by: &str,
        now_ms: i64,
        attempts_max: i32,
    ) -> Result<bool> {
        crate::named("client_recheck", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let n = sqlx::query(
                    "UPDATE infra SET generation = $2 + 1, status = 'provisioning', updated_ms = $3 \
                     WHERE client_id = $1 AND generation = $2 AND status = 'ready' AND target = 'present' \
                     AND observe_only = 0")
                    .bind(id.as_str()).bind(generation).bind(now_ms).execute(&mut *tx).await?.rows_affected();
                if n == 1 {
                    let mut job = NewJob::for_client(id, JobKind::Provision, generation + 1, now_ms, attempts_max);
                    job.payload = serde_json::json!({ crate::RECONCILE_PAYLOAD: true });
                    job_insert(&mut *tx, &job).await?;
                    event_by(&mut *tx, by, Some(id), EventKind::ReconcileRequested, &serde_json::json!({
                        "by": by, "generation": generation + 1,
                    }), now_ms).await?;
                }
                tx.commit().await?;
                Ok(n == 1)
            })
        })
        .await
    }

    /// Observe again: clears a blocked state, bumps the generation (queued
    /// jobs become stale) and enqueues a fresh job for the current target.
    /// A client blocked on a change (`uncertain_update`, or
    /// `provider_unavailable`, which a change that cannot connect ends in)
    /// moves to a new spec generation: its change is read first and, if a
    /// read still shows the old value, sent once on a new change receipt
    /// (never again on the old one); an updated client's wait for its server
    /// to be ready starts again. Not `update_rejected`: a change Vultr
    /// refused stays refused on its receipt, so the same PATCH is not sent
    /// again (a plan refused before anything was sent is checked against
    /// the upgrades again); `client update` is the way on.
    /// `advance` lists kinds whose dispatch generation moves on to at least
    /// the given one (a new operation key and label); the caller has
    /// established that this is allowed (a definitive rejection, or an
    /// operator's abandonment).
    pub async fn client_reconcile(
        &self,
        name: &str,
        advance: &[(ResourceKind, i64)],
        actor: &str,
        now_ms: i64,
        attempts_max: i32,
    ) -> Result<ClientRow> {
        crate::named("client_reconcile", async move {
            let read = locking!(
                self,
                "SELECT i.client_id, i.target, i.generation, i.dns_key, i.observe_only FROM infra i \
                 JOIN clients c ON c.id = i.client_id WHERE c.name = $1"
            );
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let row: Option<(String, String, i64, Option<String>, i64)> = sqlx::query_as(read)
                    .bind(name).fetch_optional(&mut *tx).await?;
                let Some((id, target, generation, dns, observed)) = row else {
                    return Err(StoreError::ClientNotFound(name.to_owned()));
                };
                // An observed client has no run to wait for: it keeps its record.
                if observed != 0 {
                    return self.client_get(name).await?.ok_or_else(|| StoreError::ClientNotFound(name.to_owned()));
                }
                let target = Target::parse(&target).ok_or_else(|| StoreError::Corrupt(target.clone()))?;
                let generation = generation + 1;
                let to = |k: ResourceKind| advance.iter().find(|(a, _)| *a == k).map_or(0, |(_, g)| *g);
                let (vm, volume, attach) = (to(ResourceKind::Vm), to(ResourceKind::Volume), to(ResourceKind::Attach));
                let status = match target { Target::Present => "provisioning", Target::Absent => "deleting" };
                if target == Target::Absent {
                    (*tx).dns_name_release(&ClientId(id.clone()), now_ms).await?;
                }
                sqlx::query(
                    "UPDATE infra SET generation = $2, status = $3, blocked_reason = NULL, blocked_detail = NULL, \
                     vm_dispatch_generation = CASE WHEN vm_dispatch_generation < $4 THEN $4 ELSE vm_dispatch_generation END, \
                     volume_dispatch_generation = CASE WHEN volume_dispatch_generation < $5 THEN $5 ELSE volume_dispatch_generation END, \
                     attach_dispatch_generation = CASE WHEN attach_dispatch_generation < $6 THEN $6 ELSE attach_dispatch_generation END, \
                     spec_generation = CASE WHEN spec_generation > 0 \
                       AND blocked_reason IN ('uncertain_update', 'provider_unavailable') \
                       THEN $2 ELSE spec_generation END, \
                     spec_updated_ms = CASE WHEN spec_generation > 0 THEN $7 ELSE spec_updated_ms END, \
                     updated_ms = $7 \
                     WHERE client_id = $1")
                    .bind(&id).bind(generation).bind(status)
                    .bind(vm).bind(volume).bind(attach).bind(now_ms)
                    // A deleted client reconciled holds its DNS name again
                    // (one being deleted gave it up above if another client
                    // holds it): refused while another client holds it.
                    .execute(&mut *tx).await.map_err(|e| crate::dns_name_race(e, dns.as_deref().unwrap_or(name)))?;
                // A fresh start for adapters that had failed.
                sqlx::query("UPDATE adapter_state SET failures = 0 WHERE client_id = $1").bind(&id).execute(&mut *tx).await?;
                let id = ClientId(id);
                let kind = match target { Target::Present => JobKind::Provision, Target::Absent => JobKind::Deprovision };
                let mut job = NewJob::for_client(&id, kind, generation, now_ms, attempts_max);
                job.payload = serde_json::json!({ crate::RECONCILE_PAYLOAD: true });
                job_insert(&mut *tx, &job).await?;
                event_by(&mut *tx, actor, Some(&id), EventKind::ReconcileRequested, &serde_json::json!({
                    "by": actor, "generation": generation,
                    "new_dispatch": advance.iter().map(|(k, g)| serde_json::json!({ "kind": k, "dispatch_generation": g })).collect::<Vec<_>>(),
                }), now_ms).await?;
                tx.commit().await?;
            });
            self.client_get(name).await?.ok_or_else(|| StoreError::ClientNotFound(name.to_owned()))
        })
        .await
    }

    /// Binds records to a new key after its ownership of every recorded
    /// resource was proven. A record whose receipts no longer match what was
    /// proven is left alone; their ids are returned. Each rebound record
    /// moves to a new generation (a run in flight becomes stale and cannot
    /// write the old binding back), leaves `credential_changed`, and gets a
    /// job for its target.
    pub async fn clients_rebind_key(
        &self,
        clients: &[Rebind],
        new: &KeyFingerprint,
        actor: &str,
        now_ms: i64,
        attempts_max: i32,
    ) -> Result<Vec<ClientId>> {
        crate::named("clients_rebind_key", async move {
            // PostgreSQL: the record's row lock first, so no run of it can
            // record a receipt between this comparison and the rebind (SQLite's
            // write lock already excludes the receipt writer).
            let lock = match &self.db {
                Db::Pg(..) => "SELECT client_id FROM infra WHERE client_id = $1 FOR UPDATE",
                Db::Sqlite(_) => "SELECT client_id FROM infra WHERE client_id = $1",
            };
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let mut changed = vec![];
                for c in clients {
                    sqlx::query(lock).bind(c.client.as_str()).execute(&mut *tx).await?;
                    let mut now: Vec<(String, Option<String>)> =
                        sqlx::query_as("SELECT operation_key, resource_id FROM dispatch_receipts WHERE client_ref = $1")
                            .bind(c.client.as_str()).fetch_all(&mut *tx).await?;
                    now.sort();
                    if now != c.proven {
                        changed.push(c.client.clone());
                        continue;
                    }
                    let row: Option<(String, i64)> = sqlx::query_as(
                        "UPDATE infra SET key_fingerprint = $2, generation = generation + 1, updated_ms = $4, \
                         status = CASE WHEN blocked_reason = 'credential_changed' \
                           THEN (CASE WHEN target = 'present' THEN 'provisioning' ELSE 'deleting' END) ELSE status END, \
                         blocked_detail = CASE WHEN blocked_reason = 'credential_changed' THEN NULL ELSE blocked_detail END, \
                         blocked_reason = CASE WHEN blocked_reason = 'credential_changed' THEN NULL ELSE blocked_reason END \
                         WHERE client_id = $1 AND key_fingerprint = $3 RETURNING target, generation")
                        .bind(c.client.as_str()).bind(new.as_str()).bind(c.old.as_str()).bind(now_ms)
                        .fetch_optional(&mut *tx).await?;
                    let Some((target, generation)) = row else { continue };
                    let kind = if target == Target::Present.as_str() { JobKind::Provision } else { JobKind::Deprovision };
                    job_insert(&mut *tx, &NewJob::for_client(&c.client, kind, generation, now_ms, attempts_max)).await?;
                    event_by(&mut *tx, actor, Some(&c.client), EventKind::KeyRebound, &serde_json::json!({
                        "by": actor, "from": c.old.short(), "to": new.short(), "generation": generation,
                    }), now_ms).await?;
                }
                tx.commit().await?;
                Ok(changed)
            })
        })
        .await
    }

    pub async fn restore_pending(&self) -> Result<Option<String>> {
        crate::named("restore_pending", async move { self.setting_get(SETTING_RESTORE_PENDING).await }).await
    }

    /// Marks the database as restored: the queue claims nothing until an
    /// inventory pass clears it.
    pub async fn restore_declare(&self, why: &str, by: &str, now_ms: i64) -> Result<()> {
        crate::named("restore_declare", async move {
            let id = uuid::Uuid::now_v7().to_string();
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                (*tx).setting_put(SETTING_RESTORE_PENDING, why).await?;
                (*tx).setting_put(SETTING_RESTORE_DECLARED, &id).await?;
                tx.commit().await?;
            });
            self.event_global(EventKind::RestoreDeclared, serde_json::json!({ "why": why }), Some(by), now_ms).await
        })
        .await
    }

    /// The pending restore, as an inventory pass sees it when it begins.
    pub async fn restore_seen(&self) -> Result<RestoreSeen> {
        crate::named("restore_seen", async move {
            Ok(RestoreSeen {
                why: self.setting_get(SETTING_RESTORE_PENDING).await?,
                id: self.setting_get(SETTING_RESTORE_DECLARED).await?,
            })
        })
        .await
    }

    /// Ends a pending restore after an inventory pass. The lineage moves to a
    /// new epoch, so hosts that remember the pre-restore high-water mark do
    /// not take the reconciled copy for another restore.
    /// Only the restore `seen` (what the pass saw pending when it began) is
    /// cleared: one declared since stands, for the next pass. On PostgreSQL
    /// the pending row is locked before the comparison, so a declaration
    /// either lands before it (and is compared) or waits for the clear.
    pub async fn restore_clear(
        &self,
        seen: &RestoreSeen,
        report: serde_json::Value,
        by: Option<&str>,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("restore_clear", async move {
            let read_pending = match &self.db {
                Db::Pg(..) => "SELECT value FROM settings WHERE key = $1 FOR UPDATE",
                Db::Sqlite(_) => "SELECT value FROM settings WHERE key = $1",
            };
            let cleared = both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                let why: Option<String> =
                    sqlx::query_scalar(read_pending).bind(SETTING_RESTORE_PENDING).fetch_optional(&mut *tx).await?;
                let id: Option<String> = sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
                    .bind(SETTING_RESTORE_DECLARED).fetch_optional(&mut *tx).await?;
                let now = RestoreSeen { why, id };
                let cleared = now.pending() && now == *seen;
                if cleared {
                    sqlx::query("DELETE FROM settings WHERE key = $1 OR key = $2")
                        .bind(SETTING_RESTORE_PENDING).bind(SETTING_RESTORE_DECLARED).execute(&mut *tx).await?;
                    (*tx).setting_put(SETTING_LINEAGE, &uuid::Uuid::new_v4().to_string()).await?;
                }
                tx.commit().await?;
                cleared
            });
            let report = match report {
                serde_json::Value::Object(mut m) => {
                    m.insert("restore_cleared".into(), cleared.into());
                    serde_json::Value::Object(m)
                }
                other => other,
            };
            self.event_global(EventKind::InventoryReconciled, report, by, now_ms).await
        })
        .await
    }

    /// Records an event of no one client; `by` names who asked, if anyone.
    pub async fn event_global(
        &self,
        kind: EventKind,
        detail: serde_json::Value,
        by: Option<&str>,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("event_global", async move {
            both!(self, p => {
                let mut c = p.acquire().await?;
                (*c).event_insert(None, kind, &detail, now_ms, by).await
            })
        })
        .await
    }

    /// The lineage id, created on first use.
    pub async fn lineage(&self) -> Result<String> {
        crate::named("lineage", async move {
            if let Some(l) = self.setting_get(SETTING_LINEAGE).await? {
                return Ok(l);
            }
            let l = uuid::Uuid::new_v4().to_string();
            both!(self, p => {
                sqlx::query("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
                    .bind(SETTING_LINEAGE).bind(&l).execute(p).await?;
            });
            Ok(self.setting_get(SETTING_LINEAGE).await?.unwrap_or(l))
        })
        .await
    }

    /// The highest event id: grows with every change, so a copy restored from
    /// an older backup has a lower one.
    /// What the event with this id was (`kind@at_ms`), to tell the history a
    /// host saw from another one that reached the same id after a restore.
    pub async fn event_stamp(&self, id: i64) -> Result<Option<String>> {
        crate::named("event_stamp", async move {
            both!(self, p => {
                let row: Option<(String, i64)> = sqlx::query_as("SELECT kind, at_ms FROM events WHERE id = $1")
                    .bind(id).fetch_optional(p).await?;
                Ok(row.map(|(kind, at)| format!("{kind}@{at}")))
            })
        })
        .await
    }

    pub async fn high_water_mark(&self) -> Result<i64> {
        crate::named("high_water_mark", async move {
            both!(self, p => Ok(sqlx::query_scalar::<_, Option<i64>>("SELECT max(id) FROM events")
                .fetch_one(p).await?.unwrap_or(0)))
        })
        .await
    }
}
