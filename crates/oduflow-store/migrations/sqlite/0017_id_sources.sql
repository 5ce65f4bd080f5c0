-- Every way an id becomes known may be recorded on a receipt: an attach
-- whose answer was lost is confirmed by the read that shows the volume
-- attached (`confirmed_by_read`), so it is counted as what it is rather
-- than as an unknown outcome. SQLite cannot alter a CHECK: the table is
-- rebuilt (its rows copied as they are), then its index and triggers are
-- made again as they stood.
CREATE TABLE dispatch_receipts_rebuilt (
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
    resource_id_source   TEXT CHECK (resource_id_source IN ('response', 'adopted_by_label', 'adopted_by_operator',
                                                          'confirmed_by_read', 'reclaimed_by_marker')),
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
    deleted_ms           INTEGER,
    not_sent_ms          INTEGER,
    not_sent_reason      TEXT,
    not_sent_count       INTEGER NOT NULL DEFAULT 0,
    listed_ms            INTEGER
);
INSERT INTO dispatch_receipts_rebuilt (
    operation_key, client_ref, resource_kind, dispatch_generation, label, region, spec_digest, key_fingerprint,
    claimed_ms, sent_ms, resource_id, resource_id_source, rejection_status, rejection_message,
    observation_count, observation_base, last_observation, abandoned_by, abandoned_reason, seen_ms,
    delete_sent_ms, deleted_ms, not_sent_ms, not_sent_reason, not_sent_count, listed_ms)
SELECT
    operation_key, client_ref, resource_kind, dispatch_generation, label, region, spec_digest, key_fingerprint,
    claimed_ms, sent_ms, resource_id, resource_id_source, rejection_status, rejection_message,
    observation_count, observation_base, last_observation, abandoned_by, abandoned_reason, seen_ms,
    delete_sent_ms, deleted_ms, not_sent_ms, not_sent_reason, not_sent_count, listed_ms
FROM dispatch_receipts;
DROP TABLE dispatch_receipts;
ALTER TABLE dispatch_receipts_rebuilt RENAME TO dispatch_receipts;
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
CREATE TRIGGER dispatch_receipts_evidence_once BEFORE UPDATE ON dispatch_receipts
    WHEN (OLD.seen_ms IS NOT NULL AND NEW.seen_ms IS NOT OLD.seen_ms)
      OR (OLD.delete_sent_ms IS NOT NULL AND NEW.delete_sent_ms IS NOT OLD.delete_sent_ms)
      OR (OLD.sent_ms IS NOT NULL AND NEW.sent_ms IS NOT OLD.sent_ms)
BEGIN
    SELECT RAISE(ABORT, 'recorded evidence never changes');
END;
CREATE TRIGGER dispatch_receipts_listed_once BEFORE UPDATE ON dispatch_receipts
    WHEN OLD.listed_ms IS NOT NULL AND NEW.listed_ms IS NOT OLD.listed_ms
BEGIN
    SELECT RAISE(ABORT, 'recorded evidence never changes');
END;
CREATE TRIGGER dispatch_receipts_no_replace BEFORE INSERT ON dispatch_receipts
    WHEN EXISTS (SELECT 1 FROM dispatch_receipts WHERE operation_key = NEW.operation_key OR label = NEW.label)
BEGIN
    SELECT RAISE(ABORT, 'a receipt is never replaced');
END;
