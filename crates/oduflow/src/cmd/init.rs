//! `oduflow init`: create or migrate the database.

use crate::config::Config;
use crate::output::outln;
use anyhow::Result;
use oduflow_store::Store;

pub async fn run(cfg: &Config) -> Result<()> {
    let store = Store::connect(&cfg.database_url, true).await?;
    store.migrate().await?;
    store.lineage().await?;
    outln!("database ready: {}", oduflow_store::redact_url(&cfg.database_url))?;
    Ok(())
}
