//! `oduflow adopt` and `oduflow abandon`: an operator settles a dispatch
//! whose outcome the machine could not decide.

use crate::config::Config;
use crate::output::print_client;
use crate::setup::{now_ms, open, provider, refuse_if_restored};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor};
use oduflow_model::*;

pub async fn adopt(cfg: &Config, name: &str, kind: &str, id: &str, by: &str) -> Result<()> {
    ClientName::parse(name)?;
    let kind = ResourceKind::parse(kind).expect("clap checked");
    let store = open(cfg).await?;
    let provider = provider(cfg, &store, "cli")?;
    refuse_if_restored(&store).await?;
    let actor = Actor { by, now_ms: now_ms(), attempts_max: cfg.attempts_max };
    let row = operator::adopt(&store, provider.as_ref(), name, kind, id, actor).await?;
    print_client(&store, &row, false, false).await
}

pub async fn abandon(cfg: &Config, name: &str, kind: &str, by: &str, reason: &str) -> Result<()> {
    ClientName::parse(name)?;
    let kind = ResourceKind::parse(kind).expect("clap checked");
    let store = open(cfg).await?;
    refuse_if_restored(&store).await?;
    let actor = Actor { by, now_ms: now_ms(), attempts_max: cfg.attempts_max };
    let row = operator::abandon(&store, name, kind, reason, actor).await?;
    print_client(&store, &row, false, false).await
}
