//! Real servers through the adapter and the simulator: each image
//! source and server field reaches the create body and reads back on the
//! instance; the simulator refuses what Vultr refuses, creating nothing;
//! the catalog reads and the backup schedule round-trip; the root password
//! reaches the configured sink once.

use crate::*;
use oduflow_model::provider::{Outcome, Provider};
use oduflow_model::{BackupSchedule, ImageSource, ServerSpec};
use oduflow_sim::catalog::{APPS, FIREWALL_GROUPS, SNAPSHOTS, SSH_KEYS, VPCS};
use oduflow_sim::{Sim, SimConfig, SimHandle};
use serde_json::{Value, json};

async fn sim() -> SimHandle {
    let cfg = SimConfig { rate_per_sec: 1000, ..SimConfig::default().instant() };
    Sim::start(cfg.with_key(KEY), "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

fn full_server() -> ServerSpec {
    ServerSpec {
        hostname: "web1.example.net".into(),
        ssh_keys: vec![SSH_KEYS[0].0.into(), SSH_KEYS[1].0.into()],
        user_data: Some("#cloud-config\npackages: [nginx]\n".into()),
        tags: vec!["web".into(), "prod".into()],
        firewall_group: Some(FIREWALL_GROUPS[0].0.into()),
        ipv6: true,
        vpcs: vec![VPCS[0].0.into()],
        backups: Some(BackupSchedule::Daily { hour: 4 }),
    }
}

#[tokio::test]
async fn every_image_source_and_server_field_reaches_the_body_and_reads_back() {
    let sim = sim().await;
    let c = client(&sim.base_url);
    let images = [
        (ImageSource::Os(2284), ("os_id", json!(2284)), (2284, 0, "")),
        (ImageSource::Snapshot(SNAPSHOTS[0].0.into()), ("snapshot_id", json!(SNAPSHOTS[0].0)), (164, 0, "")),
        (ImageSource::App(APPS[0].0), ("app_id", json!(APPS[0].0)), (186, APPS[0].0, APPS[0].1)),
        (ImageSource::Image(APPS[1].1.into()), ("image_id", json!(APPS[1].1)), (186, APPS[1].0, APPS[1].1)),
    ];
    for (n, (image, (field, value), (os, app, image_id))) in images.into_iter().enumerate() {
        let req = InstanceRequest { image, server: full_server(), ..instance_req(&format!("oduflow-s{n}")) };
        let Outcome::Accepted(id) = c.instance_create(&req).await else { panic!("{field}") };
        let body = sim.ledger().instance_create_bodies[n].clone();
        assert_eq!(body[field], value, "{body}");
        assert_eq!(body["sshkey_id"], json!([SSH_KEYS[0].0, SSH_KEYS[1].0]));
        assert_eq!(body["hostname"], "web1.example.net");
        assert_eq!(
            (body["tags"].clone(), body["firewall_group_id"].clone()),
            (json!(["web", "prod"]), json!(FIREWALL_GROUPS[0].0))
        );
        assert_eq!((body["enable_ipv6"].clone(), body["attach_vpc"].clone()), (json!(true), json!([VPCS[0].0])));
        assert_eq!((body["backups"].clone(), body["activation_email"].clone()), (json!("enabled"), json!(false)));
        assert_eq!(body["user_data"], "I2Nsb3VkLWNvbmZpZwpwYWNrYWdlczogW25naW54XQo=");
        let i = c.instance_get(&id).await.unwrap().unwrap();
        assert_eq!((i.os_id, i.app_id, i.image_id.as_str()), (os, app, image_id), "{field}");
        assert_eq!((i.hostname.as_str(), i.firewall_group_id.as_str()), ("web1.example.net", FIREWALL_GROUPS[0].0));
        assert_eq!(i.tags, vec!["web".to_owned(), "prod".to_owned()]);
        assert!(i.v6_main_ip.starts_with("2001:db8:"), "{i:?}");
        let spec = oduflow_model::ClientSpec {
            image: req.image.clone(),
            server: full_server(),
            ..oduflow_model::ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap()
        };
        assert_eq!(oduflow_model::decide::instance_mismatch(&spec, req.label.as_str(), &i), None, "{field}: {i:?}");
    }
}

#[tokio::test]
async fn the_simulator_refuses_what_vultr_refuses_and_creates_nothing() {
    let sim = sim().await;
    let http = reqwest::Client::new();
    let base = json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2284, "label": "x"});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let cases = [
        (with("sshkey_id", json!(["00000000-0000-4000-8000-000000000000"])), "Invalid SSH key."),
        (with("firewall_group_id", json!("00000000-0000-4000-8000-000000000000")), "Invalid firewall group."),
        (with("user_data", json!("not base64!")), "base64"),
        (with("snapshot_id", json!(SNAPSHOTS[0].0)), "Only one of"),
        (with("backups", json!("weekly")), "Backups option must be either enabled or disabled."),
        (with("attach_vpc", json!(["00000000-0000-4000-8000-000000000000"])), "Invalid VPC."),
        (with("os_id", json!(99999)), "Invalid os_id."),
        (with("enable_ipv6", json!("yes")), "enable_ipv6"),
    ];
    for (body, msg) in cases {
        let r = http.post(format!("{}/instances", sim.base_url)).bearer_auth(KEY).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert!(v["error"].as_str().unwrap().contains(msg), "{body}: {v}");
    }
    let l = sim.ledger();
    assert!(l.resources.is_empty() && l.instance_create_bodies.is_empty(), "a refused create applied: {l:?}");
}

#[tokio::test]
async fn the_catalog_and_the_backup_schedule_round_trip() {
    let sim = sim().await;
    let c = client(&sim.base_url);
    let cat = c.catalog_read("ewr").await.unwrap();
    assert!(cat.regions["ewr"].contains(&"block_storage_high_perf".to_owned()));
    assert!(!cat.regions["mel"].iter().any(|o| o.starts_with("block_storage")));
    assert!(cat.available_plans.contains("vc2-1c-1gb") && cat.os_ids.contains(&2284));
    assert!(cat.ssh_keys.contains(SSH_KEYS[0].0) && cat.firewall_groups.contains(FIREWALL_GROUPS[0].0));
    assert!(
        cat.snapshots.contains(SNAPSHOTS[0].0)
            && cat.app_ids.contains(&APPS[0].0)
            && cat.app_images.contains(APPS[1].1)
    );
    let Outcome::Accepted(id) = c.instance_create(&instance_req("oduflow-b")).await else { panic!() };
    assert_eq!(c.backup_schedule_get(&id).await.unwrap(), None, "off until set");
    for s in [BackupSchedule::Weekly { dow: 7, hour: 23 }, BackupSchedule::Monthly { dom: 28, hour: 0 }] {
        c.backup_schedule_set(&id, &s).await.unwrap();
        assert_eq!(c.backup_schedule_get(&id).await.unwrap(), Some(s));
    }
}

struct Keep(std::sync::Mutex<Vec<(String, String)>>);

impl oduflow_vultr::RootPasswordSink for Keep {
    fn take(&self, _label: &oduflow_model::Label, id: &oduflow_model::VultrInstanceId, p: secrecy::SecretString) {
        use secrecy::ExposeSecret;
        self.0.lock().unwrap().push((id.to_string(), p.expose_secret().to_owned()));
    }
}

#[tokio::test]
async fn the_root_password_reaches_the_sink_once_and_nothing_else() {
    let sim = sim().await;
    let keep = std::sync::Arc::new(Keep(std::sync::Mutex::new(vec![])));
    let c = VultrClient::new(VultrConfig {
        root_password: oduflow_vultr::RootPassword(Some(keep.clone())),
        ..fast_config(&sim.base_url, KEY)
    })
    .unwrap();
    let created = c.instance_create(&instance_req("oduflow-p")).await;
    let Outcome::Accepted(id) = &created else { panic!() };
    let read = c.instance_get(id).await.unwrap().unwrap();
    let listed = c.instance_list().await.unwrap();
    let password = oduflow_sim::sim_root_password(id.as_str());
    assert_eq!(*keep.0.lock().unwrap(), vec![(id.to_string(), password.clone())], "once, from the create answer");
    for (what, text) in [
        ("outcome", format!("{created:?}")),
        ("read", format!("{read:?}")),
        ("listing", format!("{listed:?}")),
        ("client", format!("{c:?}")),
    ] {
        assert!(!text.contains(&password), "the password is in the {what}: {text}");
    }
}
