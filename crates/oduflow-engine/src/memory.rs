//! An in-process provider for the engine's own tests: everything is ready at
//! once, and a test can make the next creates lose their response (applied,
//! answered `Unknown`) or be rejected. The Vultr simulator is the faithful
//! twin; this one is small enough to reason about call by call.

use oduflow_model::provider::*;
use oduflow_model::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct MemoryState {
    pub instances: BTreeMap<String, Instance>,
    pub blocks: BTreeMap<String, Block>,
    /// Create requests applied per label: the "never twice" ledger.
    pub creates_per_label: HashMap<String, u32>,
    /// Every call, in order (`"POST /instances"`, ...).
    pub calls: Vec<String>,
    /// The next this-many creates are applied but answered `Unknown`.
    pub lose_create_responses: u32,
    /// The next create is answered with this rejection (and not applied).
    pub reject_next_create: Option<(u16, String)>,
    /// The next VM create, once applied, waits for this before it answers:
    /// lets a test act while a run is between its create and its commit.
    pub hold_next_create: Option<Arc<tokio::sync::Notify>>,
    /// Every DELETE is refused with this status and message.
    pub refuse_deletes: Option<(u16, String)>,
    /// Every read fails with this error (a revoked key, a wrong URL).
    pub fail_reads: Option<ProviderError>,
    /// New VMs stay `pending` for ever (a stuck install).
    pub vms_stay_pending: bool,
    /// The next this-many creates cannot connect: not applied, `NotSent`.
    pub unreachable_creates: u32,
    /// The next `GET /instances/{id}` waits for this before it answers.
    pub hold_next_get: Option<Arc<tokio::sync::Notify>>,
    /// The next this-many creates are answered `Unknown` and *not* applied
    /// (a 500 from a proxy in front of the API, say).
    pub unknown_unapplied_creates: u32,
    /// The next attach is answered with this rejection (and not applied).
    pub reject_next_attach: Option<(u16, String)>,
    /// The next this-many attaches are answered `Unknown` and not applied.
    pub unknown_unapplied_attaches: u32,
    /// DELETEs are answered 204 but not applied (the resource stays).
    pub deletes_not_applied: bool,
    /// What `catalog` answers; `None`: [`MemoryState::usual_catalog`].
    pub catalog: Option<Catalog>,
    /// Backup schedules set, per instance id.
    pub backup_schedules: BTreeMap<String, BackupSchedule>,
    /// Every VM create request applied, in order.
    pub instance_requests: Vec<InstanceRequest>,
    /// Catalog reads (kept out of `calls`, which tests compare whole).
    pub catalog_reads: u32,
    /// Changes (PATCH) applied whose answer is then lost.
    pub lose_update_responses: u32,
    /// The next change is refused with this status and message.
    pub reject_next_update: Option<(u16, String)>,
    /// Plans `GET /instances/{id}/upgrades` lists (empty: any other plan).
    pub upgrade_plans: Vec<String>,
    /// While set, every create, attach and change waits for a permit of this
    /// before its guard is asked, as a request waits for its slot in the
    /// rate budget: lets a test act while a send waits for its slot.
    pub slot_gate: Option<Arc<tokio::sync::Semaphore>>,
    /// How many sends have come to the gate so far.
    pub slot_waiting: u32,
    next_id: u64,
}

impl MemoryState {
    /// A catalog with the tests' usual spec in it (ewr and ams with both
    /// volume types, the vc2 plans, Ubuntu 24.04 and Debian 12).
    pub fn usual_catalog() -> Catalog {
        let both = vec!["block_storage_high_perf".to_owned(), "block_storage_storage_opt".to_owned()];
        Catalog {
            regions: [("ewr".to_owned(), both.clone()), ("ams".to_owned(), both)].into_iter().collect(),
            available_plans: ["vc2-1c-1gb", "vc2-1c-2gb", "vc2-2c-4gb"].into_iter().map(str::to_owned).collect(),
            os_ids: [2284, 2136].into_iter().collect(),
            ..Catalog::default()
        }
    }

    /// The answer to a change just applied: lost while
    /// `lose_update_responses` lasts.
    fn lost_update_outcome(&mut self) -> Outcome<()> {
        if self.lose_update_responses > 0 {
            self.lose_update_responses -= 1;
            return Outcome::Unknown { reason: "connection reset after the change (memory provider)".into() };
        }
        Outcome::Accepted(())
    }

    /// A volume made outside the run under test (spec(): 40 GB high_perf in ewr).
    pub fn put_block(&mut self, id: &str, label: &str) {
        self.blocks.insert(
            id.to_owned(),
            Block {
                id: VultrBlockId(id.to_owned()),
                label: label.to_owned(),
                region: "ewr".into(),
                size_gb: 40,
                block_type: "high_perf".into(),
                status: "active".into(),
                mount_id: format!("{id}-mount"),
                ..Block::default()
            },
        );
    }

    /// Puts an active VM with this id and label, of the tests' usual spec
    /// (ewr, vc2-1c-1gb, os 2284), as if made outside the run under test.
    pub fn put_vm(&mut self, id: &str, label: &str) {
        self.instances.insert(
            id.to_owned(),
            Instance {
                id: VultrInstanceId(id.to_owned()),
                label: label.to_owned(),
                region: "ewr".into(),
                plan: "vc2-1c-1gb".into(),
                os_id: 2284,
                // Unknown: not held against it (the test does not care).
                hostname: String::new(),
                status: "active".into(),
                server_status: "ok".into(),
                main_ip: "192.0.2.9".into(),
                ..Instance::default()
            },
        );
    }
}

pub struct MemoryProvider {
    key: KeyFingerprint,
    pub state: Arc<Mutex<MemoryState>>,
    sending: Sending,
}

impl MemoryProvider {
    pub fn new(key: KeyFingerprint) -> Self {
        Self { key, state: Arc::default(), sending: Sending::default() }
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut MemoryState) -> R) -> R {
        f(&mut self.state.lock().expect("memory provider poisoned"))
    }

    /// What a create, attach or change goes through before it leaves, in
    /// the Vultr client's order: its slot (the test's gate), the run's
    /// guard, then the record that it is sent.
    async fn before_send(&self) -> Result<(), String> {
        let gate = self.with(|s| {
            s.slot_waiting += u32::from(s.slot_gate.is_some());
            s.slot_gate.clone()
        });
        if let Some(g) = gate {
            g.acquire().await.map_err(|e| e.to_string())?.forget();
        }
        self.sending.check().await?;
        self.sending.mark().await
    }

    /// The run's send guard, asked like the Vultr client asks it: a refused
    /// request is neither applied nor logged in `calls`.
    async fn guard_read(&self) -> Result<(), ProviderError> {
        self.sending.check().await.map_err(|e| ProviderError::Transport(format!("request not sent: {e}")))
    }

    fn read_fault(&self) -> Result<(), ProviderError> {
        self.with(|s| s.fail_reads.clone()).map_or(Ok(()), Err)
    }

    fn delete_refusal(&self) -> Option<DeleteOutcome> {
        self.with(|s| {
            let (status, message) = s.refuse_deletes.clone()?;
            s.calls.push("DELETE refused".into());
            Some(DeleteOutcome::Refused { status, message })
        })
    }

    fn create<T>(&self, call: &str, label: &str, apply: impl FnOnce(&mut MemoryState, String) -> T) -> Outcome<T> {
        self.with(|s| {
            s.calls.push(call.to_owned());
            if s.unreachable_creates > 0 {
                s.unreachable_creates -= 1;
                return Outcome::NotSent { reason: "connection refused (memory provider)".into() };
            }
            if let Some((status, message)) = s.reject_next_create.take() {
                return Outcome::Rejected { status, message };
            }
            if s.unknown_unapplied_creates > 0 {
                s.unknown_unapplied_creates -= 1;
                return Outcome::Unknown { reason: "Vultr answered 500 (memory provider, not applied)".into() };
            }
            s.next_id += 1;
            let id = format!("mem-{:08}", s.next_id);
            *s.creates_per_label.entry(label.to_owned()).or_default() += 1;
            let t = apply(s, id);
            if s.lose_create_responses > 0 {
                s.lose_create_responses -= 1;
                return Outcome::Unknown { reason: "response lost (memory provider)".into() };
            }
            Outcome::Accepted(t)
        })
    }
}

impl Provider for MemoryProvider {
    fn key_fingerprint(&self) -> KeyFingerprint {
        self.key.clone()
    }

    fn sending_as(&self, sending: Sending) -> Self {
        Self { key: self.key.clone(), state: self.state.clone(), sending }
    }

    fn sending(&self) -> &Sending {
        &self.sending
    }

    async fn instance_create(&self, req: &InstanceRequest) -> Outcome<VultrInstanceId> {
        if let Err(e) = self.before_send().await {
            return Outcome::NotSent { reason: format!("request not sent: {e}") };
        }
        let outcome = self.create("POST /instances", req.label.as_str(), |s, id| {
            s.instance_requests.push(req.clone());
            let (os_id, app_id, image_id) = match &req.image {
                ImageSource::Os(n) => (*n, 0, String::new()),
                ImageSource::Snapshot(_) => (164, 0, String::new()),
                ImageSource::App(n) => (186, *n, String::new()),
                ImageSource::Image(i) => (186, 0, i.clone()),
            };
            s.instances.insert(
                id.clone(),
                Instance {
                    id: VultrInstanceId(id.clone()),
                    label: req.label.to_string(),
                    region: req.region.clone(),
                    plan: req.plan.clone(),
                    os_id,
                    app_id,
                    image_id,
                    hostname: req.server.hostname.clone(),
                    tags: req.server.tags.clone(),
                    firewall_group_id: req.server.firewall_group.clone().unwrap_or_default(),
                    status: if s.vms_stay_pending { "pending" } else { "active" }.into(),
                    server_status: if s.vms_stay_pending { "none" } else { "ok" }.into(),
                    main_ip: "192.0.2.1".into(),
                    v6_main_ip: if req.server.ipv6 { "2001:db8::1".into() } else { String::new() },
                },
            );
            VultrInstanceId(id)
        });
        if let Some(hold) = self.with(|s| s.hold_next_create.take()) {
            hold.notified().await;
        }
        outcome
    }

    async fn instance_get(&self, id: &VultrInstanceId) -> Result<Option<Instance>, ProviderError> {
        if let Some(hold) = self.with(|s| s.hold_next_get.take()) {
            hold.notified().await;
        }
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| {
            s.calls.push("GET /instances/{id}".into());
            s.instances.get(id.as_str()).cloned()
        }))
    }

    async fn instance_list_by_label(&self, label: &Label) -> Result<Vec<Instance>, ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| {
            s.calls.push("GET /instances?label".into());
            s.instances.values().filter(|i| i.label == label.as_str()).cloned().collect()
        }))
    }

    async fn instance_list(&self) -> Result<Vec<Instance>, ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| {
            s.calls.push("GET /instances".into());
            s.instances.values().cloned().collect()
        }))
    }

    async fn instance_delete(&self, id: &VultrInstanceId) -> Result<DeleteOutcome, ProviderError> {
        self.guard_read().await?;
        if let Some(r) = self.delete_refusal() {
            return Ok(r);
        }
        Ok(self.with(|s| {
            s.calls.push("DELETE /instances/{id}".into());
            if s.deletes_not_applied {
                return if s.instances.contains_key(id.as_str()) {
                    DeleteOutcome::Sent
                } else {
                    DeleteOutcome::NotFound
                };
            }
            match s.instances.remove(id.as_str()) {
                Some(_) => {
                    for b in s.blocks.values_mut() {
                        if b.attached_to_instance.as_ref() == Some(id) {
                            b.attached_to_instance = None;
                        }
                    }
                    DeleteOutcome::Sent
                }
                None => DeleteOutcome::NotFound,
            }
        }))
    }

    async fn block_create(&self, req: &BlockRequest) -> Outcome<VultrBlockId> {
        if let Err(e) = self.before_send().await {
            return Outcome::NotSent { reason: format!("request not sent: {e}") };
        }
        self.create("POST /blocks", req.label.as_str(), |s, id| {
            s.blocks.insert(
                id.clone(),
                Block {
                    id: VultrBlockId(id.clone()),
                    label: req.label.to_string(),
                    region: req.region.clone(),
                    size_gb: req.size_gb,
                    block_type: req.block_type.as_str().into(),
                    status: "active".into(),
                    attached_to_instance: None,
                    mount_id: format!("{id}-mount"),
                },
            );
            VultrBlockId(id)
        })
    }

    async fn block_get(&self, id: &VultrBlockId) -> Result<Option<Block>, ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| {
            s.calls.push("GET /blocks/{id}".into());
            s.blocks.get(id.as_str()).cloned()
        }))
    }

    async fn block_list(&self) -> Result<Vec<Block>, ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| {
            s.calls.push("GET /blocks".into());
            s.blocks.values().cloned().collect()
        }))
    }

    async fn instance_update(&self, id: &VultrInstanceId, change: &InstanceChange) -> Outcome<()> {
        if let Err(e) = self.before_send().await {
            return Outcome::NotSent { reason: format!("request not sent: {e}") };
        }
        self.with(|s| {
            s.calls.push("PATCH /instances/{id}".into());
            if let Some((status, message)) = s.reject_next_update.take() {
                return Outcome::Rejected { status, message };
            }
            let Some(i) = s.instances.get_mut(id.as_str()) else {
                return Outcome::Rejected { status: 404, message: "instance not found".into() };
            };
            if let Some(p) = &change.plan {
                i.plan = p.clone();
            }
            if let Some(t) = &change.tags {
                i.tags = t.clone();
            }
            if let Some(f) = &change.firewall_group_id {
                i.firewall_group_id = f.clone();
            }
            s.lost_update_outcome()
        })
    }

    async fn instance_upgrade_plans(&self, id: &VultrInstanceId) -> Result<Vec<String>, ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| {
            s.calls.push("GET /instances/{id}/upgrades".into());
            let current = s.instances.get(id.as_str()).map(|i| i.plan.clone()).unwrap_or_default();
            if s.upgrade_plans.is_empty() {
                ["vc2-1c-2gb", "vc2-2c-4gb", "vc2-4c-8gb"]
                    .into_iter()
                    .filter(|p| *p != current)
                    .map(Into::into)
                    .collect()
            } else {
                s.upgrade_plans.clone()
            }
        }))
    }

    async fn block_resize(&self, id: &VultrBlockId, size_gb: i64) -> Outcome<()> {
        if let Err(e) = self.before_send().await {
            return Outcome::NotSent { reason: format!("request not sent: {e}") };
        }
        self.with(|s| {
            s.calls.push("PATCH /blocks/{id}".into());
            if let Some((status, message)) = s.reject_next_update.take() {
                return Outcome::Rejected { status, message };
            }
            match s.blocks.get_mut(id.as_str()) {
                Some(b) if b.size_gb == size_gb => {
                    Outcome::Rejected { status: 400, message: "Nothing to change".into() }
                }
                Some(b) => {
                    b.size_gb = size_gb;
                    s.lost_update_outcome()
                }
                None => Outcome::Rejected { status: 404, message: "Invalid block storage ID".into() },
            }
        })
    }

    async fn block_attach(&self, id: &VultrBlockId, instance: &VultrInstanceId) -> Outcome<()> {
        if let Err(e) = self.before_send().await {
            return Outcome::NotSent { reason: format!("request not sent: {e}") };
        }
        self.with(|s| {
            s.calls.push("POST /blocks/{id}/attach".into());
            if let Some((status, message)) = s.reject_next_attach.take() {
                return Outcome::Rejected { status, message };
            }
            if s.unknown_unapplied_attaches > 0 {
                s.unknown_unapplied_attaches -= 1;
                return Outcome::Unknown { reason: "connection reset (memory provider, not applied)".into() };
            }
            if !s.instances.contains_key(instance.as_str()) {
                return Outcome::Rejected { status: 400, message: "instance not found".into() };
            }
            match s.blocks.get_mut(id.as_str()) {
                Some(b) => {
                    b.attached_to_instance = Some(instance.clone());
                    Outcome::Accepted(())
                }
                None => Outcome::Rejected { status: 400, message: "block not found".into() },
            }
        })
    }

    async fn block_detach(&self, id: &VultrBlockId) -> Result<DeleteOutcome, ProviderError> {
        self.guard_read().await?;
        Ok(self.with(|s| {
            s.calls.push("POST /blocks/{id}/detach".into());
            match s.blocks.get_mut(id.as_str()) {
                Some(b) => {
                    b.attached_to_instance = None;
                    DeleteOutcome::Sent
                }
                None => DeleteOutcome::NotFound,
            }
        }))
    }

    async fn catalog(&self, _region: &str) -> Result<Catalog, ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| {
            s.catalog_reads += 1;
            s.catalog.clone().unwrap_or_else(MemoryState::usual_catalog)
        }))
    }

    async fn backup_schedule_set(&self, id: &VultrInstanceId, b: &BackupSchedule) -> Result<(), ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        self.with(|s| {
            s.calls.push("POST /instances/{id}/backup-schedule".into());
            s.backup_schedules.insert(id.0.clone(), *b);
        });
        Ok(())
    }

    async fn backup_schedule_get(&self, id: &VultrInstanceId) -> Result<Option<BackupSchedule>, ProviderError> {
        self.guard_read().await?;
        self.read_fault()?;
        Ok(self.with(|s| s.backup_schedules.get(id.as_str()).copied()))
    }

    async fn block_delete(&self, id: &VultrBlockId) -> Result<DeleteOutcome, ProviderError> {
        self.guard_read().await?;
        if let Some(r) = self.delete_refusal() {
            return Ok(r);
        }
        Ok(self.with(|s| {
            s.calls.push("DELETE /blocks/{id}".into());
            if s.deletes_not_applied {
                return if s.blocks.contains_key(id.as_str()) { DeleteOutcome::Sent } else { DeleteOutcome::NotFound };
            }
            match s.blocks.remove(id.as_str()) {
                Some(_) => DeleteOutcome::Sent,
                None => DeleteOutcome::NotFound,
            }
        }))
    }
}
