//! Changes to a running client: `client update`, and the change
//! receipts the engine claims before each PATCH.
//!
//! An update commits the new spec, bumps the generation (so a run in flight
//! becomes a no-op at its finish) and enqueues the job in one transaction.
//! A change receipt is keyed by client, resource and spec generation: it is
//! committed before its PATCH leaves, on the receipt ledger's own
//! connection, so a crash or a rollback cannot lose it, and nothing here
//! deletes one or rewrites what it records (the schema's triggers refuse).

use crate::queue::Conn;
use crate::receipts::{ledger_write, write_tx};
use crate::rows::{ClientRow, RowExt};
use crate::{Db, ReceiptLedger, ReceiptRow, Result, Store, StoreError, both, queue};
use oduflow_model::decide::ChangeFacts;
use oduflow_model::ledger::{Effect, IdSource};
use oduflow_model::update::SpecUpdate;
use oduflow_model::*;
use serde::Serialize;

/// A change receipt to claim before its PATCH is sent.
#[derive(Clone, Debug)]
pub struct NewChange {
    pub client_ref: ClientId,
    pub resource_kind: ResourceKind,
    pub resource_id: String,
    pub spec_generation: i64,
    /// The PATCH's content (JSON of the engine's change).
    pub change: serde_json::Value,
    pub key_fingerprint: KeyFingerprint,
    pub claimed_ms: i64,
}

impl NewChange {
    /// The receipt's key: one per client, resource and spec generation.
    pub fn operation_key(&self) -> String {
        change_key(&self.client_ref, self.resource_kind, self.spec_generation, &self.resource_id)
    }
}

/// The key of the change receipt for this resource at this spec generation.
pub fn change_key(client: &ClientId, kind: ResourceKind, spec_generation: i64, resource_id: &str) -> String {
    format!("change:{client}:{}:{spec_generation}:{resource_id}", kind.as_str())
}

/// One change receipt, as `client show` and the engine read it. What it
/// changes is public; how far it has come is read through
/// [`ChangeRow::effect`] and the accessors, never from its columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChangeRow {
    pub operation_key: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub resource_kind: ResourceKind,
    pub resource_id: String,
    pub spec_generation: i64,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub change: serde_json::Value,
    claimed_ms: i64,
    sent_ms: Option<i64>,
    not_sent_ms: Option<i64>,
    not_sent_count: i64,
    not_sent_reason: Option<String>,
    /// `accepted`, `unknown: <why>`, `nothing_to_change` or `rejected`.
    outcome: Option<String>,
    rejection_status: Option<i64>,
    rejection_message: Option<String>,
    observation_count: i64,
    last_observation: Option<String>,
    confirmed_ms: Option<i64>,
    /// When the inventory pass after a restore found it (open or
    /// confirmed): a resize shown since is not proven its own.
    restored_ms: Option<i64>,
}

impl ChangeRow {
    /// Where the change stands: the one reading of the columns that record
    /// it. A confirmation outranks everything; then a refusal, a send that
    /// provably never left, a claim never marked sent.
    pub fn effect(&self) -> Effect {
        if self.confirmed_ms.is_some() {
            Effect::Known {
                id: self.resource_id.clone(),
                source: Some(IdSource::ConfirmedByRead),
                observations: self.observation_count,
            }
        } else if let (Some(status), Some(message)) = (self.rejection_status, &self.rejection_message) {
            Effect::Rejected { status: u16::try_from(status).unwrap_or(0), message: message.clone() }
        } else if self.not_sent_ms.is_some() {
            Effect::NotSent { count: self.not_sent_count, reason: self.not_sent_reason.clone().unwrap_or_default() }
        } else if self.sent_ms.is_none() {
            Effect::Unmarked { not_sent: self.not_sent_count, observations: self.observation_count }
        } else {
            // Sent, or about to be: only reads tell.
            Effect::Unknown { observations: self.observation_count }
        }
    }

    /// When its PATCH was marked sent, right before it left.
    pub fn sent_at(&self) -> Option<i64> {
        self.sent_ms
    }

    /// When a read showed the change made.
    pub fn confirmed_at(&self) -> Option<i64> {
        self.confirmed_ms
    }

    /// Sends of it that could not connect, every one.
    pub fn not_sent_count(&self) -> i64 {
        self.not_sent_count
    }

    /// What the decision needs to know of it.
    pub fn facts(&self) -> ChangeFacts {
        match ChangeFacts::of(Some(self.effect())) {
            ChangeFacts::Confirmed if self.restored_ms.is_some() => ChangeFacts::ConfirmedBeforeRestore,
            facts => facts,
        }
    }

    /// One line for `client show`.
    pub fn summary(&self) -> String {
        let state = match self.facts() {
            ChangeFacts::Confirmed => "confirmed by a read".to_owned(),
            ChangeFacts::ConfirmedBeforeRestore => "confirmed by a read, before a restore".to_owned(),
            ChangeFacts::Rejected { status, message } => format!("rejected with {status}: {message}"),
            ChangeFacts::NotSent { count, reason } => format!("not sent ({count} times): {reason}"),
            ChangeFacts::Sent { observations } => format!(
                "{}; {observations} read(s) since",
                self.outcome.as_deref().unwrap_or("claimed, outcome unknown")
            ),
            ChangeFacts::None => String::new(),
        };
        format!(
            "{} {} at spec generation {}: {} — {state}",
            self.resource_kind.as_str(),
            self.resource_id,
            self.spec_generation,
            self.change
        )
    }
}

const CHANGE_COLUMNS: &str = "operation_key, resource_kind, resource_id, spec_generation, change, claimed_ms, \
    sent_ms, not_sent_ms, not_sent_count, not_sent_reason, outcome, rejection_status, rejection_message, \
    observation_count, last_observation, confirmed_ms, restored_ms";

fn change_from_row(r: &impl RowExt) -> Result<ChangeRow> {
    let kind = r.text("resource_kind")?;
    let change = r.text("change")?;
    Ok(ChangeRow {
        operation_key: r.text("operation_key")?,
        resource_kind: ResourceKind::parse(&kind).ok_or_else(|| StoreError::Corrupt(format!("kind {kind:?}")))?,
        resource_id: r.text("resource_id")?,
        spec_generation: r.int("spec_generation")?,
        change: serde_json::from_str(&change).map_err(|e| StoreError::Corrupt(format!("change {e}")))?,
        claimed_ms: r.int("claimed_ms")?,
        sent_ms: r.int_opt("sent_ms")?,
        not_sent_ms: r.int_opt("not_sent_ms")?,
        not_sent_count: r.int("not_sent_count")?,
        not_sent_reason: r.text_opt("not_sent_reason")?,
        outcome: r.text_opt("outcome")?,
        rejection_status: r.int_opt("rejection_status")?,
        rejection_message: r.text_opt("rejection_message")?,
        observation_count: r.int("observation_count")?,
        last_observation: r.text_opt("last_observation")?,
        confirmed_ms: r.int_opt("confirmed_ms")?,
        restored_ms: r.int_opt("restored_ms")?,
    })
}

/// How a change's PATCH was answered, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeAnswer {
    Accepted,
    /// The outcome is unknown; only reads will tell.
    Unknown(String),
    /// "Nothing to change": whatever a read showed before, it now shows the
    /// change (or something else did it); read again.
    NothingToChange,
    Rejected {
        status: u16,
        message: String,
    },
    /// Provably never left: it may be sent again on this receipt.
    NotSent(String),
    /// Stopped before it was marked sent (its rate slot's bounds, the run's
    /// guard, a mark that failed): recorded as not sent only while no other
    /// run has marked the change sent since.
    Stopped(String),
}

/// The size the client's current volume had at its last read, if a run
/// recorded one for that very volume (an open receipt names its id).
fn volume_size_read(client: &ClientRow, receipts: &[ReceiptRow]) -> Option<i64> {
    let read = client.infra.progress.volume_size.as_ref()?;
    let current = receipts
        .iter()
        .any(|r| r.resource_kind == ResourceKind::Volume && r.is_open() && r.id() == Some(read.id.as_str()));
    current.then_some(read.gb)
}

/// The blocks a `client update` lifts: the new spec is their fix.
fn update_resolves(r: BlockedReason) -> bool {
    matches!(
        r,
        BlockedReason::UpdateRejected
            | BlockedReason::UncertainUpdate
            | BlockedReason::ConfigMismatch
            | BlockedReason::NotReady
            // Another DNS name: checked again on the next run.
            | BlockedReason::DnsRecordForeign
            // Nothing was created: the next run's preflight checks the
            // corrected spec before any create.
            | BlockedReason::PreflightFailed
    )
}

/// An update's new spec, as the record read before it is locked gives it.
struct Planned {
    spec: ClientSpec,
    /// Something may exist at the provider: an open receipt of a VM or a
    /// volume (a recorded id, or an outcome not yet known).
    created: bool,
    /// The update as if something existed: what the check allowed because
    /// nothing existed yet must still hold once the record is locked (a run
    /// may have claimed a create meanwhile).
    in_place: std::result::Result<ClientSpec, oduflow_model::update::UpdateRefused>,
}

/// What an update would record; see [`Store::client_update_preview`].
#[derive(Clone, Debug)]
pub struct UpdatePreview {
    pub client: ClientRow,
    pub spec: ClientSpec,
    pub created: bool,
    pub blocked_stays: bool,
}

impl Store {
    /// The new spec `u` makes of `client`'s, refused as
    /// [`SpecUpdate::apply_to`] refuses it.
    async fn update_planned(&self, client: &ClientRow, u: &SpecUpdate) -> Result<Planned> {
        let receipts = self.receipts_for_client(&client.id).await?;
        let created = receipts.iter().any(|r| r.resource_kind != ResourceKind::Attach && r.is_open());
        // After a refused grow the spec is above the volume's real size:
        // going back to that size (its last read) is no shrink.
        let has = volume_size_read(client, &receipts);
        // Back to what the spec says, while the server differs from it
        // (`config_mismatch`: changed behind oduflow's back), or after
        // Vultr refused the change (`update_rejected`, the cause fixed
        // since): the update is the operator's word that the spec
        // stands, so it is sent, once, on a new change receipt.
        let stands =
            matches!(client.infra.blocked_reason, Some(BlockedReason::ConfigMismatch | BlockedReason::UpdateRejected));
        let spec = match u.apply_to(&client.infra.spec, created, has) {
            Err(oduflow_model::update::UpdateRefused::Unchanged) if stands => client.infra.spec.clone(),
            other => other?,
        };
        Ok(Planned { spec, created, in_place: u.apply_to(&client.infra.spec, true, has) })
    }
}

impl Store {
    /// Changes a client's spec: the new spec, a new generation and the job,
    /// in one transaction. Refused, changing nothing, when the client does
    /// not exist, is being deleted, or the change cannot be made in place
    /// (see [`SpecUpdate::apply`]). A client blocked on a change, or
    /// `config_mismatch` or `not_ready`, is unblocked: the update is its fix.
    /// Any other block stays: the operator's `reconcile` (with
    /// `--new-dispatch` after a rejected create) sends the corrected spec.
    pub async fn client_update(
        &self,
        name: &str,
        u: &SpecUpdate,
        by: &str,
        now_ms: i64,
        attempts_max: i32,
    ) -> Result<ClientRow> {
        crate::named("client_update", async move {
            let (client, Planned { spec, created, in_place }) = self.update_checked(name, u).await?;
            let crate::SpecColumns { os_id, ref image, ref server, ref dns, .. } =
                crate::SpecColumns::new(&client.name, &spec)?;
            let dns = dns.as_str();
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                // The generation read before must still be current: a flip
                // or another update in between is answered as a conflict.
                let generation = client.infra.generation + 1;
                // A block the update itself resolves (a change refused or
                // not seen, a server that differs from the spec) is lifted;
                // any other stays until `reconcile`.
                let blocked = client.infra.status == ClientStatus::Blocked
                    && !client.infra.blocked_reason.is_some_and(update_resolves);
                crate::dns_name_free!(tx, dns, client.id.as_str());
                let n = sqlx::query(
                    "UPDATE infra SET region = $3, plan = $4, os_id = $5, volume_gb = $6, image = $7, server = $8, \
                     dns_name = $13, dns_key = $14, generation = $2, spec_generation = $2, spec_updated_ms = $9, updated_ms = $9, \
                     status = CASE WHEN $10 THEN status ELSE 'provisioning' END, \
                     blocked_reason = CASE WHEN $10 THEN blocked_reason END, \
                     blocked_detail = CASE WHEN $10 THEN blocked_detail END \
                     WHERE client_id = $1 AND generation = $2 - 1 AND target = 'present' \
                     AND status = $11 AND coalesce(blocked_reason, '') = $12")
                    .bind(client.id.as_str()).bind(generation).bind(&spec.region).bind(&spec.plan)
                    .bind(os_id).bind(spec.volume_gb).bind(image).bind(server)
                    .bind(now_ms).bind(blocked)
                    // A run's finish writes the status without a new
                    // generation: the status read above must still hold, or
                    // a block this update must not lift could be lifted.
                    .bind(client.infra.status.as_str())
                    .bind(client.infra.blocked_reason.map_or("", |r| r.as_str()))
                    .bind(&spec.dns_name).bind(dns)
                    .execute(&mut *tx).await.map_err(|e| crate::dns_name_race(e, dns))?.rows_affected();
                if n == 0 {
                    return Err(StoreError::ClientMoved(name.to_owned()));
                }
                if !created
                    && let Err(refused) = &in_place
                    && *refused != oduflow_model::update::UpdateRefused::Unchanged
                {
                    let open: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM dispatch_receipts WHERE client_ref = $1 AND resource_kind <> 'attach' \
                         AND deleted_ms IS NULL AND rejection_status IS NULL AND abandoned_by IS NULL \
                         AND not_sent_ms IS NULL")
                        .bind(client.id.as_str()).fetch_one(&mut *tx).await?;
                    if open > 0 {
                        return Err(StoreError::UpdateRefused(refused.clone()));
                    }
                }
                if !blocked {
                    let job = queue::NewJob::for_client(&client.id, JobKind::Provision, generation, now_ms, attempts_max);
                    queue::job_insert(&mut *tx, &job).await?;
                }
                queue::event_by(&mut *tx, by, Some(&client.id), EventKind::ClientUpdateRequested,
                    &serde_json::json!({ "generation": generation, "update": u, "blocked": blocked }), now_ms).await?;
                tx.commit().await?;
            });
            self.client_get(name).await?.ok_or_else(|| StoreError::ClientNotFound(name.to_owned()))
        })
        .await
    }

    /// The client and what `u` makes of its spec, refused as
    /// `client_update` refuses it before its transaction.
    async fn update_checked(&self, name: &str, u: &SpecUpdate) -> Result<(ClientRow, Planned)> {
        let client = self.client_get(name).await?.ok_or_else(|| StoreError::ClientNotFound(name.to_owned()))?;
        if client.infra.target == Target::Absent {
            return Err(StoreError::ClientAbsent(name.to_owned()));
        }
        let planned = self.update_planned(&client, u).await?;
        Ok((client, planned))
    }

    /// What `client_update` would record (a dry run): the client as it is,
    /// the spec after the update, whether the client may own resources
    /// already (so each change is a PATCH), and whether a block stays.
    /// Refused as `client_update` refuses, a DNS name another client holds
    /// included; nothing is written.
    pub async fn client_update_preview(&self, name: &str, u: &SpecUpdate) -> Result<UpdatePreview> {
        crate::named("client_update_preview", async move {
            let (client, Planned { spec, created, .. }) = self.update_checked(name, u).await?;
            let cols = crate::SpecColumns::new(&client.name, &spec)?;
            let dns = cols.dns.as_str();
            both!(self, p => {
                let mut tx = p.begin().await?;
                crate::dns_name_free!(tx, dns, client.id.as_str());
                tx.rollback().await?;
            });
            let blocked_stays = client.infra.status == ClientStatus::Blocked
                && !client.infra.blocked_reason.is_some_and(update_resolves);
            Ok(UpdatePreview { client, spec, created, blocked_stays })
        })
        .await
    }

    /// Every change receipt of a client, oldest first.
    pub async fn changes_for_client(&self, client: &ClientId) -> Result<Vec<ChangeRow>> {
        crate::named("changes_for_client", async move {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {CHANGE_COLUMNS} FROM change_receipts WHERE client_ref = $1 ORDER BY claimed_ms, operation_key"
            ));
            both!(self, p => {
                let rows = sqlx::query(sql).bind(client.as_str()).fetch_all(p).await?;
                rows.iter().map(change_from_row).collect()
            })
        })
        .await
    }
}

impl ReceiptLedger {
    /// Commits a change receipt. Must happen before its PATCH is sent; a
    /// receipt that exists already is refused (`ReceiptExists`).
    pub async fn change_claim(&self, c: &NewChange) -> Result<String> {
        crate::named("change_claim", async move {
            let key = c.operation_key();
            ledger_write!(self.store(), tx => {
                let n = sqlx::query(
                    "INSERT INTO change_receipts (operation_key, client_ref, resource_kind, resource_id, \
                     spec_generation, change, key_fingerprint, claimed_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING")
                    .bind(&key).bind(c.client_ref.as_str()).bind(c.resource_kind.as_str()).bind(&c.resource_id)
                    .bind(c.spec_generation).bind(c.change.to_string()).bind(c.key_fingerprint.as_str())
                    .bind(c.claimed_ms)
                    .execute(&mut *tx).await.map(|done| done.rows_affected());
                if !crate::receipts::inserted(n)? {
                    return Err(StoreError::ReceiptExists(key));
                }
                (*tx).event_insert(Some(&c.client_ref), EventKind::ChangeClaimed, &serde_json::json!({
                    "operation_key": key, "kind": c.resource_kind, "id": c.resource_id, "change": c.change,
                }), c.claimed_ms, self.by.as_deref()).await?;
            });
            Ok(key)
        })
        .await
    }

    /// Records that the PATCH is leaving now, after its rate slot and its
    /// run's guard (cleared "not sent" marks: from here on it may have been
    /// applied). Only from a "not sent" state, so one run alone sends it;
    /// refused (`ReceiptNotFound`) once it may have been sent, or answered.
    /// Marks the change sent, with the key it goes out with.
    pub async fn change_mark_sent(
        &self,
        key: &str,
        client: &ClientId,
        sent_with: &KeyFingerprint,
        now_ms: i64,
    ) -> Result<()> {
        crate::named("change_mark_sent", async move {
            ledger_write!(self.store(), tx => {
                let n = sqlx::query("UPDATE change_receipts SET sent_ms = COALESCE(sent_ms, $2), not_sent_ms = NULL, \
                     key_fingerprint = $3 WHERE operation_key = $1 AND confirmed_ms IS NULL AND rejection_status IS NULL \
                     AND (sent_ms IS NULL OR not_sent_ms IS NOT NULL)")
                    .bind(key).bind(now_ms).bind(sent_with.as_str()).execute(&mut *tx).await?.rows_affected();
                if n == 0 {
                    return Err(StoreError::ReceiptNotFound(format!(
                        "{key} (not in a not-sent state: sent already, or answered)")));
                }
                (*tx).event_insert(Some(client), EventKind::RequestSent, &serde_json::json!({
                    "operation_key": key, "evidence": "sent: recorded right before the request left",
                }), now_ms, self.by.as_deref()).await?;
            });
            Ok(())
        })
        .await
    }

    /// Records how the PATCH was answered.
    pub async fn change_record(&self, key: &str, client: &ClientId, answer: &ChangeAnswer, now_ms: i64) -> Result<()> {
        crate::named("change_record", async move {
            let (outcome, status, message, not_sent) = match answer {
                ChangeAnswer::Accepted => ("accepted".to_owned(), None, None, None),
                ChangeAnswer::Unknown(why) => (format!("unknown: {why}"), None, None, None),
                ChangeAnswer::NothingToChange => ("nothing_to_change".to_owned(), None, None, None),
                ChangeAnswer::Rejected { status, message } => {
                    ("rejected".to_owned(), Some(i64::from(*status)), Some(message.clone()), None)
                }
                ChangeAnswer::NotSent(why) => ("not_sent".to_owned(), None, None, Some(why.clone())),
                ChangeAnswer::Stopped(why) => {
                    ("stopped".to_owned(), None, None, Some(format!("stopped before it left: {why}")))
                }
            };
            // A stop is this run's only while nobody has marked it sent since.
            let stopped = matches!(answer, ChangeAnswer::Stopped(_));
            ledger_write!(self.store(), tx => {
                let n = match &not_sent {
                    Some(why) => sqlx::query(
                        "UPDATE change_receipts SET not_sent_ms = $2, not_sent_reason = $3, \
                         not_sent_count = not_sent_count + 1 WHERE operation_key = $1 AND rejection_status IS NULL \
                         AND ($4 = 0 OR (confirmed_ms IS NULL AND (sent_ms IS NULL OR not_sent_ms IS NOT NULL)))")
                        .bind(key).bind(now_ms).bind(why).bind(i64::from(stopped))
                        .execute(&mut *tx).await?.rows_affected(),
                    None => sqlx::query(
                        "UPDATE change_receipts SET outcome = $2, rejection_status = $3, rejection_message = $4 \
                         WHERE operation_key = $1 AND rejection_status IS NULL")
                        .bind(key).bind(&outcome).bind(status).bind(&message)
                        .execute(&mut *tx).await?.rows_affected(),
                };
                if n == 0 && stopped {
                    return Ok(());
                }
                if n == 0 {
                    return Err(StoreError::ReceiptNotFound(key.to_owned()));
                }
                (*tx).event_insert(Some(client), EventKind::ChangeAnswered, &serde_json::json!({
                    "operation_key": key, "outcome": outcome, "status": status, "message": message, "reason": not_sent,
                }), now_ms, self.by.as_deref()).await?;
            });
            Ok(())
        })
        .await
    }

    /// After a restore: the copy cannot prove any open change "not sent"
    /// any more (a send after the backup may have gone out), so every change
    /// receipt neither confirmed nor rejected counts as sent from now on:
    /// only reads resolve it. Every one is marked as found by the pass
    /// after a restore (`restored_ms`): once confirmed, a resize under way
    /// since is not its own. Returns how many open ones were doubted.
    pub async fn change_doubt_open(&self, now_ms: i64) -> Result<u64> {
        crate::named("change_doubt_open", async move {
            Ok(ledger_write!(self.store(), tx => {
                let n = sqlx::query(
                    "UPDATE change_receipts SET not_sent_ms = NULL, sent_ms = COALESCE(sent_ms, $1) \
                     WHERE confirmed_ms IS NULL AND rejection_status IS NULL \
                     AND (not_sent_ms IS NOT NULL OR sent_ms IS NULL)")
                    .bind(now_ms).execute(&mut *tx).await?.rows_affected();
                let marked = sqlx::query("UPDATE change_receipts SET restored_ms = $1 WHERE restored_ms IS NULL")
                    .bind(now_ms).execute(&mut *tx).await?.rows_affected();
                if n > 0 || marked > 0 {
                    (*tx).event_insert(None, EventKind::ChangesNotSentDoubted, &serde_json::json!({
                        "count": n, "why": "restored copy: a send after the backup may have gone out",
                        "marked_restored": marked,
                    }), now_ms, self.by.as_deref()).await?;
                }
                n
            }))
        })
        .await
    }

    /// Counts one read that did not show the change; returns the count.
    pub async fn change_observe(&self, key: &str, summary: &str) -> Result<i64> {
        crate::named("change_observe", async move {
            Ok(ledger_write!(self.store(), tx => {
                sqlx::query_scalar::<_, i64>(
                    "UPDATE change_receipts SET observation_count = observation_count + 1, last_observation = $2 \
                     WHERE operation_key = $1 RETURNING observation_count")
                    .bind(key).bind(summary)
                    .fetch_optional(&mut *tx).await?
                    .ok_or_else(|| StoreError::ReceiptNotFound(key.to_owned()))?
            }))
        })
        .await
    }

    /// Records that a read showed the change (once).
    pub async fn change_confirm(&self, key: &str, client: &ClientId, now_ms: i64) -> Result<()> {
        crate::named("change_confirm", async move {
            ledger_write!(self.store(), tx => {
                let n = sqlx::query("UPDATE change_receipts SET confirmed_ms = $2 WHERE operation_key = $1 \
                     AND confirmed_ms IS NULL AND rejection_status IS NULL")
                    .bind(key).bind(now_ms).execute(&mut *tx).await?.rows_affected();
                if n == 1 {
                    (*tx).event_insert(Some(client), EventKind::ChangeConfirmed, &serde_json::json!({ "operation_key": key }),
                        now_ms, self.by.as_deref()).await?;
                }
            });
            Ok(())
        })
        .await
    }
}
