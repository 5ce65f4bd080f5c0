//! Issue 18, "Run it as a service": what an operator sees and types. A
//! closed standard output, aligned lists, readable times, set-up errors
//! that name the command and the setting, ids refused like the API refuses
//! them, attestations, the simulator's help, backups, and the warnings a
//! worker logs at the default level.

use super::Env;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn create(env: &Env, name: &str) {
    env.ok(&[
        "client",
        "create",
        name,
        "--region",
        "ewr",
        "--plan",
        "vc2-1c-1gb",
        "--os-id",
        "2284",
        "--volume-gb",
        "40",
        "--no-preflight",
    ]);
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
        store.client_create(&name, &spec, 1, 3).await.unwrap();
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
    env.sim
        .set_faults(oduflow_sim::Faults {
            error_5xx: 1.0,
            ops: vec![oduflow_sim::Op::InstanceCreate],
            ..Default::default()
        })
        .unwrap();
    create(env, "lost");
    let before = env.sim.ledger().request_log.len();
    let o = env.cmd(&["worker", "--until-settled"]).env_remove("ODUFLOW_LOG").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let log = env.sim.ledger().request_log;
    let answered_500 = log[before..].iter().filter(|r| r.method == "POST" && r.route == "/v2/instances").count();
    env.sim.set_faults(oduflow_sim::Faults::default()).unwrap();
    create(env, &"p".repeat(63));
    let show = |n: &str| -> serde_json::Value { serde_json::from_str(&env.ok(&["client", "show", n, "--json"])).unwrap() };
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
