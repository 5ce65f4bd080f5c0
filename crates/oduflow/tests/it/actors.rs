//! Who asked, on the command line: every event a changing command writes
//! names its actor: `cli:` and the login name by default, the `actor`
//! setting for a service, or the attestation's `--by`.

use super::*;
use oduflow_model::provider::{BlockRequest, InstanceRequest, Outcome, Provider};

/// A second key of the same simulated account, for the rotation.
const KEY2: &str = "test-key-ACTOR-2";

/// The login the commands run as.
const LOGIN: &str = "dana";

/// Runs `args` as `dana` with `env_vars` set; it must succeed and write
/// events, each naming `who`.
async fn named(env: &Env, store: &Store, args: &[&str], env_vars: &[(&str, &str)], who: &str) {
    let before = store.feed_after(0, 1).await.unwrap().head;
    let mut c = env.cmd(args);
    c.env("USER", LOGIN).env_remove("ODUFLOW_ACTOR");
    for (k, v) in env_vars {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let wrote = store.feed_after(before, 1000).await.unwrap().events;
    assert!(!wrote.is_empty(), "{args:?} wrote no event");
    for e in &wrote {
        assert_eq!(e.actor.as_deref(), Some(who), "{args:?}: {} {}", e.kind, e.detail);
    }
}

/// Clients whose VM create is answered 500 without being made: blocked
/// `uncertain_create`.
fn lost(env: &Env, names: &[&str]) {
    env.sim.set_faults(oduflow_sim::Faults::server_errors_on(vec![oduflow_sim::Op::InstanceCreate])).unwrap();
    for n in names {
        env.create_client_without_preflight(n);
    }
    env.ok(&["worker", "--until-settled"]);
    env.sim.set_faults(oduflow_sim::Faults::default()).unwrap();
}

/// A VM made in the console for `hostname` under `label`; its id.
async fn console_vm(env: &Env, hostname: &str, label: Label) -> String {
    let req = InstanceRequest {
        region: "ewr".into(),
        plan: "vc2-1c-1gb".into(),
        image: ImageSource::Os(2284),
        label,
        server: ServerSpec { hostname: hostname.into(), ..Default::default() },
    };
    let Outcome::Accepted(id) = env.console().instance_create(&req).await else { panic!("create") };
    // Past the simulator's 404 window and listing lag after a create.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    id.0
}

/// The id of `name`'s client.
async fn id_of(store: &Store, name: &str) -> ClientId {
    store.client_get(name).await.unwrap().unwrap().id
}

/// Every changing command, run once with success: each event it wrote
/// names who asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_a_changing_command_writes_names_who_asked() {
    let dir = tempfile::tempdir().unwrap();
    let url = oduflow_store::testing::sqlite_url(dir.path());
    let env = Env { dir, url, sim: start_sim_with(sim_config().with_key(KEY2)).await };
    env.ok(&["init"]);
    let store = env.store().await;
    let me = format!("cli:{LOGIN}");
    let service = [("ODUFLOW_ACTOR", "billing-sync")];
    named(&env, &store, &client_create_args("acme", &[]), &service, "billing-sync").await;
    env.ok(&["worker", "--until-settled"]);
    named(&env, &store, &["client", "update", "acme", "--tag", "audited"], &[], &me).await;
    env.ok(&["worker", "--until-settled"]);
    named(&env, &store, &["reconcile", "acme"], &[], &me).await;
    named(&env, &store, &["bulk", "reconcile", "--name", "acme"], &[], &me).await;
    named(&env, &store, &["queue", "pause"], &[], &me).await;
    named(&env, &store, &["queue", "resume"], &[], &me).await;
    named(&env, &store, &["token", "create", "erp"], &[], &me).await;
    named(&env, &store, &["token", "revoke", "erp"], &[], &me).await;
    let key = [("ODUFLOW_WEBHOOK_KEY", "webhook-key-for-the-actors-0123456789")];
    named(&env, &store, &["webhook", "add", "hooks", "http://127.0.0.1:9/"], &key, &me).await;
    named(&env, &store, &["webhook", "replay", "hooks"], &[], &me).await;
    named(&env, &store, &["webhook", "remove", "hooks"], &[], &me).await;
    env.ok(&["worker", "--until-settled"]);

    lost(&env, &["lost-1", "lost-2", "lost-3", "lost-4"]);
    let attest = ["--kind", "vm", "--by", "alice", "--reason", "checked the console"];
    named(&env, &store, &[&["abandon", "lost-1"][..], &attest].concat(), &[], "alice").await;
    let bulk = ["bulk", "abandon", "--name", "lost-2", "--kind", "vm", "--by", "bob", "--why", "checked"];
    named(&env, &store, &bulk, &[], "bob").await;
    let vm = console_vm(&env, "lost-3", Label::from("made-in-the-console")).await;
    named(&env, &store, &["adopt", "lost-3", "--kind", "vm", "--id", &vm], &[], &me).await;
    // Orphans: one labelled for lost-4's VM (adopted into it), one for
    // acme's (deleted); the inventory pass records them.
    let adoptable =
        console_vm(&env, "lost-4", Label::new_dispatch(&id_of(&store, "lost-4").await, ResourceKind::Vm)).await;
    let stray = console_vm(&env, "acme", Label::new_dispatch(&id_of(&store, "acme").await, ResourceKind::Vm)).await;
    named(&env, &store, &["reconcile", "--all"], &[], &me).await;
    named(&env, &store, &["orphan", "adopt", &adoptable], &[], &me).await;
    let delete = ["orphan", "delete", &stray, "--by", "carol", "--reason", "a stray copy"];
    named(&env, &store, &delete, &[], "carol").await;

    // A server made in the console with its volume: imported, promoted.
    let console = env.console();
    let server = InstanceRequest {
        region: "ewr".into(),
        plan: "vc2-1c-1gb".into(),
        image: ImageSource::Os(2284),
        label: Label::from("legacy-1"),
        server: ServerSpec { hostname: "legacy-1".into(), ..Default::default() },
    };
    let Outcome::Accepted(legacy) = console.instance_create(&server).await else { panic!("server") };
    let block =
        BlockRequest { region: "ewr".into(), size_gb: 40, block_type: VolumeType::HighPerf, label: Label::from("l") };
    let Outcome::Accepted(volume) = console.block_create(&block).await else { panic!("block") };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let attached = console.block_attach(&volume, &legacy).await;
    assert!(matches!(attached, Outcome::Accepted(_)), "{attached:?}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    named(&env, &store, &["import", "--label", "legacy-*"], &[], &me).await;
    named(&env, &store, &["client", "promote", "legacy-1"], &[], &me).await;

    named(&env, &store, &["restore", "declare", "--reason", "copied back"], &[], &me).await;
    named(&env, &store, &["reconcile", "--all"], &[], &me).await;
    env.ok(&["worker", "--until-settled"]);
    named(&env, &store, &["credentials", "rotate"], &[("VULTR_API_KEY", KEY2)], &me).await;
    named(&env, &store, &["client", "delete", "acme"], &[], &me).await;

    // The audit export: every event once, in feed order, pages of 7, with
    // who asked.
    let export = env.ok(&["events", "--export", "--limit", "7"]);
    let lines: Vec<serde_json::Value> = export.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let total = oduflow_store::testing::table_count(&store, "events").await;
    assert_eq!(lines.len() as i64, total, "{export}");
    assert!(lines.windows(2).all(|w| w[0]["position"].as_i64() < w[1]["position"].as_i64()), "{export}");
    let created = lines.iter().find(|e| e["kind"] == "client_created" && e["client"] == "acme").unwrap();
    assert_eq!(created["actor"], "billing-sync", "{created}");
    let o = env.run(&["events", "--export", "--wait", "1"]);
    assert_eq!(o.status.code(), Some(2), "an export does not wait");
}
