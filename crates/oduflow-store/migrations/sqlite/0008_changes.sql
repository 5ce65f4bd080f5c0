-- Issue 16: changes to a running client (see the PostgreSQL migration).
ALTER TABLE infra ADD COLUMN spec_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN spec_updated_ms INTEGER;

CREATE TABLE change_receipts (
    operation_key      TEXT PRIMARY KEY,
    client_ref         TEXT NOT NULL,
    resource_kind      TEXT NOT NULL CHECK (resource_kind IN ('vm', 'volume')),
    resource_id        TEXT NOT NULL,
    spec_generation    INTEGER NOT NULL,
    change             TEXT NOT NULL,
    key_fingerprint    TEXT NOT NULL,
    claimed_ms         INTEGER NOT NULL,
    sent_ms            INTEGER,
    not_sent_ms        INTEGER,
    not_sent_count     INTEGER NOT NULL DEFAULT 0,
    not_sent_reason    TEXT,
    outcome            TEXT,
    rejection_status   INTEGER,
    rejection_message  TEXT,
    observation_count  INTEGER NOT NULL DEFAULT 0,
    last_observation   TEXT,
    confirmed_ms       INTEGER
);
CREATE INDEX change_receipts_client ON change_receipts (client_ref);

CREATE TRIGGER change_receipts_no_delete BEFORE DELETE ON change_receipts
BEGIN
    SELECT RAISE(ABORT, 'change receipts are never deleted');
END;
CREATE TRIGGER change_receipts_no_identity_rewrite BEFORE UPDATE ON change_receipts
    WHEN NEW.operation_key <> OLD.operation_key OR NEW.client_ref <> OLD.client_ref
      OR NEW.resource_kind <> OLD.resource_kind OR NEW.resource_id <> OLD.resource_id
      OR NEW.spec_generation <> OLD.spec_generation OR NEW.change <> OLD.change
BEGIN
    SELECT RAISE(ABORT, 'a change receipt''s identity never changes');
END;
CREATE TRIGGER change_receipts_no_rejection_rewrite BEFORE UPDATE ON change_receipts
    WHEN OLD.rejection_status IS NOT NULL AND (NEW.rejection_status IS NULL OR NEW.rejection_status <> OLD.rejection_status)
BEGIN
    SELECT RAISE(ABORT, 'a recorded rejection never changes');
END;
CREATE TRIGGER change_receipts_no_send_rewrite BEFORE UPDATE ON change_receipts
    WHEN (OLD.sent_ms IS NOT NULL AND (NEW.sent_ms IS NULL OR NEW.sent_ms <> OLD.sent_ms))
      OR (OLD.confirmed_ms IS NOT NULL AND (NEW.confirmed_ms IS NULL OR NEW.confirmed_ms <> OLD.confirmed_ms))
BEGIN
    SELECT RAISE(ABORT, 'a recorded send or confirmation never changes');
END;
