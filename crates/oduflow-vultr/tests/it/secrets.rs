//! The API key appears in no log line, error or Debug output (DESIGN §8.8).

use crate::*;
use oduflow_model::provider::Provider;
use oduflow_model::{Label, VultrBlockId, VultrInstanceId};
use oduflow_sim::{Faults, Op, Sim, SimConfig};
use oduflow_vultr::{DnsRecordRequest, VultrClient};
use std::io::Write;
use std::sync::Mutex;

const SECRET: &str = "VULTR-SECRET-KEY-7f3a9c-do-not-log";

#[derive(Clone)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// reqwest logs through `log`, not `tracing`: capture that too.
struct LogToBuf(Buf);

impl log::Log for LogToBuf {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        let _ = writeln!(self.0.clone(), "{} {} {}", r.level(), r.target(), r.args());
    }
    fn flush(&self) {}
}

#[tokio::test]
async fn the_api_key_is_in_no_log_line_error_or_debug_output() {
    let buf = Buf(Arc::new(Mutex::new(Vec::new())));
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // A current-thread runtime: every task of this test, the simulator's and
    // reqwest's included, runs on this thread and logs to this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);
    let _ = log::set_boxed_logger(Box::new(LogToBuf(buf.clone())));
    log::set_max_level(log::LevelFilter::Trace);

    let sim =
        Sim::start(SimConfig::default().instant().with_key(SECRET), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let c = VultrClient::new(fast_config(&sim.base_url, SECRET)).unwrap();
    let mut seen: Vec<String> = vec![format!("{c:?}"), format!("{:?}", c.config())];
    let mut note = |s: String| seen.push(s);

    // Successes.
    let vm = c.instance_create(&instance_req("oduflow-s")).await;
    note(format!("{vm:?}"));
    note(format!("{:?}", c.instance_list_by_label(&Label::from("oduflow-s")).await));
    note(format!("{:?}", c.block_create(&block_req("oduflow-s")).await));
    note(format!("{:?}", c.account_get().await));
    let rec = DnsRecordRequest {
        name: "www".into(),
        record_type: "A".into(),
        data: "192.0.2.9".into(),
        ttl: None,
        priority: None,
    };
    note(format!("{:?}", c.dns_record_create("example.com", &rec).await));
    // Refusals and failures of every kind.
    note(format!("{:?}", c.instance_create(&InstanceRequest { region: "nowhere".into(), ..instance_req("x") }).await));
    note(format!("{:?}", c.block_attach(&VultrBlockId::from("missing"), &VultrInstanceId::from("missing")).await));
    sim.set_faults(Faults { lost_drop: 1.0, ops: vec![Op::InstanceCreate], ..Faults::default() }).unwrap();
    note(format!("{:?}", c.instance_create(&instance_req("oduflow-t")).await));
    sim.set_faults(Faults::server_errors_on(vec![Op::InstanceGet, Op::AccountGet])).unwrap();
    let e = c.instance_get(&VultrInstanceId::from("x")).await.unwrap_err();
    note(format!("{e} {e:?}"));
    let e = c.account_get().await.unwrap_err();
    note(format!("{e} {e:?}"));
    // A key the server does not accept.
    let other =
        Sim::start(SimConfig::default().instant().with_key("another"), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let stranger = VultrClient::new(fast_config(&other.base_url, SECRET)).unwrap();
    let e = stranger.account_get().await.unwrap_err();
    assert!(matches!(e, oduflow_vultr::VultrError::Status { status: 401, .. }));
    note(format!("{e} {e:?}"));
    note(format!("{:?}", stranger.instance_create(&instance_req("x")).await));
    // Transport failures: a reset, a closed port, a bad configuration.
    let (base, _) = resetting_server().await;
    let reset = VultrClient::new(fast_config(&base, SECRET)).unwrap();
    let e = reset.instance_get(&VultrInstanceId::from("x")).await.unwrap_err();
    note(format!("{e} {e:?}"));
    let closed = VultrClient::new(fast_config("http://127.0.0.1:9/v2", SECRET)).unwrap();
    let e = closed.account_get().await.unwrap_err();
    note(format!("{e} {e:?}"));
    let e = VultrClient::new(VultrConfig { rate_per_sec: 0, ..fast_config("http://x/v2", SECRET) }).unwrap_err();
    note(format!("{e} {e:?}"));

    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("vultr request"), "the capture must have caught the adapter's logs:\n{logs}");
    assert!(logs.contains("DEBUG") || logs.contains("TRACE"));
    assert!(!logs.contains(SECRET), "the key leaked into the logs:\n{logs}");
    for s in &seen {
        assert!(!s.contains(SECRET), "the key leaked: {s}");
    }
    assert!(seen.len() >= 16);
}
