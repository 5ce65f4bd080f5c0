-- Issue 16: changes to a running client. `spec_generation` is the
-- generation of the last `client update` (0: never updated), so a drift seen
-- afterwards is a change to make, not one made behind oduflow's back.
ALTER TABLE infra ADD COLUMN spec_generation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN spec_updated_ms BIGINT;

-- One receipt per (client, resource, spec generation): claimed and committed
-- before its PATCH is sent, which is sent at most once per receipt (again
-- only while provably never sent). Only a read confirms it. Like dispatch
-- receipts: no foreign key, no secrets, never deleted.
CREATE TABLE change_receipts (
    operation_key      TEXT PRIMARY KEY,
    client_ref         TEXT NOT NULL,
    resource_kind      TEXT NOT NULL CHECK (resource_kind IN ('vm', 'volume')),
    resource_id        TEXT NOT NULL,
    spec_generation    BIGINT NOT NULL,
    -- The change sent, as JSON ({"plan": ...} or {"size_gb": ...}).
    change             TEXT NOT NULL,
    key_fingerprint    TEXT NOT NULL,
    claimed_ms         BIGINT NOT NULL,
    sent_ms            BIGINT,
    not_sent_ms        BIGINT,
    not_sent_count     BIGINT NOT NULL DEFAULT 0,
    not_sent_reason    TEXT,
    -- What the PATCH was answered: accepted, unknown (and why), or a
    -- rejection.
    outcome            TEXT,
    rejection_status   BIGINT,
    rejection_message  TEXT,
    observation_count  BIGINT NOT NULL DEFAULT 0,
    last_observation   TEXT,
    confirmed_ms       BIGINT
);
CREATE INDEX change_receipts_client ON change_receipts (client_ref);

CREATE FUNCTION change_receipts_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'change receipts are never deleted';
    END IF;
    IF NEW.operation_key <> OLD.operation_key OR NEW.client_ref <> OLD.client_ref
       OR NEW.resource_kind <> OLD.resource_kind OR NEW.resource_id <> OLD.resource_id
       OR NEW.spec_generation <> OLD.spec_generation OR NEW.change <> OLD.change THEN
        RAISE EXCEPTION 'a change receipt''s identity never changes';
    END IF;
    IF OLD.rejection_status IS NOT NULL AND NEW.rejection_status IS DISTINCT FROM OLD.rejection_status THEN
        RAISE EXCEPTION 'a recorded rejection never changes';
    END IF;
    IF (OLD.sent_ms IS NOT NULL AND NEW.sent_ms IS DISTINCT FROM OLD.sent_ms)
       OR (OLD.confirmed_ms IS NOT NULL AND NEW.confirmed_ms IS DISTINCT FROM OLD.confirmed_ms) THEN
        RAISE EXCEPTION 'a recorded send or confirmation never changes';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER change_receipts_no_delete BEFORE DELETE ON change_receipts
    FOR EACH ROW EXECUTE FUNCTION change_receipts_guard();
CREATE TRIGGER change_receipts_no_rewrite BEFORE UPDATE ON change_receipts
    FOR EACH ROW EXECUTE FUNCTION change_receipts_guard();
CREATE TRIGGER change_receipts_no_truncate BEFORE TRUNCATE ON change_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION dispatch_receipts_no_truncate();
