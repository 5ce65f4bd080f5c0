//! Labelled orphans in the run (docs/protocol.md §7): live resources whose
//! label names this client and kind, recorded by the inventory pass after a
//! restore, that no receipt of the client accounts for. The decision sees
//! them (`Resource::orphans`) before a first create and before `deleted`;
//! adopting one claims a receipt for it, so the create it stands for is
//! never sent.

use super::observe::{block_facts, instance_facts};
use super::{Converge, Step, create_digest};
use crate::EngineError;
use oduflow_model::decide::Orphan;
use oduflow_model::ledger::Effect;
use oduflow_model::provider::Provider;
use oduflow_model::*;
use oduflow_store::{IdSource, OrphanRow, ReceiptRow};

/// One labelled orphan as this run read it, with the label to adopt it by.
#[derive(Clone, Debug)]
pub(super) struct Read {
    pub(super) label: String,
    pub(super) orphan: Orphan,
}

/// The labelled orphans a run read, of each kind a label can name.
#[derive(Default)]
pub(super) struct ByKind {
    vm: Vec<Read>,
    volume: Vec<Read>,
}

impl ByKind {
    fn of(&self, kind: ResourceKind) -> &[Read] {
        if kind == ResourceKind::Vm { &self.vm } else { &self.volume }
    }

    fn of_mut(&mut self, kind: ResourceKind) -> &mut Vec<Read> {
        if kind == ResourceKind::Vm { &mut self.vm } else { &mut self.volume }
    }
}

impl<'a, P: Provider> Converge<'a, P> {
    /// Whether this step's decision needs the orphans: a kind without a
    /// receipt yet (its first create is next), or a deletion (`deleted` is
    /// next at some point).
    pub(super) fn orphans_needed(&self, view: &super::View) -> bool {
        if self.run.w.cfg.planted.is(crate::Bug::SkipLabelCheck) {
            // A planted bug: no look at the labelled orphans at all.
            return false;
        }
        self.orphans.is_none() && (self.target == Target::Absent || view.cur.vm.is_none() || view.cur.volume.is_none())
    }

    /// Reads the client's open orphans, each by id, once per run (again
    /// after an adoption).
    pub(super) async fn read_orphans(&mut self, view: &super::View) -> Result<(), EngineError> {
        let w = self.run.w;
        let client = &self.run.infra.client_id;
        let recorded: Vec<&str> = view.receipts.iter().filter_map(ReceiptRow::id).collect();
        let rows: Vec<OrphanRow> = w.store.orphans_open_for_client(client).await?;
        let mut read = ByKind::default();
        for o in rows.into_iter().filter(|o| !recorded.contains(&o.resource_id.as_str())) {
            // Only a label naming this client and kind stands for its first
            // create; a receipt's label (a duplicate, an abandoned dispatch)
            // names them too.
            let Some((owner, kind)) = Label(o.label.clone()).owner() else { continue };
            if &owner != client || kind == ResourceKind::Attach {
                continue;
            }
            let mut facts = self.read_orphan(kind, &o).await?;
            // Its label is a receipt's (an abandoned dispatch, a duplicate):
            // labels are unique, so no new receipt can take it.
            if let (Some(f), Some(r)) = (facts.as_mut(), view.receipts.iter().find(|r| r.label.as_str() == o.label)) {
                f.mismatch = Some(format!(
                    "it carries the label of dispatch {}{}, so a new dispatch cannot adopt it",
                    r.operation_key,
                    if matches!(r.effect(), Effect::Abandoned { .. }) { " (abandoned)" } else { "" }
                ));
            }
            read.of_mut(kind).push(Read { label: o.label, orphan: Orphan { id: o.resource_id, facts } });
        }
        self.orphans = Some(read);
        Ok(())
    }

    async fn read_orphan(&self, kind: ResourceKind, o: &OrphanRow) -> Result<Option<decide::Facts>, EngineError> {
        let w = self.run.w;
        let spec = &self.run.infra.spec;
        let failed = |e: provider::ProviderError| {
            EngineError::ProviderRead(format!("labelled orphan {} {}: {e}", kind.as_str(), o.resource_id))
        };
        let id = provider::ResourceId::new(kind, o.resource_id.clone());
        Ok(w.provider.resource_get(&id).await.map_err(failed)?.map(|x| match x {
            provider::Existing::Instance(i) => instance_facts(spec, &o.label, i),
            provider::Existing::Block(b) => block_facts(spec, &o.label, b),
        }))
    }

    /// The orphans of `kind` the decision sees.
    pub(super) fn orphans_of(&self, kind: ResourceKind) -> Vec<Orphan> {
        self.orphans.as_ref().map(|o| o.of(kind).iter().map(|r| r.orphan.clone()).collect()).unwrap_or_default()
    }

    /// Claims a receipt of the current dispatch generation under the
    /// orphan's own label and records its id: it is this client's resource
    /// of that kind from now on, and its create is never sent.
    pub(super) async fn adopt_orphan(mut self, kind: ResourceKind, id: String) -> Result<Step<'a, P>, EngineError> {
        let w = self.run.w;
        let label = self
            .orphans
            .as_ref()
            .and_then(|o| o.of(kind).iter().find(|r| r.orphan.id == id))
            .map(|r| r.label.clone())
            .ok_or_else(|| EngineError::Invariant(format!("adopting {id}, which is no orphan of this run")))?;
        let client = self.run.infra.client_id.clone();
        let receipt = self.run.new_receipt(kind, Label(label.clone()), create_digest(&self.run.infra.spec, kind));
        let (op, now) = (receipt.operation_key.clone(), receipt.claimed_ms);
        w.receipts.claim(&receipt).await?;
        w.receipts.record_id(&op, &id, IdSource::AdoptedByLabel, now).await?;
        let how = format!("adopted by the first provisioning of client {client} (its label names it)");
        w.store.orphan_resolve(&id, &how, now).await?;
        self.run.set_id(kind, Some(id.clone()));
        self.run.event(EventKind::OrphanAdopted, serde_json::json!({ "kind": kind, "id": id, "label": label }));
        // Read by id next, and the orphans again.
        self.reads.of_mut(kind).seen = decide::Seen::NotRead;
        self.orphans = None;
        Ok(Step::Next(self))
    }
}
