//! The DNS identity owns its records by id, on both stores, through
//! the simulator's DNS API: an operator's record with the client's name is
//! never touched; a lost create is resolved without a duplicate; a changed
//! address is updated in place; IPv6 gets an AAAA record; a worker killed at
//! each of the adapter's steps resumes with nothing lost or duplicated.

use super::*;
use oduflow_vultr::{DnsRecord, DnsRecordRequest};
use serde_json::json;

const ZONE: &str = "example.com";

fn configure(env: &Env) {
    std::fs::write(env.dir.path().join("oduflow.toml"), format!("[dns]\ndomain = \"{ZONE}\"\nttl = 120\n")).unwrap();
}

/// The zone's records with this name, any type, oduflow's owner markers
/// included.
async fn with_markers(env: &Env, name: &str) -> Vec<DnsRecord> {
    let mut v: Vec<DnsRecord> =
        env.console().dns_record_list(ZONE).await.unwrap().into_iter().filter(|r| r.name == name).collect();
    v.sort_by(|a, b| a.record_type.cmp(&b.record_type));
    v
}

/// The zone's records with this name, any type, but oduflow's owner
/// markers (each client's TXT `oduflow-owner=<id>` beside its records).
async fn records(env: &Env, name: &str) -> Vec<DnsRecord> {
    let marker = |r: &DnsRecord| r.record_type == "TXT" && oduflow_model::identity::dns_marker_owner(&r.data).is_some();
    with_markers(env, name).await.into_iter().filter(|r| !marker(r)).collect()
}

/// The id of the client's owned record of type `rtype`, from `client show`.
fn owned_id(dns: &serde_json::Value, rtype: &str) -> serde_json::Value {
    let recs = dns["owned"]["records"].as_array().unwrap_or_else(|| panic!("no owned records: {dns}"));
    recs.iter().find(|r| r["type"] == rtype).map_or(serde_json::Value::Null, |r| r["id"].clone())
}

/// An operator's own record, made outside oduflow.
async fn operator_record(env: &Env, name: &str, rtype: &str, data: &str) -> DnsRecord {
    let req = DnsRecordRequest {
        name: name.into(),
        record_type: rtype.into(),
        data: data.into(),
        ttl: Some(300),
        priority: None,
    };
    match env.console().dns_record_create(ZONE, &req).await {
        oduflow_model::provider::Outcome::Accepted(r) => r,
        other => panic!("{other:?}"),
    }
}

fn create(env: &Env, name: &str, extra: &[&str]) {
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    env.ok(&args);
}

fn settle(env: &Env) {
    let o = env.cmd(&["worker", "--until-settled"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn show(env: &Env, name: &str) -> serde_json::Value {
    serde_json::from_str(&env.ok(&["client", "show", name, "--json"])).unwrap()
}

/// The VM's main IP as the simulator shows it.
async fn vm_ip(env: &Env, v: &serde_json::Value) -> String {
    let vm = v["vm_id"].as_str().unwrap();
    let i = oduflow_model::provider::Provider::instance_get(&env.console(), &VultrInstanceId(vm.to_owned()))
        .await
        .unwrap()
        .unwrap();
    i.main_ip
}

/// Runs the resolution `client show` suggests that starts with `prefix`,
/// its placeholders filled in.
fn run_suggested(env: &Env, v: &serde_json::Value, prefix: &str, fill: &[(&str, &str)]) {
    let cmds: Vec<&str> = v["resolve"].as_array().unwrap().iter().map(|r| r["command"].as_str().unwrap()).collect();
    let cmd = cmds.iter().find(|c| c.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} in {cmds:?}"));
    let mut args: Vec<String> = cmd.split_whitespace().skip(1).map(str::to_owned).collect();
    for a in &mut args {
        if let Some((_, to)) = fill.iter().find(|(from, _)| a == from) {
            *a = (*to).to_owned();
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.ok(&args);
}

/// DNS requests by route, as the simulator counted them.
fn dns_requests(env: &Env) -> std::collections::BTreeMap<String, u64> {
    env.sim.ledger().requests.into_iter().filter(|(k, _)| k.contains("/domains/")).collect()
}

oduflow_store::on_both_stores!(
    super::env_of =>
    an_operators_record_with_the_clients_name_is_never_touched,
    adopting_the_operators_record_makes_it_the_clients,
    a_lost_record_create_is_resolved_without_a_duplicate,
    a_lost_record_create_listed_late_is_resolved_without_a_duplicate,
    a_changed_address_is_updated_in_place,
    ipv6_gets_an_aaaa_record_and_both_go_with_the_client,
    killed_during_record_creation_and_removal_resumes,
    command_adapters_get_the_recorded_identity_on_removal,
    a_changed_zone_does_not_forget_the_records_in_the_old_one,
    a_transient_404_on_an_owned_record_keeps_it,
    two_clients_cannot_share_a_dns_name,
    the_inventory_traces_a_dns_record_of_a_client_the_restore_lost,
    a_recovered_client_adopts_its_own_dns_record,
    a_deleted_client_takes_its_marked_records_along,
    a_record_answering_404_is_asked_again_only_spaced_out,
    a_client_recreated_and_deleted_takes_its_new_records_along,
    a_restored_removed_identity_is_looked_for_again,
    a_restored_ensured_identity_is_checked_again,
    a_restored_identity_whose_records_moved_is_brought_back,
    a_restored_identity_from_before_ownership_is_left_as_it_was,
    the_api_settles_a_dns_block_and_deletes_a_dns_orphan_as_the_cli_does,
);

/// The HTTP API's adopt, abandon and orphan delete of DNS records go through
/// the same operation as the command line's: the same refusals (bad input
/// 422, nothing recorded), the same result.
async fn the_api_settles_a_dns_block_and_deletes_a_dns_orphan_as_the_cli_does(env: Env) {
    use super::service::{address_after, http_with, stderr_line};
    configure(&env);
    env.ok(&["init"]);
    let token = env.ok(&["token", "create", "erp", "--scope", "admin"]).trim().to_owned();
    let theirs = operator_record(&env, "www", "A", "198.51.100.8").await;
    let other = operator_record(&env, "ftp", "A", "198.51.100.9").await;
    create(&env, "www", &[]);
    settle(&env);
    assert_eq!(show(&env, "www")["blocked_reason"], "dns_record_foreign");
    let mut serve =
        env.cmd(&["serve", "--listen", "127.0.0.1:0"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let addr = address_after(&stderr_line(&mut serve, "oduflow serve: listening on"), "listening on http://");
    let post = |path: &str, body: serde_json::Value| http_with(&addr, "POST", path, Some(&token), &body.to_string());
    let events = |env: &Env| show(env, "www")["events"].to_string();
    let before = events(&env);
    for (body, why) in [
        (json!({ "kind": "dns", "id": "00000000-0000-4000-8000-000000000000" }), "does not exist"),
        (json!({ "kind": "dns", "id": other.id }), "not at the client's DNS name"),
        (json!({ "kind": "dns", "id": "not an id" }), ""),
    ] {
        let (status, answer) = post("/api/v1/clients/www/adopt", body.clone());
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(answer.contains(why), "{body}: {answer}");
    }
    let (status, answer) = post("/api/v1/clients/www/abandon", json!({ "kind": "dns", "by": "ops", "reason": "none" }));
    assert_eq!(status, 422, "nothing to abandon: {answer}");
    assert_eq!(events(&env), before, "the refusals recorded nothing");
    let (status, answer) = post("/api/v1/clients/www/adopt", json!({ "kind": "dns", "id": theirs.id }));
    assert_eq!(status, 200, "{answer}");
    settle(&env);
    let v = show(&env, "www");
    assert_eq!(v["status"], "ready", "{v}");
    let now = records(&env, "www").await;
    assert_eq!((now.len(), now[0].id.as_str()), (1, theirs.id.as_str()), "adopted, updated in place: {now:?}");
    assert!(events(&env).contains("dns_record_adopted"));
    // A client no longer blocked settles nothing.
    let (status, answer) = post("/api/v1/clients/www/adopt", json!({ "kind": "dns", "id": theirs.id }));
    assert_eq!(status, 422, "{answer}");
    // A record marked for a client this database does not know is a DNS
    // orphan: deleted on an attestation, confirmed by a GET 404.
    let (_, marker, a) = records_of_a_lost_client(&env, "lost").await;
    let (status, answer) = post(&format!("/api/v1/orphans/{}/delete", a.id), json!({ "by": "ops" }));
    assert_eq!(status, 422, "an attestation needs a reason: {answer}");
    let (status, answer) = post(&format!("/api/v1/orphans/{}/delete", a.id), json!({ "by": "ops", "reason": "lost" }));
    assert_eq!(status, 200, "{answer}");
    let d: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!((d["kind"].as_str(), d["confirmed"].as_bool()), (Some("dns"), Some(true)), "{d}");
    assert_eq!(with_markers(&env, "lost").await, vec![marker], "the A record alone went");
    serve.kill().unwrap();
    serve.wait().unwrap();
}

async fn an_operators_record_with_the_clients_name_is_never_touched(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    let mine = operator_record(&env, "mail", "A", "198.51.100.7").await;
    // A TXT record at the name does not conflict with an A record.
    let txt = operator_record(&env, "mail", "TXT", "v=spf1 -all").await;
    create(&env, "mail", &[]);
    settle(&env);
    let v = show(&env, "mail");
    assert_eq!(v["status"], "blocked", "{v}");
    assert_eq!(v["blocked_reason"], "dns_record_foreign", "{v}");
    let detail = v["blocked_detail"].as_str().unwrap();
    assert!(detail.contains(mine.id.as_str()) && detail.contains("198.51.100.7"), "names the record: {detail}");
    assert!(detail.contains("oduflow adopt mail --kind dns --id") && detail.contains("--dns-name"), "{detail}");
    assert_eq!(records(&env, "mail").await, vec![mine.clone(), txt.clone()], "nothing created or changed at the name");

    // Another DNS name (the suggested command): the client's own record
    // there; the operator's stay.
    run_suggested(&env, &v, "oduflow client update mail --dns-name", &[("NAME", "mail-vm")]);
    settle(&env);
    let v = show(&env, "mail");
    assert_eq!(v["status"], "ready", "{v}");
    let ip = vm_ip(&env, &v).await;
    let own = records(&env, "mail-vm").await;
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!((own[0].record_type.as_str(), own[0].data.as_str(), own[0].ttl), ("A", ip.as_str(), 120));

    env.ok(&["client", "delete", "mail"]);
    settle(&env);
    assert_eq!(show(&env, "mail")["status"], "deleted");
    assert!(records(&env, "mail-vm").await.is_empty(), "the client's record went with it");
    assert_eq!(records(&env, "mail").await, vec![mine.clone(), txt.clone()], "the operator's records are untouched");
    let touched = env.sim.ledger().dns_patch_bodies;
    assert!(touched.iter().all(|p| p["id"] != mine.id.as_str() && p["id"] != txt.id.as_str()), "{touched:?}");
}

async fn adopting_the_operators_record_makes_it_the_clients(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    let theirs = operator_record(&env, "www", "A", "198.51.100.8").await;
    create(&env, "www", &[]);
    settle(&env);
    assert_eq!(show(&env, "www")["blocked_reason"], "dns_record_foreign");
    // Bad input changes nothing: an id that does not exist, one at another name.
    let other = operator_record(&env, "ftp", "A", "198.51.100.9").await;
    for id in ["00000000-0000-4000-8000-000000000000", other.id.as_str(), "not an id"] {
        let o = env.cmd(&["adopt", "www", "--kind", "dns", "--id", id]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{id}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // A record Vultr cannot be asked about is no bad input: exit 1 (a
    // provider error, worth trying again), not 2, and nothing recorded.
    let fail_gets = |n| oduflow_sim::Faults {
        error_5xx: 1.0,
        ops: vec![oduflow_sim::Op::DnsRecordGet],
        faults_max: Some(n),
        ..Default::default()
    };
    env.sim.set_faults(fail_gets(1000)).unwrap();
    let o = env.cmd(&["adopt", "www", "--kind", "dns", "--id", theirs.id.as_str()]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("500"), "{}", String::from_utf8_lossy(&o.stderr));
    env.sim.set_faults(fail_gets(0)).unwrap();
    let v = show(&env, "www");
    assert_eq!(v["blocked_reason"], "dns_record_foreign");
    // The suggestion names the record: run as it is.
    run_suggested(&env, &v, &format!("oduflow adopt www --kind dns --id {}", theirs.id), &[]);
    settle(&env);
    let v = show(&env, "www");
    assert_eq!(v["status"], "ready", "{v}");
    let ip = vm_ip(&env, &v).await;
    let now = records(&env, "www").await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!((now[0].id.as_str(), now[0].data.as_str()), (theirs.id.as_str(), ip.as_str()), "updated in place");
    // A record one client owns is adopted by no other, and a client that is
    // not blocked for its DNS adopts nothing (a run may be creating). (A
    // second client cannot be given the name www: web is blocked by a
    // record of its own name.)
    let web = operator_record(&env, "web", "A", "198.51.100.10").await;
    create(&env, "web", &[]);
    settle(&env);
    assert_eq!(show(&env, "web")["blocked_reason"], "dns_record_foreign");
    for who in ["web", "www"] {
        let o = env.cmd(&["adopt", who, "--kind", "dns", "--id", theirs.id.as_str()]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{who}: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(records(&env, "www").await, now, "untouched by the refusals");
    env.ok(&["client", "delete", "web"]);
    env.ok(&["client", "delete", "www"]);
    settle(&env);
    assert_eq!(show(&env, "www")["status"], "deleted");
    assert!(records(&env, "www").await.is_empty(), "an adopted record is the client's: deleted with it");
    assert_eq!(records(&env, "ftp").await, vec![other]);
    assert_eq!(records(&env, "web").await, vec![web]);
}

async fn a_lost_record_create_is_resolved_without_a_duplicate(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    env.sim
        .set_faults(oduflow_sim::Faults {
            lost_drop: 1.0,
            ops: vec![oduflow_sim::Op::DnsRecordCreate],
            faults_max: Some(1),
            ..Default::default()
        })
        .unwrap();
    create(&env, "acme", &[]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    assert_eq!(env.sim.ledger().faults.len(), 1, "the create's answer was lost");
    let rs = records(&env, "acme").await;
    assert_eq!(rs.len(), 1, "one record, no duplicate: {rs:?}");
    assert_eq!(rs[0].data, vm_ip(&env, &v).await);
    let reqs = dns_requests(&env);
    // The owner marker and the A record, each sent once.
    assert_eq!(reqs.get("POST /v2/domains/{domain}/records"), Some(&2), "sent once: {reqs:?}");
    let dns = &v["adapters"].as_array().unwrap()[0];
    assert_eq!(owned_id(dns, "A"), rs[0].id.as_str(), "{dns}");
}

/// The same, when the zone lists a new record only a while after its 201
/// and a GET answers 404 meanwhile (Vultr's behaviour is unknown): the
/// first listings miss it, a later one finds it, nothing is sent twice.
async fn a_lost_record_create_listed_late_is_resolved_without_a_duplicate(env: Env) {
    let cfg = oduflow_sim::SimConfig { dns_list_lag_ms: 1_500, dns_get_404_window_ms: 700, ..sim_config() };
    let env = Env { sim: start_sim_with(cfg).await, ..env };
    a_lost_record_create_is_resolved_without_a_duplicate(env).await;
}

async fn a_changed_address_is_updated_in_place(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    let v = show(&env, "acme");
    let before = records(&env, "acme").await;
    assert_eq!(before.len(), 1);
    assert!(env.sim.control().set_instance_main_ip(v["vm_id"].as_str().unwrap(), "203.0.113.9"));
    env.ok(&["reconcile", "acme"]);
    settle(&env);
    assert_eq!(show(&env, "acme")["status"], "ready");
    let after = records(&env, "acme").await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!((after[0].id.as_str(), after[0].data.as_str()), (before[0].id.as_str(), "203.0.113.9"));
    let reqs = dns_requests(&env);
    // The owner marker and the A record, once each; the move is one PATCH.
    assert_eq!(reqs.get("POST /v2/domains/{domain}/records"), Some(&2), "{reqs:?}");
    assert_eq!(reqs.get("PATCH /v2/domains/{domain}/records/{id}"), Some(&1), "{reqs:?}");
}

async fn ipv6_gets_an_aaaa_record_and_both_go_with_the_client(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    create(&env, "acme", &["--ipv6"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    let rs = records(&env, "acme").await;
    let types: Vec<&str> = rs.iter().map(|r| r.record_type.as_str()).collect();
    assert_eq!(types, ["A", "AAAA"], "{rs:?}");
    assert_eq!(rs[1].data, v["ipv6"].as_str().unwrap(), "{v}");
    assert!(rs[1].data.contains(':'));
    env.ok(&["client", "delete", "acme"]);
    settle(&env);
    assert_eq!(show(&env, "acme")["status"], "deleted");
    assert!(records(&env, "acme").await.is_empty());
}

/// Kills the worker at `point`; `true` if it was killed there.
fn killed_at(env: &Env, point: &str) -> bool {
    let o =
        env.cmd(&["worker", "--until-settled", "--concurrency", "1"]).env("ODUFLOW_CRASH_AT", point).output().unwrap();
    !o.status.success()
}

async fn killed_during_record_creation_and_removal_resumes(env: Env) {
    failpoints_required();
    configure(&env);
    env.ok(&["init"]);
    // After the answer came and before its id was recorded: the next run
    // finds exactly that record by a zone listing.
    create(&env, "c1", &[]);
    assert!(killed_at(&env, "dns-record-created"));
    settle(&env);
    assert_eq!(show(&env, "c1")["status"], "ready");
    assert_eq!(records(&env, "c1").await.len(), 1, "no duplicate");

    // After the create was recorded and before it was sent: nothing can
    // tell whether it left, the listings find nothing, and the client
    // blocks with the evidence; the operator's abandon lets it create.
    create(&env, "c2", &[]);
    assert!(killed_at(&env, "dns-record-claimed"));
    settle(&env);
    let v = show(&env, "c2");
    assert_eq!(v["blocked_reason"], "uncertain_dns_record", "{v}");
    assert!(v["blocked_detail"].as_str().unwrap().contains("oduflow abandon c2 --kind dns"), "{v}");
    assert!(records(&env, "c2").await.is_empty());
    run_suggested(&env, &v, "oduflow abandon c2 --kind dns", &[("WHO", "ops"), ("WHY", "console-shows-none")]);
    settle(&env);
    assert_eq!(show(&env, "c2")["status"], "ready");
    assert_eq!(records(&env, "c2").await.len(), 1);
    let o = env.cmd(&["abandon", "c2", "--kind", "dns", "--by", "ops", "--reason", "again"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "nothing left to abandon");

    // After a DELETE was answered and before that was recorded.
    env.ok(&["client", "delete", "c1"]);
    assert!(killed_at(&env, "dns-record-deleted"));
    assert_ne!(show(&env, "c1")["status"], "deleted");
    settle(&env);
    assert_eq!(show(&env, "c1")["status"], "deleted");
    assert!(records(&env, "c1").await.is_empty());
    let reqs = dns_requests(&env);
    // c1's once; c2's killed one never left, so only the ones after the
    // abandon (each client: its owner marker and its A record).
    assert_eq!(reqs.get("POST /v2/domains/{domain}/records"), Some(&4), "{reqs:?}");
}

async fn command_adapters_get_the_recorded_identity_on_removal(env: Env) {
    let fx = env.dir.path().join("identities");
    std::fs::create_dir_all(&fx).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/identity.sh");
    let toml = format!(
        "[[adapter]]\nname = \"vpn\"\nensure = [\"sh\", \"{script}\", \"vpn\", \"ensure\"]\n\
         check = [\"sh\", \"{script}\", \"vpn\", \"check\"]\nremove = [\"sh\", \"{script}\", \"vpn\", \"remove\"]\n"
    );
    std::fs::write(env.dir.path().join("oduflow.toml"), toml).unwrap();
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    let run = || {
        let o = env.cmd(&["worker", "--until-settled"]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run();
    let v = show(&env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    let ip = vm_ip(&env, &v).await;
    let vpn = &v["adapters"].as_array().unwrap()[0];
    assert_eq!(vpn["owned"]["id"], "vpn-key-acme", "what ensure made is recorded: {vpn}");
    assert_eq!(vpn["facts"]["ipv4"], ip.as_str(), "{vpn}");
    env.ok(&["client", "delete", "acme"]);
    run();
    assert_eq!(show(&env, "acme")["status"], "deleted");
    let seen = std::fs::read_to_string(fx.join("vpn-acme.removed")).unwrap();
    assert_eq!(seen.trim(), format!("remove {ip} vpn-key-acme"), "the VM was gone, its recorded facts were not");
}

/// The review's first finding: records did not know their zone, so after
/// `[dns] domain` changed, a removal sent its DELETE to the new zone, took
/// the 404 for success and forgot the record in the old one.
async fn a_changed_zone_does_not_forget_the_records_in_the_old_one(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    assert_eq!(records(&env, "acme").await.len(), 1);
    std::fs::write(env.dir.path().join("oduflow.toml"), "[dns]\ndomain = \"example.org\"\nttl = 120\n").unwrap();
    env.ok(&["client", "delete", "acme"]);
    settle(&env);
    assert_eq!(show(&env, "acme")["status"], "deleted");
    assert!(records(&env, "acme").await.is_empty(), "the record in example.com went with the client");
}

/// Moves the times in `name`'s DNS ownership record back an hour, as if its
/// record had been made that long ago (a 404 for a fresh record was never
/// taken as proof of anything).
async fn age_dns_ownership(env: &Env, name: &str) {
    let store = env.store().await;
    let id = store.client_get(name).await.unwrap().unwrap().id;
    let st = store.adapter_states(&id).await.unwrap().into_iter().find(|s| s.adapter == "dns").unwrap();
    let mut v = st.owned.clone();
    for r in v["records"].as_array_mut().unwrap() {
        r["claimed_ms"] = (r["claimed_ms"].as_i64().unwrap() - 3_600_000).into();
    }
    let ledger = oduflow_store::ReceiptLedger::new(store.clone());
    let put = ledger.adapter_owned_put(&id, "dns", &v, st.owned_version, 1).await.unwrap();
    assert!(put.is_some(), "the ownership record was rewritten");
}

/// One 404 to the GET of a record the client owns (a temporary one: the
/// record is there) made oduflow forget the record: the client then blocked
/// `dns_record_foreign` on its own record, and following the suggestion
/// (another name, then delete) left it live at the deleted VM's address.
async fn a_transient_404_on_an_owned_record_keeps_it(env: Env) {
    let v = acme_ready(&env);
    let before = records(&env, "acme").await;
    assert_eq!(before.len(), 1);
    age_dns_ownership(&env, "acme").await;
    env.sim
        .set_faults(oduflow_sim::Faults {
            dns_get_404: 1.0,
            ops: vec![oduflow_sim::Op::DnsRecordGet],
            faults_max: Some(1),
            ..Default::default()
        })
        .unwrap();
    // A new address: the record is ensured (a PATCH) and checked (the GET
    // that answers 404 once).
    assert!(env.sim.control().set_instance_main_ip(v["vm_id"].as_str().unwrap(), "203.0.113.9"));
    env.ok(&["reconcile", "acme"]);
    settle(&env);
    assert_eq!(env.sim.ledger().faults.len(), 1, "the record's GET answered 404 once");
    let v = show(&env, "acme");
    assert_eq!((&v["status"], &v["blocked_detail"]), (&"ready".into(), &serde_json::Value::Null));
    let dns = &v["adapters"].as_array().unwrap()[0];
    assert_eq!(owned_id(dns, "A"), before[0].id.as_str(), "still owned: {dns}");
    let after = records(&env, "acme").await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!((after[0].id.as_str(), after[0].data.as_str()), (before[0].id.as_str(), "203.0.113.9"));
    env.ok(&["client", "delete", "acme"]);
    settle(&env);
    assert_eq!(show(&env, "acme")["status"], "deleted");
    assert!(records(&env, "acme").await.is_empty(), "the record went with the client");
}

/// A DNS name belongs to at most one client not yet deleted: `client
/// create` and `client update --dns-name` refuse one another client holds
/// (exit 2, nothing stored). Before, both clients got an A record at it.
async fn two_clients_cannot_share_a_dns_name(env: Env) {
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    create(&env, "mail", &["--dns-name", "shared"]);
    let refused = |args: Vec<&str>, held: &str, by: &str| {
        let o = env.run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("DNS name {held} ")) && err.contains(&format!("client {by}")), "{err}");
    };
    refused(client_create_args("web", &["--dns-name", "acme"]), "acme", "acme");
    refused(client_create_args("shared", &[]), "shared", "mail");
    refused(vec!["client", "update", "acme", "--dns-name", "shared"], "shared", "mail");
    assert!(!env.run(&["client", "show", "web"]).status.success(), "nothing stored");
    assert!(!env.run(&["client", "show", "shared"]).status.success(), "nothing stored");
    assert_eq!(show(&env, "acme")["dns_name"], "acme", "unchanged");
    // A deleted client's name is free again.
    env.ok(&["client", "delete", "mail"]);
    settle(&env);
    assert_eq!(show(&env, "mail")["status"], "deleted");
    create(&env, "shared", &[]);
    // And it cannot come back under a name another client took meanwhile.
    let o = env.run(&client_create_args("mail", &["--dns-name", "shared"]));
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}

/// What the DNS adapter leaves at a client's name: its owner marker and its
/// A record, as a client made after the database's backup left them.
async fn records_of_a_lost_client(env: &Env, name: &str) -> (oduflow_model::ClientId, DnsRecord, DnsRecord) {
    let lost = oduflow_model::ClientId::new_v7();
    let marker = operator_record(env, name, "TXT", &oduflow_model::identity::dns_owner_marker(lost.as_str())).await;
    let a = operator_record(env, name, "A", "203.0.113.9").await;
    (lost, marker, a)
}

/// A client made after the backup the database was restored from: its DNS
/// records carry its owner marker, so the inventory reports them (before,
/// nowhere: their ownership lived only in the lost database), naming the
/// client and the command that recovers it; a record of a live client is
/// never one to delete, and the lost client's is deleted by id on an
/// attestation, confirmed by a GET 404.
async fn the_inventory_traces_a_dns_record_of_a_client_the_restore_lost(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    create(&env, "acme", &[]);
    settle(&env);
    let (lost, marker, a) = records_of_a_lost_client(&env, "late").await;
    let inv: serde_json::Value = serde_json::from_str(&env.ok(&["reconcile", "--all", "--json"])).unwrap();
    let found = inv["dns_orphans"].as_array().unwrap_or_else(|| panic!("no dns_orphans: {inv}"));
    let ids: std::collections::BTreeSet<&str> = found.iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [marker.id.as_str(), a.id.as_str()].into(), "the lost client's records, not acme's: {inv}");
    let recover = format!("--recover {lost}");
    for o in found {
        assert_eq!(o["client_id"], lost.as_str(), "{o}");
        assert!(o["resolve"].as_str().unwrap().contains(&recover), "{o}");
    }
    let a_orphan = found.iter().find(|o| o["id"] == a.id.as_str()).unwrap();
    assert_eq!((a_orphan["name"].as_str(), a_orphan["data"].as_str()), (Some("late.example.com"), Some("203.0.113.9")));

    // acme's own A record is no orphan to delete.
    let acme_a = records(&env, "acme").await.into_iter().find(|r| r.record_type == "A").unwrap();
    let o = env.cmd(&["orphan", "delete", acme_a.id.as_str(), "--by", "ops", "--reason", "test"]).output().unwrap();
    assert!(!o.status.success(), "a live client's record was deletable");
    assert_eq!(with_markers(&env, "acme").await.len(), 2, "acme's records untouched");

    env.ok(&["orphan", "delete", a.id.as_str(), "--by", "ops", "--reason", "late came after the backup"]);
    env.ok(&["orphan", "delete", marker.id.as_str(), "--by", "ops", "--reason", "late came after the backup"]);
    assert!(with_markers(&env, "late").await.is_empty(), "deleted by id");
    let inv: serde_json::Value = serde_json::from_str(&env.ok(&["reconcile", "--all", "--json"])).unwrap();
    assert_eq!(inv["dns_orphans"], serde_json::json!([]), "{inv}");
}

/// The lost client recovered under its id (`client create NAME --recover
/// ID`): its first provisioning takes its records back by the owner marker
/// (the same ids, the A record pointed at the new VM in place), instead of
/// blocking `dns_record_foreign` on its own record.
async fn a_recovered_client_adopts_its_own_dns_record(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    let (lost, marker, a) = records_of_a_lost_client(&env, "late").await;
    create(&env, "late", &["--recover", lost.as_str()]);
    settle(&env);
    let v = show(&env, "late");
    assert_eq!(v["status"], "ready", "{v}");
    let ip = vm_ip(&env, &v).await;
    let now = with_markers(&env, "late").await;
    let ids: Vec<&str> = now.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, vec![a.id.as_str(), marker.id.as_str()], "the same records, no second A: {now:?}");
    assert_eq!(now[0].data, ip, "the A record points at the new VM");
    let inv: serde_json::Value = serde_json::from_str(&env.ok(&["reconcile", "--all", "--json"])).unwrap();
    assert_eq!(inv["dns_orphans"], serde_json::json!([]), "its own again: {inv}");
    env.ok(&["client", "delete", "late"]);
    settle(&env);
    assert!(with_markers(&env, "late").await.is_empty(), "deleted with the client");
}

/// A client whose ownership record lacks records that carry its owner
/// marker (made after the backup its row was restored from, here: recovered
/// under its id and deleted before a worker ran) is never reported deleted
/// while they are live: its removal takes them back by the marker and
/// deletes them by id.
async fn a_deleted_client_takes_its_marked_records_along(env: Env) {
    configure(&env);
    env.ok(&["init"]);
    let (lost, _marker, _a) = records_of_a_lost_client(&env, "late").await;
    create(&env, "late", &["--recover", lost.as_str()]);
    env.ok(&["client", "delete", "late"]);
    settle(&env);
    let v = show(&env, "late");
    assert_eq!(v["status"], "deleted", "{v}");
    assert!(with_markers(&env, "late").await.is_empty(), "reported deleted, its records still live");
}

/// A record deleted behind oduflow's back answers 404 until it is taken as
/// gone (3 404s over a minute). Each 404 was counted a poll interval after
/// the last: a worker polling every 20 ms sent a PATCH or GET for it, and
/// read the VM and volume, about 50 times a second for that minute. The
/// 404s are now asked for spaced out over the minute.
async fn a_record_answering_404_is_asked_again_only_spaced_out(env: Env) {
    let v = acme_ready(&env);
    age_dns_ownership(&env, "acme").await;
    let a = records(&env, "acme").await.remove(0);
    env.console().dns_record_delete(ZONE, &a.id).await.unwrap();
    assert!(env.sim.control().set_instance_main_ip(v["vm_id"].as_str().unwrap(), "203.0.113.9"));
    env.ok(&["reconcile", "acme"]);
    let before = env.sim.ledger().requests.clone();
    let mut worker = env.cmd(&["worker"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    worker.kill().unwrap();
    worker.wait().unwrap();
    let after = env.sim.ledger().requests;
    let grew = |route: &str| after.get(route).unwrap_or(&0) - before.get(route).unwrap_or(&0);
    let asked = grew("PATCH /v2/domains/{domain}/records/{id}") + grew("GET /v2/domains/{domain}/records/{id}");
    let vm_reads = grew("GET /v2/instances/{id}");
    assert!(asked >= 1, "the record was asked for: {after:?}");
    assert!(asked <= 2 && vm_reads <= 6, "{asked} PATCH/GET of the record, {vm_reads} VM reads in 3 s: {after:?}");
    let v = show(&env, "acme");
    assert_ne!(v["status"], "blocked", "{v}");
}

/// acme, with DNS, provisioned: ready, its records made. `client show`.
fn acme_ready(env: &Env) -> serde_json::Value {
    configure(env);
    env.ok(&["init"]);
    create(env, "acme", &[]);
    settle(env);
    let v = show(env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    v
}

/// acme, with DNS, provisioned and deleted: its identity recorded `removed`.
fn acme_made_and_deleted(env: &Env) {
    configure(env);
    env.ok(&["init"]);
    create(env, "acme", &[]);
    settle(env);
    env.ok(&["client", "delete", "acme"]);
    settle(env);
    assert_eq!(show(env, "acme")["status"], "deleted");
}

/// A client deleted (its DNS identity recorded `removed`), created again,
/// and deleted once more while the worker that was making its records was
/// killed before it recorded anything but ownership: the records that run
/// made are the client's, so its removal deletes them before it is
/// reported deleted. The identity once stayed `removed`, so the second
/// removal skipped the adapter and left the records live.
async fn a_client_recreated_and_deleted_takes_its_new_records_along(env: Env) {
    failpoints_required();
    acme_made_and_deleted(&env);
    create(&env, "acme", &[]);
    assert!(killed_at(&env, "dns-record-created"));
    assert!(!with_markers(&env, "acme").await.is_empty(), "the killed run made a record");
    env.ok(&["client", "delete", "acme"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "deleted", "{v}");
    assert!(with_markers(&env, "acme").await.is_empty(), "reported deleted, its records still live");
}

/// A database restored from a copy taken after a deleted client was
/// created again (under another DNS name) but before its run recorded any
/// DNS ownership: the copy says its identity is `removed` (the first
/// deletion's), while the records that run made after the backup are live,
/// carrying its owner marker.
/// After the restore, `removed` proves nothing: the client's removal looks
/// for them and deletes them before it is reported deleted. It once skipped
/// the adapter and left them live.
async fn a_restored_removed_identity_is_looked_for_again(env: Env) {
    acme_made_and_deleted(&env);
    // The copy: acme created again, under another DNS name, no run since.
    create(&env, "acme", &["--dns-name", "shop"]);
    let id = show(&env, "acme")["id"].as_str().unwrap().to_owned();
    // What the run after the backup made at its (new) name.
    operator_record(&env, "shop", "TXT", &oduflow_model::identity::dns_owner_marker(&id)).await;
    operator_record(&env, "shop", "A", "203.0.113.9").await;
    env.ok(&["restore", "declare", "--reason", "restored from last night's backup"]);
    env.ok(&["client", "delete", "acme"]);
    env.ok(&["reconcile", "--all"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "deleted", "{v}");
    assert!(with_markers(&env, "shop").await.is_empty(), "reported deleted, its records still live");
}

/// A restored copy says acme's DNS identity is `ensured`, while the
/// timeline it discarded deleted acme's records (acme deleted, or moved to
/// another name, after the backup). After the restore acme is not ready
/// until its records are read back, and made again. `ensured` once proved
/// enough: the identity was skipped, and acme was ready with no record at
/// its name. (The model check found the schedule.)
async fn a_restored_ensured_identity_is_checked_again(env: Env) {
    acme_ready(&env);
    age_dns_ownership(&env, "acme").await;
    // What the discarded timeline did.
    for r in with_markers(&env, "acme").await {
        env.console().dns_record_delete(ZONE, &r.id).await.unwrap();
    }
    env.ok(&["restore", "declare", "--reason", "restored from last night's backup"]);
    env.ok(&["reconcile", "--all"]);
    // The records are asked for again (3 404s over a minute before they
    // are made anew): a few seconds of a worker show whether acme waits.
    let mut worker = env.cmd(&["worker"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    worker.kill().unwrap();
    worker.wait().unwrap();
    let v = show(&env, "acme");
    let dns = &v["adapters"].as_array().unwrap()[0];
    let left = records(&env, "acme").await;
    assert!(v["status"] != "ready" || !left.is_empty(), "ready with no record at its name; its identity: {dns}");
    assert_ne!(dns["state"], "ensured", "{dns}");
    // Taken as gone after a minute of 404s, the records are made again.
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!(v["status"], "ready", "{v}");
    let ip = vm_ip(&env, &v).await;
    let records = records(&env, "acme").await;
    assert_eq!(
        records.iter().map(|r| (r.record_type.as_str(), r.data.as_str())).collect::<Vec<_>>(),
        [("A", ip.as_str())]
    );
}

/// A restored copy says acme's DNS identity is `ensured` at its name,
/// while the timeline it discarded moved acme's records to another name
/// (a `client update --dns-name`, a PATCH by id that keeps their ids).
/// After the restore the records are read back where they are and brought
/// back to acme's name. The read found them elsewhere, reported them
/// absent, and the ensure, comparing with what was recorded, kept them
/// there: acme blocked `adapter_failed` after its attempts.
async fn a_restored_identity_whose_records_moved_is_brought_back(env: Env) {
    acme_ready(&env);
    // What the discarded timeline did.
    for r in with_markers(&env, "acme").await {
        let p = oduflow_vultr::DnsRecordPatch { name: "shop".into(), data: r.data.clone(), ttl: r.ttl };
        let outcome = env.console().dns_record_patch(ZONE, &r.id, &p).await;
        assert!(matches!(outcome, oduflow_model::provider::Outcome::Accepted(())), "{outcome:?}");
    }
    env.ok(&["restore", "declare", "--reason", "restored from last night's backup"]);
    env.ok(&["reconcile", "--all"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!((&v["status"], &v["blocked_detail"]), (&"ready".into(), &serde_json::Value::Null), "{v}");
    let ip = vm_ip(&env, &v).await;
    let a: Vec<(String, String)> = records(&env, "acme").await.into_iter().map(|r| (r.record_type, r.data)).collect();
    assert_eq!(a, [("A".to_owned(), ip)], "acme's record back at its name");
    assert!(with_markers(&env, "shop").await.is_empty(), "nothing left at the other name");
}

/// An identity ensured before ownership was recorded (schema 9: `owned`
/// and `facts` are `{}`) is not ensured again, a restore or not: its
/// adapter owns none of its records, which carry no owner marker, so an
/// ensure would find its own record at its name foreign and block
/// `dns_record_foreign`.
async fn a_restored_identity_from_before_ownership_is_left_as_it_was(env: Env) {
    acme_ready(&env);
    let store = env.store().await;
    oduflow_store::testing::execute_raw(&store, "UPDATE adapter_state SET owned = '{}', facts = '{}'").await.unwrap();
    // Records made then carry no owner marker.
    for r in with_markers(&env, "acme").await.into_iter().filter(|r| r.record_type == "TXT") {
        env.console().dns_record_delete(ZONE, &r.id).await.unwrap();
    }
    env.ok(&["restore", "declare", "--reason", "restored from last night's backup"]);
    env.ok(&["reconcile", "--all"]);
    settle(&env);
    let v = show(&env, "acme");
    assert_eq!((&v["status"], &v["blocked_detail"]), (&"ready".into(), &serde_json::Value::Null), "{v}");
    assert_eq!(v["adapters"][0]["state"], "ensured", "{v}");
    assert_eq!(records(&env, "acme").await.len(), 1);
}
