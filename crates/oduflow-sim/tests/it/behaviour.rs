//! What docs/vultr.md records, one behaviour per test.

use crate::*;
use oduflow_model::KeyFingerprint;

/// Lifecycles far longer than a test runs: only [`SimHandle::advance`]
/// moves them, so no assertion depends on how fast the machine is.
fn slow_lifecycle() -> SimConfig {
    SimConfig {
        pending_ms: 30_000,
        installing_ms: 30_000,
        block_pending_ms: 20_000,
        get_404_window_ms: 15_000,
        list_lag_ms: 20_000,
        ..SimConfig::default()
    }
}

/// Moves the simulator's clock `ms` milliseconds on.
fn advance(sim: &SimHandle, ms: u64) {
    sim.advance(Duration::from_millis(ms));
}

#[tokio::test]
async fn instance_moves_pending_then_installingbooting_then_ok_after_a_404_window() {
    let sim = start(slow_lifecycle()).await;
    let api = Api::new(&sim);
    let r = api.post("/instances", json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "label": "a"})).await;
    let (status, v) = body(r).await;
    assert_eq!(status, 202);
    let i = &v["instance"];
    assert_eq!((i["status"].as_str(), i["server_status"].as_str()), (Some("pending"), Some("none")));
    assert_eq!(i["main_ip"], "0.0.0.0");
    assert!(i["default_password"].is_string());
    let id = i["id"].as_str().unwrap();

    // TF#462: GET 404 right after a successful create.
    let (status, v) = body(api.get(&format!("/instances/{id}")).await).await;
    assert_eq!((status, v["error"].as_str(), v["status"].as_u64()), (404, Some("instance not found"), Some(404)));

    advance(&sim, 20_000); // t = 20 s: past the window, still pending
    let (_, v) = body(api.get(&format!("/instances/{id}")).await).await;
    assert_eq!(v["instance"]["status"], "pending");
    advance(&sim, 25_000); // t = 45 s
    let (_, v) = body(api.get(&format!("/instances/{id}")).await).await;
    assert_eq!(
        (v["instance"]["status"].as_str(), v["instance"]["server_status"].as_str()),
        (Some("active"), Some("installingbooting"))
    );
    advance(&sim, 30_000); // t = 75 s
    let (_, v) = body(api.get(&format!("/instances/{id}")).await).await;
    assert_eq!(
        (v["instance"]["status"].as_str(), v["instance"]["server_status"].as_str()),
        (Some("active"), Some("ok"))
    );
    assert_ne!(v["instance"]["main_ip"], "0.0.0.0");
}

#[tokio::test]
async fn listings_lag_filter_by_label_and_end_with_empty_cursors() {
    let sim = start(slow_lifecycle()).await;
    let api = Api::new(&sim);
    for n in 0..5 {
        api.create_instance(&format!("lbl-{}", n % 2)).await;
    }
    let (_, v) = body(api.get("/instances").await).await;
    assert_eq!(v["instances"].as_array().unwrap().len(), 0, "a fresh instance is not listed yet");
    assert_eq!(v["meta"]["links"]["next"], "");
    advance(&sim, 25_000);

    let mut cursor = String::new();
    let mut seen = 0;
    let mut pages = 0;
    loop {
        let q = if cursor.is_empty() {
            "/instances?per_page=2".to_owned()
        } else {
            format!("/instances?per_page=2&cursor={cursor}")
        };
        let (status, v) = body(api.get(&q).await).await;
        assert_eq!(status, 200);
        assert_eq!(v["meta"]["total"], 5);
        if pages == 0 {
            assert_eq!(v["meta"]["links"]["prev"], "");
        }
        seen += v["instances"].as_array().unwrap().len();
        pages += 1;
        cursor = v["meta"]["links"]["next"].as_str().unwrap().to_owned();
        if cursor.is_empty() {
            break;
        }
    }
    assert_eq!((seen, pages), (5, 3));

    let (_, v) = body(api.get("/instances?label=lbl-1").await).await;
    let labels: Vec<_> = v["instances"].as_array().unwrap().iter().map(|i| i["label"].clone()).collect();
    assert_eq!(labels, vec![json!("lbl-1"), json!("lbl-1")]);
    let (status, _) = body(api.get("/instances?cursor=not-a-cursor").await).await;
    assert_eq!(status, 400);
}

/// A cursor names where the next page starts, not how many items came
/// before (docs/vultr.md §2): deleting an item a scan has passed skips
/// nothing it has not reached.
#[tokio::test]
async fn a_deletion_during_a_scan_skips_no_item_still_there() {
    let sim = start(slow_lifecycle()).await;
    let api = Api::new(&sim);
    let mut ids = vec![];
    for n in 1..=5 {
        ids.push(api.create_block(&format!("pg-{n}")).await);
    }
    advance(&sim, 25_000);
    let labels = |v: &Value| -> Vec<String> {
        v["blocks"].as_array().unwrap().iter().map(|b| b["label"].as_str().unwrap().to_owned()).collect()
    };
    let (_, v) = body(api.get("/blocks?per_page=2").await).await;
    assert_eq!(labels(&v), ["pg-1", "pg-2"]);
    let cursor = v["meta"]["links"]["next"].as_str().unwrap().to_owned();
    // pg-1 (passed) and pg-3 (the next page's first) are deleted meanwhile.
    for id in [&ids[0], &ids[2]] {
        assert_eq!(api.delete(&format!("/blocks/{id}")).await.status(), 204);
    }
    advance(&sim, 25_000);
    let (status, v) = body(api.get(&format!("/blocks?per_page=2&cursor={cursor}")).await).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(labels(&v), ["pg-4", "pg-5"]);
    assert_eq!((v["meta"]["total"].as_u64(), v["meta"]["links"]["next"].as_str()), (Some(3), Some("")));
}

#[tokio::test]
async fn delete_and_attach_answer_500_until_the_instance_is_ok_then_204_without_body() {
    let sim = start(slow_lifecycle()).await;
    let api = Api::new(&sim);
    let vm = api.create_instance("vm").await;
    let blk = api.create_block("vol").await;
    advance(&sim, 20_000); // past the 404 window, instance pending

    let (status, v) = body(api.delete(&format!("/instances/{vm}")).await).await;
    assert_eq!(status, 500);
    assert!(v["error"].as_str().unwrap().contains("not currently active"), "{v}");
    advance(&sim, 20_000); // t = 40 s: installingbooting
    let (status, v) =
        body(api.post(&format!("/blocks/{blk}/attach"), json!({"instance_id": vm, "live": true})).await).await;
    assert_eq!(status, 500);
    assert!(v["error"].as_str().unwrap().contains("locked"), "{v}");
    let (status, v) = body(api.delete(&format!("/instances/{vm}")).await).await;
    assert_eq!(status, 500);
    assert!(v["error"].as_str().unwrap().contains("currently locked"), "{v}");

    advance(&sim, 30_000); // t = 70 s: ok
    let r = api.post(&format!("/blocks/{blk}/attach"), json!({"instance_id": vm, "live": true})).await;
    assert_eq!(r.status(), 204);
    assert!(r.text().await.unwrap().is_empty(), "204 has no body");
    // Attachment is visible only through attached_to_instance.
    let (_, v) = body(api.get(&format!("/blocks/{blk}")).await).await;
    assert_eq!(v["block"]["attached_to_instance"], json!(vm));
    assert_eq!(v["block"]["status"], "active");
    let (status, v) = body(api.post(&format!("/blocks/{blk}/attach"), json!({"instance_id": vm})).await).await;
    assert_eq!(status, 400, "already attached: {v}");

    let r = api.post(&format!("/blocks/{blk}/detach"), json!({"live": true})).await;
    assert_eq!(r.status(), 204);
    assert!(r.text().await.unwrap().is_empty());
    let (_, v) = body(api.get(&format!("/blocks/{blk}")).await).await;
    assert_eq!(v["block"]["attached_to_instance"], "");
    let (status, v) = body(api.post(&format!("/blocks/{blk}/detach"), json!({})).await).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("Block storage volume is not currently attached to a server"))
    );

    let r = api.delete(&format!("/instances/{vm}")).await;
    assert_eq!(r.status(), 204);
    assert!(r.text().await.unwrap().is_empty());
    assert_eq!(api.get(&format!("/instances/{vm}")).await.status(), 404);
    let r = api.delete(&format!("/blocks/{blk}")).await;
    assert_eq!(r.status(), 204);
    assert_eq!(api.get(&format!("/blocks/{blk}")).await.status(), 404);

    // Deleted resources stay in the ledger, with their deletion time.
    let ledger = sim.ledger();
    assert_eq!(ledger.resources.len(), 2);
    assert!(ledger.resources.iter().all(|r| r.deleted_at.is_some()));
    assert_eq!(ledger.attaches_per_block.get(&blk), Some(&1));
}

#[tokio::test]
async fn a_non_live_attach_locks_the_instance_for_a_while() {
    let sim = start(SimConfig { attach_lock_ms: 30_000, ..SimConfig::default().instant() }).await;
    let api = Api::new(&sim);
    let vm = api.create_instance("vm").await;
    let blk = api.create_block("vol").await;
    assert_eq!(
        api.post(&format!("/blocks/{blk}/attach"), json!({"instance_id": vm, "live": false})).await.status(),
        204
    );
    let (_, v) = body(api.get(&format!("/instances/{vm}")).await).await;
    assert_eq!(v["instance"]["server_status"], "locked");
    assert_eq!(api.delete(&format!("/instances/{vm}")).await.status(), 500);
    advance(&sim, 35_000);
    assert_eq!(api.delete(&format!("/instances/{vm}")).await.status(), 204);
}

#[tokio::test]
async fn listings_keep_a_deleted_resource_for_the_lag() {
    let sim = start(SimConfig { list_lag_ms: 20_000, ..SimConfig::default().instant() }).await;
    let api = Api::new(&sim);
    let blk = api.create_block("vol").await;
    advance(&sim, 25_000);
    assert_eq!(api.delete(&format!("/blocks/{blk}")).await.status(), 204);
    let (_, v) = body(api.get("/blocks").await).await;
    assert_eq!(v["blocks"].as_array().unwrap().len(), 1, "absence from a listing lags deletion too");
    advance(&sim, 25_000);
    let (_, v) = body(api.get("/blocks").await).await;
    assert_eq!(v["blocks"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn unknown_or_missing_key_gets_401_but_regions_and_plans_need_none() {
    let sim = start(SimConfig::default().instant()).await;
    let mut api = Api::new(&sim);
    api.key = "not-a-key";
    let (status, v) = body(api.get("/account").await).await;
    assert_eq!((status, v["error"].as_str(), v["status"].as_u64()), (401, Some("Invalid API token."), Some(401)));
    let r = http().get(format!("{}/instances", sim.base_url)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = http().get(format!("{}/regions", sim.base_url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = http().get(format!("{}/plans", sim.base_url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    api.key = KEY;
    let (status, v) = body(api.get("/account").await).await;
    assert_eq!(status, 200);
    assert!(v["account"]["email"].is_string());
}

#[tokio::test]
async fn invalid_region_plan_size_or_body_is_400_and_creates_nothing() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let cases = [
        ("/instances", json!({"region": "xxx", "plan": "vc2-1c-1gb", "os_id": 2136}), "Invalid region chosen."),
        ("/instances", json!({"region": "ewr", "plan": "vc9-huge", "os_id": 2136}), "Invalid plan chosen."),
        ("/instances", json!({"region": "ewr", "plan": "vhf-1c-1gb", "os_id": 1}), "Invalid os_id."),
        ("/instances", json!({"plan": "vc2-1c-1gb", "os_id": 2136}), "Both region and plan are required."),
        ("/blocks", json!({"region": "ewr", "size_gb": 5, "block_type": "high_perf"}), "Invalid size_gb"),
        ("/blocks", json!({"region": "ewr", "size_gb": 20, "block_type": "storage_opt"}), "Invalid size_gb"),
        ("/blocks", json!({"region": "mel", "size_gb": 50, "block_type": "high_perf"}), "not available"),
        ("/blocks", json!({"region": "ewr", "size_gb": 50, "block_type": "fast"}), "Invalid block_type"),
    ];
    for (path, req, msg) in cases {
        let (status, v) = body(api.post(path, req.clone()).await).await;
        assert_eq!(status, 400, "{req}");
        assert_eq!(v["status"], 400);
        assert!(v["error"].as_str().unwrap().contains(msg), "{req}: {v}");
    }
    let r = api.http.post(api.url("/instances")).bearer_auth(KEY).body("{not json").send().await.unwrap();
    assert_eq!(r.status(), 400);
    let ledger = sim.ledger();
    assert!(ledger.resources.is_empty() && ledger.creates_per_label.is_empty());
}

#[tokio::test]
async fn over_the_rate_the_sim_answers_429_with_retry_after() {
    let sim = start(SimConfig { rate_per_sec: 5, ..SimConfig::default().instant() }).await;
    let api = Api::new(&sim);
    let mut limited = 0;
    for _ in 0..12 {
        let r = api.get("/account").await;
        if r.status() == 429 {
            assert_eq!(r.headers()["retry-after"], "1");
            let (_, v) = body(r).await;
            assert_eq!(v["status"], 429);
            limited += 1;
        }
    }
    assert!(limited >= 5, "only {limited} of 12 back-to-back requests were limited at 5/s");
    assert_eq!(sim.ledger().responses_429_rate_limit, limited);
    advance(&sim, 1_100);
    assert_eq!(api.get("/account").await.status(), 200, "the bucket refills");
}

#[tokio::test]
async fn ledger_records_creator_fingerprint_counts_and_routes_over_http_and_in_process() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let vm = api.create_instance("oduflow-x").await;
    api.create_instance("oduflow-x").await;
    api.create_block("oduflow-y").await;
    api.get(&format!("/instances/{vm}")).await;
    let (status, over_http) = body(http().get(format!("http://{}/sim/ledger", sim.addr)).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let ledger = sim.ledger();
    assert_eq!(serde_json::to_value(&ledger).unwrap(), over_http);
    assert_eq!(ledger.creates_per_label["oduflow-x"], 2);
    assert_eq!(ledger.creates_per_label["oduflow-y"], 1);
    let fp = KeyFingerprint::of_key(&secrecy::SecretString::from(KEY.to_owned())).0;
    assert!(ledger.resources.iter().all(|r| r.key_fingerprint == fp && r.region == "ewr"));
    assert_eq!(ledger.requests["POST /v2/instances"], 2);
    assert_eq!(ledger.requests["GET /v2/instances/{id}"], 1);
    assert_eq!(ledger.responses_by_status[&202], 3);
    assert!(!over_http.to_string().contains(KEY), "the ledger shows fingerprints, never keys");
}

#[tokio::test]
async fn dns_records_create_get_list_delete() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let (status, v) = body(
        api.post("/domains/example.com/records", json!({"name": "www", "type": "A", "data": "192.0.2.7", "ttl": 300}))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    let id = v["record"]["id"].as_str().unwrap().to_owned();
    let (_, v) = body(api.get(&format!("/domains/example.com/records/{id}")).await).await;
    assert_eq!(v["record"]["data"], "192.0.2.7");
    let (_, v) = body(api.get("/domains/example.com/records").await).await;
    assert_eq!(v["records"].as_array().unwrap().len(), 1);
    let (status, _) =
        body(api.post("/domains/example.com/records", json!({"name": "m", "type": "MX", "data": "mx"})).await).await;
    assert_eq!(status, 400, "MX needs a priority");
    let (status, _) =
        body(api.post("/domains/nope.org/records", json!({"name": "a", "type": "A", "data": "1.2.3.4"})).await).await;
    assert_eq!(status, 404);
    let r = api.delete(&format!("/domains/example.com/records/{id}")).await;
    assert_eq!(r.status(), 204);
    assert_eq!(api.get(&format!("/domains/example.com/records/{id}")).await.status(), 404);
    assert_eq!(sim.ledger().resources[0].label, "www.example.com");
}

#[tokio::test]
async fn unknown_route_is_vultrs_json_404() {
    let sim = start(SimConfig::default()).await;
    let api = Api::new(&sim);
    let (status, v) = body(api.get("/nothing-here").await).await;
    assert_eq!((status, v), (404, json!({"error": "Not found.", "status": 404})));
}
