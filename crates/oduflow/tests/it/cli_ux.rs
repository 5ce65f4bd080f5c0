//! Running it as a service: what an operator sees and types. A
//! closed standard output, aligned lists, readable times, set-up errors
//! that name the command and the setting, ids refused like the API refuses
//! them, attestations, the simulator's help, backups, and the warnings a
//! worker logs at the default level.

use super::{Env, KEY, bin, table_counts};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

oduflow_store::on_both_stores!(
    super::super::env_of =>
    commands_that_need_the_key_name_themselves_and_change_nothing,
    adopt_refuses_an_id_that_is_not_a_uuid_before_anything_is_touched,
    abandon_without_an_attestation_is_bad_input,
);

fn create(env: &Env, name: &str) {
    env.create_client_without_preflight(name);
}

/// Runs a command whose standard output is read like `| head -1` reads it:
/// one line, then the pipe is closed while the command may still write.
/// Gives the exit code and what it printed on standard error.
fn head_1(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `oduflow client list | head -1` (and every other printing command whose
/// reader goes away) ends quietly with exit code 0, as `ls | head -1` does:
/// a broken pipe is not an error, and never a panic (exit code 101).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_standard_output_ends_the_command_quietly() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    env.ok(&["token", "create", "alice"]);
    // More than a pipe holds (64 KiB on Linux), so the command is still
    // writing when the reader has gone: the pipe is closed under it.
    let store = env.store().await;
    let spec = oduflow_model::ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
    let long = "c".repeat(56);
    for i in 0..1200 {
        let name = oduflow_model::ClientName::parse(&format!("{long}-{i:04}")).unwrap();
        store.client_create(&name, &spec, "test", 1, 3).await.unwrap();
    }
    let listed = env.ok(&["client", "list"]);
    assert!(listed.len() > 80 * 1024, "the list must outgrow the pipe: {} bytes", listed.len());
    let first = format!("{long}-0000");
    for args in [
        &["client", "list"][..],
        &["client", "list", "--json"],
        &["client", "show", &first],
        &["client", "show", &first, "--json"],
        &["token", "list"],
        &["token", "list", "--json"],
        &["queue", "status"],
        &["orphan", "list"],
    ] {
        let (code, err) = head_1(env.cmd(args));
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?} printed on stderr: {err}");
    }
}

/// Each line's columns start where the header's do, whatever the lengths
/// of the names, statuses, reasons and ids in them.
#[track_caller]
fn assert_aligned(table: &str) {
    let starts = |line: &str| -> Vec<usize> {
        let b = line.as_bytes();
        (0..b.len()).filter(|&i| b[i] != b' ' && (i == 0 || b[i - 1] == b' ')).collect()
    };
    let mut lines = table.lines();
    let header = starts(lines.next().unwrap());
    for l in lines {
        assert_eq!(starts(l), header, "misaligned:\n{table}");
    }
}

/// A client that is ready, one blocked `uncertain_create` (every instance
/// create answered 500 by the simulator, so its outcome stays unknown),
/// and one pending with a long name. Gives the standard error of the
/// worker run that blocked the second, which ran at the default log level,
/// and how many instance creates the simulator answered 500 meanwhile.
async fn ready_blocked_and_pending(env: &Env) -> (String, usize) {
    env.ok(&["init"]);
    create(env, "ready-one");
    env.ok(&["worker", "--until-settled"]);
    env.sim.set_faults(oduflow_sim::Faults::server_errors_on(vec![oduflow_sim::Op::InstanceCreate])).unwrap();
    create(env, "lost");
    let before = env.sim.ledger().request_log.len();
    let o = env.cmd(&["worker", "--until-settled"]).env_remove("ODUFLOW_LOG").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let log = env.sim.ledger().request_log;
    let answered_500 = log[before..].iter().filter(|r| r.method == "POST" && r.route == "/v2/instances").count();
    env.sim.set_faults(oduflow_sim::Faults::default()).unwrap();
    create(env, &"p".repeat(63));
    let show =
        |n: &str| -> serde_json::Value { serde_json::from_str(&env.ok(&["client", "show", n, "--json"])).unwrap() };
    assert_eq!(show("ready-one")["status"], "ready");
    assert_eq!(show("lost")["blocked_reason"], "uncertain_create");
    (err, answered_500)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_columns_are_aligned() {
    let env = Env::sqlite().await;
    ready_blocked_and_pending(&env).await;
    let list = env.ok(&["client", "list"]);
    assert_eq!(list.lines().count(), 4, "{list}");
    assert!(list.contains("uncertain_create") && list.contains("ready") && list.contains(&"p".repeat(63)), "{list}");
    assert_aligned(&list);
    env.ok(&["token", "create", "a"]);
    env.ok(&["token", "create", "a-much-longer-token-name-than-the-other"]);
    env.ok(&["token", "revoke", "a"]);
    assert_aligned(&env.ok(&["token", "list"]));
}

/// `client list` selects as `GET /api/v1/clients` does (status, reason,
/// target, region, name pattern, time unchanged), refuses what the API
/// refuses with the same words (exit 2, nothing on standard output), and
/// its `--json` keeps the API's fields: scripts may rely on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_selects_and_its_json_is_stable() {
    let env = Env::sqlite().await;
    ready_blocked_and_pending(&env).await;
    let names = |args: &[&str]| -> Vec<String> {
        let v: serde_json::Value =
            serde_json::from_str(&env.ok(&[&["client", "list", "--json"][..], args].concat())).unwrap();
        v.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(names(&["--status", "blocked", "--reason", "uncertain_create"]), ["lost"]);
    assert_eq!(names(&["--status", "ready", "--region", "ewr", "--name", "ready-*"]), ["ready-one"]);
    assert_eq!(names(&["--name", "*-one", "--unchanged-for", "0s"]), ["ready-one"]);
    assert!(names(&["--region", "ams"]).is_empty() && names(&["--unchanged-for", "1d"]).is_empty());
    assert_eq!(names(&["--target", "present"]).len(), 3);
    for (args, says) in [
        (&["--status", "happy"][..], "status \"happy\" is none of: pending, provisioning"),
        (&["--reason", "sad"], "reason \"sad\" is none of:"),
        (&["--region", "EWR"], "is not a Vultr region id"),
        (&["--name", "Shop"], "name pattern"),
        (&["--unchanged-for", "2w"], "a whole number and a unit"),
        (&["--unchanged-for", "999d"], "from 0 to 365 days"),
    ] {
        let o = env.run(&[&["client", "list"][..], args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // The fields scripts read, as `GET /api/v1/clients` names them: a field
    // may be added (then here), never renamed or removed.
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["client", "list", "--json", "--name", "lost"])).unwrap();
    let keys: Vec<&str> = v[0].as_object().unwrap().keys().map(String::as_str).collect();
    #[rustfmt::skip]
    let stable = [
        "backups", "blocked_detail", "blocked_reason", "created_ms", "dns_name", "enable_ipv6",
        "firewall_group", "generation", "hostname", "id", "image", "ipv4", "ipv6", "key_fingerprint", "name", "observe_only",
        "os_id", "plan", "region", "ssh_keys", "status", "tags", "target", "updated_ms", "user_data_bytes",
        "volume_gb", "volume_id", "volume_mount_id", "volume_type", "vm_id", "vpcs",
    ];
    for k in stable {
        assert!(keys.contains(&k), "`client list --json` lost the field {k}: {keys:?}");
    }
    let added: Vec<&&str> = keys.iter().filter(|k| !stable.contains(k)).collect();
    assert!(added.is_empty(), "new fields {added:?}: add them to the stable list above");
}

/// The worker's warnings reach standard error at the default level (warn):
/// one line per 5xx, naming the method and the route (a template, never an
/// id), and one when a client becomes blocked, naming it, the reason and
/// the evidence. Neither the key nor an answer's body is in them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_and_a_block_are_logged_at_the_default_level() {
    let env = Env::sqlite().await;
    let (err, answered_500) = ready_blocked_and_pending(&env).await;
    let five: Vec<&str> =
        err.lines().filter(|l| l.contains("WARN") && l.contains("500") && l.contains("POST")).collect();
    assert!(answered_500 >= 1 && five.len() == answered_500, "{answered_500} answers 500:\n{err}");
    for l in five {
        assert!(l.split_whitespace().any(|w| w == "route=/v2/instances"), "{l}");
    }
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["client", "show", "lost", "--json"])).unwrap();
    let detail = v["blocked_detail"].as_str().unwrap();
    let blocked: Vec<&str> = err.lines().filter(|l| l.contains("WARN") && l.contains("blocked")).collect();
    assert_eq!(blocked.len(), 1, "{err}");
    assert!(
        blocked[0].contains("client=lost") && blocked[0].contains("uncertain_create") && blocked[0].contains(detail),
        "{err}"
    );
    assert!(!err.contains(KEY), "the key was logged: {err}");
}

/// The same for a 429, a connection that fails and a request that times out (ten minutes against
/// a wrong endpoint once went unnoticed): each logged at the default level,
/// with the method and the route template, and the client still becomes
/// ready (both are answered by waiting and asking again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_and_a_failed_connection_are_logged_at_the_default_level() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let reads = vec![
        oduflow_sim::Op::InstanceGet,
        oduflow_sim::Op::InstanceList,
        oduflow_sim::Op::BlockGet,
        oduflow_sim::Op::BlockList,
    ];
    for (name, faults, want) in [
        (
            "limited",
            oduflow_sim::Faults {
                burst_429: 1.0,
                burst_429_len: 1,
                retry_after_secs: 1,
                faults_max: Some(1),
                ops: reads.clone(),
                ..Default::default()
            },
            "vultr answered 429",
        ),
        (
            "dropped",
            oduflow_sim::Faults { lost_drop: 1.0, faults_max: Some(1), ops: reads.clone(), ..Default::default() },
            "connection failed",
        ),
        (
            // Answered after the request timeout (2 s here).
            "stalled",
            oduflow_sim::Faults {
                lost_stall: 1.0,
                stall_ms: 2600,
                faults_max: Some(1),
                ops: reads.clone(),
                ..Default::default()
            },
            "vultr request failed: timeout",
        ),
    ] {
        create(&env, name);
        let made = |env: &Env| env.sim.ledger().faults.iter().filter(|f| f.fault.is_some()).count();
        let before = made(&env);
        env.sim.set_faults(faults).unwrap();
        let o =
            env.cmd(&["worker", "--until-settled"]).env_remove("ODUFLOW_LOG").env_remove("RUST_LOG").output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        assert_eq!(made(&env) - before, 1, "the fault was not made");
        let warned: Vec<&str> = err.lines().filter(|l| l.contains("WARN") && l.contains(want)).collect();
        assert_eq!(warned.len(), 1, "{want:?} is not logged once at the default level:\n{err}");
        assert!(warned[0].contains("method=GET") && warned[0].contains("route=/v2/"), "{}", warned[0]);
        assert!(!warned[0].contains("/v2/instances/0") && !err.contains(KEY), "{err}");
        let v: serde_json::Value = serde_json::from_str(&env.ok(&["client", "show", name, "--json"])).unwrap();
        assert_eq!(v["status"], "ready", "{v}");
        env.sim.set_faults(oduflow_sim::Faults::default()).unwrap();
    }
}

/// `client show` prints, for a blocked client, the very commands the
/// dashboard and the API suggest (`oduflow_server::resolve`), in its text
/// and in `--json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_show_prints_the_commands_that_resolve_a_block() {
    let env = Env::sqlite().await;
    ready_blocked_and_pending(&env).await;
    let store = env.store().await;
    let row = store.client_get("lost").await.unwrap().unwrap();
    let receipts = store.receipts_for_client(&row.id).await.unwrap();
    let want = oduflow_server::resolve::resolutions(&row, &receipts);
    assert!(want.len() >= 2, "{want:?}");
    let text = env.ok(&["client", "show", "lost"]);
    for r in &want {
        assert!(text.lines().any(|l| l.contains(&r.command) && l.contains(&r.when)), "{} missing:\n{text}", r.command);
    }
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["client", "show", "lost", "--json"])).unwrap();
    let cmds: Vec<&str> = v["resolve"].as_array().unwrap().iter().map(|r| r["command"].as_str().unwrap()).collect();
    assert_eq!(cmds, want.iter().map(|r| r.command.as_str()).collect::<Vec<_>>());
    // A client that is not blocked has nothing to resolve.
    assert!(!env.ok(&["client", "show", "ready-one"]).contains("oduflow reconcile"));
}

/// Seconds since the epoch of an RFC 3339 UTC time `YYYY-MM-DDTHH:MM:SSZ`,
/// counted day by day (not the formatter's algorithm).
fn epoch_secs(t: &str) -> i64 {
    let b = t.as_bytes();
    assert!(t.len() == 20 && b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && b[13] == b':' && b[16] == b':', "{t}");
    assert!(t.ends_with('Z'), "{t}");
    let n = |r: std::ops::Range<usize>| t[r].parse::<i64>().unwrap();
    let (y, m, d, h, mi, s) = (n(0..4), n(5..7), n(8..10), n(11..13), n(14..16), n(17..19));
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_len = |mo: i64| match mo {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    assert!((1..=12).contains(&m) && (1..=month_len(m)).contains(&d) && h < 24 && mi < 60 && s < 60, "{t}");
    let days =
        (1970..y).map(|y| if leap(y) { 366 } else { 365 }).sum::<i64>() + (1..m).map(month_len).sum::<i64>() + d - 1;
    days * 86_400 + h * 3600 + mi * 60 + s
}

/// People read times as RFC 3339 UTC (`client show`'s events, `token
/// list`); `--json` keeps the epoch milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_are_shown_in_rfc_3339_utc_and_json_keeps_milliseconds() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    create(&env, "acme");
    env.ok(&["client", "delete", "acme"]);
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["client", "show", "acme", "--json"])).unwrap();
    let events = v["events"].as_array().unwrap();
    assert!(events.len() >= 2, "{v}");
    let text = env.ok(&["client", "show", "acme"]);
    let lines: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("events")).skip(1).collect();
    assert_eq!(lines.len(), events.len(), "{text}");
    for (line, e) in lines.iter().zip(events) {
        let at_ms = e["at_ms"].as_i64().expect("--json keeps the raw number");
        let shown = line.split_whitespace().next().unwrap();
        assert_eq!(epoch_secs(shown), at_ms.div_euclid(1000), "{line}");
        assert!(line.contains(e["kind"].as_str().unwrap()), "{line}");
    }
    env.ok(&["token", "create", "alice"]);
    env.ok(&["token", "create", "bob"]);
    env.ok(&["token", "revoke", "bob"]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&env.ok(&["token", "list", "--json"])).unwrap();
    let text = env.ok(&["token", "list"]);
    for r in &rows {
        let line = text.lines().find(|l| l.split_whitespace().next() == r["name"].as_str()).expect(&text);
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[1], r["scope"], "{line}");
        assert_eq!(epoch_secs(cols[2]), r["created_ms"].as_i64().unwrap().div_euclid(1000), "{line}");
        match r["revoked_ms"].as_i64() {
            Some(ms) => assert_eq!(epoch_secs(cols[3]), ms.div_euclid(1000), "{line}"),
            None => assert_eq!(cols[3], "-", "{line}"),
        }
    }
}

/// Every command that talks to Vultr, run without VULTR_API_KEY: one line
/// naming the command and the variable, exit code 2 (bad set-up), and
/// nothing stored or sent.
async fn commands_that_need_the_key_name_themselves_and_change_nothing(env: Env) {
    env.ok(&["init"]);
    create(&env, "acme");
    let store = env.store().await;
    let before = (table_counts(&store).await, env.sim.ledger().request_log.len());
    let id = "0b1e2c3d-0000-4000-8000-000000000000";
    let cases: [(&[&str], &str); 9] = [
        (&["reconcile", "acme"], "oduflow reconcile"),
        (&["reconcile", "--all"], "oduflow reconcile"),
        (&["adopt", "acme", "--kind", "vm", "--id", id], "oduflow adopt"),
        (&["adopt", "acme", "--kind", "dns", "--id", id], "oduflow adopt"),
        (&["abandon", "acme", "--kind", "dns", "--by", "alice", "--reason", "checked"], "oduflow abandon"),
        (&["credentials", "rotate"], "oduflow credentials rotate"),
        (&["orphan", "adopt", id], "oduflow orphan adopt"),
        (&["orphan", "delete", id, "--by", "alice", "--reason", "checked"], "oduflow orphan delete"),
        (&["worker", "--until-settled"], "oduflow worker"),
    ];
    for (args, command) in cases {
        let o = env.cmd(args).env_remove("VULTR_API_KEY").env("ODUFLOW_DNS_DOMAIN", "example.com").output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&format!("{command} needs the Vultr API key")) && err.contains("VULTR_API_KEY"), "{err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    assert_eq!((table_counts(&store).await, env.sim.ledger().request_log.len()), before);
}

/// A Vultr resource id is a UUID for every kind `adopt` takes; anything
/// else is refused as the API refuses it (exit code 2, one line), before
/// the database or the provider is asked.
async fn adopt_refuses_an_id_that_is_not_a_uuid_before_anything_is_touched(env: Env) {
    env.ok(&["init"]);
    create(&env, "acme");
    let store = env.store().await;
    let before = (table_counts(&store).await, env.sim.ledger().request_log.len());
    let not_ids = ["xyz", "abc-123", "0b1e2c3d00004000800000000000000", "0b1e2c3d-0000-4000-8000-00000000000g", ""];
    for kind in ["vm", "volume", "dns"] {
        for id in not_ids {
            let mut cmd = env.cmd(&["adopt", "acme", "--kind", kind, "--id", id]);
            let o = cmd.env("ODUFLOW_DNS_DOMAIN", "example.com").output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{kind} {id:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
            assert!(err.contains("UUID"), "{kind} {id:?}: {err}");
        }
    }
    // The rule is the API's.
    for id in not_ids {
        assert!(oduflow_model::check_resource_id(id).is_err(), "{id:?}");
    }
    assert!(oduflow_model::check_resource_id("0b1e2c3d-0000-4000-8000-000000000000").is_ok());
    assert_eq!((table_counts(&store).await, env.sim.ledger().request_log.len()), before);
}

/// `--by` and `--reason` are the attestation: empty or blank is bad input
/// (exit code 2, one line) for every kind, and for `orphan delete`, and
/// nothing is recorded.
async fn abandon_without_an_attestation_is_bad_input(env: Env) {
    env.ok(&["init"]);
    create(&env, "acme");
    let store = env.store().await;
    let before = (table_counts(&store).await, env.sim.ledger().request_log.len());
    for kind in ["vm", "volume", "attach", "dns"] {
        for (by, reason) in [("", "checked"), ("  ", "checked"), ("alice", ""), ("alice", " \t ")] {
            let o = env
                .cmd(&["abandon", "acme", "--kind", kind, "--by", by, "--reason", reason])
                .env("ODUFLOW_DNS_DOMAIN", "example.com")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{kind} {by:?} {reason:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
    }
    // `orphan delete` takes the same attestation.
    let id = "0b1e2c3d-0000-4000-8000-000000000000";
    for (by, reason) in [("", "checked"), ("alice", "  ")] {
        let o = env.run(&["orphan", "delete", id, "--by", by, "--reason", reason]);
        assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!((table_counts(&store).await, env.sim.ledger().request_log.len()), before);
}

/// A value outside its range names the setting (its environment variable
/// and its key in oduflow.toml) and the range, from either source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_out_of_range_is_named_with_its_range() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let settings = [
        ("ODUFLOW_POLL_INTERVAL_MS", "poll_interval_ms", "-1"),
        ("ODUFLOW_OBSERVATIONS_MAX", "observations_max", "0"),
        ("ODUFLOW_RATE_PER_SEC", "rate_per_sec", "0"),
        ("ODUFLOW_PER_PAGE", "per_page", "501"),
        ("ODUFLOW_PER_PAGE", "per_page", "-1"),
        ("ODUFLOW_REQUEST_TIMEOUT_MS", "request_timeout_ms", "0"),
        ("ODUFLOW_CONCURRENCY", "concurrency", "0"),
        ("ODUFLOW_ATTEMPTS_MAX", "attempts_max", "0"),
        ("ODUFLOW_ATTEMPTS_MAX", "attempts_max", "4294967296"),
        ("ODUFLOW_READY_WAIT_MS", "ready_wait_ms", "-5"),
    ];
    let file = env.dir.path().join("bad.toml");
    for (var, key, value) in settings {
        let from_env = env.cmd(&["client", "list"]).env(var, value).output().unwrap();
        std::fs::write(&file, format!("{key} = {value}\n")).unwrap();
        // The environment wins over the file: the harness's own settings go.
        let from_file =
            env.cmd(&["--config", file.to_str().unwrap(), "client", "list"]).env_remove(var).output().unwrap();
        for (source, o) in [("environment", from_env), ("file", from_file)] {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{var}={value} ({source}): {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
            assert!(
                err.contains(var) && err.contains(key),
                "{var}={value} ({source}) does not name the setting: {err}"
            );
            assert!(err.contains(value), "{var}={value} ({source}): the value is not shown: {err}");
            assert!(err.contains(" to ") || err.contains("at least"), "{var}={value} ({source}): no range: {err}");
        }
    }
    // Vultr's own limit, for Vultr itself, and a rate group's name.
    let o = env
        .cmd(&["client", "list"])
        .env("ODUFLOW_RATE_PER_SEC", "31")
        .env("ODUFLOW_VULTR_URL", "https://api.vultr.com/v2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("ODUFLOW_RATE_PER_SEC") && err.contains("rate_per_sec") && err.contains("1 to 30"), "{err}");
    let o = env.cmd(&["client", "list"]).env("ODUFLOW_RATE_GROUP", "host a").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("ODUFLOW_RATE_GROUP") && err.contains("rate_group") && err.contains("1 to 64"), "{err}");
}

/// A PostgreSQL URL naming a database the server does not have: one line
/// that says so once, exit code 1 like the other connection failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_postgres_database_is_reported_once() {
    let env = Env::sqlite().await;
    let admin = oduflow_store::testing::pg_admin_url();
    let name = format!("odf_missing_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    for args in [&["client", "list"][..], &["init"]] {
        let o = env.cmd(args).env("ODUFLOW_DATABASE_URL", &url).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(err.matches("does not exist").count(), 1, "{err}");
        assert!(err.contains(&name), "{err}");
    }
}

/// `oduflow sim --help` says the simulator accepts only the key in
/// VULTR_API_KEY.
#[test]
fn sim_help_names_the_only_key_it_accepts() {
    let o = Command::new(bin()).args(["sim", "--help"]).output().unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("VULTR_API_KEY") && help.contains("only"), "{help}");
}

/// `oduflow backup FILE` on SQLite: a consistent copy (`VACUUM INTO`) taken
/// while another process writes, which opens and holds every client
/// committed before it began. On PostgreSQL it refuses, naming pg_dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_copies_a_sqlite_database_while_it_is_written() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let store = env.store().await;
    let spec = oduflow_model::ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
    for i in 0..50 {
        let name = oduflow_model::ClientName::parse(&format!("before-{i}")).unwrap();
        store.client_create(&name, &spec, "test", 1, 3).await.unwrap();
    }
    // A writer that goes on through the backup.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, spec, stop) = (store.clone(), spec.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let name = oduflow_model::ClientName::parse(&format!("during-{n}")).unwrap();
                store.client_create(&name, &spec, "test", 1, 3).await.unwrap();
                n += 1;
            }
            n
        })
    };
    while store.client_get("during-3").await.unwrap().is_none() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let copy = env.dir.path().join("copy.db");
    let out = env.ok(&["backup", copy.to_str().unwrap()]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(out.contains(copy.to_str().unwrap()), "{out}");
    let copied = oduflow_store::Store::connect(&format!("sqlite://{}", copy.display()), false).await.unwrap();
    let names: Vec<String> = copied.client_list().await.unwrap().into_iter().map(|c| c.name).collect();
    for i in 0..50 {
        assert!(names.contains(&format!("before-{i}")), "before-{i} missing from the copy");
    }
    let during = names.iter().filter(|n| n.starts_with("during-")).count();
    assert!(during >= 4 && during <= written, "{during} of {written} written during the backup");
    // One writer, one commit after the other: the snapshot holds a prefix.
    for i in 0..during {
        assert!(names.contains(&format!("during-{i}")), "during-{i} missing, {during} in the copy");
    }
    // Every client in the copy has its intent and its job: no torn write.
    for c in copied.client_list().await.unwrap() {
        assert_eq!(c.infra.generation, 1, "{}", c.name);
    }
    assert_eq!(copied.queue_status(i64::MAX).await.unwrap().queued as usize, names.len());
    // Refused: an existing file, and a PostgreSQL database.
    let o = env.run(&["backup", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let pg = oduflow_store::testing::pg_admin_url();
    let mut cmd = env.cmd(&["backup", env.dir.path().join("pg.db").to_str().unwrap()]);
    let o = cmd.env("ODUFLOW_DATABASE_URL", pg).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("pg_dump") && err.trim().lines().count() == 1, "{err}");
    assert!(!env.dir.path().join("pg.db").exists());
}

/// `oduflow bulk` refuses what `POST /api/v1/bulk/...` refuses (no
/// selection, a bad word, a blank attestation, DNS records) with nothing
/// recorded and no request; a dry run records nothing; a real action that
/// the protocol refuses for some clients says so and exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_commands_refuse_bad_input_and_dry_runs_record_nothing() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    create(&env, "acme");
    create(&env, "shop");
    let store = env.store().await;
    let text = || oduflow_store::testing::all_text(&store);
    let before = (text().await.unwrap(), env.sim.ledger().request_log.len());
    let abandon = |extra: &[&'static str]| {
        let mut a = vec!["bulk", "abandon", "--kind", "vm", "--by", "alice", "--why", "checked"];
        a.extend_from_slice(extra);
        a
    };
    for (args, code, says) in [
        (vec!["bulk", "reconcile"], 1, "needs a selection"),
        (vec!["bulk", "reconcile", "--reason", "sunspots"], 2, "reason \"sunspots\" is none of"),
        (vec!["bulk", "reconcile", "--name", "Bad_Name"], 2, "name pattern"),
        (vec!["bulk", "reconcile", "--unchanged-for", "forever"], 2, "duration"),
        (vec!["bulk", "abandon", "--name", "acme", "--kind", "vm", "--by", "alice", "--why", " "], 2, "--why"),
        (vec!["bulk", "abandon", "--name", "acme", "--kind", "dns", "--by", "a", "--why", "b"], 2, "dns"),
        (abandon(&["--name", "*", "--dry-run"]), 0, "would be done, 2 refused"),
        (abandon(&["--name", "*"]), 1, "2 clients refused"),
        (vec!["bulk", "reconcile", "--name", "*", "--dry-run"], 0, "2 would be done"),
    ] {
        let o = env.run(&args);
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(code), "{args:?}: {out}{err}");
        assert!(out.contains(says) || err.contains(says), "{args:?} does not say {says:?}: {out}{err}");
    }
    assert_eq!((text().await.unwrap(), env.sim.ledger().request_log.len()), before, "something was recorded");

    let out = env.ok(&["bulk", "reconcile", "--name", "ac*", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!((&v["items"][0]["name"], &v["items"][0]["outcome"]), (&"acme".into(), &"done".into()), "{v}");
}

/// `client update --dry-run` and `client delete --dry-run` print the plan
/// (field by field with each change's effect; each resource and what
/// deletion does), refuse what the real command refuses with the same
/// words and exit code, and record nothing and send nothing but reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_print_the_plan_and_record_nothing() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    create(&env, "acme");
    env.ok(&["worker", "--until-settled"]);
    let store = env.store().await;
    let writes = || {
        let ledger = env.sim.ledger();
        ledger.requests.iter().filter(|(r, _)| !r.starts_with("GET ")).map(|(_, n)| *n).sum::<u64>()
    };
    // The rate budget aside: reads spend it.
    let text = || oduflow_store::testing::all_text_but(&store, &["rate_budget", "rate_budget_usage"]);
    let before = (text().await.unwrap(), writes());

    let out = env.ok(&["client", "update", "acme", "--plan", "vc2-2c-4gb", "--tag", "eu", "--dry-run"]);
    assert!(out.contains("acme: dry run, nothing recorded"), "{out}");
    let plan = out.lines().find(|l| l.starts_with("plan ")).unwrap_or_else(|| panic!("{out}"));
    assert!(plan.contains("vc2-1c-1gb") && plan.contains("vc2-2c-4gb") && plan.contains("reboots"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("tags ") && l.contains("no reboot")), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["client", "update", "acme", "--volume-gb", "80", "--dry-run", "--json"]))
            .unwrap();
    assert_eq!((&json["changes"][0]["field"], &json["changes"][0]["to"]), (&"volume_gb".into(), &"80".into()));

    let dry = env.run(&["client", "update", "acme", "--region", "sjc", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(2), "{}", String::from_utf8_lossy(&dry.stderr));

    let out = env.ok(&["client", "delete", "acme", "--dry-run"]);
    let c = store.client_get("acme").await.unwrap().unwrap();
    for id in [c.infra.vm_id.unwrap().0, c.infra.volume_id.unwrap().0] {
        assert!(out.contains(&format!("{id}, confirmed by GET 404")), "{out}");
    }
    assert!(out.contains("volume detached from vm"), "{out}");
    assert_eq!((text().await.unwrap(), writes()), before, "a dry run recorded");

    let real = env.run(&["client", "update", "acme", "--region", "sjc"]);
    assert_eq!((real.status.code(), real.stderr), (dry.status.code(), dry.stderr), "refused alike");
}

/// `oduflow import` refuses the filters the API refuses (exit code 2,
/// nothing read), its dry run records nothing, and `client promote` refuses
/// a client that is not observed only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_and_promote_refuse_what_the_api_refuses() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    create(&env, "acme");
    let store = env.store().await;
    let before = (table_counts(&store).await, env.sim.ledger().request_log.len());
    for args in [&["import", "--region", "EWR1"][..], &["import", "--label", ""], &["client", "promote", "No_Name"]] {
        let o = env.run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!((table_counts(&store).await, env.sim.ledger().request_log.len()), before, "bad input read or wrote");
    let out = env.ok(&["import", "--dry-run"]);
    assert!(out.contains("dry run, nothing recorded: 0 servers"), "{out}");
    let o = env.run(&["client", "promote", "acme"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not observed only"));
    assert_eq!(table_counts(&store).await, before.0, "recorded something");
}

/// `oduflow events` reads the feed as the API does: oldest first from any
/// cursor, each event once, with its client's name; `--json` in the API's
/// shape; and it refuses what the API refuses, with the same words (exit
/// code 2), nothing recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_read_the_feed_and_refuse_what_the_api_refuses() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    create(&env, "acme");
    create(&env, "beta");
    let store = env.store().await;
    let total = oduflow_store::testing::table_count(&store, "events").await;
    assert!(total >= 2, "{total}");
    let first = env.ok(&["events", "--limit", "1"]);
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines.len(), 2, "{first}");
    assert!(lines[0].contains("client_created") && lines[0].contains("acme"), "{first}");
    let next =
        lines[1].strip_prefix("next: ").and_then(|l| l.split_whitespace().next()).unwrap_or_else(|| panic!("{first}"));
    assert!(lines[0].trim_start().starts_with(&format!("{next} ")), "the cursor is the event's position: {first}");
    let rest: serde_json::Value = serde_json::from_str(&env.ok(&["events", "--after", next, "--json"])).unwrap();
    let events = rest["events"].as_array().unwrap();
    assert_eq!(events.len() as i64, total - 1, "{rest}");
    assert!(events.iter().any(|e| e["kind"] == "client_created" && e["client"] == "beta"), "{rest}");
    assert_eq!(rest["next"], rest["head"], "{rest}");

    let before = oduflow_store::testing::all_text_but(&store, &[]).await.unwrap();
    for (args, words) in [
        (&["events", "--after=-1"][..], "after must be a feed position"),
        (&["events", "--limit", "0"], "limit must be within 1..=1000"),
        (&["events", "--wait", "31"], "wait must be within 0..=30 seconds"),
        (&["events", "--after", "999999999999999999"], "older copy"),
    ] {
        let o = env.run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
    assert_eq!(oduflow_store::testing::all_text_but(&store, &[]).await.unwrap(), before, "a read recorded");
}

/// `client create` refuses what the catalog lacks before anything is
/// stored, in the words the API's create answers 422 with (the API test
/// `a_create_is_refused_what_the_catalog_lacks_unless_told_not_to_check`
/// checks the same cases): both call the one preflight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_create_refuses_what_the_catalog_lacks_as_the_api_does() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let store = env.store().await;
    // The catalog's reads spend the rate budget, and a process's first
    // reading of the database's clock anchors it.
    let skip = ["rate_budget", "rate_budget_usage", "clock_anchor"];
    let before = oduflow_store::testing::all_text_but(&store, &skip).await.unwrap();
    for (region, plan, why) in [
        ("mel", "vc2-1c-1gb", "region mel offers no high_perf block storage"),
        ("lax", "vhf-1c-1gb", "plan vhf-1c-1gb is not sold in region lax"),
        ("ewrr", "vc2-1c-1gb", "ewrr"),
        ("ewr", "vc2-1c-1gbb", "vc2-1c-1gbb"),
    ] {
        let args =
            ["client", "create", "acme", "--region", region, "--plan", plan, "--os-id", "2284", "--volume-gb", "40"];
        let o = env.run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{region} {plan}: {err}");
        assert!(err.contains(why) && err.contains("nothing was stored"), "{region} {plan}: {err}");
    }
    let after = oduflow_store::testing::all_text_but(&store, &skip).await.unwrap();
    assert_eq!(after, before, "a refused create stored something");
}

/// The files oduflow creates (the SQLite database and the files SQLite
/// keeps beside it, a backup, the lock folder, the state directory) are its user's
/// alone whatever the umask: under umask 022 they were 0644 and 0755.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_oduflow_creates_are_private_under_umask_022() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::sqlite().await;
    let under_022 = |args: &[&str]| {
        let inner = env.cmd(args);
        let mut c = Command::new("sh");
        c.arg("-c").arg("umask 022 && exec \"$0\" \"$@\"").arg(inner.get_program()).args(inner.get_args());
        c.current_dir(env.dir.path());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    under_022(&["init"]);
    under_022(&crate::client_create_args("acme", &["--no-preflight"]));
    under_022(&["worker", "--until-settled"]);
    under_022(&["backup", "copy.db"]);
    let mode = |name: &str| {
        let m = std::fs::metadata(env.dir.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        m.permissions().mode() & 0o777
    };
    assert_eq!(mode("oduflow.db"), 0o600, "the database");
    assert_eq!(mode("copy.db"), 0o600, "a backup");
    for beside in ["oduflow.db-wal", "oduflow.db-shm"] {
        if env.dir.path().join(beside).exists() {
            assert_eq!(mode(beside), 0o600, "{beside}");
        }
    }
    assert_eq!(mode("oduflow.db.locks"), 0o700, "the lock folder");
    assert_eq!(mode("state"), 0o700, "the state directory");
}
