//! Running as a service: the systemd units in `deploy/` (checked
//! by `systemd-analyze verify` when the machine has it, and structurally in
//! any case), the example configuration, and log lines as JSON on request.

use crate::*;
use std::collections::BTreeMap;

fn deploy_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

const WORKER_UNIT: &str = "oduflow-worker@.service";
const SERVE_UNIT: &str = "oduflow-serve.service";

/// The worker's default shutdown grace on SIGTERM, in seconds, read from
/// the configuration's source: the units must wait longer before SIGKILL.
fn worker_grace_secs() -> u64 {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config.rs")).unwrap();
    let at = src.find("env: \"ODUFLOW_SHUTDOWN_GRACE_MS\"").expect("the shutdown grace setting");
    let rest = &src[at..];
    let default = rest[rest.find("default: ").unwrap() + 9..].split(',').next().unwrap().replace('_', "");
    default.trim().parse::<u64>().unwrap() / 1000
}

/// A unit file's sections, each key with every value it is given (systemd
/// keys may repeat). Comments and blank lines dropped.
fn parse_unit(text: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section = String::new();
    for l in text.lines().map(str::trim) {
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_owned();
            out.entry(section.clone()).or_default();
            continue;
        }
        assert!(!section.is_empty(), "a key outside any section: {l}");
        let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
        out.get_mut(&section).unwrap().entry(k.trim().to_owned()).or_default().push(v.trim().to_owned());
    }
    out
}

/// systemd's time span: `90`, `90s`, `1min 30s`, `2min`.
fn seconds(span: &str) -> u64 {
    let mut total = 0;
    for part in span.split_whitespace() {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        let n: u64 = digits.parse().unwrap_or_else(|_| panic!("time span {span:?}"));
        total += match &part[digits.len()..] {
            "" | "s" | "sec" => n,
            "m" | "min" => n * 60,
            "h" => n * 3600,
            unit => panic!("unit {unit:?} in {span:?}"),
        };
    }
    total
}

/// Both units, structurally: what they run, as whom, with which secrets
/// and sandbox, how they stop and restart. Runs everywhere, whether or not
/// systemd is on the machine.
#[test]
fn units_run_oduflow_sandboxed_as_its_own_user() {
    for (file, command) in [(WORKER_UNIT, "worker"), (SERVE_UNIT, "serve")] {
        let text = std::fs::read_to_string(deploy_dir().join(file)).unwrap();
        let unit = parse_unit(&text);
        for s in ["Unit", "Service", "Install"] {
            assert!(unit.contains_key(s), "{file}: no [{s}] section");
        }
        let svc = &unit["Service"];
        let one = |k: &str| -> &str {
            let v = svc.get(k).unwrap_or_else(|| panic!("{file}: no {k}="));
            assert_eq!(v.len(), 1, "{file}: {k}= given {} times", v.len());
            &v[0]
        };
        let exec: Vec<&str> = one("ExecStart").split_whitespace().collect();
        assert_eq!(exec[0], "/usr/local/bin/oduflow", "{file}");
        assert_eq!(exec.iter().filter(|a| **a == command).count(), 1, "{file}: ExecStart does not run `{command}`");
        assert!(exec.windows(2).any(|w| w == ["--config", "/etc/oduflow/oduflow.toml"]), "{file}: {exec:?}");
        // A dedicated, lasting user: the database and the restore memory outlive any one run.
        assert_eq!(one("User"), "oduflow", "{file}");
        assert!(!svc.contains_key("DynamicUser"), "{file}");
        assert_eq!(one("StateDirectory"), "oduflow", "{file}");
        assert!(one("ReadWritePaths").split_whitespace().any(|p| p == "/var/lib/oduflow"), "{file}");
        assert!(
            svc["Environment"].iter().any(|e| e == "ODUFLOW_STATE_DIR=/var/lib/oduflow/lineage"),
            "{file}: the restore memory must live in the state directory"
        );
        // The key comes from the root-owned file, never from the unit.
        assert_eq!(one("EnvironmentFile"), "/etc/oduflow/oduflow.env", "{file}: the file must exist (no '-')");
        assert!(!text.contains("VULTR_API_KEY="), "{file}: a key in the unit");
        for (k, v) in [
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("PrivateDevices", "yes"),
            ("ProtectKernelTunables", "yes"),
            ("ProtectKernelModules", "yes"),
            ("ProtectControlGroups", "yes"),
            ("RestrictSUIDSGID", "yes"),
            ("CapabilityBoundingSet", ""),
            ("KillSignal", "SIGTERM"),
            ("KillMode", "mixed"),
            ("Restart", "on-failure"),
            ("RestartPreventExitStatus", "2"),
        ] {
            assert_eq!(one(k), v, "{file}: {k}");
        }
        let stop = seconds(one("TimeoutStopSec"));
        let grace = worker_grace_secs();
        assert!(stop > grace, "{file}: TimeoutStopSec {stop} s is not above the {grace} s grace");
        assert_eq!(unit["Install"]["WantedBy"], ["multi-user.target"], "{file}");
    }
    // Several workers per host: a template, each instance named.
    let worker = parse_unit(&std::fs::read_to_string(deploy_dir().join(WORKER_UNIT)).unwrap());
    assert!(worker["Unit"]["Description"][0].contains("%i"), "the instance is not in the worker's description");
    // The worker warns at start about a grace the unit would SIGKILL: it
    // knows the unit's stop timeout.
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cmd/worker.rs")).unwrap();
    let known = src.split("const UNIT_STOP_TIMEOUT").nth(1).expect("UNIT_STOP_TIMEOUT in cmd/worker.rs");
    let known = known.split("from_secs(").nth(1).unwrap().split(')').next().unwrap().parse::<u64>().unwrap();
    assert_eq!(seconds(&worker["Service"]["TimeoutStopSec"][0]), known, "cmd/worker.rs's UNIT_STOP_TIMEOUT is stale");
    assert_eq!(seconds("1min 30s"), 90);
}

/// The example files: the env file holds the key (as a placeholder) and
/// says how it must be owned; the configuration holds no secret.
#[test]
fn the_example_files_keep_the_key_out_of_the_configuration() {
    let env = std::fs::read_to_string(deploy_dir().join("oduflow.env.example")).unwrap();
    assert!(env.lines().any(|l| l.starts_with("VULTR_API_KEY=")), "{env}");
    assert!(env.contains("0640") && env.contains("-o root -g oduflow"), "the file's mode and owner");
    let toml = std::fs::read_to_string(deploy_dir().join("oduflow.toml")).unwrap();
    assert!(!toml.contains("api_key") && !toml.contains("VULTR_API_KEY="), "{toml}");
    let readme = std::fs::read_to_string(deploy_dir().join("README.md")).unwrap();
    for needle in [
        "cargo install --locked --path crates/oduflow --no-default-features",
        "useradd --system",
        "install -m 0640 -o root -g oduflow deploy/oduflow.env.example /etc/oduflow/oduflow.env",
        "systemctl enable --now oduflow-worker@1 oduflow-worker@2 oduflow-serve",
    ] {
        assert!(readme.contains(needle), "deploy/README.md does not say `{needle}`");
    }
}

/// The example configuration is one oduflow accepts (its database URL
/// overridden, as `ODUFLOW_DATABASE_URL` in the env file would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_configuration_is_accepted() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let config = deploy_dir().join("oduflow.toml");
    let o =
        env.cmd(&["--config", config.to_str().unwrap(), "check"]).env_remove("ODUFLOW_RATE_PER_SEC").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("group default, 25 requests/s"), "the file's settings were read: {out}");
}

fn systemd_analyze() -> bool {
    Command::new("sh").args(["-c", "command -v systemd-analyze"]).output().is_ok_and(|o| o.status.success())
}

/// The units as systemd reads them, when it is on the machine: copies whose
/// ExecStart names this test's binary (verify checks that it exists), the
/// worker as the instance `@1`. Any warning fails the test (an unknown key
/// is only a warning to systemd). Also prints systemd's exposure rating.
#[test]
fn systemd_analyze_verifies_the_units() {
    if !systemd_analyze() {
        eprintln!(
            "SKIPPED: systemd-analyze not found: the units were checked structurally only \
             (units_run_oduflow_sandboxed_as_its_own_user)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for file in [WORKER_UNIT, SERVE_UNIT] {
        let text = std::fs::read_to_string(deploy_dir().join(file)).unwrap();
        let text = text.replace("ExecStart=/usr/local/bin/oduflow ", &format!("ExecStart={} ", bin()));
        assert!(text.contains(bin()), "{file}: ExecStart not rewritten");
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    let units = [dir.path().join("oduflow-worker@1.service"), dir.path().join(SERVE_UNIT)];
    let o = Command::new("systemd-analyze").arg("verify").args(&units).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "systemd-analyze verify failed:\n{err}");
    assert!(err.trim().is_empty() && o.stdout.is_empty(), "systemd-analyze verify warned:\n{err}");
    // Exposure (systemd >= 250 reads unit files offline).
    for unit in &units {
        let o = Command::new("systemd-analyze").args(["security", "--offline=yes"]).arg(unit).output().unwrap();
        let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        let Some(rating) = all.lines().find(|l| l.contains("Overall exposure level")) else {
            eprintln!("systemd-analyze security --offline is not supported here: exposure not rated\n{all}");
            continue;
        };
        println!("{rating}");
        let level: f64 = rating
            .split(": ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{rating}"));
        assert!(level <= 2.0, "{}: exposure {level}, above 2.0 (\"OK\" is below 3): {rating}", unit.display());
    }
}

/// `ODUFLOW_LOG_FORMAT=json`: every log line on stderr is a JSON object with
/// the documented keys (here a warning about a 429, with its fields, and
/// the adapter's debug lines); the key is in none. Text is the default; an
/// unknown format is refused with exit 2 and one line naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_are_json_objects_on_request() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let one_429 = || {
        let faults = oduflow_sim::Faults {
            burst_429: 1.0,
            burst_429_len: 1,
            retry_after_secs: 1,
            ops: vec![oduflow_sim::Op::AccountGet],
            faults_max: Some(1),
            ..Default::default()
        };
        env.sim.control().set_faults(faults).unwrap();
    };
    one_429();
    let o = env
        .cmd(&["check"])
        .env("ODUFLOW_LOG_FORMAT", "json")
        .env("ODUFLOW_LOG", "warn,oduflow_vultr=debug")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "the retry after the 429 passes: {err}");
    let logs: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(logs.len() >= 2, "no JSON log lines in:\n{err}");
    for l in &logs {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(l[key].is_string(), "{key} missing: {l}");
        }
        assert!(l["fields"].is_object(), "{l}");
    }
    let warn = logs
        .iter()
        .find(|l| l["level"] == "WARN" && l["message"].as_str().unwrap().contains("429"))
        .unwrap_or_else(|| panic!("no warning about the 429 in:\n{err}"));
    assert_eq!(warn["target"], "oduflow_vultr::http", "{warn}");
    assert_eq!(warn["fields"]["group"], "default", "{warn}");
    assert!(warn["fields"]["pause_ms"].as_u64().is_some_and(|ms| ms >= 1000), "a number: {warn}");
    assert!(logs.iter().any(|l| l["level"] == "DEBUG"), "the debug lines asked for:\n{err}");
    assert!(!err.contains(KEY), "the key in the log:\n{err}");
    // Text by default.
    one_429();
    let o = env.cmd(&["check"]).env_remove("ODUFLOW_LOG_FORMAT").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("WARN") && err.contains("429"), "{err}");
    assert!(!err.lines().any(|l| l.starts_with('{')), "{err}");
    assert!(!err.contains('\u{1b}'), "colours off a terminal: {err:?}");
    // Anything else: one line naming the setting, exit 2, nothing run.
    let o = env.cmd(&["check"]).env("ODUFLOW_LOG_FORMAT", "yaml").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("ODUFLOW_LOG_FORMAT") && err.contains("json"), "{err}");
    assert!(o.stdout.is_empty());
}

/// Every line a worker and `serve` write with `ODUFLOW_LOG_FORMAT=json` is a
/// JSON object of the documented shape: their start-up lines, a 5xx, a
/// block, the signal's notice and the stop summary included; its fields
/// are values (never Rust's debug text), and a line about a client names
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_of_a_worker_and_serve_is_json_when_asked() {
    use std::io::Read;
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    env.create_client("acme");
    env.sim.control().set_faults(oduflow_sim::Faults::server_errors_on(vec![oduflow_sim::Op::InstanceCreate])).unwrap();
    let json = |args: &[&str]| {
        let mut c = env.cmd(args);
        c.env("ODUFLOW_LOG_FORMAT", "json").env("ODUFLOW_LOG", "info").stderr(Stdio::piped()).stdout(Stdio::null());
        c.spawn().unwrap()
    };
    let store = env.store().await;
    let mut worker = json(&["worker"]);
    let until = Instant::now() + Duration::from_secs(60);
    while store.client_get("acme").await.unwrap().unwrap().infra.status != ClientStatus::Blocked {
        assert!(Instant::now() < until, "acme did not block");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut serve = json(&["serve", "--listen", "127.0.0.1:0"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut text = String::new();
    for child in [&mut worker, &mut serve] {
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let _ = child.wait();
        child.stderr.take().unwrap().read_to_string(&mut text).unwrap();
    }
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a line that is not JSON ({e}): {l}")))
        .collect();
    for l in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(l[key].is_string(), "{key} missing: {l}");
        }
        let fields = l["fields"].as_object().unwrap_or_else(|| panic!("{l}"));
        for (k, v) in fields {
            let v = v.as_str().unwrap_or_default();
            let debug = v.starts_with("Some(") || v.contains("(\"") || v.contains("Accepted(");
            assert!(!debug, "field {k} is Rust's debug text: {l}");
        }
        if fields.contains_key("client_id") {
            assert!(fields["client"].as_str().is_some_and(|c| c == "acme"), "a line about a client names it: {l}");
        }
    }
    let has = |words: &str| lines.iter().any(|l| l["message"].as_str().unwrap().contains(words));
    for words in ["oduflow worker", "stopping gracefully", "oduflow worker: stopped", "oduflow serve: listening on"] {
        assert!(has(words), "no line with {words:?} in:\n{text}");
    }
    assert!(
        lines.iter().any(|l| l["fields"]["status"] == 500 || l["message"].as_str().unwrap().contains("500")),
        "{text}"
    );
    assert!(lines.iter().any(|l| l["fields"]["client"] == "acme" && l["fields"]["reason"].is_string()), "{text}");
}
