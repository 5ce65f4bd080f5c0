//! Running it as a service: tokens only where they belong, and a
//! dashboard that says when the queue is stopped.

use super::{H, ROUTES, assert_error, create_body, json_of, now_ms};
use reqwest::Method;

/// `?token=` opens the dashboard's page only: sent to
/// every API route, `/metrics` and `/openapi.json` with a valid token, it
/// is refused 401 like no token at all, and nothing is stored or asked of
/// the provider; the dashboard still takes it.
#[tokio::test]
async fn a_query_token_opens_the_dashboard_and_no_api_route() {
    let h = H::start().await;
    let before = h.footprint().await;
    for (method, path) in ROUTES {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        for url in [format!("{path}?token={}", h.token), format!("{path}?limit=5&token={}", h.token)] {
            let r = h.http.request(method.clone(), h.url(&url)).json(&create_body("acme")).send().await.unwrap();
            assert_error(&json_of(r).await, 401, "unauthorized");
        }
    }
    let after = h.footprint().await;
    assert_eq!(after.0, before.0, "a query token stored something");
    assert_eq!((after.1, after.2), (0, 0), "a query token reached the provider");
    // The dashboard takes it (scripts, headless browsers) ...
    let page = h.http.get(h.url(&format!("/?token={}", h.token))).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("Intervention queue"));
    // ... and the same request without it shows the login form.
    let page = h.http.get(h.url("/?token=odf_wrong")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 401);
    // The bearer header still opens the API.
    assert_eq!(h.get("/api/v1/queue").await.0, 200);
}

/// The route list the token tests walk names every operation the OpenAPI
/// document describes (`GET /api/v1/orphans` was left out of it), so a
/// route added later is covered or this fails (`/openapi.json` and
/// `/metrics` are in the list besides).
#[tokio::test]
async fn the_route_list_covers_every_documented_operation() {
    let h = H::start().await;
    let (status, doc) = h.get("/openapi.json").await;
    assert_eq!(status, 200);
    let paths = doc["paths"].as_object().expect("paths");
    let mut missing = vec![];
    // `/health` is open to all, on purpose.
    for (path, ops) in paths.iter().filter(|(p, _)| p.starts_with("/api/")) {
        let concrete = path.replace("{name}", "acme").replace("{id}", "00000000-0000-4000-8000-000000000000");
        for method in ops.as_object().expect("operations").keys() {
            let method = method.to_ascii_uppercase();
            if !ROUTES.iter().any(|(m, p)| *m == method && *p == concrete) {
                missing.push(format!("{method} {path}"));
            }
        }
    }
    assert!(paths.len() >= 15, "{paths:?}");
    assert!(missing.is_empty(), "ROUTES leaves out {missing:?}");
}

/// The dashboard's queue line, as a browser gets it.
async fn queue_line(h: &H) -> String {
    let (status, page) = h.text("/").await;
    assert_eq!(status, 200);
    let start = page.find("<p id=\"queue\">").expect("the queue line");
    page[start..].split("</p>").next().unwrap().to_owned()
}

/// "Queue: running" only when the queue claims jobs: paused, or waiting
/// for `reconcile --all` after a restore, it says stopped and why, with the
/// command that starts it again.
#[tokio::test]
async fn the_dashboard_says_when_the_queue_is_stopped_and_why() {
    let h = H::start().await;
    h.post("/api/v1/clients", create_body("acme")).await;
    let line = queue_line(&h).await;
    assert!(line.contains("running") && !line.contains("stopped"), "{line}");
    h.store.queue_set_paused(true, "test", now_ms()).await.unwrap();
    let line = queue_line(&h).await;
    assert!(line.contains("stopped") && !line.contains("running"), "{line}");
    assert!(line.contains("paused") && line.contains("oduflow queue resume"), "{line}");
    h.store.queue_set_paused(false, "test", now_ms()).await.unwrap();
    h.store.restore_declare("copied back from last night", "test", now_ms()).await.unwrap();
    let line = queue_line(&h).await;
    assert!(line.contains("stopped") && !line.contains("running"), "{line}");
    assert!(line.contains("restore pending") && line.contains("copied back from last night"), "{line}");
    assert!(line.contains("oduflow reconcile --all"), "{line}");
    // The queue really claims nothing meanwhile.
    assert!(h.store.restore_pending().await.unwrap().is_some());
}

/// `serve --secure-cookies`: the dashboard's cookies are `Secure` on every
/// answer, for a TLS proxy in front that says nothing of it.
#[tokio::test]
async fn secure_cookies_are_secure_without_a_proxy_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = oduflow_store::Store::connect(&oduflow_store::testing::sqlite_url(dir.path()), true).await.unwrap();
    store.migrate().await.unwrap();
    let state = oduflow_server::AppState::read_only(store, 5).with_secure_cookies(true);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(oduflow_server::serve_on(state, listener, std::future::pending()));
    let r = reqwest::get(format!("{base}/")).await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("oduflow_csrf=") && cookie.contains("; Secure"), "{cookie}");
}
