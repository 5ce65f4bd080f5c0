//! Tests of `oduflow serve` over real HTTP on port 0: every endpoint and
//! action, bad input (each answered 4xx JSON, nothing stored, no provider
//! call), authentication, metrics, the dashboard in headless Chromium, and
//! that neither the API key nor a bearer token leaks anywhere.
//!
//! Clients in several states are produced by the real engine against the
//! Vultr simulator (a create rejected by the simulator, a create whose
//! answer is a 500 so its outcome stays unknown), not written by hand.

use oduflow_engine::{EngineConfig, SystemClock, Worker};
use oduflow_model::provider::{InstanceRequest, Outcome, Provider};
use oduflow_model::*;
use oduflow_server::{AppState, auth};
use oduflow_store::Store;
use oduflow_vultr::{VultrClient, VultrConfig};
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod actions;
mod actors;
mod bulk;
mod conformance;
mod dashboard_at_scale;
mod drift;
mod dry_runs;
mod feed;
mod idempotency;
mod import;
mod listen;
mod scopes;
mod service;
mod suggestions;

/// Recognisable, so a leak is easy to spot in any text.
const KEY: &str = "vultr-key-SECRET-7f3a9c";

struct H {
    base: String,
    /// The database URL, for a second, independent connection.
    db_url: String,
    token: String,
    store: Store,
    sim: oduflow_sim::SimHandle,
    /// The server's own provider client (operator actions only).
    provider: Arc<VultrClient>,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn vultr(sim: &oduflow_sim::SimHandle) -> Arc<VultrClient> {
    let cfg = VultrConfig {
        base_url: sim.base_url.clone(),
        rate_per_sec: 1000,
        request_timeout_ms: 2000,
        backoff_base_ms: 5,
        backoff_max_ms: 20,
        ..VultrConfig::new(secrecy::SecretString::from(KEY.to_owned()))
    };
    Arc::new(VultrClient::new(cfg).unwrap())
}

impl H {
    async fn start() -> H {
        let dir = tempfile::tempdir().unwrap();
        let url = oduflow_store::testing::sqlite_url(dir.path());
        H::start_on(dir, url).await
    }

    async fn start_on(dir: tempfile::TempDir, db_url: String) -> H {
        H::start_with_sim(dir, db_url, |c| c).await
    }

    /// As `start_on`, with the simulator's configuration adjusted by `sim`.
    async fn start_with_sim(
        dir: tempfile::TempDir,
        db_url: String,
        sim: impl FnOnce(oduflow_sim::SimConfig) -> oduflow_sim::SimConfig,
    ) -> H {
        let store = Store::connect(&db_url, true).await.unwrap();
        store.migrate().await.unwrap();
        let sim_cfg = sim(oduflow_sim::SimConfig { rate_per_sec: 1000, ..oduflow_sim::SimConfig::default() }
            .with_key(KEY)
            .instant());
        let sim = oduflow_sim::Sim::start(sim_cfg, "127.0.0.1:0".parse().unwrap()).await.unwrap();
        let provider = vultr(&sim);
        let token = auth::token_generate();
        store
            .api_token_create("tester", &auth::token_sha256(&token), oduflow_store::TokenScope::Admin, "test", 1)
            .await
            .unwrap();
        // One profile, `web`, as a config file's `[profile.web]` would give.
        let web = oduflow_model::SpecInput {
            region: Some("ewr".into()),
            plan: Some("vc2-1c-1gb".into()),
            os_id: Some(2284),
            volume_gb: Some(40),
            ssh_keys: Some(vec![oduflow_sim::catalog::SSH_KEYS[0].0.into()]),
            tags: Some(vec!["web".into()]),
            user_data: Some("#cloud-config\nhostname: {{oduflow.hostname}}\n".into()),
            ..Default::default()
        };
        let state = AppState::new(store.clone(), provider.clone(), 5)
            .with_listing_settle_ms(0)
            .with_profiles([("web".to_owned(), web)].into_iter().collect(), Default::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(oduflow_server::serve_on(state, listener, async {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        H { base, db_url, token, store, sim, provider, http, _dir: dir, _stop: stop }
    }

    /// Clients in several states, produced by the engine against the
    /// simulator: `acme-ready` (ready), `bad-plan` (blocked create_rejected:
    /// the simulator answers 400 "Invalid plan chosen."), `lost-create` and
    /// `lost-again` (blocked uncertain_create: every instance create is
    /// answered 500 without being applied), `pending-one` (pending) and
    /// `going-away` (deleting).
    /// A VM made straight through the provider with a label naming
    /// `client`'s vm, recorded nowhere, then an inventory pass: an orphan.
    async fn orphan_of(&self, client: &str) -> String {
        let c = self.store.client_get(client).await.unwrap().unwrap();
        let made = self
            .provider
            .instance_create(&InstanceRequest {
                region: c.infra.spec.region.clone(),
                plan: c.infra.spec.plan.clone(),
                image: c.infra.spec.image.clone(),
                label: Label::new_dispatch(&c.id, oduflow_model::ResourceKind::Vm),
                server: oduflow_model::ServerSpec { hostname: client.into(), ..Default::default() },
            })
            .await;
        let Outcome::Accepted(id) = made else { panic!("{made:?}") };
        let inv = oduflow_engine::operator::inventory(&self.store, self.provider.as_ref(), now_ms()).await.unwrap();
        assert!(inv.orphans.iter().any(|o| o.id == id.as_str()), "{inv:?}");
        id.0
    }

    async fn fixture(&self) {
        // `bad-plan` names a VPC the account lacks: the preflight does not
        // read VPCs, so the create goes out and Vultr answers 400.
        let spec = |plan: &str| {
            let mut s = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
            if plan != "vc2-1c-1gb" {
                s.server.vpcs = vec!["00000000-0000-4000-8000-000000000000".into()];
            }
            s
        };
        let create = |name: &str, plan: &str| {
            let (store, name, spec) = (self.store.clone(), ClientName::parse(name).unwrap(), spec(plan));
            async move { store.client_create(&name, &spec, "test", now_ms(), 5).await.unwrap() }
        };
        create("acme-ready", "vc2-1c-1gb").await;
        create("bad-plan", "vc2-99c-9gb").await;
        self.drain().await;
        self.sim.set_faults(oduflow_sim::Faults::server_errors_on(vec![oduflow_sim::Op::InstanceCreate])).unwrap();
        create("lost-create", "vc2-1c-1gb").await;
        create("lost-again", "vc2-1c-1gb").await;
        self.drain().await;
        self.sim.set_faults(oduflow_sim::Faults::default()).unwrap();
        create("pending-one", "vc2-1c-1gb").await;
        create("going-away", "vc2-1c-1gb").await;
        self.store.client_delete("going-away", "test", now_ms(), 5).await.unwrap();
        let status = |n: &'static str| {
            let store = self.store.clone();
            async move { store.client_get(n).await.unwrap().unwrap().infra }
        };
        assert_eq!(status("acme-ready").await.status, ClientStatus::Ready);
        assert_eq!(status("bad-plan").await.blocked_reason, Some(BlockedReason::CreateRejected));
        assert_eq!(status("lost-create").await.blocked_reason, Some(BlockedReason::UncertainCreate));
        assert_eq!(status("pending-one").await.status, ClientStatus::Pending);
        assert_eq!(status("going-away").await.status, ClientStatus::Deleting);
    }

    /// Runs a worker (with its own provider client, so the server's metrics
    /// count only the server's requests) until every client is settled.
    async fn drain(&self) {
        let engine = EngineConfig {
            worker_id: "test-worker".into(),
            poll_interval_ms: 5,
            observations_max: 3,
            retry_base_ms: 5,
            idle_ms: 5,
            concurrency: 2,
            ..EngineConfig::default()
        };
        let worker = Worker::new(self.store.clone(), vultr(&self.sim), engine, Arc::new(SystemClock));
        let (_tx, rx) = tokio::sync::watch::channel(false);
        tokio::time::timeout(Duration::from_secs(30), worker.run(true, rx))
            .await
            .expect("the fixture settles within 30 s")
            .unwrap();
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// An authenticated JSON call: (status, body).
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        json_of(req.send().await.unwrap()).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    async fn text(&self, path: &str) -> (u16, String) {
        let r = self.http.get(self.url(path)).bearer_auth(&self.token).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Rows in every table the API could write, and the provider's view:
    /// what "changes nothing" is checked against.
    async fn footprint(&self) -> (Vec<i64>, usize, u64) {
        let mut counts = vec![];
        for t in
            ["clients", "infra", "jobs", "dispatch_receipts", "change_receipts", "events", "settings", "api_tokens"]
        {
            counts.push(oduflow_store::testing::table_count(&self.store, t).await);
        }
        let provider_calls = self.provider.stats().snapshot().requests.len();
        let sim_requests = self.sim.ledger().requests.values().sum();
        (counts, provider_calls, sim_requests)
    }
}

fn now_ms() -> i64 {
    use oduflow_engine::Clock;
    SystemClock.now_ms()
}

async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("answer {status} is not JSON ({e}): {text:?}"));
    (status, v)
}

/// An error answer: the expected status and a `{"error": {code, message}}`
/// body with this code.
#[track_caller]
fn assert_error(got: &(u16, Value), status: u16, code: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["error"]["code"], code, "{}", got.1);
    assert!(got.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", got.1);
    assert_eq!(got.1.as_object().unwrap().len(), 1, "only the error object: {}", got.1);
}

fn create_body(name: &str) -> Value {
    json!({ "name": name, "region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2284, "volume_gb": 40 })
}

/// Every route, with a method that reaches its handler.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/v1/clients"),
    ("POST", "/api/v1/clients"),
    ("GET", "/api/v1/clients/acme"),
    ("DELETE", "/api/v1/clients/acme"),
    ("PATCH", "/api/v1/clients/acme"),
    ("PUT", "/api/v1/clients/acme"),
    ("GET", "/api/v1/clients/acme/receipts"),
    ("GET", "/api/v1/clients/acme/events"),
    ("POST", "/api/v1/clients/acme/reconcile"),
    ("POST", "/api/v1/clients/acme/adopt"),
    ("POST", "/api/v1/clients/acme/abandon"),
    ("POST", "/api/v1/bulk/reconcile"),
    ("POST", "/api/v1/bulk/abandon"),
    ("POST", "/api/v1/clients/acme/promote"),
    ("POST", "/api/v1/import"),
    ("GET", "/api/v1/interventions"),
    ("GET", "/api/v1/receipts"),
    ("GET", "/api/v1/orphans"),
    ("POST", "/api/v1/orphans/00000000-0000-4000-8000-000000000000/adopt"),
    ("POST", "/api/v1/orphans/00000000-0000-4000-8000-000000000000/delete"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/events/feed"),
    ("GET", "/api/v1/queue"),
    ("POST", "/api/v1/queue/pause"),
    ("POST", "/api/v1/queue/resume"),
    ("POST", "/api/v1/inventory"),
    ("POST", "/api/v1/credentials/rotate"),
    ("GET", "/openapi.json"),
    ("GET", "/metrics"),
];

/// Tests that touch the SQL the server relies on run on both stores.
/// The harness every `on_both_stores!` body of this binary takes, on the
/// test database the macro made (and drops).
async fn h_of(db: &oduflow_store::testing::TestDb) -> H {
    H::start_on(tempfile::tempdir().unwrap(), db.url.clone()).await
}

oduflow_store::on_both_stores!(
    migrated super::h_of =>
    clients_create_show_list_delete,
    clients_update_changes_the_spec_and_refuses_what_cannot_change,
    clients_create_from_a_profile,
    metrics_show_jobs_dispatches_blocked_reasons_provider_calls_and_lag,
    bad_input_is_a_4xx_json_error_that_stores_nothing_and_calls_no_provider,
    two_clients_cannot_share_a_dns_name,
);

// ---- authentication --------------------------------------------------------

/// The hole: `/health` said 200 "ok" whatever the database did, so a
/// monitor saw a healthy server that answered every other request 503.
/// Now it asks the database one query (at most 2 s): 503 `database_down`
/// while the database refuses connections, 200 again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_when_the_database_is_down() {
    let db = oduflow_store::testing::TestDb::migrated(oduflow_store::Backend::Postgres).await;
    let h = h_of(&db).await;
    let (s, v) = json_of(h.http.get(h.url("/health")).send().await.unwrap()).await;
    assert_eq!(s, 200, "{v}");
    oduflow_store::testing::pg_allow_connections(&db.url, false).await.unwrap();
    let down = json_of(h.http.get(h.url("/health")).send().await.unwrap()).await;
    oduflow_store::testing::pg_allow_connections(&db.url, true).await.unwrap();
    assert_eq!((down.0, down.1["error"]["code"].as_str()), (503, Some("database_down")), "{}", down.1);
    let (s, v) = json_of(h.http.get(h.url("/health")).send().await.unwrap()).await;
    assert_eq!((s, v["status"].as_str(), v["database"].as_str()), (200, Some("ok"), Some("ok")), "{v}");
}

#[tokio::test]
async fn health_is_open_and_every_other_route_needs_a_valid_token() {
    let h = H::start().await;
    let (s, v) = json_of(h.http.get(h.url("/health")).send().await.unwrap()).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("ok")));
    let revoked = auth::token_generate();
    h.store
        .api_token_create("old", &auth::token_sha256(&revoked), oduflow_store::TokenScope::Admin, "test", 1)
        .await
        .unwrap();
    h.store.api_token_revoke("old", "test", 2).await.unwrap();
    let before = h.footprint().await;
    for (method, path) in ROUTES {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        for auth in [
            None,
            Some("Bearer odf_wrong".to_owned()),
            Some(format!("Bearer {revoked}")),
            Some(format!("Basic {}", h.token)),
            Some(h.token.clone()),
        ] {
            let mut req = h.http.request(method.clone(), h.url(path)).json(&create_body("acme"));
            if let Some(a) = &auth {
                req = req.header("authorization", a);
            }
            let r = req.send().await.unwrap();
            assert_eq!(
                r.headers().get("www-authenticate").map(|v| v.to_str().unwrap()),
                Some("Bearer"),
                "{method} {path}"
            );
            let got = json_of(r).await;
            assert_error(&got, 401, "unauthorized");
        }
    }
    // Nothing was stored and Vultr was not asked.
    let after = h.footprint().await;
    assert_eq!(after.0, before.0);
    assert_eq!((after.1, after.2), (0, 0));
    // The dashboard without a token: the login form, not data.
    let r = h.http.get(h.url("/")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let page = r.text().await.unwrap();
    assert!(page.contains("<form method=\"post\" action=\"/login\"") && !page.contains("Intervention queue"));
}

#[tokio::test]
async fn a_revoked_token_stops_working_at_once() {
    let h = H::start().await;
    assert_eq!(h.get("/api/v1/queue").await.0, 200);
    h.store.api_token_revoke("tester", "test", now_ms()).await.unwrap();
    assert_error(&h.get("/api/v1/queue").await, 401, "unauthorized");
    let rows = h.store.api_token_list().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].revoked_ms.is_some());
    assert!(matches!(
        h.store.api_token_revoke("tester", "test", now_ms()).await,
        Err(oduflow_store::StoreError::TokenNotFound(_))
    ));
}

/// The session cookie an answer sets.
fn session_cookie(r: &reqwest::Response) -> String {
    let cookies = r.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned());
    cookies.into_iter().find(|c| c.starts_with("oduflow_session=")).expect("a session cookie")
}

#[tokio::test]
async fn dashboard_login_opens_a_session_of_its_own_that_only_the_dashboard_accepts() {
    let h = H::start().await;
    // The sign-in form: its anti-forgery value in a cookie and in the form.
    let login = h.http.get(h.url("/")).send().await.unwrap();
    assert_eq!(login.status().as_u16(), 401);
    let csrf_cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    let page = login.text().await.unwrap();
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let csrf_pair = csrf_cookie.split(';').next().unwrap().to_owned();
    assert!(csrf_pair.ends_with(&csrf), "{csrf_cookie} {csrf}");
    let form = |t: &str, c: &str, cookie: &str| {
        h.http.post(h.url("/login")).header("cookie", cookie).form(&[("token", t), ("csrf", c)])
    };
    // Without the cookie (a page elsewhere posting the form), or with a
    // wrong value: refused, no session.
    for (c, cookie) in [(csrf.as_str(), ""), ("forged", csrf_pair.as_str()), ("", csrf_pair.as_str())] {
        let r = form(&h.token, c, cookie).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        assert!(!r.headers().get_all("set-cookie").iter().any(|v| v.to_str().unwrap().starts_with("oduflow_session=")));
    }
    let r = form("odf_nope", &csrf, &csrf_pair).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = form(&h.token, &csrf, &csrf_pair).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let session = session_cookie(&r);
    assert!(session.contains("HttpOnly") && session.contains("SameSite=Strict") && session.contains("Max-Age=43200"));
    assert!(!session.contains("Secure"), "plain HTTP: {session}");
    assert!(!session.contains(&h.token), "the cookie holds the token: {session}");
    let pair = session.split(';').next().unwrap().to_owned();
    let page = h.http.get(h.url("/")).header("cookie", &pair).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let text = page.text().await.unwrap();
    assert!(text.contains("Intervention queue") && text.contains("Sign out"));
    // The token itself in a cookie (what the login set before sessions) opens nothing.
    let old = h.http.get(h.url("/")).header("cookie", format!("oduflow_token={}", h.token)).send().await.unwrap();
    assert_eq!(old.status().as_u16(), 401);
    // The session opens no API route (no CSRF surface there).
    let api = h.http.post(h.url("/api/v1/queue/pause")).header("cookie", &pair).send().await.unwrap();
    assert_error(&json_of(api).await, 401, "unauthorized");
    // Behind a TLS proxy that says so, the cookie is Secure.
    let r = form(&h.token, &csrf, &csrf_pair).header("x-forwarded-proto", "https").send().await.unwrap();
    let secure = session_cookie(&r);
    assert!(secure.contains("; Secure"), "{secure}");
    // Signing out needs the session's own form value; then the session ends.
    let logout = |c: &str| h.http.post(h.url("/logout")).header("cookie", &pair).form(&[("csrf", c)]);
    assert_eq!(logout("forged").send().await.unwrap().status().as_u16(), 403);
    let own = text.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    assert_eq!(logout(&own).send().await.unwrap().status().as_u16(), 303);
    let page = h.http.get(h.url("/")).header("cookie", &pair).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 401, "signed out");
    // Revoking the token ends its sessions too.
    let r = form(&h.token, &csrf, &csrf_pair).send().await.unwrap();
    let again = session_cookie(&r);
    let again = again.split(';').next().unwrap().to_owned();
    assert_eq!(h.http.get(h.url("/")).header("cookie", &again).send().await.unwrap().status().as_u16(), 200);
    // A session expires: 12 h on.
    let id = again.split('=').nth(1).unwrap();
    let sha = auth::token_sha256(id);
    assert!(h.store.session_live(&sha, now_ms() + 12 * 3600 * 1000 + 1).await.unwrap().is_none());
    h.store.api_token_revoke("tester", "test", now_ms()).await.unwrap();
    assert_eq!(h.http.get(h.url("/")).header("cookie", &again).send().await.unwrap().status().as_u16(), 401);
    // ?token= works for the dashboard (headless browsers, scripts).
    let other = auth::token_generate();
    h.store
        .api_token_create("reader", &auth::token_sha256(&other), oduflow_store::TokenScope::Read, "test", 1)
        .await
        .unwrap();
    let q = h.http.get(h.url(&format!("/?token={other}"))).send().await.unwrap();
    assert_eq!(q.status().as_u16(), 200);
    assert_eq!(q.headers()["referrer-policy"], "no-referrer");
}

// ---- the document ------------------------------------------------------------

#[tokio::test]
async fn openapi_document_describes_every_route_and_the_bearer_scheme() {
    let h = H::start().await;
    let (s, doc) = h.get("/openapi.json").await;
    assert_eq!(s, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    assert_eq!(doc["paths"]["/health"]["get"]["security"], json!([{}]), "health is documented as open");
    for (method, path) in ROUTES {
        if matches!(*path, "/openapi.json" | "/metrics") {
            continue;
        }
        let p = path.replace("/acme", "/{name}").replace("/00000000-0000-4000-8000-000000000000", "/{id}");
        assert!(doc["paths"][&p][method.to_lowercase()].is_object(), "{method} {p} missing from the document");
    }
    let create = &doc["components"]["schemas"]["ClientCreate"];
    assert_eq!(create["additionalProperties"], json!(false), "unknown fields are refused: {create}");
    let required: Vec<&str> = create["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    // A profile may give every spec field: only the name is required here
    // (a body without a profile still needs region, plan, volume_gb and
    // one image source, refused 400 otherwise).
    assert_eq!(required, ["name"]);
    assert_eq!(doc, serde_json::from_str::<Value>(&oduflow_server::openapi_json()).unwrap());
}

// ---- clients -----------------------------------------------------------------

/// `profile` names a set of fields the request's own override; an unknown
/// profile (400), or a body that leaves a required field unset (422), stores
/// nothing.
async fn clients_create_from_a_profile(h: H) {
    let (s, v) =
        h.post("/api/v1/clients", json!({ "name": "acme", "profile": "web", "tags": ["db"], "ipv6": true })).await;
    assert_eq!(s, 201, "{v}");
    let c = &v["client"];
    assert_eq!(
        (c["region"].as_str(), c["plan"].as_str(), c["image"].as_str()),
        (Some("ewr"), Some("vc2-1c-1gb"), Some("os_id 2284"))
    );
    assert_eq!(c["ssh_keys"], json!([oduflow_sim::catalog::SSH_KEYS[0].0]));
    assert_eq!(
        (c["tags"].clone(), c["enable_ipv6"].clone(), c["hostname"].clone()),
        (json!(["db"]), json!(true), json!("acme"))
    );
    let row = h.store.client_get("acme").await.unwrap().unwrap();
    assert_eq!(row.infra.spec.server.user_data.as_deref(), Some("#cloud-config\nhostname: acme\n"));
    for (body, why) in [
        (json!({ "name": "beta", "profile": "nope" }), "no profile \"nope\" (profiles: web)"),
        (json!({ "name": "beta", "plan": "vc2-1c-1gb", "os_id": 2284, "volume_gb": 40 }), "region is required"),
        (json!({ "name": "beta", "profile": "web", "snapshot_id": "x" }), "snapshot_id"),
        (json!({ "name": "beta", "profile": "web", "user_data": "{{oduflow.token}}" }), "{{oduflow.token}}"),
    ] {
        let (s, v) = h.post("/api/v1/clients", body.clone()).await;
        // 422 for a profile that does not exist as for a spec that does not
        // validate: the request was read, its content is refused.
        assert_eq!(s, 422, "{body}: {v}");
        assert!(v["error"]["message"].as_str().unwrap_or(&v.to_string()).contains(why), "{body}: {v}");
    }
    assert!(h.store.client_get("beta").await.unwrap().is_none());
}

/// PATCH /api/v1/clients/{name}: answered 202 once the new spec,
/// the new generation and the job are committed; bad input is a 4xx JSON
/// error that changes nothing; a deleted client is a conflict.
async fn clients_update_changes_the_spec_and_refuses_what_cannot_change(h: H) {
    let (s, v) = h.post("/api/v1/clients", create_body("acme")).await;
    assert_eq!(s, 201, "{v}");
    let update = json!({ "plan": "vc2-2c-4gb", "volume_gb": 80, "tags": ["web"] });
    let (s, v) = h.call(Method::PATCH, "/api/v1/clients/acme", Some(update)).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!((v["client"]["plan"].as_str(), v["client"]["volume_gb"].as_i64()), (Some("vc2-2c-4gb"), Some(80)));
    assert_eq!(v["client"]["generation"], 2, "{v}");
    let fresh = Store::connect(&h.db_url, false).await.unwrap();
    let c = fresh.client_get("acme").await.unwrap().unwrap();
    assert_eq!((c.infra.spec.plan.as_str(), c.infra.spec.server.tags.clone()), ("vc2-2c-4gb", vec!["web".to_owned()]));
    let jobs = fresh.jobs_for_client(&c.id).await.unwrap();
    assert_eq!(v["job_id"], jobs.last().unwrap().id.0, "acknowledged with its committed job");
    assert_eq!(jobs.last().unwrap().generation, 2);
    let before = h.footprint().await;
    for (body, status, code) in [
        (json!({}), 422, "invalid_input"),
        (json!({ "plan": "VC2" }), 422, "invalid_input"),
        (json!({ "plan": "vc2-2c-4gb" }), 422, "invalid_input"),
        (json!({ "volume_gb": 10_001 }), 422, "invalid_input"),
        (json!({ "volume_gb": "80" }), 422, "invalid_input"),
        (json!({ "bogus": 1 }), 422, "invalid_input"),
        (json!({ "os_id": 2136 }), 422, "invalid_input"),
    ] {
        assert_error(&h.call(Method::PATCH, "/api/v1/clients/acme", Some(body.clone())).await, status, code);
    }
    assert_error(
        &h.call(Method::PATCH, "/api/v1/clients/nobody", Some(json!({ "plan": "vc2-2c-4gb" }))).await,
        404,
        "not_found",
    );
    assert_eq!(h.footprint().await, before, "refusals change nothing");
    h.call(Method::DELETE, "/api/v1/clients/acme", None).await;
    assert_error(
        &h.call(Method::PATCH, "/api/v1/clients/acme", Some(json!({ "plan": "vc2-4c-8gb" }))).await,
        409,
        "conflict",
    );
}

/// A create checks the spec against Vultr's catalog as `oduflow client
/// create` does, by default, in the one operation both call: what the
/// catalog lacks is a 422 naming it, and nothing is stored (before, the API
/// answered 201 and the worker blocked `preflight_failed` later).
/// `"preflight": false` skips the check, as `--no-preflight` does.
#[tokio::test]
async fn a_create_is_refused_what_the_catalog_lacks_unless_told_not_to_check() {
    let h = H::start().await;
    for (region, plan, why) in [
        ("mel", "vc2-1c-1gb", "region mel offers no high_perf block storage"),
        ("lax", "vhf-1c-1gb", "plan vhf-1c-1gb is not sold in region lax"),
        ("ewrr", "vc2-1c-1gb", "ewrr"),
        ("ewr", "vc2-1c-1gbb", "vc2-1c-1gbb"),
    ] {
        let mut body = create_body("acme");
        (body["region"], body["plan"]) = (json!(region), json!(plan));
        let before = h.footprint().await.0;
        let got = h.post("/api/v1/clients", body.clone()).await;
        assert_error(&got, 422, "invalid_input");
        let m = got.1["error"]["message"].as_str().unwrap();
        assert!(m.contains(why) && m.contains("nothing was stored"), "{m}");
        assert_eq!(h.footprint().await.0, before, "a refused create stores nothing");
        body["preflight"] = json!(true);
        assert_eq!(h.post("/api/v1/clients", body.clone()).await, got, "the default is the check");
        body["preflight"] = json!(false);
        let name = format!("unchecked-{region}");
        body["name"] = json!(name);
        assert_eq!(h.post("/api/v1/clients", body).await.0, 201, "without preflight the worker checks");
    }
    let asked = h.sim.ledger().requests.values().sum::<u64>();
    assert!(asked > 0, "a preflight reads the catalog");
    assert_eq!(h.post("/api/v1/clients", create_body("acme")).await.0, 201);
}

/// A DNS name (the spec's `dns_name`, else the client's name) belongs to at
/// most one client not yet deleted: a create or an update that would give a
/// second client the name is a 409 that changes nothing (before, both got an
/// A record at it, one name round-robining between two tenants' servers).
async fn two_clients_cannot_share_a_dns_name(h: H) {
    assert_eq!(h.post("/api/v1/clients", create_body("acme")).await.0, 201);
    let mut mail = create_body("mail");
    mail["dns_name"] = json!("shared");
    assert_eq!(h.post("/api/v1/clients", mail).await.0, 201);
    let before = h.footprint().await;
    let mut web = create_body("web");
    web["dns_name"] = json!("acme");
    for (got, held, by) in [
        (h.post("/api/v1/clients", web.clone()).await, "acme", "acme"),
        (h.post("/api/v1/clients", create_body("shared")).await, "shared", "mail"),
        (h.call(Method::PATCH, "/api/v1/clients/acme", Some(json!({ "dns_name": "shared" }))).await, "shared", "mail"),
    ] {
        assert_error(&got, 409, "conflict");
        let m = got.1["error"]["message"].as_str().unwrap();
        assert!(m.contains(&format!("DNS name {held} ")) && m.contains(&format!("client {by}")), "{m}");
    }
    assert_eq!(h.footprint().await, before, "refusals change nothing");
    // Once acme is given another name, its old one is free.
    let (s, v) = h.call(Method::PATCH, "/api/v1/clients/acme", Some(json!({ "dns_name": "acme-old" }))).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(h.post("/api/v1/clients", web).await.0, 201);
}

async fn clients_create_show_list_delete(h: H) {
    let (s, v) = h.post("/api/v1/clients", create_body("acme")).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["client"]["name"], "acme");
    assert_eq!(v["client"]["status"], "pending");
    assert_eq!(v["client"]["target"], "present");
    // Acknowledged only after the intent and its job were committed: a
    // fresh connection sees both.
    let fresh = Store::connect(&h.db_url, false).await.unwrap();
    let c = fresh.client_get("acme").await.unwrap().expect("committed");
    let jobs = fresh.jobs_for_client(&c.id).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(v["job_id"], jobs[0].id.0);
    assert_eq!(jobs[0].kind, JobKind::Provision);

    assert_error(&h.post("/api/v1/clients", create_body("acme")).await, 409, "conflict");
    let mut other = create_body("beta");
    other["volume_type"] = json!("storage_opt");
    other["volume_gb"] = json!(40);
    assert_eq!(h.post("/api/v1/clients", other).await.0, 201);

    let (s, v) = h.get("/api/v1/clients/acme").await;
    assert_eq!(s, 200);
    assert_eq!(v["client"]["region"], "ewr");
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(v["receipts"], json!([]));
    assert_eq!(v["resolutions"], json!([]));
    assert_eq!(v["adapters"], json!([]));
    // An identity adapter's state, as `client show --json` has it: the
    // record it owns and whether it was ensured.
    let id = h.store.client_get("acme").await.unwrap().unwrap().id;
    let ledger = oduflow_store::ReceiptLedger::new(h.store.clone());
    let owned = json!({ "records": [{ "type": "A", "id": "r-1" }] });
    assert_eq!(ledger.adapter_owned_put(&id, "dns", &owned, 0, 1).await.unwrap(), Some(1));
    let facts = json!({ "ipv4": "192.0.2.1" });
    let ensured = oduflow_model::identity::AdapterState::Ensured;
    assert!(ledger.adapter_set(&id, "dns", ensured, "ok", Some(&facts), 1, 2).await.unwrap());
    let (_, v) = h.get("/api/v1/clients/acme").await;
    let dns = &v["adapters"][0];
    assert_eq!((&dns["adapter"], &dns["state"], &dns["owned"]), (&json!("dns"), &json!("ensured"), &owned), "{v}");
    assert_error(&h.get("/api/v1/clients/nobody").await, 404, "not_found");

    let (s, v) = h.get("/api/v1/clients").await;
    assert_eq!(s, 200);
    let names: Vec<&str> = v.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["acme", "beta"]);

    let (s, v) = h.call(Method::DELETE, "/api/v1/clients/acme", None).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!((v["client"]["target"].as_str(), v["client"]["status"].as_str()), (Some("absent"), Some("deleting")));
    let jobs = fresh.jobs_for_client(&c.id).await.unwrap();
    assert_eq!(jobs.last().unwrap().kind, JobKind::Deprovision);
    assert_eq!(v["job_id"], jobs.last().unwrap().id.0);
    // Deleting again changes nothing.
    let generation = v["client"]["generation"].clone();
    let (s, v) = h.call(Method::DELETE, "/api/v1/clients/acme", None).await;
    assert_eq!((s, &v["client"]["generation"]), (202, &generation));
    assert_eq!(fresh.jobs_for_client(&c.id).await.unwrap().len(), 2);
    assert_error(&h.call(Method::DELETE, "/api/v1/clients/nobody", None).await, 404, "not_found");
    // Creating it again with the same spec flips the target back.
    assert_eq!(h.post("/api/v1/clients", create_body("acme")).await.0, 201);
    // None of this asked Vultr anything but the creates' catalog reads.
    let ledger = h.sim.ledger();
    assert!(ledger.requests.keys().all(|r| r.starts_with("GET ")), "{:?}", ledger.requests);
}

#[tokio::test]
async fn list_filters_by_status_reason_and_target() {
    let h = H::start().await;
    h.fixture().await;
    let names = |v: &Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect()
    };
    let (_, v) = h.get("/api/v1/clients?status=blocked").await;
    assert_eq!(names(&v), ["bad-plan", "lost-again", "lost-create"]);
    let (_, v) = h.get("/api/v1/clients?status=blocked&blocked_reason=create_rejected").await;
    assert_eq!(names(&v), ["bad-plan"]);
    let (_, v) = h.get("/api/v1/clients?target=absent").await;
    assert_eq!(names(&v), ["going-away"]);
    let (_, v) = h.get("/api/v1/clients?status=ready").await;
    assert_eq!(names(&v), ["acme-ready"]);
    assert_eq!(h.get("/api/v1/clients").await.1.as_array().unwrap().len(), 6);
    let (_, v) = h.get("/api/v1/clients?name=lost-*&region=ewr&unchanged_for=0s").await;
    assert_eq!(names(&v), ["lost-again", "lost-create"]);
    let (_, v) = h.get("/api/v1/clients?name=*-one").await;
    assert_eq!(names(&v), ["pending-one"]);
    for none in ["region=ams", "unchanged_for=1d", "name=lost"] {
        assert_eq!(names(&h.get(&format!("/api/v1/clients?{none}")).await.1), Vec::<String>::new(), "{none}");
    }
    assert_error(&h.get("/api/v1/clients?status=happy").await, 422, "invalid_input");
    assert_error(&h.get("/api/v1/clients?colour=blue").await, 422, "invalid_input");
    // What `client list` refuses, with the same words.
    for (bad, says) in [
        ("region=EWR", "is not a Vultr region id"),
        ("name=Shop", "name pattern"),
        ("unchanged_for=2w", "a whole number and a unit"),
        ("unchanged_for=999d", "from 0 to 365 days"),
    ] {
        let (status, v) = h.get(&format!("/api/v1/clients?{bad}")).await;
        assert_eq!(status, 422, "{bad}: {v}");
        assert!(v.to_string().contains(says), "{bad}: {v}");
    }
}

// ---- interventions and actions ---------------------------------------------------

#[tokio::test]
async fn interventions_show_reason_evidence_receipts_and_commands() {
    let h = H::start().await;
    h.fixture().await;
    let (s, v) = h.get("/api/v1/interventions").await;
    assert_eq!(s, 200);
    let cases = v.as_array().unwrap();
    assert_eq!(cases.len(), 3, "{v}");
    let case = |n: &str| cases.iter().find(|c| c["client"]["name"] == n).unwrap().clone();
    let bad = case("bad-plan");
    assert_eq!(bad["reason"], "create_rejected");
    assert!(bad["evidence"].as_str().unwrap().contains("Invalid VPC."), "{bad}");
    let r = &bad["receipts"].as_array().unwrap()[0];
    assert_eq!((r["resource_kind"].as_str(), r["rejection_status"].as_i64()), (Some("vm"), Some(400)));
    assert_eq!(bad["resolutions"][0]["command"], "oduflow reconcile bad-plan --new-dispatch");
    let lost = case("lost-create");
    assert_eq!(lost["reason"], "uncertain_create");
    let vm = lost["receipts"].as_array().unwrap().iter().find(|r| r["resource_kind"] == "vm").unwrap();
    assert!(vm["resource_id"].is_null() && vm["observation_count"].as_i64().unwrap() >= 2, "{vm}");
    let cmds: Vec<&str> =
        lost["resolutions"].as_array().unwrap().iter().map(|r| r["command"].as_str().unwrap()).collect();
    assert_eq!(
        cmds,
        [
            "oduflow reconcile lost-create",
            "oduflow adopt lost-create --kind vm --id ID",
            "oduflow abandon lost-create --kind vm --by WHO --reason WHY"
        ]
    );
    // The same evidence on the client's own page.
    let (_, show) = h.get("/api/v1/clients/lost-create").await;
    assert_eq!(show["resolutions"], lost["resolutions"]);
}

#[tokio::test]
async fn reconcile_observes_again_and_new_dispatch_only_after_a_rejection() {
    let h = H::start().await;
    h.fixture().await;
    // Unknown outcome: --new-dispatch is refused, plain reconcile allowed.
    assert_error(
        &h.post("/api/v1/clients/lost-create/reconcile", json!({ "new_dispatch": true })).await,
        409,
        "refused",
    );
    let (s, v) = h.post("/api/v1/clients/lost-create/reconcile", json!({})).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("provisioning")), "{v}");
    let ev = h.store.events_by_kind(EventKind::ReconcileRequested).await.unwrap();
    assert_eq!(ev.last().unwrap().detail["by"], "api-token:tester");
    // A definitive rejection: a new dispatch generation.
    let before = h.store.client_get("bad-plan").await.unwrap().unwrap().infra.vm_dispatch_generation;
    let (s, v) = h.post("/api/v1/clients/bad-plan/reconcile", json!({ "new_dispatch": true })).await;
    assert_eq!(s, 200, "{v}");
    let after = h.store.client_get("bad-plan").await.unwrap().unwrap().infra.vm_dispatch_generation;
    assert_eq!(after, before + 1);
    assert_error(&h.post("/api/v1/clients/nobody/reconcile", json!({})).await, 404, "not_found");
    // The server's provider counted nothing it did not send: reconcile reads nothing here.
    assert_error(
        &h.post("/api/v1/clients/bad-plan/reconcile", json!({ "new_dispatch": "yes" })).await,
        422,
        "invalid_input",
    );
}

#[tokio::test]
async fn adopt_verifies_the_resource_before_recording_it() {
    let h = H::start().await;
    h.fixture().await;
    // An id nobody has: refused after asking the provider.
    let ghost = "0b9f7b1e-8c52-4d0e-9a54-3f5c1c7d2e11";
    assert_error(
        &h.post("/api/v1/clients/lost-create/adopt", json!({ "kind": "vm", "id": ghost })).await,
        409,
        "refused",
    );
    assert_error(
        &h.post("/api/v1/clients/lost-create/adopt", json!({ "kind": "vm", "id": "not-an-id" })).await,
        422,
        "invalid_input",
    );
    assert_error(
        &h.post("/api/v1/clients/lost-create/adopt", json!({ "kind": "attach", "id": ghost })).await,
        422,
        "invalid_input",
    );
    // A VM the operator found in the console (made here straight through the provider).
    let made = h
        .provider
        .instance_create(&InstanceRequest {
            region: "ewr".into(),
            plan: "vc2-1c-1gb".into(),
            image: oduflow_model::ImageSource::Os(2284),
            label: Label::from("made-in-the-console"),
            server: oduflow_model::ServerSpec { hostname: "lost-create".into(), ..Default::default() },
        })
        .await;
    let Outcome::Accepted(id) = made else { panic!("{made:?}") };
    let (s, v) = h.post("/api/v1/clients/lost-create/adopt", json!({ "kind": "vm", "id": id.as_str() })).await;
    assert_eq!(s, 200, "{v}");
    let c = h.store.client_get("lost-create").await.unwrap().unwrap();
    let receipts = h.store.receipts_for_client(&c.id).await.unwrap();
    let vm = receipts.iter().find(|r| r.resource_kind == ResourceKind::Vm).unwrap();
    assert_eq!(vm.id(), Some(id.as_str()));
    assert_eq!(vm.id_source(), Some(oduflow_store::IdSource::AdoptedByOperator));
    // The same id again, for another client: refused.
    assert_error(
        &h.post("/api/v1/clients/lost-again/adopt", json!({ "kind": "vm", "id": id.as_str() })).await,
        409,
        "refused",
    );
}

#[tokio::test]
async fn abandon_needs_an_attestation_and_an_uncertain_dispatch() {
    let h = H::start().await;
    h.fixture().await;
    let path = "/api/v1/clients/lost-again/abandon";
    assert_error(&h.post(path, json!({ "kind": "vm", "reason": "checked" })).await, 422, "invalid_input");
    assert_error(&h.post(path, json!({ "kind": "vm", "by": "  ", "reason": "checked" })).await, 422, "invalid_input");
    assert_error(
        &h.post(path, json!({ "kind": "vm", "by": "alice", "reason": "a\u{7}b" })).await,
        422,
        "invalid_input",
    );
    assert_error(
        &h.post(path, json!({ "kind": "vm", "by": "a".repeat(101), "reason": "x" })).await,
        422,
        "invalid_input",
    );
    // A ready client's VM has a known outcome.
    assert_error(
        &h.post("/api/v1/clients/acme-ready/abandon", json!({ "kind": "vm", "by": "alice", "reason": "x" })).await,
        409,
        "refused",
    );
    let (s, v) = h.post(path, json!({ "kind": "vm", "by": "alice", "reason": "checked the console: nothing" })).await;
    assert_eq!(s, 200, "{v}");
    let c = h.store.client_get("lost-again").await.unwrap().unwrap();
    let receipts = h.store.receipts_for_client(&c.id).await.unwrap();
    let vm = receipts.iter().find(|r| r.resource_kind == ResourceKind::Vm && r.dispatch_generation == 1).unwrap();
    let oduflow_store::Effect::Abandoned { by, reason, .. } = vm.effect() else { panic!("not abandoned: {vm:?}") };
    assert_eq!((by.as_str(), reason.as_str()), ("alice (via api-token:tester)", "checked the console: nothing"));
    assert_eq!(c.infra.vm_dispatch_generation, 2);
}

// ---- evidence and queue ------------------------------------------------------

/// Hole 8: orphans are listed with the client their label names and the
/// commands that resolve them, without a provider call.
#[tokio::test]
async fn orphans_are_listed_with_their_client_and_commands() {
    let h = H::start().await;
    h.fixture().await;
    let (s, v) = h.get("/api/v1/orphans").await;
    assert_eq!((s, v.clone()), (200, json!([])));
    let id = h.orphan_of("acme-ready").await;
    let before = h.sim.ledger().request_log.len();
    let (s, v) = h.get("/api/v1/orphans").await;
    assert_eq!(s, 200, "{v}");
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    assert_eq!(list[0]["resource_id"], id.as_str());
    assert_eq!(list[0]["kind"], "vm");
    assert_eq!(list[0]["client"], "acme-ready");
    let resolve: Vec<&str> = list[0]["resolve"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(
        resolve,
        vec![format!("oduflow orphan adopt {id}"), format!("oduflow orphan delete {id} --by WHO --reason WHY")]
    );
    assert_eq!(h.sim.ledger().request_log.len(), before, "listing orphans called the provider");
    assert_error(&h.post("/api/v1/orphans", json!({})).await, 405, "method_not_allowed");
}

#[tokio::test]
async fn receipts_and_events_are_readable() {
    let h = H::start().await;
    h.fixture().await;
    let (s, v) = h.get("/api/v1/receipts").await;
    assert_eq!(s, 200);
    let all = v.as_array().unwrap();
    assert!(all.len() >= 4, "{v}");
    assert!(all.iter().all(|r| r["label"].as_str().unwrap().starts_with("oduflow-")));
    let (s, v) = h.get("/api/v1/clients/acme-ready/receipts").await;
    assert_eq!(s, 200);
    let kinds: Vec<&str> = v.as_array().unwrap().iter().map(|r| r["resource_kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"vm") && kinds.contains(&"volume") && kinds.contains(&"attach"), "{kinds:?}");
    let (s, v) = h.get("/api/v1/clients/acme-ready/events").await;
    assert_eq!(s, 200);
    assert_eq!(v[0]["kind"], "client_created");
    let (s, v) = h.get("/api/v1/events?limit=2").await;
    assert_eq!(s, 200);
    let ev = v.as_array().unwrap();
    assert_eq!(ev.len(), 2);
    assert!(ev[0]["id"].as_i64() > ev[1]["id"].as_i64(), "newest first");
    let (_, v) = h.get("/api/v1/events?kind=client_created").await;
    assert_eq!(v.as_array().unwrap().len(), 6);
    assert_error(&h.get("/api/v1/events?limit=0").await, 422, "invalid_input");
    assert_error(&h.get("/api/v1/events?limit=1001").await, 422, "invalid_input");
    assert_error(&h.get("/api/v1/events?limit=ten").await, 422, "invalid_input");
    for kind in ["%00", "Client_Created", "a%20b", "", "x'--", "client_creat"] {
        assert_error(&h.get(&format!("/api/v1/events?kind={kind}")).await, 422, "invalid_input");
    }
    // Read-only: no write method on receipts or events.
    assert_error(&h.call(Method::DELETE, "/api/v1/receipts", None).await, 405, "method_not_allowed");
    assert_error(&h.post("/api/v1/events", json!({})).await, 405, "method_not_allowed");
}

#[tokio::test]
async fn queue_status_pause_and_resume_guarded_by_restore() {
    let h = H::start().await;
    h.post("/api/v1/clients", create_body("acme")).await;
    let (s, v) = h.get("/api/v1/queue").await;
    assert_eq!((s, v["paused"].as_bool(), v["queued"].as_i64()), (200, Some(false), Some(1)));
    let (s, v) = h.post("/api/v1/queue/pause", json!(null)).await;
    assert_eq!((s, v["paused"].as_bool()), (200, Some(true)));
    assert!(h.store.queue_status(now_ms()).await.unwrap().paused);
    let (s, v) = h.post("/api/v1/queue/resume", json!(null)).await;
    assert_eq!((s, v["paused"].as_bool()), (200, Some(false)));
    h.store.restore_declare("test restore", "test", now_ms()).await.unwrap();
    let (_, v) = h.get("/api/v1/queue").await;
    assert_eq!(v["restore_pending"], "test restore");
    h.post("/api/v1/queue/pause", json!(null)).await;
    assert_error(&h.post("/api/v1/queue/resume", json!(null)).await, 409, "refused");
    assert!(h.store.queue_status(now_ms()).await.unwrap().paused);
    // So do the operator actions that act on the provider: nothing is asked of the provider and nothing changes.
    let before = (h.sim.ledger().request_log.len(), h.store.events_recent(1000).await.unwrap().len());
    let id = "0b1e2c3d-0000-4000-8000-000000000000";
    for (path, body) in [
        ("/api/v1/clients/acme/reconcile", json!({})),
        ("/api/v1/clients/acme/adopt", json!({ "kind": "vm", "id": id })),
        ("/api/v1/clients/acme/abandon", json!({ "kind": "vm", "by": "alice", "reason": "checked" })),
    ] {
        let got = h.post(path, body).await;
        assert_error(&got, 409, "refused");
        assert!(got.1["error"]["message"].as_str().unwrap().contains("reconcile --all"), "{}", got.1);
    }
    let after = (h.sim.ledger().request_log.len(), h.store.events_recent(1000).await.unwrap().len());
    assert_eq!(before, after, "a refused action changed something");
}

// ---- metrics -----------------------------------------------------------------

async fn metrics_show_jobs_dispatches_blocked_reasons_provider_calls_and_lag(h: H) {
    h.fixture().await;
    // Two processes of one rate group, as their budgets flush them, and a
    // pause one of them saw.
    {
        use oduflow_model::rate::RateBudget;
        for (process, waits) in [("host-a/worker-1", &[30u64, 20][..]), ("host-b/worker-2", &[5][..])] {
            let b = oduflow_store::SharedBudget::new(h.store.clone(), "nat-1", process).unwrap();
            b.reserve(std::time::Duration::from_millis(40)).await.unwrap();
            for ms in waits {
                b.record_wait(std::time::Duration::from_millis(*ms));
            }
            b.flush().await.unwrap();
        }
        let b = oduflow_store::SharedBudget::new(h.store.clone(), "nat-1", "host-a/worker-1").unwrap();
        b.pause(std::time::Duration::from_secs(30)).await.unwrap();
    }
    // One operator action that asks the provider (an unknown id: a 404 read).
    h.post("/api/v1/clients/lost-create/adopt", json!({ "kind": "vm", "id": "0b9f7b1e-8c52-4d0e-9a54-3f5c1c7d2e11" }))
        .await;
    let (s, text) = h.text("/metrics").await;
    assert_eq!(s, 200);
    let value = |series: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '));
        line.unwrap_or_else(|| panic!("no {series} in\n{text}")).rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("oduflow_clients{status=\"blocked\"}"), 3.0);
    assert_eq!(value("oduflow_clients{status=\"ready\"}"), 1.0);
    assert_eq!(value("oduflow_clients{status=\"deleting\"}"), 1.0);
    assert_eq!(value("oduflow_clients_blocked{reason=\"create_rejected\"}"), 1.0);
    assert_eq!(value("oduflow_clients_blocked{reason=\"uncertain_create\"}"), 2.0);
    assert_eq!(value("oduflow_clients_blocked{reason=\"config_mismatch\"}"), 0.0);
    // pending-one's provision job; going-away's provision job (stale once
    // run, queued until then) and its deprovision job.
    assert_eq!(value("oduflow_jobs{state=\"queued\"}"), 3.0);
    assert!(value("oduflow_jobs{state=\"done\"}") >= 4.0);
    assert_eq!(value("oduflow_dispatches{kind=\"vm\",outcome=\"rejected\"}"), 1.0);
    assert_eq!(value("oduflow_dispatches{kind=\"vm\",outcome=\"unknown\"}"), 2.0);
    assert_eq!(value("oduflow_dispatches{kind=\"vm\",outcome=\"accepted\"}"), 1.0);
    assert!(value("oduflow_queue_lag_seconds") >= 0.0);
    assert_eq!(value("oduflow_jobs_runnable"), 3.0);
    assert_eq!(
        value("oduflow_provider_requests_total{method=\"GET\",route=\"/v2/instances/{id}\",status=\"404\"}"),
        1.0,
        "the adopt's read, counted by route template, never by id"
    );
    assert!(text.contains("# TYPE oduflow_provider_rate_limiter_wait_seconds_total counter"));
    value("oduflow_provider_rate_limiter_waits_total");
    assert_eq!(value("oduflow_rate_budget_waits_total{group=\"nat-1\",process=\"host-a/worker-1\"}"), 2.0);
    assert_eq!(value("oduflow_rate_budget_wait_seconds_total{group=\"nat-1\",process=\"host-a/worker-1\"}"), 0.05);
    assert_eq!(value("oduflow_rate_budget_waits_total{group=\"nat-1\",process=\"host-b/worker-2\"}"), 1.0);
    assert_eq!(value("oduflow_rate_group_waits_total{group=\"nat-1\"}"), 3.0);
    assert_eq!(value("oduflow_rate_group_wait_seconds_total{group=\"nat-1\"}"), 0.055);
    assert_eq!(value("oduflow_rate_group_reservations_total{group=\"nat-1\"}"), 2.0);
    assert_eq!(value("oduflow_rate_group_pauses_total{group=\"nat-1\"}"), 1.0);
    assert!(value("oduflow_rate_group_paused_seconds{group=\"nat-1\"}") > 25.0);
    // Each family's samples follow its own HELP and TYPE, as the text format requires.
    let mut seen = std::collections::HashSet::new();
    let mut current = String::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap().to_owned();
            assert!(seen.insert(current.clone()), "{current} declared twice");
        } else if !l.starts_with('#') && !l.is_empty() {
            let name = l.split(['{', ' ']).next().unwrap();
            assert_eq!(name, current, "a sample outside its family: {l}");
        }
    }
    assert!(
        text.contains("# HELP oduflow_provider_requests_total Vultr API requests sent by this oduflow serve process")
    );
    assert!(!text.contains("0b9f7b1e"), "no ids in metric labels");
}

// ---- bad input -----------------------------------------------------------------

/// A request to the API with the test token, its body sent as given.
fn raw_request(h: &H, method: &str, path: &str, ctype: Option<&str>, body: Vec<u8>) -> reqwest::RequestBuilder {
    let mut r =
        h.http.request(Method::from_bytes(method.as_bytes()).unwrap(), h.url(path)).bearer_auth(&h.token).body(body);
    if let Some(c) = ctype {
        r = r.header("content-type", c);
    }
    r
}

/// A create's body with one change.
fn create_with(f: &dyn Fn(&mut Value)) -> Vec<u8> {
    let mut b = create_body("acme");
    f(&mut b);
    serde_json::to_vec(&b).unwrap()
}

type BadCase = (&'static str, reqwest::RequestBuilder, u16, &'static str);

/// Bodies that are not a create's JSON at all.
fn bad_bodies(h: &H) -> Vec<BadCase> {
    let raw = |method: &str, path: &str, ctype: Option<&str>, body: Vec<u8>| raw_request(h, method, path, ctype, body);
    let (json_ct, with) = (Some("application/json"), create_with);
    let oversized = serde_json::to_vec(&json!({ "name": "acme", "padding": "x".repeat(100 * 1024) })).unwrap();
    vec![
        (
            "malformed JSON",
            raw("POST", "/api/v1/clients", json_ct, b"{\"name\": \"acme\",".to_vec()),
            400,
            "bad_request",
        ),
        ("not JSON at all", raw("POST", "/api/v1/clients", json_ct, b"name=acme".to_vec()), 400, "bad_request"),
        ("empty body", raw("POST", "/api/v1/clients", json_ct, vec![]), 400, "bad_request"),
        ("oversized body", raw("POST", "/api/v1/clients", json_ct, oversized), 413, "payload_too_large"),
        ("no content type", raw("POST", "/api/v1/clients", None, with(&|_| {})), 415, "unsupported_media_type"),
        (
            "text/plain",
            raw("POST", "/api/v1/clients", Some("text/plain"), with(&|_| {})),
            415,
            "unsupported_media_type",
        ),
    ]
}

/// A create's JSON with one field wrong.
fn bad_fields(h: &H) -> Vec<BadCase> {
    let raw = |method: &str, path: &str, ctype: Option<&str>, body: Vec<u8>| raw_request(h, method, path, ctype, body);
    let (json_ct, with) = (Some("application/json"), create_with);
    vec![
        (
            "os_id as a string",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["os_id"] = json!("2284"))),
            422,
            "invalid_input",
        ),
        (
            "volume_gb as a float",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["volume_gb"] = json!(40.5))),
            422,
            "invalid_input",
        ),
        (
            "name as a number",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["name"] = json!(5))),
            422,
            "invalid_input",
        ),
        (
            "os_id overflow",
            raw(
                "POST",
                "/api/v1/clients",
                json_ct,
                br#"{"name":"acme","region":"ewr","plan":"vc2-1c-1gb","os_id":99999999999999999999,"volume_gb":40}"#
                    .to_vec(),
            ),
            422,
            "invalid_input",
        ),
        (
            "null name",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["name"] = Value::Null)),
            422,
            "invalid_input",
        ),
        ("an array body", raw("POST", "/api/v1/clients", json_ct, b"[]".to_vec()), 422, "invalid_input"),
        (
            "unknown field",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["admin"] = json!(true))),
            422,
            "invalid_input",
        ),
        (
            "missing field",
            raw(
                "POST",
                "/api/v1/clients",
                json_ct,
                with(&|b| {
                    b.as_object_mut().unwrap().remove("plan");
                }),
            ),
            422,
            "invalid_input",
        ),
        (
            "unknown volume type",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["volume_type"] = json!("ssd"))),
            422,
            "invalid_input",
        ),
        (
            "volume too small",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["volume_gb"] = json!(9))),
            422,
            "invalid_input",
        ),
        (
            "negative os id",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["os_id"] = json!(-1))),
            422,
            "invalid_input",
        ),
        (
            "bad region",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["region"] = json!("EWR'--"))),
            422,
            "invalid_input",
        ),
    ]
}

/// Actions, routes and methods the API does not have.
fn bad_routes(h: &H) -> Vec<BadCase> {
    let raw = |method: &str, path: &str, ctype: Option<&str>, body: Vec<u8>| raw_request(h, method, path, ctype, body);
    let (json_ct, with) = (Some("application/json"), create_with);
    vec![
        (
            "unknown field in an action",
            raw("POST", "/api/v1/clients/acme/reconcile", json_ct, br#"{"new_dispatch":false,"force":true}"#.to_vec()),
            422,
            "invalid_input",
        ),
        ("unknown route", raw("GET", "/api/v1/nothing", None, vec![]), 404, "not_found"),
        ("wrong method", raw("PUT", "/api/v1/clients", json_ct, with(&|_| {})), 405, "method_not_allowed"),
        ("bad percent-encoding in the path", raw("GET", "/api/v1/clients/%FF%FE", None, vec![]), 400, "bad_request"),
    ]
}

/// Names in the path, percent-encoded, on every client route: each a 422.
/// How many requests it checked.
async fn bad_names_in_paths(h: &H, names: &[&str]) -> usize {
    let raw = |method: &str, path: &str, ctype: Option<&str>, body: Vec<u8>| raw_request(h, method, path, ctype, body);
    let json_ct = Some("application/json");
    let mut checked = 0;
    for n in names.iter().filter(|n| !n.is_empty()) {
        let enc: String = n.bytes().map(|b| format!("%{b:02X}")).collect();
        for (method, suffix) in [("GET", ""), ("DELETE", ""), ("GET", "/receipts"), ("GET", "/events")] {
            let got =
                json_of(raw(method, &format!("/api/v1/clients/{enc}{suffix}"), None, vec![]).send().await.unwrap())
                    .await;
            assert_error(&got, 422, "invalid_input");
            checked += 1;
        }
        for action in ["reconcile", "adopt", "abandon"] {
            let body = br#"{"kind":"vm","id":"0b9f7b1e-8c52-4d0e-9a54-3f5c1c7d2e11","by":"a","reason":"b"}"#;
            let body = if action == "reconcile" { b"{}".to_vec() } else { body.to_vec() };
            let got =
                json_of(raw("POST", &format!("/api/v1/clients/{enc}/{action}"), json_ct, body).send().await.unwrap())
                    .await;
            assert_error(&got, 422, "invalid_input");
            checked += 1;
        }
    }
    checked
}

async fn bad_input_is_a_4xx_json_error_that_stores_nothing_and_calls_no_provider(h: H) {
    let before = h.footprint().await;
    let raw = |method: &str, path: &str, ctype: Option<&str>, body: Vec<u8>| raw_request(&h, method, path, ctype, body);
    let (json_ct, with) = (Some("application/json"), create_with);
    let mut all = bad_bodies(&h);
    all.extend(bad_fields(&h));
    all.extend(bad_routes(&h));
    let names = [
        "acme'; DROP TABLE clients;--",
        "acme\" OR \"1\"=\"1",
        "<script>alert(1)</script>",
        "../../etc/passwd",
        "acme\u{0}",
        "acme\nx",
        "Acme",
        "acmé",
        "аcme", // Cyrillic а
        "acme-🚀",
        "\u{202e}emca",
        "ａｃｍｅ", // full-width
        "",
        "-acme",
        "acme-",
        &"a".repeat(64),
    ];
    for n in names {
        all.push((
            "a bad name in a body",
            raw("POST", "/api/v1/clients", json_ct, with(&|b| b["name"] = json!(n))),
            422,
            "invalid_input",
        ));
    }
    let mut checked = 0;
    for (what, req, status, code) in all {
        let got = json_of(req.send().await.unwrap()).await;
        assert_eq!(got.0, status, "{what}: {}", got.1);
        assert_error(&got, status, code);
        checked += 1;
    }
    checked += bad_names_in_paths(&h, &names).await;
    assert!(checked > 100, "{checked}");
    let after = h.footprint().await;
    assert_eq!(after.0, before.0, "no row stored");
    assert_eq!((after.1, after.2), (0, 0), "no provider call");
    assert!(h.store.client_list().await.unwrap().is_empty());
}

// ---- secrets -------------------------------------------------------------------

/// A tracing writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_and_tokens_appear_in_no_answer_log_or_metric() {
    let logs = Captured::default();
    let sink = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .init();
    let h = H::start().await;
    h.fixture().await;
    let mut answers = String::new();
    let mut record = |s: String| answers.push_str(&s);
    let bad_token = "odf_0000wrong0000";
    // Every route, with the right token, a wrong one, and none.
    for (method, path) in
        ROUTES.iter().chain(&[("GET", "/"), ("GET", "/health"), ("GET", "/api/v1/clients/lost-create")])
    {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let path = path.replace("/acme", "/lost-create");
        for tok in [Some(h.token.as_str()), Some(bad_token), None] {
            let mut req = h
                .http
                .request(method.clone(), h.url(&path))
                .json(&json!({ "kind": "vm", "by": "x", "reason": "y", "id": "0b9f7b1e-8c52-4d0e-9a54-3f5c1c7d2e11" }));
            if let Some(t) = tok {
                req = req.bearer_auth(t);
            }
            let r = req.send().await.unwrap();
            record(format!("{:?}", r.headers()));
            record(r.text().await.unwrap());
        }
    }
    // The dashboard through ?token= and the login form, and /metrics after all that.
    for url in [format!("/?token={}", h.token), format!("/?token={bad_token}")] {
        let r = h.http.get(h.url(&url)).send().await.unwrap();
        record(r.text().await.unwrap());
    }
    let r = h.http.post(h.url("/login")).form(&[("token", bad_token)]).send().await.unwrap();
    record(r.text().await.unwrap());
    record(h.text("/metrics").await.1);
    record(h.text("/openapi.json").await.1);
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("http request"), "debug logging was on: {logs:.2000}");
    assert!(logs.contains("vultr request"), "the provider's debug lines were captured");
    for (what, text) in [("answers", &answers), ("logs", &logs)] {
        for secret in [KEY, h.token.as_str(), bad_token, &auth::token_sha256(&h.token)] {
            assert!(!text.contains(secret), "{what} contain a secret");
        }
        assert!(!text.contains(&h.token[4..20]), "{what} contain part of the token");
    }
    // The database holds the token's digest only.
    let dump = format!("{:?}", h.store.api_token_list().await.unwrap());
    assert!(!dump.contains(&h.token));
}

// ---- dashboard in a real browser ------------------------------------------------

/// Debian's chromium, installed by scripts/test when missing. Never skipped:
/// without it this test fails and says why.
fn chromium() -> String {
    let path = std::env::var("ODUFLOW_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&path).exists(),
        "headless Chromium is required for the dashboard test but {path} does not exist: \
         run scripts/test (it installs Debian's chromium) or `apt-get install -y chromium`, or set ODUFLOW_CHROMIUM"
    );
    path
}

async fn run_chromium(args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("chromium finished within 90 s")
        .expect("chromium started");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_headless_chromium_shows_states_interventions_commands_and_events() {
    let h = H::start().await;
    h.fixture().await;
    let orphan = h.orphan_of("acme-ready").await;
    // A hostile string in the evidence trail must render as text.
    h.store
        .event_global(
            oduflow_model::EventKind::QueueResumed,
            json!({ "x": "<script>document.title='pwned'</script><img src=x>" }),
            None,
            now_ms(),
        )
        .await
        .unwrap();
    let url = h.url(&format!("/?token={}", h.token));
    let dom = run_chromium(&["--dump-dom", &url]).await;
    assert!(dom.contains("<title>oduflow dashboard</title>"), "{dom:.3000}");
    // Counts by status.
    for (status, n) in
        [("ready", 1), ("blocked", 3), ("pending", 1), ("deleting", 1), ("provisioning", 0), ("deleted", 0)]
    {
        assert!(
            dom.contains(&format!("data-status=\"{status}\"><a href=\"/?status={status}\"><b>{n}</b>")),
            "{status} {n}"
        );
    }
    // The intervention queue: each blocked client, reason, evidence, receipts, commands.
    assert!(dom.contains("Intervention queue (3)"));
    for name in ["bad-plan", "lost-create", "lost-again"] {
        assert!(dom.contains(&format!("<div class=\"case\" data-client=\"{name}\">")), "{name}");
    }
    assert!(dom.contains("Invalid VPC."));
    assert!(dom.contains("rejected 400"));
    assert!(dom.contains("<code>oduflow reconcile bad-plan --new-dispatch</code>"));
    assert!(dom.contains("<code>oduflow abandon lost-create --kind vm --by WHO --reason WHY</code>"));
    assert!(dom.contains("<code>oduflow adopt lost-again --kind vm --id ID</code>"));
    assert!(dom.contains("outcome unknown"));
    // Every client, with its state.
    for (name, status) in [("acme-ready", "ready"), ("pending-one", "pending"), ("going-away", "deleting")] {
        assert!(
            dom.contains(&format!(
                "<tr data-client=\"{name}\"><td>{name}</td><td class=\"status-{status}\">{status}</td>"
            )),
            "{name}"
        );
    }
    // Orphans, with the commands that resolve them.
    assert!(dom.contains("Orphans (1)"), "{dom:.3000}");
    assert!(dom.contains(&format!("<tr data-orphan=\"{orphan}\">")));
    assert!(dom.contains(&format!("<code>oduflow orphan adopt {orphan}</code>")));
    // Recent events, with the hostile one escaped: no element was created from it.
    assert!(dom.contains("client_delete_requested"));
    assert!(dom.contains("&lt;script&gt;document.title="));
    assert!(!dom.contains("<img src=\"x\">") && !dom.contains("pwned</title>"));
    assert!(!dom.contains(KEY));
    // One screenshot kept as a test artifact.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(&[&format!("--screenshot={}", shot.display()), "--window-size=1280,2000", &url]).await;
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real picture: {} bytes", png.len());
}
