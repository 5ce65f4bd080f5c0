//! Changing a running client, end to end through the CLI, a
//! worker process and the simulator: one PATCH per change receipt, confirmed
//! by a read, never a second allocation; what Vultr cannot do in place is
//! refused before anything is stored.

use super::*;
use oduflow_sim::{Faults, Op};

oduflow_store::on_both_stores!(
    super::super::env_of =>
    an_update_grows_plan_volume_and_tags_with_one_patch_each,
    what_cannot_change_in_place_is_refused_and_changes_nothing,
    a_plan_that_is_not_an_upgrade_blocks_before_any_patch,
    a_lost_patch_answer_is_resolved_by_reading_never_by_resending,
    a_rejected_spec_is_corrected_by_update_and_reconcile,
    a_worker_killed_at_every_change_step_loses_nothing_and_sends_no_second_patch,
    an_adapters_update_command_runs_once_after_a_confirmed_change,
    a_console_change_to_what_no_update_touched_blocks_and_is_not_reverted,
    a_refused_grow_can_go_back_to_the_size_the_volume_has,
    a_reconcile_after_a_refused_change_sends_nothing,
    a_resize_a_restore_discarded_is_not_taken_for_the_copys_change,
    two_grows_within_the_resize_interval_both_apply_and_a_delete_follows,
);

/// PATCH /blocks/{id} requests that reached the simulator, refused ones too.
fn block_patches(env: &Env) -> u64 {
    env.sim.ledger().requests.get("PATCH /v2/blocks/{id}").copied().unwrap_or(0)
}

/// A ready 40 GB client whose grow to 80 GB Vultr refused (over the
/// account's block storage limit): blocked `update_rejected`, one PATCH.
fn refused_grow(env: &Env) {
    env.ok(&["init"]);
    create(env, "acme", &[]);
    settle(env);
    assert_eq!(show(env, "acme")["status"], "ready");
    env.sim.control().set_block_storage_limit(Some(50));
    env.ok(&["client", "update", "acme", "--volume-gb", "80"]);
    settle(env);
    let v = show(env, "acme");
    assert_eq!((v["status"].as_str(), v["blocked_reason"].as_str()), (Some("blocked"), Some("update_rejected")), "{v}");
    assert_eq!(block_patches(env), 1);
}

/// After a refused grow the spec says 80 GB, the volume has 40: going back
/// to the size it has is no shrink. Accepted (through the CLI, as the API),
/// the client is ready again on 40 GB without another PATCH.
async fn a_refused_grow_can_go_back_to_the_size_the_volume_has(env: Env) {
    refused_grow(&env);
    let o = env.run(&["client", "update", "acme", "--volume-gb", "40"]);
    assert!(o.status.success(), "back to the size the volume has: {}", String::from_utf8_lossy(&o.stderr));
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!((v["status"].as_str(), v["volume_gb"].as_i64()), (Some("ready"), Some(40)), "{v}");
    assert_eq!(block_patches(&env), 1, "no PATCH to go back");
    // Below the size it has is still a shrink.
    let o = env.run(&["client", "update", "acme", "--volume-gb", "30"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A definitive refusal is not answered by sending the same PATCH again:
/// `reconcile` reads, and the client stays blocked with the refusal as
/// evidence. Once the cause is fixed, `client update` with the same size is
/// the operator's word: one PATCH on a new receipt.
async fn a_reconcile_after_a_refused_change_sends_nothing(env: Env) {
    refused_grow(&env);
    env.ok(&["reconcile", "acme"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["blocked_reason"], "update_rejected", "{v}");
    assert_eq!(block_patches(&env), 1, "the refused PATCH was sent again");
    env.sim.control().set_block_storage_limit(None);
    env.ok(&["client", "update", "acme", "--volume-gb", "80"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!((v["status"].as_str(), v["volume_gb"].as_i64()), (Some("ready"), Some(80)), "{v}");
    assert_eq!(block_patches(&env), 2);
}

fn create(env: &Env, name: &str, extra: &[&str]) {
    create_in(env, name, ["ewr", "vc2-1c-1gb", "40"], extra);
}

/// `client create NAME` in a region, with a plan and a volume size.
fn create_in(env: &Env, name: &str, [region, plan, gb]: [&str; 3], extra: &[&str]) {
    let mut args = vec!["client", "create", name, "--region", region, "--plan", plan, "--os-id", "2284"];
    args.extend(["--volume-gb", gb]);
    args.extend_from_slice(extra);
    env.ok(&args);
}

fn settle(env: &Env) {
    let o = env.run(&["worker", "--until-settled"]);
    assert!(o.status.success(), "worker: {}", String::from_utf8_lossy(&o.stderr));
}

fn show(env: &Env, name: &str) -> serde_json::Value {
    serde_json::from_str(&env.ok(&["client", "show", name, "--json"])).unwrap()
}

/// `client update --plan --volume-gb --tag`: the generation moves on, one
/// PATCH per resource reaches the simulator, each is confirmed by a read,
/// the client ends ready on the new spec, and nothing was created twice.
async fn an_update_grows_plan_volume_and_tags_with_one_patch_each(env: Env) {
    env.ok(&["init"]);
    create(&env, "acme", &["--tag", "web"]);
    settle(&env);
    let before = show(&env, "acme");
    assert_eq!(before["status"], "ready", "{before}");
    let out =
        env.ok(&["client", "update", "acme", "--plan", "vc2-2c-4gb", "--volume-gb", "80", "--tag", "db", "--json"]);
    let asked: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(asked["generation"], before["generation"].as_i64().unwrap() + 1, "{out}");
    assert_eq!(asked["status"], "provisioning", "{out}");
    settle(&env);
    let after = show(&env, "acme");
    assert_eq!(after["status"], "ready", "{after}");
    assert_eq!(after["vm_id"], before["vm_id"], "the same server, changed in place");
    assert_eq!(after["volume_id"], before["volume_id"]);
    let ledger = env.sim.ledger();
    assert!(ledger.creates_per_label.values().all(|n| *n == 1), "{:?}", ledger.creates_per_label);
    assert_eq!(ledger.creates_per_label.len(), 2, "one VM, one volume");
    assert_eq!(ledger.instance_patch_bodies.len(), 1, "{:?}", ledger.instance_patch_bodies);
    let body = &ledger.instance_patch_bodies[0]["body"];
    assert_eq!(body, &serde_json::json!({ "plan": "vc2-2c-4gb", "tags": ["db"] }), "only what changes");
    assert_eq!(ledger.block_patch_bodies.len(), 1, "{:?}", ledger.block_patch_bodies);
    assert_eq!(ledger.block_patch_bodies[0]["body"], serde_json::json!({ "size_gb": 80 }));
    let changes = after["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{after}");
    assert!(changes.iter().all(|c| c["confirmed_ms"].is_i64() && c["sent_ms"].is_i64()), "{after}");
    let text = env.ok(&["client", "show", "acme"]);
    assert!(text.contains("changes:") && text.contains("confirmed by a read"), "{text}");
    // Another worker pass changes nothing more.
    settle(&env);
    assert_eq!(env.sim.ledger().instance_patch_bodies.len(), 1);
}

/// A region change, a smaller volume, a bad plan id, an update that changes
/// nothing or names no client: exit code 2, one line saying why, and the
/// record as it was (no generation, no job).
async fn what_cannot_change_in_place_is_refused_and_changes_nothing(env: Env) {
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    let before = show(&env, "acme");
    let cases: [(&[&str], &str); 7] = [
        (&["--region", "ams"], "another region"),
        (&["--os-id", "2136"], "reinstall"),
        (&["--volume-gb", "20"], "only grow"),
        (&["--plan", "VC2"], "plan"),
        (&["--plan", "vc2-1c-1gb"], "nothing would change"),
        (&[], "nothing to change"),
        (&["--firewall-group", "nope"], "firewall_group"),
    ];
    for (flags, why) in cases {
        let mut args = vec!["client", "update", "acme"];
        args.extend_from_slice(flags);
        let o = env.run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let o = env.run(&["client", "update", "nobody", "--plan", "vc2-2c-4gb"]);
    assert_eq!(o.status.code(), Some(2));
    let after = show(&env, "acme");
    assert_eq!(after["generation"], before["generation"]);
    assert_eq!(after["status"], "ready");
    let jobs = env.store().await.queue_status(i64::MAX).await.unwrap();
    assert!(jobs.is_settled(), "{jobs:?}");
    // A deleted client is created again, not updated.
    env.ok(&["client", "delete", "acme"]);
    let o = env.run(&["client", "update", "acme", "--plan", "vc2-2c-4gb"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("client create"));
}

/// A plan Vultr does not offer as an upgrade (a smaller one): `client
/// update` refuses it when it can read the list (a key configured); recorded
/// without one, the worker reads the list, sends no PATCH, and blocks
/// `update_rejected` with the plans it could take.
async fn a_plan_that_is_not_an_upgrade_blocks_before_any_patch(env: Env) {
    env.ok(&["init"]);
    create_in(&env, "acme", ["ewr", "vc2-1c-2gb", "40"], &[]);
    settle(&env);
    // The command reads the list first: a smaller plan is bad input.
    let o = env.run(&["client", "update", "acme", "--plan", "vc2-1c-1gb"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("only grows") && err.contains("vc2-2c-4gb") && err.contains("nothing was stored"), "{err}");
    assert_eq!(show(&env, "acme")["plan"], "vc2-1c-2gb");
    // Without a key to read the list, it is recorded, and the worker refuses it.
    let o =
        env.cmd(&["client", "update", "acme", "--plan", "vc2-1c-1gb"]).env_remove("VULTR_API_KEY").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "blocked", "{v}");
    assert_eq!(v["blocked_reason"], "update_rejected", "{v}");
    let detail = v["blocked_detail"].as_str().unwrap();
    assert!(
        detail.contains("vc2-1c-1gb") && detail.contains("vc2-2c-4gb") && detail.contains("nothing was sent"),
        "{detail}"
    );
    assert!(env.sim.ledger().instance_patch_bodies.is_empty());
    assert!(v["resolve"].to_string().contains("client update acme --plan"), "{v}");
    // Back to the plan it has: ready again, still without a PATCH.
    env.ok(&["client", "update", "acme", "--plan", "vc2-1c-2gb"]);
    env.ok(&["reconcile", "acme"]);
    settle(&env);
    assert_eq!(show(&env, "acme")["status"], "ready");
    assert!(env.sim.ledger().instance_patch_bodies.is_empty());
}

/// The PATCH is applied but its answer lost (a 500 after applying): the
/// worker reads until the resize shows, confirms, and never sends it again.
async fn a_lost_patch_answer_is_resolved_by_reading_never_by_resending(env: Env) {
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    let lost = Faults {
        lost_5xx: 1.0,
        ops: vec![Op::InstancePatch, Op::BlockPatch],
        faults_max: Some(2),
        ..Faults::default()
    };
    env.sim.set_faults(lost).unwrap();
    env.ok(&["client", "update", "acme", "--plan", "vc2-2c-4gb", "--volume-gb", "50"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    let ledger = env.sim.ledger();
    assert_eq!(ledger.faults.len(), 2, "both answers were lost: {:?}", ledger.faults);
    assert_eq!(ledger.instance_patch_bodies.len(), 1);
    assert_eq!(ledger.block_patch_bodies.len(), 1);
    assert_eq!(ledger.requests.get("PATCH /v2/instances/{id}").copied(), Some(1), "{:?}", ledger.requests);
    assert_eq!(ledger.requests.get("PATCH /v2/blocks/{id}").copied(), Some(1), "{:?}", ledger.requests);
    let changes = v["changes"].as_array().unwrap();
    assert!(changes.iter().all(|c| c["outcome"].as_str().unwrap().starts_with("unknown")), "{v}");
    assert!(changes.iter().all(|c| c["confirmed_ms"].is_i64()), "{v}");
}

/// A spec Vultr refuses (a region it does not have): the client blocks
/// before anything is created (the worker's preflight catches it; a create
/// answered 400 is corrected the same way, then `reconcile --new-dispatch`); `client update --region` corrects it (a
/// region may change while nothing exists) and `reconcile` sends the
/// corrected spec. A deleted client's name is created again with another
/// spec.
async fn a_rejected_spec_is_corrected_by_update_and_reconcile(env: Env) {
    env.ok(&["init"]);
    create_in(&env, "typo", ["zzz", "vc2-1c-1gb", "40"], &["--no-preflight"]);
    settle(&env);
    let v = show(&env, "typo");
    assert_eq!(
        (v["status"].as_str(), v["blocked_reason"].as_str()),
        (Some("blocked"), Some("preflight_failed")),
        "{v}"
    );
    env.ok(&["client", "update", "typo", "--region", "ewr"]);
    env.ok(&["reconcile", "typo"]);
    settle(&env);
    let v = show(&env, "typo");
    assert_eq!(v["status"], "ready", "{v}");
    assert_eq!(v["region"], "ewr", "{v}");
    env.ok(&["client", "delete", "typo"]);
    settle(&env);
    assert_eq!(show(&env, "typo")["status"], "deleted");
    create_in(&env, "typo", ["ams", "vc2-1c-2gb", "50"], &[]);
    settle(&env);
    let v = show(&env, "typo");
    assert_eq!(v["status"], "ready", "{v}");
    assert_eq!((v["region"].as_str(), v["plan"].as_str()), (Some("ams"), Some("vc2-1c-2gb")), "{v}");
}

/// A worker SIGKILLed at each step of a change: the next worker finds the
/// receipt and never sends a second PATCH on it. Killed after the claim but
/// before the send was recorded, nothing left (the send is committed before
/// the PATCH leaves): the next worker sends it, once, on the same receipt.
async fn a_worker_killed_at_every_change_step_loses_nothing_and_sends_no_second_patch(env: Env) {
    failpoints_required();
    env.ok(&["init"]);
    let points = ["change-claimed", "change-sent", "change-answer-recorded", "change-confirmed"];
    for (i, point) in points.iter().enumerate() {
        let name = format!("c{i}");
        create(&env, &name, &[]);
        settle(&env);
        env.ok(&["client", "update", &name, "--volume-gb", "60"]);
        let o = env
            .cmd(&["worker", "--until-settled", "--concurrency", "1"])
            .env("ODUFLOW_CRASH_AT", point)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{point}: the worker was not killed there");
        settle(&env);
        let v = show(&env, &name);
        assert_eq!(v["status"], "ready", "after a crash at {point}: {v}");
        let vol = v["volume_id"].as_str().unwrap().to_owned();
        let ledger = env.sim.ledger();
        let patches =
            ledger.request_log.iter().filter(|r| r.method == "PATCH" && r.resource_id.as_deref() == Some(&vol)).count();
        let receipts = v["changes"].as_array().unwrap();
        let sent = receipts.iter().filter(|c| c["sent_ms"].is_i64()).count();
        assert_eq!(patches, 1, "{point}: one PATCH reached the simulator: {:?}", ledger.block_patch_bodies);
        assert!(patches <= sent, "{point}: {patches} PATCHes for {sent} sent receipts");
        assert!(receipts.iter().any(|c| c["confirmed_ms"].is_i64()), "{point}: {v}");
    }
    let ledger = env.sim.ledger();
    assert!(ledger.creates_per_label.values().all(|n| *n == 1), "{:?}", ledger.creates_per_label);
}

/// A command adapter's optional `update` command (grow the filesystem, say)
/// runs once the change is confirmed by a read, with the new facts in its
/// environment, and not again on later passes.
async fn an_adapters_update_command_runs_once_after_a_confirmed_change(env: Env) {
    let log = env.dir.path().join("updates.log");
    let ok = r#"echo '{"ok": true, "detail": "done"}'"#;
    let present = r#"echo '{"present": true, "detail": "there"}'"#;
    let update = format!(
        r#"echo "$ODUFLOW_CLIENT $ODUFLOW_PLAN $ODUFLOW_VOLUME_GB $ODUFLOW_MOUNT_ID" >> {}; {ok}"#,
        log.display()
    );
    let toml = format!(
        "[[adapter]]\nname = \"fs\"\nensure = [\"sh\", \"-c\", {ok:?}]\ncheck = [\"sh\", \"-c\", {present:?}]\n\
         remove = [\"sh\", \"-c\", {ok:?}]\nupdate = [\"sh\", \"-c\", {update:?}]\n"
    );
    std::fs::write(env.dir.path().join("oduflow.toml"), toml).unwrap();
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    assert!(!log.exists(), "no change yet, no update");
    env.ok(&["client", "update", "acme", "--volume-gb", "60"]);
    settle(&env);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    let lines = std::fs::read_to_string(&log).unwrap();
    let mount = v["volume_mount_id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(lines.trim(), format!("acme vc2-1c-1gb 60 {mount}").trim(), "{lines}");
}

/// An update of the volume only, after someone changed the server's tags in
/// the console: the tags are not reverted behind the operator's back; the
/// client blocks `config_mismatch` naming them, and `client update --tag`
/// to the console's value resolves it without a PATCH.
async fn a_console_change_to_what_no_update_touched_blocks_and_is_not_reverted(env: Env) {
    use oduflow_model::provider::{InstanceChange, Provider};
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    let vm = show(&env, "acme")["vm_id"].as_str().unwrap().to_owned();
    let console = env.console();
    let tags = InstanceChange { tags: Some(vec!["console".into()]), ..InstanceChange::default() };
    let o = console.instance_update(&oduflow_model::VultrInstanceId(vm), &tags).await;
    assert!(matches!(o, oduflow_model::provider::Outcome::Accepted(())), "{o:?}");
    env.ok(&["client", "update", "acme", "--volume-gb", "60"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["blocked_reason"], "config_mismatch", "{v}");
    assert!(v["blocked_detail"].as_str().unwrap().contains("console"), "{v}");
    assert_eq!(env.sim.ledger().instance_patch_bodies.len(), 1, "only the console's PATCH");
    env.ok(&["client", "update", "acme", "--tag", "console"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    assert_eq!(env.sim.ledger().instance_patch_bodies.len(), 1, "still only the console's PATCH");
    assert_eq!(env.sim.ledger().block_patch_bodies.len(), 1, "the volume grew once");
}

/// The restored copy holds a plan change confirmed before the backup; the
/// timeline it discarded sent another, still resizing (the simulator shows
/// the old plan until it is done). That resize is not the copy's change:
/// reported ready, the client would show the other plan once it ends, with
/// no run left to read it. It blocks `config_mismatch` instead.
async fn a_resize_a_restore_discarded_is_not_taken_for_the_copys_change(env: Env) {
    use oduflow_model::provider::{InstanceChange, Provider};
    // Long enough for three commands and a worker's first read to land
    // while the second resize is still under way, on a loaded machine.
    const RESIZE_MS: u64 = 8_000;
    let env = Env { sim: start_sim_with(oduflow_sim::SimConfig { resize_ms: RESIZE_MS, ..sim_config() }).await, ..env };
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    env.ok(&["client", "update", "acme", "--plan", "vc2-1c-2gb"]);
    // Reads far enough apart for the resize to end within the polling limit.
    let o = env.cmd(&["worker", "--until-settled"]).env("ODUFLOW_POLL_INTERVAL_MS", "900").output().unwrap();
    assert!(o.status.success(), "worker: {}", String::from_utf8_lossy(&o.stderr));
    let v = show(&env, "acme");
    assert_eq!((v["status"].as_str(), v["plan"].as_str()), (Some("ready"), Some("vc2-1c-2gb")), "{v}");
    assert!(v["changes"][0]["confirmed_ms"].is_i64(), "{v}");
    // What the discarded timeline sent after the backup.
    let vm = v["vm_id"].as_str().unwrap().to_owned();
    let discarded = env.console();
    let plan = InstanceChange { plan: Some("vc2-2c-4gb".into()), ..InstanceChange::default() };
    let o = discarded.instance_update(&oduflow_model::VultrInstanceId(vm.clone()), &plan).await;
    assert!(matches!(o, oduflow_model::provider::Outcome::Accepted(())), "{o:?}");
    env.ok(&["restore", "declare", "--reason", "restored from last night's backup"]);
    let o = env.cmd(&["reconcile", "--all"]).env("ODUFLOW_LISTING_SETTLE_MS", "0").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["blocked_reason"], "config_mismatch", "a resize nobody in this copy sent: {v}");
    assert!(v["blocked_detail"].as_str().unwrap().contains("resizing"), "{v}");
    // (The resize ends on the other plan: `ready` would have been wrong.)
    let id = oduflow_model::VultrInstanceId(vm);
    let t = std::time::Instant::now();
    while discarded.instance_get(&id).await.unwrap().unwrap().plan != "vc2-2c-4gb" {
        assert!(t.elapsed().as_millis() < u128::from(RESIZE_MS) + 5_000, "the other plan never showed");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Vultr refuses a volume's next resize, and its detach, until 60 s after
/// a resize (docs/vultr.md §3; 2 s here). Two `client update --volume-gb`
/// a moment apart both end applied, the second sent once the interval has
/// passed, and a delete right after ends deleted: no PATCH or detach is
/// refused, nothing blocks.
async fn two_grows_within_the_resize_interval_both_apply_and_a_delete_follows(env: Env) {
    let cfg = oduflow_sim::SimConfig { resize_interval_ms: 2_000, ..sim_config() };
    let env = Env { sim: start_sim_with(cfg).await, ..env };
    let settle = |env: &Env| {
        let o = env.cmd(&["worker", "--until-settled"]).env("ODUFLOW_RESIZE_INTERVAL_MS", "2100").output().unwrap();
        assert!(o.status.success(), "worker: {}", String::from_utf8_lossy(&o.stderr));
    };
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    for gb in ["50", "60"] {
        env.ok(&["client", "update", "acme", "--volume-gb", gb]);
        settle(&env);
        let c = show(&env, "acme");
        assert_eq!(c["status"], "ready", "after the grow to {gb}: {c}");
    }
    assert_eq!(block_patches(&env), 2, "{:?}", env.sim.ledger().block_patch_bodies);
    let sizes: Vec<_> = env.sim.ledger().block_patch_bodies.iter().map(|b| b["body"]["size_gb"].clone()).collect();
    assert_eq!(sizes, [50, 60]);
    env.ok(&["client", "delete", "acme"]);
    settle(&env);
    let c = show(&env, "acme");
    assert_eq!(c["status"], "deleted", "{c}");
    let blocked = c["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "blocked").count();
    assert_eq!(blocked, 0, "{c}");
}
