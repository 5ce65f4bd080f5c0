//! What commands share: the clock, the store, the provider with its rate
//! budget, the identity adapters, and the restore check.

use crate::config::{BadInput, Config};
use crate::lineage;
use anyhow::Result;
use oduflow_store::Store;
use std::sync::Arc;

/// The database's clock now (docs/protocol.md §4.1), for a command that
/// writes times once: they order with the workers' times whatever this
/// host's clock says.
pub(crate) async fn now_ms(store: &Store) -> Result<i64> {
    Ok(oduflow_engine::DbClock::now_once(store).await?)
}

pub(crate) async fn open(cfg: &Config) -> Result<Store> {
    Ok(Store::connect(&cfg.database_url, false).await?)
}

/// A database URL fit to print: any password in it replaced by `***`.
pub(crate) fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    match path {
        Some(p) => format!("{scheme}://{authority}/{p}"),
        None => format!("{scheme}://{authority}"),
    }
}

/// This host's memory of the database compared with it: a copy older than
/// one seen here declares a restore, which the operations then refuse to
/// act through (`oduflow_engine::operator::refuse_if_restored`).
pub(crate) async fn compare_lineage(store: &Store) -> Result<()> {
    lineage::check(store, now_ms(store).await?).await?;
    Ok(())
}

/// The provider the worker drives: Vultr (or `oduflow sim`) at
/// `ODUFLOW_VULTR_URL`, its requests taking their slots from the rate group's
/// budget in the database, shared with every other process of the group.
/// `role` is the command (`reconcile`, `credentials rotate`, `worker`): a
/// missing key is refused naming it, and it names this process in the
/// budget's metrics.
pub(crate) fn provider(cfg: &Config, store: &Store, role: &str) -> Result<Arc<oduflow_vultr::VultrClient>> {
    check_scheme(cfg)?;
    let vc = vultr_config(cfg, cfg.api_key(role)?.clone())?;
    provider_with(cfg, vc, store, role)
}

/// Refuses a base URL whose scheme is not https (or http, for a local
/// simulator).
pub(crate) fn check_scheme(cfg: &Config) -> Result<()> {
    let scheme = cfg.vultr_url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("https" | "http")) {
        return Err(BadInput(format!(
            "ODUFLOW_VULTR_URL {:?}: the scheme must be https (or http for a local simulator)",
            cfg.vultr_url
        ))
        .into());
    }
    Ok(())
}

/// The adapter's settings from the configuration, with `key`.
pub(crate) fn vultr_config(cfg: &Config, key: secrecy::SecretString) -> Result<oduflow_vultr::VultrConfig> {
    check_scheme(cfg)?;
    Ok(oduflow_vultr::VultrConfig {
        base_url: cfg.vultr_url.clone(),
        rate_per_sec: cfg.rate_per_sec,
        per_page: cfg.per_page,
        request_timeout_ms: cfg.request_timeout_ms,
        root_password: oduflow_vultr::RootPassword(
            cfg.root_password_command
                .clone()
                .map(|argv| Arc::new(PasswordCommand { argv }) as Arc<dyn oduflow_vultr::RootPasswordSink>),
        ),
        ..oduflow_vultr::VultrConfig::new(key)
    })
}

/// A client with these settings, its requests taking their slots from the
/// rate group's budget in `store`.
pub(crate) fn provider_with(
    cfg: &Config,
    vc: oduflow_vultr::VultrConfig,
    store: &Store,
    role: &str,
) -> Result<Arc<oduflow_vultr::VultrClient>> {
    let budget =
        oduflow_store::SharedBudget::new(store.clone(), &cfg.rate_group, &process_name(role)).map_err(BadInput)?;
    Ok(Arc::new(oduflow_vultr::VultrClient::with_budget(vc, Arc::new(budget)).map_err(|e| BadInput(e.to_string()))?))
}

/// How long the root password command may run before it is killed.
const PASSWORD_COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `root_password_command`: run once per new VM, the password on its
/// standard input (one line), `ODUFLOW_LABEL` and `ODUFLOW_INSTANCE_ID` in
/// its environment, its output discarded. It runs beside the worker, so a
/// slow one never delays the receipt; its exit status is logged, never the
/// password.
struct PasswordCommand {
    argv: Vec<String>,
}

impl oduflow_vultr::RootPasswordSink for PasswordCommand {
    fn take(&self, label: &oduflow_model::Label, id: &oduflow_model::VultrInstanceId, password: secrecy::SecretString) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(instance = %id, "root password dropped: no runtime to run root_password_command");
            return;
        };
        let (argv, label, id) = (self.argv.clone(), label.to_string(), id.to_string());
        rt.spawn(async move {
            let outcome = tokio::time::timeout(PASSWORD_COMMAND_TIMEOUT, hand_over(&argv, &label, &id, password)).await;
            match outcome {
                Ok(Ok(status)) if status.success() => tracing::info!(instance = %id, "root password handed to root_password_command"),
                Ok(Ok(status)) => tracing::warn!(instance = %id, %status, "root_password_command failed; the password is gone"),
                Ok(Err(e)) => tracing::warn!(instance = %id, error = %e, "root_password_command could not run; the password is gone"),
                Err(_) => tracing::warn!(instance = %id, "root_password_command ran past 30 s and was killed; the password is gone"),
            }
        });
    }
}

async fn hand_over(
    argv: &[String],
    label: &str,
    id: &str,
    password: secrecy::SecretString,
) -> std::io::Result<std::process::ExitStatus> {
    use secrecy::ExposeSecret;
    use tokio::io::AsyncWriteExt;
    // A cleared environment plus the allow-list: neither the API key nor the
    // database URL reaches the command.
    let mut child = oduflow_engine::command_adapter::child_command(&argv[0])
        .args(&argv[1..])
        .env("ODUFLOW_LABEL", label)
        .env("ODUFLOW_INSTANCE_ID", id)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(password.expose_secret().as_bytes()).await?;
        stdin.write_all(b"\n").await?;
    }
    child.wait().await
}

/// `<host>/<role>-<pid>` (`host-a/credentials-rotate-4242`): how this
/// process is named in the rate budget's metrics.
pub(crate) fn process_name(role: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}/{}-{}", role.replace(' ', "-"), std::process::id())
}

/// The DNS adapter of `[dns] domain`, for an operator's action outside a run
/// (the inventory's zone listing, an orphan record's deletion, settling a
/// client's DNS block); `None` without one.
pub(crate) fn dns_adapter(
    cfg: &Config,
    vultr: &oduflow_vultr::VultrClient,
) -> Option<oduflow_vultr::dns_adapter::DnsAdapter> {
    cfg.dns.as_ref().map(|d| oduflow_vultr::dns_adapter::DnsAdapter::new(vultr.clone(), d.domain.clone(), d.ttl))
}

/// The configured identity adapters, DNS first.
/// `clock`: the process's database clock, on which the DNS adapter records
/// and compares its times.
pub(crate) fn identity_adapters(
    cfg: &Config,
    vultr: &oduflow_vultr::VultrClient,
    clock: &oduflow_engine::SharedClock,
) -> Result<Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>>> {
    let mut out: Vec<Arc<dyn oduflow_model::identity::IdentityAdapter>> = vec![];
    if let Some(dns) = dns_adapter(cfg, vultr) {
        let clock = clock.clone();
        out.push(Arc::new(dns.with_clock(Arc::new(move || clock.now_ms()))));
    }
    for a in &cfg.adapters {
        out.push(Arc::new(oduflow_engine::command_adapter::CommandAdapter::new(a.clone()).map_err(BadInput)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_print() {
        use super::redacted_url;
        assert_eq!(
            redacted_url("postgres://u:s3cret@db:5432/x?sslmode=require"),
            "postgres://u:***@db:5432/x?sslmode=require"
        );
        assert_eq!(redacted_url("postgres://u@db/x"), "postgres://u@db/x");
        assert_eq!(redacted_url("sqlite:///var/lib/oduflow/o.db"), "sqlite:///var/lib/oduflow/o.db");
        assert_eq!(redacted_url("postgres://u:p@ss@db/x"), "postgres://u:***@db/x");
    }
}
