//! A worker that meets an outage: a SQLite commit that failed (the disk
//! full), a database that stops answering, a provider or a database that is
//! down when the worker starts. It waits, within named bounds, logs a
//! bounded number of lines, and resumes by itself, saying so once; only what
//! waiting cannot fix (a refused key, a bad URL) exits 2 at once.

use super::*;
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};

/// The lines a child process writes on standard error, as they come, each
/// with when it came.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<(Instant, String)>>>);

impl Lines {
    /// Reads `child`'s standard error on a thread of its own.
    fn of(child: &mut std::process::Child) -> Lines {
        let lines = Lines::default();
        let out = lines.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                let Ok(l) = l else { return };
                out.0.lock().unwrap().push((Instant::now(), l));
            }
        });
        lines
    }

    fn all(&self) -> String {
        self.0.lock().unwrap().iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join("\n")
    }

    /// The log lines at warn or error that came in `from..to`.
    fn loud_between(&self, from: Instant, to: Instant) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, l)| *t >= from && *t < to && (l.contains(" ERROR ") || l.contains(" WARN ")))
            .map(|(_, l)| l.clone())
            .collect()
    }

    fn count(&self, needle: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|(_, l)| l.contains(needle)).count()
    }

    /// Waits (at most `bound`) for a line containing `needle`.
    fn wait_for(&self, needle: &str, bound: Duration) {
        let start = Instant::now();
        while self.count(needle) == 0 {
            assert!(start.elapsed() < bound, "no line with {needle:?} within {bound:?}:\n{}", self.all());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `oduflow ARGS` as `env.cmd` runs it, through a shell that ignores
/// SIGXFSZ first (the disposition carries over the `exec`): a write past
/// the process's file size limit then fails with EFBIG, as a write to a
/// full disk fails with ENOSPC, instead of killing the process.
fn ignoring_sigxfsz(env: &Env, args: &[&str]) -> Command {
    let like = env.cmd(args);
    let mut c = Command::new("sh");
    c.arg("-c").arg("trap '' XFSZ; exec \"$0\" \"$@\"").arg(bin()).args(like.get_args());
    c.current_dir(like.get_current_dir().unwrap());
    for (k, v) in like.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Sets the soft file size limit of process `pid` (`prlimit`): `0` makes
/// every write to a file fail, `unlimited` lifts it.
fn file_size_limit(pid: u32, soft: &str) {
    let ok = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--fsize={soft}:unlimited")])
        .status()
        .expect("prlimit (util-linux) runs")
        .success();
    assert!(ok, "prlimit --pid {pid} --fsize={soft} failed");
}

/// Waits (at most `bound`) until `job` is done.
async fn wait_done(store: &Store, job: JobId, bound: Duration, lines: &Lines) {
    let start = Instant::now();
    while store.job_get(job).await.unwrap().unwrap().state != JobState::Done {
        assert!(start.elapsed() < bound, "job {job} not done within {bound:?}:\n{}", lines.all());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The hole: a SQLite commit that fails on a full disk (here: every write
/// past the process's file size limit fails) is rolled back by SQLite
/// itself, the driver's own ROLLBACK then fails, and the connection went
/// back to the pool still counting an open transaction: every later claim
/// failed with "attempted to call begin_with at non-zero transaction
/// depth", for ever, about ten lines a second. Now such a connection is
/// closed, the worker logs its first failure and then at most one line per
/// interval, and once the file can be written again it runs the job and
/// says so in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_worker_whose_commits_failed_resumes_once_the_file_is_writable_again() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 1).await;
    env.ok(&["worker", "--until-settled"]);
    let mut child = ignoring_sigxfsz(&env, &["worker", "--concurrency", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut child);
    lines.wait_for("oduflow worker ", Duration::from_secs(30));
    file_size_limit(child.id(), "0");
    let outage = Instant::now();
    let job = store.job_enqueue(&noop_job(&clients[0], 0)).await.unwrap().id();
    // The claim's commit fails while the limit holds.
    lines.wait_for(" ERROR ", Duration::from_secs(30));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let loud = lines.loud_between(outage, Instant::now());
    assert_eq!(store.job_get(job).await.unwrap().unwrap().state, JobState::Queued, "{}", lines.all());
    file_size_limit(child.id(), "unlimited");
    wait_done(&store, job, Duration::from_secs(30), &lines).await;
    lines.wait_for("resumed", Duration::from_secs(10));
    service::service_stop(&mut child);
    assert!(loud.len() <= 3, "{} lines at warn or error in 3 s of outage:\n{}", loud.len(), loud.join("\n"));
    assert_eq!(lines.count("resumed"), 1, "{}", lines.all());
    assert_eq!(lines.count("non-zero transaction depth"), 0, "{}", lines.all());
    println!("{}", lines.all());
}

/// Waits for `child` to exit, at most `bound` (then kills it and fails).
fn wait_exit(child: &mut std::process::Child, bound: Duration, lines: &Lines) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            // Its last lines, read on their own thread.
            std::thread::sleep(Duration::from_millis(100));
            return st;
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            panic!("the process did not exit within {bound:?}:\n{}", lines.all());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port on this host where nothing listens (yet).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `oduflow worker --until-settled` (with `settings` in its
/// environment), its standard error read as it comes.
fn worker_until_settled(env: &Env, settings: &[(&str, &str)]) -> (std::process::Child, Lines) {
    let mut c = env.cmd(&["worker", "--until-settled", "--concurrency", "1"]);
    for (k, v) in settings {
        c.env(k, v);
    }
    let mut child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let lines = Lines::of(&mut child);
    (child, lines)
}

/// The hole: a worker whose Vultr API did not answer at start (nothing
/// listening yet: a network blip at boot) exited 2 at once, which the units
/// in `deploy/` never restart. Now it tries again, one line each time,
/// starts once the API answers, and runs the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_the_provider_is_down_waits_and_starts() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 1).await;
    let job = store.job_enqueue(&noop_job(&clients[0], 0)).await.unwrap().id();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/v2");
    let (mut child, lines) = worker_until_settled(&env, &[("ODUFLOW_VULTR_URL", &url)]);
    lines.wait_for("trying again", Duration::from_secs(30));
    assert!(child.try_wait().unwrap().is_none(), "the worker exited:\n{}", lines.all());
    let sim_cfg = oduflow_sim::SimConfig { rate_per_sec: 1000, ..oduflow_sim::SimConfig::default() }.with_key(KEY);
    let _sim = oduflow_sim::Sim::start(sim_cfg, format!("127.0.0.1:{port}").parse().unwrap()).await.unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(60), &lines);
    assert_eq!(status.code(), Some(0), "{}", lines.all());
    assert_eq!(store.job_get(job).await.unwrap().unwrap().state, JobState::Done, "{}", lines.all());
    assert_eq!(lines.count("oduflow worker worker-"), 1, "{}", lines.all());
    assert!(!lines.all().contains(KEY), "the key was echoed:\n{}", lines.all());
    // The start-up check reports each failed try itself: the client's own
    // warning about the exchange is not printed beside it.
    assert_eq!(lines.count("vultr request not sent"), 0, "{}", lines.all());
}

/// A worker whose Vultr API stays down past `ODUFLOW_STARTUP_RETRY_MS`
/// exits 1 (restarted by the units), naming the limit and the last
/// failure; a refused key still exits 2 at once (one line, the key never
/// echoed), having sent nothing but `GET /account`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_provider_stays_down_exits_1_after_its_limit_and_a_refused_key_exits_2_at_once() {
    let env = Env::sqlite().await;
    env.ok(&["init"]);
    let url = format!("http://127.0.0.1:{}/v2", free_port());
    let (mut child, lines) =
        worker_until_settled(&env, &[("ODUFLOW_VULTR_URL", &url), ("ODUFLOW_STARTUP_RETRY_MS", "5000")]);
    let status = wait_exit(&mut child, Duration::from_secs(60), &lines);
    assert_eq!(status.code(), Some(1), "{}", lines.all());
    assert_eq!(lines.count("startup_retry_exhausted"), 1, "{}", lines.all());
    assert!(lines.count("trying again") >= 1, "{}", lines.all());
    let start = Instant::now();
    let o = env.cmd(&["worker", "--until-settled"]).env("VULTR_API_KEY", "not-the-key").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("refused the key"), "{err}");
    assert!(!err.contains("not-the-key"), "the key was echoed: {err}");
    assert!(start.elapsed() < Duration::from_secs(30), "a refused key waited {:?}", start.elapsed());
}

/// The hole: a worker whose PostgreSQL database did not accept connections
/// at start (a restart, a failover) exited at once. Now it tries again,
/// starts once the database answers, and runs the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_the_database_is_down_waits_and_starts() {
    let env = Env::postgres().await;
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 1).await;
    let job = store.job_enqueue(&noop_job(&clients[0], 0)).await.unwrap().id();
    store.close().await;
    oduflow_store::testing::pg_allow_connections(&env.url, false).await.unwrap();
    let (mut child, lines) = worker_until_settled(&env, &[]);
    let down = lines.clone();
    let waited = tokio::task::spawn_blocking(move || down.wait_for("trying again", Duration::from_secs(30)));
    let seen = waited.await;
    oduflow_store::testing::pg_allow_connections(&env.url, true).await.unwrap();
    seen.unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(60), &lines);
    assert_eq!(status.code(), Some(0), "{}", lines.all());
    let store = env.store().await;
    assert_eq!(store.job_get(job).await.unwrap().unwrap().state, JobState::Done, "{}", lines.all());
    oduflow_store::testing::close_and_drop(&store).await;
}

/// The same outage on PostgreSQL: a running worker whose database stops
/// accepting connections logs its first failure and then nothing more for
/// the next seconds (it retried and logged every 100 ms, per loop), and
/// once the database answers again runs the queued job and says so in one
/// line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_database_refuses_connections_logs_a_bounded_number_of_lines_and_resumes() {
    let env = Env::postgres().await;
    env.ok(&["init"]);
    let store = env.store().await;
    let clients = settled_clients(&store, 1).await;
    env.ok(&["worker", "--until-settled"]);
    let mut child =
        env.cmd(&["worker", "--concurrency", "2"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let lines = Lines::of(&mut child);
    lines.wait_for("oduflow worker ", Duration::from_secs(30));
    oduflow_store::testing::pg_allow_connections(&env.url, false).await.unwrap();
    let outage = Instant::now();
    let down = lines.clone();
    let seen = tokio::task::spawn_blocking(move || down.wait_for(" ERROR ", Duration::from_secs(30))).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let loud = lines.loud_between(outage, Instant::now());
    oduflow_store::testing::pg_allow_connections(&env.url, true).await.unwrap();
    seen.unwrap();
    let store = env.store().await;
    let job = store.job_enqueue(&noop_job(&clients[0], 0)).await.unwrap().id();
    wait_done(&store, job, Duration::from_secs(30), &lines).await;
    lines.wait_for("resumed", Duration::from_secs(10));
    service::service_stop(&mut child);
    assert!(loud.len() <= 3, "{} lines at warn or error in 3 s of outage:\n{}", loud.len(), loud.join("\n"));
    assert_eq!(lines.count("resumed"), 1, "{}", lines.all());
    oduflow_store::testing::close_and_drop(&store).await;
}
