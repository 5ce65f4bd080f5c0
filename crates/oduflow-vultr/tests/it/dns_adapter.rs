//! The DNS identity adapter against the simulator: a 404 for a record it owns
//! is counted, never a verdict on its own read; a record gone for good is made
//! again; the zone is read afresh before each create, so a record made
//! meanwhile (by an operator, by another worker process) is never doubled.

use super::*;
use oduflow_model::BlockedReason;
use oduflow_model::identity::{AdapterError, IdentityAdapter, IdentityTarget, MemoryOwnership, Ownership, Presence};
use oduflow_model::provider::{DeleteOutcome, Outcome};
use oduflow_sim::{Sim, SimConfig, SimHandle};
use oduflow_vultr::dns_adapter::DnsAdapter;
use oduflow_vultr::{DnsRecord, DnsRecordId, DnsRecordRequest};

const ZONE: &str = "example.com";

async fn sim() -> SimHandle {
    let cfg = SimConfig { rate_per_sec: 1000, ..SimConfig::default().instant() };
    Sim::start(cfg.with_key(KEY), "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// A worker process's adapter: its own client and its own zone view.
fn adapter(sim: &SimHandle) -> DnsAdapter {
    DnsAdapter::new(client(&sim.base_url), ZONE.into(), 120)
}

fn target(client: &str, dns_name: &str, ip: &str) -> IdentityTarget {
    IdentityTarget {
        client: client.into(),
        client_id: format!("id-{client}"),
        main_ip: Some(ip.into()),
        outputs: oduflow_model::ServerOutputs { main_ip: ip.into(), ..Default::default() },
        hostname: client.into(),
        dns_name: dns_name.into(),
        plan: "vc2-1c-1gb".into(),
        volume_gb: 40,
        removing: false,
    }
}

async fn at(sim: &SimHandle, name: &str) -> Vec<DnsRecord> {
    client(&sim.base_url).dns_record_list(ZONE).await.unwrap().into_iter().filter(|r| r.name == name).collect()
}

/// The address records (A, AAAA) at `name`, without oduflow's owner marker.
async fn addresses(sim: &SimHandle, name: &str) -> Vec<DnsRecord> {
    at(sim, name).await.into_iter().filter(|r| r.record_type != "TXT").collect()
}

/// The id of the owned record of type `rtype` in an ownership record.
fn owned_id(own: &MemoryOwnership, rtype: &str) -> String {
    let v = own.get();
    let r = v["records"].as_array().unwrap().iter().find(|r| r["type"] == rtype).cloned();
    r.and_then(|r| r["id"].as_str().map(str::to_owned)).unwrap_or_else(|| panic!("no {rtype} owned: {v}"))
}

/// Moves every time the ownership record holds back by `ms`, as if the
/// record had been made (and its 404s had begun) that long ago.
async fn age(own: &MemoryOwnership, ms: i64) {
    let mut v = own.get();
    for r in v["records"].as_array_mut().unwrap() {
        for k in ["claimed_ms", "missing_ms"] {
            if let Some(t) = r[k].as_i64() {
                r[k] = (t - ms).into();
            }
        }
    }
    own.put(v).await.unwrap();
}

const LONG_AGO_MS: i64 = 3_600_000;

/// A record deleted in the console: the PATCH that would move it answers
/// 404. That 404 is counted like a GET's; once the record has answered 404
/// long enough it is made again, and the old id is deleted by id (a DELETE,
/// then a GET 404) before it is dropped. Before, a PATCH's 404 was an unknown
/// outcome, so this branch could never run and the client failed for good.
#[tokio::test]
async fn a_patch_404_makes_a_new_record() {
    let sim = sim().await;
    let (a, own) = (adapter(&sim), MemoryOwnership::default());
    a.ensure(&target("acme", "acme", "192.0.2.10"), &own).await.unwrap();
    let old = owned_id(&own, "A");
    let c = client(&sim.base_url);
    assert_eq!(c.dns_record_delete(ZONE, &DnsRecordId(old.clone())).await.unwrap(), DeleteOutcome::Sent);
    age(&own, LONG_AGO_MS).await;

    let moved = target("acme", "acme", "192.0.2.11");
    let mut pending = 0;
    let done = loop {
        match a.ensure(&moved, &own).await {
            Ok(d) => break d,
            Err(AdapterError::Waiting { detail: why, until_ms }) if pending < 5 => {
                assert!(why.contains(&old) && why.contains("404"), "{why}");
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
                let later = until_ms - i64::try_from(now).unwrap();
                let spacing = oduflow_vultr::dns_adapter::RECORD_MISSING_SPACING_MS;
                assert!(later > spacing - 1_000, "asked again {later} ms later, not at once");
                pending += 1;
                age(&own, LONG_AGO_MS).await;
            }
            Err(e) => panic!("ensure after the record's deletion in the console: {e}"),
        }
    };
    assert!(pending >= 1, "one PATCH 404 is not taken as the record's absence: {done}");
    let Presence::Present(shown) = a.check(&moved, &own).await.unwrap() else { panic!("absent after the ensure") };
    let now = addresses(&sim, "acme").await;
    assert!(shown.contains(&format!("A acme.{ZONE} -> 192.0.2.11 (record {})", now[0].id)), "{shown}");
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0].id.as_str(), old);
    let owned = own.get();
    assert_eq!(
        owned["records"].as_array().unwrap().len(),
        2,
        "the old id dropped after its DELETE and GET 404 (the marker and the new A stay): {owned}"
    );
    assert_eq!(owned_id(&own, "A"), now[0].id.as_str());
}

/// A run recorded its DELETE of a record as sent and died before sending
/// it, within a minute of the record's create, while the record still
/// answers 404 by id (Vultr's window): the next run's DELETE answers 404
/// too. That 404 proves nothing, whether or not a DELETE was recorded
/// before: the record stays owned, and the client is not told its records
/// are gone while the zone still lists one. (Found by the model check.)
#[tokio::test]
async fn a_404_to_a_delete_so_soon_after_the_create_never_drops_the_record() {
    let cfg = SimConfig { rate_per_sec: 1000, dns_get_404_window_ms: 600_000, ..SimConfig::default().instant() };
    let sim = Sim::start(cfg.with_key(KEY), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (a, own) = (adapter(&sim), MemoryOwnership::default());
    a.ensure(&target("acme", "acme", "192.0.2.10"), &own).await.unwrap();
    let id = owned_id(&own, "A");
    let mut v = own.get();
    for r in v["records"].as_array_mut().unwrap() {
        r["delete_sent"] = true.into();
    }
    own.put(v).await.unwrap();
    let removing = IdentityTarget { removing: true, ..target("acme", "acme", "192.0.2.10") };
    let removed = a.remove(&removing, &own).await;
    let checked = a.check(&removing, &own).await;
    let listed = at(&sim, "acme").await;
    assert!(listed.iter().any(|r| r.id.0 == id), "the record is still in the zone: {listed:?}");
    assert!(
        !matches!(checked, Ok(Presence::Absent)),
        "reported absent while the zone lists record {id} (remove: {removed:?}; owned: {})",
        own.get()
    );
    assert_eq!(owned_id(&own, "A"), id, "still owned");
}

/// An operator's record made after this process last listed the zone: the
/// create's check reads the zone again and blocks `dns_record_foreign`
/// rather than adding a second A record at the name.
#[tokio::test]
async fn a_record_made_since_the_last_listing_is_seen_before_a_create() {
    let sim = sim().await;
    let (a, own1, own2) = (adapter(&sim), MemoryOwnership::default(), MemoryOwnership::default());
    a.ensure(&target("c1", "c1", "192.0.2.21"), &own1).await.unwrap();
    let theirs = console_record(&sim, "c2", "A", "198.51.100.7", 300).await;
    match a.ensure(&target("c2", "c2", "192.0.2.22"), &own2).await {
        Err(AdapterError::Blocked(BlockedReason::DnsRecordForeign, d)) => {
            assert!(d.contains(theirs.id.as_str()), "{d}")
        }
        other => panic!("expected dns_record_foreign, got {other:?}"),
    }
    assert_eq!(at(&sim, "c2").await, vec![theirs], "nothing added at the name");
}

/// Two worker processes, each with its own zone view, given one name (a
/// database from before names were unique, or a record another process made
/// a moment ago): the second blocks `dns_record_foreign` naming the first's
/// record instead of making the name round-robin between two servers.
#[tokio::test]
async fn two_processes_do_not_both_create_at_one_name() {
    let sim = sim().await;
    let (a, b) = (adapter(&sim), adapter(&sim));
    let (own_x, own_one, own_two) =
        (MemoryOwnership::default(), MemoryOwnership::default(), MemoryOwnership::default());
    // b's zone view is taken before a's create.
    b.ensure(&target("x", "x", "192.0.2.30"), &own_x).await.unwrap();
    a.ensure(&target("one", "shared", "192.0.2.31"), &own_one).await.unwrap();
    let first = addresses(&sim, "shared").await;
    assert_eq!(first.len(), 1);
    match b.ensure(&target("two", "shared", "192.0.2.32"), &own_two).await {
        Err(AdapterError::Blocked(BlockedReason::DnsRecordForeign, d)) => {
            assert!(d.contains(first[0].id.as_str()), "{d}")
        }
        other => panic!("expected dns_record_foreign, got {other:?}"),
    }
    assert_eq!(addresses(&sim, "shared").await, first, "one A record at the name");
}

/// A client whose ownership record was lost (a database restored from a
/// backup older than the client, then the client recovered under its id):
/// the owner marker its records carry names it, so its next ensure takes
/// them back (the same ids) instead of blocking `dns_record_foreign` on its
/// own record or making a second A record at the name.
#[tokio::test]
async fn a_client_whose_ownership_was_lost_takes_back_its_marked_records() {
    let sim = sim().await;
    let a = adapter(&sim);
    let before_restore = MemoryOwnership::default();
    a.ensure(&target("late", "late", "192.0.2.40"), &before_restore).await.unwrap();
    let made = at(&sim, "late").await;
    let marker = oduflow_model::identity::dns_owner_marker("id-late");
    assert!(made.iter().any(|r| r.record_type == "TXT" && r.data == marker), "an owner marker at the name: {made:?}");

    // The restored copy has no ownership record; the new VM has a new IP.
    let restored = MemoryOwnership::default();
    let back = target("late", "late", "192.0.2.41");
    let done = a.ensure(&back, &restored).await.unwrap_or_else(|e| panic!("its own records: {e}"));
    let now = at(&sim, "late").await;
    let ids = |v: &[DnsRecord]| v.iter().map(|r| r.id.clone()).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(ids(&now), ids(&made), "the same records, nothing added: {done}");
    let a_rec = now.iter().find(|r| r.record_type == "A").unwrap();
    assert_eq!(a_rec.data, "192.0.2.41", "pointed at the new VM in place");
    let owned = restored.get();
    assert_eq!(owned["records"].as_array().unwrap().len(), 2, "both owned again: {owned}");
    assert!(matches!(a.check(&back, &restored).await.unwrap(), Presence::Present(_)));
}

/// A record at the name whose owner marker names another oduflow client is
/// that client's: never taken, the client blocks `dns_record_foreign`, and
/// the evidence names the client the marker names.
#[tokio::test]
async fn a_record_whose_owner_marker_names_another_client_stays_foreign() {
    let sim = sim().await;
    let a = adapter(&sim);
    let (own_other, own_me) = (MemoryOwnership::default(), MemoryOwnership::default());
    a.ensure(&target("other", "shared", "192.0.2.50"), &own_other).await.unwrap();
    let theirs = at(&sim, "shared").await;
    match a.ensure(&target("me", "shared", "192.0.2.51"), &own_me).await {
        Err(AdapterError::Blocked(BlockedReason::DnsRecordForeign, d)) => {
            assert!(d.contains("id-other"), "names the client its owner marker names: {d}")
        }
        other => panic!("expected dns_record_foreign, got {other:?}"),
    }
    assert_eq!(at(&sim, "shared").await, theirs, "nothing added or changed at the name");
    assert_eq!(own_me.get()["records"].as_array().map_or(0, |v| v.len()), 0, "{}", own_me.get());
}

/// A client being removed whose ownership lacks an A record while its
/// owner marker still stands at its name (its A record deleted and
/// dropped, the marker's DELETE not yet confirmed), and the name given
/// since to another client, which made its marker and A record there: the
/// removal takes back by the marker only what no other client's marker
/// can claim, so it never deletes the other client's record.
#[tokio::test]
async fn a_removal_never_takes_another_clients_record_at_its_name() {
    let sim = sim().await;
    let a = adapter(&sim);
    let (own_old, own_new) = (MemoryOwnership::default(), MemoryOwnership::default());
    a.ensure(&target("old", "shared", "192.0.2.60"), &own_old).await.unwrap();
    let c = client(&sim.base_url);
    let old_a = owned_id(&own_old, "A");
    assert_eq!(c.dns_record_delete(ZONE, &DnsRecordId(old_a.clone())).await.unwrap(), DeleteOutcome::Sent);
    let mut v = own_old.get();
    v["records"].as_array_mut().unwrap().retain(|r| r["type"] != "A");
    own_old.put(v).await.unwrap();

    let new = target("new", "shared", "192.0.2.61");
    a.ensure(&new, &own_new).await.unwrap_or_else(|e| panic!("the name is free of address records: {e}"));
    let theirs = owned_id(&own_new, "A");

    let old = IdentityTarget { removing: true, ..target("old", "shared", "192.0.2.60") };
    a.remove(&old, &own_old).await.unwrap();
    let left = at(&sim, "shared").await;
    assert!(left.iter().any(|r| r.id.as_str() == theirs), "the other client's A record was deleted: {left:?}");
    assert!(matches!(a.check(&new, &own_new).await.unwrap(), Presence::Present(_)));
    assert!(matches!(a.check(&old, &own_old).await.unwrap(), Presence::Absent), "its own marker went: {left:?}");
}

/// The ownership record of a run whose claim is lost: its requests carry a
/// guard that refuses.
struct LostClaim(MemoryOwnership);

struct Refuses;

impl oduflow_model::provider::SendGuard for Refuses {
    fn check(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async { Err("claim lost".to_owned()) })
    }
}

impl Ownership for LostClaim {
    fn get(&self) -> serde_json::Value {
        self.0.get()
    }
    fn put(&self, v: serde_json::Value) -> oduflow_model::identity::BoxFuture<'_, Result<(), String>> {
        self.0.put(v)
    }
    fn sending(&self) -> oduflow_model::provider::Sending {
        oduflow_model::provider::Sending::guarded(std::sync::Arc::new(Refuses))
    }
}

/// The adapter sends with the run's guard (given with the ownership
/// record): a run whose claim is lost lists nothing, makes no record and
/// deletes none.
#[tokio::test]
async fn a_run_whose_claim_is_lost_sends_no_dns_create_or_delete() {
    let sim = sim().await;
    let a = adapter(&sim);
    let lost = LostClaim(MemoryOwnership::default());
    assert!(a.ensure(&target("x", "x", "192.0.2.40"), &lost).await.is_err());
    let sent = sim.ledger().request_log;
    assert!(sent.is_empty(), "a run whose claim was lost sent {sent:?}");
    assert!(at(&sim, "x").await.is_empty(), "a record was made by a run whose claim was lost");
    let own = MemoryOwnership::default();
    a.ensure(&target("x", "x", "192.0.2.40"), &own).await.unwrap();
    let made = at(&sim, "x").await;
    assert_eq!(made.len(), 2, "{made:?}");
    let lost = LostClaim(MemoryOwnership::default());
    lost.0.put(own.get()).await.unwrap();
    let mut gone = target("x", "x", "192.0.2.40");
    gone.removing = true;
    let _ = a.remove(&gone, &lost).await;
    assert_eq!(at(&sim, "x").await.len(), 2, "a record was deleted by a run whose claim was lost");
}

/// An adapter on a clock the test moves, and client acme with an A and an
/// AAAA record it made (and its marker); then the records `deleted` picks
/// are deleted in the console, and the clock goes well past the lag a fresh
/// record may 404 for. What it made is returned too.
async fn made_then_deleted(
    sim: &SimHandle,
    deleted: impl Fn(&DnsRecord) -> bool,
) -> (DnsAdapter, MemoryOwnership, IdentityTarget, std::sync::Arc<std::sync::atomic::AtomicI64>, Vec<DnsRecord>) {
    use std::sync::atomic::{AtomicI64, Ordering};
    let start =
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap();
    let clock = std::sync::Arc::new(AtomicI64::new(start));
    let now = clock.clone();
    let a = adapter(sim).with_clock(std::sync::Arc::new(move || now.load(Ordering::SeqCst)));
    let own = MemoryOwnership::default();
    let mut t = target("acme", "acme", "192.0.2.50");
    t.outputs.v6_main_ip = "2001:db8::50".into();
    a.ensure(&t, &own).await.unwrap();
    let made = at(sim, "acme").await;
    assert_eq!(made.len(), 3, "a marker, an A and an AAAA record: {made:?}");
    let c = client(&sim.base_url);
    for r in made.iter().filter(|r| deleted(r)) {
        assert_eq!(c.dns_record_delete(ZONE, &r.id).await.unwrap(), DeleteOutcome::Sent);
    }
    clock.fetch_add(2 * oduflow_vultr::dns_adapter::RECORD_MISSING_MS, Ordering::SeqCst);
    (a, own, t, clock, made)
}

/// An address change after the records were deleted in the console: each
/// PATCH answers 404, and the records are counted together, not one minute
/// after another.
#[tokio::test]
async fn records_deleted_together_are_made_again_together_on_an_address_change() {
    use oduflow_vultr::dns_adapter::{RECORD_MISSING_MS, RECORD_MISSING_SPACING_MS};
    use std::sync::atomic::Ordering;
    let sim = sim().await;
    let (a, own, mut t, clock, _) = made_then_deleted(&sim, |r| r.record_type != "TXT").await;
    let begun = clock.load(Ordering::SeqCst);
    t.main_ip = Some("192.0.2.51".into());
    (t.outputs.main_ip, t.outputs.v6_main_ip) = ("192.0.2.51".into(), "2001:db8::51".into());
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 40, "not settled after {steps} steps");
        match a.ensure(&t, &own).await {
            Ok(_) => break,
            Err(AdapterError::Waiting { until_ms, .. }) => {
                clock.fetch_max(until_ms, Ordering::SeqCst);
            }
            Err(e) => panic!("after its records were deleted in the console: {e}"),
        }
    }
    let took = clock.load(Ordering::SeqCst) - begun;
    assert!(
        took <= RECORD_MISSING_MS + RECORD_MISSING_SPACING_MS,
        "two records deleted at once took {} s to be made again, one minute after another",
        took / 1000
    );
    let again = at(&sim, "acme").await;
    assert!(
        again.iter().any(|r| r.data == "192.0.2.51") && again.iter().any(|r| r.data == "2001:db8::51"),
        "{again:?}"
    );
}

/// A client all of whose records were deleted behind oduflow's back (in the
/// console, or after a backup its database was restored from): their 404s
/// are counted together, so the three records are taken as gone in the
/// minute one takes, not one minute after another. Before, a check stopped
/// at the first record that answered 404, and the next record's minute
/// began only once the first was settled: three minutes for a client with
/// an AAAA record, past the bound a client settles within.
#[tokio::test]
async fn records_deleted_together_are_taken_as_gone_together() {
    use oduflow_vultr::dns_adapter::{RECORD_MISSING_MS, RECORD_MISSING_SPACING_MS};
    use std::sync::atomic::Ordering;
    let sim = sim().await;
    let (a, own, t, clock, made) = made_then_deleted(&sim, |_| true).await;
    let begun = clock.load(Ordering::SeqCst);

    // As the engine runs it: a check, then (once absent) an ensure, each
    // asked again when its answer says.
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 40, "not settled after {steps} steps");
        let answer = match a.check(&t, &own).await {
            Ok(Presence::Present(_)) => break,
            Ok(Presence::Absent) | Err(AdapterError::Pending(_)) => a.ensure(&t, &own).await.map(drop),
            Err(e) => Err(e),
        };
        match answer {
            Ok(()) => {}
            Err(AdapterError::Waiting { until_ms, .. }) => {
                clock.fetch_max(until_ms, Ordering::SeqCst);
            }
            Err(AdapterError::Pending(_)) => {}
            Err(e) => panic!("after its records were deleted in the console: {e}"),
        }
    }
    let took = clock.load(Ordering::SeqCst) - begun;
    assert!(
        took <= RECORD_MISSING_MS + RECORD_MISSING_SPACING_MS,
        "three records deleted at once took {} s to be taken as gone and made again, one minute after another",
        took / 1000
    );
    let again = at(&sim, "acme").await;
    assert_eq!(again.len(), 3, "made again: {again:?}");
    assert!(again.iter().all(|r| made.iter().all(|m| m.id != r.id)), "new ids: {again:?}");
}

/// A create whose answer was lost (the worker killed after it was recorded)
/// is resolved by the rule every lost create follows: one matching record
/// in a zone listing is the one sent, and is kept with how it was found and
/// the listings before it; several block `uncertain_dns_record` naming
/// each, and none blocks after `LOST_CREATE_LISTINGS_MAX` listings; no
/// create is sent again meanwhile.
#[tokio::test]
async fn a_lost_create_is_found_by_looking_and_never_sent_again() {
    use oduflow_vultr::dns_adapter::LOST_CREATE_LISTINGS_MAX;
    let sim = sim().await;
    let a = ticking_adapter(&sim);
    let t = target("c1", "c1", "192.0.2.40");
    let marker = oduflow_model::identity::dns_owner_marker("id-c1");
    let put = |name: &'static str, rtype: &'static str, data: &str| {
        let (sim, data) = (&sim, data.to_owned());
        async move { console_record(sim, name, rtype, &data, 120).await.id.0 }
    };
    // Creates that reached the simulator (the console's included).
    let posts = |sim: &SimHandle| sim.ledger().requests.get("POST /v2/domains/{domain}/records").copied().unwrap_or(0);

    // None: looked for again, then blocked after the last listing.
    let own = lost_marker("c1", &marker).await;
    for n in 1..LOST_CREATE_LISTINGS_MAX {
        match a.ensure(&t, &own).await {
            Err(AdapterError::Pending(d)) => assert!(d.contains(&format!("zone listing {n} of")), "{d}"),
            other => panic!("listing {n}: expected Pending, got {other:?}"),
        }
    }
    match a.ensure(&t, &own).await {
        Err(AdapterError::Blocked(BlockedReason::UncertainDnsRecord, d)) => {
            assert!(d.contains("oduflow abandon c1 --kind dns"), "{d}")
        }
        other => panic!("expected uncertain_dns_record, got {other:?}"),
    }
    assert_eq!(posts(&sim), 0, "no create sent again");

    // One, made since (the operator found none, then one appeared): the
    // next look takes a listing of its own, not the one the block rests
    // on, finds it, and keeps it with how and after how many listings.
    let first = put("c1", "TXT", &marker).await;
    a.ensure(&t, &own).await.unwrap();
    assert_eq!(owned_id(&own, "TXT"), first);
    let rec = own.get()["records"][0].clone();
    assert_eq!((rec["source"].as_str(), rec["listings"].as_i64()), (Some("adopted_by_label"), Some(3)), "{rec}");

    // Several, after a look that found none: none is taken, and each is
    // named. The operator then deletes the one oduflow did not make, in
    // the console: the next look takes a listing of its own, not the one
    // the block rests on, and keeps the one left.
    let t3 = target("c3", "c3", "192.0.2.43");
    let marker3 = oduflow_model::identity::dns_owner_marker("id-c3");
    let own = lost_marker("c3", &marker3).await;
    assert!(matches!(a.ensure(&t3, &own).await, Err(AdapterError::Pending(_))));
    let (one, two) = (put("c3", "TXT", &marker3).await, put("c3", "TXT", &marker3).await);
    match a.ensure(&t3, &own).await {
        Err(AdapterError::Blocked(BlockedReason::UncertainDnsRecord, d)) => {
            assert!(d.contains(&one) && d.contains(&two) && d.contains("2 records match it"), "{d}")
        }
        other => panic!("expected uncertain_dns_record, got {other:?}"),
    }
    assert!(own.get()["records"][0].get("id").is_none(), "none taken: {}", own.get());
    assert_eq!(client(&sim.base_url).dns_record_delete(ZONE, &DnsRecordId(two)).await, Ok(DeleteOutcome::Sent));
    a.ensure(&t3, &own).await.unwrap();
    assert_eq!(owned_id(&own, "TXT"), one);

    // Several at the first look: no listing has shown the create absent,
    // so an abandon is refused, and says why and what to do instead.
    let t5 = target("c5", "c5", "192.0.2.45");
    let marker5 = oduflow_model::identity::dns_owner_marker("id-c5");
    let own = lost_marker("c5", &marker5).await;
    let _ = (put("c5", "TXT", &marker5).await, put("c5", "TXT", &marker5).await);
    assert!(matches!(a.ensure(&t5, &own).await, Err(AdapterError::Blocked(BlockedReason::UncertainDnsRecord, _))));
    let how = oduflow_model::identity::Settle::Abandon { by: "ops", reason: "console shows none" };
    match a.settle(&t5, &own.get(), how).await {
        Err(oduflow_model::identity::SettleError::Refused(why)) => {
            assert!(why.contains("no zone listing has shown it absent") && why.contains("oduflow adopt c5"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    // Several after a look that found none: the earlier look proves no
    // absence now, so an abandon is refused too (accepted, the next run
    // would have sent a third create).
    let t7 = target("c7", "c7", "192.0.2.47");
    let marker7 = oduflow_model::identity::dns_owner_marker("id-c7");
    let own = lost_marker("c7", &marker7).await;
    assert!(matches!(a.ensure(&t7, &own).await, Err(AdapterError::Pending(_))));
    let _ = (put("c7", "TXT", &marker7).await, put("c7", "TXT", &marker7).await);
    assert!(matches!(a.ensure(&t7, &own).await, Err(AdapterError::Blocked(BlockedReason::UncertainDnsRecord, _))));
    let how = oduflow_model::identity::Settle::Abandon { by: "ops", reason: "console shows none" };
    match a.settle(&t7, &own.get(), how).await {
        Err(oduflow_model::identity::SettleError::Refused(why)) => {
            assert!(why.contains("no zone listing has shown it absent"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// An ownership record whose owner marker's create was recorded and whose
/// answer never was (the worker killed in between).
async fn lost_marker(name: &str, marker: &str) -> MemoryOwnership {
    let own = MemoryOwnership::default();
    let rec = serde_json::json!({ "type": "TXT", "zone": ZONE, "name": name, "data": marker, "ttl": 120,
        "claimed_ms": 1, "listings": 0 });
    own.put(serde_json::json!({ "records": [rec] })).await.unwrap();
    own
}

/// Each look for a lost create takes a listing started after the look
/// began: never one another client's check took in between, which may
/// predate a record made since.
#[tokio::test]
async fn a_lost_create_is_looked_for_in_a_listing_started_after_the_look() {
    let sim = sim().await;
    let a = ticking_adapter(&sim);
    let t = target("c4", "c4", "192.0.2.44");
    let marker = oduflow_model::identity::dns_owner_marker("id-c4");
    let own = lost_marker("c4", &marker).await;
    assert!(matches!(a.ensure(&t, &own).await, Err(AdapterError::Pending(_))));
    // Another client's ensure lists the zone: the process keeps that view.
    a.ensure(&target("c5", "c5", "192.0.2.45"), &MemoryOwnership::default()).await.unwrap();
    let made = console_record(&sim, "c4", "TXT", &marker, 120).await;
    a.ensure(&t, &own).await.unwrap();
    assert_eq!(owned_id(&own, "TXT"), made.id.0);
}

/// A record made outside oduflow (the console's, another tool's).
async fn console_record(sim: &SimHandle, name: &str, rtype: &str, data: &str, ttl: i64) -> DnsRecord {
    let req = DnsRecordRequest {
        name: name.into(),
        record_type: rtype.into(),
        data: data.into(),
        ttl: Some(ttl),
        priority: None,
    };
    let Outcome::Accepted(r) = client(&sim.base_url).dns_record_create(ZONE, &req).await else {
        panic!("console create of {rtype} {name}")
    };
    r
}

/// An adapter on a clock that moves on at every reading: each listing
/// starts after the one before, whatever the host's clock resolution.
fn ticking_adapter(sim: &SimHandle) -> DnsAdapter {
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(1_000));
    adapter(sim).with_clock(std::sync::Arc::new(move || ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst)))
}

/// A look for a lost create needs a listing started after the look began,
/// and the look begins in the millisecond the adapter read last: on a clock
/// that reads the same millisecond several times in a row (any clock,
/// read often enough), the look waits for the next millisecond and lists.
/// It once failed at once, every time, and blocked `adapter_failed`.
#[tokio::test]
async fn a_look_that_begins_within_a_millisecond_waits_for_the_next_one() {
    let sim = sim().await;
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let a = adapter(&sim)
        .with_clock(std::sync::Arc::new(move || 1_000 + reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) / 8));
    let t = target("c6", "c6", "192.0.2.46");
    let own = lost_marker("c6", &oduflow_model::identity::dns_owner_marker("id-c6")).await;
    match a.ensure(&t, &own).await {
        Err(AdapterError::Pending(d)) => assert!(d.contains("zone listing 1 of"), "{d}"),
        other => panic!("expected the first look, got {other:?}"),
    }
}
