//! Dispatch receipts: the durable record of every create or attach sent.
//!
//! [`ReceiptLedger`] writes each change in its own short transaction on a
//! connection of its own, so a receipt commits independently of the job's main
//! transaction and survives its rollback, a panic or the worker's death. The
//! engine's receipt writer is its only user. Nothing here deletes a receipt or
//! replaces a recorded resource id, and the schema's triggers refuse both.

use crate::Db;
use crate::queue::Conn;
use crate::rows::{self, IdSource, RECEIPT_COLUMNS, ReceiptRow};
use crate::{Result, Store, StoreError, both};
use oduflow_model::identity::AdapterState;
use oduflow_model::*;

/// A receipt to claim before a dispatch is sent.
#[derive(Clone, Debug)]
pub struct NewReceipt {
    pub operation_key: OperationKey,
    pub client_ref: ClientId,
    pub resource_kind: ResourceKind,
    pub dispatch_generation: i64,
    pub label: Label,
    pub region: String,
    pub spec_digest: String,
    pub key_fingerprint: KeyFingerprint,
    pub claimed_ms: i64,
}

/// Independent-commit access to receipts and the audit trail.
#[derive(Clone, Debug)]
pub struct ReceiptLedger {
    store: Store,
    /// Who asked for what this ledger writes, named on every event it
    /// records (none: a run, for itself).
    pub(crate) by: Option<String>,
}

/// Opens a write transaction: `BEGIN IMMEDIATE` on SQLite so the write lock is
/// taken up front (a deferred transaction could fail on the read-to-write
/// upgrade without waiting).
macro_rules! write_tx {
    (Pg, $p:expr) => {
        $p.begin().await?
    };
    (Sqlite, $p:expr) => {
        $p.begin_with("BEGIN IMMEDIATE").await?
    };
}

macro_rules! ledger_write {
    ($store:expr, $tx:ident => $body:expr) => {
        match &($store).db {
            Db::Pg(p, _) => {
                let mut $tx = write_tx!(Pg, p);
                let r = $body;
                $tx.commit().await?;
                r
            }
            Db::Sqlite(p) => {
                let mut $tx = write_tx!(Sqlite, p);
                let r = $body;
                $tx.commit().await?;
                r
            }
        }
    };
}

pub(crate) use {ledger_write, write_tx};

/// The refusal of SQLite's `no_replace` triggers (migration 13).
const REPLACE_REFUSED: &str = "a receipt is never replaced";

/// Whether a receipt's `INSERT ... ON CONFLICT DO NOTHING` added its row.
/// SQLite's `no_replace` triggers refuse an insert over an existing receipt
/// before the conflict clause is reached: that refusal means the receipt
/// exists, as the conflict does.
pub(crate) fn inserted(rows: std::result::Result<u64, sqlx::Error>) -> Result<bool> {
    match rows {
        Ok(n) => Ok(n > 0),
        Err(sqlx::Error::Database(d)) if d.message().contains(REPLACE_REFUSED) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl ReceiptLedger {
    pub fn new(store: Store) -> Self {
        Self { store, by: None }
    }

    /// A ledger writing for `by`: an operator's action, or the API token
    /// that asked for it.
    pub fn acting_for(store: Store, by: &str) -> Self {
        Self { store, by: Some(by.to_owned()) }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Commits a new receipt. Must happen before the request is sent.
    pub async fn receipt_claim(&self, r: &NewReceipt) -> Result<()> {
        crate::named("receipt_claim", async move {
            ledger_write!(&self.store, tx => {
                let n = sqlx::query(
                    "INSERT INTO dispatch_receipts (operation_key, client_ref, resource_kind, dispatch_generation, \
                     label, region, spec_digest, key_fingerprint, claimed_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
                )
                .bind(r.operation_key.as_str())
                .bind(r.client_ref.as_str())
                .bind(r.resource_kind.as_str())
                .bind(r.dispatch_generation)
                .bind(r.label.as_str())
                .bind(&r.region)
                .bind(&r.spec_digest)
                .bind(r.key_fingerprint.as_str())
                .bind(r.claimed_ms)
                .execute(&mut *tx)
                .await
                .map(|done| done.rows_affected());
                if !inserted(n)? {
                    return Err(StoreError::ReceiptExists(r.operation_key.to_string()));
                }
                (*tx).event_insert(Some(&r.client_ref), EventKind::ReceiptClaimed, &serde_json::json!({
                    "operation_key": r.operation_key, "label": r.label, "kind": r.resource_kind,
                }), r.claimed_ms, self.by.as_deref()).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records that the request is leaving now: called after its rate
    /// slot and its run's guard, right before it is written (audit,
    /// invariant 7). Only from a "not sent" state (never marked, or marked
    /// not sent since): the one writer that moves the receipt out of it may
    /// send, so two runs can never both send on one receipt. A "not sent"
    /// mark from an earlier attempt is cleared: from here on the request may
    /// have been applied. Refused (`ReceiptNotSendable`) on a receipt that
    /// may have been sent already, has an answer, or was abandoned
    /// (`ReceiptNotFound`).
    /// Marks the receipt sent, with the key its request goes out with (a
    /// receipt claimed before a key rotation is sent with the new key).
    pub async fn receipt_mark_sent(
        &self,
        key: &OperationKey,
        client: &ClientId,
        sent_with: &KeyFingerprint,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("receipt_mark_sent", async move {
            ledger_write!(&self.store, tx => {
                let n = sqlx::query("UPDATE dispatch_receipts SET sent_ms = COALESCE(sent_ms, $2), not_sent_ms = NULL, \
                             key_fingerprint = $3 WHERE operation_key = $1 AND abandoned_by IS NULL AND resource_id IS NULL \
                             AND rejection_status IS NULL AND (sent_ms IS NULL OR not_sent_ms IS NOT NULL)")
                    .bind(key.as_str()).bind(now_ms).bind(sent_with.as_str()).execute(&mut *tx).await?.rows_affected();
                if n == 0 {
                    return Err(StoreError::ReceiptNotFound(format!(
                        "{key} (not in a not-sent state: sent already, answered or abandoned)")));
                }
                (*tx).event_insert(Some(client), EventKind::RequestSent, &serde_json::json!({
                    "operation_key": key, "evidence": "sent: recorded right before the request left",
                }), now_ms, self.by.as_deref()).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records that a send on this receipt was stopped before it left (by
    /// its rate slot's bounds, its run's guard, or a mark that could not be
    /// recorded), if the receipt is still in a "not sent" state: a receipt
    /// another run has marked sent since is left as it is. Returns the
    /// count of unsent attempts, `None` when nothing was recorded.
    pub async fn receipt_mark_stopped(&self, key: &OperationKey, reason: &str, now_ms: i64) -> Result<Option<i64>> {
        crate::named("receipt_mark_stopped", async move {
            Ok(ledger_write!(&self.store, tx => {
                let reason = format!("stopped before it left: {reason}");
                let row: Option<(String, i64)> = sqlx::query_as(
                    "UPDATE dispatch_receipts SET not_sent_ms = $2, not_sent_reason = $3, not_sent_count = not_sent_count + 1 \
                     WHERE operation_key = $1 AND resource_id IS NULL AND rejection_status IS NULL AND abandoned_by IS NULL \
                     AND (sent_ms IS NULL OR not_sent_ms IS NOT NULL) RETURNING client_ref, not_sent_count")
                    .bind(key.as_str()).bind(now_ms).bind(&reason)
                    .fetch_optional(&mut *tx).await?;
                if let Some((client, n)) = &row {
                    (*tx).event_insert(Some(&ClientId(client.clone())), EventKind::RequestNotSent, &serde_json::json!({
                        "operation_key": key, "reason": reason, "count": n,
                    }), now_ms, self.by.as_deref()).await?;
                }
                row.map(|(_, n)| n)
            }))
        })
        .await
    }

    /// Records the resource id learnt for a dispatch. Recording the same id
    /// again is harmless; a different one is refused.
    pub async fn receipt_record_id(&self, key: &OperationKey, id: &str, source: IdSource, now_ms: i64) -> Result<()> {
        crate::named("receipt_record_id", async move {
            ledger_write!(&self.store, tx => {
                let n = sqlx::query(
                    "UPDATE dispatch_receipts SET resource_id = $2, resource_id_source = $3 \
                     WHERE operation_key = $1 AND resource_id IS NULL AND abandoned_by IS NULL",
                )
                .bind(key.as_str()).bind(id).bind(source.as_str())
                .execute(&mut *tx).await?.rows_affected();
                let recorded: Option<(Option<String>, String)> = sqlx::query_as(
                    "SELECT resource_id, client_ref FROM dispatch_receipts WHERE operation_key = $1")
                    .bind(key.as_str()).fetch_optional(&mut *tx).await?;
                let Some((recorded, client)) = recorded else {
                    return Err(StoreError::ReceiptNotFound(key.to_string()));
                };
                if recorded.as_deref() != Some(id) {
                    return Err(StoreError::ReceiptIdConflict {
                        operation_key: key.to_string(),
                        recorded: recorded.unwrap_or_default(),
                        offered: id.to_owned(),
                    });
                }
                if n == 1 {
                    (*tx).event_insert(Some(&ClientId(client)), EventKind::ResourceIdRecorded, &serde_json::json!({
                        "operation_key": key, "resource_id": id, "source": source,
                    }), now_ms, self.by.as_deref()).await?;
                }
            });
            Ok(())
        })
        .await
    }

    /// Records that a send on this receipt provably never left the process:
    /// the connection could not be established. The receipt may be sent
    /// again. Returns how many sends on it could not connect.
    pub async fn receipt_mark_not_sent(&self, key: &OperationKey, reason: &str, now_ms: i64) -> Result<i64> {
        crate::named("receipt_mark_not_sent", async move {
            Ok(ledger_write!(&self.store, tx => {
                let (client, n): (String, i64) = sqlx::query_as(
                    "UPDATE dispatch_receipts SET not_sent_ms = $2, not_sent_reason = $3, not_sent_count = not_sent_count + 1 \
                     WHERE operation_key = $1 AND resource_id IS NULL AND rejection_status IS NULL \
                     RETURNING client_ref, not_sent_count")
                    .bind(key.as_str()).bind(now_ms).bind(reason)
                    .fetch_optional(&mut *tx).await?
                    .ok_or_else(|| StoreError::ReceiptNotFound(key.to_string()))?;
                (*tx).event_insert(Some(&ClientId(client)), EventKind::RequestNotSent, &serde_json::json!({
                    "operation_key": key, "reason": reason, "count": n,
                }), now_ms, self.by.as_deref()).await?;
                n
            }))
        })
        .await
    }

    /// Records a definitive rejection (400/401/403/422 answered to the
    /// creation call itself). Only code around that call may do this.
    pub async fn receipt_record_rejection(
        &self,
        key: &OperationKey,
        status: u16,
        message: &str,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("receipt_record_rejection", async move {
            ledger_write!(&self.store, tx => {
                let client: String = sqlx::query_scalar(
                    "UPDATE dispatch_receipts SET rejection_status = $2, rejection_message = $3 \
                     WHERE operation_key = $1 AND resource_id IS NULL RETURNING client_ref")
                    .bind(key.as_str()).bind(i64::from(status)).bind(message)
                    .fetch_optional(&mut *tx).await?
                    .ok_or_else(|| StoreError::ReceiptNotFound(key.to_string()))?;
                (*tx).event_insert(Some(&ClientId(client)), EventKind::DispatchRejected, &serde_json::json!({
                    "operation_key": key, "status": status, "message": message,
                }), now_ms, self.by.as_deref()).await?;
            });
            Ok(())
        })
        .await
    }

    /// Counts one observation made for a dispatch and keeps its summary.
    pub async fn receipt_observe(&self, key: &OperationKey, summary: &str) -> Result<i64> {
        crate::named("receipt_observe", async move {
            Ok(ledger_write!(&self.store, tx => {
                sqlx::query_scalar::<_, i64>(
                    "UPDATE dispatch_receipts SET observation_count = observation_count + 1, last_observation = $2 \
                     WHERE operation_key = $1 RETURNING observation_count")
                    .bind(key.as_str()).bind(summary)
                    .fetch_optional(&mut *tx).await?
                    .ok_or_else(|| StoreError::ReceiptNotFound(key.to_string()))?
            }))
        })
        .await
    }

    /// Records that a listing (the bulk view) showed the resource by its id
    /// (first time only).
    pub async fn receipt_mark_listed(&self, key: &OperationKey, now_ms: i64) -> Result<()> {
        crate::named("receipt_mark_listed", async move {
            ledger_write!(&self.store, tx => {
                sqlx::query("UPDATE dispatch_receipts SET listed_ms = $2 WHERE operation_key = $1 AND listed_ms IS NULL")
                    .bind(key.as_str()).bind(now_ms).execute(&mut *tx).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records that a GET showed the resource (first time only).
    pub async fn receipt_mark_seen(&self, key: &OperationKey, now_ms: i64) -> Result<()> {
        crate::named("receipt_mark_seen", async move {
            ledger_write!(&self.store, tx => {
                sqlx::query("UPDATE dispatch_receipts SET seen_ms = $2 WHERE operation_key = $1 AND seen_ms IS NULL")
                    .bind(key.as_str()).bind(now_ms).execute(&mut *tx).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records that a DELETE was sent (the provider took it, or did not know
    /// the id). Only meaningful once the resource was seen; kept once.
    pub async fn receipt_mark_delete_sent(&self, key: &OperationKey, now_ms: i64) -> Result<()> {
        crate::named("receipt_mark_delete_sent", async move {
            ledger_write!(&self.store, tx => {
                // Written once: the first DELETE after the resource was seen.
                sqlx::query("UPDATE dispatch_receipts SET delete_sent_ms = $2 WHERE operation_key = $1 AND seen_ms IS NOT NULL \
                             AND delete_sent_ms IS NULL")
                    .bind(key.as_str()).bind(now_ms).execute(&mut *tx).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records that a GET answered 404 after a DELETE: the resource is gone.
    pub async fn receipt_mark_deleted(&self, key: &OperationKey, now_ms: i64) -> Result<()> {
        crate::named("receipt_mark_deleted", async move {
            ledger_write!(&self.store, tx => {
                let n = sqlx::query(
                    "UPDATE dispatch_receipts SET deleted_ms = $2 WHERE operation_key = $1 AND deleted_ms IS NULL \
                     AND seen_ms IS NOT NULL AND delete_sent_ms IS NOT NULL")
                    .bind(key.as_str()).bind(now_ms).execute(&mut *tx).await?.rows_affected();
                if n == 0 {
                    let done: Option<Option<i64>> = sqlx::query_scalar("SELECT deleted_ms FROM dispatch_receipts WHERE operation_key = $1")
                        .bind(key.as_str()).fetch_optional(&mut *tx).await?;
                    if !matches!(done, Some(Some(_))) {
                        return Err(StoreError::Corrupt(format!("{key}: deletion confirmed before seen and DELETE sent")));
                    }
                }
            });
            Ok(())
        })
        .await
    }

    /// Gives a receipt a fresh polling budget (explicit reconciliation). The
    /// observations made so far stay counted.
    /// After a restore: a receipt recorded as "not sent", or claimed and
    /// never marked sent, proves nothing any more (a later attempt, made
    /// after the backup, may have gone out). It is marked sent and becomes
    /// an unknown outcome again, resolved by observation (its label), never
    /// by sending the create once more. Returns whether it was "not sent".
    pub async fn receipt_doubt_not_sent(&self, key: &OperationKey, now_ms: i64) -> Result<bool> {
        crate::named("receipt_doubt_not_sent", async move {
            Ok(ledger_write!(&self.store, tx => {
                let client: Option<String> = sqlx::query_scalar(
                    "UPDATE dispatch_receipts SET not_sent_ms = NULL, not_sent_reason = NULL, \
                     sent_ms = COALESCE(sent_ms, $2) WHERE operation_key = $1 AND (not_sent_ms IS NOT NULL \
                     OR (sent_ms IS NULL AND resource_id IS NULL AND rejection_status IS NULL AND abandoned_by IS NULL)) \
                     RETURNING client_ref")
                    .bind(key.as_str()).bind(now_ms).fetch_optional(&mut *tx).await?;
                if let Some(c) = &client {
                    (*tx).event_insert(Some(&ClientId(c.clone())), EventKind::NotSentDoubted, &serde_json::json!({
                        "operation_key": key,
                        "why": "restored copy: a later attempt may have been sent after the backup",
                    }), now_ms, self.by.as_deref()).await?;
                }
                client.is_some()
            }))
        })
        .await
    }

    pub async fn receipt_observations_restart(&self, key: &OperationKey) -> Result<()> {
        crate::named("receipt_observations_restart", async move {
            ledger_write!(&self.store, tx => {
                sqlx::query("UPDATE dispatch_receipts SET observation_base = observation_count, not_sent_count = 0 \
                             WHERE operation_key = $1")
                    .bind(key.as_str()).execute(&mut *tx).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records an operator's attestation that an uncertain dispatch is
    /// abandoned. Its label stays watched by inventory passes. A resource a
    /// listing showed (`listed_ms`) or a read by id showed (`seen_ms`) is
    /// abandoned only on the [`AbandonGround`] that allows it.
    pub async fn receipt_abandon(
        &self,
        key: &OperationKey,
        by: &str,
        reason: &str,
        ground: &AbandonGround,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("receipt_abandon", async move {
            let listed = !matches!(ground, AbandonGround::Uncertain);
            let missing = match &ground {
                AbandonGround::Missing(evidence) => Some(evidence.as_str()),
                _ => None,
            };
            ledger_write!(&self.store, tx => {
                // A seen resource only while its client is still blocked for
                // it, checked in this very statement.
                let client: String = sqlx::query_scalar(
                    "UPDATE dispatch_receipts SET abandoned_by = $2, abandoned_reason = $3 \
                     WHERE operation_key = $1 AND (resource_id IS NULL OR (seen_ms IS NULL AND (listed_ms IS NULL OR $4)) \
                       OR ($5 <> '' AND EXISTS (SELECT 1 FROM infra i WHERE i.client_id = dispatch_receipts.client_ref \
                         AND i.status = 'blocked' AND i.blocked_reason = 'known_resource_missing' \
                         AND substr(i.blocked_detail, 1, length($5)) = $5))) \
                     AND abandoned_by IS NULL AND rejection_status IS NULL RETURNING client_ref")
                    .bind(key.as_str()).bind(by).bind(reason).bind(listed).bind(missing.unwrap_or_default())
                    .fetch_optional(&mut *tx).await?
                    .ok_or_else(|| StoreError::ReceiptNotFound(format!("{key} (uncertain: no id, or one never seen nor listed; not abandoned)")))?;
                (*tx).event_insert(Some(&ClientId(client)), EventKind::DispatchAbandoned, &serde_json::json!({
                    "operation_key": key, "by": by, "reason": reason,
                }), now_ms, Some(by)).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records where an adapter's identity stands (independent commit),
    /// if the ownership's version is still `expected` (what the run last
    /// read or wrote; 0: nothing recorded yet); with `facts`, the facts it
    /// was ensured with too. Whether it was recorded: a run that read the
    /// ownership before another run wrote it is stale, and its `removed`
    /// or `ensured` would hide what that run owns. `removed` also advances
    /// the version: a run that read the ownership before the removal (its
    /// client deleted meanwhile) can no longer record a create, so it never
    /// sends one.
    #[allow(clippy::too_many_arguments)]
    pub async fn adapter_set(
        &self,
        client: &ClientId,
        adapter: &str,
        state: AdapterState,
        detail: &str,
        facts: Option<&serde_json::Value>,
        expected: i64,
        now_ms: i64,
    ) -> Result<bool> {
        crate::named("adapter_set", async move {
            let facts = facts.map(serde_json::Value::to_string);
            Ok(ledger_write!(&self.store, tx => {
                let v: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO adapter_state (client_id, adapter, state, detail, failures, updated_ms, facts) \
                     VALUES ($1, $2, $3, $4, 0, $5, coalesce($6, '{}')) ON CONFLICT (client_id, adapter) \
                     DO UPDATE SET state = excluded.state, detail = excluded.detail, failures = 0, \
                     updated_ms = excluded.updated_ms, facts = coalesce($6, adapter_state.facts), \
                     owned_version = adapter_state.owned_version + CASE WHEN $3 = 'removed' THEN 1 ELSE 0 END \
                     WHERE adapter_state.owned_version = $7 RETURNING owned_version")
                    .bind(client.as_str()).bind(adapter).bind(state.as_str()).bind(detail).bind(now_ms).bind(&facts)
                    .bind(expected)
                    .fetch_optional(&mut *tx).await?;
                if v.is_none() {
                    return Ok(false);
                }
                (*tx).event_insert(Some(client), EventKind::AdapterState, &serde_json::json!({
                    "adapter": adapter, "state": state, "detail": detail,
                }), now_ms, self.by.as_deref()).await?;
                true
            }))
        })
        .await
    }

    /// After a restore, an identity's recorded state proves nothing any more
    /// for a client not deleted:
    /// - `removed`: a run after the backup may have recorded ownership, and
    ///   made records, since lost with it. It is `removing` again, so the
    ///   next removal looks for what carries the client's trace (the DNS
    ///   owner marker) instead of skipping it, and the next ensure
    ///   recorrects it. Its facts (the removed identity's: an older DNS
    ///   name, say) are dropped, so the removal looks where the client's
    ///   spec, which that run made them from, says.
    /// - `ensured`: a run after the backup may have deleted what it owns
    ///   (the client deleted), or moved it (given another DNS name). It is
    ///   `ensuring` again, so the next run ensures it and reads it back
    ///   before the client is ready. Not one ensured before ownership was
    ///   recorded (`owned` is `{}`): its adapter owns nothing to read back,
    ///   and takes its unmarked records for foreign.
    ///
    /// The version moves on: a write from before the restore is stale.
    /// Every adapter's (command adapters' ensures and removals are
    /// idempotent); one no longer configured then blocks the client's
    /// deletion `adapter_unconfigured`, as it would for any identity it may
    /// still have. Returns how many.
    pub async fn adapter_doubt_restored(&self, now_ms: i64) -> Result<u64> {
        crate::named("adapter_doubt_restored", async move {
            let doubts = [
                (
                    AdapterState::Removing,
                    "restored copy: the identity may have been made again after the backup",
                    "UPDATE adapter_state SET state = 'removing', facts = '{}', detail = $2, updated_ms = $1, \
                     owned_version = owned_version + 1 WHERE state = 'removed' AND client_id IN \
                     (SELECT client_id FROM infra WHERE status <> 'deleted') RETURNING client_id, adapter",
                ),
                (
                    AdapterState::Ensuring,
                    "restored copy: the identity may have been removed after the backup",
                    "UPDATE adapter_state SET state = 'ensuring', detail = $2, updated_ms = $1, \
                     owned_version = owned_version + 1 WHERE state = 'ensured' AND owned <> '{}' AND client_id IN \
                     (SELECT client_id FROM infra WHERE status <> 'deleted') RETURNING client_id, adapter",
                ),
            ];
            Ok(ledger_write!(&self.store, tx => {
                let mut n = 0;
                for (state, detail, sql) in doubts {
                    let rows: Vec<(String, String)> =
                        sqlx::query_as(sql).bind(now_ms).bind(detail).fetch_all(&mut *tx).await?;
                    for (client, adapter) in &rows {
                        (*tx).event_insert(Some(&ClientId(client.clone())), EventKind::AdapterState, &serde_json::json!({
                            "adapter": adapter, "state": state, "detail": detail,
                        }), now_ms, self.by.as_deref()).await?;
                    }
                    n += rows.len() as u64;
                }
                n
            }))
        })
        .await
    }

    /// Replaces what an adapter records it owns for a client, if
    /// `owned_version` is still `expected` (0: nothing recorded yet).
    /// Returns the new version, or `None` when another run recorded since
    /// (independent commit; the ownership's own event is its audit). An
    /// identity recorded `removed` is `ensuring` again: what is owned now
    /// is removed before its client is reported deleted.
    pub async fn adapter_owned_put(
        &self,
        client: &ClientId,
        adapter: &str,
        owned: &serde_json::Value,
        expected: i64,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        crate::named("adapter_owned_put", async move {
            let text = owned.to_string();
            Ok(ledger_write!(&self.store, tx => {
                let v: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO adapter_state (client_id, adapter, state, detail, failures, updated_ms, owned, owned_version) \
                     VALUES ($1, $2, 'ensuring', '', 0, $3, $4, 1) ON CONFLICT (client_id, adapter) \
                     DO UPDATE SET owned = excluded.owned, owned_version = adapter_state.owned_version + 1, \
                     state = CASE WHEN adapter_state.state = 'removed' THEN 'ensuring' ELSE adapter_state.state END, \
                     updated_ms = excluded.updated_ms WHERE adapter_state.owned_version = $5 \
                     RETURNING owned_version")
                    .bind(client.as_str()).bind(adapter).bind(now_ms).bind(&text).bind(expected)
                    .fetch_optional(&mut *tx).await?;
                // A first record with a stale expectation (another run
                // inserted the row meanwhile, or the row is gone while the
                // writer read one) is refused the same way: rolled back.
                if v != Some(expected + 1) {
                    return Ok(None);
                }
                {
                    (*tx).event_insert(Some(client), EventKind::AdapterOwned, &serde_json::json!({
                        "adapter": adapter, "owned": owned,
                    }), now_ms, self.by.as_deref()).await?;
                }
                v
            }))
        })
        .await
    }

    /// Counts a failed adapter step and records the state it failed in
    /// (`ensuring`, `removing`): an identity whose removal failed is not
    /// `removed`, one whose ensure failed is not `ensured`. Returns the
    /// failures so far.
    pub async fn adapter_fail(
        &self,
        client: &ClientId,
        adapter: &str,
        state: AdapterState,
        detail: &str,
        now_ms: i64,
    ) -> Result<i64> {
        crate::named("adapter_fail", async move {
            Ok(ledger_write!(&self.store, tx => {
                let n: i64 = sqlx::query_scalar(
                    "INSERT INTO adapter_state (client_id, adapter, state, detail, failures, updated_ms) \
                     VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (client_id, adapter) \
                     DO UPDATE SET state = excluded.state, detail = excluded.detail, failures = adapter_state.failures + 1, \
                     updated_ms = excluded.updated_ms \
                     RETURNING failures")
                    .bind(client.as_str()).bind(adapter).bind(state.as_str()).bind(detail).bind(now_ms)
                    .fetch_one(&mut *tx).await?;
                (*tx).event_insert(Some(client), EventKind::AdapterFailed, &serde_json::json!({
                    "adapter": adapter, "error": detail, "failures": n,
                }), now_ms, self.by.as_deref()).await?;
                n
            }))
        })
        .await
    }

    /// An audit event that must survive a rollback of the job (a provider
    /// request and its answer, for example).
    pub async fn event_append(
        &self,
        client: Option<&ClientId>,
        kind: EventKind,
        detail: &serde_json::Value,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("event_append", async move {
            ledger_write!(&self.store, tx => {
                (*tx).event_insert(client, kind, detail, now_ms, self.by.as_deref()).await?;
            });
            Ok(())
        })
        .await
    }
}

/// Where one adapter's identity stands for one client.
#[derive(Clone, Debug, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdapterStateRow {
    pub adapter: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub state: AdapterState,
    pub detail: String,
    pub failures: i64,
    pub updated_ms: i64,
    /// What the adapter records it owns (`{}`: nothing yet).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub owned: serde_json::Value,
    pub owned_version: i64,
    /// The facts the identity was last ensured with (`{}`: never).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub facts: serde_json::Value,
}

/// adapter, state, detail, failures, updated_ms, owned, owned_version, facts.
type AdapterStateTuple = (String, String, String, i64, i64, String, i64, String);

impl Store {
    pub async fn adapter_states(&self, client: &ClientId) -> Result<Vec<AdapterStateRow>> {
        crate::named("adapter_states", async move {
            both!(self, p => {
                let rows: Vec<AdapterStateTuple> = sqlx::query_as(
                    "SELECT adapter, state, detail, failures, updated_ms, owned, owned_version, facts \
                     FROM adapter_state WHERE client_id = $1 ORDER BY adapter")
                    .bind(client.as_str()).fetch_all(p).await?;
                rows.into_iter().map(|(adapter, state, detail, failures, updated_ms, owned, owned_version, facts)| {
                    let json = |what: &str, t: &str| serde_json::from_str(t)
                        .map_err(|e| StoreError::Corrupt(format!("adapter_state {adapter} {what}: {e}")));
                    let state = AdapterState::parse(&state)
                        .ok_or_else(|| StoreError::Corrupt(format!("adapter_state {adapter} state {state:?}")))?;
                    Ok(AdapterStateRow {
                        owned: json("owned", &owned)?, facts: json("facts", &facts)?,
                        adapter, state, detail, failures, updated_ms, owned_version,
                    })
                }).collect()
            })
        })
        .await
    }

    /// The clients whose `adapter` ownership record names `id` (as its
    /// `"id"` or a record's): a record one client owns is adopted by no other.
    pub async fn adapter_owners_of(&self, adapter: &str, id: &str) -> Result<Vec<ClientId>> {
        crate::named("adapter_owners_of", async move {
            let needle = format!("%{}%", serde_json::json!({ "id": id }).to_string().trim_matches(['{', '}']));
            both!(self, p => {
                let rows: Vec<String> = sqlx::query_scalar(
                    "SELECT client_id FROM adapter_state WHERE adapter = $1 AND owned LIKE $2 ORDER BY client_id")
                    .bind(adapter).bind(&needle).fetch_all(p).await?;
                Ok(rows.into_iter().map(ClientId).collect())
            })
        })
        .await
    }

    pub async fn receipts_for_client(&self, client: &ClientId) -> Result<Vec<ReceiptRow>> {
        crate::named("receipts_for_client", async move {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {RECEIPT_COLUMNS} FROM dispatch_receipts WHERE client_ref = $1 ORDER BY claimed_ms, operation_key"
            ));
            both!(self, p => {
                let rows = sqlx::query(sql).bind(client.as_str()).fetch_all(p).await?;
                rows.iter().map(rows::receipt_from_row).collect()
            })
        })
        .await
    }

    pub async fn receipt_get(&self, key: &OperationKey) -> Result<Option<ReceiptRow>> {
        crate::named("receipt_get", async move {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {RECEIPT_COLUMNS} FROM dispatch_receipts WHERE operation_key = $1"
            ));
            both!(self, p => {
                let row = sqlx::query(sql).bind(key.as_str()).fetch_optional(p).await?;
                row.as_ref().map(rows::receipt_from_row).transpose()
            })
        })
        .await
    }

    pub async fn receipts_all(&self) -> Result<Vec<ReceiptRow>> {
        crate::named("receipts_all", async move {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {RECEIPT_COLUMNS} FROM dispatch_receipts ORDER BY claimed_ms, operation_key"
            ));
            both!(self, p => {
                let rows = sqlx::query(sql).fetch_all(p).await?;
                rows.iter().map(rows::receipt_from_row).collect()
            })
        })
        .await
    }
}

/// On what ground an operator abandons a dispatch that has an id
/// (without one, any dispatch not refused may be abandoned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbandonGround {
    /// Its id was never seen by id nor listed: as uncertain as no id.
    Uncertain,
    /// A listing showed it, its client is being deleted, and GET answers
    /// 404.
    ListedGone,
    /// Seen, then answering 404 until its client blocked
    /// `known_resource_missing` for it: given up to be built again. The
    /// block's evidence starts with this text (`vm ID answers 404`), and
    /// must still when the abandon is written.
    Missing(String),
}
