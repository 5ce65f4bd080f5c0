//! Running oduflow as a service: a worker stops gracefully on
//! SIGTERM or SIGINT and leaves nothing claimed, a second signal stops it at
//! once, its `/metrics` are scraped and parsed while it runs, and `serve`
//! without a key serves the dashboard read-only.

use super::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};

oduflow_store::on_both_stores!(
    super::env_of =>
    sigterm_mid_run_finishes_the_run_releases_everything_and_the_next_worker_continues_at_once,
    sigterm_stops_claiming_the_jobs_still_queued,
    a_run_past_the_shutdown_grace_is_cut_and_its_claim_ends_with_the_process,
    sigterm_during_a_slow_create_sends_it_once_and_records_its_answer,
    a_second_signal_stops_at_once,
    worker_metrics_are_scraped_and_parsed_while_it_runs,
);

/// Stops a worker process gracefully (SIGTERM) and waits for it.
pub(super) fn service_stop(child: &mut std::process::Child) {
    signal(child, "TERM");
    let (status, _) = wait_bounded(child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// Sends `sig` (`TERM`, `INT`) to a child process.
fn signal(child: &std::process::Child, sig: &str) {
    let ok = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap().success();
    assert!(ok, "kill -{sig} failed");
}

/// Waits for `child` to exit, at most `bound`; its exit status, and how long.
fn wait_bounded(child: &mut std::process::Child, bound: Duration) -> (std::process::ExitStatus, Duration) {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st, start.elapsed());
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            panic!("the process did not exit within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first line of `child`'s standard error that starts with `prefix`
/// (the rest is read on, so that the child never blocks on a full pipe).
pub(super) fn stderr_line(child: &mut std::process::Child, prefix: &str) -> String {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.by_ref().map(|l| l.unwrap()).find(|l| l.starts_with(prefix));
    std::thread::spawn(move || for _ in lines.by_ref() {});
    line.unwrap_or_else(|| panic!("no line starting {prefix:?} on standard error"))
}

/// The `host:port` that follows `marker` in `line`.
pub(super) fn address_after(line: &str, marker: &str) -> String {
    line.split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{marker:?} missing from {line:?}"))
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Waits until the run of the `noop` job that records `noop_started` has
/// begun (its marker is committed on its own).
async fn wait_started(store: &Store, n: usize) {
    let start = Instant::now();
    while store.events_by_kind(EventKind::NoopStarted).await.unwrap().len() < n {
        assert!(start.elapsed() < Duration::from_secs(30), "the worker never started the job");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a worker running one job at a time (with `setting` in its
/// environment), sends it SIGTERM once the first `noop` run has begun, and
/// waits for it (at most 60 s): its exit status, how long it took to exit,
/// and its standard error.
async fn term_once_started(
    env: &Env,
    store: &Store,
    setting: (&str, &str),
) -> (std::process::ExitStatus, Duration, String) {
    let mut child = env
        .cmd(&["worker", "--concurrency", "1"])
        .env(setting.0, setting.1)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_started(store, 1).await;
    signal(&child, "TERM");
    let (status, took) = wait_bounded(&mut child, Duration::from_secs(60));
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status, took, err)
}

/// SIGTERM, what systemd sends, must not kill the worker outright: the
/// run under way finishes and commits, nothing stays
/// claimed, the process exits 0, and the next worker takes the same
/// client's next job at once (a lease setting, ignored, changes nothing).
async fn sigterm_mid_run_finishes_the_run_releases_everything_and_the_next_worker_continues_at_once(env: Env) {
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 1).await;
    env.ok(&["worker", "--until-settled"]);
    let first = store.job_enqueue(&noop_job(&clients[0], 1500)).await.unwrap().id();

    let (status, took, err) = term_once_started(&env, &store, ("ODUFLOW_LOG", "warn")).await;
    assert_eq!(status.code(), Some(0), "a SIGTERM'd worker must exit 0; stderr:\n{err}");
    assert!(err.contains("SIGTERM: stopping gracefully"), "{err}");
    println!("SIGTERM to exit: {took:?} (the run under way slept 1.5 s)");

    // The run under way finished and committed: not cut, not left to a lease.
    let j = store.job_get(first).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Done, "the run under way was not let finish");
    assert_eq!(store.events_by_kind(EventKind::NoopRan).await.unwrap().len(), 1);
    assert_eq!(oduflow_store::testing::sqlite_lease_holders(&store).await.unwrap(), vec![], "a lease was left");
    assert!(!oduflow_store::testing::sqlite_client_locked(&store, &clients[0]).unwrap());
    assert_eq!(oduflow_store::testing::pg_idle_in_transaction_pids(&store).await.unwrap(), Vec::<i32>::new());

    // The next worker continues at once. It is started with the old lease
    // setting at 10 minutes: ignored, and said so in one line.
    let next = store.job_enqueue(&noop_job(&clients[0], 0)).await.unwrap().id();
    let start = Instant::now();
    let o = env.cmd(&["worker", "--until-settled"]).env("ODUFLOW_LEASE_MS", "600000").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("ODUFLOW_LEASE_MS (lease_ms in the config file) is ignored").count(), 1, "{err}");
    assert_eq!(store.job_get(next).await.unwrap().unwrap().state, JobState::Done);
    assert!(start.elapsed() < Duration::from_secs(60), "the next worker waited {:?}", start.elapsed());

    // SIGINT (Ctrl-C) does the same.
    let third = store.job_enqueue(&noop_job(&clients[0], 500)).await.unwrap().id();
    let mut child = env.cmd(&["worker"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_started(&store, 3).await;
    signal(&child, "INT");
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(store.job_get(third).await.unwrap().unwrap().state, JobState::Done);
}

/// After SIGTERM no job is claimed: the run under way finishes, the job
/// queued behind it (another client's, due now) stays queued for the next
/// worker. With one run at a time, a worker that kept claiming would take
/// it as soon as the first run ended.
async fn sigterm_stops_claiming_the_jobs_still_queued(env: Env) {
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 2).await;
    env.ok(&["worker", "--until-settled"]);
    // Long enough for the enqueue and the signal on a loaded machine.
    let first = store.job_enqueue(&noop_job(&clients[0], 5000)).await.unwrap().id();
    let mut child =
        env.cmd(&["worker", "--concurrency", "1"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_started(&store, 1).await;
    let second = store.job_enqueue(&noop_job(&clients[1], 0)).await.unwrap().id();
    signal(&child, "TERM");
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(60));
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(store.job_get(first).await.unwrap().unwrap().state, JobState::Done, "{err}");
    assert_eq!(store.job_get(second).await.unwrap().unwrap().state, JobState::Queued, "claimed after SIGTERM: {err}");
    assert_eq!(store.events_by_kind(EventKind::NoopStarted).await.unwrap().len(), 1, "{err}");
    assert!(!oduflow_store::testing::sqlite_client_locked(&store, &clients[1]).unwrap());
    env.ok(&["worker", "--until-settled"]);
    assert_eq!(store.job_get(second).await.unwrap().unwrap().state, JobState::Done);
}

/// A run that outlasts the shutdown grace (`ODUFLOW_SHUTDOWN_GRACE_MS`) is
/// cut as a crash would cut it: the worker exits 1 within the grace and a
/// little, saying how many runs it cut; the run's transaction never
/// committed; its claim ends with the process, so the next worker starts
/// the same job again at once.
async fn a_run_past_the_shutdown_grace_is_cut_and_its_claim_ends_with_the_process(env: Env) {
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 1).await;
    env.ok(&["worker", "--until-settled"]);
    // An idle worker's stop is not a cut, even with no grace at all
    // (nothing is queued yet).
    let mut idle = env
        .cmd(&["worker"])
        .env("ODUFLOW_SHUTDOWN_GRACE_MS", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    stderr_line(&mut idle, "oduflow worker ");
    signal(&idle, "TERM");
    let (status, _) = wait_bounded(&mut idle, Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "an idle worker's stop with a grace of 0 was a cut");
    // A grace the service unit would end with SIGKILL is warned about.
    let o = env.cmd(&["worker", "--until-settled"]).env("ODUFLOW_SHUTDOWN_GRACE_MS", "120000").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.lines().any(|l| l.contains("WARN") && l.contains("shutdown grace 120000 ms")), "{err}");
    let job = store.job_enqueue(&noop_job(&clients[0], 60_000)).await.unwrap().id();
    let (status, took, err) = term_once_started(&env, &store, ("ODUFLOW_SHUTDOWN_GRACE_MS", "700")).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("1 run(s) still under way after the shutdown grace of 700 ms"), "{err}");
    assert!(took < Duration::from_secs(20), "the grace of 700 ms took {took:?}");
    println!("SIGTERM past a 700 ms grace to exit: {took:?}");
    assert_eq!(store.job_get(job).await.unwrap().unwrap().state, JobState::Queued);
    assert!(store.events_by_kind(EventKind::NoopRan).await.unwrap().is_empty());
    assert!(
        !oduflow_store::testing::sqlite_client_locked(&store, &clients[0]).unwrap(),
        "the claim outlived its process"
    );
    // The server ends the cut transaction once it sees the socket closed.
    let start = Instant::now();
    while !oduflow_store::testing::pg_idle_in_transaction_pids(&store).await.unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "the cut run's transaction outlived its process");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The next worker takes the same job up at once.
    let mut next =
        env.cmd(&["worker", "--concurrency", "1"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_started(&store, 2).await;
    next.kill().unwrap();
    next.wait().unwrap();
    // A grace out of range is refused, naming the setting.
    let o = env.cmd(&["worker"]).env("ODUFLOW_SHUTDOWN_GRACE_MS", "-1").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("ODUFLOW_SHUTDOWN_GRACE_MS") && err.contains("shutdown_grace_ms"), "{err}");
}

/// SIGTERM while a create is in flight (the simulator takes 1.5 s to
/// answer it, after its receipt was committed): the run waits for the
/// answer and records it, so exactly one POST was sent, the receipt holds
/// the VM's id, and the next worker finishes the client without another
/// create.
async fn sigterm_during_a_slow_create_sends_it_once_and_records_its_answer(env: Env) {
    env.ok(&["init"]);
    env.create_client("slow");
    env.sim
        .set_faults(oduflow_sim::Faults {
            latency_min_ms: 1500,
            latency_max_ms: 1500,
            ops: vec![oduflow_sim::Op::InstanceCreate],
            ..Default::default()
        })
        .unwrap();
    let creates = |env: &Env| {
        env.sim.ledger().request_log.iter().filter(|r| r.method == "POST" && r.route == "/v2/instances").count()
    };
    // A request timeout far above the create's 1.5 s, so that a loaded
    // machine cannot turn the answer into an unknown outcome.
    let mut child = env
        .cmd(&["worker", "--concurrency", "1"])
        .env("ODUFLOW_REQUEST_TIMEOUT_MS", "20000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while creates(&env) == 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "the worker never sent the create");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&child, "TERM");
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(60));
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(creates(&env), 1);
    let store = env.store().await;
    let c = store.client_get("slow").await.unwrap().unwrap();
    let vm = store.receipts_for_client(&c.id).await.unwrap().into_iter().find(|r| r.resource_kind == ResourceKind::Vm);
    let vm = vm.expect("the create's receipt");
    assert!(vm.id().is_some(), "the create's answer was not recorded: {vm:?}\n{err}");
    env.sim.set_faults(oduflow_sim::Faults::default()).unwrap();
    env.ok(&["worker", "--until-settled"]);
    let c = store.client_get("slow").await.unwrap().unwrap();
    assert_eq!(c.infra.status, ClientStatus::Ready, "{c:?}");
    assert_eq!(c.infra.vm_id.as_ref().map(|v| v.0.as_str()), vm.id());
    assert_eq!(creates(&env), 1, "a second create was sent");
    assert!(env.sim.ledger().creates_per_label.values().all(|n| *n == 1));
}

/// A second signal ends the worker at once (exit 128 + the signal), even
/// with a run under way: safe by the protocol, like a kill.
async fn a_second_signal_stops_at_once(env: Env) {
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 1).await;
    env.ok(&["worker", "--until-settled"]);
    let job = store.job_enqueue(&noop_job(&clients[0], 60_000)).await.unwrap().id();
    let mut child = env.cmd(&["worker"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_started(&store, 1).await;
    signal(&child, "TERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "the first signal must wait for the run under way");
    signal(&child, "TERM");
    let (status, took) = wait_bounded(&mut child, Duration::from_secs(10));
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("second signal"), "{err}");
    println!("second SIGTERM to exit: {took:?}");
    // Cut like a crash: its main transaction never committed.
    assert_eq!(store.job_get(job).await.unwrap().unwrap().state, JobState::Queued);
    assert!(store.events_by_kind(EventKind::NoopRan).await.unwrap().is_empty());
}

/// One HTTP/1.0 request (with a bearer token if given): status and body.
fn http(addr: &str, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    http_with(addr, method, path, token, if method == "GET" { "" } else { "{}" })
}

/// As [`http`], with `body` (JSON) sent.
pub(super) fn http_with(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The body of a 200 to a GET.
fn http_get(addr: &str, path: &str) -> String {
    let (status, body) = http(addr, "GET", path, None);
    assert_eq!(status, 200, "{body}");
    body
}

/// `serve` without VULTR_API_KEY starts (it does not need the key to read),
/// says it is read-only,
/// serves the dashboard and reads, and refuses actions with 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_a_key_starts_read_only_and_serves_the_dashboard() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    env.create_client("acme");
    let token = env.ok(&["token", "create", "ops", "--scope", "admin"]).trim().to_owned();
    let mut child = env
        .cmd(&["serve", "--listen", "127.0.0.1:0"])
        .env_remove("VULTR_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = stderr_line(&mut child, "oduflow serve: listening on");
    assert!(line.contains("READ-ONLY"), "{line}");
    let addr = address_after(&line, "listening on http://");

    assert_eq!(http(&addr, "GET", "/health", None).0, 200);
    let (status, page) = http(&addr, "GET", "/", Some(&token));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("acme") && page.contains("<html"), "{page}");
    let (status, list) = http(&addr, "GET", "/api/v1/clients", Some(&token));
    assert_eq!(status, 200);
    assert!(list.contains("\"acme\""), "{list}");
    let (status, body) = http(&addr, "POST", "/api/v1/clients/acme/reconcile", Some(&token));
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("read_only"), "{body}");
    signal(&child, "TERM");
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(0));
}

/// `serve` on an address in use fails with one line naming it, exit 1,
/// and never says it listens (it used to print "listening on" first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_busy_address_fails_before_saying_it_listens() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = env.run(&["serve", "--listen", &addr]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(!err.contains("listening on"), "{err}");
    // The worker's metrics listener too, before any claim.
    let o = env.run(&["worker", "--metrics-listen", &addr]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

/// The Prometheus text format, parsed strictly: every sample line is
/// `name{labels} value` with a numeric value, and every metric name was
/// declared by a `# TYPE` line before its samples.
fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut types = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("not a number in {line:?}"));
        let name = series.split('{').next().unwrap();
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        assert!(types.contains_key(name) || types.contains_key(base), "no # TYPE for {name}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
        }
        samples.insert(series.to_owned(), v);
    }
    samples
}

/// Metric name to type, from the `# TYPE` lines.
fn metric_types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').unwrap();
            (name.to_owned(), kind.to_owned())
        })
        .collect()
}

/// `oduflow worker --metrics-listen`: runs by outcome, run duration, claim
/// lag and the provider's requests by route template and status, under
/// `serve`'s names, scraped while the worker runs.
async fn worker_metrics_are_scraped_and_parsed_while_it_runs(env: Env) {
    env.ok(&["init"]);
    for name in ["m1", "m2"] {
        env.create_client(name);
    }
    // At 4 requests/s the rate budget makes requests wait (its metric
    // stayed 0 at the suite's 1000/s).
    let mut child = env
        .cmd(&["worker", "--metrics-listen", "127.0.0.1:0"])
        .env("ODUFLOW_RATE_PER_SEC", "4")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The start-up line names the database, the Vultr URL, the key's
    // fingerprint (never the key), the rate group and the metrics address.
    let started = stderr_line(&mut child, "oduflow worker ");
    let fingerprint = KeyFingerprint::of_key(&secrecy::SecretString::from(KEY.to_owned()));
    let key = format!("(key {})", fingerprint.short());
    for part in ["database ", &env.sim.base_url, &key, "rate group default at 4/s", "metrics on http://"] {
        assert!(started.contains(part), "{part:?} missing from {started:?}");
    }
    assert!(!started.contains(KEY), "the key was printed: {started}");
    let addr = address_after(&started, "metrics on http://");

    let store = env.store().await;
    let start = Instant::now();
    while !store.client_list().await.unwrap().iter().all(|c| c.infra.status == ClientStatus::Ready) {
        assert!(start.elapsed() < Duration::from_secs(60), "clients never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = parse_prometheus(&http_get(&addr, "/metrics"));
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("{k} missing; have {:#?}", m.keys().collect::<Vec<_>>()));
    assert!(get("oduflow_runs_total{outcome=\"done\"}") >= 2.0);
    assert!(get("oduflow_runs_total{outcome=\"run_again\"}") >= 1.0);
    assert_eq!(get("oduflow_runs_total{outcome=\"failed\"}"), 0.0);
    assert!(get("oduflow_run_duration_seconds_count") >= 3.0);
    assert_eq!(get("oduflow_run_duration_seconds_bucket{le=\"+Inf\"}"), get("oduflow_run_duration_seconds_count"));
    assert!(m.contains_key("oduflow_run_claim_lag_seconds_bucket{le=\"1\"}"));
    assert_eq!(get("oduflow_clients{status=\"ready\"}"), 2.0);
    assert!(m.contains_key("oduflow_queue_lag_seconds"));
    assert_eq!(get("oduflow_provider_requests_total{method=\"POST\",route=\"/v2/instances\",status=\"202\"}"), 2.0);
    // Readiness is watched through the shared listings (the bulk view).
    assert!(get("oduflow_provider_requests_total{method=\"GET\",route=\"/v2/instances\",status=\"200\"}") >= 1.0);
    assert!(get("oduflow_provider_requests_total{method=\"GET\",route=\"/v2/blocks\",status=\"200\"}") >= 1.0);
    assert!(get("oduflow_provider_rate_limiter_waits_total") > 0.0, "no request waited at 4/s");
    assert!(get("oduflow_provider_rate_limiter_wait_seconds_total") > 0.0);
    assert!(http_get(&addr, "/health").starts_with("ok"));
    // The same names as `serve`'s: every metric serve (with a key) shows,
    // a worker shows too, under the same name and type.
    let worker_types = metric_types(&http_get(&addr, "/metrics"));
    let token = env.ok(&["token", "create", "scraper"]).trim().to_owned();
    let mut serve =
        env.cmd(&["serve", "--listen", "127.0.0.1:0"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let serve_addr = address_after(&stderr_line(&mut serve, "oduflow serve: listening on"), "listening on http://");
    let (status, text) = http(&serve_addr, "GET", "/metrics", Some(&token));
    assert_eq!(status, 200, "{text}");
    let serve_types = metric_types(&text);
    assert!(serve_types.contains_key("oduflow_provider_requests_total"), "{serve_types:?}");
    for (name, kind) in &serve_types {
        assert_eq!(worker_types.get(name), Some(kind), "serve's {name} ({kind}) is not a worker's metric");
    }
    signal(&serve, "TERM");
    wait_bounded(&mut serve, Duration::from_secs(30));

    signal(&child, "TERM");
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0));
}
