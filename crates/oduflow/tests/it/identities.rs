//! Full client deletion: DNS through the simulator's DNS API, and VPN and Salt
//! identities through the command adapter with fixture scripts. A client is
//! deleted only when the infrastructure and every adapter confirm removal.

use super::*;
use oduflow_vultr::{VultrClient, VultrConfig};

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

fn run_with(env: &Env, fixtures: &Path, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let mut c = env.cmd(args);
    c.env("FIXTURE_DIR", fixtures);
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().unwrap()
}

async fn a_records(env: &Env, name: &str) -> Vec<oduflow_vultr::DnsRecord> {
    let v = VultrClient::new(VultrConfig {
        base_url: env.sim.base_url.clone(),
        rate_per_sec: 1000,
        ..VultrConfig::new(secrecy::SecretString::from(KEY.to_owned()))
    })
    .unwrap();
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
    killed_during_adapter_removal_resumes
);

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
