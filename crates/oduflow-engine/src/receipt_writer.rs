//! The receipt writer: the only code that writes dispatch receipts. Each write
//! commits on its own connection, independently of the job's main
//! transaction, so what it records survives that transaction rolling back, a
//! panic, or the worker being killed.

use oduflow_model::identity::AdapterState;
use oduflow_model::*;
use oduflow_store::{IdSource, NewReceipt, ReceiptLedger, Store};

#[derive(Clone, Debug)]
pub struct ReceiptWriter {
    ledger: ReceiptLedger,
}

impl ReceiptWriter {
    pub fn new(store: Store) -> Self {
        Self { ledger: ReceiptLedger::new(store) }
    }

    /// A writer for an operator's action: its events name `by`.
    pub fn acting_for(store: Store, by: &str) -> Self {
        Self { ledger: ReceiptLedger::acting_for(store, by) }
    }

    /// The ledger itself, for the change receipts (crate::executor::change).
    pub(crate) fn ledger(&self) -> &ReceiptLedger {
        &self.ledger
    }

    pub(crate) async fn claim(&self, r: &NewReceipt) -> oduflow_store::Result<()> {
        self.ledger.receipt_claim(r).await
    }

    pub(crate) async fn mark_sent(
        &self,
        key: &OperationKey,
        client: &ClientId,
        sent_with: &KeyFingerprint,
        now_ms: i64,
    ) -> oduflow_store::Result<()> {
        self.ledger.receipt_mark_sent(key, client, sent_with, now_ms).await
    }

    pub(crate) async fn record_id(
        &self,
        key: &OperationKey,
        id: &str,
        source: IdSource,
        now_ms: i64,
    ) -> oduflow_store::Result<()> {
        self.ledger.receipt_record_id(key, id, source, now_ms).await
    }

    pub(crate) async fn mark_not_sent(
        &self,
        key: &OperationKey,
        reason: &str,
        now_ms: i64,
    ) -> oduflow_store::Result<i64> {
        self.ledger.receipt_mark_not_sent(key, reason, now_ms).await
    }

    /// A send stopped before its mark: recorded unless the receipt was
    /// marked sent since.
    pub(crate) async fn mark_stopped(
        &self,
        key: &OperationKey,
        reason: &str,
        now_ms: i64,
    ) -> oduflow_store::Result<Option<i64>> {
        self.ledger.receipt_mark_stopped(key, reason, now_ms).await
    }

    pub(crate) async fn record_rejection(
        &self,
        key: &OperationKey,
        status: u16,
        message: &str,
        now_ms: i64,
    ) -> oduflow_store::Result<()> {
        self.ledger.receipt_record_rejection(key, status, message, now_ms).await
    }

    pub(crate) async fn observe(&self, key: &OperationKey, summary: &str) -> oduflow_store::Result<i64> {
        self.ledger.receipt_observe(key, summary).await
    }

    pub(crate) async fn mark_listed(&self, key: &OperationKey, now_ms: i64) -> oduflow_store::Result<()> {
        self.ledger.receipt_mark_listed(key, now_ms).await
    }

    pub(crate) async fn mark_seen(&self, key: &OperationKey, now_ms: i64) -> oduflow_store::Result<()> {
        self.ledger.receipt_mark_seen(key, now_ms).await
    }

    pub(crate) async fn mark_delete_sent(&self, key: &OperationKey, now_ms: i64) -> oduflow_store::Result<()> {
        self.ledger.receipt_mark_delete_sent(key, now_ms).await
    }

    pub(crate) async fn mark_deleted(&self, key: &OperationKey, now_ms: i64) -> oduflow_store::Result<()> {
        self.ledger.receipt_mark_deleted(key, now_ms).await
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn adapter_set(
        &self,
        client: &ClientId,
        adapter: &str,
        state: AdapterState,
        detail: &str,
        facts: Option<&serde_json::Value>,
        expected: i64,
        now_ms: i64,
    ) -> oduflow_store::Result<bool> {
        self.ledger.adapter_set(client, adapter, state, detail, facts, expected, now_ms).await
    }

    pub(crate) async fn adapter_fail(
        &self,
        client: &ClientId,
        adapter: &str,
        state: AdapterState,
        detail: &str,
        now_ms: i64,
    ) -> oduflow_store::Result<i64> {
        self.ledger.adapter_fail(client, adapter, state, detail, now_ms).await
    }

    pub(crate) async fn doubt_not_sent(&self, key: &OperationKey, now_ms: i64) -> oduflow_store::Result<bool> {
        self.ledger.receipt_doubt_not_sent(key, now_ms).await
    }

    pub(crate) async fn observations_restart(&self, key: &OperationKey) -> oduflow_store::Result<()> {
        self.ledger.receipt_observations_restart(key).await
    }

    pub(crate) async fn abandon(
        &self,
        key: &OperationKey,
        by: &str,
        reason: &str,
        ground: &oduflow_store::AbandonGround,
        now_ms: i64,
    ) -> oduflow_store::Result<()> {
        self.ledger.receipt_abandon(key, by, reason, ground, now_ms).await
    }

    /// An audit event that must survive the job rolling back.
    pub(crate) async fn audit(
        &self,
        client: &ClientId,
        kind: EventKind,
        detail: serde_json::Value,
        now_ms: i64,
    ) -> oduflow_store::Result<()> {
        self.ledger.event_append(Some(client), kind, &detail, now_ms).await
    }
}
