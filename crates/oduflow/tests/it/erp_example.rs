//! The example integration (`examples/erp-sync`), run against `oduflow
//! serve` and a worker: a client the ERP wants is created through its
//! outbox with idempotency keys, reported ready by a signed webhook, then
//! dropped and reported deleted. It needs `python3`: without it the test
//! fails, saying so.

use super::*;
use std::process::Child;

const WEBHOOK_KEY: &str = "webhook-key-for-the-example-0123456789";

fn example() -> String {
    format!("{}/../../examples/erp-sync/erp_sync.py", env!("CARGO_MANIFEST_DIR"))
}

fn python(args: &[&str]) -> Command {
    let mut c = Command::new("python3");
    c.arg(example()).args(args);
    c
}

/// The ERP's view of `name`, waited for until it is `kind`.
async fn erp_sees(db: &str, name: &str, kind: &str) {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let o = python(&["--db", db, "status"]).output().expect("python3 runs the example (install python3)");
        let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if status[name]["kind"] == kind {
            return;
        }
        assert!(Instant::now() < until, "the ERP never saw {name} {kind}: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_erp_drives_oduflow_through_its_outbox_and_webhooks() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let token = env.ok(&["token", "create", "erp", "--scope", "operate"]).trim().to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let hook = format!("http://127.0.0.1:{port}/");
    let added =
        env.cmd(&["webhook", "add", "erp", &hook, "--json"]).env("ODUFLOW_WEBHOOK_KEY", WEBHOOK_KEY).output().unwrap();
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let secret =
        serde_json::from_slice::<serde_json::Value>(&added.stdout).unwrap()["secret"].as_str().unwrap().to_owned();
    let spawn = |args: &[&str]| -> Child {
        env.cmd(args)
            .env("ODUFLOW_WEBHOOK_KEY", WEBHOOK_KEY)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut worker = spawn(&["worker"]);
    let mut serve = spawn(&["serve", "--listen", "127.0.0.1:0"]);
    let line = super::service::stderr_line(&mut serve, "oduflow serve: listening on");
    let api = format!("http://{}", super::service::address_after(&line, "listening on http://"));

    let db = env.dir.path().join("erp.db").display().to_string();
    let want = [
        "--db",
        &db,
        "want",
        "acme",
        "--region",
        "ewr",
        "--plan",
        "vc2-1c-1gb",
        "--os-id",
        "2284",
        "--volume-gb",
        "40",
    ];
    assert!(python(&want).status().expect("python3 runs the example (install python3)").success());
    let listen = format!("127.0.0.1:{port}");
    let mut erp =
        python(&["--db", &db, "run", "--api", &api, "--token", &token, "--secret", &secret, "--listen", &listen])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
    erp_sees(&db, "acme", "ready").await;
    assert!(python(&["--db", &db, "drop", "acme"]).status().unwrap().success());
    erp_sees(&db, "acme", "deleted").await;
    for child in [&mut erp, &mut worker, &mut serve] {
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let _ = child.wait();
    }
    // oduflow's trail names the ERP's token for both changes.
    let store = env.store().await;
    for kind in [EventKind::ClientCreated, EventKind::ClientDeleteRequested] {
        let e = store.events_by_kind(kind).await.unwrap();
        assert_eq!(e.len(), 1, "{kind:?} once: {e:?}");
        assert_eq!(e[0].actor.as_deref(), Some("api-token:erp"), "{e:?}");
    }
}
