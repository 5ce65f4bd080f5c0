//! `oduflow client create|update|delete|show|list`.

use crate::cli::{ClientCmd, SpecFlags};
use crate::config::{BadInput, Config};
use crate::output::{print_client, print_clients, print_delete_plan, print_update_plan};
use crate::setup::{now_ms, open};
use anyhow::Result;
use oduflow_engine::operator::{self, Actor};
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
            let checker = match (no_preflight, cfg.api_key.is_some()) {
                (true, _) => None,
                (false, true) => Some(crate::setup::provider(cfg, &store, "client create")?),
                (false, false) => {
                    eprintln!(
                        "note: VULTR_API_KEY is not set, so the spec was not checked against Vultr's catalog; the \
                         worker checks it before the first create"
                    );
                    None
                }
            };
            let actor = actor(cfg, &store).await?;
            let row = operator::client_create(&store, checker.as_deref(), &name, &spec, recover.as_ref(), actor)
                .await
                .map_err(|e| match e {
                    operator::OperatorError::Provider(e) => anyhow::anyhow!(
                        "preflight could not read Vultr's catalog: {e} (use --no-preflight to skip the check)"
                    ),
                    e => e.into(),
                })?;
            print_client(&store, &row, json, false).await
        }
        ClientCmd::Update { name, change, json, dry_run } => update(cfg, &name, *change, json, dry_run).await,
        ClientCmd::Delete { name, json, dry_run } => delete(cfg, &name, json, dry_run).await,
        ClientCmd::Promote { name, by, json } => {
            ClientName::parse(&name)?;
            let store = open(cfg).await?;
            let actor = Actor { by: cfg.by(&by), now_ms: now_ms(&store).await?, attempts_max: cfg.attempts_max };
            let row = operator::client_promote(&store, &name, actor).await?;
            print_client(&store, &row, json, false).await
        }
        ClientCmd::Show { name, json } => {
            ClientName::parse(&name)?;
            let store = open(cfg).await?;
            let row = store.client_get(&name).await?.ok_or_else(|| StoreError::ClientNotFound(name.clone()))?;
            print_client(&store, &row, json, true).await
        }
        ClientCmd::List { select, json } => {
            let select = selection(select)?;
            let store = open(cfg).await?;
            let now = now_ms(&store).await?;
            let rows: Vec<_> = store.client_list().await?.into_iter().filter(|c| select.matches(c, now)).collect();
            print_clients(&rows, json)
        }
    }
}

/// `client update`, or with `--dry-run` its plan: field by field what
/// would change and what each change does, refused as the update is.
async fn update(cfg: &Config, name: &str, change: crate::cli::UpdateFlags, json: bool, dry_run: bool) -> Result<()> {
    ClientName::parse(name)?;
    let update = update_of(change);
    let store = open(cfg).await?;
    // With a key, a new plan is checked against Vultr's upgrades
    // (nothing else of an update asks Vultr anything).
    let checker = match update.plan.is_some() && cfg.api_key.is_some() {
        true => Some(crate::setup::provider(cfg, &store, "client update")?),
        false => None,
    };
    let note_unchecked = |e: &str| {
        eprintln!(
            "note: the plan was not checked against Vultr's list of upgrades ({e}); the worker checks it before \
             sending"
        )
    };
    if dry_run {
        let plan = operator::client_update_plan(&store, checker.as_deref(), name, &update).await?;
        if let Some(e) = &plan.plan_unchecked {
            note_unchecked(e);
        }
        return print_update_plan(&plan, json);
    }
    let actor = actor(cfg, &store).await?;
    let operator::Updated { row, plan_unchecked } =
        operator::client_update(&store, checker.as_deref(), name, &update, actor).await?;
    if let Some(e) = &plan_unchecked {
        note_unchecked(e);
    }
    if row.infra.status == ClientStatus::Blocked && !json {
        eprintln!(
            "note: {name} is blocked ({}): the new spec is recorded; `oduflow reconcile {name}` applies it",
            row.infra.blocked_reason.map_or("", |r| r.as_str())
        );
    }
    print_client(&store, &row, json, false).await
}

/// `client delete`, or with `--dry-run` what it would delete.
async fn delete(cfg: &Config, name: &str, json: bool, dry_run: bool) -> Result<()> {
    ClientName::parse(name)?;
    let store = open(cfg).await?;
    if dry_run {
        return print_delete_plan(&operator::client_delete_plan(&store, name).await?, json);
    }
    let row = operator::client_delete(&store, name, actor(cfg, &store).await?).await?;
    print_client(&store, &row, json, false).await
}

/// The selection flags, checked: a word that names no status, reason or
/// target, a bad pattern or duration is refused before anything is read.
pub(crate) fn selection(f: crate::cli::SelectFlags) -> Result<oduflow_store::ClientSelect> {
    fn word<T: Copy + std::fmt::Display>(
        what: &str,
        v: Option<String>,
        parse: fn(&str) -> Option<T>,
        all: &[T],
    ) -> Result<Option<T>> {
        let Some(v) = v else { return Ok(None) };
        let all: Vec<String> = all.iter().map(T::to_string).collect();
        Ok(Some(parse(&v).ok_or_else(|| BadInput(format!("{what} {v:?} is none of: {}", all.join(", "))))?))
    }
    let typed = oduflow_store::ClientSelect {
        status: word("status", f.status, ClientStatus::parse, ClientStatus::ALL)?,
        blocked_reason: word("reason", f.reason, BlockedReason::parse, BlockedReason::ALL)?,
        target: word("target", f.target, Target::parse, Target::ALL)?,
        ..Default::default()
    };
    Ok(typed.with_words(f.region.as_deref(), f.name.as_deref(), f.unchanged_for.as_deref()).map_err(BadInput)?)
}

/// The flags of `client update`, as the change they ask for.
fn update_of(f: crate::cli::UpdateFlags) -> oduflow_model::update::SpecUpdate {
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
    } = f;
    let image = [
        os_id.map(ImageSource::Os),
        snapshot.map(ImageSource::Snapshot),
        app.map(ImageSource::App),
        image.map(ImageSource::Image),
    ]
    .into_iter()
    .flatten()
    .next();
    oduflow_model::update::SpecUpdate {
        region,
        plan,
        volume_gb,
        tags: if no_tags { Some(vec![]) } else { (!tags.is_empty()).then_some(tags) },
        firewall_group,
        dns_name,
        image,
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

/// The operator at this terminal, now by the database's clock.
async fn actor<'a>(cfg: &'a Config, store: &oduflow_store::Store) -> Result<Actor<'a>> {
    Ok(Actor { by: &cfg.actor, now_ms: now_ms(store).await?, attempts_max: cfg.attempts_max })
}
