//! Webhooks end to end against a receiver on port 0: down for a while,
//! then up (every event delivered, in feed order, each signature checked),
//! an event it refuses dead-lettered and then replayed, a restart that
//! resumes where the last process was, and a slow receiver answered by a
//! timeout.

use super::*;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use oduflow_engine::webhook::{Deliverer, WEBHOOK_TOLERANCE_S, WebhookConfig, WebhookKey};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

oduflow_store::on_both_stores!(
    migrated super::store_of =>
    a_receiver_down_then_up_gets_every_event_signed_in_order_and_a_refused_one_is_replayed,
    two_processes_never_deliver_one_endpoint_at_once,
);

/// What the receiver was sent: (timestamp, signature, body).
type Got = Arc<Mutex<Vec<(i64, String, String)>>>;

/// A receiver that takes everything but events of client `poison` (400)
/// until `poison_ok`, and answers after `delay_ms`.
#[derive(Clone, Default)]
struct Receiver {
    got: Got,
    poison_ok: Arc<std::sync::atomic::AtomicBool>,
    delay_ms: Arc<AtomicU64>,
}

async fn take(axum::extract::State(r): axum::extract::State<Receiver>, h: HeaderMap, body: String) -> StatusCode {
    tokio::time::sleep(Duration::from_millis(r.delay_ms.load(Ordering::SeqCst))).await;
    let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    if v["client"] == "poison" && !r.poison_ok.load(Ordering::SeqCst) {
        return StatusCode::BAD_REQUEST;
    }
    r.got.lock().unwrap().push((header("oduflow-timestamp").parse().unwrap(), header("oduflow-signature"), body));
    StatusCode::NO_CONTENT
}

/// Serves `r` on `listener`.
fn serve(r: Receiver, listener: tokio::net::TcpListener) {
    let app = axum::Router::new().route("/hook", axum::routing::post(take)).with_state(r);
    tokio::spawn(async move { axum::serve(listener, app).await });
}

/// A signature as a receiver checks it, with the library rather than
/// oduflow's own code.
fn verified(secret: &str, timestamp: i64, signature: &str, body: &str) -> bool {
    let Some(hex) = signature.strip_prefix("v1=") else { return false };
    let bytes: Vec<u8> =
        (0..hex.len() / 2).filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()).collect();
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(format!("{timestamp}.{body}").as_bytes());
    m.verify_slice(&bytes).is_ok()
}

fn deliverer(store: &Store, key: &WebhookKey, owner: &str) -> Deliverer {
    let cfg = WebhookConfig {
        attempts_max: 4,
        backoff_base_ms: 10,
        backoff_max_ms: 40,
        timeout: Duration::from_millis(300),
        ..WebhookConfig::default()
    };
    Deliverer::new(store.clone(), key.clone(), owner, Arc::new(SystemClock), cfg)
}

async fn a_receiver_down_then_up_gets_every_event_signed_in_order_and_a_refused_one_is_replayed(
    store: Store,
) -> Result<()> {
    let key = WebhookKey::new(secrecy::SecretString::from("k".repeat(40))).unwrap();
    // A port with nothing listening yet: the receiver is down.
    let port = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?.port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let hook = store.webhook_add("erp", &url, &[], 0, "test", now()).await?;
    let secret = key.secret_for(&hook.id);
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    for n in ["acme", "poison", "beta"] {
        store.client_create(&ClientName::parse(n)?, &spec, "test", now(), 5).await?;
    }
    store.client_delete("acme", "test", now(), 5).await?;
    let first = deliverer(&store, &key, "w1");
    for _ in 0..3 {
        let r = first.pass().await?;
        assert_eq!((r.delivered, r.failed), (0, 1), "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let e = store.webhook_get("erp").await?.unwrap();
    assert_eq!((e.cursor, e.attempts, e.last_error.as_deref()), (0, 3, Some("could not connect")), "{e:?}");

    // Up: everything is delivered but the refused event, which becomes a
    // dead letter after its attempts.
    let receiver = Receiver::default();
    serve(receiver.clone(), tokio::net::TcpListener::bind(("127.0.0.1", port)).await?);
    let head = store.feed_after(0, 1).await?.head;
    for _ in 0..100 {
        first.pass().await?;
        if store.webhook_get("erp").await?.unwrap().cursor == head {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = store.feed_after(0, 1000).await?.events;
    let poison: Vec<i64> = all.iter().filter(|e| e.client.as_deref() == Some("poison")).map(|e| e.position).collect();
    let got = receiver.got.lock().unwrap().clone();
    let positions: Vec<i64> = got
        .iter()
        .map(|(_, _, b)| serde_json::from_str::<serde_json::Value>(b).unwrap()["position"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = all.iter().map(|e| e.position).filter(|p| !poison.contains(p)).collect();
    assert_eq!(positions, expected, "every event but the refused one, once each, in feed order");
    for (ts, sig, body) in &got {
        assert!(verified(&secret, *ts, sig, body), "a signature does not verify: {sig} {body}");
        assert!((now() / 1000 - ts).abs() <= WEBHOOK_TOLERANCE_S, "{ts}");
        assert!(!verified(&key.secret_for("another-endpoint"), *ts, sig, body));
    }
    let dead = store.webhook_dead_letters(&hook.id).await?;
    assert_eq!(dead.iter().map(|d| d.position).collect::<Vec<_>>(), poison, "{dead:?}");
    assert!(dead.iter().all(|d| d.attempts == 4 && d.last_error == "the receiver answered 400"), "{dead:?}");

    // The receiver fixed, the dead letter replayed: delivered once.
    receiver.poison_ok.store(true, Ordering::SeqCst);
    assert_eq!(store.webhook_replay("erp", None, "test", now()).await?, poison.len() as u64);
    let r = first.pass().await?;
    assert_eq!(r.replayed, poison.len() as u64, "{r:?}");
    assert!(store.webhook_dead_letters(&hook.id).await?.is_empty());

    // Another process after a restart resumes at the cursor: only what is
    // new is sent.
    let before = receiver.got.lock().unwrap().len();
    store.client_delete("beta", "test", now(), 5).await?;
    let second = deliverer(&store, &key, "w2");
    let r = second.pass().await?;
    assert_eq!(r.delivered, 1, "{r:?}");
    assert_eq!(receiver.got.lock().unwrap().len(), before + 1);

    // A slow receiver: the attempt ends at the timeout, as a failure to
    // try again, and nothing is lost.
    receiver.delay_ms.store(1_000, Ordering::SeqCst);
    store.client_delete("poison", "test", now(), 5).await?;
    let r = second.pass().await?;
    assert_eq!(r.failed, 1, "{r:?}");
    let e = store.webhook_get("erp").await?.unwrap();
    assert_eq!(e.last_error.as_deref(), Some("no answer within 300 ms"), "{e:?}");
    receiver.delay_ms.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(second.pass().await?.delivered, 1);
    Ok(())
}

/// Two processes deliver one endpoint, named alike (two containers whose
/// workers have the same process id), while the receiver is slow enough
/// that a pass outlives the lease: each event is sent once.
async fn two_processes_never_deliver_one_endpoint_at_once(store: Store) -> Result<()> {
    let key = WebhookKey::new(secrecy::SecretString::from("k".repeat(40))).unwrap();
    let receiver = Receiver::default();
    receiver.delay_ms.store(100, Ordering::SeqCst);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    serve(receiver.clone(), listener);
    store.webhook_add("erp", &url, &[], 0, "test", now()).await?;
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    for n in 0..6 {
        store.client_create(&ClientName::parse(&format!("c{n}"))?, &spec, "test", now(), 5).await?;
    }
    let cfg = WebhookConfig { lease_ms: 400, ..WebhookConfig::default() };
    let one = Deliverer::new(store.clone(), key.clone(), "worker-1", Arc::new(SystemClock), cfg.clone());
    let other = Deliverer::new(store.clone(), key.clone(), "worker-1", Arc::new(SystemClock), cfg);
    let head = store.feed_after(0, 1).await?.head;
    let later = async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        other.pass().await
    };
    let (a, b) = tokio::join!(one.pass(), later);
    a?;
    b?;
    for _ in 0..50 {
        if store.webhook_get("erp").await?.unwrap().cursor == head {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        one.pass().await?;
    }
    let got = receiver.got.lock().unwrap().clone();
    let mut positions: Vec<i64> = got
        .iter()
        .map(|(_, _, b)| serde_json::from_str::<serde_json::Value>(b).unwrap()["position"].as_i64().unwrap())
        .collect();
    let sent = positions.len();
    positions.sort();
    positions.dedup();
    assert_eq!(positions.len(), sent, "an event was sent twice: {positions:?}");
    assert_eq!(positions.len(), store.feed_after(0, 1000).await?.events.len(), "every event once");
    Ok(())
}
