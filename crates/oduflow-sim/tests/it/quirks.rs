//! What Vultr does that its document does not say, or says otherwise, one
//! test per row of docs/vultr.md's table of quirks ("Vultr against its
//! document"), each naming its source.

use crate::*;

/// A listing's filters match exactly, and a filter that matches nothing
/// lists nothing (OA:7278-7340; `hostname` in SPEC26; govultr's
/// `ListOptions` sends `tag` and `main_ip`). A simulator that ignored them
/// would show a client trusting the filter every instance as its own.
#[tokio::test]
async fn instance_listing_filters_match_exactly() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    for (label, tag, host) in [("a", "web", "h-a"), ("b", "db", "h-b"), ("c", "web", "h-c")] {
        let body = json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "label": label,
                          "tags": [tag, "all"], "hostname": host});
        assert_eq!(api.post("/instances", body).await.status(), 202);
    }
    let labels = |v: Value| -> Vec<String> {
        v["instances"].as_array().unwrap().iter().map(|i| i["label"].as_str().unwrap().to_owned()).collect()
    };
    let (_, all) = body(api.get("/instances").await).await;
    let ip = all["instances"][1]["main_ip"].as_str().unwrap().to_owned();
    for (query, want) in [
        ("tag=web", vec!["a", "c"]),
        ("tag=all", vec!["a", "b", "c"]),
        ("tag=no-such-tag", vec![]),
        ("hostname=h-b", vec!["b"]),
        (&format!("main_ip={ip}"), vec!["b"]),
        ("main_ip=192.0.2.250", vec![]),
        ("firewall_group_id=nope", vec![]),
        ("label=c&tag=web", vec!["c"]),
    ] {
        let (status, v) = body(api.get(&format!("/instances?{query}")).await).await;
        assert_eq!((status, labels(v)), (200, want.iter().map(|s| s.to_string()).collect::<Vec<_>>()), "{query}");
    }
}

/// OA marks `/os`, `/applications` and `/regions/{id}/availability`
/// `security: []`, as it does `/regions` and `/plans`: no key needed. Keyed
/// reads still need one.
#[tokio::test]
async fn the_documents_open_reads_need_no_key() {
    let sim = start(SimConfig::default().instant()).await;
    let http = http();
    for path in ["/os", "/applications", "/regions/ewr/availability", "/regions", "/plans"] {
        let r = http.get(format!("{}{path}", sim.base_url)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    for path in ["/ssh-keys", "/instances", "/account"] {
        let r = http.get(format!("{}{path}", sim.base_url)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
}

/// Every error under `/v2` is Vultr's JSON body `{"error", "status"}`, a
/// wrong method on a route that exists included (the review found a bare
/// 405 with no body).
#[tokio::test]
async fn a_wrong_method_is_answered_in_vultrs_error_body() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let r = api.http.put(api.url("/instances")).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    let (status, v) = body(r).await;
    assert_eq!((status, v["status"].as_u64()), (405, Some(405)), "{v}");
    assert!(v["error"].is_string(), "{v}");
}

/// `GET /instances/{id}/user-data` (OA:9353) answers the create's user
/// data, base64 as sent; 404 for an unknown instance.
#[tokio::test]
async fn user_data_reads_back_as_it_was_sent() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let body_in = json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "label": "u", "user_data": "aGVsbG8="});
    let (_, v) = body(api.post("/instances", body_in).await).await;
    let id = v["instance"]["id"].as_str().unwrap();
    let (status, v) = body(api.get(&format!("/instances/{id}/user-data")).await).await;
    assert_eq!((status, &v["user_data"]["data"]), (200, &json!("aGVsbG8=")), "{v}");
    let (status, _) = body(api.get("/instances/nope/user-data").await).await;
    assert_eq!(status, 404);
}

/// "volumes size can only be modified every 60s" (Vultr's Ansible
/// collection, `tests/integration/targets/block_storage/tasks/tests.yml`,
/// which waits 61 s before each resize and between a resize and a detach):
/// a second resize, or a detach, within the interval is refused and
/// changes nothing; after it, both go through.
#[tokio::test]
async fn a_volume_resizes_once_a_minute() {
    let sim = start(SimConfig { resize_interval_ms: 60_000, ..SimConfig::default().instant() }).await;
    let api = Api::new(&sim);
    let vm = api.create_instance("vm").await;
    let blk = api.create_block("vol").await;
    assert_eq!(
        api.post(&format!("/blocks/{blk}/attach"), json!({"instance_id": vm, "live": true})).await.status(),
        204
    );
    assert_eq!(api.patch(&format!("/blocks/{blk}"), json!({"size_gb": 20})).await.status(), 204);
    let (status, v) = body(api.patch(&format!("/blocks/{blk}"), json!({"size_gb": 30})).await).await;
    assert_eq!(status, 400, "{v}");
    let (status, _) = body(api.post(&format!("/blocks/{blk}/detach"), json!({"live": true})).await).await;
    assert_eq!(status, 400);
    let (_, v) = body(api.get(&format!("/blocks/{blk}")).await).await;
    assert_eq!(
        (v["block"]["size_gb"].as_i64(), v["block"]["attached_to_instance"].as_str()),
        (Some(20), Some(vm.as_str()))
    );
    sim.advance(Duration::from_millis(60_000));
    assert_eq!(api.patch(&format!("/blocks/{blk}"), json!({"size_gb": 30})).await.status(), 204);
}

/// An instance carries IPv6 as three flat fields, `v6_main_ip`,
/// `v6_network` and `v6_network_size` (an integer), as govultr's
/// `Instance` reads them and OA's own examples show them, not as the
/// `v6_networks[]` objects OA's `instance` schema describes (OA:16156):
/// the address inside its network, and `""`, `""`, 0 without IPv6. The
/// create answer, a GET and the listing alike.
#[tokio::test]
async fn an_instance_carries_flat_v6_fields_not_v6_networks() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let with_v6 = json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "label": "v6", "enable_ipv6": true});
    let (status, created) = body(api.post("/instances", with_v6).await).await;
    assert_eq!(status, 202, "{created}");
    let v6 = created["instance"]["id"].as_str().unwrap().to_owned();
    let v4 = api.create_instance("v4").await;
    let (_, got6) = body(api.get(&format!("/instances/{v6}")).await).await;
    let (_, got4) = body(api.get(&format!("/instances/{v4}")).await).await;
    let (_, listed) = body(api.get("/instances").await).await;
    let in_list = |id: &str| listed["instances"].as_array().unwrap().iter().find(|i| i["id"] == id).unwrap().clone();
    for (what, i) in
        [("create", created["instance"].clone()), ("get", got6["instance"].clone()), ("list", in_list(&v6))]
    {
        assert!(i.get("v6_networks").is_none(), "{what}: {i}");
        let ip: std::net::Ipv6Addr = i["v6_main_ip"].as_str().unwrap().parse().unwrap();
        let net: std::net::Ipv6Addr = i["v6_network"].as_str().unwrap().parse().unwrap();
        assert_eq!(i["v6_network_size"].as_u64(), Some(64), "{what}: {i}");
        let prefix = std::net::Ipv6Addr::from(u128::from(ip) & u128::MAX << 64);
        assert_eq!(prefix, net, "{what}: {ip} is in {net}/64, which names its own first address");
    }
    for (what, i) in [("get", got4["instance"].clone()), ("list", in_list(&v4))] {
        assert!(i.get("v6_networks").is_none(), "{what}: {i}");
        let v6_fields = (&i["v6_main_ip"], &i["v6_network"], &i["v6_network_size"]);
        assert_eq!(v6_fields, (&json!(""), &json!(""), &json!(0)), "{what}: {i}");
    }
}

/// A block carries `block_type` (OA's examples, OA:3287 and OA:3382;
/// govultr's `BlockStorage`), though OA's `blockstorage` schema lacks it,
/// on the create answer, a GET and the listing. A create may leave it out
/// (OA's `create_block_request`: optional, "soon to become required", no
/// default named); the simulator then makes `high_perf`, the type the
/// portal preselects.
#[tokio::test]
async fn a_block_carries_its_type_and_a_create_may_leave_it_out() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let mut made = vec![];
    for (body_in, want) in [
        (json!({"region": "ewr", "size_gb": 10, "label": "untyped"}), "high_perf"),
        (json!({"region": "ewr", "size_gb": 10, "label": "hp", "block_type": "high_perf"}), "high_perf"),
        (json!({"region": "ewr", "size_gb": 40, "label": "so", "block_type": "storage_opt"}), "storage_opt"),
    ] {
        let (status, v) = body(api.post("/blocks", body_in.clone()).await).await;
        assert_eq!((status, v["block"]["block_type"].as_str()), (202, Some(want)), "{body_in}: {v}");
        made.push((v["block"]["id"].as_str().unwrap().to_owned(), want));
    }
    let (_, listed) = body(api.get("/blocks").await).await;
    for (id, want) in &made {
        let (_, v) = body(api.get(&format!("/blocks/{id}")).await).await;
        assert_eq!(v["block"]["block_type"].as_str(), Some(*want), "{v}");
        let l = listed["blocks"].as_array().unwrap().iter().find(|b| b["id"] == id.as_str()).unwrap();
        assert_eq!(l["block_type"].as_str(), Some(*want), "{l}");
    }
}

/// A deleted block answers `GET /blocks/{id}` with 404 "Invalid block
/// storage ID." (docs/vultr.md §8: Terraform's provider met it, and its
/// block read takes these words as gone), though OA documents no 404 for
/// that GET (OA's `get-block`); a DELETE of it answers 404 too (which OA
/// documents), in the same words (the simulator's: Vultr's are not known).
#[tokio::test]
async fn a_deleted_block_answers_404_to_get_and_delete() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let blk = api.create_block("gone").await;
    assert_eq!(api.delete(&format!("/blocks/{blk}")).await.status(), 204);
    let gone = json!({"error": "Invalid block storage ID.", "status": 404});
    let (status, v) = body(api.get(&format!("/blocks/{blk}")).await).await;
    assert_eq!((status, &v), (404, &gone));
    let (status, v) = body(api.delete(&format!("/blocks/{blk}")).await).await;
    assert_eq!((status, &v), (404, &gone));
    let (_, listed) = body(api.get("/blocks").await).await;
    assert_eq!(listed["blocks"], json!([]), "the listing leaves it out once its lag is over");
}

/// docs/vultr.md §12 is the table of quirks: each row names the test that
/// checks it, and that test must exist here.
#[test]
fn every_row_names_a_test_that_exists() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let doc = std::fs::read_to_string(format!("{root}/docs/vultr.md")).unwrap();
    let table = doc.split("## §12 ").nth(1).expect("docs/vultr.md has §12");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it");
    let mut named = 0;
    for row in table.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| quirk")) {
        let checked_by = row.trim_end_matches('|').rsplit('|').next().unwrap();
        for name in checked_by.split(',').map(|n| n.trim().trim_matches('`')) {
            let (module, test) = name.split_once("::").unwrap_or_else(|| panic!("{name}: module::test"));
            let source = std::fs::read_to_string(format!("{dir}/{module}.rs")).unwrap_or_default();
            assert!(source.contains(&format!("fn {test}(")), "§12 names {name}, which does not exist");
            named += 1;
        }
    }
    assert!(named >= 18, "§12 names {named} tests");
}
