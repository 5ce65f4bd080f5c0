//! The operations both front ends run, a module each: what is asked of a
//! client (`intent`) and the operator's commands that need the provider
//! (`reconcile` with adopt and abandon, `bulk` over a selection,
//! `settle`, `credentials`, `inventory`, `orphans`). Each leaves an audit event and refuses, with a
//! clear reason, anything the protocol does not allow.

mod bulk;
mod credentials;
mod import;
mod intent;
mod inventory;
mod orphans;
mod preview;
mod reconcile;
mod settle;
mod verify;
pub use bulk::{BULK_CLIENTS_MAX, BulkAction, BulkItem, BulkOutcome, BulkReport, bulk};
pub use credentials::{Unproven, credentials_rotate};
pub use import::{ImportDns, ImportFilter, ImportItem, ImportOutcome, check_import_filter, client_promote, import};
pub use intent::{Updated, client_create, client_delete, client_update, preflight, queue_resume, refuse_if_restored};
pub use inventory::{Inventory, InventoryItem, inventory, inventory_settled};
pub use orphans::{OrphanDeleted, orphan_adopt, orphan_delete, orphan_resolutions};
pub use preview::{DeletePlan, Deletes, UpdatePlan, client_delete_plan, client_update_plan};
pub use reconcile::{abandon, adopt, reconcile};
pub use settle::identity_settle;
pub use verify::{verify, verify_if_due};

use crate::ReceiptWriter;
use oduflow_model::decide::{block_mismatch, instance_mismatch};
use oduflow_model::ledger::Effect;
use oduflow_model::provider::{Existing, Provider, ResourceId};
use oduflow_model::*;
use oduflow_store::{ClientRow, IdSource, NewReceipt, ReceiptRow, Store};
use serde::Serialize;
use std::collections::{HashMap, HashSet};

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Store(#[from] oduflow_store::StoreError),
    #[error(transparent)]
    Provider(#[from] provider::ProviderError),
    /// The protocol does not allow this action now; the message says why.
    #[error("{0}")]
    Refused(String),
    /// The request itself is wrong (a spec the catalog refuses, a plan Vultr
    /// does not offer): bad input, and nothing was stored.
    #[error("{0}")]
    Invalid(String),
    /// The client's records are bound to another API key than the one the
    /// action was given (short fingerprints): refused before any request.
    #[error(
        "{client} is bound to API key {bound} but the configured key is {configured}: run `oduflow credentials rotate` first"
    )]
    KeyMismatch { client: String, bound: String, configured: String },
}

type Result<T> = std::result::Result<T, OperatorError>;

fn refused<T>(msg: impl Into<String>) -> Result<T> {
    Err(OperatorError::Refused(msg.into()))
}

async fn client(store: &Store, name: &str) -> Result<ClientRow> {
    let c = store.client_get(name).await?;
    c.ok_or_else(|| oduflow_store::StoreError::ClientNotFound(name.to_owned()).into())
}

/// The receipt a run would work on for `kind` now (see [`crate::current`]),
/// and the dispatch generation in force.
async fn current_receipt(store: &Store, c: &ClientRow, kind: ResourceKind) -> Result<(Option<ReceiptRow>, i64)> {
    let receipts = store.receipts_for_client(&c.id).await?;
    let cur = crate::current::current(&c.infra, c.infra.target, &receipts);
    Ok((cur.receipt(kind).cloned(), cur.generation(kind)))
}

/// The client an action on the provider is about to touch: refused while a
/// restore is pending, while it is observed only, or when its records are
/// bound to another key.
async fn acting_on<P: Provider>(store: &Store, name: &str, provider: &P) -> Result<ClientRow> {
    refuse_if_restored(store).await?;
    let c = client(store, name).await?;
    import::refuse_if_observed(&c)?;
    check_key(&c, provider)?;
    Ok(c)
}

fn check_key<P: Provider>(c: &ClientRow, provider: &P) -> Result<()> {
    match &c.infra.key_fingerprint {
        Some(k) if *k != provider.key_fingerprint() => Err(OperatorError::KeyMismatch {
            client: c.name.clone(),
            bound: k.short().to_owned(),
            configured: provider.key_fingerprint().short().to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Who takes an operator action and when, recorded with it, and the attempt
/// budget of any job it queues.
#[derive(Clone, Copy, Debug)]
pub struct Actor<'a> {
    /// The operator, as `--by` names them (or the API token's name).
    pub by: &'a str,
    pub now_ms: i64,
    pub attempts_max: i32,
}

/// What a listing shows lags a create (docs/vultr.md): after a restore, a
/// resource the discarded timeline made just before the restore was
/// declared may be missing from a listing taken at once, and would then
/// be created a second time; and a block resize it sent shows nothing in
/// progress, only the new size once done, so a read taken sooner would
/// report the copy's size as ready. The pass lists only once this long has
/// passed since the restore was declared (`ODUFLOW_LISTING_SETTLE_MS`).
pub const LISTING_SETTLE_MS_DEFAULT: i64 = 10_000;
