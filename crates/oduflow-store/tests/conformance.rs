//! The store's own conformance suite, run on both backends: the
//! same calls must mean the same thing on PostgreSQL and on SQLite.
//! - migration parity: both schemas have the same tables and columns;
//! - claim skip: a client claimed by one run is skipped by every other;
//! - backoff arithmetic: failures are retried after base x 2^(n-1), capped,
//!   and past the job's attempts the job fails and its client is blocked;
//! - receipt guards: the schema itself refuses to delete or re-point a receipt;
//! - fencing: a run's fence sees a record that moved under it, and a lease
//!   whose session is gone;
//! - errors: a database error names the store operation that failed.

use oduflow_model::*;
use oduflow_store::testing::{
    TestDb, count_raw, execute_raw, execute_raw_elsewhere, pg_event_held_open, schema_columns,
    terminate_idle_in_transaction, try_bump_generation,
};
use oduflow_store::*;

async fn sqlite() -> (TestDb, Store) {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.store().await;
    (db, store)
}

async fn postgres() -> (TestDb, Store) {
    let db = TestDb::migrated(Backend::Postgres).await;
    let store = db.store().await;
    (db, store)
}

async fn store(db: &TestDb) -> Store {
    db.store().await
}

oduflow_store::on_both_stores!(
    migrated super::store =>
    claimed_clients_are_skipped,
    one_caller_claims_each_verification_pass,
    a_recheck_acts_only_on_the_ready_client_it_read,
    failures_back_off_then_fail_and_block,
    receipts_cannot_be_deleted_or_repointed,
    change_receipts_are_claimed_once_and_never_rewritten,
    receipts_survive_replace_from_any_connection,
    adapter_ownership_is_written_by_compare_and_set,
    fences_see_moved_records_and_lost_leases,
    database_errors_name_the_operation,
    a_database_with_shared_dns_names_migrates_and_the_oldest_keeps_the_name,
    a_runs_progress_kept_as_json_is_carried_into_its_columns,
    an_orphan_two_passes_find_side_by_side_is_found_once,
    tokens_made_before_scopes_keep_what_they_could_do,
    a_deleted_client_brought_back_gives_up_a_name_another_holds,
    a_delete_and_a_reconcile_side_by_side_each_see_the_others_write,
    an_inventory_pass_clears_only_the_restore_it_saw,
    a_token_revoked_twice_side_by_side_is_revoked_once,
    an_inventory_pass_never_undoes_what_happened_after_it_began,
    inventory_passes_side_by_side_all_commit,
    a_change_a_restores_pass_found_owns_no_resize_once_confirmed,
    the_metrics_count_each_receipt_as_its_ledger_reads_it,
    the_feed_reads_every_event_once_in_commit_order
);

/// The metrics' count of receipts by outcome (one SQL `GROUP BY`) reads
/// each receipt as the ledger does (`ReceiptRow::effect`): one receipt in
/// each state, an abandoned one that kept its id and a send that never left
/// included, none of them `unknown` but the one that is; and every way an
/// id becomes known is one the schema accepts.
async fn the_metrics_count_each_receipt_as_its_ledger_reads_it(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let ledger = ReceiptLedger::new(store.clone());
    let fp = KeyFingerprint("f".into());
    use IdSource::*;
    let sources = [Response, AdoptedByLabel, AdoptedByOperator, ConfirmedByRead, ReclaimedByMarker];
    // A new way an id becomes known does not compile here until it is in
    // `sources` (and in the schema's CHECK).
    let _ = |s: IdSource| match s {
        Response | AdoptedByLabel | AdoptedByOperator | ConfirmedByRead | ReclaimedByMarker => (),
    };
    for generation in 1..=11 {
        let key = OperationKey::new(&c, ResourceKind::Vm, generation);
        ledger
            .receipt_claim(&NewReceipt {
                operation_key: key.clone(),
                client_ref: c.clone(),
                resource_kind: ResourceKind::Vm,
                dispatch_generation: generation,
                label: Label::new_dispatch(&c, ResourceKind::Vm),
                region: "ewr".into(),
                spec_digest: "d".into(),
                key_fingerprint: fp.clone(),
                claimed_ms: 1,
            })
            .await
            .unwrap();
        if generation == 1 {
            continue; // claimed, never marked sent
        }
        ledger.receipt_mark_sent(&key, &c, &fp, 2).await.unwrap();
        match generation {
            3 | 4 | 9..=11 => {
                let source = sources[if generation < 9 { generation - 3 } else { generation - 7 } as usize];
                ledger.receipt_record_id(&key, &format!("vm-{generation}"), source, 3).await.unwrap();
            }
            5 => ledger.receipt_record_rejection(&key, 422, "no", 3).await.unwrap(),
            6 => drop(ledger.receipt_mark_not_sent(&key, "no connection", 3).await.unwrap()),
            7 => {
                // Answered with an id never seen nor listed, then given up.
                ledger.receipt_record_id(&key, "vm-7", IdSource::Response, 3).await.unwrap();
                ledger.receipt_abandon(&key, "ops", "checked", &AbandonGround::Uncertain, 4).await.unwrap();
            }
            8 => ledger.receipt_abandon(&key, "ops", "checked", &AbandonGround::Uncertain, 4).await.unwrap(),
            _ => {} // 2: sent, its answer lost
        }
    }
    let mut by_ledger: Vec<(String, String, i64)> = vec![];
    for r in store.receipts_for_client(&c).await.unwrap() {
        let outcome = r.effect().outcome().to_owned();
        match by_ledger.iter_mut().find(|(_, o, _)| *o == outcome) {
            Some(row) => row.2 += 1,
            None => by_ledger.push(("vm".into(), outcome, 1)),
        }
    }
    by_ledger.sort();
    assert_eq!(by_ledger.len(), 10, "a state missing from the test: {by_ledger:?}");
    assert_eq!(store.stats(10).await.unwrap().dispatches_by_outcome, by_ledger);
}

/// The feed pages through every event once, oldest first, from any
/// cursor, each with its client's name; a cursor past the last position is
/// refused; a position never changes. On PostgreSQL an event whose
/// transaction commits after a later id's commit is read after it, never
/// skipped (paging by id would skip it for good).
async fn the_feed_reads_every_event_once_in_commit_order(store: Store) {
    let store = &store;
    for name in ["acme", "beta", "gamma"] {
        client(store, name).await;
    }
    let (mut read, mut after) = (vec![], 0);
    loop {
        let page = store.feed_after(after, 2).await.unwrap();
        assert!(page.events.len() <= 2 && page.next >= after, "{page:?}");
        if page.events.is_empty() {
            assert_eq!((page.next, page.head), (after, after));
            break;
        }
        after = page.next;
        read.extend(page.events);
    }
    assert_eq!(read.len() as i64, count_raw(store, "SELECT count(*) FROM events").await);
    assert!(read.windows(2).all(|w| w[0].position < w[1].position && w[0].id < w[1].id), "{read:?}");
    let named = read.iter().filter(|e| e.client.as_deref() == Some("beta")).count();
    assert!(named >= 1 && read.iter().all(|e| e.client.is_some() == e.client_id.is_some()), "{read:?}");

    if let Some(held) = pg_event_held_open(store, EventKind::QueuePaused).await.unwrap() {
        client(store, "delta").await;
        let later = store.feed_after(after, 100).await.unwrap();
        assert!(!later.events.is_empty(), "{later:?}");
        assert!(later.events.iter().all(|e| e.client.as_deref() == Some("delta")), "{later:?}");
        held.commit().await.unwrap();
        let last = store.feed_after(later.next, 100).await.unwrap();
        assert_eq!(last.events.len(), 1, "the event committed last was skipped: {last:?}");
        assert_eq!(last.events[0].kind, "queue_paused");
        assert!(last.events[0].id < later.events[0].id, "its id was drawn first: {last:?} {later:?}");
        after = last.next;
    }
    let ahead = FeedQuery::new(Some(after + 5), None, Some(1)).unwrap();
    let refused = store.feed_read(&ahead).await.unwrap_err();
    assert!(matches!(refused, StoreError::FeedCursorAhead { head, .. } if head == after), "{refused}");
    let at_head = store.feed_read(&FeedQuery::new(Some(after), None, None).unwrap()).await.unwrap();
    assert!(at_head.events.is_empty() && at_head.next == after, "{at_head:?}");
    let moved = execute_raw(store, "UPDATE events SET position = position + 1000").await;
    assert!(moved.unwrap_err().contains("a feed position never changes"));
}

/// The tables migrations 21 to 23 added.
async fn drop_webhooks(store: &Store) {
    execute_raw(store, "DROP TABLE dashboard_sessions").await.unwrap();
    execute_raw(store, "DROP TABLE idempotency_keys").await.unwrap();
    execute_raw(store, "DROP TABLE webhook_dead_letters").await.unwrap();
    execute_raw(store, "DROP TABLE webhook_endpoints").await.unwrap();
}

/// The columns and trigger migration 14 added, and what the migrations
/// after it added, dropped again to rebuild an older schema.
async fn drop_progress_columns(store: &Store) {
    drop_webhooks(store).await;
    execute_raw(store, "ALTER TABLE api_tokens DROP COLUMN scope").await.unwrap();
    execute_raw(store, "ALTER TABLE events DROP COLUMN actor").await.unwrap();
    if store.backend() == Backend::Postgres {
        execute_raw(store, "DROP TRIGGER events_position_once ON events").await.unwrap();
        execute_raw(store, "DROP FUNCTION events_position_once()").await.unwrap();
    } else {
        execute_raw(store, "DROP TRIGGER events_position_once").await.unwrap();
    }
    execute_raw(store, "DROP INDEX events_position").await.unwrap();
    execute_raw(store, "DROP INDEX events_unstamped").await.unwrap();
    execute_raw(store, "ALTER TABLE events DROP COLUMN position").await.unwrap();
    if store.backend() == Backend::Postgres {
        execute_raw(store, "DROP TRIGGER change_receipts_no_restored_rewrite ON change_receipts").await.unwrap();
        execute_raw(store, "DROP FUNCTION change_receipts_restored_guard()").await.unwrap();
    } else {
        execute_raw(store, "DROP TRIGGER change_receipts_no_restored_rewrite").await.unwrap();
    }
    execute_raw(store, "ALTER TABLE change_receipts DROP COLUMN restored_ms").await.unwrap();
    execute_raw(store, "ALTER TABLE infra DROP COLUMN observe_only").await.unwrap();
    if store.backend() == Backend::Postgres {
        execute_raw(store, "DROP TRIGGER infra_progress_columns ON infra").await.unwrap();
        execute_raw(store, "DROP FUNCTION infra_progress_columns()").await.unwrap();
    } else {
        execute_raw(store, "DROP TRIGGER infra_progress_columns").await.unwrap();
    }
    for c in [
        "preflight_read_failures",
        "upgrades_read_failures_generation",
        "upgrades_read_failures",
        "updated_generation",
        "backup_schedule",
        "backup_schedule_sets",
        "volume_size_id",
        "volume_size_gb",
    ] {
        execute_raw(store, &format!("ALTER TABLE infra DROP COLUMN {c}")).await.unwrap();
    }
}

/// Two inventory passes that began before either recorded an orphan both
/// find it: it is reported found once (one `orphan_found`, one webhook),
/// seen again by the second.
async fn an_orphan_two_passes_find_side_by_side_is_found_once(store: Store) {
    let x = FoundOrphan {
        resource_id: "x".into(),
        kind: ResourceKind::Vm,
        label: "oduflow-x-vm-x".into(),
        client_ref: None,
        note: "test".into(),
    };
    let (first, second) = (store.orphans_before().await.unwrap(), store.orphans_before().await.unwrap());
    store.orphans_record(std::slice::from_ref(&x), &first, "a", 10).await.unwrap();
    store.orphans_record(std::slice::from_ref(&x), &second, "b", 11).await.unwrap();
    let found = store.events_by_kind(EventKind::OrphanFound).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].actor.as_deref(), Some("a"));
}

/// A token made before tokens had scopes could do everything: migrating
/// gives it `admin`; a token made since has the scope it was made with.
async fn tokens_made_before_scopes_keep_what_they_could_do(store: Store) {
    store.api_token_create("old", &"a".repeat(64), oduflow_store::TokenScope::Read, "test", 1).await.unwrap();
    drop_webhooks(&store).await;
    execute_raw(&store, "ALTER TABLE api_tokens DROP COLUMN scope").await.unwrap();
    oduflow_store::testing::schema_rewind(&store, 19).await.unwrap();
    store.migrate().await.unwrap();
    store.api_token_create("new", &"b".repeat(64), oduflow_store::TokenScope::Operate, "test", 2).await.unwrap();
    let scopes: Vec<(String, oduflow_store::TokenScope)> =
        store.api_token_list().await.unwrap().into_iter().map(|t| (t.name, t.scope)).collect();
    use oduflow_store::TokenScope::{Admin, Operate};
    assert_eq!(scopes, [("old".to_owned(), Admin), ("new".to_owned(), Operate)]);
    let refused = execute_raw(&store, "UPDATE api_tokens SET scope = 'root'").await;
    assert!(refused.is_err(), "a scope outside the three is refused by the schema");
}

/// A database from before the run's progress had columns of its own kept it
/// as JSON text: migrating carries every key the runs wrote into its column
/// (a client without any reads as none). An older binary, still running on
/// the new schema during an upgrade, writes only the JSON: its writes reach
/// the columns, and this build's writes reach the JSON it reads.
async fn a_runs_progress_kept_as_json_is_carried_into_its_columns(store: Store) {
    client(&store, "acme").await;
    client(&store, "beta").await;
    drop_progress_columns(&store).await;
    let old = r#"{"preflight_read_failures":2,"upgrades_read_failures":{"generation":3,"count":1},"updated_generation":3,"backup_schedule":"daily at 04:00 UTC","backup_schedule_sets":1,"volume_size":{"id":"b-1","gb":40}}"#;
    let set =
        format!("UPDATE infra SET progress = '{old}' WHERE client_id = (SELECT id FROM clients WHERE name = 'acme')");
    execute_raw(&store, &set).await.unwrap();
    oduflow_store::testing::schema_rewind(&store, 13).await.unwrap();
    store.migrate().await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    let p = store.client_get("acme").await.unwrap().unwrap().infra.progress;
    assert_eq!((p.preflight_read_failures, p.updated_generation, p.backup_schedule_sets), (2, 3, 1));
    assert_eq!((p.upgrades_read_failures_at(3), p.upgrades_read_failures_at(4)), (1, 0));
    assert_eq!(p.backup_schedule.as_deref(), Some("daily at 04:00 UTC"));
    assert_eq!(p.volume_size, Some(VolumeSize { id: "b-1".into(), gb: 40 }));
    assert_eq!(serde_json::to_value(&p).unwrap(), serde_json::from_str::<serde_json::Value>(old).unwrap());
    assert_eq!(store.client_get("beta").await.unwrap().unwrap().infra.progress, Progress::default());
    // An older binary's run counts a failed preflight read for beta.
    let older = "UPDATE infra SET progress = '{\"preflight_read_failures\":1}' \
                 WHERE client_id = (SELECT id FROM clients WHERE name = 'beta')";
    execute_raw(&store, older).await.unwrap();
    assert_eq!(store.client_get("beta").await.unwrap().unwrap().infra.progress.preflight_read_failures, 1);
    // This build's deletion clears both; an older binary's (the JSON only)
    // clears the columns too.
    store.client_delete("acme", "test", 2, 3).await.unwrap();
    assert_eq!(store.client_get("acme").await.unwrap().unwrap().infra.progress, Progress::default());
    let json = "SELECT count(*) FROM infra WHERE progress = '{}' AND client_id = \
                (SELECT id FROM clients WHERE name = 'acme')";
    assert_eq!(oduflow_store::testing::count_raw(&store, json).await, 1, "the older binary reads it cleared");
    execute_raw(&store, "UPDATE infra SET progress = '{}'").await.unwrap();
    assert_eq!(store.client_get("beta").await.unwrap().unwrap().infra.progress, Progress::default());
}

fn spec() -> ClientSpec {
    ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap()
}

async fn client(store: &Store, name: &str) -> ClientId {
    store.client_create(&ClientName::parse(name).unwrap(), &spec(), "test", 1, 3).await.unwrap().id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_migrations_build_the_same_schema() {
    let ((_s_db, s), (_p_db, p)) = (sqlite().await, postgres().await);
    let (a, b) = (schema_columns(&s).await.unwrap(), schema_columns(&p).await.unwrap());
    assert!(a.len() > 50, "too few columns read: {a:?}");
    let only_sqlite: Vec<_> = a.iter().filter(|c| !b.contains(c)).collect();
    let only_pg: Vec<_> = b.iter().filter(|c| !a.contains(c)).collect();
    assert!(
        only_sqlite.is_empty() && only_pg.is_empty(),
        "only on SQLite: {only_sqlite:?}; only on PostgreSQL: {only_pg:?}"
    );
    assert_eq!(s.schema_version().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(p.schema_version().await.unwrap(), SCHEMA_VERSION);
    p.close().await;
}

/// While one run holds a client, a second claim finds nothing, even for
/// another job of the same client; once the first gives it back, it can.
async fn claimed_clients_are_skipped(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let mut extra = NewJob::for_client(&c, JobKind::Noop, 1, 1, 3);
    extra.identity_key = None;
    store.job_enqueue(&extra).await.unwrap();
    let first = store.job_claim_next("a", 10).await.unwrap().expect("the first claim gets a job");
    assert!(store.job_claim_next("b", 10).await.unwrap().is_none(), "a claimed client was claimed again");
    first.release().await.unwrap();
    assert!(store.job_claim_next("b", 10).await.unwrap().is_some(), "a released client stayed claimed");
}

/// Each failure schedules the job base x 2^(n-1) later (capped); the last
/// allowed failure fails the job and blocks the client `attempts_exhausted`.
async fn failures_back_off_then_fail_and_block(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let base = 1_000;
    let mut now = 10;
    let mut delays = vec![];
    loop {
        let claim = store.job_claim_next("w", now).await.unwrap().expect("a job to run");
        let r = claim.claim_ref();
        claim.release().await.unwrap();
        let state = store.job_record_failure(&r, "boom", now, base).await.unwrap();
        let job = store.job_get(r.job_id).await.unwrap().unwrap();
        if state != JobState::Queued {
            assert_eq!(state, JobState::Failed);
            break;
        }
        delays.push(job.run_after_ms - now);
        assert!(store.job_claim_next("w", job.run_after_ms - 1).await.unwrap().is_none(), "ran before its backoff");
        now = job.run_after_ms;
    }
    assert_eq!(delays, vec![base, 2 * base], "backoff of a 3-attempt job");
    let row = store.client_get("acme").await.unwrap().unwrap();
    assert_eq!(row.infra.status, ClientStatus::Blocked);
    assert_eq!(row.infra.blocked_reason, Some(BlockedReason::AttemptsExhausted));
    // The block is a state change like any other: the feed (and so every
    // webhook) has it, with its reason, written with it.
    let blocked = store.events_by_kind(EventKind::Blocked).await.unwrap();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0].detail["reason"], "attempts_exhausted", "{blocked:?}");
    assert_eq!(blocked[0].client_ref.as_deref(), Some(c.as_str()));
}

/// Receipts are evidence: the schema refuses to delete one, re-point it at
/// another resource or clear its id, whatever SQL is sent.
async fn receipts_cannot_be_deleted_or_repointed(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let ledger = ReceiptLedger::new(store.clone());
    let key = OperationKey::new(&c, ResourceKind::Vm, 1);
    let label = Label::new_dispatch(&c, ResourceKind::Vm);
    ledger
        .receipt_claim(&NewReceipt {
            operation_key: key.clone(),
            client_ref: c.clone(),
            resource_kind: ResourceKind::Vm,
            dispatch_generation: 1,
            label,
            region: "ewr".into(),
            spec_digest: "d".into(),
            key_fingerprint: KeyFingerprint("f".into()),
            claimed_ms: 1,
        })
        .await
        .unwrap();
    ledger.receipt_record_id(&key, "vm-1", IdSource::Response, 2).await.unwrap();
    for sql in [
        "DELETE FROM dispatch_receipts",
        "UPDATE dispatch_receipts SET resource_id = 'other'",
        "UPDATE dispatch_receipts SET resource_id = NULL",
    ] {
        assert!(execute_raw(store, sql).await.is_err(), "{sql} was allowed");
    }
    let r = store.receipt_get(&key).await.unwrap().unwrap();
    assert_eq!(r.id(), Some("vm-1"));
}

/// `INSERT OR REPLACE` / `REPLACE INTO` delete the row in the way without
/// firing its DELETE trigger unless the connection set `recursive_triggers`:
/// a connection that is not the store's (the `sqlite3` shell, a script)
/// could re-point a receipt (over its key and label) or remove it (over its
/// label only). The file itself refuses, whatever the connection;
/// PostgreSQL has no REPLACE.
async fn receipts_survive_replace_from_any_connection(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let ledger = ReceiptLedger::new(store.clone());
    let key = OperationKey::new(&c, ResourceKind::Vm, 1);
    let label = Label::new_dispatch(&c, ResourceKind::Vm);
    let receipt = NewReceipt {
        operation_key: key.clone(),
        client_ref: c.clone(),
        resource_kind: ResourceKind::Vm,
        dispatch_generation: 1,
        label: label.clone(),
        region: "ewr".into(),
        spec_digest: "d".into(),
        key_fingerprint: KeyFingerprint("f".into()),
        claimed_ms: 1,
    };
    ledger.receipt_claim(&receipt).await.unwrap();
    ledger.receipt_record_id(&key, "vm-1", IdSource::Response, 2).await.unwrap();
    let cols = "(operation_key, client_ref, resource_kind, dispatch_generation, label, region, spec_digest, \
                key_fingerprint, claimed_ms, resource_id)";
    let (k, l, id) = (key.as_str(), label.as_str(), c.as_str());
    for sql in [
        format!(
            "INSERT OR REPLACE INTO dispatch_receipts {cols} VALUES ('{k}', '{id}', 'vm', 1, '{l}', 'ewr', 'd', 'f', 1, 'other')"
        ),
        format!(
            "REPLACE INTO dispatch_receipts {cols} VALUES ('{k}', '{id}', 'vm', 1, '{l}', 'ewr', 'd', 'f', 1, 'other')"
        ),
        format!(
            "INSERT OR REPLACE INTO dispatch_receipts {cols} VALUES ('k2', '{id}', 'vm', 1, '{l}', 'ewr', 'd', 'f', 1, NULL)"
        ),
        format!(
            "REPLACE INTO dispatch_receipts {cols} VALUES ('k2', '{id}', 'vm', 1, '{l}', 'ewr', 'd', 'f', 1, NULL)"
        ),
    ] {
        assert!(execute_raw_elsewhere(store, &sql).await.is_err(), "{sql} was allowed");
        let r = store.receipt_get(&key).await.unwrap().expect("the receipt is still there");
        assert_eq!(r.id(), Some("vm-1"), "after {sql}");
    }
    assert_eq!(store.receipts_all().await.unwrap().len(), 1, "one receipt, the one claimed");
    // The writer's own claims still answer as before.
    assert!(matches!(ledger.receipt_claim(&receipt).await, Err(StoreError::ReceiptExists(_))), "claimed twice");
    let change = NewChange {
        client_ref: c.clone(),
        resource_kind: ResourceKind::Vm,
        resource_id: "vm-1".into(),
        spec_generation: 2,
        change: serde_json::json!({ "instance": { "plan": "vc2-2c-4gb" } }),
        key_fingerprint: KeyFingerprint("f".into()),
        claimed_ms: 1,
    };
    let ck = ledger.change_claim(&change).await.unwrap();
    ledger.change_mark_sent(&ck, &c, &KeyFingerprint("f".into()), 2).await.unwrap();
    let cols =
        "(operation_key, client_ref, resource_kind, resource_id, spec_generation, change, key_fingerprint, claimed_ms)";
    for verb in ["INSERT OR REPLACE", "REPLACE"] {
        let sql =
            format!("{verb} INTO change_receipts {cols} VALUES ('{ck}', '{id}', 'vm', 'other', 2, '{{}}', 'f', 1)");
        assert!(execute_raw_elsewhere(store, &sql).await.is_err(), "{sql} was allowed");
        let rows = store.changes_for_client(&c).await.unwrap();
        assert_eq!((rows.len(), rows[0].resource_id.as_str(), rows[0].sent_at()), (1, "vm-1", Some(2)), "after {sql}");
    }
    assert!(matches!(ledger.change_claim(&change).await, Err(StoreError::ReceiptExists(_))), "claimed twice");
}

/// What an identity adapter owns is replaced only by a writer that
/// read the current version; a stale one is refused and changes nothing.
async fn adapter_ownership_is_written_by_compare_and_set(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let ledger = ReceiptLedger::new(store.clone());
    let first = serde_json::json!({ "records": [{ "type": "A", "id": "r-1" }] });
    assert_eq!(ledger.adapter_owned_put(&c, "dns", &first, 0, 1).await.unwrap(), Some(1));
    // Another run that read nothing (version 0) is now stale.
    let stale = serde_json::json!({ "records": [] });
    assert_eq!(ledger.adapter_owned_put(&c, "dns", &stale, 0, 2).await.unwrap(), None);
    let second = serde_json::json!({ "records": [{ "type": "A", "id": "r-2" }] });
    assert_eq!(ledger.adapter_owned_put(&c, "dns", &second, 1, 3).await.unwrap(), Some(2));
    assert_eq!(ledger.adapter_owned_put(&c, "dns", &stale, 1, 4).await.unwrap(), None);
    let facts = serde_json::json!({ "ipv4": "192.0.2.1" });
    use oduflow_model::identity::AdapterState::{Ensured, Removed};
    assert!(ledger.adapter_set(&c, "dns", Ensured, "ok", Some(&facts), 2, 5).await.unwrap());
    // A run that read the ownership before the last write records no state:
    // its `removed` would hide what the newer run owns.
    assert!(!ledger.adapter_set(&c, "dns", Removed, "stale", None, 1, 5).await.unwrap(), "a stale state write");
    // A state change without facts keeps the recorded ones and the ownership.
    assert!(ledger.adapter_set(&c, "dns", Removed, "gone", None, 2, 6).await.unwrap());
    let rows = store.adapter_states(&c).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].owned, second);
    assert_eq!((rows[0].state.as_str(), rows[0].facts.clone()), ("removed", facts));
    // The removal advanced the version: a run that read the ownership
    // before it (its client deleted since) cannot record a create.
    let late = serde_json::json!({ "records": [{ "type": "TXT" }] });
    assert_eq!(ledger.adapter_owned_put(&c, "dns", &late, 2, 7).await.unwrap(), None, "stale after the removal");
    assert_eq!(rows[0].owned_version, 3);
    // A run that read it after (the client created again) records, and
    // the identity is no longer `removed`: what it owns now is removed
    // before the client is reported deleted again.
    assert_eq!(ledger.adapter_owned_put(&c, "dns", &late, 3, 8).await.unwrap(), Some(4));
    let rows = store.adapter_states(&c).await.unwrap();
    assert_eq!((rows[0].state.as_str(), rows[0].owned.clone()), ("ensuring", late));
    // The removal that read version 3 is stale now too.
    assert!(!ledger.adapter_set(&c, "dns", Removed, "late", None, 3, 9).await.unwrap(), "removed over a new create");
    assert_eq!(store.adapter_states(&c).await.unwrap()[0].state.as_str(), "ensuring");
}

/// A change receipt is claimed once per client, resource and
/// spec generation; what it recorded (its change, its send, a rejection, a
/// confirmation) is never rewritten, and it is never deleted.
async fn change_receipts_are_claimed_once_and_never_rewritten(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let ledger = ReceiptLedger::new(store.clone());
    let change = NewChange {
        client_ref: c.clone(),
        resource_kind: ResourceKind::Vm,
        resource_id: "vm-1".into(),
        spec_generation: 2,
        change: serde_json::json!({ "instance": { "plan": "vc2-2c-4gb" } }),
        key_fingerprint: KeyFingerprint("f".into()),
        claimed_ms: 1,
    };
    let key = ledger.change_claim(&change).await.unwrap();
    assert!(matches!(ledger.change_claim(&change).await, Err(StoreError::ReceiptExists(_))), "claimed twice");
    // Claimed, never marked sent: provably unsent; a restored copy doubts it.
    let facts = |rows: Vec<ChangeRow>| rows[0].facts();
    let unsent = facts(store.changes_for_client(&c).await.unwrap());
    assert!(matches!(unsent, oduflow_model::decide::ChangeFacts::NotSent { .. }), "{unsent:?}");
    ledger.change_mark_sent(&key, &c, &KeyFingerprint("f".into()), 2).await.unwrap();
    ledger.change_record(&key, &c, &ChangeAnswer::Unknown("lost".into()), 3).await.unwrap();
    assert_eq!(ledger.change_observe(&key, "resizing").await.unwrap(), 1);
    ledger.change_confirm(&key, &c, 4).await.unwrap();
    for sql in [
        "DELETE FROM change_receipts",
        "UPDATE change_receipts SET change = '{}'",
        "UPDATE change_receipts SET resource_id = 'other'",
        "UPDATE change_receipts SET sent_ms = NULL",
        "UPDATE change_receipts SET confirmed_ms = 99",
    ] {
        assert!(execute_raw(store, sql).await.is_err(), "{sql} was allowed");
    }
    let rows = store.changes_for_client(&c).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].sent_at(), rows[0].confirmed_at()), (Some(2), Some(4)));
    assert_eq!(rows[0].facts(), oduflow_model::decide::ChangeFacts::Confirmed);
    // A rejection is kept as it was.
    let other = NewChange { spec_generation: 3, ..change };
    let key = ledger.change_claim(&other).await.unwrap();
    let no = ChangeAnswer::Rejected { status: 400, message: "Invalid plan chosen.".into() };
    ledger.change_record(&key, &c, &no, 5).await.unwrap();
    assert!(
        execute_raw(store, "UPDATE change_receipts SET rejection_status = 422 WHERE spec_generation = 3")
            .await
            .is_err()
    );
    // After a restore nothing open counts as unsent: only reads resolve it.
    let open = NewChange { spec_generation: 4, ..other };
    ledger.change_claim(&open).await.unwrap();
    assert_eq!(ledger.change_doubt_open(6).await.unwrap(), 1, "only the open receipt");
    let rows = store.changes_for_client(&c).await.unwrap();
    let doubted = rows.iter().find(|r| r.spec_generation == 4).unwrap();
    assert_eq!(doubted.facts(), oduflow_model::decide::ChangeFacts::Sent { observations: 0 });
}

/// While a claim lives, its fence reads `Held` exactly while the record is
/// at the claimed generation: on PostgreSQL a concurrent writer waits on the
/// claim's row lock (and here gives up), on SQLite it lands and the fence
/// reads `Superseded`. Once the claim's session is gone (PostgreSQL: its
/// backend terminated; SQLite: the row names another lease), the fence
/// reports the lease lost, so the run sends nothing more.
async fn fences_see_moved_records_and_lost_leases(store: Store) {
    let store = &store;
    let c = client(store, "acme").await;
    let claim = store.job_claim_next("a", 10).await.unwrap().expect("a job");
    let fence = claim.fence();
    assert_eq!(fence.check().await.unwrap(), Footing::Held);
    let bumped = try_bump_generation(store, &c).await.unwrap();
    assert_eq!(store.backend() == Backend::Sqlite, bumped, "a claimed record moved, or a free one did not");
    let footing = fence.check().await.unwrap();
    assert_eq!(footing == Footing::Held, !bumped, "generation moved: {bumped}; fence: {footing:?}");
    match store.backend() {
        Backend::Postgres => assert_eq!(terminate_idle_in_transaction(store).await.unwrap(), 1),
        Backend::Sqlite => execute_raw(store, "UPDATE infra SET lease_owner = 'another-run'").await.unwrap(),
    }
    // A terminated backend leaves pg_stat_activity shortly after.
    let t = std::time::Instant::now();
    let lost = loop {
        match fence.check().await {
            Err(StoreError::LeaseLost(_)) => break true,
            _ if t.elapsed() > std::time::Duration::from_secs(5) => break false,
            _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    };
    assert!(lost, "a claim whose session is gone still fences its run in");
    drop(claim);
}

/// A database error says which store operation failed (here: the pool is
/// closed under it), whatever the backend.
async fn database_errors_name_the_operation(store: Store) {
    store.close().await;
    let e = store.client_list().await.expect_err("a closed pool answers");
    assert!(matches!(e, StoreError::DbOp { op: "client_list", .. }), "{e:?}");
    assert_eq!(e.to_string(), "client_list: database error");
    let e = store.receipts_all().await.expect_err("a closed pool answers");
    assert!(e.to_string().starts_with("receipts_all: "), "{e}");
}

/// SQLite's clock (docs/protocol.md §4.1) starts no earlier than the newest
/// time recorded in the file, and a host clock stepped back afterwards does
/// not move it back: every later reading comes from the boot's one anchor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_clock_never_starts_behind_the_file_nor_follows_a_step_back() {
    let (_db, s) = sqlite().await;
    let host = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let day = 86_400_000;
    let spec = ClientSpec::parse("ewr", "vc2-1c-1gb", 2284, 40, "high_perf").unwrap();
    s.client_create(&ClientName::parse("ahead").unwrap(), &spec, "test", host + day, 3).await.unwrap();
    let first = s.clock_now_ms(host).await.unwrap();
    assert!(first >= host + day, "the clock started at {first}, behind the file's newest time {}", host + day);
    let later = s.clock_now_ms(host - 3_600_000).await.unwrap();
    assert!(later >= first, "a host clock stepped back moved the database's clock back: {later} < {first}");
}

/// A database from before DNS names were unique may hold two live clients
/// with one name: the migration that adds the unique index must still run
/// (the oldest client keeps the name), and from then on the name is
/// refused to anyone else, the other holder included.
async fn a_database_with_shared_dns_names_migrates_and_the_oldest_keeps_the_name(store: Store) {
    let first = client(&store, "acme").await;
    let second = client(&store, "web").await;
    // The schema before migration 11, with web given acme's name (and
    // without the later migrations' objects, which run again).
    if store.backend() == oduflow_store::Backend::Sqlite {
        for t in ["dispatch_receipts_no_replace", "change_receipts_no_replace"] {
            execute_raw(&store, &format!("DROP TRIGGER {t}")).await.unwrap();
        }
    }
    for sql in [
        "DROP INDEX infra_dns_key_live",
        "ALTER TABLE infra DROP COLUMN dns_key",
        "UPDATE infra SET dns_name = 'acme' WHERE client_id = (SELECT id FROM clients WHERE name = 'web')",
    ] {
        execute_raw(&store, sql).await.unwrap();
    }
    drop_progress_columns(&store).await;
    oduflow_store::testing::schema_rewind(&store, 10).await.unwrap();
    store.migrate().await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    let taken = |r: Result<ClientRow>| match r {
        Err(StoreError::DnsNameTaken { name, holder }) => {
            assert_eq!((name.as_str(), holder.as_str()), ("acme", "client acme"))
        }
        other => panic!("expected dns_name_taken, got {other:?}"),
    };
    let mut s = spec();
    s.dns_name = Some("acme".into());
    taken(store.client_create(&ClientName::parse("mail").unwrap(), &s, "test", 2, 3).await);
    let u = oduflow_model::update::SpecUpdate { plan: Some("vc2-2c-4gb".into()), ..Default::default() };
    taken(store.client_update("web", &u, "test", 3, 3).await);
    let rename = oduflow_model::update::SpecUpdate { dns_name: Some("web".into()), ..Default::default() };
    let web = store.client_update("web", &rename, "test", 4, 3).await.unwrap();
    assert_eq!((web.id, web.infra.spec.dns_name.as_deref()), (second, Some("web")));
    assert_eq!(store.client_get("acme").await.unwrap().unwrap().id, first);
}

/// Runs `acme`'s next job to an infra write with `status`, and commits.
async fn run_to(store: &Store, now: i64, status: ClientStatus) -> Result<()> {
    let claim = store.job_claim_next("w", now).await?.expect("a job to run");
    let mut infra = claim.infra.clone();
    infra.status = status;
    let finish = Finish { next: JobNext::Done, infra: Some(infra), events: vec![], enqueue: vec![] };
    claim.apply(&finish, now).await?.commit().await
}

/// A deleted client whose DNS name another client was given since, brought
/// back by a run (a restored copy doubts a create it recorded as never
/// sent) or by a reconcile (the inventory found a live resource carrying
/// its label). It is being deleted and needs no name, so it gives the name
/// up, with an event that says to whom, instead of failing on the other
/// holder's entry in the unique index at every attempt until its job is
/// exhausted (the client then stayed `deleted`, its possible live VM
/// never looked for).
async fn a_deleted_client_brought_back_gives_up_a_name_another_holds(store: Store) {
    let store = &store;
    let mut now = 10;
    for name in ["acme", "beta", "gamma", "delta"] {
        client(store, name).await;
        store.client_delete(name, "test", now, 3).await.unwrap();
        // The provision job is stale; the deprovision job deletes.
        while store.client_get(name).await.unwrap().unwrap().infra.status != ClientStatus::Deleted {
            now += 1;
            run_to(store, now, ClientStatus::Deleted).await.unwrap();
        }
        if name == "delta" {
            // Nobody took delta's name: reconciled, it holds it again.
            store.client_reconcile("delta", &[], "inventory", now, 3).await.unwrap();
            let mut s = spec();
            s.dns_name = Some("delta".into());
            let taken = store.client_create(&ClientName::parse("delta-new").unwrap(), &s, "test", now, 3).await;
            assert!(matches!(taken, Err(StoreError::DnsNameTaken { .. })), "{taken:?}");
            continue;
        }
        let mut s = spec();
        s.dns_name = Some(name.into());
        store.client_create(&ClientName::parse(&format!("{name}-new")).unwrap(), &s, "test", now, 3).await.unwrap();
    }
    // The new clients' jobs out of the way (done, writing nothing).
    while let Some(claim) = store.job_claim_next("w", now).await.unwrap() {
        let mut done = Finish::stale();
        done.next = JobNext::Done;
        claim.apply(&done, now).await.unwrap().commit().await.unwrap();
    }
    // A run of acme's that moves it out of `deleted`.
    let acme = store.client_get("acme").await.unwrap().unwrap();
    let job = NewJob::for_client(&acme.id, JobKind::Deprovision, acme.infra.generation, now, 3);
    store.job_enqueue(&job).await.unwrap();
    now += 1;
    run_to(store, now, ClientStatus::Deleting).await.unwrap_or_else(|e| panic!("acme's run: {e}"));
    // A job of gamma's that fails its last attempt blocks it.
    let gamma = store.client_get("gamma").await.unwrap().unwrap();
    let job = NewJob::for_client(&gamma.id, JobKind::Deprovision, gamma.infra.generation, now, 1);
    store.job_enqueue(&job).await.unwrap();
    let claim = store.job_claim_next("w", now).await.unwrap().expect("gamma's job");
    let r = claim.claim_ref();
    claim.release().await.unwrap();
    let failed = store.job_record_failure(&r, "boom", now, 1_000).await;
    assert_eq!(failed.unwrap_or_else(|e| panic!("gamma's last failure: {e}")), JobState::Failed);
    assert_eq!(store.client_get("gamma").await.unwrap().unwrap().infra.status, ClientStatus::Blocked);
    let beta = store.client_reconcile("beta", &[], "inventory", now, 3).await;
    let beta = beta.unwrap_or_else(|e| panic!("beta's reconcile: {e}"));
    assert_eq!(beta.infra.status, ClientStatus::Deleting);
    assert_eq!(store.client_get("acme").await.unwrap().unwrap().infra.status, ClientStatus::Deleting);
    for (gave, holder) in [("acme", "acme-new"), ("beta", "beta-new"), ("gamma", "gamma-new")] {
        let id = store.client_get(gave).await.unwrap().unwrap().id;
        let events = store.events_for_client(&id).await.unwrap();
        let e = events.iter().find(|e| e.kind == EventKind::DnsNameReleased.as_str());
        let e = e.unwrap_or_else(|| panic!("{gave}: no dns_name_released event in {events:?}"));
        assert_eq!((e.detail["name"].as_str(), e.detail["held_by"].as_str()), (Some(gave), Some(holder)));
        // The name stays the new holder's.
        let mut s = spec();
        s.dns_name = Some(gave.into());
        let again =
            store.client_create(&ClientName::parse(&format!("{gave}-third")).unwrap(), &s, "test", now, 3).await;
        assert!(matches!(again, Err(StoreError::DnsNameTaken { .. })), "{again:?}");
    }
}

/// `client delete` and `reconcile` each read the record and write it back
/// in one transaction. Side by side on one client, the second must read
/// what the first wrote: both move the generation on (two writes, two
/// generations), and the record ends with the delete's target and a status
/// that agrees with it. (On PostgreSQL, read committed lets a read made
/// before the other's commit be written back after it, unless the read
/// locks the row; SQLite's write lock orders them.)
async fn a_delete_and_a_reconcile_side_by_side_each_see_the_others_write(store: Store) {
    const CLIENTS: usize = 32;
    let mut before = vec![];
    for i in 0..CLIENTS {
        client(&store, &format!("c{i}")).await;
        before.push(store.client_get(&format!("c{i}")).await.unwrap().unwrap().infra.generation);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let (a, b, name) = (store.clone(), store.clone(), format!("c{i}"));
        let n = name.clone();
        tasks.spawn(async move { a.client_delete(&n, "test", 2, 3).await.map(|_| ()) });
        tasks.spawn(async move { b.client_reconcile(&name, &[], "operator", 2, 3).await.map(|_| ()) });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap_or_else(|e| panic!("an operator write failed: {e}"));
    }
    let mut lost = vec![];
    for (i, gen_before) in before.iter().enumerate() {
        let c = store.client_get(&format!("c{i}")).await.unwrap().unwrap();
        if c.infra.generation != gen_before + 2 || c.infra.status != ClientStatus::Deleting {
            lost.push(format!(
                "c{i}: generation {} (was {gen_before}), {} {:?}",
                c.infra.generation, c.infra.status, c.infra.target
            ));
        }
        assert_eq!(c.infra.target, Target::Absent, "c{i}");
    }
    assert!(lost.is_empty(), "a write read before the other's commit was written back after it: {lost:?}");
    // Two creates of one client being deleted, side by side: one brings it
    // back, the other finds it present.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        for _ in 0..2 {
            let (s, name) = (store.clone(), ClientName::parse(&format!("c{i}")).unwrap());
            tasks.spawn(async move { (name.to_string(), s.client_create(&name, &spec(), "test", 3, 3).await) });
        }
    }
    let mut brought: std::collections::HashMap<String, usize> = Default::default();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            (name, Ok(_)) => *brought.entry(name).or_default() += 1,
            (_, Err(StoreError::ClientExists(_))) => {}
            (name, Err(e)) => panic!("{name}: {e}"),
        }
    }
    for (i, gen_before) in before.iter().enumerate() {
        let name = format!("c{i}");
        let c = store.client_get(&name).await.unwrap().unwrap();
        assert_eq!(brought.get(&name), Some(&1), "{name} brought back twice or never");
        assert_eq!((c.infra.generation, c.infra.target), (gen_before + 3, Target::Present), "{name}");
    }
}

/// PostgreSQL: a run holds its client's row locked to its end, so an
/// operator write that locks the row waits for it. One that changes nothing
/// does not wait: deleting a client already going away, or creating one
/// that is present, answers while runs hold both rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_writes_that_change_nothing_wait_for_no_run_postgres() {
    let (_db, store) = postgres().await;
    client(&store, "acme").await;
    store.client_delete("acme", "test", 2, 3).await.unwrap();
    client(&store, "beta").await;
    let first = store.job_claim_next("w", 3).await.unwrap().expect("a job");
    let second = store.job_claim_next("w", 3).await.unwrap().expect("a job of the other client");
    let within = std::time::Duration::from_secs(10);
    let deleted = tokio::time::timeout(within, store.client_delete("acme", "test", 4, 3)).await;
    assert!(matches!(deleted, Ok(Ok(_))), "deleting acme again waited for its run: {deleted:?}");
    let beta = ClientName::parse("beta").unwrap();
    let created = tokio::time::timeout(within, store.client_create(&beta, &spec(), "test", 4, 3)).await;
    assert!(matches!(created, Ok(Err(StoreError::ClientExists(_)))), "{created:?}");
    first.release().await.unwrap();
    second.release().await.unwrap();
}

/// An inventory pass clears the restore it saw pending when it began, and
/// no other: a restore declared while it ran (the database copied back
/// under it, say, and a worker's lineage check declaring it) stays pending
/// for the next pass, even with the same reason; the lineage moves to a new
/// epoch only when a restore is cleared.
async fn an_inventory_pass_clears_only_the_restore_it_saw(store: Store) {
    let lineage = || async { store.setting_get(SETTING_LINEAGE).await.unwrap() };
    // Nothing pending when the pass began; a restore declared meanwhile.
    let seen = store.restore_seen().await.unwrap();
    store.restore_declare("copied back", "test", 1).await.unwrap();
    let before = lineage().await;
    store.restore_clear(&seen, serde_json::json!({}), None, 2).await.unwrap();
    assert_eq!(store.restore_pending().await.unwrap().as_deref(), Some("copied back"), "declared during the pass");
    assert_eq!(lineage().await, before);
    // Pending when it began, declared again (same reason) meanwhile.
    let seen = store.restore_seen().await.unwrap();
    store.restore_declare("copied back", "test", 3).await.unwrap();
    store.restore_clear(&seen, serde_json::json!({}), None, 4).await.unwrap();
    assert_eq!(store.restore_pending().await.unwrap().as_deref(), Some("copied back"), "declared again");
    // A pass that saw this one clears it.
    let seen = store.restore_seen().await.unwrap();
    store.restore_clear(&seen, serde_json::json!({}), None, 5).await.unwrap();
    assert_eq!(store.restore_pending().await.unwrap(), None);
    assert_ne!(lineage().await, before, "a new epoch");
}

/// Two revocations of one token side by side: one revokes it, the other
/// finds no live token of that name; one revocation time, one event. (On
/// PostgreSQL both once read the token live and both wrote, the second
/// overwriting the first's time and recording a second event.)
async fn a_token_revoked_twice_side_by_side_is_revoked_once(store: Store) {
    const TOKENS: usize = 16;
    for i in 0..TOKENS {
        store
            .api_token_create(&format!("t{i}"), &format!("{i:064}"), oduflow_store::TokenScope::Admin, "test", 10)
            .await
            .unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..TOKENS {
        for at in [20, 30] {
            let (s, name) = (store.clone(), format!("t{i}"));
            tasks.spawn(async move { (name.clone(), s.api_token_revoke(&name, "test", at).await) });
        }
    }
    let mut revoked: std::collections::HashMap<String, Vec<i64>> = Default::default();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            (name, Ok(row)) => revoked.entry(name).or_default().push(row.revoked_ms.unwrap()),
            (_, Err(StoreError::TokenNotFound(_))) => {}
            (name, Err(e)) => panic!("{name}: {e}"),
        }
    }
    let twice: Vec<_> = revoked.iter().filter(|(_, at)| at.len() != 1).collect();
    assert!(twice.is_empty(), "revoked twice: {twice:?}");
    assert_eq!(revoked.len(), TOKENS);
    let events = store.events_by_kind(EventKind::ApiTokenRevoked).await.unwrap();
    assert_eq!(events.len(), TOKENS, "one event per token");
}

/// Two inventory passes side by side commit in either order; each records
/// what it found as of its start. One that began earlier and commits later
/// neither reopens an orphan resolved after it began (by an operator or a
/// run's adoption: its listing may predate the resolution, whatever time
/// the resolution was stamped with), nor resolves one a pass that began
/// after it saw, nor moves a sighting back in time. (It once did all
/// three: an adopted resource reopened as an orphan blocks its client
/// `labelled_orphan`.)
async fn an_inventory_pass_never_undoes_what_happened_after_it_began(store: Store) {
    let orphan = |id: &str| FoundOrphan {
        resource_id: id.into(),
        kind: ResourceKind::Vm,
        label: format!("oduflow-x-vm-{id}"),
        client_ref: None,
        note: "test".into(),
    };
    let (x, y, z) = (orphan("x"), orphan("y"), orphan("z"));
    let state = |id: &'static str| {
        let store = store.clone();
        async move {
            let r = store.orphan_get(id).await.unwrap().unwrap();
            (r.resolved_ms, r.last_seen_ms)
        }
    };
    let before = store.orphans_before().await.unwrap();
    store.orphans_record(std::slice::from_ref(&x), &before, "test", 10).await.unwrap();
    // A pass begins at 15 (x open); an adoption stamped 12 (when its
    // command began) commits; then the pass, which listed x before it.
    let pass = store.orphans_before().await.unwrap();
    assert!(store.orphan_resolve("x", "adopted by acme", 12).await.unwrap());
    store.orphans_record(std::slice::from_ref(&x), &pass, "test", 15).await.unwrap();
    assert_eq!(state("x").await, (Some(12), 10), "reopened by a pass that began before its resolution");
    // Two passes begin before z is recorded (at 20 and 25); the first
    // records it, an operator resolves it, then the second commits.
    let (first, second) = (store.orphans_before().await.unwrap(), store.orphans_before().await.unwrap());
    store.orphans_record(std::slice::from_ref(&z), &first, "test", 20).await.unwrap();
    assert!(store.orphan_resolve("z", "adopted by acme", 21).await.unwrap());
    store.orphans_record(std::slice::from_ref(&z), &second, "test", 25).await.unwrap();
    assert_eq!(state("z").await, (Some(21), 20), "reopened: resolved while the pass ran");
    // y is recorded at 30; a pass begins at 35 (y open), one that began at
    // 40 sees y, then the first commits without it.
    store.orphans_record(std::slice::from_ref(&y), &store.orphans_before().await.unwrap(), "test", 30).await.unwrap();
    let older = store.orphans_before().await.unwrap();
    store.orphans_record(std::slice::from_ref(&y), &store.orphans_before().await.unwrap(), "test", 40).await.unwrap();
    store.orphans_record(&[], &older, "test", 35).await.unwrap();
    assert_eq!(state("y").await, (None, 40), "resolved by a pass older than its last sighting");
    store.orphans_record(std::slice::from_ref(&y), &older, "test", 38).await.unwrap();
    assert_eq!(state("y").await, (None, 40), "a sighting moved back");
    // Passes that begin later do both: x and z, resolved before the pass
    // began and listed by it, are open again; y, open and no longer
    // listed, is resolved.
    let later = store.orphans_before().await.unwrap();
    store.orphans_record(&[x.clone(), z.clone()], &later, "test", 50).await.unwrap();
    assert_eq!(state("x").await, (None, 50));
    assert_eq!(state("z").await, (None, 50));
    assert_eq!(state("y").await, (Some(50), 40));
}

/// Inventory passes side by side, each finding an overlapping set of
/// orphans in its own order and resolving others: every one commits (on
/// PostgreSQL, two that lock the same rows in different orders once
/// deadlocked, and one failed).
async fn inventory_passes_side_by_side_all_commit(store: Store) {
    const IDS: usize = 24;
    const PASSES: usize = 8;
    let orphan = |i: usize| FoundOrphan {
        resource_id: format!("r{i:02}"),
        kind: ResourceKind::Vm,
        label: format!("oduflow-x-vm-r{i:02}"),
        client_ref: None,
        note: "test".into(),
    };
    let all: Vec<FoundOrphan> = (0..IDS).map(orphan).collect();
    store.orphans_record(&all, &store.orphans_before().await.unwrap(), "test", 1).await.unwrap();
    for round in 0..4 {
        let mut tasks = tokio::task::JoinSet::new();
        for p in 0..PASSES {
            let store = store.clone();
            // Every other id from an offset, in descending or ascending order.
            let mut found: Vec<FoundOrphan> = (0..IDS).filter(|i| (i + p) % 2 == 0).map(orphan).collect();
            if p % 2 == 1 {
                found.reverse();
            }
            let n = found.len();
            found.rotate_left(p % n);
            tasks.spawn(async move {
                let before = store.orphans_before().await?;
                store.orphans_record(&found, &before, "test", 10 + round * 10 + p as i64).await
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap_or_else(|e| panic!("a pass failed: {e}"));
        }
    }
}

/// The pass after a restore marks every change receipt it finds, open or
/// confirmed, once: confirmed (then or later), it reads as confirmed
/// before a restore, which owns no resize the instance shows since. A
/// change claimed after the pass is the new timeline's own.
async fn a_change_a_restores_pass_found_owns_no_resize_once_confirmed(store: Store) {
    use oduflow_model::decide::ChangeFacts;
    let c = client(&store, "acme").await;
    let ledger = ReceiptLedger::new(store.clone());
    let f = KeyFingerprint("f".into());
    let change = |generation| NewChange {
        client_ref: c.clone(),
        resource_kind: ResourceKind::Vm,
        resource_id: "vm-1".into(),
        spec_generation: generation,
        change: serde_json::json!({ "instance": { "plan": "vc2-2c-4gb" } }),
        key_fingerprint: f.clone(),
        claimed_ms: 1,
    };
    let confirmed = ledger.change_claim(&change(2)).await.unwrap();
    ledger.change_mark_sent(&confirmed, &c, &f, 2).await.unwrap();
    ledger.change_confirm(&confirmed, &c, 3).await.unwrap();
    let open = ledger.change_claim(&change(3)).await.unwrap();
    ledger.change_mark_sent(&open, &c, &f, 4).await.unwrap();
    assert_eq!(ledger.change_doubt_open(10).await.unwrap(), 0, "nothing was unsent");
    ledger.change_confirm(&open, &c, 11).await.unwrap();
    let after = ledger.change_claim(&change(4)).await.unwrap();
    ledger.change_mark_sent(&after, &c, &f, 12).await.unwrap();
    ledger.change_confirm(&after, &c, 13).await.unwrap();
    let facts = || async {
        store.changes_for_client(&c).await.unwrap().iter().map(|r| (r.spec_generation, r.facts())).collect::<Vec<_>>()
    };
    let before = ChangeFacts::ConfirmedBeforeRestore;
    assert_eq!(facts().await, vec![(2, before.clone()), (3, before.clone()), (4, ChangeFacts::Confirmed)]);
    // A later restore's pass marks what it finds, and no mark twice.
    ledger.change_doubt_open(20).await.unwrap();
    assert_eq!(facts().await, vec![(2, before.clone()), (3, before.clone()), (4, before)]);
    assert!(execute_raw(&store, "UPDATE change_receipts SET restored_ms = NULL").await.is_err(), "the mark was erased");
    assert!(execute_raw(&store, "UPDATE change_receipts SET restored_ms = 99").await.is_err(), "the mark was moved");
}

/// The periodic verification runs once per interval across every worker
/// that shares the database: the first call records the time, and once an
/// interval has passed, of callers side by side exactly one claims the pass.
async fn one_caller_claims_each_verification_pass(store: Store) {
    assert!(!store.verify_claim(1_000, 500).await.unwrap(), "the first call only sets the due time");
    assert!(!store.verify_claim(1_400, 500).await.unwrap(), "not due yet");
    let claim = || store.verify_claim(1_500, 500);
    let (a, b, c, d) = tokio::join!(claim(), claim(), claim(), claim());
    let claimed = [a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap()];
    assert_eq!(claimed.iter().filter(|c| **c).count(), 1, "{claimed:?}");
    assert!(!store.verify_claim(1_999, 500).await.unwrap(), "the due time moved an interval on");
    assert!(store.verify_claim(2_000, 500).await.unwrap());
    // A caller with a shorter interval (a setting changed since) claims
    // by its own.
    assert!(store.verify_claim(2_100, 100).await.unwrap());
}

/// The verification's run for a drifted client is queued only if the
/// client is still ready at the generation the pass read: one that was
/// updated, blocked or deleted since keeps what it has, no block lifted.
async fn a_recheck_acts_only_on_the_ready_client_it_read(store: Store) {
    let id = client(&store, "acme").await;
    let ready = "UPDATE infra SET status = 'ready' WHERE client_id = (SELECT id FROM clients WHERE name = 'acme')";
    execute_raw(&store, ready).await.unwrap();
    let read = store.client_get("acme").await.unwrap().unwrap().infra.generation;
    let jobs = || oduflow_store::testing::table_count(&store, "jobs");
    let before = jobs().await;
    assert!(!store.client_recheck(&id, read - 1, "test", 5, 3).await.unwrap(), "a generation that moved on");
    let blocked = "UPDATE infra SET status = 'blocked', blocked_reason = 'uncertain_update' \
                   WHERE client_id = (SELECT id FROM clients WHERE name = 'acme')";
    execute_raw(&store, blocked).await.unwrap();
    assert!(!store.client_recheck(&id, read, "test", 5, 3).await.unwrap(), "blocked since the pass read it");
    let c = store.client_get("acme").await.unwrap().unwrap();
    assert_eq!((c.infra.status, c.infra.blocked_reason), (ClientStatus::Blocked, Some(BlockedReason::UncertainUpdate)));
    assert_eq!(jobs().await, before, "nothing queued");
    execute_raw(&store, ready).await.unwrap();
    assert!(store.client_recheck(&id, read, "test", 5, 3).await.unwrap());
    let c = store.client_get("acme").await.unwrap().unwrap();
    assert_eq!((c.infra.status, c.infra.generation), (ClientStatus::Provisioning, read + 1));
    assert_eq!(jobs().await, before + 1);
}

/// A restore from an older copy hands out no position a reader has already
/// passed: every event written after it is read after the reader's cursor,
/// none skipped (positions follow the database's clock; numbered on from
/// the copy's last position, the first of them fell below the cursor).
async fn a_feed_reader_misses_nothing_written_after_a_restore(db: TestDb, store: Store) {
    let create = |store: &Store, name: &str, at_ms: i64| {
        let (store, name) = (store.clone(), ClientName::parse(name).unwrap());
        async move { store.client_create(&name, &spec(), "test", at_ms, 3).await.unwrap() }
    };
    create(&store, "acme", 1_000_000).await;
    store.feed_stamp().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let snap = oduflow_store::testing::snapshot(&store, dir.path()).await.unwrap();
    for (i, name) in ["beta", "gamma", "delta", "eps"].iter().enumerate() {
        create(&store, name, 2_000_000 + i as i64).await;
    }
    let cursor = store.feed_after(0, 1000).await.unwrap().next;
    oduflow_store::testing::restore(&store, &db.url, &snap).await.unwrap();
    let store = db.store().await;
    let after: Vec<&str> = vec!["zeta", "eta", "theta", "iota", "kappa"];
    for (i, name) in after.iter().enumerate() {
        create(&store, name, 3_000_000 + i as i64).await;
    }
    let page = store.feed_read(&FeedQuery::new(Some(cursor), None, None).unwrap()).await.unwrap();
    let read: Vec<&str> = page.events.iter().filter_map(|e| e.client.as_deref()).collect();
    for name in &after {
        assert!(read.contains(name), "{name}'s events were skipped after the restore: {page:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_reader_misses_nothing_written_after_a_restore_sqlite() {
    let (db, store) = sqlite().await;
    a_feed_reader_misses_nothing_written_after_a_restore(db, store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_reader_misses_nothing_written_after_a_restore_postgres() {
    let (db, store) = postgres().await;
    a_feed_reader_misses_nothing_written_after_a_restore(db, store).await;
}

/// Stamping passes side by side (four writers, each stamping after every
/// write, on connections of their own): each event gets one position,
/// none is given twice, and a reader paging through reads every event once.
async fn stamping_passes_side_by_side_give_each_event_one_position(db: TestDb) {
    let mut tasks = vec![];
    for w in 0..4 {
        let store = db.store().await;
        tasks.push(tokio::spawn(async move {
            for i in 0..6 {
                let name = ClientName::parse(&format!("c{w}x{i}")).unwrap();
                store.client_create(&name, &spec(), "test", 1_000_000 + i, 3).await.unwrap();
                store.feed_stamp().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let store = db.store().await;
    let (mut after, mut read) = (0, vec![]);
    loop {
        let page = store.feed_after(after, 5).await.unwrap();
        if page.events.is_empty() {
            break;
        }
        after = page.next;
        read.extend(page.events.into_iter().map(|e| e.id));
    }
    let mut ids = read.clone();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), read.len(), "an event read twice: {read:?}");
    assert_eq!(read.len() as i64, count_raw(&store, "SELECT count(*) FROM events").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stamping_passes_side_by_side_give_each_event_one_position_sqlite() {
    stamping_passes_side_by_side_give_each_event_one_position(sqlite().await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stamping_passes_side_by_side_give_each_event_one_position_postgres() {
    stamping_passes_side_by_side_give_each_event_one_position(postgres().await.0).await;
}
