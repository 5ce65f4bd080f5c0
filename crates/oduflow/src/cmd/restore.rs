//! `oduflow restore declare`.

use crate::cli::RestoreCmd;
use crate::config::Config;
use crate::output::outln;
use crate::setup::{now_ms, open};
use anyhow::Result;

pub async fn run(cfg: &Config, c: RestoreCmd) -> Result<()> {
    let RestoreCmd::Declare { reason } = c;
    let store = open(cfg).await?;
    store.restore_declare(&reason, &cfg.actor, now_ms(&store).await?).await?;
    outln!("restore declared: the queue claims nothing until `oduflow reconcile --all` has run")?;
    Ok(())
}
