//! The provider the engine's and the server's tests run against: the Vultr
//! simulator in process, instant (no lifecycle delays, no 404 window, no
//! listing lag), with this crate's client on it. A test scripts what it
//! needs (a lost answer, a refusal, an answer held back) through
//! [`Cloud::script`], and reads what reached the cloud from the
//! simulator's ledger.
//!
//! What the test itself does at the provider (a VM made outside the run
//! under test, a delete in the console) goes through a client of its own,
//! whose key [`Cloud::calls`] leaves out.
//!
//! A request stopped inside the client never reaches the simulator. The
//! clients' rate budget ([`Slots`]) stands where such a request waits, before
//! the run's guard is asked: a test holds the changes or the reads there.
//! [`Cloud::unplug`] closes the simulator's listening socket: a create
//! opens a connection of its own, which is refused, so it provably never
//! left, while reads go on over the connection the client keeps.
//!
//! Scripts apply to every client's requests, the test's own included.

use crate::{VultrClient, VultrConfig};
use oduflow_model::provider::{BlockRequest, InstanceRequest, Outcome, Provider};
use oduflow_model::rate::{BudgetFuture, LocalBudget, RateBudget, SlotUse};
use oduflow_model::{ImageSource, ServerSpec};
use oduflow_model::{Label, VolumeType, VultrBlockId, VultrInstanceId};
use oduflow_sim::{LedgerResource, Op, ResourceKind, Scripted, Sim, SimConfig, SimHandle};
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// The key of the test's own client.
const CONSOLE_KEY: &str = "console-of-the-test";

/// The simulator and the keys it accepts.
pub struct Cloud {
    pub sim: SimHandle,
    keys: Mutex<Vec<String>>,
    console: VultrClient,
    /// The rate budget of every client [`Cloud::client`] makes.
    pub slots: Arc<Slots>,
}

impl Cloud {
    /// An instant simulator (see [`SimConfig::instant`]) with no rate limit
    /// to speak of.
    pub async fn start() -> Self {
        Self::start_with(|c| c).await
    }

    /// [`Cloud::start`] with the simulator's settings adjusted by `f`.
    pub async fn start_with(f: impl FnOnce(SimConfig) -> SimConfig) -> Self {
        let cfg = f(SimConfig { rate_per_sec: 100_000, ..SimConfig::default() }.instant()).with_key(CONSOLE_KEY);
        let sim = Sim::start(cfg, "127.0.0.1:0".parse().expect("an address")).await.expect("the simulator starts");
        let console = client_on(&sim.base_url, CONSOLE_KEY, Arc::new(LocalBudget::new("console")));
        Self { sim, keys: Mutex::new(vec![CONSOLE_KEY.to_owned()]), console, slots: Arc::default() }
    }

    /// A client with this API key, which the simulator accepts from now on.
    pub fn client(&self, key: &str) -> Arc<VultrClient> {
        self.accept(key);
        Arc::new(client_on(&self.sim.base_url, key, self.slots.clone()))
    }

    /// Accepts `key` (again).
    pub fn accept(&self, key: &str) {
        self.keys_then(|keys| {
            if !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
            }
        });
    }

    /// Answers 401 to `key` from now on (a key revoked in the console).
    pub fn revoke(&self, key: &str) {
        self.keys_then(|keys| keys.retain(|k| k != key));
    }

    /// Changes the accepted keys with `f`, then tells the simulator.
    fn keys_then(&self, f: impl FnOnce(&mut Vec<String>)) {
        let mut keys = self.keys.lock().expect("keys");
        f(&mut keys);
        self.sim.control().set_api_keys(&keys.iter().map(|k| SecretString::from(k.clone())).collect::<Vec<_>>());
    }

    /// The test's own client, the operator's hands in the Vultr console:
    /// its requests are left out of [`Cloud::calls`], and the clients' slot
    /// gate ([`Slots`]) never holds them (the simulator's scripts do apply).
    pub fn console(&self) -> &VultrClient {
        &self.console
    }

    /// Answers the next `times` requests of `ops` (`None`: every one until
    /// [`Cloud::unscript`]) with `answer`.
    pub fn script(&self, ops: &[Op], answer: Scripted, times: Option<u32>) {
        self.sim.control().script(ops, answer, times);
    }

    pub fn unscript(&self) {
        self.sim.control().unscript();
    }

    /// Refuses the next `times` requests of `ops` with `status` and `message`.
    pub fn refuse(&self, ops: &[Op], status: u16, message: &str, times: Option<u32>) {
        self.script(ops, Scripted::Refuse { status, message: message.to_owned() }, times);
    }

    /// Closes the simulator's listening socket (see the module notes), once
    /// `reads_over` holds a pooled connection for its reads: a client's
    /// creates and attaches then cannot connect, its reads go on.
    pub async fn unplug(&self, reads_over: &VultrClient) {
        reads_over.instance_list().await.expect("a read that leaves a connection open");
        self.sim.unplug().await;
    }

    /// Listens again after [`Cloud::unplug`].
    pub async fn plug(&self) {
        self.sim.plug().await;
    }

    /// Every request a client under test sent, in order, as `METHOD /route`
    /// (`POST /instances`, `GET /instances/{id}`); the test's own left out.
    pub fn calls(&self) -> Vec<String> {
        let console = oduflow_model::KeyFingerprint::of_key(&SecretString::from(CONSOLE_KEY.to_owned())).0;
        self.sim
            .ledger()
            .request_log
            .into_iter()
            .filter(|r| r.key_fingerprint != console)
            .map(|r| format!("{} {}", r.method, r.route.strip_prefix("/v2").unwrap_or(&r.route)))
            .collect()
    }

    /// The calls that change something (every method but GET).
    pub fn sends(&self) -> Vec<String> {
        self.calls().into_iter().filter(|c| !c.starts_with("GET ")).collect()
    }

    /// How many of [`Cloud::calls`] were `call`.
    pub fn count(&self, call: &str) -> usize {
        self.calls().iter().filter(|c| *c == call).count()
    }

    /// Create requests applied per label (the "never twice" ledger).
    pub fn creates_per_label(&self) -> BTreeMap<String, u64> {
        self.sim.ledger().creates_per_label
    }

    /// The live resources of a kind, oldest first.
    pub fn live(&self, kind: ResourceKind) -> Vec<LedgerResource> {
        self.sim.ledger().resources.into_iter().filter(|r| r.kind == kind && r.deleted_at.is_none()).collect()
    }

    /// The live VMs as a client reads them, through the test's own key.
    pub async fn instances(&self) -> Vec<oduflow_model::provider::Instance> {
        self.console.instance_list().await.expect("the test's own listing")
    }

    /// The live volumes as a client reads them, through the test's own key.
    pub async fn blocks(&self) -> Vec<oduflow_model::provider::Block> {
        self.console.block_list().await.expect("the test's own listing")
    }

    /// Makes a VM of the tests' usual spec (ewr, vc2-1c-1gb, os 2284) under
    /// `label`, as if made outside the run under test; its id.
    pub async fn put_vm(&self, label: &str) -> VultrInstanceId {
        self.put_vm_in(label, "ewr").await
    }

    /// [`Cloud::put_vm`] in another region.
    pub async fn put_vm_in(&self, label: &str, region: &str) -> VultrInstanceId {
        let req = InstanceRequest {
            region: region.into(),
            plan: "vc2-1c-1gb".into(),
            image: ImageSource::Os(2284),
            label: Label(label.to_owned()),
            server: ServerSpec::default(),
        };
        match self.console.instance_create(&req).await {
            Outcome::Accepted(id) => id,
            other => panic!("the test's own create: {other:?}"),
        }
    }

    /// Makes a volume of the tests' usual spec (40 GB high_perf in ewr)
    /// under `label`; its id.
    pub async fn put_block(&self, label: &str) -> VultrBlockId {
        let req = BlockRequest {
            region: "ewr".into(),
            size_gb: 40,
            block_type: VolumeType::HighPerf,
            label: Label(label.to_owned()),
        };
        match self.console.block_create(&req).await {
            Outcome::Accepted(id) => id,
            other => panic!("the test's own create: {other:?}"),
        }
    }

    /// Deletes a VM behind the run's back (in the console).
    pub async fn delete_vm(&self, id: &VultrInstanceId) {
        self.console.instance_delete(id).await.expect("the test's own delete");
    }
}

fn client_on(base_url: &str, key: &str, budget: Arc<dyn RateBudget>) -> VultrClient {
    VultrClient::with_budget(
        VultrConfig {
            base_url: base_url.to_owned(),
            rate_per_sec: 100_000,
            // Vultr's own default: a scripted hold outlasting a short timeout
            // would become a lost answer, another path than the test's.
            request_timeout_ms: crate::DEFAULT_REQUEST_TIMEOUT_MS,
            backoff_base_ms: 5,
            backoff_max_ms: 20,
            ..VultrConfig::new(SecretString::from(key.to_owned()))
        },
        budget,
    )
    .expect("a client on the simulator")
}

/// The test clients' rate budget: the usual slots, and a gate a test closes
/// on one use of them.
#[derive(Debug)]
pub struct Slots {
    slots: LocalBudget,
    /// While set, every reservation of this use waits for a permit.
    held: Mutex<Option<(SlotUse, Arc<Semaphore>)>>,
    /// Reservations waiting at the closed gate now. An ask the client gave
    /// up on ([`crate::budget::BUDGET_ASK_TIMEOUT`]) leaves, so its next ask is not
    /// counted twice.
    waiting: AtomicU32,
    /// Asks that left the gate before it opened (the client gave up on
    /// them): a request then stopped may have been stopped for that.
    given_up: AtomicU32,
}

impl Default for Slots {
    fn default() -> Self {
        let zero = || AtomicU32::new(0);
        Self { slots: LocalBudget::new("test"), held: Mutex::default(), waiting: zero(), given_up: zero() }
    }
}

/// One reservation waiting at the gate, counted until it leaves.
struct Waiting<'a> {
    slots: &'a Slots,
    let_through: bool,
}

impl<'a> Waiting<'a> {
    fn enter(slots: &'a Slots) -> Self {
        slots.waiting.fetch_add(1, Ordering::SeqCst);
        Self { slots, let_through: false }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.slots.waiting.fetch_sub(1, Ordering::SeqCst);
        if !self.let_through {
            self.slots.given_up.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Slots {
    /// Closes the gate on `use_`: such requests wait at their slot until
    /// [`Slots::open`]. Open it within [`crate::budget::BUDGET_ASK_TIMEOUT`] of their
    /// arrival, or the client gives up asking the budget and asks again
    /// (three times at most, then the request is not sent for that).
    pub fn hold(&self, use_: SlotUse) {
        *self.held.lock().expect("the slot gate") = Some((use_, Arc::new(Semaphore::new(0))));
    }

    /// Opens the gate for the requests waiting at it and every later one.
    pub fn open(&self) {
        if let Some((_, gate)) = self.held.lock().expect("the slot gate").take() {
            gate.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }

    /// How many requests wait at the closed gate now.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::SeqCst)
    }

    /// How many asks left the closed gate before it opened. A test whose
    /// requests must be stopped by the run's guard checks it is 0: else a
    /// request may have been stopped by its budget's bounds instead.
    pub fn given_up(&self) -> u32 {
        self.given_up.load(Ordering::SeqCst)
    }

    /// Until `n` requests wait at the gate (at most 10 s).
    pub async fn until_waiting(&self, n: u32) {
        let t = std::time::Instant::now();
        while self.waiting() < n {
            assert!(t.elapsed() < Duration::from_secs(10), "only {} requests reached their slot", self.waiting());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl RateBudget for Slots {
    fn group(&self) -> &str {
        self.slots.group()
    }

    fn reserve(&self, interval: Duration) -> BudgetFuture<'_, Duration> {
        self.slots.reserve(interval)
    }

    fn reserve_for(&self, interval: Duration, use_: SlotUse) -> BudgetFuture<'_, Duration> {
        let gate = match &*self.held.lock().expect("the slot gate") {
            Some((held, gate)) if *held == use_ => Some(gate.clone()),
            _ => None,
        };
        Box::pin(async move {
            if let Some(gate) = gate {
                let mut waiting = Waiting::enter(self);
                gate.acquire().await.map_err(|e| e.to_string())?.forget();
                waiting.let_through = true;
            }
            self.slots.reserve(interval).await
        })
    }

    fn paused_for(&self) -> BudgetFuture<'_, Duration> {
        self.slots.paused_for()
    }

    fn pause(&self, d: Duration) -> BudgetFuture<'_, ()> {
        self.slots.pause(d)
    }

    fn record_wait(&self, waited: Duration) {
        self.slots.record_wait(waited);
    }

    fn flush(&self) -> BudgetFuture<'_, ()> {
        self.slots.flush()
    }
}
