//! The accept loop of `oduflow serve` and of a worker's `--metrics-listen`:
//! our own over hyper (as the simulator's), because `axum::serve` neither
//! times out a client's headers nor caps connections. About 1,130 clients
//! that never finished their headers, held for a minute, left no file
//! descriptor for a real request under the units' limit of 1,024.
//!
//! A connection is accepted only with one of `connections_max` permits in
//! hand: above the cap, new connections wait in the kernel's backlog (no
//! descriptor of ours) until one ends. A client that has not sent a whole
//! request head within `header_read_timeout` is cut.

use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// How long a client may take to send a request's headers (hyper answers
/// 408 and closes the connection after it).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once: well below the units' 1,024 file
/// descriptors, which the database pool, the log and the provider's
/// connections share.
pub const CONNECTIONS_MAX: usize = 512;
/// After a stop, how long connections still open get to finish their
/// request before the loop returns without them.
pub const DRAIN_MAX: Duration = Duration::from_secs(10);
/// After a failed accept (out of descriptors, say), the pause before the
/// next, so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The listener's bounds (tests lower them).
#[derive(Clone, Copy, Debug)]
pub struct ListenLimits {
    pub header_read_timeout: Duration,
    pub connections_max: usize,
}

impl Default for ListenLimits {
    fn default() -> Self {
        Self { header_read_timeout: HEADER_READ_TIMEOUT, connections_max: CONNECTIONS_MAX }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes;
/// then stops accepting, lets open connections finish their request (at
/// most [`DRAIN_MAX`]) and returns.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    limits: ListenLimits,
) -> std::io::Result<()> {
    let max = limits.connections_max.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let (stop, stopped) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let app = app.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let svc = hyper_util::service::TowerToHyperService::new(app);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stopped.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(permit);
        });
    }
    let _ = stop.send(true);
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_MAX, permits.acquire_many(all)).await.is_err() {
        tracing::warn!(
            open = max - permits.available_permits(),
            "connections still open {} s after the stop; closing them",
            DRAIN_MAX.as_secs()
        );
    }
    Ok(())
}
