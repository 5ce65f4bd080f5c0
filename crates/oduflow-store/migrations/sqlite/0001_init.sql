-- oduflow schema, SQLite. Same shape as the PostgreSQL schema; times are epoch
-- milliseconds. SQLite has no row locks: the infra lease columns serialize
-- work per client.

CREATE TABLE clients (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_ms  INTEGER NOT NULL
);

CREATE TABLE infra (
    client_id        TEXT PRIMARY KEY REFERENCES clients(id),
    region           TEXT NOT NULL,
    plan             TEXT NOT NULL,
    os_id            INTEGER NOT NULL,
    volume_gb        INTEGER NOT NULL,
    volume_type      TEXT NOT NULL,
    target           TEXT NOT NULL CHECK (target IN ('present', 'absent')),
    generation       INTEGER NOT NULL,
    status           TEXT NOT NULL,
    blocked_reason   TEXT,
    blocked_detail   TEXT,
    key_fingerprint  TEXT,
    vm_id            TEXT,
    volume_id        TEXT,
    vm_dispatch_generation      INTEGER NOT NULL DEFAULT 1,
    volume_dispatch_generation  INTEGER NOT NULL DEFAULT 1,
    attach_dispatch_generation  INTEGER NOT NULL DEFAULT 1,
    progress         TEXT NOT NULL DEFAULT '{}',
    lease_owner      TEXT,
    lease_until_ms   INTEGER,
    updated_ms       INTEGER NOT NULL
);

CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id     TEXT NOT NULL REFERENCES clients(id),
    kind          TEXT NOT NULL,
    generation    INTEGER NOT NULL,
    identity_key  TEXT,
    state         TEXT NOT NULL CHECK (state IN ('queued', 'done', 'stale', 'failed')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    attempts_max  INTEGER NOT NULL,
    run_after_ms  INTEGER NOT NULL,
    payload       TEXT NOT NULL DEFAULT '{}',
    last_error    TEXT,
    created_ms    INTEGER NOT NULL,
    finished_ms   INTEGER
);
CREATE UNIQUE INDEX jobs_identity_queued ON jobs (identity_key)
    WHERE state = 'queued' AND identity_key IS NOT NULL;
CREATE INDEX jobs_runnable ON jobs (run_after_ms, id) WHERE state = 'queued';
CREATE INDEX jobs_client ON jobs (client_id);

CREATE TABLE dispatch_receipts (
    operation_key        TEXT PRIMARY KEY,
    client_ref           TEXT NOT NULL,
    resource_kind        TEXT NOT NULL,
    dispatch_generation  INTEGER NOT NULL,
    label                TEXT NOT NULL UNIQUE,
    region               TEXT NOT NULL,
    spec_digest          TEXT NOT NULL,
    key_fingerprint      TEXT NOT NULL,
    claimed_ms           INTEGER NOT NULL,
    sent_ms              INTEGER,
    resource_id          TEXT,
    resource_id_source   TEXT CHECK (resource_id_source IN ('response', 'adopted_by_label', 'adopted_by_operator')),
    rejection_status     INTEGER,
    rejection_message    TEXT,
    observation_count    INTEGER NOT NULL DEFAULT 0,
    -- Observations before this count were spent before an explicit
    -- reconciliation; the polling limit applies to those after it.
    observation_base     INTEGER NOT NULL DEFAULT 0,
    last_observation     TEXT,
    abandoned_by         TEXT,
    abandoned_reason     TEXT,
    -- Deletion bookkeeping, committed like the rest of the receipt on its own
    -- connection, so a killed worker cannot lose it: when a GET first showed
    -- the resource (before that, a 404 may be Vultr's post-create lag), when a
    -- DELETE was last sent after that, and when a GET 404 confirmed it gone.
    seen_ms              INTEGER,
    delete_sent_ms       INTEGER,
    deleted_ms           INTEGER
);
CREATE INDEX dispatch_receipts_client ON dispatch_receipts (client_ref);

CREATE TRIGGER dispatch_receipts_no_delete BEFORE DELETE ON dispatch_receipts
BEGIN
    SELECT RAISE(ABORT, 'dispatch receipts are never deleted');
END;
CREATE TRIGGER dispatch_receipts_no_id_rewrite BEFORE UPDATE ON dispatch_receipts
    WHEN OLD.resource_id IS NOT NULL AND (NEW.resource_id IS NULL OR NEW.resource_id <> OLD.resource_id)
BEGIN
    SELECT RAISE(ABORT, 'a recorded resource id never changes');
END;
CREATE TRIGGER dispatch_receipts_no_identity_rewrite BEFORE UPDATE ON dispatch_receipts
    WHEN NEW.operation_key <> OLD.operation_key OR NEW.label <> OLD.label
      OR NEW.client_ref <> OLD.client_ref OR NEW.resource_kind <> OLD.resource_kind
BEGIN
    SELECT RAISE(ABORT, 'a receipt''s identity never changes');
END;
CREATE TRIGGER dispatch_receipts_no_rejection_rewrite BEFORE UPDATE ON dispatch_receipts
    WHEN OLD.rejection_status IS NOT NULL AND (NEW.rejection_status IS NULL OR NEW.rejection_status <> OLD.rejection_status)
BEGIN
    SELECT RAISE(ABORT, 'a recorded rejection never changes');
END;

CREATE TRIGGER dispatch_receipts_no_abandon_rewrite BEFORE UPDATE ON dispatch_receipts
    WHEN OLD.abandoned_by IS NOT NULL AND (NEW.abandoned_by IS NULL OR NEW.abandoned_by <> OLD.abandoned_by
      OR NEW.abandoned_reason IS NULL OR NEW.abandoned_reason <> OLD.abandoned_reason)
BEGIN
    SELECT RAISE(ABORT, 'a recorded abandonment never changes');
END;

CREATE TRIGGER dispatch_receipts_no_progress_rewind BEFORE UPDATE ON dispatch_receipts
    WHEN (OLD.seen_ms IS NOT NULL AND NEW.seen_ms IS NULL) OR (OLD.delete_sent_ms IS NOT NULL AND NEW.delete_sent_ms IS NULL)
      OR (OLD.deleted_ms IS NOT NULL AND (NEW.deleted_ms IS NULL OR NEW.deleted_ms <> OLD.deleted_ms))
BEGIN
    SELECT RAISE(ABORT, 'recorded deletion progress never goes back');
END;

CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    client_ref  TEXT,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL DEFAULT '{}',
    at_ms       INTEGER NOT NULL
);
CREATE INDEX events_client ON events (client_ref, id);

CREATE TABLE settings (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
