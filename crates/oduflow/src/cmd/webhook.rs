//! `oduflow webhook add|list|remove|dead|replay`: the endpoints each
//! state change is delivered to (a worker delivers, with
//! `ODUFLOW_WEBHOOK_KEY`). Endpoints are read at every delivery pass, so
//! one added or removed here takes effect without a restart.

use crate::config::{BadInput, Config};
use crate::output::{outln, print_table};
use crate::setup::{now_ms, open};
use anyhow::Result;
use clap::Subcommand;
use oduflow_engine::webhook;
use oduflow_model::EventKind;
use oduflow_model::time::rfc3339;

/// The state changes an endpoint takes unless told otherwise: a client
/// ready, blocked (with its reason), deleted, a change confirmed, an
/// orphan found.
pub const DEFAULT_KINDS: [EventKind; 5] =
    [EventKind::Ready, EventKind::Blocked, EventKind::Deleted, EventKind::ChangeConfirmed, EventKind::OrphanFound];

#[derive(Subcommand)]
pub enum WebhookCmd {
    /// Add an endpoint and print its signing secret once (derived from
    /// ODUFLOW_WEBHOOK_KEY, which the command needs; nothing secret is
    /// stored).
    Add {
        name: String,
        /// Where each event is POSTed: http:// or https://.
        url: String,
        /// An event kind to deliver (repeat the flag); `all` for every
        /// kind. Default: ready, blocked, deleted, change_confirmed,
        /// orphan_found.
        #[arg(long = "kind")]
        kinds: Vec<String>,
        /// Deliver every event from the first one, not only those written
        /// from now on.
        #[arg(long)]
        from_start: bool,
        #[arg(long)]
        json: bool,
    },
    /// The endpoints, their backlog, failures and dead letters.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove an endpoint: nothing more is delivered to it.
    Remove { name: String },
    /// The events an endpoint refused or could not take in its attempts.
    Dead {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Deliver an endpoint's dead letters again (only the one at
    /// `--position`, if given) at the next delivery pass.
    Replay {
        name: String,
        #[arg(long)]
        position: Option<i64>,
    },
}

pub async fn run(cfg: &Config, c: WebhookCmd) -> Result<()> {
    match c {
        WebhookCmd::Add { name, url, kinds, from_start, json } => add(cfg, &name, &url, kinds, from_start, json).await,
        WebhookCmd::List { json } => {
            let store = open(cfg).await?;
            let (rows, head) = (store.webhook_list().await?, store.feed_head().await?);
            if json {
                return outln!("{}", serde_json::to_string_pretty(&rows)?);
            }
            let cells: Vec<[String; 6]> = rows
                .into_iter()
                .map(|e| {
                    let kinds = if e.kinds.is_empty() { "all".to_owned() } else { e.kinds.join(",") };
                    let error = e.last_error.unwrap_or_else(|| "-".into());
                    [e.name, e.url, kinds, (head - e.cursor).max(0).to_string(), e.dead.to_string(), error]
                })
                .collect();
            print_table(["NAME", "URL", "KINDS", "BEHIND", "DEAD", "LAST ERROR"], &cells)
        }
        WebhookCmd::Remove { name } => {
            oduflow_server::auth::token_name_check(&name).map_err(BadInput)?;
            let store = open(cfg).await?;
            store.webhook_remove(&name, &cfg.actor, now_ms(&store).await?).await?;
            outln!("webhook {name} removed")
        }
        WebhookCmd::Dead { name, json } => {
            let store = open(cfg).await?;
            let e = store.webhook_get(&name).await?.ok_or(oduflow_store::StoreError::WebhookNotFound(name))?;
            let dead = store.webhook_dead_letters(&e.id).await?;
            if json {
                return outln!("{}", serde_json::to_string_pretty(&dead)?);
            }
            let cells: Vec<[String; 4]> = dead
                .into_iter()
                .map(|d| [d.position.to_string(), d.attempts.to_string(), rfc3339(d.dead_ms), d.last_error])
                .collect();
            print_table(["POSITION", "ATTEMPTS", "DEAD SINCE", "LAST ERROR"], &cells)
        }
        WebhookCmd::Replay { name, position } => {
            let store = open(cfg).await?;
            let n = store.webhook_replay(&name, position, &cfg.actor, now_ms(&store).await?).await?;
            outln!("{n} dead letter(s) of {name} to deliver again at the next pass")
        }
    }
}

async fn add(cfg: &Config, name: &str, url: &str, kinds: Vec<String>, from_start: bool, json: bool) -> Result<()> {
    oduflow_server::auth::token_name_check(name).map_err(BadInput)?;
    webhook::url_check(url).map_err(BadInput)?;
    let kinds = match kinds.as_slice() {
        [] => DEFAULT_KINDS.iter().map(|k| k.as_str().to_owned()).collect(),
        [all] if all == "all" => vec![],
        _ => kinds,
    };
    webhook::kinds_check(&kinds).map_err(BadInput)?;
    let Some(key) = &cfg.webhook_key else {
        anyhow::bail!(BadInput(
            "webhook add needs ODUFLOW_WEBHOOK_KEY (at least 32 characters): the endpoint's secret is derived from it"
                .into()
        ));
    };
    let store = open(cfg).await?;
    let cursor = if from_start { 0 } else { store.feed_after(0, 1).await?.head };
    let row = store.webhook_add(name, url, &kinds, cursor, &cfg.actor, now_ms(&store).await?).await?;
    let secret = key.secret_for(&row.id);
    if json {
        return outln!(
            "{}",
            serde_json::json!({ "name": row.name, "id": row.id, "url": row.url, "kinds": row.kinds, "secret": secret })
        );
    }
    eprintln!("webhook {name} added; its signing secret is shown only now, give it to the receiver:");
    outln!("{secret}")
}
