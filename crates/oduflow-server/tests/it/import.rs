//! `oduflow import` end to end: 50 servers made outside oduflow (most with
//! one volume; some with none, two, or a label another server carries),
//! a dry run that records nothing, an import that sends nothing but
//! listings, observed clients that every changing command refuses, a few
//! promoted and deleted through oduflow, and the rest untouched, as the
//! simulator's ledger shows.

use crate::bulk::Fleet;
use oduflow_engine::operator::{self, Actor, ImportFilter, ImportOutcome};
use oduflow_model::provider::{BlockRequest, InstanceChange, InstanceRequest, Outcome, Provider};
use oduflow_model::*;
use oduflow_vultr::dns::DnsRecordRequest;
use oduflow_vultr::dns_adapter::DnsAdapter;
use std::collections::HashSet;
use std::sync::Arc;

const ZONE: &str = "example.com";

fn dns(zone: &DnsAdapter) -> Option<operator::ImportDns<'_>> {
    Some(operator::ImportDns { adapter: zone, zone })
}

/// An A record in the zone, made in the console; its id.
async fn a_record(f: &Fleet, name: &str, ip: &str) -> String {
    let req = DnsRecordRequest {
        name: name.into(),
        record_type: "A".into(),
        data: ip.into(),
        ttl: Some(300),
        priority: None,
    };
    let Outcome::Accepted(r) = f.cloud.console().dns_record_create(ZONE, &req).await else { panic!("{name}: record") };
    r.id.0
}

/// A server made in the console: a VM whose hostname is its label, in
/// ewr, tagged `legacy`, with `volumes` volumes attached.
async fn server(f: &Fleet, label: &str, volumes: usize) -> Vec<String> {
    let console = f.cloud.console();
    let req = InstanceRequest {
        region: "ewr".into(),
        plan: "vc2-1c-1gb".into(),
        image: ImageSource::Os(2284),
        label: Label(label.to_owned()),
        server: ServerSpec { hostname: label.to_owned(), tags: vec!["legacy".into()], ..Default::default() },
    };
    let Outcome::Accepted(vm) = console.instance_create(&req).await else { panic!("{label}: create") };
    let mut ids = vec![vm.0.clone()];
    for n in 0..volumes {
        let b = BlockRequest {
            region: "ewr".into(),
            size_gb: 40,
            block_type: VolumeType::HighPerf,
            label: Label(format!("{label}-data-{n}")),
        };
        let Outcome::Accepted(id) = console.block_create(&b).await else { panic!("{label}: block") };
        let attached = console.block_attach(&id, &vm).await;
        assert!(matches!(attached, Outcome::Accepted(_)), "{label}: attach {attached:?}");
        ids.push(id.0);
    }
    ids
}

#[tokio::test]
async fn fifty_servers_made_outside_are_imported_observed_and_only_the_promoted_are_changed() {
    let f = Fleet::new().await;
    let (ids_of, records, elsewhere) = account(&f).await;
    let zone = DnsAdapter::new((*f.p).clone(), ZONE.into(), 300);
    let actor = || Actor { by: "ops", now_ms: f.now(), attempts_max: 3 };
    let all = ImportFilter::default();

    let before = f.everything().await;
    let dry = operator::import(&f.store, f.p.as_ref(), &all, dns(&zone), actor(), true).await.unwrap();
    let count = |items: &[operator::ImportItem], o| items.iter().filter(|i| i.outcome == o).count();
    assert_eq!(dry.len(), 50);
    assert_eq!((count(&dry, ImportOutcome::WouldImport), count(&dry, ImportOutcome::DoesNotFit)), (40, 10), "{dry:#?}");
    let why = |label: &str| dry.iter().find(|i| i.label == label).unwrap().detail.clone();
    assert!(why("bare-1").contains("no volume attached"), "{}", why("bare-1"));
    assert!(why("twin-1").contains("2 volumes attached"), "{}", why("twin-1"));
    assert!(why("dup").contains("not unique"), "{}", why("dup"));
    assert_eq!(f.everything().await, before, "a dry run recorded something");
    let would = |label: &str| dry.iter().find(|i| i.label == label).unwrap().dns_records.clone();
    assert_eq!(would("web-03"), [records["web-03"].clone()]);
    assert!(would("web-10").is_empty(), "a record pointing elsewhere is not the server's");

    // Filters: by label pattern, tag and region.
    let web_1x = ImportFilter { label: Some("web-1*".into()), tag: Some("legacy".into()), region: Some("ewr".into()) };
    let some = operator::import(&f.store, f.p.as_ref(), &web_1x, None, actor(), true).await.unwrap();
    assert_eq!(some.len(), 10);

    let done = operator::import(&f.store, f.p.as_ref(), &all, dns(&zone), actor(), false).await.unwrap();
    assert_eq!(count(&done, ImportOutcome::Imported), 40, "{done:#?}");
    assert_eq!(f.cloud.sends(), Vec::<String>::new(), "the import changed something at the provider");
    for (name, status, _) in f.statuses().await {
        let c = f.store.client_get(&name).await.unwrap().unwrap();
        assert!(name.starts_with("web-") && status == ClientStatus::Ready && c.infra.observe_only, "{c:?}");
    }
    // Each imported client owns the records at its name, as adopted ones.
    for (label, id) in &records {
        let c = f.store.client_get(label).await.unwrap().unwrap();
        let owned = f.store.adapter_states(&c.id).await.unwrap();
        assert!(
            owned.iter().any(|a| a.adapter == "dns" && a.owned.to_string().contains(id.as_str())),
            "{label}: {owned:?}"
        );
    }
    let again = operator::import(&f.store, f.p.as_ref(), &all, dns(&zone), actor(), false).await.unwrap();
    assert_eq!(count(&again, ImportOutcome::Recorded), 40, "a second import takes nothing twice");

    // As provisioned: the verification finds nothing to change.
    assert_eq!(operator::verify(&f.store, f.p.as_ref(), f.now(), 0).await.unwrap().len(), 0);
    observed_only(&f, &ids_of["web-05"][0]).await;

    // A reconcile of every client (the inventory after a restore asks one):
    // an observed client keeps its record and gets no run, so it never
    // waits as `provisioning` for a run that may send nothing.
    let web6 = f.store.client_reconcile("web-06", &[], "a restore's inventory", f.now(), 3).await.unwrap();
    assert_eq!(web6.infra.status, ClientStatus::Ready);
    assert!(f.store.queue_status(f.now()).await.unwrap().is_settled());

    // Three promoted, then deleted through oduflow.
    let gone = ["web-00", "web-01", "web-02"];
    for n in gone {
        operator::client_promote(&f.store, n, actor()).await.unwrap();
    }
    let with_dns = || {
        vec![Arc::new(DnsAdapter::new((*f.p).clone(), ZONE.into(), 300))
            as Arc<dyn oduflow_model::identity::IdentityAdapter>]
    };
    f.settle_with(with_dns()).await;
    for n in gone {
        assert_eq!(f.store.client_get(n).await.unwrap().unwrap().infra.status, ClientStatus::Ready, "{n}");
        operator::client_delete(&f.store, n, actor()).await.unwrap();
    }
    f.settle_with(with_dns()).await;
    let zone_now: HashSet<String> =
        f.cloud.console().dns_record_list(ZONE).await.unwrap().into_iter().map(|r| r.id.0).collect();
    for (label, id) in &records {
        assert_eq!(zone_now.contains(id), !gone.contains(&label.as_str()), "{label}: its record");
    }
    assert!(zone_now.contains(&elsewhere));
    let live: HashSet<String> =
        f.cloud.sim.ledger().resources.iter().filter(|r| r.deleted_at.is_none()).map(|r| r.id.clone()).collect();
    for n in gone {
        assert_eq!(f.store.client_get(n).await.unwrap().unwrap().infra.status, ClientStatus::Deleted, "{n}");
        assert!(ids_of[n].iter().all(|id| !live.contains(id)), "{n}: still live");
    }
    untouched(&f, &ids_of, &gone, &live);
}

/// Over HTTP: the import's filters refused as the command line refuses
/// them, a dry run that records nothing, and a promote of a client that is
/// not observed refused.
#[tokio::test]
async fn the_import_route_refuses_bad_filters_and_its_dry_run_records_nothing() {
    use crate::{H, assert_error};
    use serde_json::json;
    let h = H::start().await;
    h.fixture().await;
    // Rows and text; a dry run reads the account, so only reads are sent.
    let state = || async { (h.footprint().await.0, oduflow_store::testing::all_text(&h.store).await.unwrap()) };
    let before = state().await;
    for body in
        [json!({ "region": "EWR1" }), json!({ "label": "" }), json!({ "colour": "red" }), json!({ "dry_run": 1 })]
    {
        assert_error(&h.post("/api/v1/import", body.clone()).await, 422, "invalid_input");
        let filter = operator::ImportFilter {
            region: body["region"].as_str().map(str::to_owned),
            label: body["label"].as_str().map(str::to_owned),
            tag: None,
        };
        if body.get("region").is_some() || body.get("label").is_some() {
            assert!(operator::check_import_filter(&filter).is_err(), "{body}: the command line takes it");
        }
    }
    let (status, items) = h.post("/api/v1/import", json!({ "dry_run": true })).await;
    assert_eq!((status, items), (200, json!([])), "the fixture's servers are oduflow's own");
    assert_eq!(state().await, before);
    assert_error(&h.post("/api/v1/clients/acme-ready/promote", json!({})).await, 409, "refused");
    let metrics = h.http.get(h.url("/metrics")).bearer_auth(&h.token).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("\noduflow_clients_observed 0\n"), "{metrics}");
    assert!(metrics.contains("\noduflow_verify_age_seconds "), "the fixture's worker recorded the time: {metrics}");
    assert_error(&h.post("/api/v1/clients/nobody/promote", json!({})).await, 404, "not_found");
}

type Ids = std::collections::BTreeMap<String, Vec<String>>;

/// 50 servers made in the console: 40 that fit (`web-00` to `web-39`),
/// four without a volume, two with two, four under one label; DNS records
/// at the names of web-00 to web-09 pointing at their servers, and one at
/// web-10 pointing elsewhere. The ids of each server's resources, the
/// records by label, and the one pointing elsewhere.
async fn account(f: &Fleet) -> (Ids, std::collections::BTreeMap<String, String>, String) {
    let mut ids_of = Ids::new();
    for n in 0..40 {
        let label = format!("web-{n:02}");
        ids_of.insert(label.clone(), server(f, &label, 1).await);
    }
    for (label, volumes) in [("bare-1", 0), ("bare-2", 0), ("bare-3", 0), ("bare-4", 0), ("twin-1", 2), ("twin-2", 2)] {
        ids_of.insert(label.to_owned(), server(f, label, volumes).await);
    }
    for n in 0..4 {
        // Four servers under one label: which is which cannot be told.
        ids_of.insert(format!("dup#{n}"), server(f, "dup", 1).await);
    }
    // DNS records at the names of web-00 to web-09, pointing at their
    // servers, and one at web-10 pointing elsewhere (not theirs).
    let listed = f.cloud.instances().await;
    let ip = |label: &str| listed.iter().find(|i| i.label == label).unwrap().main_ip.clone();
    let mut records = std::collections::BTreeMap::new();
    for n in 0..10 {
        let label = format!("web-{n:02}");
        records.insert(label.clone(), a_record(f, &label, &ip(&label)).await);
    }
    let elsewhere = a_record(f, "web-10", "198.51.100.7").await;
    (ids_of, records, elsewhere)
}

/// Every command that could change an observed client refuses it, and a
/// drift on one is reported and runs nothing.
async fn observed_only(f: &Fleet, vm: &str) {
    let actor = || Actor { by: "ops", now_ms: f.now(), attempts_max: 3 };
    // Every command that could change an observed client refuses it.
    let refused = |e: operator::OperatorError| assert!(e.to_string().contains("observed only"), "{e}");
    refused(operator::client_delete(&f.store, "web-05", actor()).await.unwrap_err());
    refused(operator::reconcile(&f.store, f.p.as_ref(), "web-05", false, actor()).await.unwrap_err());
    let update = oduflow_model::update::SpecUpdate { volume_gb: Some(80), ..Default::default() };
    refused(operator::client_update(&f.store, Some(f.p.as_ref()), "web-05", &update, actor()).await.unwrap_err());
    refused(operator::abandon(&f.store, "web-05", ResourceKind::Vm, "x", actor()).await.unwrap_err());
    // A drift on an observed client is reported, and runs nothing.
    let vm5 = VultrInstanceId(vm.to_owned());
    let tags = InstanceChange { tags: Some(vec!["by-hand".into()]), ..Default::default() };
    f.cloud.console().instance_update(&vm5, &tags).await;
    let drift = operator::verify(&f.store, f.p.as_ref(), f.now(), 0).await.unwrap();
    assert_eq!(drift.iter().filter_map(|d| d.client.as_deref()).collect::<Vec<_>>(), ["web-05"]);
    assert!(f.store.queue_status(f.now()).await.unwrap().is_settled());
}

/// No request that changes anything ever named the servers not promoted,
/// and each is still live.
fn untouched(f: &Fleet, ids_of: &Ids, gone: &[&str], live: &HashSet<String>) {
    // The rest: no request that changes anything ever named them.
    let mine = f.p.key_fingerprint();
    let touched: HashSet<String> = f
        .cloud
        .sim
        .ledger()
        .request_log
        .into_iter()
        .filter(|r| r.method != "GET" && r.key_fingerprint == mine.as_str())
        .filter_map(|r| r.resource_id)
        .collect();
    for (label, ids) in ids_of.iter().filter(|(l, _)| !gone.contains(&l.as_str())) {
        assert!(ids.iter().all(|id| !touched.contains(id) && live.contains(id)), "{label} was changed");
    }
}
