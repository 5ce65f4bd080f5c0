//! The adapter against the in-process simulator: a whole provisioning round,
//! lost responses that must never turn into a second create, and the rate
//! figure.

use crate::*;
use oduflow_model::provider::{DeleteOutcome, Outcome, Provider, ProviderError};
use oduflow_model::{Label, VultrBlockId, VultrInstanceId};
use oduflow_sim::{FaultKind, Faults, Ledger, Op, ResourceKind, Sim, SimConfig, SimHandle};
use oduflow_vultr::DnsRecordRequest;
use std::time::Instant;

async fn sim(cfg: SimConfig) -> SimHandle {
    Sim::start(cfg.with_key(KEY), "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// Polls until `f` gives `Some`, at most `tries` times 50 ms apart.
async fn eventually<T, F, Fut>(tries: u32, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..tries {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("condition not reached after {tries} polls");
}

#[tokio::test]
async fn a_whole_provisioning_round_against_the_simulator() {
    let sim = sim(SimConfig::default()).await;
    let c = client(&sim.base_url);
    let Outcome::Accepted(vm) = c.instance_create(&instance_req("oduflow-e2e")).await else { panic!() };
    let Outcome::Accepted(vol) = c.block_create(&block_req("oduflow-e2e-vol")).await else { panic!() };

    let ready = eventually(60, || async { c.instance_get(&vm).await.unwrap().filter(|i| i.is_ready()) }).await;
    assert_eq!(
        (ready.region.as_str(), ready.plan.as_str(), ready.os_id, ready.label.as_str()),
        ("ewr", "vc2-1c-1gb", 2136, "oduflow-e2e")
    );
    let blk = eventually(60, || async { c.block_get(&vol).await.unwrap().filter(|b| b.status == "active") }).await;
    assert_eq!((blk.size_gb, blk.block_type.as_str(), blk.attached_to_instance), (40, "high_perf", None));

    assert_eq!(c.block_attach(&vol, &vm).await, Outcome::Accepted(()));
    assert_eq!(c.block_get(&vol).await.unwrap().unwrap().attached_to_instance, Some(vm.clone()));

    let found = eventually(60, || async {
        let v = c.instance_list_by_label(&Label::from("oduflow-e2e")).await.unwrap();
        (!v.is_empty()).then_some(v)
    })
    .await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, vm);
    let by_label = c.block_find_by_labels(&[Label::from("oduflow-e2e-vol")]).await.unwrap();
    assert_eq!(by_label[&Label::from("oduflow-e2e-vol")][0].id, vol);
    assert_eq!(c.instance_list().await.unwrap().len(), 1);

    assert_eq!(c.block_detach(&vol).await.unwrap(), DeleteOutcome::Sent);
    assert!(matches!(c.block_detach(&vol).await.unwrap(), DeleteOutcome::Refused { status: 400, .. }));
    assert_eq!(c.block_delete(&vol).await.unwrap(), DeleteOutcome::Sent);
    assert_eq!(c.instance_delete(&vm).await.unwrap(), DeleteOutcome::Sent);
    assert_eq!(c.instance_get(&vm).await.unwrap(), None, "a GET after the DELETE answers 404");
    assert_eq!(c.block_get(&vol).await.unwrap(), None);
    assert_eq!(c.instance_delete(&vm).await.unwrap(), DeleteOutcome::NotFound);

    let ledger = sim.ledger();
    assert_eq!(ledger.creates_per_label["oduflow-e2e"], 1);
    assert_eq!(ledger.creates_per_label["oduflow-e2e-vol"], 1);
    assert_eq!(ledger.resources.iter().filter(|r| r.deleted_at.is_some()).count(), 2);
    assert!(ledger.resources.iter().all(|r| r.key_fingerprint == c.fingerprint().0));
}

#[tokio::test]
async fn delete_of_a_pending_instance_is_refused_after_bounded_retries() {
    let sim = sim(SimConfig { pending_ms: 5_000, get_404_window_ms: 0, ..SimConfig::default() }).await;
    let c = client(&sim.base_url);
    let Outcome::Accepted(vm) = c.instance_create(&instance_req("p")).await else { panic!() };
    let DeleteOutcome::Refused { status: 500, message } = c.instance_delete(&vm).await.unwrap() else { panic!() };
    assert!(message.contains("not currently active"), "{message}");
    assert_eq!(sim.ledger().requests["DELETE /v2/instances/{id}"], u64::from(oduflow_vultr::READ_ATTEMPTS_MAX));
}

#[tokio::test]
async fn rejections_from_the_simulator_are_definitive() {
    let sim = sim(SimConfig::default().instant()).await;
    let c = client(&sim.base_url);
    let bad = InstanceRequest { plan: "vc2-64c-1tb".into(), ..instance_req("r") };
    assert_eq!(
        c.instance_create(&bad).await,
        Outcome::Rejected { status: 400, message: "Invalid plan chosen.".into() }
    );
    let small = BlockRequest { size_gb: 5, ..block_req("r") };
    assert!(matches!(c.block_create(&small).await, Outcome::Rejected { status: 400, .. }));
    let stranger = VultrClient::new(fast_config(&sim.base_url, "unknown-key")).unwrap();
    assert!(matches!(stranger.instance_create(&instance_req("r")).await, Outcome::Rejected { status: 401, .. }));
    assert!(sim.ledger().resources.is_empty());
}

/// The heart of the promise: whatever way the response is lost, the create
/// reached the provider once, was applied once, and the adapter says Unknown.
#[tokio::test]
async fn a_lost_create_response_is_unknown_and_the_create_is_applied_exactly_once() {
    let cases = [
        ("drop", Faults { lost_drop: 1.0, ..Faults::default() }),
        ("5xx", Faults { lost_5xx: 1.0, ..Faults::default() }),
        ("stall", Faults { lost_stall: 1.0, stall_ms: 1_500, ..Faults::default() }),
    ];
    for (name, f) in cases {
        let sim = sim(SimConfig::default().instant()).await;
        sim.set_faults(Faults { ops: vec![Op::InstanceCreate, Op::BlockCreate, Op::BlockAttach], ..f }).unwrap();
        let c = client(&sim.base_url);
        let label = format!("oduflow-lost-{name}");
        let outcome = c.instance_create(&instance_req(&label)).await;
        assert!(matches!(outcome, Outcome::Unknown { .. }), "{name}: {outcome:?}");
        let outcome = c.block_create(&block_req(&format!("{label}-vol"))).await;
        assert!(matches!(outcome, Outcome::Unknown { .. }), "{name}: {outcome:?}");
        // The resources exist: the engine adopts them by label.
        let vm = c.instance_list_by_label(&Label::from(label.as_str())).await.unwrap();
        assert_eq!(vm.len(), 1, "{name}");
        let vol = c.block_find_by_labels(&[Label::from(format!("{label}-vol").as_str())]).await.unwrap();
        let vol = &vol.values().next().unwrap()[0];
        let outcome = c.block_attach(&vol.id, &vm[0].id).await;
        assert!(matches!(outcome, Outcome::Unknown { .. }), "{name}: {outcome:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let l = sim.ledger();
        assert_eq!(l.requests["POST /v2/instances"], 1, "{name}: one POST reached the simulator");
        assert_eq!(l.requests["POST /v2/blocks"], 1, "{name}");
        assert_eq!(l.requests["POST /v2/blocks/{id}/attach"], 1, "{name}");
        assert_eq!(l.creates_per_label[&label], 1, "{name}");
        assert_eq!(l.attaches_per_block[vol.id.as_str()], 1, "{name}");
        assert_eq!(c.block_get(&vol.id).await.unwrap().unwrap().attached_to_instance, Some(vm[0].id.clone()));
    }
}

#[tokio::test]
async fn reads_ride_over_dropped_connections_5xx_and_429_bursts() {
    let sim = sim(SimConfig::default().instant()).await;
    let c = client(&sim.base_url);
    let Outcome::Accepted(vm) = c.instance_create(&instance_req("r")).await else { panic!() };
    for f in [
        Faults { lost_drop: 1.0, faults_max: Some(2), ..Faults::default() },
        Faults { error_5xx: 1.0, faults_max: Some(3), ..Faults::default() },
        Faults { burst_429: 1.0, burst_429_len: 2, faults_max: Some(1), ..Faults::default() },
    ] {
        sim.set_faults(Faults { ops: vec![Op::InstanceGet, Op::InstanceList], ..f.clone() }).unwrap();
        let got = c.instance_get(&vm).await.unwrap().expect("found after retries");
        assert_eq!(got.id, vm, "{f:?}");
    }
    let l = sim.ledger();
    assert_eq!(l.requests["GET /v2/instances/{id}"], 3 + 4 + 3);
    assert_eq!(l.responses_429_fault, 2);
    let _: VultrInstanceId = vm;
}

#[tokio::test]
async fn account_regions_plans_and_dns_through_the_adapter() {
    let sim = sim(SimConfig::default().instant()).await;
    let c = VultrClient::new(VultrConfig { per_page: 2, ..fast_config(&sim.base_url, KEY) }).unwrap();
    assert_eq!(c.account_get().await.unwrap().email, "sim@example.com");
    let regions = c.region_list().await.unwrap();
    assert!(regions.len() >= 5, "all pages of two");
    assert!(regions.iter().any(|r| r.id == "ewr" && r.options.iter().any(|o| o == "block_storage_high_perf")));
    let plans = c.plan_list().await.unwrap();
    assert!(plans.iter().any(|p| p.id == "vc2-1c-1gb" && p.locations.iter().any(|l| l == "ewr")));

    let req = DnsRecordRequest {
        name: "app".into(),
        record_type: "A".into(),
        data: "192.0.2.44".into(),
        ttl: Some(120),
        priority: None,
    };
    let zone = c.dns_domain_get("example.com").await.unwrap().expect("the simulated account holds example.com");
    assert_eq!(zone.domain, "example.com");
    assert_eq!(c.dns_domain_get("not-ours.example").await.unwrap(), None, "a zone the account does not hold");
    let Outcome::Accepted(rec) = c.dns_record_create("example.com", &req).await else { panic!() };
    assert_eq!((rec.name.as_str(), rec.data.as_str(), rec.ttl), ("app", "192.0.2.44", 120));
    assert_eq!(c.dns_record_get("example.com", &rec.id).await.unwrap(), Some(rec.clone()));
    for n in 0..3 {
        let r = DnsRecordRequest { name: format!("h{n}"), ..req.clone() };
        assert!(matches!(c.dns_record_create("example.com", &r).await, Outcome::Accepted(_)));
    }
    assert_eq!(c.dns_record_list("example.com").await.unwrap().len(), 4, "pages of two");
    assert_eq!(c.dns_record_delete("example.com", &rec.id).await.unwrap(), DeleteOutcome::Sent);
    assert_eq!(c.dns_record_get("example.com", &rec.id).await.unwrap(), None);
    assert!(matches!(c.dns_record_create("nope.org", &req).await, Outcome::Unknown { .. }), "404 is not a rejection");
    let bad = DnsRecordRequest { record_type: "BOGUS".into(), ..req };
    assert!(matches!(c.dns_record_create("example.com", &bad).await, Outcome::Rejected { status: 400, .. }));
}

/// 200 requests from many workers sharing one client stay within Vultr's 30
/// requests/s as the simulator counts it (a sliding second per source
/// address), so it never has to answer 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_requests_stays_within_30_per_second_with_no_429() {
    let sim = sim(SimConfig { rate_per_sec: 30, ..SimConfig::default().instant() }).await;
    let c = VultrClient::new(VultrConfig {
        base_url: sim.base_url.clone(),
        ..VultrConfig::new(secrecy::SecretString::from(KEY.to_owned()))
    })
    .unwrap();
    assert_eq!(c.config().rate_per_sec, 25, "the default");
    const REQUESTS: usize = 200;
    const WORKERS: usize = 10;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..REQUESTS / WORKERS {
                c.account_get().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let l = sim.ledger();
    let served = l.requests["GET /v2/account"];
    println!(
        "rate: {served} requests in {secs:.1} s = {:.1} req/s, busiest second {}, 429s: {}",
        served as f64 / secs,
        l.busiest_second,
        l.responses_429_rate_limit
    );
    assert!(l.busiest_second <= 30, "{} in one second", l.busiest_second);
    assert_eq!(served, REQUESTS as u64, "no retries were needed");
    assert_eq!(l.responses_429_rate_limit, 0);
}

/// The simulator's redirect fault answers a 3xx whose Location is the very
/// URL that was asked, without applying the request. A client that followed
/// a 307/308 would send the create again; ours sends it once, the simulator
/// applies it zero times, and the adapter says Unknown (not Rejected, not
/// Accepted). Reads under the same fault are errors, not retried, not `None`.
#[tokio::test]
async fn a_redirected_create_is_sent_once_applied_zero_times_and_unknown() {
    let statuses = [None, Some(301), Some(302), Some(303), Some(307), Some(308)];
    for status in statuses {
        let sim = sim(SimConfig::default().instant()).await;
        sim.set_faults(Faults { redirect: 1.0, redirect_status: status, ..Faults::default() }).unwrap();
        let c = client(&sim.base_url);
        let label = "oduflow-redirected";
        let outcome = c.instance_create(&instance_req(label)).await;
        let Outcome::Unknown { reason } = &outcome else { panic!("{status:?}: {outcome:?}") };
        assert!(reason.contains("redirect") && reason.contains("/v2/instances"), "{status:?}: {reason}");
        let outcome = c.block_create(&block_req(&format!("{label}-vol"))).await;
        assert!(matches!(outcome, Outcome::Unknown { .. }), "{status:?}: {outcome:?}");
        let outcome = c.block_attach(&VultrBlockId::from("b"), &VultrInstanceId::from("i")).await;
        assert!(matches!(outcome, Outcome::Unknown { .. }), "{status:?}: {outcome:?}");

        let err = c.instance_get(&VultrInstanceId::from("i")).await.expect_err("a redirect is not a 404");
        assert!(
            matches!(&err, ProviderError::Status { status: s, .. } if (300..400).contains(s)),
            "{status:?}: {err:?}"
        );
        let err =
            c.instance_delete(&VultrInstanceId::from("i")).await.expect_err("a redirect does not confirm a deletion");
        assert!(matches!(err, ProviderError::Status { .. }), "{err:?}");
        assert!(c.instance_list().await.is_err());

        let l = sim.ledger();
        assert_eq!(l.creates_per_label.get(label), None, "{status:?}: applied 0 times");
        assert!(l.resources.is_empty(), "{status:?}: nothing applied");
        assert!(l.attaches_per_block.is_empty(), "{status:?}");
        for route in [
            "POST /v2/instances",
            "POST /v2/blocks",
            "POST /v2/blocks/{id}/attach",
            "GET /v2/instances/{id}",
            "DELETE /v2/instances/{id}",
            "GET /v2/instances",
        ] {
            assert_eq!(l.requests[route], 1, "{status:?}: {route} sent once, never followed or retried");
        }
        assert_eq!(l.faults.len(), 6, "{status:?}: every request got the fault");
        for e in &l.faults {
            assert_eq!(e.fault, Some(FaultKind::Redirect), "{e:?}");
            let s = e.redirect_status.expect("the status is logged");
            assert!(status.is_none_or(|want| want == s), "{status:?}: {e:?}");
            assert!(l.responses_by_status.get(&s).is_some_and(|n| *n > 0), "{l:?}");
        }
    }
}

/// `lost_redirect`: applied, then answered with a 3xx to itself. Still
/// Unknown, still one POST, so applied exactly once (a client that followed
/// a 307/308 here would show 2 in `creates_per_label`).
#[tokio::test]
async fn a_create_applied_then_redirected_is_unknown_and_applied_exactly_once() {
    for status in [301, 302, 303, 307, 308] {
        let sim = sim(SimConfig::default().instant()).await;
        sim.set_faults(Faults {
            lost_redirect: 1.0,
            redirect_status: Some(status),
            ops: vec![Op::InstanceCreate],
            ..Faults::default()
        })
        .unwrap();
        let c = client(&sim.base_url);
        let label = format!("oduflow-lost-redirect-{status}");
        let outcome = c.instance_create(&instance_req(&label)).await;
        let Outcome::Unknown { reason } = &outcome else { panic!("{status}: {outcome:?}") };
        assert!(reason.contains(&status.to_string()), "{reason}");
        let l = sim.ledger();
        assert_eq!(l.requests["POST /v2/instances"], 1, "{status}");
        assert_eq!(l.creates_per_label[&label], 1, "{status}: applied exactly once");
        assert_eq!(l.faults[0].fault, Some(FaultKind::LostRedirect));
        // The engine adopts it by label, as after any lost answer.
        let found = c.instance_list_by_label(&Label::from(label.as_str())).await.unwrap();
        assert_eq!(found.len(), 1, "{status}");
    }
}

/// Scans against the simulator when every page after the first repeats the
/// item the page before ended with, two items a page: every block and
/// instance is found once, and a label's block is one match, never the
/// `duplicate_matches` two copies would make.
#[tokio::test]
async fn scans_keep_each_item_once_when_pages_repeat() {
    let sim = sim(SimConfig::default().instant()).await;
    let c = VultrClient::new(VultrConfig { per_page: 2, ..fast_config(&sim.base_url, KEY) }).unwrap();
    for n in 0..5 {
        assert!(matches!(c.instance_create(&instance_req(&format!("oduflow-r{n}"))).await, Outcome::Accepted(_)));
        assert!(matches!(c.block_create(&block_req(&format!("oduflow-r{n}-vol"))).await, Outcome::Accepted(_)));
    }
    sim.set_faults(Faults { page_repeat: 1.0, ops: vec![Op::InstanceList, Op::BlockList], ..Faults::default() })
        .unwrap();
    let labels: Vec<Label> = (0..5).map(|n| Label::from(format!("oduflow-r{n}-vol").as_str())).collect();
    let found = c.block_find_by_labels(&labels).await.unwrap();
    assert!(found.values().all(|v| v.len() == 1), "{found:?}");
    let mut ids: Vec<String> = c.instance_list().await.unwrap().into_iter().map(|i| i.label).collect();
    ids.sort();
    assert_eq!(ids, (0..5).map(|n| format!("oduflow-r{n}")).collect::<Vec<_>>());
    let repeats = sim.ledger().faults.iter().filter(|f| f.fault == Some(FaultKind::PageRepeat)).count();
    assert!(repeats >= 4, "the pages after the first repeated: {repeats}");
}

/// A scan's ids against the simulator's ledger at its end: no id twice,
/// none the simulator never had, and every resource of `kind` still there
/// among them. The number still there.
fn scan_missed_nothing(case: &str, kind: ResourceKind, listed: &[String], ledger: &Ledger) -> usize {
    let mut once = listed.to_vec();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), listed.len(), "{case}: {kind:?} listed twice: {listed:?}");
    let of_kind: Vec<_> = ledger.resources.iter().filter(|r| r.kind == kind).collect();
    assert!(listed.iter().all(|id| of_kind.iter().any(|r| r.id == *id)), "{case}: {kind:?} the simulator never had");
    let live: Vec<&str> = of_kind.iter().filter(|r| r.deleted_at.is_none()).map(|r| r.id.as_str()).collect();
    let missed: Vec<&&str> = live.iter().filter(|id| !listed.iter().any(|l| l == *id)).collect();
    assert!(missed.is_empty(), "{case}: {kind:?} still there but not listed: {missed:?} (listed {listed:?})");
    live.len()
}

/// Scans against the simulator while resources are deleted under them
/// (`page_delete`: once a page with a next one is answered, the item it
/// ended with and the one the next page starts with are deleted before the
/// next page is asked for), alone and with pages that repeat: every
/// instance, block and DNS record still there at the end, by the
/// simulator's ledger, is in the scan's result, and no id is there twice.
/// A next page that started by position would skip the item after the two
/// deleted. (Pages that repeat need two items a page: with one, a repeated
/// page is the page before, cursor included.)
#[tokio::test]
async fn scans_miss_nothing_still_there_when_items_are_deleted_during_them() {
    let cases = [
        ("every page deletes, two a page", 2, Faults { page_delete: 1.0, ..Faults::default() }),
        ("every page deletes, three a page", 3, Faults { page_delete: 1.0, ..Faults::default() }),
        ("half the pages delete, one a page", 1, Faults { page_delete: 0.5, ..Faults::default() }),
        ("pages repeat or delete, two a page", 2, Faults { page_repeat: 0.5, page_delete: 0.5, ..Faults::default() }),
        ("pages repeat or delete, three a page", 3, Faults { page_repeat: 0.4, page_delete: 0.6, ..Faults::default() }),
    ];
    let kinds = [ResourceKind::Instance, ResourceKind::Block, ResourceKind::DnsRecord];
    for (seed, (case, per_page, faults)) in cases.into_iter().enumerate() {
        let sim = sim(SimConfig { seed: seed as u64, rate_per_sec: 10_000, ..SimConfig::default().instant() }).await;
        let c = VultrClient::new(VultrConfig { per_page, ..fast_config(&sim.base_url, KEY) }).unwrap();
        for n in 0..12 {
            assert!(matches!(c.instance_create(&instance_req(&format!("oduflow-d{n}"))).await, Outcome::Accepted(_)));
            assert!(matches!(c.block_create(&block_req(&format!("oduflow-d{n}-vol"))).await, Outcome::Accepted(_)));
            let r = DnsRecordRequest {
                name: format!("d{n}"),
                record_type: "A".into(),
                data: "192.0.2.7".into(),
                ttl: None,
                priority: None,
            };
            assert!(matches!(c.dns_record_create("example.com", &r).await, Outcome::Accepted(_)));
        }
        sim.set_faults(Faults { ops: vec![Op::InstanceList, Op::BlockList, Op::DnsRecordList], ..faults.clone() })
            .unwrap();
        let vms: Vec<String> = c.instance_list().await.unwrap().into_iter().map(|i| i.id.to_string()).collect();
        let vols: Vec<String> = c.block_list().await.unwrap().into_iter().map(|b| b.id.to_string()).collect();
        let recs: Vec<String> =
            c.dns_record_list("example.com").await.unwrap().into_iter().map(|r| r.id.to_string()).collect();
        let l = sim.ledger();
        for (kind, listed) in kinds.into_iter().zip([&vms, &vols, &recs]) {
            let live = scan_missed_nothing(case, kind, listed, &l);
            let gone = l.resources.iter().filter(|r| r.kind == kind && r.deleted_at.is_some()).count();
            assert!(live > 0 && gone > 0, "{case}: {kind:?}: {live} still there, {gone} deleted during the scan");
        }
        let drawn = |k: FaultKind| l.faults.iter().filter(|f| f.fault == Some(k)).count();
        assert!(drawn(FaultKind::PageDelete) >= 3, "{case}: {:?}", l.faults);
        assert_eq!(drawn(FaultKind::PageRepeat) > 0, faults.page_repeat > 0.0, "{case}: {:?}", l.faults);
    }
}
