//! The adapter's tests: classification and retries on a mocked transport
//! (wiremock, and raw TCP for resets), conformance to Vultr's OpenAPI
//! document, the API key's secrecy, and end to end against the simulator.

mod classify;
mod conformance;
mod dns_adapter;
mod openapi;
mod reads;
mod redirects;
mod secrets;
mod servers;
mod sim_e2e;

use oduflow_model::provider::{BlockRequest, InstanceRequest};
use oduflow_model::{Label, VolumeType};
use oduflow_vultr::{VultrClient, VultrConfig};
use secrecy::SecretString;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

pub const KEY: &str = "test-key-0123456789";

/// Settings that keep tests fast: short timeouts, millisecond backoff, a
/// limiter that never gets in the way.
pub fn fast_config(base_url: &str, key: &str) -> VultrConfig {
    VultrConfig {
        base_url: base_url.to_owned(),
        request_timeout_ms: 500,
        connect_timeout_ms: 500,
        backoff_base_ms: 5,
        backoff_max_ms: 20,
        rate_per_sec: 10_000,
        ..VultrConfig::new(SecretString::from(key.to_owned()))
    }
}

pub fn client(base_url: &str) -> VultrClient {
    VultrClient::new(fast_config(base_url, KEY)).unwrap()
}

pub fn instance_req(label: &str) -> InstanceRequest {
    InstanceRequest {
        region: "ewr".into(),
        plan: "vc2-1c-1gb".into(),
        image: oduflow_model::ImageSource::Os(2136),
        label: Label::from(label),
        server: oduflow_model::ServerSpec { hostname: "client-a".into(), ..Default::default() },
    }
}

pub fn block_req(label: &str) -> BlockRequest {
    BlockRequest { region: "ewr".into(), size_gb: 40, block_type: VolumeType::HighPerf, label: Label::from(label) }
}

/// A server that accepts connections, reads what comes, and resets the
/// connection without answering. Counts the requests it received.
pub async fn resetting_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                // Read until the end of the headers, so the request has
                // really reached us before we reset.
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                #[allow(deprecated)]
                let _ = stream.set_linger(Some(Duration::ZERO));
                drop(stream);
            });
        }
    });
    (format!("http://{addr}/v2"), requests)
}
