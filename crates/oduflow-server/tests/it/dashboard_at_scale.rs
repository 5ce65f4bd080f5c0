//! The dashboard at 10,000 clients in headless Chromium: the intervention
//! queue grouped by reason and cause with counts, ages and the bulk
//! command; the client table a page at a time, filtered and searched. The
//! figures (the page's time at the server and in the browser, its size)
//! are printed, not asserted; the screenshot is kept.

use super::*;
use std::time::Instant;

const CLIENTS: usize = 10_000;

/// 10,000 clients written straight into the database (a test's shortcut:
/// the engine never writes a client so): 9,500 ready, 300 blocked
/// `adapter_failed` by one cause, 150 blocked `uncertain_create` (each its
/// own label in the evidence) and 50 pending.
async fn fill(store: &oduflow_store::Store) {
    let server = r#"{"hostname":"h","ssh_keys":[],"user_data":null,"tags":[],"firewall_group":null,"ipv6":false,"vpcs":[],"backups":null}"#;
    let sql = [
        format!(
            "INSERT INTO clients (id, name, created_ms) WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n \
             WHERE i < {}) SELECT printf('00000000-0000-7000-8000-%012d', i), printf('c%05d', i), 1 FROM n",
            CLIENTS - 1
        ),
        format!(
            "INSERT INTO infra (client_id, region, plan, os_id, volume_gb, volume_type, target, generation, status, \
             blocked_reason, blocked_detail, updated_ms, image, server, dns_key) \
             SELECT id, 'ewr', 'vc2-1c-1gb', 2284, 40, 'high_perf', 'present', 1, \
             CASE WHEN i < 300 OR (i >= 300 AND i < 450) THEN 'blocked' WHEN i < 500 THEN 'pending' ELSE 'ready' END, \
             CASE WHEN i < 300 THEN 'adapter_failed' WHEN i < 450 THEN 'uncertain_create' END, \
             CASE WHEN i < 300 THEN 'adapter vpn: ensure failed 10 times; last: connection refused (vpn-gw down)' \
               WHEN i < 450 THEN 'vm create sent, outcome unknown: label oduflow-' || id || '-vm-' || printf('%012d', i) || ' not listed after 60 observations' END, \
             {now} - i * 1000, '{{\"os\":2284}}', '{server}', name \
             FROM (SELECT id, name, CAST(substr(name, 2) AS INTEGER) AS i FROM clients)",
            now = now_ms()
        ),
    ];
    for s in sql {
        oduflow_store::testing::execute_raw(store, &s).await.unwrap();
    }
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_at_10000_clients_groups_the_queue_and_pages_the_table() {
    let h = H::start().await;
    fill(&h.store).await;
    let page = |q: &str| h.url(&format!("/?token={}{q}", h.token));
    let t = Instant::now();
    let body = h.http.get(page("")).send().await.unwrap().text().await.unwrap();
    let served = t.elapsed();
    println!("dashboard at {CLIENTS} clients: served in {} ms, {} KiB", served.as_millis(), body.len() / 1024);
    assert!(body.contains("Intervention queue (450)"), "{body:.2000}");
    assert!(body.contains("data-reason=\"adapter_failed\" data-count=\"300\""), "one cause, one group");
    assert!(body.contains("data-reason=\"uncertain_create\" data-count=\"150\""), "labels differ, the cause does not");
    assert!(body.contains("<code>oduflow bulk reconcile --reason adapter_failed --dry-run</code>"));
    assert!(body.contains("the oldest blocked"));
    assert_eq!(count(&body, "<div class=\"case\""), 2 * oduflow_server::dashboard::CASES_PER_GROUP);
    assert!(body.contains("<code>oduflow reconcile c00299</code>"), "the oldest block's card, its own commands");
    assert_eq!(count(&body, "<tr data-client="), oduflow_server::dashboard::CLIENTS_PER_PAGE);
    assert!(body.contains("page 1 of 100") && body.contains("Clients (10000 of 10000)"));
    assert!(body.contains("data-kind=\"orphans\"><b>0</b>orphans"));
    assert!(!body.contains(&h.token), "the sign-in token is never written into the page");

    let third = h.http.get(page("&blocked_reason=adapter_failed&page=3")).send().await.unwrap().text().await.unwrap();
    assert!(third.contains("Clients (300 of 10000)") && third.contains("page 3 of 3"), "{third:.3000}");
    assert!(third.contains("<tr data-client=\"c00299\">") && !third.contains("<tr data-client=\"c00199\">"));
    let found = h.http.get(page("&name=c0001*")).send().await.unwrap().text().await.unwrap();
    assert_eq!(count(&found, "<tr data-client="), 10, "a name pattern finds c00010 to c00019");
    let bad = h.http.get(page("&name=Bad_Name")).send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 422);

    // The API's list, a page at a time, its total in a header.
    let r = h.http.get(h.url("/api/v1/clients?limit=50&offset=100")).bearer_auth(&h.token).send().await.unwrap();
    assert_eq!(r.headers()["x-total-count"], "10000");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!((v.as_array().unwrap().len(), &v[0]["name"]), (50, &json!("c00100")));
    let r = h.http.get(h.url("/api/v1/clients?blocked_reason=adapter_failed&limit=1000")).bearer_auth(&h.token);
    assert_eq!(r.send().await.unwrap().headers()["x-total-count"], "300");
    let r = h.http.get(h.url("/api/v1/interventions?limit=20&offset=440")).bearer_auth(&h.token).send().await.unwrap();
    assert_eq!(r.headers()["x-total-count"], "450");
    assert_eq!(r.json::<serde_json::Value>().await.unwrap().as_array().unwrap().len(), 10);
    let r = h.http.get(h.url("/api/v1/receipts?limit=5")).bearer_auth(&h.token).send().await.unwrap();
    assert_eq!(r.headers()["x-total-count"], "0");
    assert_error(&h.get("/api/v1/interventions?limit=5000").await, 422, "invalid_input");
    assert_error(&h.get("/api/v1/clients?limit=0").await, 422, "invalid_input");
    assert_error(&h.get("/api/v1/clients?limit=1001").await, 422, "invalid_input");
    assert_error(&h.post("/api/v1/bulk/reconcile?status=blocked&limit=5", json!({})).await, 422, "invalid_input");

    let t = Instant::now();
    let dom = run_chromium(&["--dump-dom", &page("")]).await;
    let rendered = t.elapsed();
    assert!(dom.contains("Intervention queue (450)"));
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("dashboard-10000.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(&[&format!("--screenshot={}", shot.display()), "--window-size=1280,2400", &page("")]).await;
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real picture: {} bytes", png.len());
    println!(
        "dashboard at {CLIENTS} clients: loaded and rendered by headless Chromium in {} ms (its start included); \
         screenshot {}",
        rendered.as_millis(),
        shot.display()
    );
}
