//! `oduflow client create|update|delete|show|list`.

use crate::cli::{ClientCmd, SpecFlags};
use crate::config::{BadInput, Config};
use crate::output::{print_client, print_clients};
use crate::setup::{now_ms, open};
use anyhow::Result;
use oduflow_model::*;
use oduflow_store::StoreError;

pub async fn run(cfg: &Config, c: ClientCmd) -> Result<()> {
    match c {
        ClientCmd::Create { name, spec, no_preflight, recover, json } => {
            // Validate everything before opening the database.
            let name = ClientName::parse(&name)?;
            let recover = recover.map(|id| ClientId::parse(&id)).transpose().map_err(BadInput)?;
            let spec = resolve(cfg, &name, *spec)?;
            let store = open(cfg).await?;
            if !no_preflight {
                preflight(cfg, &store, &spec).await?;
            }
            let row =
                store.client_create_as(&name, &spec, recover.as_ref(), now_ms(&store).await?, cfg.attempts_max).await?;
            print_client(&store, &row, json, false).await
        }
        ClientCmd::Update { name, change, json } => {
            ClientName::parse(&name)?;
            let crate::cli::UpdateFlags {
                region,
                plan,
                volume_gb,
                tags,
                no_tags,
                firewall_group,
                dns_name,
                os_id,
                snapshot,
                app,
                image,
            } = *change;
            let image = [
                os_id.map(|n| format!("--os-id {n}")),
                snapshot.map(|s| format!("--snapshot {s}")),
                app.map(|n| format!("--app {n}")),
                image.map(|i| format!("--image {i}")),
            ]
            .into_iter()
            .flatten()
            .next();
            let update = oduflow_model::update::SpecUpdate {
                region,
                plan,
                volume_gb,
                tags: if no_tags { Some(vec![]) } else { (!tags.is_empty()).then_some(tags) },
                firewall_group,
                dns_name,
                image,
            };
            let store = open(cfg).await?;
            if let Some(plan) = &update.plan {
                plan_check(cfg, &store, &name, plan).await?;
            }
            let row = store.client_update(&name, &update, now_ms(&store).await?, cfg.attempts_max).await?;
            if row.infra.status == ClientStatus::Blocked && !json {
                eprintln!(
                    "note: {name} is blocked ({}): the new spec is recorded; `oduflow reconcile {name}` applies it",
                    row.infra.blocked_reason.map_or("", |r| r.as_str())
                );
            }
            print_client(&store, &row, json, false).await
        }
        ClientCmd::Delete { name, json } => {
            ClientName::parse(&name)?;
            let store = open(cfg).await?;
            let row = store.client_delete(&name, now_ms(&store).await?, cfg.attempts_max).await?;
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

/// The flags over the profile, validated into a spec.
fn resolve(cfg: &Config, name: &ClientName, f: SpecFlags) -> Result<ClientSpec> {
    let user_data = match &f.user_data {
        None => None,
        Some(path) => Some(crate::config::read_user_data(path).map_err(BadInput)?),
    };
    let list = |v: Vec<String>| (!v.is_empty()).then_some(v);
    let flags = SpecInput {
        region: f.region,
        plan: f.plan,
        os_id: f.os_id,
        snapshot_id: f.snapshot,
        app_id: f.app,
        image_id: f.image,
        volume_gb: f.volume_gb,
        volume_type: f.volume_type,
        ssh_keys: list(f.ssh_keys),
        user_data,
        hostname: f.hostname,
        tags: list(f.tags),
        firewall_group: f.firewall_group,
        ipv6: f.ipv6,
        vpcs: list(f.vpcs),
        backups: f.backups,
        dns_name: f.dns_name,
    };
    Ok(cfg.spec_input(f.profile.as_deref(), flags)?.resolve(name, &cfg.spec_defaults)?)
}

/// With a key configured and the client's VM recorded: a plan Vultr does
/// not list among its upgrades is bad input (exit code 2), and nothing is
/// stored. A failed read only says so: the worker checks again before it
/// sends anything.
async fn plan_check(cfg: &Config, store: &oduflow_store::Store, name: &str, plan: &str) -> Result<()> {
    if cfg.api_key.is_none() {
        return Ok(());
    }
    let provider = crate::setup::provider(cfg, store, "client update")?;
    match oduflow_engine::operator::plan_refusal(store, provider.as_ref(), name, plan).await {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(BadInput(format!("{why}; nothing was stored")).into()),
        Err(oduflow_engine::operator::OperatorError::Provider(e)) => {
            eprintln!(
                "note: the plan was not checked against Vultr's list of upgrades ({e}); the worker checks it before sending"
            );
            Ok(())
        }
        Err(oduflow_engine::operator::OperatorError::Store(e)) => Err(e.into()),
        Err(e) => Err(e.into()),
    }
}

/// The worker's preflight, made at once when a key is configured: a spec
/// the catalog refuses is bad input (exit code 2), and nothing is stored.
async fn preflight(cfg: &Config, store: &oduflow_store::Store, spec: &ClientSpec) -> Result<()> {
    if cfg.api_key.is_none() {
        eprintln!(
            "note: VULTR_API_KEY is not set, so the spec was not checked against Vultr's catalog; the worker checks it before the first create"
        );
        return Ok(());
    }
    let provider = crate::setup::provider(cfg, store, "client create")?;
    let catalog = provider.catalog_read(&spec.region).await.map_err(|e| {
        anyhow::anyhow!("preflight could not read Vultr's catalog: {e} (use --no-preflight to skip the check)")
    })?;
    let problems = catalog.problems(spec);
    if !problems.is_empty() {
        return Err(BadInput(format!("preflight: {}; nothing was stored", problems.join("; "))).into());
    }
    Ok(())
}
