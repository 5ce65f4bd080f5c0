//! `oduflow serve` (HTTP API, dashboard, metrics) and `oduflow token`
//! (bearer tokens for it). The server itself is `oduflow_server`; this is
//! glue: configuration, the provider for operator actions, Ctrl-C.

use crate::config::{BadInput, Config};
use crate::output::outln;
use anyhow::Result;
use clap::{Args, Subcommand};
use oduflow_engine::{Clock, SystemClock};
use oduflow_model::time::rfc3339;
use std::net::SocketAddr;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on. Keep it on loopback unless a TLS proxy is in
    /// front: bearer tokens travel in every request.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
}

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Create a token and print it once; only its SHA-256 is stored.
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Every token (names and dates, never the tokens).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke the live token with this name; it stops working at once.
    Revoke { name: String },
}

/// How often `serve` compares the database's high-water mark with this
/// host's memory of it (a worker does the same).
const RESTORE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

pub async fn serve(cfg: &Config, args: ServeArgs) -> Result<()> {
    let store = crate::setup::open(cfg).await?;
    // Operator actions (reconcile, adopt) ask the provider, so the key is
    // needed here as it is for `oduflow reconcile`.
    let provider = crate::setup::provider(cfg, &store, "serve")?;
    // This host compares the database with its memory of it too, at start
    // and every few seconds, so a restored copy is caught (and the API's
    // provider actions refuse) even where no worker runs.
    crate::lineage::check(&store, SystemClock.now_ms()).await?;
    let watch_store = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(RESTORE_CHECK_INTERVAL).await;
        loop {
            if let Err(e) = crate::lineage::check(&watch_store, SystemClock.now_ms()).await {
                tracing::warn!(error = %e, "restore check failed");
            }
            tokio::time::sleep(RESTORE_CHECK_INTERVAL).await;
        }
    });
    let state = oduflow_server::AppState::new(store, provider, cfg.attempts_max)
        .with_profiles(cfg.profiles.clone(), cfg.spec_defaults.clone());
    eprintln!("oduflow serve: listening on http://{}/ (API under /api/v1, /metrics, /openapi.json)", args.listen);
    oduflow_server::serve(state, args.listen, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

pub async fn token(cfg: &Config, cmd: TokenCmd) -> Result<()> {
    let now_ms = SystemClock.now_ms();
    match cmd {
        TokenCmd::Create { name, json } => {
            oduflow_server::auth::token_name_check(&name).map_err(BadInput)?;
            let store = crate::setup::open(cfg).await?;
            let token = oduflow_server::auth::token_generate();
            let row = store.api_token_create(&name, &oduflow_server::auth::token_sha256(&token), now_ms).await?;
            if json {
                outln!("{}", serde_json::json!({ "name": row.name, "id": row.id, "token": token }))?;
            } else {
                eprintln!("token {} created; it is shown only now, store it safely:", row.name);
                outln!("{token}")?;
            }
        }
        TokenCmd::List { json } => {
            let store = crate::setup::open(cfg).await?;
            let rows = store.api_token_list().await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&rows)?)?;
            } else {
                let cells: Vec<[String; 3]> = rows
                    .into_iter()
                    .map(|r| {
                        let revoked = r.revoked_ms.map_or_else(|| "-".to_owned(), rfc3339);
                        [r.name, rfc3339(r.created_ms), revoked]
                    })
                    .collect();
                crate::output::print_table(["NAME", "CREATED", "REVOKED"], &cells)?;
            }
        }
        TokenCmd::Revoke { name } => {
            oduflow_server::auth::token_name_check(&name).map_err(BadInput)?;
            let store = crate::setup::open(cfg).await?;
            store.api_token_revoke(&name, now_ms).await?;
            outln!("token {name} revoked")?;
        }
    }
    Ok(())
}
