//! One operator action over a selection of clients (`oduflow bulk`,
//! `POST /api/v1/bulk/...`): each client gets the single-client action,
//! with its own refusals and its own audit record carrying the one
//! attestation; a dry run reports what each would do and writes nothing.

use super::reconcile::{abandon_apply, abandon_plan, reconcile_plan};
use super::*;
use oduflow_store::ClientSelect;

/// The most clients one bulk action takes; a larger selection is refused
/// as a whole, before anything is done, and asks for a narrower one.
pub const BULK_CLIENTS_MAX: usize = 1_000;

/// The action, as the single-client command takes it.
/// (`abandon` asks nothing of the provider, so it needs none.)
pub enum BulkAction<'a, P> {
    /// `reconcile NAME`: observe again, adapters afresh.
    Reconcile { provider: &'a P },
    /// `abandon NAME --kind K`, on the attestation's reason (the actor
    /// names who attests).
    Abandon { kind: ResourceKind, reason: &'a str },
}

/// What happened to one selected client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkOutcome {
    /// The action was recorded and its job queued.
    Done,
    /// A dry run: the action would be taken.
    WouldDo,
    /// The protocol refuses the action for this client; nothing changed.
    Refused,
    /// Not tried: the action stopped earlier (see `BulkReport::stopped`).
    NotReached,
}

#[derive(Clone, Debug, Serialize)]
pub struct BulkItem {
    pub name: String,
    pub outcome: BulkOutcome,
    /// What was (or would be) done, or why not.
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct BulkReport {
    pub action: &'static str,
    pub dry_run: bool,
    /// Clients selected, in name order; one item each.
    pub items: Vec<BulkItem>,
    /// Why the action stopped before the end of the selection (the
    /// database or the provider failed); the clients after it are
    /// `not_reached`, those before it keep what was done.
    pub stopped: Option<String>,
}

impl BulkReport {
    pub fn count(&self, o: BulkOutcome) -> usize {
        self.items.iter().filter(|i| i.outcome == o).count()
    }
}

/// Runs `action` for every client `select` picks, in name order. Refused
/// as a whole, with nothing done, for an empty selection (it would be every
/// client), one over [`BULK_CLIENTS_MAX`], or a pending restore.
pub async fn bulk<P: Provider>(
    store: &Store,
    select: &ClientSelect,
    action: BulkAction<'_, P>,
    actor: Actor<'_>,
    dry_run: bool,
) -> Result<BulkReport> {
    if *select == ClientSelect::default() {
        return refused(
            "a bulk action needs a selection (status, reason, target, region, name pattern or time unchanged); \
             nothing was done",
        );
    }
    refuse_if_restored(store).await?;
    let names: Vec<String> =
        store.client_list().await?.into_iter().filter(|c| select.matches(c, actor.now_ms)).map(|c| c.name).collect();
    if names.len() > BULK_CLIENTS_MAX {
        return refused(format!(
            "{} clients are selected; a bulk action takes at most {BULK_CLIENTS_MAX}: narrow the selection; \
             nothing was done",
            names.len()
        ));
    }
    let verb = match action {
        BulkAction::Reconcile { .. } => "reconcile",
        BulkAction::Abandon { .. } => "abandon",
    };
    let mut report = BulkReport { action: verb, dry_run, items: Vec::with_capacity(names.len()), stopped: None };
    for name in names {
        let (outcome, detail) = if report.stopped.is_some() {
            (BulkOutcome::NotReached, "not tried: the action stopped before this client".to_owned())
        } else {
            match one(store, &name, &action, actor, dry_run).await {
                Ok(done) => done,
                Err(
                    e @ (OperatorError::Refused(_) | OperatorError::Invalid(_) | OperatorError::KeyMismatch { .. }),
                ) => (BulkOutcome::Refused, e.to_string()),
                // Changed since the selection was read: deleted, abandoned
                // or moved on by someone else, a DNS name taken meanwhile.
                Err(
                    e @ OperatorError::Store(
                        oduflow_store::StoreError::ClientNotFound(_)
                        | oduflow_store::StoreError::ReceiptNotFound(_)
                        | oduflow_store::StoreError::ClientMoved(_)
                        | oduflow_store::StoreError::DnsNameTaken { .. },
                    ),
                ) => (BulkOutcome::Refused, e.to_string()),
                Err(e) => {
                    report.stopped = Some(format!("at {name}: {e}"));
                    (BulkOutcome::NotReached, format!("not done: {e}"))
                }
            }
        };
        report.items.push(BulkItem { name, outcome, detail });
    }
    Ok(report)
}

/// The single-client action for `name`, or its dry run.
async fn one<P: Provider>(
    store: &Store,
    name: &str,
    action: &BulkAction<'_, P>,
    actor: Actor<'_>,
    dry_run: bool,
) -> Result<(BulkOutcome, String)> {
    match (action, dry_run) {
        (&BulkAction::Reconcile { provider }, true) => {
            let plan = reconcile_plan(store, provider, name, false).await?;
            let n = plan.observe_again.len();
            Ok((BulkOutcome::WouldDo, format!("would observe again ({n} dispatches) and queue a run")))
        }
        (&BulkAction::Reconcile { provider }, false) => {
            let row = reconcile(store, provider, name, false, actor).await?;
            Ok((BulkOutcome::Done, format!("queued a run; now {}", row.infra.status.as_str())))
        }
        (&BulkAction::Abandon { kind, reason }, true) => {
            let plan = one_abandon(store, name, kind, actor.by, reason).await?;
            let key = plan.receipt.operation_key;
            Ok((BulkOutcome::WouldDo, format!("would abandon {} dispatch {key} and queue the next", kind.as_str())))
        }
        (&BulkAction::Abandon { kind, reason }, false) => {
            let plan = one_abandon(store, name, kind, actor.by, reason).await?;
            let row = abandon_apply(store, name, kind, reason, actor, &plan).await?;
            let key = plan.receipt.operation_key;
            Ok((
                BulkOutcome::Done,
                format!("abandoned {} dispatch {key}; now {}", kind.as_str(), row.infra.status.as_str()),
            ))
        }
    }
}

/// The abandon a bulk action may take: an uncertain dispatch only. A
/// rebuild (a resource seen, answering 404 since) creates a new paid
/// resource on the operator's word about that one resource: one client at
/// a time.
async fn one_abandon(
    store: &Store,
    name: &str,
    kind: ResourceKind,
    by: &str,
    reason: &str,
) -> Result<super::reconcile::AbandonPlan> {
    let plan = abandon_plan(store, name, kind, by, reason).await?;
    if matches!(plan.ground, oduflow_store::AbandonGround::Missing(_)) {
        return refused(format!(
            "{name}'s {} was seen and answers 404 since: rebuilding it makes a new one, decided one client at a \
             time (`oduflow abandon {name} --kind {}`)",
            kind.as_str(),
            kind.as_str()
        ));
    }
    Ok(plan)
}
