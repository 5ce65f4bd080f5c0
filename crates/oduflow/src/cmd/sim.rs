//! `oduflow sim`: the Vultr API simulator as a server, for `oduflow worker`
//! runs without a cloud account (point `ODUFLOW_VULTR_URL` at it).

use crate::config::{BadInput, Config};
use anyhow::Result;
use oduflow_sim::{Faults, SimConfig};

#[derive(clap::Args)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: std::net::SocketAddr,
    /// Seed for the fault draws and generated ids.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Probability that a request is applied, then its connection dropped.
    #[arg(long, default_value_t = 0.0)]
    lost_drop: f64,
    /// Probability that a request is applied, then answered 500.
    #[arg(long, default_value_t = 0.0)]
    lost_5xx: f64,
    /// Probability that a request is applied, then its answer stalls.
    #[arg(long, default_value_t = 0.0)]
    lost_stall: f64,
    /// Probability of a 500 without applying.
    #[arg(long, default_value_t = 0.0)]
    error_5xx: f64,
    /// Probability that a burst of 429s starts.
    #[arg(long, default_value_t = 0.0)]
    burst_429: f64,
    /// Requests per second above which the simulator answers 429.
    #[arg(long, default_value_t = 30)]
    rate: u32,
    /// Milliseconds a new instance stays pending (and as long again installing).
    #[arg(long, default_value_t = 2_000)]
    pending_ms: u64,
    /// Milliseconds after a create during which GET answers 404.
    #[arg(long, default_value_t = 1_000)]
    get_404_window_ms: u64,
    /// Milliseconds listings lag behind creates and deletes.
    #[arg(long, default_value_t = 1_000)]
    list_lag_ms: u64,
    /// A file of more API keys the simulator accepts for the same account,
    /// one a line (`#` starts a comment): to rehearse `oduflow credentials
    /// rotate`. Keys are read from a file, never from the command line.
    #[arg(long, value_name = "FILE")]
    also_accept_keys: Option<std::path::PathBuf>,
}

/// The keys in `--also-accept-keys`' file, which must name at least one.
fn more_keys(path: &std::path::Path) -> Result<Vec<secrecy::SecretString>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| BadInput(format!("--also-accept-keys {}: {e}", path.display())))?;
    let keys: Vec<secrecy::SecretString> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|k| secrecy::SecretString::from(k.to_owned()))
        .collect();
    if keys.is_empty() {
        return Err(BadInput(format!("--also-accept-keys {}: no key in it (one a line)", path.display())).into());
    }
    Ok(keys)
}

pub async fn run(cfg: &Config, a: SimArgs) -> Result<()> {
    let key = cfg
        .api_key
        .as_ref()
        .ok_or_else(|| BadInput("VULTR_API_KEY must be set: the simulator accepts only that key".into()))?;
    let faults = Faults {
        lost_drop: a.lost_drop,
        lost_5xx: a.lost_5xx,
        lost_stall: a.lost_stall,
        error_5xx: a.error_5xx,
        burst_429: a.burst_429,
        ..Faults::default()
    };
    faults.validate().map_err(BadInput)?;
    let more = a.also_accept_keys.as_deref().map(more_keys).transpose()?.unwrap_or_default();
    let sc = SimConfig {
        seed: a.seed,
        rate_per_sec: a.rate,
        pending_ms: a.pending_ms,
        installing_ms: a.pending_ms,
        get_404_window_ms: a.get_404_window_ms,
        list_lag_ms: a.list_lag_ms,
        api_keys: std::iter::once(key.clone()).chain(more).collect(),
        faults,
        ..SimConfig::default()
    };
    eprintln!(
        "oduflow sim: http://{}/v2 (controls: /sim/ledger, /sim/faults), seed {}, {} API key{}",
        a.listen,
        a.seed,
        sc.api_keys.len(),
        if sc.api_keys.len() == 1 { "" } else { "s" }
    );
    oduflow_sim::serve(sc, a.listen).await?;
    Ok(())
}
