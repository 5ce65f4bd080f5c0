//! `oduflow client create|delete|show|list`.

use crate::cli::ClientCmd;
use crate::config::Config;
use crate::output::{print_client, print_clients};
use crate::setup::{now_ms, open};
use anyhow::Result;
use oduflow_model::*;
use oduflow_store::StoreError;

pub async fn run(cfg: &Config, c: ClientCmd) -> Result<()> {
    match c {
        ClientCmd::Create { name, region, plan, os_id, volume_gb, volume_type, json } => {
            // Validate everything before opening the database.
            let name = ClientName::parse(&name)?;
            let spec = ClientSpec::parse(&region, &plan, os_id, volume_gb, &volume_type)?;
            let store = open(cfg).await?;
            let row = store.client_create(&name, &spec, now_ms(), cfg.attempts_max).await?;
            print_client(&store, &row, json, false).await
        }
        ClientCmd::Delete { name, json } => {
            ClientName::parse(&name)?;
            let store = open(cfg).await?;
            let row = store.client_delete(&name, now_ms(), cfg.attempts_max).await?;
            print_client(&store, &row, json, false).await
        }
        ClientCmd::Show { name, json } => {
            ClientName::parse(&name)?;
            let store = open(cfg).await?;
            let row = store.client_get(&name).await?.ok_or_else(|| StoreError::ClientNotFound(name.clone()))?;
            print_client(&store, &row, json, true).await
        }
        ClientCmd::List { json } => {
            let store = open(cfg).await?;
            print_clients(&store.client_list().await?, json)
        }
    }
}
