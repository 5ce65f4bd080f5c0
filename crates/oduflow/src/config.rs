//! Configuration: a TOML file plus environment, the environment winning.
//! The API key is read only from the environment and held as a secret; a key
//! in the file is refused, because files get copied, committed and backed up.

use anyhow::{Result, bail};
use oduflow_engine::EngineConfig;
use secrecy::SecretString;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "oduflow.toml";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    database_url: Option<String>,
    vultr_url: Option<String>,
    // Numbers are read as TOML's own integers and checked against their
    // range here (`Num`), so a refusal names the setting.
    poll_interval_ms: Option<i64>,
    observations_max: Option<i64>,
    rate_per_sec: Option<i64>,
    rate_group: Option<String>,
    actor: Option<String>,
    per_page: Option<i64>,
    request_timeout_ms: Option<i64>,
    concurrency: Option<i64>,
    /// No longer used; its presence is named at start (`deprecated`).
    lease_ms: Option<toml::Value>,
    shutdown_grace_ms: Option<i64>,
    startup_retry_ms: Option<i64>,
    attempts_max: Option<i64>,
    ready_wait_ms: Option<i64>,
    resize_interval_ms: Option<i64>,
    verify_interval_ms: Option<i64>,
    bulk_view: Option<bool>,
    listing_settle_ms: Option<i64>,
    /// Refused with a clear message if present.
    api_key: Option<toml::Value>,
    /// The DNS identity: an A record `<client>.<domain>` for each client.
    dns: Option<DnsConfig>,
    /// Command adapters (`[[adapter]]`) for identities oduflow does not ship.
    #[serde(default)]
    adapter: Vec<oduflow_engine::command_adapter::CommandAdapterConfig>,
    /// The domain a client's default hostname is under (`<client>.<domain>`);
    /// unset: `[dns] domain`, else the bare client name.
    hostname_domain: Option<String>,
    /// Named sets of spec fields (`[profile.NAME]`); `user_data` names a file,
    /// relative to this file's directory.
    #[serde(default)]
    profile: std::collections::BTreeMap<String, oduflow_model::SpecInput>,
    /// A command that receives each new VM's one-time root password on its
    /// standard input, once (argv, no shell). Unset: the password is dropped.
    root_password_command: Option<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    pub domain: String,
    #[serde(default = "default_ttl")]
    pub ttl: i64,
}

fn default_ttl() -> i64 {
    300
}

#[derive(Debug)]
pub struct Config {
    pub database_url: String,
    pub vultr_url: String,
    pub api_key: Option<SecretString>,
    pub poll_interval_ms: i64,
    pub observations_max: i64,
    /// Requests per second for the whole rate group.
    pub rate_per_sec: u32,
    /// The rate budget this process shares: every process using
    /// one database and naming the same group shares one budget. Hosts with
    /// their own public addresses name one group each.
    pub rate_group: String,
    /// Listing page size: Vultr's maximum, so an inventory pass or a label
    /// search over blocks (which Vultr cannot filter) reads fewer pages.
    pub per_page: u32,
    pub request_timeout_ms: u64,
    pub concurrency: usize,
    /// Settings set that no longer do anything, each as one line the
    /// worker logs at start.
    pub deprecated: Vec<String>,
    /// How long a worker told to stop (SIGTERM, SIGINT) lets its runs under
    /// way finish before it cuts them and exits 1. The service units' stop
    /// timeout (`TimeoutStopSec`) must be longer.
    pub shutdown_grace_ms: i64,
    /// How long a starting worker keeps trying a database or a Vultr API
    /// that does not answer yet (`crate::startup`).
    pub startup_retry_ms: i64,
    /// How long a VM may stay short of active/ok (a volume short of active)
    /// before its client blocks `not_ready`; 0: derived from the polling
    /// limit (observations_max x poll_interval_ms x 6).
    pub ready_wait_ms: i64,
    /// How long after a volume's resize was sent its next resize waits
    /// (Vultr refuses one within 60 s).
    pub resize_interval_ms: i64,
    pub verify_interval_ms: i64,
    pub attempts_max: i32,
    /// Watch first provisioning through shared listings (the bulk view); on by
    /// default, `ODUFLOW_BULK_VIEW=false` or `bulk_view = false` turns it off.
    pub bulk_view: bool,
    /// How long after a declared restore the inventory pass (`reconcile
    /// --all`, `POST /api/v1/inventory`) lists: a listing lags a create,
    /// and a block's size lags its resize.
    pub listing_settle_ms: i64,
    pub dns: Option<DnsConfig>,
    pub adapters: Vec<oduflow_engine::command_adapter::CommandAdapterConfig>,
    /// Profiles by name, their user data files read.
    pub profiles: std::collections::BTreeMap<String, oduflow_model::SpecInput>,
    pub spec_defaults: oduflow_model::SpecDefaults,
    pub root_password_command: Option<Vec<String>>,
    /// The bug planted in this process's worker (test builds only): read
    /// once, here, from `ODUFLOW_PLANTED_BUG` (the campaign sets it on the
    /// workers it spawns); the engine and the store carry it from here.
    pub planted: oduflow_engine::PlantedBug,
    /// Who this command's changes are recorded as asked by: the `actor`
    /// setting (`ODUFLOW_ACTOR`, for a service driving the command line),
    /// else `cli:` and the login name.
    pub actor: String,
    /// The key webhook endpoints' signing secrets are derived from
    /// (`ODUFLOW_WEBHOOK_KEY`, never in a file); without it nothing is
    /// delivered.
    pub webhook_key: Option<oduflow_engine::webhook::WebhookKey>,
}

impl Config {
    /// Who asks: `--by` when given, else the actor setting.
    pub fn by<'a>(&'a self, by: &'a Option<String>) -> &'a str {
        by.as_deref().unwrap_or(&self.actor)
    }
}

/// The longest actor name recorded.
pub const ACTOR_LEN_MAX: usize = 128;

/// The actor setting, else `cli:` and the user this runs as.
fn actor(set: Option<String>) -> Result<String> {
    let actor = match set {
        Some(a) => a,
        None => format!("cli:{}", env("USER").or_else(|| env("LOGNAME")).unwrap_or_else(|| "unknown".into())),
    };
    if actor.trim().is_empty() || actor.chars().count() > ACTOR_LEN_MAX || actor.chars().any(char::is_control) {
        bail!(BadInput(format!(
            "actor {actor:?} (ODUFLOW_ACTOR, actor in the config file): 1 to {ACTOR_LEN_MAX} characters, no control characters"
        )));
    }
    Ok(actor)
}

/// Vultr's documented limit, per source address.
const VULTR_RATE_LIMIT: u32 = 30;

/// A configuration problem is bad input: exit code 2, nothing written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// A boolean setting from the environment: true/false (also 1/0, on/off).
fn env_bool(name: &str) -> Result<Option<bool>> {
    match env(name).map(|v| v.to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) if matches!(v.as_str(), "true" | "1" | "on" | "yes") => Ok(Some(true)),
        Some(v) if matches!(v.as_str(), "false" | "0" | "off" | "no") => Ok(Some(false)),
        Some(v) => bail!(BadInput(format!("{name}={v:?}: use true or false"))),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

const DAY_MS: i64 = 24 * 3600 * 1000;

/// The start-up lines for settings that no longer do anything: `lease_ms`
/// (`ODUFLOW_LEASE_MS`) bounded a SQLite claim, which its lock file holds
/// now for as long as the run lives. Ignored, never refused: a unit file
/// that still sets it keeps working.
fn deprecated(lease_ms: bool) -> Vec<String> {
    let mut v = vec![];
    if lease_ms {
        v.push(
            "ODUFLOW_LEASE_MS (lease_ms in the config file) is ignored: a SQLite claim is held by its lock file for as \
             long as its run lives, and a PostgreSQL claim by its session; remove the setting"
                .to_owned(),
        );
    }
    v
}

/// A numeric setting: its environment variable, its key in the config file,
/// its default and the values it may take. The upper bounds keep the
/// arithmetic made with them (deadlines, backoff, pool sizes) in range.
struct Num {
    env: &'static str,
    key: &'static str,
    default: i64,
    min: i64,
    max: i64,
}

const POLL_INTERVAL_MS: Num = Num {
    env: "ODUFLOW_POLL_INTERVAL_MS",
    key: "poll_interval_ms",
    default: EngineConfig::POLL_INTERVAL_MS_DEFAULT,
    min: 0,
    max: DAY_MS,
};
const OBSERVATIONS_MAX: Num = Num {
    env: "ODUFLOW_OBSERVATIONS_MAX",
    key: "observations_max",
    default: EngineConfig::OBSERVATIONS_MAX_DEFAULT,
    min: 1,
    max: 1_000_000,
};
const RATE_PER_SEC: Num = Num {
    env: "ODUFLOW_RATE_PER_SEC",
    key: "rate_per_sec",
    default: oduflow_vultr::DEFAULT_RATE_PER_SEC as i64,
    min: 1,
    max: 1_000_000,
};
const PER_PAGE: Num = Num {
    env: "ODUFLOW_PER_PAGE",
    key: "per_page",
    default: oduflow_vultr::DEFAULT_PER_PAGE as i64,
    min: 1,
    max: oduflow_vultr::PER_PAGE_MAX as i64,
};
const REQUEST_TIMEOUT_MS: Num =
    Num { env: "ODUFLOW_REQUEST_TIMEOUT_MS", key: "request_timeout_ms", default: 30_000, min: 1, max: DAY_MS };
const CONCURRENCY: Num = Num {
    env: "ODUFLOW_CONCURRENCY",
    key: "concurrency",
    default: EngineConfig::CONCURRENCY_DEFAULT as i64,
    min: 1,
    max: 1024,
};
const SHUTDOWN_GRACE_MS: Num =
    Num { env: "ODUFLOW_SHUTDOWN_GRACE_MS", key: "shutdown_grace_ms", default: 60_000, min: 0, max: 3_600_000 };
const STARTUP_RETRY_MS: Num =
    Num { env: "ODUFLOW_STARTUP_RETRY_MS", key: "startup_retry_ms", default: 300_000, min: 0, max: DAY_MS };
const ATTEMPTS_MAX: Num = Num {
    env: "ODUFLOW_ATTEMPTS_MAX",
    key: "attempts_max",
    default: EngineConfig::ATTEMPTS_MAX_DEFAULT as i64,
    min: 1,
    max: 1_000_000,
};
const LISTING_SETTLE_MS: Num = Num {
    env: "ODUFLOW_LISTING_SETTLE_MS",
    key: "listing_settle_ms",
    default: oduflow_engine::operator::LISTING_SETTLE_MS_DEFAULT,
    min: 0,
    max: 3_600_000,
};
const RESIZE_INTERVAL_MS: Num = Num {
    env: "ODUFLOW_RESIZE_INTERVAL_MS",
    key: "resize_interval_ms",
    default: oduflow_engine::EngineConfig::RESIZE_INTERVAL_MS_DEFAULT,
    min: 0,
    max: DAY_MS,
};
const VERIFY_INTERVAL_MS: Num = Num {
    env: "ODUFLOW_VERIFY_INTERVAL_MS",
    key: "verify_interval_ms",
    default: oduflow_engine::EngineConfig::VERIFY_INTERVAL_MS_DEFAULT,
    min: 0,
    max: DAY_MS,
};
const READY_WAIT_MS: Num =
    Num { env: "ODUFLOW_READY_WAIT_MS", key: "ready_wait_ms", default: 0, min: 0, max: 30 * DAY_MS };

impl Num {
    /// The environment's value, else the file's, else the default; outside
    /// `min..=max` (or not a whole number), one line naming the variable,
    /// the key and the range.
    fn read(&self, file_value: Option<i64>, file: Option<&Path>) -> Result<i64> {
        let (value, given) = match env(self.env) {
            Some(raw) => match raw.trim().parse::<i64>() {
                Ok(v) => (v, format!("{}={raw}", self.env)),
                Err(_) => bail!(BadInput(format!("{}={raw:?} is not a whole number: {}", self.env, self.rule()))),
            },
            None => match file_value {
                Some(v) => {
                    let file = file.map_or_else(|| DEFAULT_CONFIG_FILE.into(), |f| f.display().to_string());
                    (v, format!("{} = {v} in {file}", self.key))
                }
                None => return Ok(self.default),
            },
        };
        if !(self.min..=self.max).contains(&value) {
            bail!(BadInput(format!("{given} is out of range: {}", self.rule())));
        }
        Ok(value)
    }

    fn rule(&self) -> String {
        format!("{} ({} in the config file) must be {} to {}", self.env, self.key, self.min, self.max)
    }
}

impl Config {
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let file = match path {
            Some(p) => Some(p.to_owned()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.exists()),
        };
        let fc: FileConfig = match &file {
            None => FileConfig::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| BadInput(format!("cannot read config file {}: {e}", p.display())))?;
                toml::from_str(&text).map_err(|e| BadInput(toml_error(p, &text, &e)))?
            }
        };
        let dir = file.as_deref().and_then(Path::parent).map(Path::to_owned).unwrap_or_default();
        let profiles = read_profiles(fc.profile, &dir)?;
        if fc.root_password_command.as_ref().is_some_and(|c| c.is_empty() || c[0].is_empty()) {
            bail!(BadInput("root_password_command must name a program: [\"/path/to/program\", \"arg\", ...]".into()));
        }
        if fc.api_key.is_some() {
            bail!(BadInput(
                "config file sets api_key: the API key is a secret and is read only from VULTR_API_KEY".into()
            ));
        }
        let hostname_domain =
            env("ODUFLOW_HOSTNAME_DOMAIN").or(fc.hostname_domain).or_else(|| fc.dns.as_ref().map(|d| d.domain.clone()));
        let cfg = Config {
            database_url: env("ODUFLOW_DATABASE_URL")
                .or(fc.database_url)
                .unwrap_or_else(|| oduflow_store::DEFAULT_DATABASE_URL.into()),
            vultr_url: env("ODUFLOW_VULTR_URL").or(fc.vultr_url).unwrap_or_else(|| "https://api.vultr.com/v2".into()),
            api_key: env("VULTR_API_KEY").map(SecretString::from),
            poll_interval_ms: POLL_INTERVAL_MS.read(fc.poll_interval_ms, file.as_deref())?,
            observations_max: OBSERVATIONS_MAX.read(fc.observations_max, file.as_deref())?,
            rate_per_sec: u32::try_from(RATE_PER_SEC.read(fc.rate_per_sec, file.as_deref())?)?,
            rate_group: env("ODUFLOW_RATE_GROUP")
                .or(fc.rate_group)
                .unwrap_or_else(|| oduflow_model::rate::DEFAULT_RATE_GROUP.into()),
            per_page: u32::try_from(PER_PAGE.read(fc.per_page, file.as_deref())?)?,
            request_timeout_ms: u64::try_from(REQUEST_TIMEOUT_MS.read(fc.request_timeout_ms, file.as_deref())?)?,
            concurrency: usize::try_from(CONCURRENCY.read(fc.concurrency, file.as_deref())?)?,
            deprecated: deprecated(env("ODUFLOW_LEASE_MS").is_some() || fc.lease_ms.is_some()),
            shutdown_grace_ms: SHUTDOWN_GRACE_MS.read(fc.shutdown_grace_ms, file.as_deref())?,
            startup_retry_ms: STARTUP_RETRY_MS.read(fc.startup_retry_ms, file.as_deref())?,
            attempts_max: i32::try_from(ATTEMPTS_MAX.read(fc.attempts_max, file.as_deref())?)?,
            ready_wait_ms: READY_WAIT_MS.read(fc.ready_wait_ms, file.as_deref())?,
            resize_interval_ms: RESIZE_INTERVAL_MS.read(fc.resize_interval_ms, file.as_deref())?,
            verify_interval_ms: VERIFY_INTERVAL_MS.read(fc.verify_interval_ms, file.as_deref())?,
            bulk_view: env_bool("ODUFLOW_BULK_VIEW")?.or(fc.bulk_view).unwrap_or(true),
            listing_settle_ms: LISTING_SETTLE_MS.read(fc.listing_settle_ms, file.as_deref())?,
            dns: match env("ODUFLOW_DNS_DOMAIN") {
                Some(domain) => Some(DnsConfig { domain, ttl: default_ttl() }),
                None => fc.dns,
            },
            spec_defaults: oduflow_model::SpecDefaults { hostname_domain },
            adapters: fc.adapter,
            profiles,
            root_password_command: fc.root_password_command,
            planted: oduflow_engine::PlantedBug::from_env().map_err(BadInput)?,
            actor: actor(env("ODUFLOW_ACTOR").or(fc.actor))?,
            webhook_key: env("ODUFLOW_WEBHOOK_KEY")
                .map(|k| oduflow_engine::webhook::WebhookKey::new(SecretString::from(k)).map_err(BadInput))
                .transpose()?,
        };
        for a in &cfg.adapters {
            oduflow_engine::command_adapter::CommandAdapter::new(a.clone()).map_err(BadInput)?;
        }
        oduflow_model::rate::check_group(&cfg.rate_group)
            .map_err(|e| BadInput(format!("ODUFLOW_RATE_GROUP (rate_group in the config file): {e}")))?;
        // Vultr answers 429 above 30 requests in a second per source address,
        // and a 429 to a create leaves its outcome unknown.
        if cfg.rate_per_sec > VULTR_RATE_LIMIT && cfg.vultr_url.trim_end_matches('/') == "https://api.vultr.com/v2" {
            bail!(BadInput(format!(
                "rate_per_sec {} is above Vultr's limit of {VULTR_RATE_LIMIT} requests per second (per source address, \
                 for the whole rate group): ODUFLOW_RATE_PER_SEC (rate_per_sec in the config file) must be 1 to \
                 {VULTR_RATE_LIMIT} for api.vultr.com",
                cfg.rate_per_sec
            )));
        }
        oduflow_store::Store::check_url(&cfg.database_url).map_err(|e| BadInput(e.to_string()))?;
        Ok(cfg)
    }

    pub fn engine(&self) -> oduflow_engine::EngineConfig {
        oduflow_engine::EngineConfig {
            poll_interval_ms: self.poll_interval_ms,
            observations_max: self.observations_max,
            concurrency: self.concurrency,
            attempts_max: self.attempts_max,
            ready_wait_ms: self.ready_wait_ms,
            resize_interval_ms: self.resize_interval_ms,
            verify_interval_ms: self.verify_interval_ms,
            verify_grace_ms: self.listing_settle_ms,
            bulk_view: self.bulk_view,
            planted: self.planted,
            ..Default::default()
        }
    }

    /// The spec input for `client create`: the profile named (if any) with
    /// `flags` over it.
    pub fn spec_input(
        &self,
        profile: Option<&str>,
        flags: oduflow_model::SpecInput,
    ) -> Result<oduflow_model::SpecInput> {
        oduflow_model::SpecInput::from_profile(&self.profiles, profile, flags)
            .map_err(|e| BadInput(format!("{e}; a profile is a [profile.NAME] table in the config file")).into())
    }

    /// The API key, for `oduflow COMMAND`; without one, bad set-up (exit
    /// code 2) naming the command.
    pub fn api_key(&self, command: &str) -> Result<&SecretString> {
        self.api_key.as_ref().ok_or_else(|| {
            BadInput(format!(
                "oduflow {command} needs the Vultr API key: set VULTR_API_KEY in its environment (it is never read \
                 from a file)"
            ))
            .into()
        })
    }
}

/// A config file TOML refused, in one line: the file, the line and its
/// text (which names the setting), and what is wrong with it.
fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> String {
    let at = match e.span() {
        Some(span) => {
            let start = text[..span.start.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
            let line = text[start..].lines().next().unwrap_or("").trim();
            format!(", line {} ({line})", text[..start].matches('\n').count() + 1)
        }
        None => String::new(),
    };
    format!("config file {}{at}: {}", path.display(), e.message())
}

/// Profiles with their `user_data` file read (relative to `dir`), each
/// checked for a valid name.
fn read_profiles(
    profiles: std::collections::BTreeMap<String, oduflow_model::SpecInput>,
    dir: &Path,
) -> Result<std::collections::BTreeMap<String, oduflow_model::SpecInput>> {
    let mut out = std::collections::BTreeMap::new();
    for (name, mut p) in profiles {
        if oduflow_model::ClientName::parse(&name).is_err() {
            bail!(BadInput(format!("profile name {name:?}: use lowercase letters, digits and hyphens")));
        }
        if let Some(file) = &p.user_data {
            p.user_data = Some(read_user_data(&dir.join(file)).map_err(|e| BadInput(format!("profile {name}: {e}")))?);
        }
        out.insert(name, p);
    }
    Ok(out)
}

/// A user data file's text: UTF-8, at most [`oduflow_model::server::USER_DATA_MAX`]
/// bytes (checked again once its variables are substituted).
pub fn read_user_data(path: &Path) -> std::result::Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("user data file {}: {e}", path.display()))?;
    if meta.len() > oduflow_model::server::USER_DATA_MAX as u64 {
        return Err(format!(
            "user data file {} is {} bytes; at most {} are allowed",
            path.display(),
            meta.len(),
            oduflow_model::server::USER_DATA_MAX
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("user data file {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("user data file {} is not UTF-8 text", path.display()))
}
