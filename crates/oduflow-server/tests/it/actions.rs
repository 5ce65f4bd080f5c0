//! `serve` without a key is read-only, and the actions that
//! existed only on the command line — the inventory (`reconcile --all`) and
//! `credentials rotate` — have endpoints.

use super::*;

/// A second key of the same simulated account.
const KEY2: &str = "vultr-key-SECOND-51c2e0";

/// Every action route: what a read-only server must refuse.
const ACTIONS: &[(&str, &str)] = &[
    ("POST", "/api/v1/clients"),
    ("DELETE", "/api/v1/clients/acme"),
    ("PATCH", "/api/v1/clients/acme"),
    ("PUT", "/api/v1/clients/acme"),
    ("POST", "/api/v1/clients/acme/reconcile"),
    ("POST", "/api/v1/clients/acme/adopt"),
    ("POST", "/api/v1/clients/acme/abandon"),
    ("POST", "/api/v1/bulk/reconcile?name=acme"),
    ("POST", "/api/v1/bulk/abandon?name=acme"),
    ("POST", "/api/v1/clients/acme/promote"),
    ("POST", "/api/v1/import"),
    ("POST", "/api/v1/orphans/00000000-0000-4000-8000-000000000000/adopt"),
    ("POST", "/api/v1/orphans/00000000-0000-4000-8000-000000000000/delete"),
    ("POST", "/api/v1/queue/pause"),
    ("POST", "/api/v1/queue/resume"),
    ("POST", "/api/v1/inventory"),
    ("POST", "/api/v1/credentials/rotate"),
];

#[tokio::test]
async fn serve_without_a_key_serves_the_dashboard_reads_and_metrics_and_refuses_every_action() {
    let h = H::start().await;
    h.store.client_create(&ClientName::parse("acme").unwrap(), &spec(), "test", now_ms(), 5).await.unwrap();
    // The same database, served by a second server started without a key.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = AppState::read_only(h.store.clone(), 5);
    assert!(state.is_read_only());
    tokio::spawn(oduflow_server::serve_on(state, listener, std::future::pending()));
    let get = |path: &str| h.http.get(format!("{base}{path}")).bearer_auth(&h.token).send();

    let page = get("/").await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("acme"));
    let (s, v) = json_of(get("/api/v1/clients").await.unwrap()).await;
    assert_eq!(s, 200);
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(get("/api/v1/queue").await.unwrap().status().as_u16(), 200);
    assert_eq!(get("/openapi.json").await.unwrap().status().as_u16(), 200);
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    assert!(metrics.contains("oduflow_clients{status=\"pending\"} 1"), "{metrics}");

    let before = h.footprint().await;
    for (method, path) in ACTIONS {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let url = format!("{base}{path}");
        // Without a token: 401 first; a read-only server tells anonymous
        // callers nothing more.
        let anon = json_of(h.http.request(method.clone(), &url).json(&create_body("x")).send().await.unwrap()).await;
        assert_error(&anon, 401, "unauthorized");
        let got = json_of(
            h.http.request(method.clone(), &url).bearer_auth(&h.token).json(&create_body("x")).send().await.unwrap(),
        )
        .await;
        assert_error(&got, 409, "read_only");
        assert!(got.1["error"]["message"].as_str().unwrap().contains("VULTR_API_KEY"), "{method} {path}: {}", got.1);
    }
    let after = h.footprint().await;
    assert_eq!(after.0, before.0, "a refused action changed the database");
    assert_eq!(after.2, before.2, "a refused action reached the provider");
}

fn spec() -> ClientSpec {
    ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap()
}

#[tokio::test]
async fn inventory_endpoint_reports_orphans_and_clears_a_pending_restore() {
    let h = H::start().await;
    h.store.client_create(&ClientName::parse("acme").unwrap(), &spec(), "test", now_ms(), 5).await.unwrap();
    h.drain().await;
    let orphan = h.orphan_of("acme").await;
    h.store.restore_declare("test restore", "test", now_ms()).await.unwrap();
    let (s, q) = h.get("/api/v1/queue").await;
    assert_eq!(s, 200);
    assert!(q["restore_pending"].is_string(), "{q}");
    // Provider actions wait for the inventory while the restore is pending.
    assert_error(&h.post("/api/v1/clients/acme/reconcile", json!({})).await, 409, "refused");

    let (s, inv) = h.post("/api/v1/inventory", json!({})).await;
    assert_eq!(s, 200, "{inv}");
    assert_eq!(inv["instances_listed"], 2, "{inv}");
    assert_eq!(inv["blocks_listed"], 1, "{inv}");
    let orphans = inv["orphans"].as_array().unwrap();
    assert!(orphans.iter().any(|o| o["id"] == orphan.as_str()), "{inv}");
    assert!(inv["missing"].as_array().unwrap().is_empty(), "{inv}");
    let (_, q) = h.get("/api/v1/queue").await;
    assert!(q["restore_pending"].is_null(), "the inventory did not clear the restore: {q}");
    assert_eq!(h.post("/api/v1/clients/acme/reconcile", json!({})).await.0, 200);
    // The same orphan is listed where the CLI's `orphan list` reads.
    let (_, listed) = h.get("/api/v1/orphans").await;
    assert!(listed.as_array().unwrap().iter().any(|o| o["resource_id"] == orphan.as_str()), "{listed}");
    // A body is not needed, and an unknown field in one is refused.
    let r = h.http.post(h.url("/api/v1/inventory")).bearer_auth(&h.token).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn credentials_rotate_endpoint_proves_rebinds_and_serve_acts_with_the_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = oduflow_store::testing::sqlite_url(dir.path());
    let h = H::start_with_sim(dir, url, |c| c.with_key(KEY2)).await;
    h.store.client_create(&ClientName::parse("acme").unwrap(), &spec(), "test", now_ms(), 5).await.unwrap();
    h.drain().await;
    let before = h.store.client_get("acme").await.unwrap().unwrap().infra.key_fingerprint.unwrap();

    // Bad bodies: refused before anything is asked or written.
    let prints = h.footprint().await;
    for body in [
        json!({}),
        json!({ "api_key": "" }),
        json!({ "api_key": "a b" }),
        json!({ "api_key": 5 }),
        json!({ "api_key": KEY2, "extra": 1 }),
        json!({ "api_key": "k".repeat(300) }),
    ] {
        let got = h.post("/api/v1/credentials/rotate", body.clone()).await;
        assert!(got.0 == 422 || got.0 == 400, "{body}: {got:?}");
        assert!(!got.1.to_string().contains(KEY2), "the key was echoed: {}", got.1);
    }
    assert_eq!(h.footprint().await.0, prints.0);
    // A key Vultr refuses: 422, nothing rebound, and the key not echoed.
    let got = h.post("/api/v1/credentials/rotate", json!({ "api_key": "not-a-key-of-this-account" })).await;
    assert_error(&got, 422, "invalid_input");
    assert!(!got.1.to_string().contains("not-a-key-of-this-account"));
    assert_eq!(h.store.client_get("acme").await.unwrap().unwrap().infra.key_fingerprint.unwrap(), before);

    let (s, v) = h.post("/api/v1/credentials/rotate", json!({ "api_key": KEY2 })).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["rebound"], json!(["acme"]));
    assert!(!v.to_string().contains(KEY2), "the key was echoed: {v}");
    let after = h.store.client_get("acme").await.unwrap().unwrap().infra.key_fingerprint.unwrap();
    assert_ne!(after, before);
    assert_eq!(v["key_fingerprint"], after.short());
    // serve must not keep its old key after a rotation, or its next
    // provider action is refused as made with the wrong key.
    let (s, v) = h.post("/api/v1/clients/acme/reconcile", json!({})).await;
    assert_eq!(s, 200, "serve still acts with the old key: {v}");
    // Rotating again to the same key rebinds nothing.
    let (s, v) = h.post("/api/v1/credentials/rotate", json!({ "api_key": KEY2 })).await;
    assert_eq!((s, v["rebound"].clone()), (200, json!([])));
}

/// A rotation made with the command line (`oduflow credentials rotate`,
/// here the same operator function on the same database) while `serve`
/// runs: serve still holds the old key. Its actions on a rebound client
/// are refused 409 `key_mismatch`, naming both fingerprints and how to
/// give it the new key (it used to answer "run `oduflow credentials
/// rotate` first", which had just been done); nothing is asked of the
/// provider. Given the new key over HTTP, it acts again.
#[tokio::test]
async fn a_rotation_made_on_the_command_line_is_named_by_a_running_serve() {
    let dir = tempfile::tempdir().unwrap();
    let url = oduflow_store::testing::sqlite_url(dir.path());
    let h = H::start_with_sim(dir, url, |c| c.with_key(KEY2)).await;
    h.store.client_create(&ClientName::parse("acme").unwrap(), &spec(), "test", now_ms(), 5).await.unwrap();
    h.drain().await;
    let cli = Arc::new(
        VultrClient::new(VultrConfig {
            base_url: h.sim.base_url.clone(),
            rate_per_sec: 1000,
            ..VultrConfig::new(secrecy::SecretString::from(KEY2.to_owned()))
        })
        .unwrap(),
    );
    let actor = oduflow_engine::operator::Actor { by: "cli", now_ms: now_ms(), attempts_max: 5 };
    let rebound = oduflow_engine::operator::credentials_rotate(&h.store, cli.as_ref(), actor).await.unwrap();
    assert_eq!(rebound.unwrap(), vec!["acme".to_owned()]);

    let requests = h.sim.ledger().request_log.len();
    let id = h.store.client_get("acme").await.unwrap().unwrap().id;
    let jobs = h.store.jobs_for_client(&id).await.unwrap().len();
    for (path, body) in [
        ("/api/v1/clients/acme/reconcile", json!({})),
        ("/api/v1/clients/acme/adopt", json!({ "kind": "vm", "id": "0b8b4e8c-3f5a-4a4b-9c57-1a2b3c4d5e6f" })),
    ] {
        let got = h.post(path, body).await;
        assert_error(&got, 409, "key_mismatch");
        let msg = got.1["error"]["message"].as_str().unwrap().to_owned();
        assert!(msg.contains(cli.fingerprint().short()) && msg.contains(h.provider.fingerprint().short()), "{msg}");
        assert!(msg.contains("restart") && msg.contains("/api/v1/credentials/rotate"), "{msg}");
        assert!(!msg.contains(KEY2) && !msg.contains(KEY), "a key was echoed: {msg}");
    }
    assert_eq!(h.sim.ledger().request_log.len(), requests, "a refused action asked the provider");
    assert_eq!(h.store.jobs_for_client(&id).await.unwrap().len(), jobs, "a refused action queued a job");
    // Given the new key, it acts again.
    let (s, v) = h.post("/api/v1/credentials/rotate", json!({ "api_key": KEY2 })).await;
    assert_eq!((s, v["rebound"].clone()), (200, json!([])), "{v}");
    let (s, v) = h.post("/api/v1/clients/acme/reconcile", json!({})).await;
    assert_eq!(s, 200, "{v}");
}

/// The orphan actions of the command line (`oduflow orphan adopt|delete`)
/// over HTTP: the same operation, so the same refusals and result.
#[tokio::test]
async fn orphan_routes_adopt_and_delete_as_the_command_line_does() {
    let h = H::start().await;
    h.store.client_create(&ClientName::parse("acme").unwrap(), &spec(), "test", now_ms(), 5).await.unwrap();
    h.drain().await;
    let orphan = h.orphan_of("acme").await;
    let before = h.footprint().await;
    assert_error(&h.post("/api/v1/orphans/not-an-id/adopt", json!({})).await, 422, "invalid_input");
    let delete = format!("/api/v1/orphans/{orphan}/delete");
    assert_error(&h.post(&delete, json!({ "by": "ops" })).await, 422, "invalid_input");
    assert_error(&h.post(&delete, json!({ "by": "ops", "reason": " " })).await, 422, "invalid_input");
    assert_eq!(h.footprint().await, before, "bad input changed something or asked the provider");
    // acme has its VM: the orphan labelled for it is not adopted over it.
    let refused = h.post(&format!("/api/v1/orphans/{orphan}/adopt"), json!({})).await;
    assert_error(&refused, 409, "refused");
    assert!(refused.1["error"]["message"].as_str().unwrap().contains("already has id"), "{}", refused.1);
    let (s, d) = h.post(&delete, json!({ "by": "ops", "reason": "a stray copy" })).await;
    assert_eq!(s, 200, "{d}");
    assert_eq!((d["kind"].as_str(), d["confirmed"].as_bool()), (Some("vm"), Some(true)), "{d}");
    let live =
        h.sim.ledger().resources.into_iter().filter(|r| r.deleted_at.is_none()).map(|r| r.id).collect::<Vec<_>>();
    assert!(!live.contains(&orphan), "{live:?}");
    let (_, listed) = h.get("/api/v1/orphans").await;
    assert_eq!(listed, json!([]), "resolved");
    let again = h.post(&delete, json!({ "by": "ops", "reason": "again" })).await;
    assert_error(&again, 409, "refused");
    assert!(again.1["error"]["message"].as_str().unwrap().contains("no longer an orphan"), "{}", again.1);
}

#[tokio::test]
async fn the_new_routes_are_in_the_openapi_document() {
    let h = H::start().await;
    let (s, doc) = h.get("/openapi.json").await;
    assert_eq!(s, 200);
    for path in
        ["/api/v1/inventory", "/api/v1/credentials/rotate", "/api/v1/orphans/{id}/adopt", "/api/v1/orphans/{id}/delete"]
    {
        let op = &doc["paths"][path]["post"];
        assert!(op.is_object(), "{path} missing from the OpenAPI document");
        assert!(op["responses"]["200"].is_object() && op["responses"]["409"].is_object(), "{path}: {op}");
    }
    assert!(doc["components"]["schemas"]["RotateRequest"]["properties"]["api_key"].is_object());
}
