//! `Idempotency-Key`: a retried request gets its first answer again and
//! changes nothing more; the same key with another request is refused; a
//! bad key is refused before anything runs; keys are each token's own.

use super::*;

impl H {
    /// A call with an `Idempotency-Key`: (status, replayed, body).
    async fn keyed(&self, token: &str, method: &str, path: &str, key: &str, body: &Value) -> (u16, bool, Value) {
        let r = self
            .http
            .request(Method::from_bytes(method.as_bytes()).unwrap(), self.url(path))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .unwrap();
        let replayed = r.headers().get("idempotency-replayed").is_some_and(|v| v == "true");
        let (status, v) = json_of(r).await;
        (status, replayed, v)
    }
}

#[tokio::test]
async fn a_retry_with_the_same_key_gets_the_first_answer_and_acts_once() {
    let h = H::start().await;
    let token = h.token.clone();
    let first = h.keyed(&token, "POST", "/api/v1/clients", "create-acme-1", &create_body("acme")).await;
    assert_eq!((first.0, first.1), (201, false), "{first:?}");
    let before = h.footprint().await;
    let again = h.keyed(&token, "POST", "/api/v1/clients", "create-acme-1", &create_body("acme")).await;
    assert_eq!((again.0, again.1, &again.2), (201, true, &first.2), "the first answer, again");
    assert_eq!(h.footprint().await, before, "a replay changed or asked something");

    // The same key with another body, or another path: refused.
    for (method, path, body) in
        [("POST", "/api/v1/clients", create_body("beta")), ("DELETE", "/api/v1/clients/acme", json!({}))]
    {
        let got = h.keyed(&token, method, path, "create-acme-1", &body).await;
        assert_error(&(got.0, got.2), 422, "idempotency_key_reused");
    }
    assert_eq!(h.footprint().await, before, "a reused key changed something");

    // Bad keys: refused before anything runs or is stored.
    for key in ["", "has space", &"k".repeat(256), "clé"] {
        let r = h
            .http
            .post(h.url("/api/v1/clients"))
            .bearer_auth(&token)
            .header("Idempotency-Key", key.as_bytes())
            .json(&create_body("gamma"))
            .send()
            .await
            .unwrap();
        assert_error(&json_of(r).await, 422, "invalid_input");
    }
    assert_eq!(h.footprint().await, before, "a bad key changed something");

    // Another token's key of the same name is its own.
    let other = auth::token_generate();
    h.store
        .api_token_create("other", &auth::token_sha256(&other), oduflow_store::TokenScope::Admin, "test", 1)
        .await
        .unwrap();
    let theirs = h.keyed(&other, "POST", "/api/v1/clients", "create-acme-1", &create_body("acme")).await;
    assert_eq!((theirs.0, theirs.1), (409, false), "{theirs:?}");
}

/// Every changing route takes a key: asked twice, it answers the same
/// (but for answers that decided nothing lasting: those run again).
#[tokio::test]
async fn every_changing_route_answers_a_retry_as_it_answered_first() {
    let h = H::start().await;
    h.fixture().await;
    let token = h.token.clone();
    for (i, (method, path)) in ROUTES.iter().filter(|(m, _)| *m != "GET").enumerate() {
        let path = path.replace("/acme", "/acme-ready");
        let key = format!("walk-{i}");
        let body = create_body("walker");
        let first = h.keyed(&token, method, &path, &key, &body).await;
        let again = h.keyed(&token, method, &path, &key, &body).await;
        if first.0 >= 500 || matches!(first.0, 408 | 409 | 415 | 429) {
            assert!(!again.1, "{method} {path}: a {} is not kept for a replay", first.0);
            continue;
        }
        assert_eq!((again.0, &again.2), (first.0, &first.2), "{method} {path}");
        assert!(again.1, "{method} {path}: not marked replayed");
    }
}

/// `PUT /api/v1/clients/{name}` states the whole desired spec: created when
/// absent, updated with what differs, left alone when it already holds;
/// a field no update changes is refused, naming it; nothing changes twice.
#[tokio::test]
async fn a_desired_spec_is_stated_in_one_idempotent_call() {
    let h = H::start().await;
    let put = |body: Value| {
        let h = &h;
        async move { h.call(Method::PUT, "/api/v1/clients/acme", Some(body)).await }
    };
    let mut want = create_body("acme");
    let (status, v) = put(want.clone()).await;
    assert_eq!(status, 201, "{v}");
    let before = h.footprint().await;
    let (status, v) = put(want.clone()).await;
    assert_eq!((status, v["job_id"].is_null()), (200, true), "unchanged: {v}");
    assert_eq!(h.footprint().await, before, "an unchanged spec changed something");
    want["tags"] = json!(["web"]);
    want["volume_gb"] = json!(60);
    let (status, v) = put(want.clone()).await;
    assert_eq!(status, 202, "{v}");
    let c = h.store.client_get("acme").await.unwrap().unwrap();
    assert_eq!((c.infra.spec.volume_gb, c.infra.spec.server.tags.clone()), (60, vec!["web".to_owned()]));
    let updates = h.store.events_by_kind(EventKind::ClientUpdateRequested).await.unwrap();
    assert_eq!(updates.len(), 1, "one update for both fields");
    let (status, _) = put(want.clone()).await;
    assert_eq!(status, 200, "now it holds");
    let before = h.footprint().await;
    let mut keys = want.clone();
    keys["ssh_keys"] = json!([oduflow_sim::catalog::SSH_KEYS[0].0]);
    let got = put(keys).await;
    assert_error(&got, 422, "invalid_input");
    assert!(got.1["error"]["message"].as_str().unwrap().contains("ssh_keys"), "{}", got.1);
    let mut other = want.clone();
    other["name"] = json!("beta");
    assert_error(&put(other).await, 422, "invalid_input");
    assert_eq!(h.footprint().await, before, "a refused statement changed something");
}

/// A key belongs to the token that used it, not to its name: a token made
/// later under a revoked token's name does not get the old token's
/// answers. An answer that decided nothing lasting (415: the body was not
/// read) is not kept: the corrected retry with the same key runs.
#[tokio::test]
async fn a_key_is_its_tokens_own_and_an_answer_that_decided_nothing_is_not_kept() {
    let h = H::start().await;
    let first = auth::token_generate();
    h.store
        .api_token_create("ci", &auth::token_sha256(&first), oduflow_store::TokenScope::Admin, "test", 1)
        .await
        .unwrap();
    let got = h.keyed(&first, "POST", "/api/v1/clients", "k-1", &create_body("acme")).await;
    assert_eq!(got.0, 201, "{got:?}");
    h.store.api_token_revoke("ci", "test", now_ms()).await.unwrap();
    let second = auth::token_generate();
    h.store
        .api_token_create("ci", &auth::token_sha256(&second), oduflow_store::TokenScope::Admin, "test", 2)
        .await
        .unwrap();
    let theirs = h.keyed(&second, "POST", "/api/v1/clients", "k-1", &create_body("acme")).await;
    assert_eq!((theirs.0, theirs.1), (409, false), "another token's answer: {theirs:?}");

    let body = create_body("beta").to_string();
    let bare = h
        .http
        .post(h.url("/api/v1/clients"))
        .bearer_auth(&h.token)
        .header("Idempotency-Key", "k-2")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status().as_u16(), 415);
    let fixed = h.keyed(&h.token, "POST", "/api/v1/clients", "k-2", &create_body("beta")).await;
    assert_eq!((fixed.0, fixed.1), (201, false), "{fixed:?}");
}
