//! The opt-in run against the real Vultr API: what no simulator can settle.
//!
//! Run it (README, "Against the real API"):
//!
//! ```text
//! ODUFLOW_LIVE_REGION=ewr VULTR_API_KEY=... [ODUFLOW_LIVE_DNS_DOMAIN=example.com] \
//!   cargo nextest run --all-features -E 'test(/live_vultr/)' --run-ignored only --no-capture
//! ```
//!
//! It makes two of the smallest VMs (`ODUFLOW_LIVE_PLAN`, default
//! vc2-1c-1gb, one grown to `ODUFLOW_LIVE_PLAN_UP`, default vc2-1c-2gb)
//! and two 10 GB volumes for about half an hour in all: a few US cents. It
//! is ignored by default, so a run without credentials shows as skipped,
//! never as passed; asked for without them, it fails and says why.
//!
//! First it times the facts docs/vultr.md leaves unconfirmed, straight
//! through the adapter, and writes them as JSON lines to
//! `ODUFLOW_LIVE_FACTS` (default `live-vultr-facts.jsonl` in the working
//! directory): the 404 window and listing lag after a create, the install,
//! an attachment's lag, a second resize within a minute, a DELETE of an
//! attached volume, how long a VM's delete takes to release its volume,
//! and a DNS record's create, PATCH and delete. Then it runs a client
//! through oduflow (create, a plan change and a volume grow, delete) and
//! checks, by its own listing and not oduflow's, that nothing is left.

use super::*;
use oduflow_model::provider::{Block, BlockRequest, DeleteOutcome, InstanceRequest, Outcome, Provider};
use oduflow_model::{Label, VolumeType};
use oduflow_vultr::{DnsRecordPatch, DnsRecordRequest, VultrClient, VultrConfig};
use std::io::Write;
use std::time::{Duration, Instant};

/// How often a probe reads, and how long it waits for a fact at most.
const PROBE_EVERY: Duration = Duration::from_secs(2);
const PROBE_MAX: Duration = Duration::from_secs(15 * 60);

struct Facts {
    file: std::fs::File,
    t0: Instant,
}

impl Facts {
    fn write(&mut self, fact: &str, detail: serde_json::Value) {
        let line = serde_json::json!({ "fact": fact, "after_s": self.t0.elapsed().as_secs_f64(), "detail": detail });
        println!("live fact: {line}");
        writeln!(self.file, "{line}").unwrap();
    }
}

/// Reads `f` every [`PROBE_EVERY`] until it gives `Some`, at most
/// [`PROBE_MAX`]: the value and how long it took.
async fn until<T, F, Fut>(what: &str, mut f: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t = Instant::now();
    loop {
        if let Some(v) = f().await {
            return (v, t.elapsed());
        }
        assert!(t.elapsed() < PROBE_MAX, "{what}: not within {PROBE_MAX:?}");
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

fn accepted<T: std::fmt::Debug>(o: Outcome<T>, what: &str) -> T {
    match o {
        Outcome::Accepted(v) => v,
        other => panic!("{what}: {other:?}"),
    }
}

async fn probe_facts(c: &VultrClient, region: &str, plan: &str, dns: Option<&str>, facts: &mut Facts) {
    let label = format!("odf-facts-{}", std::process::id());
    let req = InstanceRequest {
        region: region.into(),
        plan: plan.into(),
        image: oduflow_model::ImageSource::Os(2284),
        label: Label::from(label.as_str()),
        server: oduflow_model::ServerSpec { hostname: label.clone(), ..Default::default() },
    };
    let vm = accepted(c.instance_create(&req).await, "instance create");
    let (_, t) = until("GET after create", || async { c.instance_get(&vm).await.ok().flatten() }).await;
    facts.write("instance_get_404_window", serde_json::json!({ "secs": t.as_secs_f64() }));
    let (_, t) =
        until("listed", || async { c.instance_list_by_label(&req.label).await.ok().filter(|v| !v.is_empty()) }).await;
    facts.write("instance_listing_lag", serde_json::json!({ "secs": t.as_secs_f64() }));
    let (_, t) = until("ok", || async { c.instance_get(&vm).await.ok().flatten().filter(|i| i.is_ready()) }).await;
    facts.write("instance_active_ok", serde_json::json!({ "secs": t.as_secs_f64() }));

    let vol = BlockRequest {
        region: region.into(),
        size_gb: 10,
        block_type: VolumeType::HighPerf,
        label: Label::from(format!("{label}-vol").as_str()),
    };
    let blk = accepted(c.block_create(&vol).await, "block create");
    let active = |b: &Block| b.status == "active";
    let (_, t) = until("block active", || async { c.block_get(&blk).await.ok().flatten().filter(active) }).await;
    facts.write("block_active", serde_json::json!({ "secs": t.as_secs_f64() }));
    let answer = c.block_attach(&blk, &vm).await;
    facts.write("attach_right_after_ok", serde_json::json!({ "answer": format!("{answer:?}") }));
    let (_, t) = until("attachment shown", || async {
        c.block_get(&blk).await.ok().flatten().filter(|b| b.attached_to_instance.as_ref() == Some(&vm))
    })
    .await;
    facts.write("attachment_lag", serde_json::json!({ "secs": t.as_secs_f64() }));
    let first = c.block_resize(&blk, 20).await;
    let second = c.block_resize(&blk, 30).await;
    facts.write(
        "second_resize_within_a_minute",
        serde_json::json!({ "first": format!("{first:?}"), "second": format!("{second:?}") }),
    );
    let answer = c.block_delete(&blk).await;
    facts.write("delete_of_an_attached_block", serde_json::json!({ "answer": format!("{answer:?}") }));
    let deleted_attached = matches!(answer, Ok(DeleteOutcome::Sent));
    let gone = until("VM deleted", || async {
        matches!(c.instance_delete(&vm).await, Ok(DeleteOutcome::Sent | DeleteOutcome::NotFound)).then_some(())
    });
    gone.await;
    if !deleted_attached {
        let (_, t) = until("volume released", || async {
            c.block_get(&blk).await.ok().flatten().filter(|b| b.attached_to_instance.is_none())
        })
        .await;
        facts.write("volume_released_after_vm_delete", serde_json::json!({ "secs": t.as_secs_f64() }));
        until("block deleted", || async {
            matches!(c.block_delete(&blk).await, Ok(DeleteOutcome::Sent | DeleteOutcome::NotFound)).then_some(())
        })
        .await;
    }
    if let Some(domain) = dns {
        let rec = DnsRecordRequest {
            name: label.clone(),
            record_type: "A".into(),
            data: "192.0.2.10".into(),
            ttl: Some(300),
            priority: None,
        };
        let r = accepted(c.dns_record_create(domain, &rec).await, "DNS create");
        let patch = DnsRecordPatch { name: label.clone(), data: "192.0.2.11".into(), ttl: 300 };
        let patched = c.dns_record_patch(domain, &r.id, &patch).await;
        let read = c.dns_record_get(domain, &r.id).await;
        let deleted = c.dns_record_delete(domain, &r.id).await;
        let after = c.dns_record_get(domain, &r.id).await;
        facts.write(
            "dns_record_lifecycle",
            serde_json::json!({ "created": r, "patch": format!("{patched:?}"), "read": format!("{read:?}"),
                                "delete": format!("{deleted:?}"), "read_after_delete": format!("{after:?}") }),
        );
    }
}

#[test]
#[ignore = "against the real Vultr API, at a cost of a few cents: set ODUFLOW_LIVE_REGION and VULTR_API_KEY, \
            then --run-ignored only"]
fn live_vultr_facts_and_a_client_end_to_end() {
    let (Ok(region), Ok(key)) = (std::env::var("ODUFLOW_LIVE_REGION"), std::env::var("VULTR_API_KEY")) else {
        panic!(
            "*** live_vultr_facts_and_a_client_end_to_end was asked for but cannot run: set ODUFLOW_LIVE_REGION \
             (e.g. ewr) and VULTR_API_KEY ***"
        );
    };
    let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let (plan, plan_up) = (var("ODUFLOW_LIVE_PLAN", "vc2-1c-1gb"), var("ODUFLOW_LIVE_PLAN_UP", "vc2-1c-2gb"));
    let dns = std::env::var("ODUFLOW_LIVE_DNS_DOMAIN").ok();
    let path = var("ODUFLOW_LIVE_FACTS", "live-vultr-facts.jsonl");
    let mut facts = Facts { file: std::fs::File::create(&path).unwrap(), t0: Instant::now() };
    let c = VultrClient::new(VultrConfig::new(secrecy::SecretString::from(key))).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(probe_facts(&c, &region, &plan, dns.as_deref(), &mut facts));

    let dir = tempfile::tempdir().unwrap();
    let name = format!("odf-smoke-{}", std::process::id());
    let run = |args: &[&str]| {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .current_dir(dir.path())
            .env("ODUFLOW_DATABASE_URL", oduflow_store::testing::sqlite_url(dir.path()))
            .env_remove("ODUFLOW_VULTR_URL");
        if let Some(d) = &dns {
            cmd.env("ODUFLOW_DNS_DOMAIN", d);
        }
        let o = cmd.output().unwrap();
        let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{args:?}: {out}");
        out
    };
    let show = |run: &dyn Fn(&[&str]) -> String| -> serde_json::Value {
        serde_json::from_str(&run(&["client", "show", &name, "--json"])).unwrap()
    };
    run(&["init"]);
    run(&["client", "create", &name, "--region", &region, "--plan", &plan, "--os-id", "2284", "--volume-gb", "10"]);
    run(&["worker", "--until-settled"]);
    let v = show(&run);
    assert_eq!(v["status"], "ready", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    facts.write("oduflow_ready", serde_json::json!({ "client": v["events"].as_array().map(Vec::len) }));
    run(&["client", "update", &name, "--plan", &plan_up, "--volume-gb", "20"]);
    run(&["worker", "--until-settled"]);
    let v = show(&run);
    assert_eq!((v["status"].as_str(), v["plan"].as_str()), (Some("ready"), Some(plan_up.as_str())), "{v}");
    facts.write("oduflow_updated", serde_json::json!({ "changes": v["changes"] }));
    run(&["client", "delete", &name]);
    run(&["worker", "--until-settled"]);
    let v = show(&run);
    assert_eq!(v["status"], "deleted", "{v}");
    facts.write("oduflow_deleted", serde_json::json!({}));

    // Nothing labelled for the client is left, by a listing of our own.
    let prefix = format!("oduflow-{id}");
    let (vms, blocks) = rt.block_on(async { (c.instance_list().await.unwrap(), c.block_list().await.unwrap()) });
    let left: Vec<&str> = vms.iter().map(|i| i.label.as_str()).chain(blocks.iter().map(|b| b.label.as_str())).collect();
    assert!(left.iter().all(|l| !l.starts_with(&prefix)), "left behind: {left:?}");
    if let Some(d) = &dns {
        let records = rt.block_on(c.dns_record_list(d)).unwrap();
        assert!(records.iter().all(|r| r.name != name), "a record is left at {name}.{d}");
    }
    println!("live facts written to {path}");
}
