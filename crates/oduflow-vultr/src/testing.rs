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

use crate::{VultrClient, VultrConfig};
use oduflow_model::provider::{BlockRequest, InstanceRequest, Outcome, Provider};
use oduflow_model::{ImageSource, ServerSpec};
use oduflow_model::{Label, VolumeType, VultrBlockId, VultrInstanceId};
use oduflow_sim::{LedgerResource, Op, ResourceKind, Scripted, Sim, SimConfig, SimHandle};
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The key of the test's own client.
const CONSOLE_KEY: &str = "console-of-the-test";

/// The simulator and the keys it accepts.
pub struct Cloud {
    pub sim: SimHandle,
    keys: Mutex<Vec<String>>,
    console: VultrClient,
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
        let console = client_on(&sim.base_url, CONSOLE_KEY);
        Self { sim, keys: Mutex::new(vec![CONSOLE_KEY.to_owned()]), console }
    }

    /// A client with this API key, which the simulator accepts from now on.
    pub fn client(&self, key: &str) -> Arc<VultrClient> {
        self.accept(key);
        Arc::new(client_on(&self.sim.base_url, key))
    }

    /// Accepts `key` (again).
    pub fn accept(&self, key: &str) {
        let mut keys = self.keys.lock().expect("keys");
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_owned());
        }
        self.sim.control().set_api_keys(&keys.iter().map(|k| SecretString::from(k.clone())).collect::<Vec<_>>());
    }

    /// Answers 401 to `key` from now on (a key revoked in the console).
    pub fn revoke(&self, key: &str) {
        let mut keys = self.keys.lock().expect("keys");
        keys.retain(|k| k != key);
        self.sim.control().set_api_keys(&keys.iter().map(|k| SecretString::from(k.clone())).collect::<Vec<_>>());
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

fn client_on(base_url: &str, key: &str) -> VultrClient {
    VultrClient::new(VultrConfig {
        base_url: base_url.to_owned(),
        rate_per_sec: 100_000,
        request_timeout_ms: 2_000,
        backoff_base_ms: 5,
        backoff_max_ms: 20,
        ..VultrConfig::new(SecretString::from(key.to_owned()))
    })
    .expect("a client on the simulator")
}
