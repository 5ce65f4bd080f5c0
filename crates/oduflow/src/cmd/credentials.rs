//! `oduflow credentials rotate`.

use crate::cli::CredentialsCmd;
use crate::config::Config;
use crate::setup::{compare_lineage, now_ms, open, provider};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor};
use oduflow_model::provider::Provider;

pub async fn run(cfg: &Config, c: CredentialsCmd) -> Result<()> {
    let CredentialsCmd::Rotate { by, json } = c;
    let store = open(cfg).await?;
    let provider = provider(cfg, &store, "credentials rotate")?;
    compare_lineage(&store).await?;
    let actor = Actor { by: cfg.by(&by), now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
    let done = operator::credentials_rotate(&store, provider.as_ref(), actor).await?;
    crate::output::print_rotation(done, &provider.key_fingerprint(), json)
}
