-- oduflow schema, PostgreSQL. Times are epoch milliseconds (BIGINT) on both
-- stores so the engine can inject its clock and share one code path.

CREATE TABLE clients (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_ms  BIGINT NOT NULL
);

-- One row per client: the desired spec, the target, and what is known. This
-- is the row locked (FOR UPDATE) to serialize every change to one client.
CREATE TABLE infra (
    client_id        TEXT PRIMARY KEY REFERENCES clients(id),
    region           TEXT NOT NULL,
    plan             TEXT NOT NULL,
    os_id            BIGINT NOT NULL,
    volume_gb        BIGINT NOT NULL,
    volume_type      TEXT NOT NULL,
    target           TEXT NOT NULL CHECK (target IN ('present', 'absent')),
    generation       BIGINT NOT NULL,
    status           TEXT NOT NULL,
    blocked_reason   TEXT,
    blocked_detail   TEXT,
    key_fingerprint  TEXT,
    vm_id            TEXT,
    volume_id        TEXT,
    vm_dispatch_generation      BIGINT NOT NULL DEFAULT 1,
    volume_dispatch_generation  BIGINT NOT NULL DEFAULT 1,
    attach_dispatch_generation  BIGINT NOT NULL DEFAULT 1,
    -- Progress of the current target that is not a provider id: how many
    -- observations found nothing, when deletion was confirmed, ...
    progress         TEXT NOT NULL DEFAULT '{}',
    -- Per-client lease, used by the SQLite store (which has no row locks);
    -- unused on PostgreSQL, where the row lock is the lease.
    lease_owner      TEXT,
    lease_until_ms   BIGINT,
    updated_ms       BIGINT NOT NULL
);

CREATE TABLE jobs (
    id            BIGSERIAL PRIMARY KEY,
    client_id     TEXT NOT NULL REFERENCES clients(id),
    kind          TEXT NOT NULL,
    generation    BIGINT NOT NULL,
    identity_key  TEXT,
    state         TEXT NOT NULL CHECK (state IN ('queued', 'done', 'stale', 'failed')),
    attempts      BIGINT NOT NULL DEFAULT 0,
    attempts_max  BIGINT NOT NULL,
    run_after_ms  BIGINT NOT NULL,
    payload       TEXT NOT NULL DEFAULT '{}',
    last_error    TEXT,
    created_ms    BIGINT NOT NULL,
    finished_ms   BIGINT
);
-- The identity key deduplicates pending jobs only.
CREATE UNIQUE INDEX jobs_identity_queued ON jobs (identity_key)
    WHERE state = 'queued' AND identity_key IS NOT NULL;
CREATE INDEX jobs_runnable ON jobs (run_after_ms, id) WHERE state = 'queued';
CREATE INDEX jobs_client ON jobs (client_id);

-- Durable records of dispatches. No foreign key (a receipt outlives anything
-- it refers to), no secrets. Written only by the engine's receipt writer.
CREATE TABLE dispatch_receipts (
    operation_key        TEXT PRIMARY KEY,
    client_ref           TEXT NOT NULL,
    resource_kind        TEXT NOT NULL,
    dispatch_generation  BIGINT NOT NULL,
    label                TEXT NOT NULL UNIQUE,
    region               TEXT NOT NULL,
    spec_digest          TEXT NOT NULL,
    key_fingerprint      TEXT NOT NULL,
    claimed_ms           BIGINT NOT NULL,
    sent_ms              BIGINT,
    resource_id          TEXT,
    resource_id_source   TEXT CHECK (resource_id_source IN ('response', 'adopted_by_label', 'adopted_by_operator')),
    rejection_status     BIGINT,
    rejection_message    TEXT,
    observation_count    BIGINT NOT NULL DEFAULT 0,
    -- Observations before this count were spent before an explicit
    -- reconciliation; the polling limit applies to those after it.
    observation_base     BIGINT NOT NULL DEFAULT 0,
    last_observation     TEXT,
    abandoned_by         TEXT,
    abandoned_reason     TEXT,
    -- Deletion bookkeeping, committed like the rest of the receipt on its own
    -- connection, so a killed worker cannot lose it: when a GET first showed
    -- the resource (before that, a 404 may be Vultr's post-create lag), when a
    -- DELETE was last sent after that, and when a GET 404 confirmed it gone.
    seen_ms              BIGINT,
    delete_sent_ms       BIGINT,
    deleted_ms           BIGINT
);
CREATE INDEX dispatch_receipts_client ON dispatch_receipts (client_ref);

-- The database itself refuses to lose a receipt or rewrite a recorded id, so
-- a bug anywhere else cannot break invariant 2.
CREATE FUNCTION dispatch_receipts_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'dispatch receipts are never deleted';
    END IF;
    IF OLD.resource_id IS NOT NULL AND NEW.resource_id IS DISTINCT FROM OLD.resource_id THEN
        RAISE EXCEPTION 'a recorded resource id never changes';
    END IF;
    IF NEW.operation_key <> OLD.operation_key OR NEW.label <> OLD.label
       OR NEW.client_ref <> OLD.client_ref OR NEW.resource_kind <> OLD.resource_kind THEN
        RAISE EXCEPTION 'a receipt''s identity never changes';
    END IF;
    IF OLD.rejection_status IS NOT NULL AND NEW.rejection_status IS DISTINCT FROM OLD.rejection_status THEN
        RAISE EXCEPTION 'a recorded rejection never changes';
    END IF;
    IF (OLD.seen_ms IS NOT NULL AND NEW.seen_ms IS NULL) OR (OLD.delete_sent_ms IS NOT NULL AND NEW.delete_sent_ms IS NULL)
       OR (OLD.deleted_ms IS NOT NULL AND NEW.deleted_ms IS DISTINCT FROM OLD.deleted_ms) THEN
        RAISE EXCEPTION 'recorded deletion progress never goes back';
    END IF;
    IF OLD.abandoned_by IS NOT NULL AND (NEW.abandoned_by IS DISTINCT FROM OLD.abandoned_by
       OR NEW.abandoned_reason IS DISTINCT FROM OLD.abandoned_reason) THEN
        RAISE EXCEPTION 'a recorded abandonment never changes';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER dispatch_receipts_no_delete BEFORE DELETE ON dispatch_receipts
    FOR EACH ROW EXECUTE FUNCTION dispatch_receipts_guard();
CREATE TRIGGER dispatch_receipts_no_rewrite BEFORE UPDATE ON dispatch_receipts
    FOR EACH ROW EXECUTE FUNCTION dispatch_receipts_guard();
-- TRUNCATE bypasses row triggers; refuse it too.
CREATE FUNCTION dispatch_receipts_no_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'dispatch receipts are never deleted';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER dispatch_receipts_no_truncate BEFORE TRUNCATE ON dispatch_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION dispatch_receipts_no_truncate();

-- Append-only audit trail. Provider requests are recorded here by the receipt
-- writer's connection so they survive rollbacks (invariant 7).
CREATE TABLE events (
    id          BIGSERIAL PRIMARY KEY,
    client_ref  TEXT,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL DEFAULT '{}',
    at_ms       BIGINT NOT NULL
);
CREATE INDEX events_client ON events (client_ref, id);

CREATE TABLE settings (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
