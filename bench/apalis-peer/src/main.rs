//! Peer benchmark for oduflow's queue: no-op job throughput of
//! apalis-postgres on the same PostgreSQL instance.
//!
//! Usage: apalis-peer --database-url URL --jobs N --workers W
//!                    [--mode concurrency|workers] [--poll-ms MS]
//!
//! * Runs apalis-postgres's own migrations (`PostgresStorage::setup`) into the
//!   given (fresh) database.
//! * Enqueues N no-op jobs (~200-byte JSON payload) with `push_all` (one
//!   batched UNNEST insert); enqueue time is reported separately.
//! * Starts the workers and times the drain until `apalis.jobs` has N rows
//!   with status 'Done' (an in-process handler counter is watched first; the
//!   table is polled every 20 ms only once all N handlers have returned).
//!
//! Modes (how W jobs are put in flight):
//! * `concurrency` (default, idiomatic): ONE apalis worker with
//!   `.concurrency(W)` (tower ConcurrencyLimit) + `.parallelize(tokio::spawn)`.
//! * `workers`: W apalis workers on the same queue, each `.concurrency(1)`.
//!
//! Backend settings: apalis-postgres `Config::default()` (batch_size 10,
//! lock_tasks true, persist_results true, heartbeat 30 s), except the queue
//! name, plus an interval poll strategy of `--poll-ms` (default 5 ms). The
//! interval only wakes idle workers; a worker with a non-empty batch fetches
//! the next batch immediately.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_postgres::{Config, PostgresStorage};
use futures::stream;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct NoOp {
    id: u64,
    tenant: String,
    pad: String,
}

static HANDLED: AtomicU64 = AtomicU64::new(0);

async fn handle(_job: NoOp) -> Result<(), BoxDynError> {
    HANDLED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

struct Args {
    url: String,
    jobs: u64,
    workers: usize,
    mode: String,
    poll_ms: u64,
}

fn parse_args() -> Args {
    let mut a = Args {
        url: "postgres://postgres@127.0.0.1:5432/test".into(),
        jobs: 20_000,
        workers: 1,
        mode: "concurrency".into(),
        poll_ms: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("missing value for {k}"));
        match k.as_str() {
            "--database-url" => a.url = v,
            "--jobs" => a.jobs = v.parse().expect("--jobs"),
            "--workers" => a.workers = v.parse().expect("--workers"),
            "--mode" => a.mode = v,
            "--poll-ms" => a.poll_ms = v.parse().expect("--poll-ms"),
            _ => panic!("unknown argument {k}"),
        }
    }
    assert!(
        a.mode == "concurrency" || a.mode == "workers",
        "--mode concurrency|workers"
    );
    a
}

const QUEUE: &str = "bench-noop";

#[tokio::main]
async fn main() {
    let a = parse_args();
    let poll = Duration::from_millis(a.poll_ms);
    let pool = PgPoolOptions::new()
        .max_connections((a.workers as u32) * 2 + 4)
        .connect(&a.url)
        .await
        .expect("connect");
    PostgresStorage::setup(&pool)
        .await
        .expect("apalis setup (migrations)");

    // ~200-byte JSON payload.
    let pad = "x".repeat(150);
    let sample = serde_json::to_string(&NoOp {
        id: 12345,
        tenant: "tenant-0001".into(),
        pad: pad.clone(),
    })
    .unwrap();

    let mut sink = PostgresStorage::<NoOp>::new(&pool).with_config(Config::default().queue(QUEUE));
    let t0 = Instant::now();
    let mut items = stream::iter((0..a.jobs).map(|i| {
        TaskBuilder::new(NoOp {
            id: i,
            tenant: format!("tenant-{:04}", i % 100),
            pad: pad.clone(),
        })
        .build()
    }));
    sink.push_all(&mut items).await.expect("push_all");
    let enqueue_s = t0.elapsed().as_secs_f64();
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM apalis.jobs WHERE job_type = $1")
        .bind(QUEUE)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(pending as u64, a.jobs, "enqueued row count");
    eprintln!(
        "enqueued {} jobs (payload {} bytes JSON) in {:.3}s = {:.0} jobs/s (push_all, batched)",
        a.jobs,
        sample.len(),
        enqueue_s,
        a.jobs as f64 / enqueue_s
    );

    let storage = |pool: &sqlx::PgPool, poll: Duration| {
        PostgresStorage::<NoOp>::new(pool)
            .with_config(Config::default().queue(QUEUE))
            .poll_with_strategy(Strategy::new().interval(poll))
    };
    let done_count = Arc::new(AtomicU64::new(0));
    let t1 = Instant::now();
    // Workers run on this task (select! below); the drain poller ends the run.
    let workers_fut: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
        if a.mode == "concurrency" {
            let w = WorkerBuilder::new("peer-0")
                .backend(storage(&pool, poll))
                .concurrency(a.workers)
                .parallelize(tokio::spawn)
                .build(handle);
            Box::pin(async move {
                if let Err(e) = w.run().await {
                    eprintln!("worker error: {e}");
                }
            })
        } else {
            let mut runs = Vec::new();
            for i in 0..a.workers {
                let w = WorkerBuilder::new(format!("peer-{i}"))
                    .backend(storage(&pool, poll))
                    .concurrency(1)
                    .build(handle);
                runs.push(async move {
                    if let Err(e) = w.run().await {
                        eprintln!("worker error: {e}");
                    }
                });
            }
            Box::pin(async move {
                futures::future::join_all(runs).await;
            })
        };
    let drain_pool = pool.clone();
    let jobs = a.jobs;
    let drain = async move {
        // Drain: wait (cheaply, in-process) until every handler has returned,
        // then poll the done count on the job table until all N acks are
        // persisted. Keeps the measuring query off the DB during the bulk.
        let deadline = Duration::from_secs(600);
        while HANDLED.load(Ordering::Relaxed) < jobs && t1.elapsed() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        loop {
            let done: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status = 'Done'",
            )
            .bind(QUEUE)
            .fetch_one(&drain_pool)
            .await
            .unwrap();
            done_count.store(done as u64, Ordering::Relaxed);
            if done as u64 >= jobs {
                break;
            }
            if t1.elapsed() > deadline {
                let rows: Vec<(String, i64)> =
                    sqlx::query_as("SELECT status, count(*) FROM apalis.jobs GROUP BY status")
                        .fetch_all(&drain_pool)
                        .await
                        .unwrap();
                eprintln!(
                    "TIMEOUT after {deadline:?}: statuses {rows:?}, handled={}",
                    HANDLED.load(Ordering::Relaxed)
                );
                std::process::exit(2);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = drain => {}
        _ = workers_fut => { eprintln!("workers exited before drain completed"); std::process::exit(3); }
    }
    let drain_s = t1.elapsed().as_secs_f64();
    println!(
        "apalis-postgres workers={} jobs={} drain_s={:.3} jobs_per_s={:.0}",
        a.workers,
        a.jobs,
        drain_s,
        a.jobs as f64 / drain_s
    );
    eprintln!(
        "  mode={} poll_ms={} enqueue_s={:.3} handled={}",
        a.mode,
        a.poll_ms,
        enqueue_s,
        HANDLED.load(Ordering::Relaxed)
    );
    std::process::exit(0);
}
