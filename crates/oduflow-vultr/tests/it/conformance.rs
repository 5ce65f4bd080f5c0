//! Every request body the adapter sends, and every simulator answer, checked
//! against Vultr's OpenAPI document (2023-12).

use crate::openapi::doc;
use crate::*;
use oduflow_model::provider::{InstanceChange, Provider};
use oduflow_model::{VultrBlockId, VultrInstanceId};
use oduflow_sim::{Sim, SimConfig};
use oduflow_vultr::DnsRecordRequest;
use serde_json::{Value, json};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The document's path template for a concrete adapter path.
fn template(path: &str) -> &'static str {
    let segs: Vec<&str> = path.trim_start_matches("/v2").trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["instances"] => "/instances",
        ["instances", _] => "/instances/{instance-id}",
        ["blocks"] => "/blocks",
        ["blocks", _] => "/blocks/{block-id}",
        ["blocks", _, "attach"] => "/blocks/{block-id}/attach",
        ["blocks", _, "detach"] => "/blocks/{block-id}/detach",
        ["instances", _, "backup-schedule"] => "/instances/{instance-id}/backup-schedule",
        ["instances", _, "upgrades"] => "/instances/{instance-id}/upgrades",
        ["regions", _, "availability"] => "/regions/{region-id}/availability",
        ["os"] => "/os",
        ["applications"] => "/applications",
        ["snapshots"] => "/snapshots",
        ["ssh-keys"] => "/ssh-keys",
        ["firewalls"] => "/firewalls",
        ["domains", _] => "/domains/{dns-domain}",
        ["domains", _, "records"] => "/domains/{dns-domain}/records",
        ["domains", _, "records", _] => "/domains/{dns-domain}/records/{record-id}",
        ["account"] => "/account",
        ["regions"] => "/regions",
        ["plans"] => "/plans",
        _ => panic!("no template for {path}"),
    }
}

#[test]
fn the_validator_finds_what_is_wrong() {
    let api = doc();
    let s = api.request_schema("/blocks", "post");
    assert!(api.validate(s, &json!({"region": "ewr", "size_gb": 50}), true).is_empty());
    let errs = api.validate(s, &json!({"size_gb": "50", "sizegb": 1}), true);
    assert_eq!(errs.len(), 3, "{errs:?}"); // region missing, size_gb type, unknown property
    let s = api.response_schema("/instances", "get", 200).unwrap();
    let errs = api.validate(s, &json!({"instances": [{"id": 5}], "meta": {"total": "x"}}), false);
    assert_eq!(errs.len(), 2, "{errs:?}");
}

#[tokio::test]
async fn every_request_body_the_adapter_sends_conforms() {
    let server = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(204)).mount(&server).await;
    let c = client(&format!("{}/v2", server.uri()));
    c.instance_create(&instance_req("oduflow-a")).await;
    // Every server field set, and each other image source.
    let fields = oduflow_model::ServerSpec {
        hostname: "acme.example.net".into(),
        ssh_keys: vec!["3b8066a7-b438-455a-9688-44afc9a3597f".into()],
        user_data: Some("#cloud-config\n".into()),
        tags: vec!["web".into(), "db".into()],
        firewall_group: Some("1a2b3c4d-5e6f-4a0b-8c9d-0e1f2a3b4c5d".into()),
        ipv6: true,
        vpcs: vec!["6c5b4a39-2817-4f6e-9d5c-4b3a29180f7e".into()],
        backups: Some(oduflow_model::BackupSchedule::Weekly { dow: 1, hour: 3 }),
    };
    let images = [
        oduflow_model::ImageSource::Os(2284),
        oduflow_model::ImageSource::Snapshot("9f0e1d2c-3b4a-4c5d-8e6f-7a8b9c0d1e2f".into()),
        oduflow_model::ImageSource::App(2),
        oduflow_model::ImageSource::Image("docker".into()),
    ];
    for image in &images {
        c.instance_create(&InstanceRequest {
            image: image.clone(),
            server: fields.clone(),
            ..instance_req("oduflow-s")
        })
        .await;
    }
    let schedules = [
        oduflow_model::BackupSchedule::Daily { hour: 0 },
        oduflow_model::BackupSchedule::Monthly { dom: 28, hour: 23 },
    ];
    for b in &schedules {
        c.backup_schedule_set(&VultrInstanceId::from("i-1"), b).await.unwrap();
    }
    c.block_create(&block_req("oduflow-b")).await;
    c.block_create(&BlockRequest { block_type: oduflow_model::VolumeType::StorageOpt, ..block_req("oduflow-c") }).await;
    c.block_attach(&VultrBlockId::from("b-1"), &VultrInstanceId::from("i-1")).await;
    c.block_detach(&VultrBlockId::from("b-1")).await.unwrap();
    // The changes: each field alone, all together, a detach of
    // the firewall group, a volume growth.
    let changes = [
        InstanceChange { plan: Some("vc2-2c-4gb".into()), ..InstanceChange::default() },
        InstanceChange { tags: Some(vec![]), ..InstanceChange::default() },
        InstanceChange { firewall_group_id: Some(String::new()), ..InstanceChange::default() },
        InstanceChange {
            plan: Some("vc2-2c-4gb".into()),
            tags: Some(vec!["web".into()]),
            firewall_group_id: Some("1a2b3c4d-5e6f-4a0b-8c9d-0e1f2a3b4c5d".into()),
        },
    ];
    for change in &changes {
        c.instance_update(&VultrInstanceId::from("i-1"), change).await;
    }
    c.block_resize(&VultrBlockId::from("b-1"), 80).await;
    let a = DnsRecordRequest {
        name: "www".into(),
        record_type: "A".into(),
        data: "192.0.2.1".into(),
        ttl: Some(300),
        priority: None,
    };
    c.dns_record_create("example.com", &a).await;
    let mx = DnsRecordRequest {
        name: "".into(),
        record_type: "MX".into(),
        data: "mx.example.com".into(),
        ttl: None,
        priority: Some(10),
    };
    c.dns_record_create("example.com", &mx).await;

    let api = doc();
    let mut checked = 0;
    for req in server.received_requests().await.unwrap() {
        if req.body.is_empty() {
            continue;
        }
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let t = template(req.url.path());
        let errs = api.validate(api.request_schema(t, req.method.as_str()), &body, true);
        assert!(errs.is_empty(), "{} {t}: {body}: {errs:?}", req.method);
        assert_eq!(req.headers.get("content-type").unwrap(), "application/json");
        checked += 1;
    }
    assert_eq!(checked, 7 + 4 + 2 + 5, "every POST and PATCH carried a body");
}

/// `s` with each `{name}` replaced by the id recorded under that name.
fn fill(s: &str, ids: &std::collections::HashMap<&str, String>) -> String {
    let mut s = s.to_owned();
    for (k, v) in ids {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

#[tokio::test]
async fn every_simulator_answer_conforms_to_its_operation() {
    let cfg = SimConfig { rate_per_sec: 1000, ..SimConfig::default().instant() };
    let sim = Sim::start(cfg.with_key(KEY), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let http = reqwest::Client::new();
    let api = doc();
    let mut ids = std::collections::HashMap::<&str, String>::new();
    let steps: Vec<(&str, &str, Value, u16)> = vec![
        ("GET", "/account", Value::Null, 200),
        ("GET", "/regions", Value::Null, 200),
        ("GET", "/plans", Value::Null, 200),
        ("POST", "/instances", json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "label": "l"}), 202),
        ("GET", "/instances", Value::Null, 200),
        ("GET", "/instances?label=l&per_page=1", Value::Null, 200),
        ("GET", "/instances/{instance}", Value::Null, 200),
        ("GET", "/os", Value::Null, 200),
        ("GET", "/applications", Value::Null, 200),
        ("GET", "/snapshots", Value::Null, 200),
        ("GET", "/ssh-keys", Value::Null, 200),
        ("GET", "/firewalls", Value::Null, 200),
        ("GET", "/regions/ewr/availability", Value::Null, 200),
        ("POST", "/instances/{instance}/backup-schedule", json!({"type": "daily", "hour": 3, "dow": 1, "dom": 1}), 200),
        ("GET", "/instances/{instance}/backup-schedule", Value::Null, 200),
        (
            "POST",
            "/instances",
            json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "snapshot_id": "9f0e1d2c-3b4a-4c5d-8e6f-7a8b9c0d1e2f"}),
            400,
        ),
        ("POST", "/blocks", json!({"region": "ewr", "size_gb": 10, "label": "b"}), 202),
        ("GET", "/blocks", Value::Null, 200),
        ("GET", "/blocks/{block}", Value::Null, 200),
        ("POST", "/blocks/{block}/attach", json!({"instance_id": "{instance}", "live": true}), 204),
        ("GET", "/blocks/{block}", Value::Null, 200),
        ("POST", "/blocks/{block}/detach", json!({"live": true}), 204),
        // Changes: an upgrade, tags, a volume growth, and what
        // changes nothing.
        ("GET", "/instances/{instance}/upgrades?type=plans", Value::Null, 200),
        ("PATCH", "/instances/{instance}", json!({"plan": "vc2-2c-4gb", "tags": ["web"]}), 202),
        ("PATCH", "/instances/{instance}", json!({"tags": ["web"]}), 400),
        ("PATCH", "/blocks/{block}", json!({"size_gb": 20}), 204),
        ("PATCH", "/blocks/{block}", json!({"size_gb": 20}), 400),
        ("GET", "/domains/example.com", Value::Null, 200),
        ("GET", "/domains/example.net", Value::Null, 404),
        ("POST", "/domains/example.com/records", json!({"name": "www", "type": "A", "data": "192.0.2.1"}), 201),
        ("GET", "/domains/example.com/records", Value::Null, 200),
        ("GET", "/domains/example.com/records/{record}", Value::Null, 200),
        ("DELETE", "/domains/example.com/records/{record}", Value::Null, 204),
        ("DELETE", "/blocks/{block}", Value::Null, 204),
        ("DELETE", "/instances/{instance}", Value::Null, 204),
        ("GET", "/instances/{instance}", Value::Null, 404),
        ("POST", "/instances", json!({"region": "nowhere", "plan": "vc2-1c-1gb", "os_id": 2136}), 400),
    ];
    for (m, p, body, want) in steps {
        let p = fill(p, &ids);
        let mut req = http.request(m.parse().unwrap(), format!("{}{p}", sim.base_url)).bearer_auth(KEY);
        if !body.is_null() {
            req = req.json(&serde_json::from_str::<Value>(&fill(&body.to_string(), &ids)).unwrap());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert_eq!(status, want, "{m} {p}: {text}");
        let t = template(p.split('?').next().unwrap());
        assert!(api.documents_status(t, m, status), "{m} {t} does not document {status}");
        if status == 204 {
            assert!(text.is_empty(), "{m} {p}: 204 with a body");
            continue;
        }
        if api.response_schema(t, m, status).is_none() && status < 400 {
            // Documented without a body (the backup schedule's 200 "OK").
            assert!(text.is_empty(), "{m} {p}: {status} with a body the document does not describe");
            continue;
        }
        let v: Value = serde_json::from_str(&text).unwrap();
        if status >= 400 {
            // "All 4xx errors will return a JSON response object with an
            // `error` attribute" (the document's introduction).
            assert!(v["error"].is_string() && v["status"] == status, "{m} {p}: {v}");
            continue;
        }
        let schema = api.response_schema(t, m, status).unwrap_or_else(|| panic!("{m} {t} {status}: no schema"));
        let errs = api.validate(schema, &v, false);
        assert!(errs.is_empty(), "{m} {p}: {errs:?}\n{v}");
        for (key, name) in [("instance", "instance"), ("block", "block"), ("record", "record")] {
            if let Some(id) = v.get(key).and_then(|o| o["id"].as_str()) {
                ids.entry(name).or_insert_with(|| id.to_owned());
            }
        }
    }
    // 401 for a key the simulator does not know, on an operation that
    // documents it.
    let a = http.get(format!("{}/instances", sim.base_url)).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(a.status(), 401);
    assert!(api.documents_status("/instances", "GET", 401));
    let v: Value = a.json().await.unwrap();
    assert_eq!(v["status"], 401);
}
