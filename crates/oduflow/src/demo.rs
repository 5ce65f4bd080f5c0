//! `oduflow demo`: the embedded default end to end. A fresh SQLite file, the
//! engine, and an in-process provider: N clients provisioned, then deleted,
//! with a progress line and a summary.

use crate::config::Config;
use anyhow::Result;
use oduflow_engine::memory::MemoryProvider;
use oduflow_engine::{Clock, SystemClock, Worker};
use oduflow_model::*;
use oduflow_store::Store;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub async fn run(cfg: &Config, clients: usize) -> Result<()> {
    if clients == 0 || clients > 10_000 {
        return Err(crate::config::BadInput("--clients must be between 1 and 10000".into()).into());
    }
    let dir = std::env::temp_dir().join(format!("oduflow-demo-{}", uuid_like()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}", dir.join("oduflow.db").display());
    let store = Store::connect(&url, true).await?;
    store.migrate().await?;
    println!("oduflow demo: {clients} clients, SQLite at {}", dir.join("oduflow.db").display());

    let key = KeyFingerprint::of_key(&secrecy::SecretString::from("demo-key".to_owned()));
    let provider = Arc::new(MemoryProvider::new(key));
    provider.with(|s| s.lose_create_responses = (clients as u32 / 5).max(1));
    let mut engine = cfg.engine();
    engine.poll_interval_ms = 10;
    engine.retry_base_ms = 10;
    let worker = Worker::new(store.clone(), provider.clone(), engine, Arc::new(SystemClock));
    let started = Instant::now();

    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf")?;
    for i in 0..clients {
        let name = ClientName::parse(&format!("demo-{i:04}"))?;
        store.client_create(&name, &spec, SystemClock.now_ms(), cfg.attempts_max).await?;
    }
    drive(&store, &worker, "provisioning").await?;
    for i in 0..clients {
        store.client_delete(&format!("demo-{i:04}"), SystemClock.now_ms(), cfg.attempts_max).await?;
    }
    drive(&store, &worker, "deleting").await?;

    let counts = store.client_status_counts().await?;
    let (creates, max_per_label, live) = provider.with(|s| {
        (
            s.creates_per_label.values().sum::<u32>(),
            s.creates_per_label.values().copied().max().unwrap_or(0),
            s.instances.len() + s.blocks.len(),
        )
    });
    println!("\nsummary after {:.1} s:", started.elapsed().as_secs_f64());
    for (status, n) in &counts {
        println!("  {status:<10} {n}");
    }
    for c in store.client_list().await? {
        if let Some(r) = c.infra.blocked_reason {
            println!("  blocked {}: {r}", c.name);
        }
    }
    println!("  create requests applied: {creates}; most per label: {max_per_label} (must be 1)");
    println!("  provider resources still present: {live}");
    anyhow::ensure!(max_per_label <= 1, "a label was created more than once");
    Ok(())
}

async fn drive(store: &Store, worker: &Worker<MemoryProvider>, phase: &str) -> Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let w = worker.clone();
    let task = tokio::spawn(async move { w.run(true, rx).await });
    loop {
        let counts = store.client_status_counts().await?;
        let line: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
        print!("\r{phase}: {}        ", line.join(", "));
        std::io::stdout().flush()?;
        if task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(tx);
    task.await??;
    println!();
    Ok(())
}

fn uuid_like() -> String {
    format!("{}-{}", std::process::id(), SystemClock.now_ms())
}
