//! An identity adapter that runs configured commands, for systems oduflow does
//! not ship (a WireGuard peer, a Salt minion key). Each command gets the
//! client in its environment (`ODUFLOW_CLIENT`, `ODUFLOW_CLIENT_ID`,
//! `ODUFLOW_MAIN_IP`, `ODUFLOW_V6_MAIN_IP`, `ODUFLOW_HOSTNAME`,
//! `ODUFLOW_DNS_NAME`, `ODUFLOW_MOUNT_ID`, `ODUFLOW_PLAN`, `ODUFLOW_VOLUME_GB`,
//! `ODUFLOW_IDENTITY_ID`, `ODUFLOW_PHASE`) and prints one JSON object on
//! stdout: `{"ok": true, "detail": "...", "id": "..."}` for ensure, remove and
//! update, `{"present": bool, "detail": "..."}` for check. A non-zero exit,
//! unreadable output or running past the timeout is a failure. The optional
//! `update` command runs once a change to the server or volume has been
//! confirmed (to grow the filesystem onto a larger volume, say).
//!
//! Ownership: the `id` an ensure prints (a WireGuard public key, a
//! Salt minion id: whatever names what the script made) is recorded durably
//! and handed back to every later command as `ODUFLOW_IDENTITY_ID`, so a
//! script removes what it made and nothing else. A removal gets the facts
//! recorded when the identity was last ensured (`ODUFLOW_MAIN_IP` is the
//! address the VM had, although the VM is gone by then); `ODUFLOW_PHASE` is
//! `ensure` or `remove`, so a check knows which question it answers.

use oduflow_model::identity::*;
use serde::Deserialize;
use std::time::Duration;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandAdapterConfig {
    pub name: String,
    /// Program and arguments.
    pub ensure: Vec<String>,
    pub check: Vec<String>,
    pub remove: Vec<String>,
    /// Optional: run after a confirmed change, with the new facts.
    #[serde(default)]
    pub update: Vec<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

/// The only variables of oduflow's own environment a child process (an
/// adapter command, `root_password_command`) inherits: where programs are,
/// whose home, the locale and the time zone. Everything else, the API key
/// and the database URL with its password first, is left behind
/// (`env_clear`); the child gets these and the variables its protocol
/// passes on purpose (`ODUFLOW_CLIENT` and so on above; `ODUFLOW_LABEL` and
/// `ODUFLOW_INSTANCE_ID` for the root password command).
pub const CHILD_ENV_ALLOWED: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR"];

/// A command for a child process, with a cleared environment plus
/// [`CHILD_ENV_ALLOWED`] from this process's own.
pub fn child_command(program: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear();
    for name in CHILD_ENV_ALLOWED {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd
}

/// Long enough for a remote key revocation, short enough that a hung command
/// does not hold a job for long.
fn default_timeout_ms() -> u64 {
    30_000
}

pub struct CommandAdapter {
    cfg: CommandAdapterConfig,
}

#[derive(Deserialize)]
struct Answer {
    ok: Option<bool>,
    present: Option<bool>,
    #[serde(default)]
    detail: String,
    /// What an ensure made (recorded, and handed back as
    /// `ODUFLOW_IDENTITY_ID`).
    id: Option<String>,
}

/// The identity id recorded for the client (`""` for none).
fn recorded_id(own: &dyn Ownership) -> String {
    own.get().get("id").and_then(serde_json::Value::as_str).unwrap_or("").to_owned()
}

impl CommandAdapter {
    pub fn new(cfg: CommandAdapterConfig) -> Result<Self, String> {
        for (what, argv) in [("ensure", &cfg.ensure), ("check", &cfg.check), ("remove", &cfg.remove)] {
            if argv.is_empty() {
                return Err(format!("adapter {}: {what} command is empty", cfg.name));
            }
        }
        if cfg.name.is_empty() || !cfg.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return Err(format!("adapter name {:?}: use lowercase letters, digits and hyphens", cfg.name));
        }
        Ok(Self { cfg })
    }

    async fn run(&self, argv: &[String], t: &IdentityTarget, own: &dyn Ownership) -> Result<Answer, String> {
        let mut cmd = child_command(&argv[0]);
        cmd.args(&argv[1..])
            .env("ODUFLOW_CLIENT", &t.client)
            .env("ODUFLOW_CLIENT_ID", &t.client_id)
            .env("ODUFLOW_MAIN_IP", t.main_ip.as_deref().unwrap_or(""))
            .env("ODUFLOW_V6_MAIN_IP", &t.outputs.v6_main_ip)
            .env("ODUFLOW_HOSTNAME", &t.hostname)
            .env("ODUFLOW_DNS_NAME", &t.dns_name)
            .env("ODUFLOW_IDENTITY_ID", recorded_id(own))
            .env("ODUFLOW_PHASE", if t.removing { "remove" } else { "ensure" })
            .env("ODUFLOW_MOUNT_ID", &t.outputs.mount_id)
            .env("ODUFLOW_PLAN", &t.plan)
            .env("ODUFLOW_VOLUME_GB", t.volume_gb.to_string())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let what = argv.join(" ");
        let out = tokio::time::timeout(Duration::from_millis(self.cfg.timeout_ms), cmd.output())
            .await
            .map_err(|_| format!("`{what}` timed out after {} ms", self.cfg.timeout_ms))?
            .map_err(|e| format!("`{what}` could not run: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "`{what}` failed ({}): {}",
                out.status,
                err.trim().chars().take(300).collect::<String>()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).map_err(|e| {
            format!("`{what}` printed no JSON answer ({e}): {:?}", text.chars().take(200).collect::<String>())
        })
    }
}

impl IdentityAdapter for CommandAdapter {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn ensure<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            let a = self.run(&self.cfg.ensure, t, own).await?;
            if a.ok != Some(true) {
                return Err(format!("ensure refused: {}", a.detail).into());
            }
            // What the script made is recorded before anything depends on it.
            if let Some(id) = a.id.filter(|id| *id != recorded_id(own)) {
                own.put(serde_json::json!({ "id": id })).await?;
            }
            Ok(a.detail)
        })
    }

    fn check<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, Presence> {
        Box::pin(async move {
            let a = self.run(&self.cfg.check, t, own).await?;
            match a.present {
                Some(true) => Ok(Presence::Present(a.detail)),
                Some(false) => Ok(Presence::Absent),
                None => Err("check printed no \"present\" field".into()),
            }
        })
    }

    fn remove<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Step<'a, String> {
        Box::pin(async move {
            let a = self.run(&self.cfg.remove, t, own).await?;
            match a.ok {
                Some(true) => Ok(a.detail),
                _ => Err(format!("remove refused: {}", a.detail).into()),
            }
        })
    }

    fn update<'a>(&'a self, t: &'a IdentityTarget, own: &'a dyn Ownership) -> Option<Step<'a, String>> {
        if self.cfg.update.is_empty() {
            return None;
        }
        Some(Box::pin(async move {
            let a = self.run(&self.cfg.update, t, own).await?;
            match a.ok {
                Some(true) => Ok(a.detail),
                _ => Err(format!("update refused: {}", a.detail).into()),
            }
        }))
    }
}
