//! SIGTERM (what systemd and other supervisors send) and SIGINT (Ctrl-C):
//! the first asks the process to stop gracefully, a second one ends it at
//! once. Ending at once is safe by the protocol: every create's receipt is
//! committed before it is sent, so a process that dies anywhere leaves
//! nothing the next run cannot account for (it may leave an uncertain
//! outcome to resolve by observation, never a duplicate).

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Exit status after a second signal: 128 + the signal's number, as a
/// shell reports a process the signal killed.
fn killed_status(kind: SignalKind) -> i32 {
    128 + kind.as_raw_value()
}

/// Starts listening for SIGTERM and SIGINT. The receiver turns `true` at
/// the first; the second exits the process at once. `what` names the
/// process in the lines it prints.
pub(crate) fn install(what: &'static str) -> std::io::Result<watch::Receiver<bool>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            let (name, kind) = tokio::select! {
                _ = term.recv() => ("SIGTERM", SignalKind::terminate()),
                _ = int.recv() => ("SIGINT", SignalKind::interrupt()),
            };
            seen += 1;
            if seen == 1 {
                tracing::warn!("{what}: {name} received: stopping gracefully (a second signal stops at once)");
                crate::logs::say(&format!(
                    "oduflow {what}: {name}: stopping gracefully; send it again to stop at once"
                ));
                let _ = tx.send(true);
            } else {
                crate::logs::say(&format!("oduflow {what}: second signal ({name}): stopping at once"));
                std::process::exit(killed_status(kind));
            }
        }
    });
    Ok(rx)
}

/// Resolves when `rx` turns `true` (or its sender is gone).
pub(crate) async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}
