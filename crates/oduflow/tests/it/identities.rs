//! Full client deletion: DNS through the simulator's DNS API, and VPN and Salt
//! identities through the command adapter with fixture scripts. A client is
//! deleted only when the infrastructure and every adapter confirm removal.

use super::*;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/identity.sh");

fn configure(env: &Env, timeout_ms: u64) -> std::path::PathBuf {
    let fixtures = env.dir.path().join("identities");
    std::fs::create_dir_all(&fixtures).unwrap();
    let adapter = |name: &str| {
        format!(
            "[[adapter]]\nname = \"{name}\"\nensure = [\"sh\", \"{FIXTURE}\", \"{name}\", \"ensure\"]\n\
             check = [\"sh\", \"{FIXTURE}\", \"{name}\", \"check\"]\nremove = [\"sh\", \"{FIXTURE}\", \"{name}\", \"remove\"]\n\
             timeout_ms = {timeout_ms}\n"
        )
    };
    let toml = format!("[dns]\ndomain = \"example.com\"\n\n{}\n{}", adapter("vpn"), adapter("salt"));
    std::fs::write(env.dir.path().join("oduflow.toml"), toml).unwrap();
    fixtures
}

/// Runs the binary with `extra` in its environment. The fixture script
/// reads its own settings from `settings` in its directory (children get no
/// environment of the worker's beyond the documented allow-list).
fn run_with(env: &Env, fixtures: &Path, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let settings: String = extra.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(fixtures.join("settings"), settings).unwrap();
    let mut c = env.cmd(args);
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().unwrap()
}

async fn a_records(env: &Env, name: &str) -> Vec<oduflow_vultr::DnsRecord> {
    let v = env.console();
    v.dns_record_list("example.com")
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.name == name && r.record_type == "A")
        .collect()
}

fn adapters(env: &Env, fixtures: &Path, name: &str) -> serde_json::Value {
    let o = run_with(env, fixtures, &["client", "show", name, "--json"], &[]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v
}

fn state_of(v: &serde_json::Value, adapter: &str) -> String {
    v["adapters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["adapter"] == adapter)
        .map(|a| a["state"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

oduflow_store::on_both_stores!(
    super::env_of =>
    identities_are_removed_before_deleted,
    adapter_timeout_blocks_with_reason,
    killed_during_adapter_removal_resumes,
    children_get_only_the_allowed_environment
);

/// What a child process found in its environment at its start (the
/// shell's own start-up environment, not what it exports).
const DUMP_ENV: &str = "tr '\\0' '\\n' < /proc/$$/environ";

/// The root password command and every adapter command start with a
/// cleared environment plus the documented allow-list and the adapter
/// protocol's own variables: no API key, no database URL (its password),
/// nothing else the worker had.
async fn children_get_only_the_allowed_environment(env: Env) {
    let ok = r#"echo '{"ok": true, "detail": "done"}'"#;
    let present = r#"echo '{"present": false}'"#;
    let toml = format!(
        "root_password_command = [\"sh\", \"-c\", {root:?}]\n\n\
         [[adapter]]\nname = \"fs\"\nensure = [\"sh\", \"-c\", {ensure:?}]\ncheck = [\"sh\", \"-c\", {present:?}]\n\
         remove = [\"sh\", \"-c\", {ok:?}]\n",
        root = format!("{DUMP_ENV} > root-env.txt"),
        ensure = format!("{DUMP_ENV} > adapter-env.txt; {ok}"),
    );
    std::fs::write(env.dir.path().join("oduflow.toml"), toml).unwrap();
    env.ok(&["init"]);
    env.create_client("acme");
    let o = env.cmd(&["worker", "--until-settled"]).env("SOME_OPERATOR_SECRET", "s3cret").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let allowed = oduflow_engine::command_adapter::CHILD_ENV_ALLOWED;
    for (file, protocol) in [("root-env.txt", "ODUFLOW_INSTANCE_ID ODUFLOW_LABEL"), ("adapter-env.txt", "ODUFLOW_")] {
        let path = env.dir.path().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(!text.contains(KEY), "{file} holds the API key:\n{text}");
        assert!(!text.contains(&env.url), "{file} holds the database URL:\n{text}");
        for line in text.lines().filter(|l| !l.is_empty()) {
            let name = line.split('=').next().unwrap_or_default();
            let by_protocol = if protocol.ends_with('_') {
                name.starts_with(protocol) && !name.contains("URL") && !name.contains("KEY")
            } else {
                protocol.split(' ').any(|p| p == name)
            };
            assert!(allowed.contains(&name) || by_protocol, "{file}: {name} is not allowed:\n{text}");
        }
    }
}

async fn identities_are_removed_before_deleted(env: Env) {
    let fx = configure(&env, 5_000);
    env.ok(&["init"]);
    env.create_client("acme");
    assert!(run_with(&env, &fx, &["worker", "--until-settled"], &[]).status.success());
    let v = adapters(&env, &fx, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    for a in ["dns", "vpn", "salt"] {
        assert_eq!(state_of(&v, a), "ensured", "{a}: {v}");
    }
    let vm = v["vm_id"].as_str().unwrap().to_owned();
    let ip = env.sim.ledger().resources.iter().find(|r| r.id == vm).map(|_| ()).is_some();
    assert!(ip);
    let records = a_records(&env, "acme").await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(fx.join("vpn-acme").exists() && fx.join("salt-acme").exists());
    assert_eq!(
        std::fs::read_to_string(fx.join("vpn-acme")).unwrap().trim(),
        records[0].data,
        "the A record points at the VM's main IP"
    );

    // Salt's removal fails: the VM goes, DNS and VPN are removed, but the
    // client is not deleted; it blocks naming Salt.
    env.ok(&["client", "delete", "acme"]);
    let fail = [("FIXTURE_FAIL_KIND", "salt"), ("FIXTURE_FAIL_OP", "remove")];
    assert!(run_with(&env, &fx, &["worker", "--until-settled"], &fail).status.success());
    let v = adapters(&env, &fx, "acme");
    assert_eq!(v["status"], "blocked", "{v}");
    assert_eq!(v["blocked_reason"], "adapter_failed");
    assert!(v["blocked_detail"].as_str().unwrap().contains("salt"), "{v}");
    assert!(
        env.sim
            .ledger()
            .resources
            .iter()
            .all(|r| r.kind == oduflow_sim::ResourceKind::DnsRecord || r.deleted_at.is_some()),
        "VM and volume are gone"
    );
    assert_eq!(state_of(&v, "dns"), "removed");
    assert_eq!(state_of(&v, "vpn"), "removed");
    assert_ne!(state_of(&v, "salt"), "removed", "a failing adapter is not marked removed");
    assert!(a_records(&env, "acme").await.is_empty());
    assert!(fx.join("salt-acme").exists());

    // Fixed: reconcile, and the client is deleted once Salt confirms.
    env.ok(&["reconcile", "acme"]);
    assert!(run_with(&env, &fx, &["worker", "--until-settled"], &[]).status.success());
    let v = adapters(&env, &fx, "acme");
    assert_eq!(v["status"], "deleted", "{v}");
    assert!(!fx.join("salt-acme").exists());
}

async fn adapter_timeout_blocks_with_reason(env: Env) {
    let fx = configure(&env, 300);
    env.ok(&["init"]);
    env.create_client("acme");
    let hang = [("FIXTURE_SLEEP", "3"), ("FIXTURE_SLEEP_OP", "check")];
    assert!(run_with(&env, &fx, &["worker", "--until-settled"], &hang).status.success());
    let v = adapters(&env, &fx, "acme");
    assert_eq!(v["blocked_reason"], "adapter_failed", "{v}");
    assert!(v["blocked_detail"].as_str().unwrap().contains("timed out"), "{v}");
    assert_eq!(state_of(&v, "dns"), "ensured", "the other adapters are untouched");
}

async fn killed_during_adapter_removal_resumes(env: Env) {
    failpoints_required();
    let fx = configure(&env, 5_000);
    env.ok(&["init"]);
    env.create_client("acme");
    assert!(run_with(&env, &fx, &["worker", "--until-settled"], &[]).status.success());
    env.ok(&["client", "delete", "acme"]);
    let o = run_with(
        &env,
        &fx,
        &["worker", "--until-settled", "--concurrency", "1"],
        &[("ODUFLOW_CRASH_AT", "adapter-removed")],
    );
    assert!(!o.status.success(), "the worker should have been killed during an adapter removal");
    assert_ne!(adapters(&env, &fx, "acme")["status"], "deleted");
    assert!(run_with(&env, &fx, &["worker", "--until-settled"], &[]).status.success());
    let v = adapters(&env, &fx, "acme");
    assert_eq!(v["status"], "deleted", "{v}");
    for a in ["dns", "vpn", "salt"] {
        assert_eq!(state_of(&v, a), "removed", "{a}");
    }
    assert!(a_records(&env, "acme").await.is_empty());
    assert!(!fx.join("vpn-acme").exists() && !fx.join("salt-acme").exists());
}
