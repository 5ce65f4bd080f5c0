//! Each fault, run-time control, and determinism from the seed.

use crate::*;
use oduflow_sim::{FaultKind, Faults, Op, Scripted};
use std::time::Instant;

fn only(op: Op, f: Faults) -> Faults {
    Faults { ops: vec![op], faults_max: Some(1), ..f }
}

const CREATE: &str = r#"{"region": "ewr", "plan": "vc2-1c-1gb", "os_id": 2136, "label": "lost-1"}"#;

async fn post_create(api: &Api<'_>) -> Result<reqwest::Response, reqwest::Error> {
    api.http
        .post(api.url("/instances"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(CREATE)
        .send()
        .await
}

#[tokio::test]
async fn lost_drop_applies_then_closes_the_connection() {
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(only(Op::InstanceCreate, Faults { lost_drop: 1.0, ..Faults::default() })).unwrap();
    let api = Api::new(&sim);
    let err = post_create(&api).await.expect_err("the client must see a transport error");
    assert!(!err.is_status() && !err.is_timeout(), "{err:?}");
    assert_eq!(sim.ledger().creates_per_label["lost-1"], 1, "applied before the drop");
    assert_eq!(sim.ledger().faults[0].fault, Some(FaultKind::LostDrop));
}

#[tokio::test]
async fn lost_5xx_applies_then_answers_500() {
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(only(Op::InstanceCreate, Faults { lost_5xx: 1.0, ..Faults::default() })).unwrap();
    let api = Api::new(&sim);
    let (status, v) = body(post_create(&api).await.unwrap()).await;
    assert_eq!((status, v["status"].as_u64()), (500, Some(500)));
    assert_eq!(sim.ledger().creates_per_label["lost-1"], 1);
}

#[tokio::test]
async fn lost_stall_applies_then_holds_the_answer_past_the_client_timeout() {
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(only(Op::InstanceCreate, Faults { lost_stall: 1.0, stall_ms: 1_000, ..Faults::default() })).unwrap();
    let mut api = Api::new(&sim);
    api.http = Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let err = post_create(&api).await.expect_err("stalled past the timeout");
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(sim.ledger().creates_per_label["lost-1"], 1);
}

#[tokio::test]
async fn error_5xx_answers_500_without_applying() {
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(only(Op::InstanceCreate, Faults { error_5xx: 1.0, ..Faults::default() })).unwrap();
    let api = Api::new(&sim);
    let (status, _) = body(post_create(&api).await.unwrap()).await;
    assert_eq!(status, 500);
    assert!(sim.ledger().resources.is_empty(), "not applied");
    // faults_max = 1: the next create goes through.
    assert_eq!(post_create(&api).await.unwrap().status(), 202);
}

#[tokio::test]
async fn burst_429_refuses_a_run_of_requests_with_retry_after() {
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(Faults { burst_429: 1.0, burst_429_len: 3, faults_max: Some(1), ..Faults::default() }).unwrap();
    let api = Api::new(&sim);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = api.get("/account").await;
        if r.status() == 429 {
            assert_eq!(r.headers()["retry-after"], "1");
        }
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, vec![429, 429, 429, 200, 200]);
    let l = sim.ledger();
    assert_eq!((l.responses_429_fault, l.responses_429_rate_limit), (3, 0));
}

#[tokio::test]
async fn latency_delays_targeted_operations_only() {
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(Faults { latency_min_ms: 200, latency_max_ms: 250, ops: vec![Op::AccountGet], ..Faults::default() })
        .unwrap();
    let api = Api::new(&sim);
    let t = Instant::now();
    assert_eq!(api.get("/account").await.status(), 200);
    let slow = t.elapsed();
    let t = Instant::now();
    assert_eq!(api.get("/regions").await.status(), 200);
    let fast = t.elapsed();
    assert!(slow >= Duration::from_millis(200), "{slow:?}");
    assert!(fast < Duration::from_millis(150), "{fast:?}");
    assert_eq!(sim.ledger().faults.len(), 1);
}

#[tokio::test]
async fn faults_are_set_and_read_at_run_time_through_the_admin_endpoint() {
    let sim = start(SimConfig::default().instant()).await;
    let admin = format!("http://{}/sim/faults", sim.addr);
    let plan = json!({"error_5xx": 1.0, "ops": ["account_get"]});
    let r = http().post(&admin).json(&plan).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let (_, now) = body(http().get(&admin).send().await.unwrap()).await;
    assert_eq!(now["error_5xx"], 1.0);
    assert_eq!(sim.faults().ops, vec![Op::AccountGet]);
    let api = Api::new(&sim);
    assert_eq!(api.get("/account").await.status(), 500);
    assert_eq!(api.get("/instances").await.status(), 200, "other operations untouched");

    let r = http().post(&admin).json(&json!({"error_5xx": 0.8, "lost_drop": 0.5})).send().await.unwrap();
    assert_eq!(r.status(), 400, "probabilities above 1 in total");
    let r = http().post(&admin).json(&json!({"no_such_fault": 1})).send().await.unwrap();
    assert!(r.status().is_client_error(), "unknown fields are refused");
    assert_eq!(sim.faults().error_5xx, 1.0, "a refused plan changes nothing");
}

#[tokio::test]
async fn faults_given_at_start_apply_from_the_first_request() {
    let cfg = SimConfig { faults: Faults { error_5xx: 1.0, ..Faults::default() }, ..SimConfig::default().instant() };
    let sim = start(cfg).await;
    assert_eq!(Api::new(&sim).get("/account").await.status(), 500);
}

/// Runs the same request sequence against a simulator with this seed and
/// returns its fault log.
async fn fault_log(seed: u64) -> Vec<oduflow_sim::FaultEvent> {
    let faults = Faults {
        lost_5xx: 0.1,
        error_5xx: 0.2,
        burst_429: 0.05,
        burst_429_len: 2,
        latency_min_ms: 0,
        latency_max_ms: 3,
        ..Faults::default()
    };
    let sim = start(SimConfig { seed, faults, rate_per_sec: 1000, ..SimConfig::default().instant() }).await;
    let api = Api::new(&sim);
    for n in 0..60 {
        match n % 3 {
            0 => drop(api.get("/account").await),
            1 => drop(api.get("/instances").await),
            _ => drop(api.get("/blocks").await),
        }
    }
    sim.ledger().faults
}

#[tokio::test]
async fn the_same_seed_gives_the_same_fault_sequence() {
    let a = fault_log(42).await;
    let b = fault_log(42).await;
    let c = fault_log(43).await;
    assert!(a.iter().filter(|e| e.fault.is_some()).count() >= 5, "too few faults to compare: {a:?}");
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed, another sequence");
}

/// A client that never follows redirects, to look at the 3xx itself.
fn no_follow() -> Client {
    Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(Duration::from_secs(10)).build().unwrap()
}

#[tokio::test]
async fn redirect_answers_a_3xx_to_the_same_url_without_applying() {
    for status in oduflow_sim::REDIRECT_STATUSES {
        let sim = start(SimConfig::default().instant()).await;
        sim.set_faults(only(
            Op::InstanceCreate,
            Faults { redirect: 1.0, redirect_status: Some(status), ..Faults::default() },
        ))
        .unwrap();
        let mut api = Api::new(&sim);
        api.http = no_follow();
        let r = post_create(&api).await.unwrap();
        assert_eq!(r.status().as_u16(), status);
        assert_eq!(
            r.headers()["location"].to_str().unwrap(),
            format!("{}/instances", sim.base_url),
            "the same path on the same server"
        );
        let l = sim.ledger();
        assert!(l.resources.is_empty(), "{status}: not applied");
        assert_eq!(l.creates_per_label.get("lost-1"), None);
        assert_eq!(l.faults[0].fault, Some(FaultKind::Redirect));
        assert_eq!(l.faults[0].redirect_status, Some(status));
        assert_eq!(l.responses_by_status[&status], 1);
        // faults_max = 1: the next create goes through.
        assert_eq!(post_create(&api).await.unwrap().status(), 202);
    }
}

#[tokio::test]
async fn redirect_keeps_the_query_in_the_location() {
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(Faults { redirect: 1.0, redirect_status: Some(302), ..Faults::default() }).unwrap();
    let r = no_follow()
        .get(format!("{}/instances?label=a&per_page=5", sim.base_url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"].to_str().unwrap(), format!("{}/instances?label=a&per_page=5", sim.base_url));
}

/// What the fault is for: a client that follows a 307/308 sends the POST
/// twice. With `redirect` (not applied) the ledger shows two POSTs for one
/// create; with `lost_redirect` (applied, then redirected) it shows the
/// duplicate itself. A 303 turns the POST into a GET of the same path.
#[tokio::test]
async fn a_client_that_follows_the_redirect_is_caught_by_the_ledger() {
    for (status, lost) in [(307, false), (308, false), (307, true), (308, true)] {
        let sim = start(SimConfig::default().instant()).await;
        let f = Faults { redirect_status: Some(status), ..Faults::default() };
        let f = if lost { Faults { lost_redirect: 1.0, ..f } } else { Faults { redirect: 1.0, ..f } };
        sim.set_faults(only(Op::InstanceCreate, f)).unwrap();
        // reqwest's default policy follows redirects, body and method kept
        // for 307/308.
        let api = Api::new(&sim);
        assert_eq!(post_create(&api).await.unwrap().status(), 202);
        let l = sim.ledger();
        assert_eq!(l.requests["POST /v2/instances"], 2, "{status} lost={lost}");
        assert_eq!(l.creates_per_label["lost-1"], if lost { 2 } else { 1 }, "{status} lost={lost}");
    }
    let sim = start(SimConfig::default().instant()).await;
    sim.set_faults(only(Op::InstanceCreate, Faults { redirect: 1.0, redirect_status: Some(303), ..Faults::default() }))
        .unwrap();
    assert_eq!(post_create(&Api::new(&sim)).await.unwrap().status(), 200);
    let l = sim.ledger();
    assert_eq!(l.requests["GET /v2/instances"], 1, "303: followed as a GET");
    assert!(l.resources.is_empty());
}

#[tokio::test]
async fn redirect_statuses_are_drawn_from_the_seed() {
    async fn statuses(seed: u64) -> Vec<Option<u16>> {
        let sim = start(SimConfig {
            seed,
            rate_per_sec: 1000,
            faults: Faults { redirect: 0.5, lost_redirect: 0.5, ops: vec![Op::AccountGet], ..Faults::default() },
            ..SimConfig::default().instant()
        })
        .await;
        let c = no_follow();
        for _ in 0..60 {
            let r = c.get(format!("{}/account", sim.base_url)).bearer_auth(KEY).send().await.unwrap();
            assert!(r.status().is_redirection(), "{}", r.status());
        }
        sim.ledger().faults.iter().map(|e| e.redirect_status).collect()
    }
    let a = statuses(7).await;
    assert_eq!(a, statuses(7).await);
    assert_ne!(a, statuses(8).await);
    for s in oduflow_sim::REDIRECT_STATUSES {
        assert!(a.contains(&Some(s)), "{s} never drawn in {a:?}");
    }
}

#[tokio::test]
async fn redirect_faults_are_set_through_the_admin_endpoint_and_validated() {
    let sim = start(SimConfig::default().instant()).await;
    let admin = format!("http://{}/sim/faults", sim.addr);
    let r = http()
        .post(&admin)
        .json(&json!({"redirect": 1.0, "redirect_status": 308, "ops": ["block_create"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(sim.faults().redirect, 1.0);
    assert_eq!(sim.faults().redirect_status, Some(308));
    for bad in [
        json!({"redirect": 0.6, "lost_redirect": 0.6}),
        json!({"redirect": 1.0, "error_5xx": 0.1}),
        json!({"redirect": 1.0, "redirect_status": 200}),
        json!({"redirect": 1.0, "redirect_status": 304}),
    ] {
        let r = http().post(&admin).json(&bad).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    assert_eq!(sim.faults().redirect_status, Some(308), "refused plans change nothing");
    let (_, defaults) = body(http().post(&admin).json(&json!({})).send().await.unwrap()).await;
    assert_eq!(
        (&defaults["redirect"], &defaults["lost_redirect"], &defaults["redirect_status"]),
        (&json!(0.0), &json!(0.0), &json!(null))
    );
}

#[tokio::test]
async fn a_scripted_refusal_answers_vultrs_words_without_applying_then_ends() {
    let sim = start(SimConfig::default().instant()).await;
    let refuse = Scripted::Refuse { status: 400, message: "Invalid plan chosen.".into() };
    sim.control().script(&[Op::InstanceCreate], refuse, Some(1));
    let api = Api::new(&sim);
    let (status, v) = body(post_create(&api).await.unwrap()).await;
    assert_eq!((status, v["error"].as_str()), (400, Some("Invalid plan chosen.")));
    assert!(!sim.ledger().creates_per_label.contains_key("lost-1"), "a refused create was applied");
    // Used up: the next create is served as usual.
    assert_eq!(body(post_create(&api).await.unwrap()).await.0, 202);
    assert_eq!(sim.ledger().creates_per_label["lost-1"], 1);
}

#[tokio::test]
async fn a_scripted_lost_answer_applies_then_closes_the_connection() {
    let sim = start(SimConfig::default().instant()).await;
    sim.control().script(&[Op::InstanceCreate], Scripted::LoseAnswer, Some(1));
    let api = Api::new(&sim);
    let err = post_create(&api).await.expect_err("the client must see a transport error");
    assert!(!err.is_status() && !err.is_timeout(), "{err:?}");
    assert_eq!(sim.ledger().creates_per_label["lost-1"], 1, "applied before the drop");
}

#[tokio::test]
async fn a_delete_answered_without_applying_leaves_the_resource_until_unscripted() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let (_, v) = body(post_create(&api).await.unwrap()).await;
    let id = v["instance"]["id"].as_str().unwrap().to_owned();
    sim.control().script(&[Op::InstanceDelete], Scripted::AnswerWithoutApplying, None);
    let delete = || api.http.delete(api.url(&format!("/instances/{id}"))).bearer_auth(KEY).send();
    for _ in 0..2 {
        assert_eq!(delete().await.unwrap().status(), 204);
        assert!(sim.ledger().resources[0].deleted_at.is_none(), "a scripted 204 deleted");
    }
    sim.control().unscript();
    assert_eq!(delete().await.unwrap().status(), 204);
    assert!(sim.ledger().resources[0].deleted_at.is_some());
}

#[tokio::test]
async fn a_scripted_hold_applies_then_answers_only_when_let_go() {
    let sim = start(SimConfig::default().instant()).await;
    let hold = std::sync::Arc::new(tokio::sync::Notify::new());
    sim.control().script(&[Op::InstanceCreate], Scripted::HoldAfter(hold.clone()), Some(1));
    let api = Api::new(&sim);
    let answer = tokio::spawn({
        let (http, url) = (api.http.clone(), api.url("/instances"));
        async move {
            let r = http.post(url).bearer_auth(KEY).header("content-type", "application/json").body(CREATE);
            r.send().await.map(|r| r.status().as_u16())
        }
    });
    let t = Instant::now();
    while !sim.ledger().creates_per_label.contains_key("lost-1") {
        assert!(t.elapsed() < Duration::from_secs(5), "never applied");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!answer.is_finished(), "answered before it was let go");
    hold.notify_one();
    assert_eq!(answer.await.unwrap().unwrap(), 202);
}

#[tokio::test]
async fn keys_and_install_time_change_while_it_runs() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    sim.control().set_pending_ms(3_600_000);
    let (_, v) = body(post_create(&api).await.unwrap()).await;
    let id = v["instance"]["id"].as_str().unwrap().to_owned();
    let get = || api.http.get(api.url(&format!("/instances/{id}"))).bearer_auth(KEY).send();
    assert_eq!(body(get().await.unwrap()).await.1["instance"]["status"], "pending");
    sim.control().set_pending_ms(0);
    assert_eq!(body(get().await.unwrap()).await.1["instance"]["status"], "active");
    sim.control().set_api_keys(&[secrecy::SecretString::from("another-key".to_owned())]);
    assert_eq!(get().await.unwrap().status(), 401, "a key no longer accepted");
}

#[tokio::test]
async fn unplugged_it_refuses_new_connections_and_answers_on_open_ones() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let get = |http: &Client| http.get(api.url("/regions")).send();
    assert_eq!(get(&api.http).await.unwrap().status(), 200, "the pooled connection is open");
    sim.unplug().await;
    let fresh = Client::builder().build().unwrap();
    let err = get(&fresh).await.expect_err("a new connection is refused");
    assert!(err.is_connect(), "{err:?}");
    assert_eq!(get(&api.http).await.unwrap().status(), 200, "an open connection still answers");
    sim.plug().await;
    assert_eq!(get(&fresh).await.unwrap().status(), 200);
}

/// `page_delete`: once a page with a next one is answered, the item it
/// ended with and the one the next page starts with are gone, as a
/// deletion in the console while the scan ran (a pending instance
/// included, which a DELETE could not remove yet). The cursor still leads
/// on, past the deleted item it names; a last page deletes nothing.
#[tokio::test]
async fn page_delete_removes_where_a_page_ends_and_the_next_begins() {
    let sim = start(SimConfig::default().instant()).await;
    let api = Api::new(&sim);
    let mut ids = vec![];
    for n in 1..=5 {
        ids.push(api.create_block(&format!("pd-{n}")).await);
    }
    sim.set_faults(Faults { page_delete: 1.0, ops: vec![Op::BlockList, Op::BlockGet], ..Faults::default() }).unwrap();
    let labels = |v: &Value| -> Vec<String> {
        v["blocks"].as_array().unwrap().iter().map(|b| b["label"].as_str().unwrap().to_owned()).collect()
    };
    let (_, v) = body(api.get("/blocks?per_page=2").await).await;
    assert_eq!(labels(&v), ["pd-1", "pd-2"]);
    let cursor = v["meta"]["links"]["next"].as_str().unwrap().to_owned();
    let deleted = |l: &oduflow_sim::Ledger| -> Vec<String> {
        l.resources.iter().filter(|r| r.deleted_at.is_some()).map(|r| r.label.clone()).collect()
    };
    assert_eq!(deleted(&sim.ledger()), ["pd-2", "pd-3"]);
    for id in [&ids[1], &ids[2]] {
        assert_eq!(api.get(&format!("/blocks/{id}")).await.status(), 404, "a GET draws no page fault");
    }
    let (status, v) = body(api.get(&format!("/blocks?per_page=2&cursor={cursor}")).await).await;
    assert_eq!((status, labels(&v)), (200, vec!["pd-4".to_owned(), "pd-5".to_owned()]), "{v}");
    assert_eq!(v["meta"]["links"]["next"], "");
    assert_eq!(deleted(&sim.ledger()), ["pd-2", "pd-3"], "the last page deleted nothing");
    let l = sim.ledger();
    assert!(l.faults.iter().all(|f| f.fault == Some(FaultKind::PageDelete) && f.op == Op::BlockList), "{l:?}");
    assert_eq!(l.faults.len(), 2);

    sim.control().set_pending_ms(600_000);
    let vms = [api.create_instance("pd-vm-1").await, api.create_instance("pd-vm-2").await];
    assert_eq!(api.delete(&format!("/instances/{}", vms[0])).await.status(), 500, "pending: a DELETE is refused");
    sim.set_faults(Faults { page_delete: 1.0, ..Faults::default() }).unwrap();
    let (_, v) = body(api.get("/instances?per_page=1").await).await;
    assert_eq!(v["instances"][0]["id"].as_str(), Some(vms[0].as_str()));
    for id in &vms {
        assert_eq!(api.get(&format!("/instances/{id}")).await.status(), 404, "{id}");
    }
}

#[tokio::test]
async fn page_faults_share_the_scans_probability() {
    let sim = start(SimConfig::default().instant()).await;
    let admin = format!("http://{}/sim/faults", sim.addr);
    for (plan, status) in [
        (json!({"page_delete": 1.0, "dns_get_404": 1.0}), 200),
        (json!({"page_delete": 0.5, "page_repeat": 0.5}), 200),
        (json!({"page_delete": 0.6, "page_repeat": 0.6}), 400),
        (json!({"page_delete": 1.0, "error_5xx": 0.1}), 400),
        (json!({"page_delete": 1.5}), 400),
    ] {
        let r = http().post(&admin).json(&plan).send().await.unwrap();
        assert_eq!(r.status(), status, "{plan}");
    }
    assert_eq!((sim.faults().page_delete, sim.faults().page_repeat), (0.5, 0.5), "refused plans change nothing");
}
