//! Issue 18, "Run it as a service": tokens only where they belong, and a
//! dashboard that says when the queue is stopped.

use super::{H, ROUTES, assert_error, create_body, json_of};
use reqwest::Method;

/// `?token=` opens the dashboard's page only (issue 18, item 8): sent to
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
