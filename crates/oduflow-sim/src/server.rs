//! Serving: our own accept loop over hyper, so a fault can close one
//! connection after its request was applied (reqwest then sees a transport
//! error, exactly like a response lost in the network), and the in-process
//! handle tests and `oduflow demo` use.

use crate::api::{ConnKill, Shared, Source, router};
use crate::config::{Faults, SimConfig};
use crate::world::{Ledger, World};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid fault plan: {0}")]
    Faults(String),
    #[error("waiting for ctrl-c failed")]
    Signal(#[source] std::io::Error),
}

/// Reads the ledger and changes faults of a running simulator, in process.
/// Cheap to clone.
#[derive(Clone)]
pub struct SimControl {
    shared: Arc<Shared>,
}

impl SimControl {
    pub fn ledger(&self) -> Ledger {
        self.shared.world().ledger()
    }

    pub fn faults(&self) -> Faults {
        self.shared.world().faults()
    }

    /// Replaces the fault plan (as `POST /sim/faults` does); the fault budget
    /// and any 429 burst in progress start over.
    pub fn set_faults(&self, faults: Faults) -> Result<(), SimError> {
        faults.validate().map_err(SimError::Faults)?;
        self.shared.world().set_faults(faults);
        Ok(())
    }

    /// Answers the next `times` requests of `ops` (`None`: every one until
    /// [`SimControl::unscript`]) with `answer`, ahead of the fault plan.
    pub fn script(&self, ops: &[crate::Op], answer: crate::Scripted, times: Option<u32>) {
        self.shared.world().script(ops, answer, times);
    }

    /// Drops every scripted answer not yet used.
    pub fn unscript(&self) {
        self.shared.world().unscript();
    }

    /// Accepts these API keys from now on, and no other (a key revoked in
    /// the console, or a new one issued).
    pub fn set_api_keys(&self, keys: &[secrecy::SecretString]) {
        self.shared.world().set_api_keys(keys);
    }

    /// How long instances stay `pending` after their create, existing ones
    /// included: a long time is an install that never ends.
    pub fn set_pending_ms(&self, ms: u64) {
        self.shared.world().set_pending_ms(ms);
    }

    /// Gives a VM another main IP (see `World::instance_set_main_ip`);
    /// `false` when there is no such VM.
    pub fn set_instance_main_ip(&self, id: &str, ip: &str) -> bool {
        self.shared.world().instance_set_main_ip(id, ip)
    }

    /// Sets the account's block storage limit (see
    /// `SimConfig::block_storage_limit_gb`): a grow past it is refused.
    pub fn set_block_storage_limit(&self, gb: Option<i64>) {
        self.shared.world().set_block_storage_limit(gb);
    }

    /// Moves the simulator's clock forward by `by`: lifecycles, the 404
    /// window, listing lag, attach locks and the rate window all see the
    /// time pass at once. Tests use it instead of sleeping past a lag.
    pub fn advance(&self, by: std::time::Duration) {
        self.shared.world().advance(by);
    }
}

/// A running simulator. Dropping it stops the server.
pub struct SimHandle {
    /// `http://127.0.0.1:PORT/v2`: what a `VultrConfig::base_url` takes.
    pub base_url: String,
    pub addr: SocketAddr,
    control: SimControl,
    shutdown: watch::Sender<bool>,
    /// While false, the listening socket is closed: a connection to
    /// [`SimHandle::addr`] is refused, open ones go on.
    plugged: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl SimHandle {
    pub fn control(&self) -> SimControl {
        self.control.clone()
    }

    pub fn ledger(&self) -> Ledger {
        self.control.ledger()
    }

    pub fn faults(&self) -> Faults {
        self.control.faults()
    }

    pub fn set_faults(&self, faults: Faults) -> Result<(), SimError> {
        self.control.set_faults(faults)
    }

    /// See [`SimControl::advance`].
    pub fn advance(&self, by: std::time::Duration) {
        self.control.advance(by);
    }

    /// Closes the listening socket: a new connection is refused (a client
    /// sees a connect error: its request provably never left), while
    /// connections already open, a client's pooled ones, still answer.
    /// Returns once the socket is closed.
    pub async fn unplug(&self) {
        let _ = self.plugged.send(false);
        while TcpStream::connect(self.addr).await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// Listens on the same address again. Returns once it accepts.
    pub async fn plug(&self) {
        let _ = self.plugged.send(true);
        while TcpStream::connect(self.addr).await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// Stops accepting, closes open connections and waits for the loop.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}

/// The simulator.
pub struct Sim;

impl Sim {
    /// Serves in the background on `listen` (port 0 picks a free port).
    pub async fn start(config: SimConfig, listen: SocketAddr) -> Result<SimHandle, SimError> {
        config.faults.validate().map_err(SimError::Faults)?;
        let listener = TcpListener::bind(listen).await.map_err(|source| SimError::Bind { addr: listen, source })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind { addr: listen, source })?;
        let shared = Arc::new(Shared::new(World::new(config)));
        let (shutdown, rx) = watch::channel(false);
        let (plugged, plugged_rx) = watch::channel(true);
        let task = tokio::spawn(listen_loop(listener, addr, router(shared.clone()), rx, plugged_rx));
        tracing::info!(%addr, "Vultr simulator listening");
        let control = SimControl { shared };
        Ok(SimHandle { base_url: format!("http://{addr}/v2"), addr, control, shutdown, plugged, task })
    }
}

/// `oduflow sim --listen ADDR --seed N`: serves until ctrl-c.
pub async fn serve(config: SimConfig, listen: SocketAddr) -> Result<(), SimError> {
    let handle = Sim::start(config, listen).await?;
    tokio::signal::ctrl_c().await.map_err(SimError::Signal)?;
    handle.shutdown().await;
    Ok(())
}

/// Accepts while plugged; while unplugged the socket is closed, then bound
/// again on the same address.
async fn listen_loop(
    listener: TcpListener,
    addr: SocketAddr,
    app: axum::Router,
    mut shutdown: watch::Receiver<bool>,
    mut plugged: watch::Receiver<bool>,
) {
    let mut listener = Some(listener);
    loop {
        match listener.take() {
            Some(l) => {
                let unplugged = tokio::select! {
                    _ = accept_loop(&l, app.clone(), shutdown.clone()) => return,
                    r = plugged.wait_for(|p| !*p) => r.is_ok(),
                };
                if !unplugged {
                    // The handle is gone: serve until shut down.
                    return accept_loop(&l, app, shutdown).await;
                }
            }
            None => {
                let plugged_again = tokio::select! {
                    _ = shutdown.changed() => return,
                    r = plugged.wait_for(|p| *p) => r.is_ok(),
                };
                if !plugged_again {
                    return;
                }
                match TcpListener::bind(addr).await {
                    Ok(l) => listener = Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, %addr, "the simulator could not listen again");
                        return;
                    }
                }
            }
        }
    }
}

async fn accept_loop(listener: &TcpListener, app: axum::Router, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (stream, source) = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => (stream, Source(peer.ip())),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let app = app.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let kill = Arc::new(Notify::new());
            let conn_kill = ConnKill(kill.clone());
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(conn_kill.clone());
                req.extensions_mut().insert(source);
                app.clone().oneshot(req)
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            // Whichever comes first; dropping `conn` closes the socket
            // without writing anything more.
            tokio::select! {
                _ = conn => {}
                _ = kill.notified() => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}
