//! Webhooks through the command line and a running worker: the endpoint
//! commands refuse bad input and store nothing, and a worker with the key
//! delivers a client's state changes, signed with the secret `webhook add`
//! printed.

use super::*;
use hmac::{Hmac, Mac};
use std::sync::{Arc, Mutex};

const WEBHOOK_KEY: &str = "webhook-key-for-the-tests-0123456789";

/// The receiver: every (timestamp, signature, body) it was sent.
type Got = Arc<Mutex<Vec<(String, String, String)>>>;

async fn receiver() -> (String, Got) {
    let got: Got = Arc::default();
    let take = {
        let got = got.clone();
        move |h: axum::http::HeaderMap, body: String| {
            let got = got.clone();
            async move {
                let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                got.lock().unwrap().push((header("oduflow-timestamp"), header("oduflow-signature"), body));
                axum::http::StatusCode::OK
            }
        }
    };
    let app = axum::Router::new().route("/hook", axum::routing::post(take));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

fn verified(secret: &str, timestamp: &str, signature: &str, body: &str) -> bool {
    let Some(hex) = signature.strip_prefix("v1=") else { return false };
    let bytes: Vec<u8> =
        (0..hex.len() / 2).filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()).collect();
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(format!("{timestamp}.{body}").as_bytes());
    m.verify_slice(&bytes).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_delivers_state_changes_signed_to_an_endpoint_added_on_the_command_line() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let (url, got) = receiver().await;
    let keyed = |args: &[&str]| env.cmd(args).env("ODUFLOW_WEBHOOK_KEY", WEBHOOK_KEY).output().unwrap();
    // Refused, each with exit 2 and nothing stored.
    let no_key = env.run(&["webhook", "add", "erp", &url]);
    assert_eq!(no_key.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("ODUFLOW_WEBHOOK_KEY"));
    for (args, words) in [
        (&["webhook", "add", "erp", "ftp://example.com/x"][..], "http:// or https://"),
        (&["webhook", "add", "erp", "https://u:p@example.com/x"], "no user or password"),
        (&["webhook", "add", "erp", &url, "--kind", "sunspots"], "not one oduflow writes"),
        (&["webhook", "add", "bad name", &url], "name"),
    ] {
        let o = keyed(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(words), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let short = env.cmd(&["webhook", "list"]).env("ODUFLOW_WEBHOOK_KEY", "short").output().unwrap();
    assert_eq!(short.status.code(), Some(2), "a short key is refused");
    assert_eq!(env.ok(&["webhook", "list", "--json"]).trim(), "[]");

    let added = keyed(&["webhook", "add", "erp", &url, "--json"]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let added: serde_json::Value = serde_json::from_slice(&added.stdout).unwrap();
    let secret = added["secret"].as_str().unwrap().to_owned();
    assert_eq!(keyed(&["webhook", "add", "erp", &url]).status.code(), Some(2), "a live name is unique");

    env.create_client("acme");
    let mut worker = env.cmd(&["worker"]).env("ODUFLOW_WEBHOOK_KEY", WEBHOOK_KEY).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !got.lock().unwrap().iter().any(|(_, _, b)| b.contains("\"kind\":\"ready\"")) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = Command::new("kill").arg(worker.id().to_string()).status();
    let _ = worker.wait();
    let got = got.lock().unwrap().clone();
    let ready = got.iter().find(|(_, _, b)| b.contains("\"kind\":\"ready\"")).expect("the ready event was delivered");
    let (ts, sig, body) = ready;
    assert!(verified(&secret, ts, sig, body), "{sig} {body}");
    let event: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(event["client"], "acme", "{body}");
    assert!(got.iter().all(|(_, _, b)| !b.contains("\"kind\":\"client_created\"")), "only the default kinds");
    let list: serde_json::Value = serde_json::from_str(&env.ok(&["webhook", "list", "--json"])).unwrap();
    assert!(list[0]["delivered"].as_i64().unwrap() >= 1, "{list}");
    env.ok(&["webhook", "remove", "erp"]);
    assert_eq!(env.ok(&["webhook", "list", "--json"]).trim(), "[]");
}

/// A receiver that never answers in time stalls no worker: the clients
/// become ready as fast as without webhooks, while deliveries wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_stalls_no_worker() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            axum::http::StatusCode::OK
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let added = env
        .cmd(&["webhook", "add", "slow", &url, "--kind", "all"])
        .env("ODUFLOW_WEBHOOK_KEY", WEBHOOK_KEY)
        .output()
        .unwrap();
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    for n in ["a", "b", "c"] {
        env.create_client(n);
    }
    let mut worker = env.cmd(&["worker"]).env("ODUFLOW_WEBHOOK_KEY", WEBHOOK_KEY).spawn().unwrap();
    let store = env.store().await;
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = store.client_list().await.unwrap().iter().filter(|c| c.infra.status == ClientStatus::Ready).count();
        if ready == 3 {
            break;
        }
        assert!(Instant::now() < until, "the worker stalled behind a slow receiver: {ready} of 3 ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = Command::new("kill").arg(worker.id().to_string()).status();
    let _ = worker.wait();
    let list: serde_json::Value = serde_json::from_str(&env.ok(&["webhook", "list", "--json"])).unwrap();
    assert_eq!(list[0]["delivered"], 0, "the receiver answered nothing in time: {list}");
}
