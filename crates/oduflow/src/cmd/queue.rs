//! `oduflow queue status|pause|resume`.

use crate::cli::QueueCmd;
use crate::config::Config;
use crate::output::outln;
use crate::setup::{now_ms, open};
use anyhow::Result;

pub async fn run(cfg: &Config, q: QueueCmd) -> Result<()> {
    let store = open(cfg).await?;
    match q {
        QueueCmd::Status { json } => {
            let s = store.queue_status(now_ms(&store).await?).await?;
            crate::output::print_queue_status(&s, store.restore_pending().await?.as_deref(), json)?;
        }
        QueueCmd::Pause => {
            store.queue_set_paused(true, &cfg.actor, now_ms(&store).await?).await?;
            outln!("queue paused")?;
        }
        QueueCmd::Resume => {
            oduflow_engine::operator::queue_resume(&store, &cfg.actor, now_ms(&store).await?).await?;
            outln!("queue resumed")?;
        }
    }
    Ok(())
}
