//! Issue 18, "Run it as a service": what an operator sees and types. A
//! closed standard output, aligned lists, readable times, set-up errors
//! that name the command and the setting, ids refused like the API refuses
//! them, attestations, the simulator's help, backups, and the warnings a
//! worker logs at the default level.

use super::Env;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

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
