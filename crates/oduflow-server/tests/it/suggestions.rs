//! Every suggestion works: for each blocked reason, each command
//! `resolutions` suggests (what `client show`, the API and the dashboard
//! print) is run as written, after the fix its "when" text describes, in a
//! world of its own; the client must then end ready, deleted, or blocked for
//! another, explained reason. A suggested command this file cannot run (a
//! command that does not exist, a placeholder it does not know) fails.

use oduflow_engine::memory::MemoryProvider;
use oduflow_engine::{EngineConfig, RunOutcome, SystemClock, Worker, operator};
use oduflow_model::identity::{IdentityAdapter, IdentityTarget, Ownership, Presence, Step};
use oduflow_model::provider::Instance;
use oduflow_model::*;
use oduflow_server::resolve::{Resolution, resolutions};
use oduflow_store::{ClientRow, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAME: &str = "acme";

fn now() -> i64 {
    use oduflow_engine::Clock;
    SystemClock.now_ms()
}

fn key(s: &str) -> KeyFingerprint {
    KeyFingerprint::of_key(&secrecy::SecretString::from(s.to_owned()))
}

/// An identity adapter that can be told to fail.
#[derive(Default)]
struct Vpn {
    present: Mutex<bool>,
    failing: AtomicBool,
}

impl IdentityAdapter for Vpn {
    fn name(&self) -> &str {
        "vpn"
    }
    fn ensure<'a>(&'a self, _t: &'a IdentityTarget, _own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            if self.failing.load(Ordering::SeqCst) {
                return Err("peer API answered 503".into());
            }
            *self.present.lock().unwrap() = true;
            Ok("peer added".into())
        })
    }
    fn check<'a>(&'a self, _t: &'a IdentityTarget, _own: &'a dyn Ownership) -> Step<'a, Presence> {
        Box::pin(async move {
            Ok(if *self.present.lock().unwrap() { Presence::Present("peer".into()) } else { Presence::Absent })
        })
    }
    fn remove<'a>(&'a self, _t: &'a IdentityTarget, _own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            *self.present.lock().unwrap() = false;
            Ok("peer removed".into())
        })
    }
}

/// One world: a SQLite store, a memory provider, a worker, one client.
struct World {
    _dir: tempfile::TempDir,
    store: Store,
    p: Arc<MemoryProvider>,
    w: Worker<MemoryProvider>,
    /// What `ID` stands for in an `adopt` suggestion.
    id: Mutex<Option<String>>,
}

fn config() -> EngineConfig {
    EngineConfig {
        worker_id: "suggestions".into(),
        poll_interval_ms: 0,
        retry_base_ms: 0,
        observations_max: 3,
        attempts_max: 3,
        ready_wait_ms: 200,
        ..EngineConfig::default()
    }
}

impl World {
    async fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&oduflow_store::testing::sqlite_url(dir.path()), true).await.unwrap();
        store.migrate().await.unwrap();
        let p = Arc::new(MemoryProvider::new(key("k1")));
        let w = Worker::new(store.clone(), p.clone(), config(), Arc::new(SystemClock));
        World { _dir: dir, store, p, w, id: Mutex::new(None) }
    }

    fn with_provider(&mut self, p: Arc<MemoryProvider>) {
        self.p = p.clone();
        self.w = Worker::new(self.store.clone(), p, config(), Arc::new(SystemClock));
    }

    fn with_adapter(&mut self, a: Option<Arc<Vpn>>) {
        let w = Worker::new(self.store.clone(), self.p.clone(), config(), Arc::new(SystemClock));
        self.w = match a {
            Some(a) => w.with_adapters(vec![a as Arc<dyn IdentityAdapter>]),
            None => w,
        };
    }

    async fn create(&self) {
        let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
        self.store.client_create(&ClientName::parse(NAME).unwrap(), &spec, now(), 3).await.unwrap();
    }

    async fn client(&self) -> ClientRow {
        self.store.client_get(NAME).await.unwrap().unwrap()
    }

    /// Runs jobs until none is runnable (bounded; jobs waiting for a poll
    /// delay become runnable within it).
    async fn drain(&self) {
        let t = Instant::now();
        let mut idle = 0;
        while idle < 3 {
            assert!(t.elapsed() < Duration::from_secs(20), "never settled: {:?}", self.client().await);
            match self.w.run_next().await.unwrap() {
                RunOutcome::Idle => {
                    if self.store.queue_status(now()).await.unwrap().is_settled() {
                        return;
                    }
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(120)).await;
                }
                _ => idle = 0,
            }
        }
    }

    /// Runs single jobs until `f` holds (bounded).
    async fn step_until(&self, what: &str, f: impl Fn(&World) -> bool) {
        let t = Instant::now();
        while !f(self) {
            assert!(t.elapsed() < Duration::from_secs(20), "never reached: {what}");
            if matches!(self.w.run_next().await.unwrap(), RunOutcome::Idle) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    async fn blocked(&self, reason: BlockedReason) -> Vec<Resolution> {
        self.drain().await;
        let c = self.client().await;
        assert_eq!((c.infra.status, c.infra.blocked_reason), (ClientStatus::Blocked, Some(reason)), "{c:?}");
        let receipts = self.store.receipts_for_client(&c.id).await.unwrap();
        let out = resolutions(&c, &receipts);
        assert!(!out.is_empty(), "{reason:?} suggests nothing");
        out
    }

    fn vm(&self) -> Option<Instance> {
        self.p.with(|s| s.instances.values().next().cloned())
    }

    /// Runs a suggested command as an operator would type it.
    async fn run(&self, command: &str) {
        let id = self.id.lock().unwrap().clone();
        let words: Vec<String> = command
            .split_whitespace()
            .map(|w| match w {
                "WHO" => "ops".to_owned(),
                "WHY" => "checked-the-console".to_owned(),
                "ID" => id.clone().unwrap_or_else(|| panic!("{command}: no id for ID")),
                // The plan the fix below leaves the server with (or an
                // upgrade of the memory provider's).
                "PLAN" => "vc2-2c-4gb".to_owned(),
                w => {
                    assert!(!w.chars().any(|c| c.is_ascii_uppercase()), "{command}: unknown placeholder {w}");
                    w.to_owned()
                }
            })
            .collect();
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let (s, p, t) = (&self.store, self.p.as_ref(), now());
        let result = match w.as_slice() {
            ["oduflow", "reconcile", n] => {
                operator::reconcile(s, p, n, false, operator::Actor { by: "ops", now_ms: t, attempts_max: 3 })
                    .await
                    .map(drop)
            }
            ["oduflow", "reconcile", n, "--new-dispatch"] => {
                operator::reconcile(s, p, n, true, operator::Actor { by: "ops", now_ms: t, attempts_max: 3 })
                    .await
                    .map(drop)
            }
            ["oduflow", "adopt", n, "--kind", k, "--id", id] => operator::adopt(
                s,
                p,
                n,
                ResourceKind::parse(k).unwrap(),
                id,
                operator::Actor { by: "ops", now_ms: t, attempts_max: 3 },
            )
            .await
            .map(drop),
            ["oduflow", "abandon", n, "--kind", k, "--by", by, "--reason", why] => operator::abandon(
                s,
                n,
                ResourceKind::parse(k).unwrap(),
                why,
                operator::Actor { by, now_ms: t, attempts_max: 3 },
            )
            .await
            .map(drop),
            ["oduflow", "client", "update", n, "--plan", plan] => {
                let u = oduflow_model::update::SpecUpdate { plan: Some((*plan).to_owned()), ..Default::default() };
                s.client_update(n, &u, t, 3).await.unwrap();
                Ok(())
            }
            ["oduflow", "client", "delete", n] => {
                s.client_delete(n, t, 3).await.unwrap();
                Ok(())
            }
            ["oduflow", "orphan", "adopt", id] => {
                operator::orphan_adopt(s, p, id, operator::Actor { by: "ops", now_ms: t, attempts_max: 3 })
                    .await
                    .map(drop)
            }
            ["oduflow", "orphan", "delete", id, "--by", by, "--reason", why] => {
                operator::orphan_delete(s, p, id, why, operator::Actor { by, now_ms: t, attempts_max: 3 })
                    .await
                    .map(drop)
            }
            ["oduflow", "credentials", "rotate"] => {
                match operator::credentials_rotate(s, p, operator::Actor { by: "ops", now_ms: t, attempts_max: 3 })
                    .await
                {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(unproven)) => panic!("{command}: refused {unproven:?}"),
                    Err(e) => Err(e),
                }
            }
            _ => panic!("a suggested command that does not exist: {command}"),
        };
        if let Err(e) = result {
            panic!("{command} failed: {e}");
        }
    }

    /// After the suggestion: ready, deleted, or another explained reason.
    async fn resolved(&self, was: BlockedReason, command: &str) {
        self.drain().await;
        let c = self.client().await;
        let ok = match c.infra.status {
            ClientStatus::Ready | ClientStatus::Deleted => true,
            ClientStatus::Blocked => c.infra.blocked_reason != Some(was) && c.infra.blocked_detail.is_some(),
            _ => false,
        };
        assert!(ok, "after `{command}` for {was:?}: {c:?}");
        if c.infra.status == ClientStatus::Ready {
            let (vm, vol) = (c.infra.vm_id.clone().unwrap(), c.infra.volume_id.clone().unwrap());
            self.p.with(|s| {
                assert_eq!(s.blocks[vol.as_str()].attached_to_instance.as_ref(), Some(&vm), "ready but not attached");
            });
        }
    }
}

/// Builds a world blocked for `reason` with `setup`, and for each suggestion
/// (each in a fresh world) applies `fix`, runs the suggestion as written
/// and checks the outcome.
macro_rules! every_suggestion {
    ($reason:expr, $setup:expr, |$w:ident, $cmd:ident| $fix:expr) => {{
        let count = {
            let $w = $setup.await;
            $w.blocked($reason).await.len()
        };
        for i in 0..count {
            #[allow(unused_mut)]
            let mut $w = $setup.await;
            let $cmd = $w.blocked($reason).await[i].command.clone();
            #[allow(clippy::no_effect, clippy::unused_unit)]
            $fix;
            $w.run(&$cmd).await;
            $w.resolved($reason, &$cmd).await;
            println!("{:?}: `{}` resolves it", $reason, $cmd);
        }
    }};
}

async fn ready_world() -> World {
    let w = World::new().await;
    w.create().await;
    w.drain().await;
    assert_eq!(w.client().await.infra.status, ClientStatus::Ready);
    w
}

/// A restore lost the client's receipts; the VM its first provisioning
/// made lives on under a label naming it, in another region than the spec
/// says: it cannot be adopted as it is, and no second VM is made beside it.
#[tokio::test]
async fn labelled_orphan() {
    let setup = || async {
        let w = World::new().await;
        w.create().await;
        let c = w.client().await;
        w.p.with(|s| {
            s.put_vm("vm-lost", Label::new_dispatch(&c.id, ResourceKind::Vm).as_str());
            s.instances.get_mut("vm-lost").unwrap().region = "ams".into();
        });
        w.store.restore_declare("test: restored", now()).await.unwrap();
        operator::inventory(&w.store, w.p.as_ref(), now()).await.unwrap();
        w
    };
    every_suggestion!(BlockedReason::LabelledOrphan, setup(), |w, cmd| {
        if cmd.contains("adopt") {
            // It is the client's after all: moved back where the spec says.
            w.p.with(|s| s.instances.get_mut("vm-lost").unwrap().region = "ewr".into());
        } else if !cmd.contains("delete") {
            // Deleted in the console, and the inventory no longer lists it.
            w.p.with(|s| s.instances.remove("vm-lost"));
            operator::inventory(&w.store, w.p.as_ref(), now()).await.unwrap();
        }
    });
}

/// A plan the memory provider does not list as an upgrade.
#[tokio::test]
async fn update_rejected() {
    let setup = || async {
        let w = ready_world().await;
        let u = oduflow_model::update::SpecUpdate { plan: Some("vc2-9c-9gb".into()), ..Default::default() };
        w.store.client_update(NAME, &u, now(), 3).await.unwrap();
        w
    };
    every_suggestion!(BlockedReason::UpdateRejected, setup(), |w, cmd| {
        if cmd.contains("reconcile") {
            // The cause fixed outside oduflow: Vultr now offers the plan.
            w.p.with(|s| s.upgrade_plans = vec!["vc2-9c-9gb".into()]);
        }
    });
}

/// The PATCH was applied, its answer lost, and then the plan was put back
/// (in the console, say): reads never show the change.
#[tokio::test]
async fn uncertain_update() {
    let setup = || async {
        let w = ready_world().await;
        w.p.with(|s| s.lose_update_responses = 1);
        let u = oduflow_model::update::SpecUpdate { plan: Some("vc2-2c-4gb".into()), ..Default::default() };
        w.store.client_update(NAME, &u, now(), 3).await.unwrap();
        w.step_until("the PATCH", |w| w.vm().is_some_and(|v| v.plan == "vc2-2c-4gb")).await;
        w.p.with(|s| s.instances.values_mut().next().unwrap().plan = "vc2-1c-1gb".into());
        w
    };
    every_suggestion!(BlockedReason::UncertainUpdate, setup(), |w, _cmd| ());
}

#[tokio::test]
async fn create_rejected() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.reject_next_create = Some((400, "Invalid plan chosen.".into())));
        w.create().await;
        w
    };
    every_suggestion!(BlockedReason::CreateRejected, setup(), |w, _cmd| ());
}

#[tokio::test]
async fn attach_rejected() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.reject_next_attach = Some((400, "Block storage volume is already attached".into())));
        w.create().await;
        w
    };
    every_suggestion!(BlockedReason::AttachRejected, setup(), |w, _cmd| ());
}

#[tokio::test]
async fn uncertain_create() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.unknown_unapplied_creates = 1);
        w.create().await;
        w
    };
    every_suggestion!(BlockedReason::UncertainCreate, setup(), |w, cmd| {
        if cmd.contains("abandon") {
            // "only if you have checked that it was never created": true here.
        } else {
            // The VM turns up after all (reconcile finds it under its label;
            // adopt takes the id the operator found in the console).
            let c = w.client().await;
            let r = w.store.receipts_for_client(&c.id).await.unwrap();
            let label = r.iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap().label.clone();
            let id = w.p.with(|s| {
                let id = "found-in-console".to_owned();
                s.put_vm(&id, label.as_str());
                id
            });
            *w.id.lock().unwrap() = Some(id);
        }
    });
}

#[tokio::test]
async fn uncertain_attach() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.unknown_unapplied_attaches = 1);
        w.create().await;
        w
    };
    every_suggestion!(BlockedReason::UncertainAttach, setup(), |w, cmd| {
        if !cmd.contains("abandon") {
            // The attach was applied late: reconcile reads it.
            w.p.with(|s| {
                let vm = s.instances.keys().next().cloned().unwrap();
                s.blocks.values_mut().next().unwrap().attached_to_instance = Some(VultrInstanceId(vm));
            });
        }
    });
}

#[tokio::test]
async fn duplicate_matches() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.lose_create_responses = 1);
        w.create().await;
        // The lost create was applied; a second VM carries the same label.
        w.step_until("the VM create", |w| w.vm().is_some()).await;
        w.p.with(|s| {
            let mut twin = s.instances.values().next().cloned().unwrap();
            twin.id = VultrInstanceId("twin".into());
            s.instances.insert("twin".into(), twin);
        });
        w
    };
    every_suggestion!(BlockedReason::DuplicateMatches, setup(), |w, _cmd| ());
}

#[tokio::test]
async fn config_mismatch() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.lose_create_responses = 1);
        w.create().await;
        // Someone resized the VM before it was adopted by its label.
        w.step_until("the VM create", |w| w.vm().is_some()).await;
        w.p.with(|s| s.instances.values_mut().next().unwrap().plan = "vc2-2c-4gb".into());
        w
    };
    every_suggestion!(BlockedReason::ConfigMismatch, setup(), |w, cmd| {
        if cmd.contains("reconcile") {
            w.p.with(|s| s.instances.values_mut().next().unwrap().plan = "vc2-1c-1gb".into());
        }
    });
}

#[tokio::test]
async fn known_resource_missing() {
    let setup = || async {
        let w = ready_world().await;
        let gone = w.p.with(|s| {
            let (id, vm) = s.instances.pop_first().unwrap();
            for b in s.blocks.values_mut() {
                b.attached_to_instance = None;
            }
            (id, vm)
        });
        w.p.with(|s| s.calls.push(format!("test removed {}", gone.0)));
        *w.id.lock().unwrap() = Some(gone.0.clone());
        // The restored copy, or an operator, asks it to look again.
        operator::reconcile(
            &w.store,
            w.p.as_ref(),
            NAME,
            false,
            operator::Actor { by: "ops", now_ms: now(), attempts_max: 3 },
        )
        .await
        .unwrap();
        w
    };
    every_suggestion!(BlockedReason::KnownResourceMissing, setup(), |w, cmd| {
        if cmd.contains("reconcile") {
            // The 404 was the provider's lag: the VM is there again.
            let id = w.id.lock().unwrap().clone().unwrap();
            w.p.with(|s| s.put_vm(&id, ""));
            let c = w.client().await;
            let label = w
                .store
                .receipts_for_client(&c.id)
                .await
                .unwrap()
                .into_iter()
                .find(|r| r.resource_kind == ResourceKind::Vm)
                .unwrap()
                .label;
            w.p.with(|s| s.instances.get_mut(&id).unwrap().label = label.to_string());
        }
    });
}

/// A VM the provider answered with an id for, removed before any GET
/// showed it: `keep` puts it back (the 404 was lag), else it stays gone.
fn lost_vm(w: &World) -> Instance {
    w.p.with(|s| s.instances.pop_first().unwrap().1)
}

fn put_back(w: &World, vm: &Instance) {
    w.p.with(|s| s.instances.insert(vm.id.0.clone(), vm.clone()));
}

/// The recorded VM never showed: `client delete` ends at another reason
/// (`uncertain_delete`, whose own suggestions are tested below) and
/// `abandon` on an attestation starts a new dispatch.
#[tokio::test]
async fn known_resource_missing_never_seen() {
    let setup = || async {
        let w = World::new().await;
        w.create().await;
        w.step_until("the VM create", |w| w.vm().is_some()).await;
        let vm = lost_vm(&w);
        (w, vm)
    };
    let count = {
        let (w, _) = setup().await;
        w.blocked(BlockedReason::KnownResourceMissing).await.len()
    };
    assert_eq!(count, 3, "reconcile, client delete, abandon");
    for i in 0..count {
        let (w, vm) = setup().await;
        let cmd = w.blocked(BlockedReason::KnownResourceMissing).await[i].command.clone();
        if cmd.contains("reconcile") {
            put_back(&w, &vm);
        }
        w.run(&cmd).await;
        w.resolved(BlockedReason::KnownResourceMissing, &cmd).await;
    }
}

/// Deleting a client whose VM's id was answered but never seen: it may
/// still come, so only a GET that shows it (then DELETE, then 404) or an
/// attestation ends it.
#[tokio::test]
async fn uncertain_delete_never_seen() {
    let setup = || async {
        let w = World::new().await;
        w.create().await;
        w.step_until("the VM create", |w| w.vm().is_some()).await;
        let vm = lost_vm(&w);
        w.store.client_delete(NAME, now(), 3).await.unwrap();
        (w, vm)
    };
    let count = {
        let (w, _) = setup().await;
        w.blocked(BlockedReason::UncertainDelete).await.len()
    };
    assert_eq!(count, 2, "reconcile, abandon");
    for i in 0..count {
        let (w, vm) = setup().await;
        let cmd = w.blocked(BlockedReason::UncertainDelete).await[i].command.clone();
        if cmd.contains("reconcile") {
            put_back(&w, &vm);
        }
        w.run(&cmd).await;
        w.resolved(BlockedReason::UncertainDelete, &cmd).await;
        assert_eq!(w.client().await.infra.status, ClientStatus::Deleted);
    }
}

/// Deleting a client whose VM create has an unknown outcome and nothing
/// under its label: absence from a listing proves nothing, so again a
/// sighting or an attestation.
#[tokio::test]
async fn uncertain_delete_of_an_unknown_create() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.unknown_unapplied_creates = 1);
        w.create().await;
        w.step_until("the VM receipt", |w| w.p.with(|s| s.calls.iter().any(|c| c == "POST /instances"))).await;
        w.store.client_delete(NAME, now(), 3).await.unwrap();
        w
    };
    every_suggestion!(BlockedReason::UncertainDelete, setup(), |w, cmd| {
        if cmd.contains("reconcile") {
            // It was created after all and shows up under its label.
            let c = w.client().await;
            let label = w
                .store
                .receipts_for_client(&c.id)
                .await
                .unwrap()
                .into_iter()
                .find(|r| r.resource_kind == ResourceKind::Vm)
                .unwrap()
                .label;
            w.p.with(|s| s.put_vm("late", label.as_str()));
        }
    });
}

#[tokio::test]
async fn foreign_attachment() {
    let setup = || async {
        let w = World::new().await;
        w.create().await;
        // Before the attach: the volume is attached to someone else's VM.
        w.step_until("both resources recorded", |w| w.p.with(|s| s.instances.len() == 1 && s.blocks.len() == 1)).await;
        w.p.with(|s| {
            let mut other = s.instances.values().next().cloned().unwrap();
            other.id = VultrInstanceId("someone-else".into());
            other.label = "not-ours".into();
            s.instances.insert("someone-else".into(), other);
            s.blocks.values_mut().next().unwrap().attached_to_instance = Some(VultrInstanceId("someone-else".into()));
        });
        w
    };
    every_suggestion!(BlockedReason::ForeignAttachment, setup(), |w, _cmd| {
        w.p.with(|s| s.blocks.values_mut().next().unwrap().attached_to_instance = None);
    });
}

#[tokio::test]
async fn uncertain_delete() {
    let setup = || async {
        let w = ready_world().await;
        w.p.with(|s| s.deletes_not_applied = true);
        w.store.client_delete(NAME, now(), 3).await.unwrap();
        w
    };
    every_suggestion!(BlockedReason::UncertainDelete, setup(), |w, _cmd| {
        // The provider gets round to it.
        w.p.with(|s| s.deletes_not_applied = false);
    });
}

#[tokio::test]
async fn credential_changed() {
    let setup = || async {
        let mut w = ready_world().await;
        let old = w.p.clone();
        let new = Arc::new(MemoryProvider::new(key("k2")));
        old.with(|a| {
            new.with(|b| {
                b.instances = a.instances.clone();
                b.blocks = a.blocks.clone();
            })
        });
        w.with_provider(new);
        w.store.client_delete(NAME, now(), 3).await.unwrap();
        *w.id.lock().unwrap() = None;
        // Keep the old provider for the "back to the old key" case.
        old.with(|s| s.calls.push("old key".into()));
        (w, old)
    };
    let count = {
        let (w, _) = setup().await;
        w.blocked(BlockedReason::CredentialChanged).await.len()
    };
    assert_eq!(count, 2);
    for i in 0..count {
        let (mut w, old) = setup().await;
        let cmd = w.blocked(BlockedReason::CredentialChanged).await[i].command.clone();
        if cmd.contains("reconcile") {
            // "if VULTR_API_KEY is again the key this record is bound to".
            w.with_provider(old);
        }
        w.run(&cmd).await;
        w.resolved(BlockedReason::CredentialChanged, &cmd).await;
        assert_eq!(w.client().await.infra.status, ClientStatus::Deleted);
        println!("credential_changed: `{cmd}` resolves it");
    }
}

#[tokio::test]
async fn delete_refused() {
    let setup = || async {
        let w = ready_world().await;
        w.p.with(|s| s.refuse_deletes = Some((500, "Unable to destroy server: Server is currently locked".into())));
        w.store.client_delete(NAME, now(), 3).await.unwrap();
        w
    };
    every_suggestion!(BlockedReason::DeleteRefused, setup(), |w, _cmd| w.p.with(|s| s.refuse_deletes = None));
}

#[tokio::test]
async fn provider_unavailable() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| {
            s.fail_reads = Some(provider::ProviderError::Status { status: 401, message: "Invalid API token.".into() })
        });
        w.create().await;
        w
    };
    every_suggestion!(BlockedReason::ProviderUnavailable, setup(), |w, _cmd| w.p.with(|s| s.fail_reads = None));
}

#[tokio::test]
async fn preflight_failed() {
    let setup = || async {
        let w = World::new().await;
        // The catalog lacks the spec's plan: nothing may be created.
        w.p.with(|s| {
            let mut c = oduflow_engine::memory::MemoryState::usual_catalog();
            c.available_plans.clear();
            s.catalog = Some(c);
        });
        w.create().await;
        w.drain().await;
        w.p.with(|s| assert!(s.instances.is_empty() && s.blocks.is_empty(), "created despite the preflight"));
        w
    };
    every_suggestion!(BlockedReason::PreflightFailed, setup(), |w, cmd| {
        if cmd.contains("reconcile") {
            // The plan is back in stock.
            w.p.with(|s| s.catalog = None);
        }
    });
}

#[tokio::test]
async fn not_ready() {
    let setup = || async {
        let w = World::new().await;
        w.p.with(|s| s.vms_stay_pending = true);
        w.create().await;
        w
    };
    every_suggestion!(BlockedReason::NotReady, setup(), |w, cmd| {
        if cmd.contains("reconcile") {
            w.p.with(|s| {
                s.vms_stay_pending = false;
                for i in s.instances.values_mut() {
                    i.status = "active".into();
                    i.server_status = "ok".into();
                }
            });
        }
    });
}

#[tokio::test]
async fn adapter_unconfigured() {
    let setup = || async {
        let vpn = Arc::new(Vpn::default());
        let mut w = World::new().await;
        w.with_adapter(Some(vpn.clone()));
        w.create().await;
        w.drain().await;
        assert_eq!(w.client().await.infra.status, ClientStatus::Ready);
        // The adapter's block is dropped from the configuration.
        w.with_adapter(None);
        w.store.client_delete(NAME, now(), 3).await.unwrap();
        (w, vpn)
    };
    let count = {
        let (w, _) = setup().await;
        w.blocked(BlockedReason::AdapterUnconfigured).await.len()
    };
    for i in 0..count {
        let (mut w, vpn) = setup().await;
        let cmd = w.blocked(BlockedReason::AdapterUnconfigured).await[i].command.clone();
        // "after putting the adapter back into the configuration".
        w.with_adapter(Some(vpn.clone()));
        w.run(&cmd).await;
        w.resolved(BlockedReason::AdapterUnconfigured, &cmd).await;
        assert!(!*vpn.present.lock().unwrap(), "the identity outlived its client");
    }
}

#[tokio::test]
async fn adapter_failed() {
    let setup = || async {
        let vpn = Arc::new(Vpn::default());
        vpn.failing.store(true, Ordering::SeqCst);
        let mut w = World::new().await;
        w.with_adapter(Some(vpn.clone()));
        w.create().await;
        (w, vpn)
    };
    let count = {
        let (w, _) = setup().await;
        w.blocked(BlockedReason::AdapterFailed).await.len()
    };
    for i in 0..count {
        let (w, vpn) = setup().await;
        let cmd = w.blocked(BlockedReason::AdapterFailed).await[i].command.clone();
        vpn.failing.store(false, Ordering::SeqCst);
        w.run(&cmd).await;
        w.resolved(BlockedReason::AdapterFailed, &cmd).await;
        assert!(*vpn.present.lock().unwrap());
    }
}

#[tokio::test]
async fn attempts_exhausted() {
    let setup = || async {
        let w = World::new().await;
        w.create().await;
        // Each run dies before it finishes (a worker killed every time).
        for _ in 0..3 {
            let t = Instant::now();
            let claim = loop {
                if let Some(c) = w.store.job_claim_next("dying", now()).await.unwrap() {
                    break c;
                }
                assert!(t.elapsed() < Duration::from_secs(10), "the job never came back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            drop(claim);
        }
        w
    };
    every_suggestion!(BlockedReason::AttemptsExhausted, setup(), |w, _cmd| ());
}

/// Every reason in the closed set has a test above.
#[test]
fn every_reason_is_covered() {
    let covered = [
        BlockedReason::CreateRejected,
        BlockedReason::AttachRejected,
        BlockedReason::UncertainCreate,
        BlockedReason::UncertainAttach,
        BlockedReason::DuplicateMatches,
        BlockedReason::ConfigMismatch,
        BlockedReason::KnownResourceMissing,
        BlockedReason::ForeignAttachment,
        BlockedReason::UncertainDelete,
        BlockedReason::CredentialChanged,
        BlockedReason::DeleteRefused,
        BlockedReason::ProviderUnavailable,
        BlockedReason::NotReady,
        BlockedReason::AdapterUnconfigured,
        BlockedReason::AdapterFailed,
        BlockedReason::AttemptsExhausted,
        BlockedReason::PreflightFailed,
        BlockedReason::UpdateRejected,
        BlockedReason::UncertainUpdate,
        // Through the DNS adapter and the simulator's DNS API, running the
        // suggested commands: crates/oduflow/tests/it/dns.rs.
        BlockedReason::DnsRecordForeign,
        BlockedReason::UncertainDnsRecord,
        BlockedReason::LabelledOrphan,
    ];
    for r in BlockedReason::ALL {
        assert!(covered.contains(r), "{r:?} has no suggestion test");
    }
}
