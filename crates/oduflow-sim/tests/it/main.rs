//! The simulator's behaviours and faults, over real HTTP on port 0.

mod behaviour;
mod faults;
mod leniency;
mod quirks;

use oduflow_sim::{Sim, SimConfig, SimHandle};
use reqwest::{Client, Response};
use serde_json::{Value, json};
use std::time::Duration;

pub const KEY: &str = "sim-test-key-0001";

pub async fn start(cfg: SimConfig) -> SimHandle {
    Sim::start(cfg.with_key(KEY), "127.0.0.1:0".parse().unwrap()).await.expect("simulator starts")
}

/// A raw client: these tests look at the HTTP itself, not the adapter.
pub fn http() -> Client {
    Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

pub struct Api<'a> {
    pub sim: &'a SimHandle,
    pub http: Client,
    pub key: &'a str,
}

impl<'a> Api<'a> {
    pub fn new(sim: &'a SimHandle) -> Self {
        Self { sim, http: http(), key: KEY }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.base_url)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.http.get(self.url(path)).bearer_auth(self.key).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> Response {
        self.http.post(self.url(path)).bearer_auth(self.key).json(&body).send().await.unwrap()
    }

    pub async fn patch(&self, path: &str, body: Value) -> Response {
        self.http.patch(self.url(path)).bearer_auth(self.key).json(&body).send().await.unwrap()
    }

    pub async fn delete(&self, path: &str) -> Response {
        self.http.delete(self.url(path)).bearer_auth(self.key).send().await.unwrap()
    }

    pub async fn create_instance(&self, label: &str) -> String {
        let r = self
            .post("/instances", json!({"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "label": label}))
            .await;
        assert_eq!(r.status(), 202);
        r.json::<Value>().await.unwrap()["instance"]["id"].as_str().unwrap().to_owned()
    }

    pub async fn create_block(&self, label: &str) -> String {
        let r = self
            .post("/blocks", json!({"region": "ewr", "size_gb": 10, "label": label, "block_type": "high_perf"}))
            .await;
        assert_eq!(r.status(), 202);
        r.json::<Value>().await.unwrap()["block"]["id"].as_str().unwrap().to_owned()
    }
}

pub async fn body(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
}
