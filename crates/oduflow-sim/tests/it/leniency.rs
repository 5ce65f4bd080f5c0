//! As lenient and as strict as Vultr with what third-party clients send
//! (govultr, Vultr's Ansible collection, schemathesis with the document):
//! `null` is absent, documented fields that change nothing pass, a
//! reinstall and a malformed value are refused and change nothing.

use crate::*;

/// `(status, error)` of an answer.
async fn answer(r: Response) -> (u16, Value) {
    let (status, v) = body(r).await;
    (status, v["error"].clone())
}

#[tokio::test]
async fn a_null_member_counts_as_absent_in_every_body() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    // What Vultr's Ansible collection sends to create a server.
    let ansible = json!({
        "label": "x", "plan": "vc2-1c-1gb", "app_id": null, "os_id": 2284, "iso_id": null, "image_id": null,
        "snapshot_id": null, "script_id": null, "region": "ewr", "enable_ipv6": true, "reserved_ipv4": null,
        "firewall_group_id": null, "user_data": null, "tags": ["a"], "activation_email": false,
        "ddos_protection": null, "sshkey_id": null, "backups": "disabled",
    });
    let (status, v) = body(api.post("/instances", ansible).await).await;
    assert_eq!(status, 202, "{v}");
    let i = &v["instance"];
    assert_eq!(
        (i["os_id"].as_i64(), i["firewall_group_id"].as_str(), i["tags"].clone()),
        (Some(2284), Some(""), json!(["a"]))
    );
    let vm = i["id"].as_str().unwrap().to_owned();
    let created = &sim.ledger().instance_create_bodies[0];
    assert!(created.get("app_id").is_none() && created["os_id"] == 2284, "{created}");

    let r =
        api.patch(&format!("/instances/{vm}"), json!({"label": "y", "tags": null, "firewall_group_id": null})).await;
    assert_eq!(r.status(), 202);
    let schedule = format!("/instances/{vm}/backup-schedule");
    let r = api.post(&schedule, json!({"type": "weekly", "dow": 2, "hour": null, "dom": null})).await;
    assert_eq!(r.status(), 200);
    let (_, v) = body(api.get(&schedule).await).await;
    assert_eq!(v["backup_schedule"], json!({"enabled": true, "type": "weekly", "hour": 0, "dow": 2, "dom": 1}));
    let (_, v) = body(api.get(&format!("/instances/{vm}")).await).await;
    assert_eq!((v["instance"]["label"].as_str(), v["instance"]["tags"].clone()), (Some("y"), json!(["a"])));

    let (status, v) =
        body(api.post("/blocks", json!({"region": "ewr", "size_gb": 10, "label": "b", "block_type": null})).await)
            .await;
    assert_eq!((status, v["block"]["block_type"].as_str()), (202, Some("high_perf")));
    let blk = v["block"]["id"].as_str().unwrap().to_owned();
    assert_eq!(api.patch(&format!("/blocks/{blk}"), json!({"label": "b2", "size_gb": null})).await.status(), 204);
    let (_, v) = body(api.get(&format!("/blocks/{blk}")).await).await;
    assert_eq!((v["block"]["label"].as_str(), v["block"]["size_gb"].as_i64()), (Some("b2"), Some(10)));

    let rec = json!({"name": "www", "type": "A", "data": "192.0.2.7", "ttl": null, "priority": null});
    let (status, v) = body(api.post("/domains/example.com/records", rec).await).await;
    assert_eq!((status, v["record"]["ttl"].as_i64()), (201, Some(300)));
    let path = format!("/domains/example.com/records/{}", v["record"]["id"].as_str().unwrap());
    let r = api.patch(&path, json!({"data": "192.0.2.8", "name": null, "ttl": null, "priority": null})).await;
    assert_eq!(r.status(), 204);
    let (_, v) = body(api.get(&path).await).await;
    assert_eq!((v["record"]["name"].as_str(), v["record"]["data"].as_str()), (Some("www"), Some("192.0.2.8")));
}

#[tokio::test]
async fn an_instance_patch_takes_what_changes_nothing_and_refuses_a_reinstall() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let vm = api.create_instance("vm").await;
    let path = format!("/instances/{vm}");
    // govultr's InstanceUpdateReq: `tags` and `ddos_protection` always.
    let (status, v) = body(api.patch(&path, json!({"tags": ["a", "b"], "ddos_protection": null})).await).await;
    assert_eq!((status, v["instance"]["tags"].clone()), (202, json!(["a", "b"])));
    let noop = json!({"label": "vm2", "ddos_protection": false, "enable_ipv6": false, "backups": "disabled",
        "user_scheme": "root", "attach_vpc": [], "detach_vpc": [], "enable_vpc": false});
    assert_eq!(api.patch(&path, noop).await.status(), 202);

    let refused = [
        (json!({"os_id": 2284}), "The simulator does not reinstall instances (os_id)."),
        (json!({"app_id": 2, "tags": ["c"]}), "The simulator does not reinstall instances (app_id)."),
        (json!({"image_id": "docker"}), "The simulator does not reinstall instances (image_id)."),
        (
            json!({"snapshot_id": "9f0e1d2c-3b4a-4c5d-8e6f-7a8b9c0d1e2f"}),
            "The simulator does not reinstall instances (snapshot_id).",
        ),
        (json!({"user_data": "ZWNobyBoaQ=="}), "The simulator does not reinstall instances (user_data)."),
        (json!({"ddos_protection": true, "tags": ["c"]}), "The simulator does not model changing ddos_protection."),
        (json!({"enable_ipv6": true}), "The simulator does not model changing enable_ipv6."),
        (json!({"backups": "enabled"}), "The simulator does not model changing backups."),
        (json!({"user_scheme": "limited"}), "The simulator does not model changing user_scheme."),
        (
            json!({"attach_vpc": ["6c5b4a39-2817-4f6e-9d5c-4b3a29180f7e"]}),
            "The simulator does not model changing attach_vpc.",
        ),
        (json!({"hostname": "h", "tags": ["c"]}), "The simulator does not model changing hostname."),
        (json!({"ddos_protection": "no"}), "ddos_protection must be a boolean."),
        (json!({"ddos_protection": false, "tags": ["a", "b"], "plan": null}), "Nothing to change"),
    ];
    for (req, msg) in refused {
        assert_eq!(answer(api.patch(&path, req.clone()).await).await, (400, json!(msg)), "{req}");
    }
    let (_, v) = body(api.get(&path).await).await;
    let i = &v["instance"];
    assert_eq!(
        (i["label"].as_str(), i["tags"].clone(), i["os_id"].as_i64()),
        (Some("vm2"), json!(["a", "b"]), Some(2136))
    );
    assert_eq!(sim.ledger().instance_patch_bodies.len(), 2, "only the accepted PATCHes");

    // govultr's plan change carries `tags: null`: the tags stay.
    let r = api.patch(&path, json!({"plan": "vc2-1c-2gb", "tags": null, "ddos_protection": null})).await;
    assert_eq!(r.status(), 202);
    let (_, v) = body(api.get(&path).await).await;
    assert_eq!(
        (v["instance"]["plan"].as_str(), v["instance"]["tags"].clone()),
        (Some("vc2-1c-2gb"), json!(["a", "b"]))
    );
}

#[tokio::test]
async fn a_backup_schedule_needs_only_its_type_and_the_day_it_runs() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let vm = api.create_instance("vm").await;
    let path = format!("/instances/{vm}/backup-schedule");
    let shown = |v: &Value| v["backup_schedule"].clone();
    for (req, want) in [
        (json!({"type": "daily", "hour": 3}), json!({"enabled": true, "type": "daily", "hour": 3, "dow": 1, "dom": 1})),
        (json!({"type": "daily"}), json!({"enabled": true, "type": "daily", "hour": 0, "dow": 1, "dom": 1})),
        (
            json!({"type": "weekly", "dow": 7}),
            json!({"enabled": true, "type": "weekly", "hour": 0, "dow": 7, "dom": 1}),
        ),
        (
            json!({"type": "monthly", "dom": 28, "hour": 23}),
            json!({"enabled": true, "type": "monthly", "hour": 23, "dow": 1, "dom": 28}),
        ),
    ] {
        let r = api.post(&path, req.clone()).await;
        assert_eq!(r.status(), 200, "{req}");
        assert!(r.text().await.unwrap().is_empty(), "200 with no body");
        assert_eq!(shown(&body(api.get(&path).await).await.1), want, "{req}");
    }
    let refused = [
        (json!({"type": "weekly", "hour": 3}), "dow is required for a weekly backup schedule."),
        (json!({"type": "monthly", "dow": 3}), "dom is required for a monthly backup schedule."),
        (json!({"type": "daily", "hour": 24}), "Invalid backup schedule."),
        (json!({"type": "daily", "dow": 8}), "Invalid backup schedule."),
        (json!({"type": "weekly", "dow": 0}), "Invalid backup schedule."),
        (json!({"type": "monthly", "dom": 29}), "Invalid backup schedule."),
        (json!({"type": "daily", "hour": "3"}), "Invalid backup schedule."),
        (json!({"hour": 3}), "Invalid backup schedule type."),
    ];
    for (req, msg) in refused {
        assert_eq!(answer(api.post(&path, req.clone()).await).await, (400, json!(msg)), "{req}");
    }
    let (_, v) = body(api.get(&path).await).await;
    assert_eq!(shown(&v), json!({"enabled": true, "type": "monthly", "hour": 23, "dow": 1, "dom": 28}), "unchanged");
    assert_eq!(sim.ledger().backup_schedules_set[&vm], 4);
}

#[tokio::test]
async fn a_dns_patch_ignores_the_same_type_and_records_only_what_it_applies() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let (_, v) =
        body(api.post("/domains/example.com/records", json!({"name": "www", "type": "A", "data": "192.0.2.7"})).await)
            .await;
    let id = v["record"]["id"].as_str().unwrap().to_owned();
    let path = format!("/domains/example.com/records/{id}");
    // govultr's DomainRecordUpdateReq carries the type.
    assert_eq!(api.patch(&path, json!({"type": "A", "data": "192.0.2.9", "ttl": 120})).await.status(), 204);
    // The same values again: applied (oduflow repeats its PATCHes).
    assert_eq!(api.patch(&path, json!({"data": "192.0.2.9"})).await.status(), 204);

    let refused = [
        (json!({"type": "AAAA", "data": "2001:db8::1"}), "The record type cannot be changed."),
        (json!({"type": 1, "data": "192.0.2.10"}), "The record type cannot be changed."),
        (json!({"type": "A"}), "Nothing to change"),
        (json!({}), "Nothing to change"),
        (json!({"name": null, "data": null, "ttl": null, "priority": null}), "Nothing to change"),
        (json!({"data": "192.0.2.10", "zone": "x"}), "Invalid field: zone."),
    ];
    for (req, msg) in refused {
        assert_eq!(answer(api.patch(&path, req.clone()).await).await, (400, json!(msg)), "{req}");
    }
    let missing = "/domains/example.com/records/00000000-0000-4000-8000-000000000000";
    assert_eq!(
        answer(api.patch(missing, json!({"data": "192.0.2.11"})).await).await,
        (404, json!("Record not found."))
    );

    let (_, v) = body(api.get(&path).await).await;
    let r = &v["record"];
    assert_eq!((r["type"].as_str(), r["data"].as_str(), r["ttl"].as_i64()), (Some("A"), Some("192.0.2.9"), Some(120)));
    let ids: Vec<Value> = sim.ledger().dns_patch_bodies.iter().map(|p| p["id"].clone()).collect();
    assert_eq!(ids, [json!(id), json!(id)], "the two applied, nothing refused or missing");
}

#[tokio::test]
async fn malformed_block_types_priorities_and_addresses_are_refused_and_create_nothing() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let (status, v) = body(api.post("/blocks", json!({"region": "ewr", "size_gb": 10, "block_type": {}})).await).await;
    assert_eq!((status, v["error"].as_str()), (400, Some("Invalid block_type. Use high_perf or storage_opt.")));

    let records = "/domains/example.com/records";
    for (req, msg) in [
        (json!({"name": "m", "type": "MX", "data": "mx.example.com", "priority": {}}), "priority must be an integer."),
        (json!({"name": "a", "type": "A", "data": "not-an-ip"}), "Invalid A record data: not-an-ip."),
        (json!({"name": "a", "type": "A", "data": "2001:db8::1"}), "Invalid A record data: 2001:db8::1."),
        (json!({"name": "a", "type": "AAAA", "data": "192.0.2.1"}), "Invalid AAAA record data: 192.0.2.1."),
    ] {
        assert_eq!(answer(api.post(records, req.clone()).await).await, (400, json!(msg)), "{req}");
    }
    assert!(sim.ledger().resources.is_empty(), "nothing created");

    // Only A and AAAA data is checked.
    for (rtype, data) in [("AAAA", "2001:db8::1"), ("CNAME", "not-an-ip"), ("TXT", "not-an-ip"), ("A", "192.0.2.1")] {
        let r = api.post(records, json!({"name": "ok", "type": rtype, "data": data})).await;
        assert_eq!(r.status(), 201, "{rtype} {data}");
    }
    let (_, v) = body(api.get(records).await).await;
    let a = v["records"].as_array().unwrap().iter().find(|r| r["type"] == "A").unwrap().clone();
    let path = format!("{records}/{}", a["id"].as_str().unwrap());
    for (req, msg) in [
        (json!({"priority": {}}), "priority must be an integer."),
        (json!({"data": "not-an-ip"}), "Invalid A record data: not-an-ip."),
    ] {
        assert_eq!(answer(api.patch(&path, req.clone()).await).await, (400, json!(msg)), "{req}");
    }
    assert_eq!(body(api.get(&path).await).await.1["record"], a, "unchanged");
    assert!(sim.ledger().dns_patch_bodies.is_empty());
}
