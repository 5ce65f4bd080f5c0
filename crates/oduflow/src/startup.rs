//! A worker's footing at start: its database, then Vultr's answer to its key
//! (`GET /account`). What waiting can fix (nothing listening, a timeout, a
//! 5xx or 429, a database at its connection limit or not accepting
//! connections) is tried again with a growing pause, one warn line each,
//! for at most `startup_retry_ms` (`ODUFLOW_STARTUP_RETRY_MS`); then the
//! worker exits 1, which the units in `deploy/` restart. What waiting
//! cannot fix (a refused key, an answer that is not Vultr's, a bad URL or
//! setting) exits 2 at once, as before. One blip at boot used to exit 2,
//! which the units never restart: every worker stayed down.

use crate::config::{BadInput, Config};
use anyhow::Result;
use oduflow_store::Store;
use oduflow_vultr::{AccountProbe, VultrClient};
use std::time::{Duration, Instant};

/// The first pause between two start-up attempts; each next one is twice
/// as long, up to [`PAUSE_MAX`].
const PAUSE_FIRST: Duration = Duration::from_secs(1);

/// The longest pause between two start-up attempts.
const PAUSE_MAX: Duration = Duration::from_secs(30);

/// What one attempt of a start-up step came to.
enum Attempt<T> {
    Done(T),
    /// Waiting may fix it: why it failed, for the line.
    Again(String),
    /// Waiting cannot fix it.
    Fatal(anyhow::Error),
}

/// Runs `attempt` until it is done or fatal, pausing between attempts, for
/// at most `limit` in all; `None` if `stop` turned meanwhile.
async fn retrying<T, F, Fut>(
    what: &str,
    limit: Duration,
    stop: &tokio::sync::watch::Receiver<bool>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Attempt<T>>,
{
    let start = Instant::now();
    let mut pause = PAUSE_FIRST;
    for n in 1.. {
        let why = match attempt().await {
            Attempt::Done(v) => {
                if n > 1 {
                    tracing::warn!(
                        "start-up: {what} succeeded at attempt {n}, {} ms after the first",
                        ms(start.elapsed())
                    );
                }
                return Ok(Some(v));
            }
            Attempt::Fatal(e) => return Err(e),
            Attempt::Again(why) => why,
        };
        let spent = start.elapsed();
        if spent >= limit {
            anyhow::bail!(
                "startup_retry_exhausted: {what} still failing after {n} attempt(s) over {} ms (ODUFLOW_STARTUP_RETRY_MS \
                 is {} ms): {why}; exiting 1 so that the service manager starts the worker again",
                ms(spent),
                ms(limit)
            );
        }
        let wait = pause.min(limit - spent);
        tracing::warn!(
            "start-up: {what} failed at attempt {n} ({why}); trying again in {} ms ({} of {} ms of \
             ODUFLOW_STARTUP_RETRY_MS used)",
            ms(wait),
            ms(spent),
            ms(limit)
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = crate::signals::stopped(stop.clone()) => return Ok(None),
        }
        pause = (pause * 2).min(PAUSE_MAX);
    }
    unreachable!("the attempts are counted without end")
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

fn limit(cfg: &Config) -> Duration {
    Duration::from_millis(u64::try_from(cfg.startup_retry_ms).unwrap_or(0))
}

/// The worker's store, once its database answers; `None` if stopped first.
pub(crate) async fn store(
    cfg: &Config,
    max_connections: u32,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<Store>> {
    let what = format!("the database at {}", crate::setup::redacted_url(&cfg.database_url));
    retrying(&what, limit(cfg), stop, || async move {
        match Store::connect_sized(&cfg.database_url, false, max_connections).await {
            Ok(s) => Attempt::Done(s),
            Err(e) if e.is_transient() => Attempt::Again(crate::chain(&anyhow::Error::new(e))),
            Err(e) => Attempt::Fatal(e.into()),
        }
    })
    .await
}

/// Vultr's answer to the key: `Some(())` once it accepts it; `None` if
/// stopped first. Its refusal, or an answer that is not Vultr's, is one
/// line and exit 2: the adapter's own warnings would repeat it.
pub(crate) async fn account(
    cfg: &Config,
    provider: &VultrClient,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<()>> {
    let url = format!("{}/account", cfg.vultr_url.trim_end_matches('/'));
    let refused = |detail: String| {
        BadInput(format!(
            "preflight: GET {url} failed with the configured key ({}): {detail}; nothing was sent",
            provider.fingerprint().short()
        ))
    };
    let refused = &refused;
    retrying(&format!("GET {url}"), limit(cfg), stop, || async move {
        match provider.failures_reported_by_caller().account_probe().await {
            AccountProbe::Accepted(_) => Attempt::Done(()),
            AccountProbe::KeyRefused { status, message } => {
                Attempt::Fatal(refused(format!("Vultr refused the key ({status}: {message})")).into())
            }
            AccountProbe::NotVultr(why) => Attempt::Fatal(refused(format!("not Vultr's API: {why}")).into()),
            AccountProbe::Unavailable { status, message } => {
                Attempt::Again(format!("Vultr unavailable, {status}: {message}"))
            }
            AccountProbe::Unreachable(why) => Attempt::Again(format!("no answer: {why}")),
        }
    })
    .await
}
