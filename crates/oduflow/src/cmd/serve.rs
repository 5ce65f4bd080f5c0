//! `oduflow serve` (HTTP API, dashboard, metrics) and `oduflow token`
//! (bearer tokens for it). The server itself is `oduflow_server`; this is
//! glue: configuration, the provider for operator actions, Ctrl-C.

use crate::config::{BadInput, Config};
use crate::output::outln;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use oduflow_model::time::rfc3339;
use std::net::SocketAddr;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on. Keep it on loopback unless a TLS proxy is in
    /// front: bearer tokens travel in every request.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Mark the dashboard's cookies Secure on every request (behind a TLS
    /// proxy that does not send X-Forwarded-Proto).
    #[arg(long)]
    pub secure_cookies: bool,
}

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Create a token and print it once; only its SHA-256 is stored.
    Create {
        name: String,
        /// What it may do: read (every GET, the dashboard), operate (also
        /// create, update, delete, reconcile, import, promote) or admin
        /// (also adopt, abandon, orphans, the queue, the inventory, the
        /// key's rotation).
        #[arg(long, default_value = "read", value_parser = ["read", "operate", "admin"])]
        scope: String,
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
    // First, as in `worker`: a signal any time after start (a supervisor
    // stopping it as soon as it said it listens) stops it gracefully.
    let stop = crate::signals::install("serve")?;
    let store = crate::setup::open(cfg).await?;
    // Operator actions (reconcile, adopt, the inventory, a key rotation) ask
    // the provider and need the key; without it the server is read-only:
    // the dashboard, every read and /metrics, and a 409 `read_only` for any
    // action.
    let provider = match &cfg.api_key {
        Some(_) => Some(crate::setup::provider(cfg, &store, "serve")?),
        None => None,
    };
    // This host compares the database with its memory of it too, at start
    // and every few seconds, so a restored copy is caught (and the API's
    // provider actions refuse) even where no worker runs.
    // The database's clock (docs/protocol.md §4.1): the API's writes order
    // with the workers' whatever this host's clock says.
    let clock: oduflow_engine::SharedClock = oduflow_engine::DbClock::start(&store).await?;
    crate::lineage::check(&store, clock.now_ms()).await?;
    // Bound before anything says it listens: a busy address is one error
    // line, exit 1, and nothing else printed.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("oduflow serve: cannot listen on {}", args.listen))?;
    let (watch_store, watch_clock) = (store.clone(), clock.clone());
    tokio::spawn(async move {
        tokio::time::sleep(RESTORE_CHECK_INTERVAL).await;
        loop {
            if let Err(e) = crate::lineage::check(&watch_store, watch_clock.now_ms()).await {
                tracing::warn!(error = %e, "restore check failed");
            }
            tokio::time::sleep(RESTORE_CHECK_INTERVAL).await;
        }
    });
    let state = match &provider {
        Some(p) => oduflow_server::AppState::new(store, p.clone(), cfg.attempts_max)
            .with_listing_settle_ms(cfg.listing_settle_ms)
            .with_dns(cfg.dns.as_ref().map(|d| (d.domain.clone(), d.ttl))),
        None => oduflow_server::AppState::read_only(store, cfg.attempts_max),
    }
    .with_shared_clock(clock)
    .with_secure_cookies(args.secure_cookies)
    .with_profiles(cfg.profiles.clone(), cfg.spec_defaults.clone());
    let mode = match &provider {
        Some(p) => format!("key {}, rate group {}", p.fingerprint().short(), p.rate_group()),
        None => "READ-ONLY: VULTR_API_KEY is not set, actions answer 409 read_only".to_owned(),
    };
    crate::logs::say(&format!(
        "oduflow serve: listening on http://{}/ (API under /api/v1, /metrics, /openapi.json); database {}; {mode}",
        listener.local_addr()?,
        crate::setup::redacted_url(&cfg.database_url),
    ));
    oduflow_server::serve_on(state, listener, crate::signals::stopped(stop)).await?;
    if let Some(p) = provider {
        p.flush_budget().await;
    }
    Ok(())
}

pub async fn token(cfg: &Config, cmd: TokenCmd) -> Result<()> {
    match cmd {
        TokenCmd::Create { name, scope, json } => {
            oduflow_server::auth::token_name_check(&name).map_err(BadInput)?;
            let scope = oduflow_store::TokenScope::parse(&scope).map_err(BadInput)?;
            let store = crate::setup::open(cfg).await?;
            let token = oduflow_server::auth::token_generate();
            let row = store
                .api_token_create(
                    &name,
                    &oduflow_server::auth::token_sha256(&token),
                    scope,
                    &cfg.actor,
                    crate::setup::now_ms(&store).await?,
                )
                .await?;
            if json {
                outln!(
                    "{}",
                    serde_json::json!({ "name": row.name, "id": row.id, "scope": row.scope, "token": token })
                )?;
            } else {
                eprintln!("token {} ({}) created; it is shown only now, store it safely:", row.name, row.scope);
                outln!("{token}")?;
            }
        }
        TokenCmd::List { json } => {
            let store = crate::setup::open(cfg).await?;
            let rows = store.api_token_list().await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&rows)?)?;
            } else {
                let cells: Vec<[String; 4]> = rows
                    .into_iter()
                    .map(|r| {
                        let revoked = r.revoked_ms.map_or_else(|| "-".to_owned(), rfc3339);
                        [r.name, r.scope.to_string(), rfc3339(r.created_ms), revoked]
                    })
                    .collect();
                crate::output::print_table(["NAME", "SCOPE", "CREATED", "REVOKED"], &cells)?;
            }
        }
        TokenCmd::Revoke { name } => {
            oduflow_server::auth::token_name_check(&name).map_err(BadInput)?;
            let store = crate::setup::open(cfg).await?;
            store.api_token_revoke(&name, &cfg.actor, crate::setup::now_ms(&store).await?).await?;
            outln!("token {name} revoked")?;
        }
    }
    Ok(())
}
