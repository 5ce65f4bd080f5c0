//! Real servers, end to end through the CLI, a worker process
//! and the simulator: every spec field reaches the one create POST (the
//! simulator's ledger keeps its body), the preflight refuses a spec the
//! catalog lacks before anything is paid for, and Vultr's root password
//! goes to the configured command once and nowhere else.

use super::*;
use base64::Engine as _;
use oduflow_sim::catalog::{FIREWALL_GROUPS, SSH_KEYS, VPCS};

oduflow_store::on_both_stores!(
    super::super::env_of =>
    a_profile_with_flags_reaches_the_create_post_whole,
    a_spec_the_catalog_lacks_blocks_before_anything_is_created,
);

const CLOUD_INIT: &str = "#cloud-config\nhostname: {{oduflow.hostname}}\nruncmd:\n  - echo {{oduflow.client}} in {{oduflow.region}}\n  - echo '{{ v1.instance_id }}'\n";

fn write_config(env: &Env) {
    std::fs::write(env.dir.path().join("cloud-init.yaml"), CLOUD_INIT).unwrap();
    let config = format!(
        r#"hostname_domain = "example.net"
root_password_command = ["sh", "-c", "cat >> root-passwords.txt; echo \"$ODUFLOW_INSTANCE_ID\" >> root-passwords.txt"]

[profile.web]
region = "ewr"
plan = "vc2-1c-1gb"
os_id = 2284
volume_gb = 40
ssh_keys = ["{key}"]
user_data = "cloud-init.yaml"
tags = ["web"]
firewall_group = "{fw}"
ipv6 = true
vpcs = ["{vpc}"]
backups = "weekly:1:3"
"#,
        key = SSH_KEYS[0].0,
        fw = FIREWALL_GROUPS[0].0,
        vpc = VPCS[0].0,
    );
    std::fs::write(env.dir.path().join("oduflow.toml"), config).unwrap();
}

/// `client create --profile web --tag db --ssh-key K2`: the profile's
/// fields under the flags, every one of them in the create body; the
/// backup schedule set afterwards; the addresses and mount id shown; the
/// root password handed to the command once, and in no log line (debug
/// level), no output and no database column.
async fn a_profile_with_flags_reaches_the_create_post_whole(env: Env) {
    write_config(&env);
    env.ok(&["init"]);
    env.ok(&["client", "create", "acme", "--profile", "web", "--tag", "db", "--ssh-key", SSH_KEYS[1].0]);
    let worker = env.cmd(&["worker", "--until-settled"]).env("RUST_LOG", "debug").output().unwrap();
    let logs = format!("{}{}", String::from_utf8_lossy(&worker.stdout), String::from_utf8_lossy(&worker.stderr));
    assert!(worker.status.success(), "{logs}");
    let show = env.ok(&["client", "show", "acme", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["status"], "ready", "{show}");

    let ledger = env.sim.ledger();
    assert_eq!(ledger.instance_create_bodies.len(), 1, "one create POST");
    let body = &ledger.instance_create_bodies[0];
    assert_eq!(body["os_id"], 2284);
    assert_eq!(body["hostname"], "acme.example.net");
    assert_eq!(body["sshkey_id"], serde_json::json!([SSH_KEYS[1].0]), "a flag replaces the profile's list");
    assert_eq!(body["tags"], serde_json::json!(["db"]));
    assert_eq!(body["firewall_group_id"], FIREWALL_GROUPS[0].0);
    assert_eq!(body["enable_ipv6"], true);
    assert_eq!(body["attach_vpc"], serde_json::json!([VPCS[0].0]));
    assert_eq!(body["backups"], "enabled");
    assert_eq!(body["activation_email"], false);
    let user_data = base64::engine::general_purpose::STANDARD.decode(body["user_data"].as_str().unwrap()).unwrap();
    assert_eq!(
        String::from_utf8(user_data).unwrap(),
        "#cloud-config\nhostname: acme.example.net\nruncmd:\n  - echo acme in ewr\n  - echo '{{ v1.instance_id }}'\n"
    );
    let vm = v["vm_id"].as_str().unwrap().to_owned();
    assert_eq!(ledger.backup_schedules_set.get(&vm).copied(), Some(1), "the schedule is set once, then read back");

    // What operators need, and never the password.
    assert!(v["ipv4"].as_str().unwrap().starts_with("192.0.2."), "{show}");
    assert!(v["ipv6"].as_str().unwrap().starts_with("2001:db8:"), "{show}");
    assert!(!v["volume_mount_id"].as_str().unwrap().is_empty(), "{show}");
    assert_eq!(v["backups"], "weekly:1:3");
    let text = env.ok(&["client", "show", "acme"]);
    assert!(text.contains("hostname:   acme.example.net") && text.contains("mount:      /dev/disk/by-id/virtio-"));

    let password = oduflow_sim::sim_root_password(&vm);
    let handed = wait_for_file(&env.dir.path().join("root-passwords.txt"));
    assert_eq!(handed, format!("{password}\n{vm}\n"), "the command got the password once, on standard input");
    let everything = oduflow_store::testing::all_text(&env.store().await).await.unwrap();
    for (what, text) in [("the worker's debug log", &logs), ("client show", &show), ("client show (text)", &text)] {
        assert!(!text.contains(&password), "the root password is in {what}");
    }
    assert!(!everything.contains(&password), "the root password is in the database");
    assert!(everything.contains("acme.example.net"), "the database dump is not what it claims");
}

fn wait_for_file(path: &std::path::Path) -> String {
    let start = Instant::now();
    loop {
        match std::fs::read_to_string(path) {
            Ok(s) if s.lines().count() >= 2 => return s,
            _ if start.elapsed() > Duration::from_secs(10) => panic!("{} never written", path.display()),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A region without the volume type, a plan not sold there, an unknown SSH
/// key: `client create` refuses each at once (exit 2, nothing stored); with
/// `--no-preflight` the worker refuses it before the first create, blocked
/// `preflight_failed`, and the simulator saw no create at all.
async fn a_spec_the_catalog_lacks_blocks_before_anything_is_created(env: Env) {
    env.ok(&["init"]);
    let base = ["--os-id", "2284", "--volume-gb", "40"];
    let unknown_key = "00000000-0000-4000-8000-0000000000aa";
    let cases: [(&str, Vec<&str>, &str); 3] = [
        ("no-volumes", vec!["--region", "mel", "--plan", "vc2-1c-1gb"], "region mel offers no high_perf block storage"),
        ("no-plan", vec!["--region", "lax", "--plan", "vhf-1c-1gb"], "plan vhf-1c-1gb is not sold in region lax"),
        ("no-key", vec!["--region", "ewr", "--plan", "vc2-1c-1gb", "--ssh-key", unknown_key], "ssh key 00000000"),
    ];
    for (name, extra, why) in &cases {
        let mut args = vec!["client", "create", name];
        args.extend(base);
        args.extend(extra.iter().copied());
        let o = env.run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(why) && err.contains("nothing was stored"), "{name}: {err}");
        args.push("--no-preflight");
        env.ok(&args);
    }
    let _ = env.run(&["worker", "--until-settled"]);
    for (name, _, why) in &cases {
        let v: serde_json::Value = serde_json::from_str(&env.ok(&["client", "show", name, "--json"])).unwrap();
        assert_eq!(v["blocked_reason"], "preflight_failed", "{name}: {v}");
        assert!(v["blocked_detail"].as_str().unwrap().contains(why), "{name}: {v}");
    }
    let ledger = env.sim.ledger();
    assert!(ledger.create_requests_per_label.is_empty(), "a create went out: {:?}", ledger.create_requests_per_label);
}
