//! `oduflow check`: a preflight. One line per check, in the order the
//! worker depends on them: the database (reachable, at this binary's
//! schema), the base URL (answering as Vultr), the key (accepted), the rate
//! group's budget, the restore state, the adapters' commands, the root
//! password command, the DNS zone. A check that cannot run because one
//! before it failed says so and counts as failed. Every wait is bounded.
//! The key is never printed: only its fingerprint.

use crate::config::Config;
use crate::setup;
use anyhow::Result;
use oduflow_store::{Store, StoreError};
use oduflow_vultr::{AccountProbe, VultrClient};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Attempts for each of the check's Vultr reads: one retry, for a passing
/// 5xx or 429.
const CHECK_READ_ATTEMPTS: u32 = 2;

/// Added to the request timeouts of one Vultr read: the wait for the rate
/// budget's slot and the backoff between the attempts.
const CHECK_CALL_SLACK: Duration = Duration::from_secs(10);

/// The database's answer to each of the check's questions, connecting
/// included: beyond the pool's own 30 s wait for a connection (and SQLite's
/// 30 s busy timeout), so their errors, which say more, come first.
const DATABASE_CHECK_TIMEOUT: Duration = Duration::from_secs(40);

/// One connection to the database, before the pool's own (longer) wait.
const DATABASE_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// One line of the report.
#[derive(Debug, Serialize)]
pub(crate) struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn pass(name: &str, detail: impl Into<String>) -> Check {
    Check { name: name.to_owned(), ok: true, detail: detail.into() }
}

fn fail(name: &str, detail: impl Into<String>) -> Check {
    Check { name: name.to_owned(), ok: false, detail: detail.into() }
}

/// A check that could not run: failed, never passed silently.
fn skipped(name: &str, why: &str) -> Check {
    fail(name, format!("skipped: {why}"))
}

pub async fn run(cfg: &Config, json: bool) -> Result<()> {
    let checks = checks(cfg).await;
    crate::output::print_checks(&checks, json)?;
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        anyhow::bail!("check: {failed} of {} checks failed", checks.len());
    }
    Ok(())
}

async fn checks(cfg: &Config) -> Vec<Check> {
    let mut out = vec![];
    let (line, store) = database(cfg).await;
    out.push(line);
    let vultr = match &store {
        Ok(store) => vultr(cfg, store, &mut out).await,
        Err(why) => {
            let why = format!("{why} (every Vultr request takes its slot from the rate budget there)");
            out.push(skipped("vultr-url", &why));
            out.push(skipped("vultr-key", &why));
            Err(why)
        }
    };
    out.push(rate_group(cfg, store.as_ref()).await);
    out.push(restore(store.as_ref()).await);
    out.extend(adapters(cfg));
    out.push(root_password(cfg));
    out.push(dns(cfg, &vultr).await);
    if let Ok(s) = store {
        s.close().await;
    }
    out
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        // The driver's errors repeat their source in their own message.
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// Reachable and at this binary's schema. Hands on the store, or why the
/// checks that need it cannot run.
async fn database(cfg: &Config) -> (Check, Result<Store, String>) {
    let url = oduflow_store::redact_url(&cfg.database_url);
    let unreachable =
        |detail: String| (fail("database", format!("{url}: {detail}")), Err("database unreachable".into()));
    let not_ready =
        |e: StoreError| (fail("database", e.to_string()), Err("database not initialized or not migrated".into()));
    // One connection first: its error says why (refused, authentication, no
    // such database), where the pool's would only say it timed out waiting.
    match tokio::time::timeout(DATABASE_PROBE_TIMEOUT, Store::probe(&cfg.database_url)).await {
        Err(_) => return unreachable(format!("no connection within {} s", secs(DATABASE_PROBE_TIMEOUT))),
        Ok(Err(e @ StoreError::NotInitialized(_))) => return not_ready(e),
        Ok(Err(e)) => return unreachable(chain(&e)),
        Ok(Ok(())) => {}
    }
    let opened = tokio::time::timeout(DATABASE_CHECK_TIMEOUT, async {
        let store = Store::connect(&cfg.database_url, false).await?;
        let version = store.schema_version().await?;
        Ok::<_, StoreError>((store, version))
    })
    .await;
    let want = oduflow_store::SCHEMA_VERSION;
    match opened {
        Ok(Ok((store, have))) if have == want => (pass("database", format!("{url} schema {have} (latest)")), Ok(store)),
        // A newer oduflow migrated it (a rolling upgrade): this one still
        // works on it, as every command does.
        Ok(Ok((store, have))) => {
            (pass("database", format!("{url} schema {have} (newer than this oduflow's {want})")), Ok(store))
        }
        // Their messages name `oduflow init`.
        Ok(Err(e @ (StoreError::NotInitialized(_) | StoreError::MigrationsPending { .. }))) => not_ready(e),
        Ok(Err(e)) => unreachable(chain(&e)),
        Err(_) => unreachable(format!("no answer within {} s", secs(DATABASE_CHECK_TIMEOUT))),
    }
}

/// The bound on one of the check's Vultr reads, retry included.
fn call_bound(cfg: &Config) -> Duration {
    Duration::from_millis(cfg.request_timeout_ms) * CHECK_READ_ATTEMPTS + CHECK_CALL_SLACK
}

/// The base URL and the key, from one `GET /account`. Hands on the client
/// when the key was accepted, or why the checks that need it cannot run.
async fn vultr(cfg: &Config, store: &Store, out: &mut Vec<Check>) -> Result<Arc<VultrClient>, String> {
    let url = cfg.vultr_url.trim_end_matches('/');
    // Without a key the URL is still worth probing: Vultr refuses a request
    // without one with its own 401.
    let key = cfg.api_key.clone().unwrap_or_else(|| secrecy::SecretString::from(String::new()));
    let client = setup::vultr_config(cfg, key)
        .map(|vc| oduflow_vultr::VultrConfig { read_attempts_max: CHECK_READ_ATTEMPTS, ..vc })
        .and_then(|vc| setup::provider_with(cfg, vc, store, "check"));
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            out.push(fail("vultr-url", format!("{e:#}")));
            out.push(skipped("vultr-key", "no usable base URL"));
            return Err("no usable base URL".into());
        }
    };
    let fp = client.fingerprint().short().to_owned();
    let bound = call_bound(cfg);
    let Ok(probe) = tokio::time::timeout(bound, client.account_probe()).await else {
        out.push(fail("vultr-url", format!("{url}: no answer to GET /account within {} s", secs(bound))));
        out.push(skipped("vultr-key", "no answer from the base URL"));
        return Err("no answer from the base URL".into());
    };
    let not_set = || fail("vultr-key", "VULTR_API_KEY is not set (the worker needs it)");
    let (url_line, key_line, usable) = match probe {
        AccountProbe::Accepted(a) => {
            let key_line = match cfg.api_key {
                Some(_) => pass("vultr-key", format!("accepted: key {fp}, account {}", a.email)),
                None => not_set(),
            };
            let ok = key_line.ok;
            (
                pass("vultr-url", format!("{url} answers as Vultr")),
                key_line,
                ok.then_some(client).ok_or("VULTR_API_KEY is not set"),
            )
        }
        AccountProbe::KeyRefused { status, message } => {
            let key_line = match cfg.api_key {
                Some(_) => fail(
                    "vultr-key",
                    format!(
                        "refused by Vultr ({status} {message}): key {fp}; check VULTR_API_KEY, and the addresses \
                         the key is limited to in Vultr's console"
                    ),
                ),
                None => not_set(),
            };
            let url_line =
                pass("vultr-url", format!("{url} answers as Vultr ({status} to GET /account, its error JSON)"));
            (url_line, key_line, Err("the key was not accepted"))
        }
        AccountProbe::Unavailable { status, message } => (
            fail(
                "vultr-url",
                format!("{url} answered GET /account with {status} ({message}) {CHECK_READ_ATTEMPTS} times: try again"),
            ),
            skipped("vultr-key", "Vultr did not answer GET /account normally"),
            Err("Vultr did not answer normally"),
        ),
        AccountProbe::NotVultr(d) => (
            fail(
                "vultr-url",
                format!(
                    "{url} does not answer as Vultr's API: GET /account {d}; ODUFLOW_VULTR_URL should be \
                     {}",
                    oduflow_vultr::DEFAULT_BASE_URL
                ),
            ),
            skipped("vultr-key", "the base URL does not answer as Vultr"),
            Err("the base URL does not answer as Vultr"),
        ),
        AccountProbe::Unreachable(d) => (
            fail("vultr-url", format!("nothing answered at {url}: {d}")),
            skipped("vultr-key", "nothing answered at the base URL"),
            Err("nothing answered at the base URL"),
        ),
    };
    out.push(url_line);
    out.push(key_line);
    usable.map_err(str::to_owned)
}

/// The group's name and rate, and its budget row in the database.
async fn rate_group(cfg: &Config, store: Result<&Store, &String>) -> Check {
    let head = format!("group {}, {} requests/s", cfg.rate_group, cfg.rate_per_sec);
    let store = match store {
        Ok(s) => s,
        Err(why) => return skipped("rate-group", &format!("{why} ({head})")),
    };
    match tokio::time::timeout(DATABASE_CHECK_TIMEOUT, store.budget_groups()).await {
        Ok(Ok(rows)) => match rows.iter().find(|r| r.group == cfg.rate_group) {
            Some(r) => {
                let paused = if r.paused_for_us > 0 {
                    format!(", paused for {:.1} s by a 429", r.paused_for_us as f64 / 1e6)
                } else {
                    String::new()
                };
                pass("rate-group", format!("{head}; budget row reachable (reservations: {}{paused})", r.reservations))
            }
            None => {
                pass("rate-group", format!("{head}; budget table reachable, no row yet (made at the first request)"))
            }
        },
        Ok(Err(e)) => fail("rate-group", format!("{head}; budget row unreadable: {}", chain(&e))),
        Err(_) => fail("rate-group", format!("{head}; no answer within {} s", secs(DATABASE_CHECK_TIMEOUT))),
    }
}

/// No restore pending, declared or as this host's memory shows it.
async fn restore(store: Result<&Store, &String>) -> Check {
    let store = match store {
        Ok(s) => s,
        Err(why) => return skipped("restore", why),
    };
    match tokio::time::timeout(DATABASE_CHECK_TIMEOUT, crate::lineage::peek(store)).await {
        Ok(Ok((Some(why), _, _))) => {
            fail("restore", format!("restore pending ({why}): run `oduflow reconcile --all`; the queue claims nothing"))
        }
        Ok(Ok((None, mark, 0))) => pass("restore", format!("none pending (high-water mark {mark}; new to this host)")),
        Ok(Ok((None, mark, seen))) => {
            pass("restore", format!("none pending (high-water mark {mark}; this host last saw {seen})"))
        }
        Ok(Err(e)) => fail("restore", format!("{e:#}")),
        Err(_) => fail("restore", format!("no answer within {} s", secs(DATABASE_CHECK_TIMEOUT))),
    }
}

/// One line per `[[adapter]]`: each of its commands' programs found and
/// executable.
fn adapters(cfg: &Config) -> Vec<Check> {
    if cfg.adapters.is_empty() {
        return vec![pass("adapters", "none configured")];
    }
    cfg.adapters
        .iter()
        .map(|a| {
            let name = format!("adapter:{}", a.name);
            // Each program once, with the commands that run it.
            let mut programs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (what, argv) in
                [("ensure", &a.ensure), ("check", &a.check), ("remove", &a.remove), ("update", &a.update)]
            {
                if let Some(p) = argv.first() {
                    programs.entry(p.as_str()).or_default().push(what);
                }
            }
            let (mut found, mut missing) = (vec![], vec![]);
            for (program, whats) in programs {
                match executable(program) {
                    Ok(p) => found.push(format!("{} ({})", p.display(), whats.join(", "))),
                    Err(e) => missing.push(format!("{e} ({})", whats.join(", "))),
                }
            }
            if missing.is_empty() { pass(&name, found.join("; ")) } else { fail(&name, missing.join("; ")) }
        })
        .collect()
}

fn root_password(cfg: &Config) -> Check {
    match cfg.root_password_command.as_ref().and_then(|argv| argv.first()) {
        None => pass("root-password", "not configured: Vultr's one-time root passwords are dropped"),
        Some(program) => match executable(program) {
            Ok(p) => pass("root-password", format!("{} (root_password_command)", p.display())),
            Err(e) => fail("root-password", format!("{e} (root_password_command)")),
        },
    }
}

/// Where `program` runs from, as the worker would start it: a path with a
/// slash as it is, a bare name searched in `PATH`.
fn executable(program: &str) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program is empty".into());
    }
    if program.contains('/') {
        let p = PathBuf::from(program);
        return runnable(&p).map(|()| p).map_err(|e| format!("{program}: {e}"));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut seen = None;
    for dir in std::env::split_paths(&path) {
        let p = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir }.join(program);
        match runnable(&p) {
            Ok(()) => return Ok(p),
            Err(e) if p.exists() => seen = Some(format!("{}: {e}", p.display())),
            Err(_) => {}
        }
    }
    Err(seen.unwrap_or_else(|| format!("{program}: not found in PATH")))
}

/// A regular file with an execute bit.
fn runnable(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "not found".to_owned(),
        _ => e.to_string(),
    })?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(format!("not executable (mode {:o})", mode & 0o7777));
    }
    Ok(())
}

/// The `[dns]` zone, if configured: `GET /domains/{domain}` answers 200.
async fn dns(cfg: &Config, vultr: &Result<Arc<VultrClient>, String>) -> Check {
    let Some(d) = &cfg.dns else {
        return pass("dns", "not configured");
    };
    let client = match vultr {
        Ok(c) => c,
        Err(why) => return skipped("dns", &format!("{why} (zone {})", d.domain)),
    };
    let bound = call_bound(cfg);
    match tokio::time::timeout(bound, client.dns_domain_get(&d.domain)).await {
        Ok(Ok(Some(_))) => pass("dns", format!("zone {} present, records with TTL {}", d.domain, d.ttl)),
        Ok(Ok(None)) => fail(
            "dns",
            format!(
                "zone {0} is not in this Vultr account (GET /domains/{0} answered 404): add it in Vultr's DNS, or \
                 fix [dns] domain",
                d.domain
            ),
        ),
        Ok(Err(e)) => fail("dns", format!("GET /domains/{}: {e}", d.domain)),
        Err(_) => fail("dns", format!("GET /domains/{}: no answer within {} s", d.domain, secs(bound))),
    }
}
