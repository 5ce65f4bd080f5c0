//! Token scopes: every route refuses, with 403 and nothing changed or asked
//! of the provider, a token whose scope is below what the route needs; the
//! OpenAPI document says what each operation needs, and which take an
//! `Idempotency-Key`.

use super::*;
use oduflow_store::TokenScope;

/// What each route needs, as the scopes are defined (read: every read;
/// operate: create, update, delete, reconcile, import, promote; admin:
/// attested actions, orphans, the queue, the inventory, the key), stated
/// here apart from the server's own table.
fn expected(method: &str, path: &str) -> TokenScope {
    if method == "GET" {
        return TokenScope::Read;
    }
    const ADMIN: &[&str] = &["/adopt", "/abandon", "/orphans/", "/queue/", "/inventory", "/credentials/"];
    if ADMIN.iter().any(|a| path.contains(a)) { TokenScope::Admin } else { TokenScope::Operate }
}

/// The route matrix: each route of `ROUTES` (every documented operation,
/// `/openapi.json` and `/metrics`) called with a token of each scope.
#[tokio::test]
async fn every_route_refuses_a_token_below_its_scope_and_the_document_says_which() {
    let h = H::start().await;
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
    h.store.client_create(&ClientName::parse("acme").unwrap(), &spec, "test", now_ms(), 5).await.unwrap();
    let mut tokens = vec![];
    for scope in TokenScope::ALL {
        let token = auth::token_generate();
        let name = format!("scoped-{scope}");
        h.store.api_token_create(&name, &auth::token_sha256(&token), scope, "test", now_ms()).await.unwrap();
        tokens.push((scope, token));
    }
    let (_, doc) = h.get("/openapi.json").await;
    for (method, path) in ROUTES {
        let needed = expected(method, path);
        let template = path.replace("/acme", "/{name}").replace("/00000000-0000-4000-8000-000000000000", "/{id}");
        if let Some(op) = doc["paths"][&template].get(method.to_ascii_lowercase()) {
            assert_eq!(op["security"], json!([{ "bearer": [needed.as_str()] }]), "{method} {template}");
            let keyed = op["parameters"].as_array().into_iter().flatten().any(|p| p["name"] == "Idempotency-Key");
            assert_eq!(keyed, *method != "GET", "{method} {template}: the Idempotency-Key header");
        } else {
            assert!(!path.starts_with("/api/"), "{method} {path} is not in the document");
        }
        let call = |token: &str| {
            let req = h.http.request(Method::from_bytes(method.as_bytes()).unwrap(), h.url(path));
            req.bearer_auth(token).json(&create_body("newcomer")).send()
        };
        let before = h.footprint().await;
        for (scope, token) in tokens.iter().filter(|(s, _)| *s < needed) {
            let got = json_of(call(token).await.unwrap()).await;
            assert_error(&got, 403, "forbidden");
            let message = got.1["error"]["message"].as_str().unwrap();
            assert!(message.contains(&format!("needs {needed}")) && message.contains(scope.as_str()), "{message}");
        }
        assert_eq!(h.footprint().await, before, "{method} {path}: a refused token changed or asked something");
        for (scope, token) in tokens.iter().filter(|(s, _)| *s >= needed) {
            let status = call(token).await.unwrap().status().as_u16();
            assert!(status != 401 && status != 403, "{method} {path} refused a {scope} token: {status}");
        }
    }
}
