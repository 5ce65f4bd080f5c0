//! `oduflow check`, end to end with the binary against the simulator: every
//! line passes on a good setup; a refused key, a base URL that is not Vultr
//! (nothing listening, or a web server), an unmigrated or older database, a
//! missing adapter command, a missing DNS zone and a pending restore each
//! fail their own line, exit 1, and the key is never printed.

use crate::*;
use std::io::{Read, Write};

/// The checks, in the order they are reported.
const NAMES: &[&str] =
    &["database", "vultr-url", "vultr-key", "rate-group", "restore", "adapter:vpn", "root-password", "dns"];

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/identity.sh");

/// A configuration that uses every check: a command adapter (a path and a
/// program found in PATH), a root password command, a DNS zone.
fn write_config(env: &Env, extra: &str) {
    let toml = format!(
        "root_password_command = [\"cat\"]\n{extra}\n[dns]\ndomain = \"example.com\"\n\n\
         [[adapter]]\nname = \"vpn\"\nensure = [\"{FIXTURE}\", \"vpn\", \"ensure\"]\n\
         check = [\"sh\", \"{FIXTURE}\", \"vpn\", \"check\"]\nremove = [\"sh\", \"{FIXTURE}\", \"vpn\", \"remove\"]\n"
    );
    std::fs::write(env.dir.path().join("oduflow.toml"), toml).unwrap();
}

/// `(name, ok, detail)` of every check, from `--json`, with the exit code.
fn report(o: &Output) -> (Option<i32>, Vec<(String, bool, String)>) {
    let out = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{}", stderr(o)));
    let checks: Vec<_> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["ok"].as_bool().unwrap(),
                c["detail"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(v["ok"].as_bool(), Some(checks.iter().all(|c| c.1)), "{out}");
    (o.status.code(), checks)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn line<'a>(checks: &'a [(String, bool, String)], name: &str) -> &'a (String, bool, String) {
    checks.iter().find(|c| c.0 == name).unwrap_or_else(|| panic!("no {name} line in {checks:?}"))
}

/// Whatever it printed, never the key.
fn no_key(o: &Output, key: &str) {
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(o));
    assert!(!all.contains(key), "the key was printed: {all}");
}

oduflow_store::on_both_stores!(
    crate::env_of =>
    check_passes_on_a_good_setup,
    check_names_oduflow_init_for_an_unmigrated_or_older_database,
);

async fn check_passes_on_a_good_setup(env: Env) {
    env.ok(&["init"]);
    write_config(&env, "");
    let o = env.run(&["check"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), NAMES.len(), "{text}");
    for (l, name) in lines.iter().zip(NAMES) {
        let mut words = l.split_whitespace();
        assert_eq!((words.next(), words.next()), (Some("ok"), Some(*name)), "{text}");
    }
    assert!(text.contains(&format!("schema {} (latest)", oduflow_store::SCHEMA_VERSION)), "{text}");
    let fp = KeyFingerprint::of_key(&secrecy::SecretString::from(KEY.to_owned()));
    assert!(text.contains(fp.short()), "the key's fingerprint is shown: {text}");
    no_key(&o, KEY);

    let o = env.run(&["check", "--json"]);
    let (code, checks) = report(&o);
    assert_eq!(code, Some(0), "{checks:?}");
    assert_eq!(checks.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), NAMES);
    assert!(checks.iter().all(|c| c.1), "{checks:?}");
    assert!(line(&checks, "adapter:vpn").2.contains(FIXTURE), "{checks:?}");
    assert!(line(&checks, "root-password").2.ends_with("/cat (root_password_command)"), "{checks:?}");
    assert!(line(&checks, "dns").2.contains("zone example.com present"), "{checks:?}");
    no_key(&o, KEY);
}

/// A database never initialized (an empty SQLite file, a new PostgreSQL
/// database) and one an older oduflow migrated: the database line fails
/// naming `oduflow init`, and the checks that need it say they were skipped.
async fn check_names_oduflow_init_for_an_unmigrated_or_older_database(env: Env) {
    if let Some(path) = env.url.strip_prefix("sqlite://") {
        std::fs::write(path, b"").unwrap();
    }
    let older = async {
        env.ok(&["init"]);
        let store = env.store().await;
        oduflow_store::testing::schema_rewind(&store, oduflow_store::SCHEMA_VERSION - 1).await.unwrap();
        store.close().await;
    };
    for (case, setup) in [("never initialized", None), ("older", Some(older))] {
        if let Some(s) = setup {
            s.await;
        }
        let o = env.run(&["check", "--json"]);
        let (code, checks) = report(&o);
        assert_eq!(code, Some(1), "{case}: {checks:?}");
        let db = line(&checks, "database");
        assert!(!db.1 && db.2.contains("oduflow init"), "{case}: {db:?}");
        for name in ["vultr-url", "vultr-key", "rate-group", "restore"] {
            let c = line(&checks, name);
            assert!(!c.1 && c.2.starts_with("skipped: database not initialized or not migrated"), "{case}: {c:?}");
        }
        assert!(stderr(&o).contains("checks failed"), "{}", stderr(&o));
        no_key(&o, KEY);
    }
}

/// A database nothing answers for: its line says why at once (not after the
/// pool's 30 s wait), and every check that needs it says it was skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_why_the_database_is_unreachable_and_what_it_skipped() {
    let env = Env::sqlite().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let started = Instant::now();
    let o = env
        .cmd(&["check", "--json"])
        .env("ODUFLOW_DATABASE_URL", format!("postgres://oduflow@127.0.0.1:{port}/oduflow"))
        .output()
        .unwrap();
    let (code, checks) = report(&o);
    assert_eq!(code, Some(1), "{checks:?}");
    let db = line(&checks, "database");
    assert!(!db.1 && db.2.contains("Connection refused"), "{db:?}");
    for name in ["vultr-url", "vultr-key", "rate-group", "restore"] {
        let c = line(&checks, name);
        assert!(!c.1 && c.2.starts_with("skipped: database unreachable"), "{c:?}");
    }
    for name in ["adapters", "root-password", "dns"] {
        assert!(line(&checks, name).1, "{checks:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_the_key_line_for_a_refused_key() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let wrong = "not-the-key-4242";
    let o = env.cmd(&["check", "--json"]).env("VULTR_API_KEY", wrong).output().unwrap();
    let (code, checks) = report(&o);
    assert_eq!(code, Some(1), "{checks:?}");
    let fp = KeyFingerprint::of_key(&secrecy::SecretString::from(wrong.to_owned()));
    let key = line(&checks, "vultr-key");
    assert!(!key.1 && key.2.contains("refused") && key.2.contains("401") && key.2.contains(fp.short()), "{key:?}");
    let url = line(&checks, "vultr-url");
    assert!(url.1, "a refused key is not a wrong URL: {url:?}");
    // Everything else passes (no DNS configured here).
    assert_eq!(checks.iter().filter(|c| !c.1).count(), 1, "{checks:?}");
    no_key(&o, wrong);
    // Without a key at all: the URL still answers as Vultr; the key line says why.
    let o = env.cmd(&["check", "--json"]).env_remove("VULTR_API_KEY").output().unwrap();
    let (code, checks) = report(&o);
    assert_eq!(code, Some(1));
    assert!(line(&checks, "vultr-url").1, "{checks:?}");
    assert!(line(&checks, "vultr-key").2.contains("VULTR_API_KEY is not set"), "{checks:?}");
}

/// A web server that answers every request with an HTML 404, as a base URL
/// pointing at the wrong host would.
fn not_vultr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let body = "<html><head><title>404 Not Found</title></head><body>nginx</body></html>";
            let _ = write!(
                conn,
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}/v2")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_the_url_line_for_a_url_that_is_not_vultr() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    write_config(&env, "");
    let dead = format!(
        "http://127.0.0.1:{}/v2",
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    );
    for (url, says) in [(dead, "nothing answered"), (not_vultr(), "does not answer as Vultr")] {
        let started = Instant::now();
        let o = env.cmd(&["check", "--json"]).env("ODUFLOW_VULTR_URL", &url).output().unwrap();
        let (code, checks) = report(&o);
        assert_eq!(code, Some(1), "{url}: {checks:?}");
        let u = line(&checks, "vultr-url");
        assert!(!u.1 && u.2.contains(says), "{url}: {u:?}");
        // Not read as a refused key: the key could not be judged.
        let k = line(&checks, "vultr-key");
        assert!(!k.1 && k.2.starts_with("skipped:") && !k.2.contains("refused"), "{url}: {k:?}");
        let d = line(&checks, "dns");
        assert!(!d.1 && d.2.starts_with("skipped:"), "{url}: {d:?}");
        // The checks that do not need Vultr still ran.
        for name in ["database", "rate-group", "restore", "adapter:vpn", "root-password"] {
            assert!(line(&checks, name).1, "{url}: {checks:?}");
        }
        // Bounded: two attempts of at most 2 s each (ODUFLOW_REQUEST_TIMEOUT_MS) and the slack.
        assert!(started.elapsed() < Duration::from_secs(20), "{url}: took {:?}", started.elapsed());
        no_key(&o, KEY);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_a_missing_adapter_command_and_a_missing_zone() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    // A script left without its execute bit.
    let stash = env.dir.path().join("stash-password");
    std::fs::write(&stash, "#!/bin/sh\ncat >/dev/null\n").unwrap();
    std::fs::set_permissions(&stash, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let toml = format!(
        "root_password_command = [\"{}\"]\n[dns]\ndomain = \"not-in-the-account.example\"\n\n\
         [[adapter]]\nname = \"vpn\"\nensure = [\"sh\", \"{FIXTURE}\"]\ncheck = [\"sh\", \"{FIXTURE}\"]\n\
         remove = [\"sh\", \"{FIXTURE}\"]\n\n\
         [[adapter]]\nname = \"salt\"\nensure = [\"/nonexistent/salt-ensure\"]\ncheck = [\"sh\", \"-c\", \"true\"]\n\
         remove = [\"no-such-program-for-oduflow\"]\n",
        stash.display()
    );
    std::fs::write(env.dir.path().join("oduflow.toml"), toml).unwrap();
    let o = env.run(&["check", "--json"]);
    let (code, checks) = report(&o);
    assert_eq!(code, Some(1), "{checks:?}");
    assert!(line(&checks, "adapter:vpn").1, "{checks:?}");
    let salt = line(&checks, "adapter:salt");
    assert!(!salt.1, "{salt:?}");
    assert!(salt.2.contains("/nonexistent/salt-ensure: not found (ensure)"), "{salt:?}");
    assert!(salt.2.contains("no-such-program-for-oduflow: not found in PATH (remove)"), "{salt:?}");
    let pw = line(&checks, "root-password");
    assert!(!pw.1 && pw.2.contains(&format!("{}: not executable (mode 644)", stash.display())), "{pw:?}");
    let dns = line(&checks, "dns");
    assert!(!dns.1 && dns.2.contains("not in this Vultr account"), "{dns:?}");
    assert_eq!(checks.iter().filter(|c| !c.1).count(), 3, "{checks:?}");
    // And the text form says FAIL on exactly those lines.
    let o = env.run(&["check"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let failed: Vec<&str> =
        text.lines().filter(|l| l.starts_with("FAIL")).map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(failed, ["adapter:salt", "root-password", "dns"], "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_while_a_restore_is_pending() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    env.ok(&["check"]);
    env.ok(&["restore", "declare", "--reason", "restored last night"]);
    let o = env.run(&["check", "--json"]);
    let (code, checks) = report(&o);
    assert_eq!(code, Some(1), "{checks:?}");
    let r = line(&checks, "restore");
    assert!(!r.1 && r.2.contains("restored last night") && r.2.contains("oduflow reconcile --all"), "{r:?}");
    env.ok(&["reconcile", "--all"]);
    env.ok(&["check"]);
}

/// An older copy put back under this host (its memory of the database is
/// newer) fails the restore line before any worker declared it, and the
/// check itself declares nothing: it only reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_an_undeclared_restore_and_declares_nothing() {
    let env = Env::sqlite().await;
    let create =
        ["client", "create", "acme", "--region", "ewr", "--plan", "vc2-1c-1gb", "--os-id", "2284", "--volume-gb", "40"];
    env.ok(&["init"]);
    let db = env.dir.path().join("oduflow.db");
    let backup = env.dir.path().join("backup.db");
    wal_copy(&db, &backup);
    env.ok(&create);
    // The worker remembers the database's high-water mark on this host.
    env.ok(&["worker", "--until-settled"]);
    let _ = std::fs::remove_file(format!("{}-shm", db.display()));
    wal_copy(&backup, &db);
    for _ in 0..2 {
        let o = env.run(&["check", "--json"]);
        let (code, checks) = report(&o);
        assert_eq!(code, Some(1), "{checks:?}");
        let r = line(&checks, "restore");
        assert!(!r.1 && r.2.contains("not declared yet") && r.2.contains("below"), "{r:?}");
    }
    let store = env.store().await;
    assert_eq!(store.restore_pending().await.unwrap(), None, "the check declared a restore");
    // The next worker does.
    let o = env.run(&["worker", "--until-settled"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(store.restore_pending().await.unwrap().is_some());
}
