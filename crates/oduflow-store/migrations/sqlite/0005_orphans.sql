-- Issue 12, hole 8: orphans have somewhere to go. What the last inventory
-- pass (`reconcile --all`) found under our label prefix that no receipt
-- accounts for, so the API and the dashboard can list it without asking the
-- provider, and the commands that resolve it can record how.
CREATE TABLE orphans (
    resource_id   TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    label         TEXT NOT NULL,
    -- The client the label names (labels since 0.2 name client and kind),
    -- or the receipt's client; NULL when nothing names one.
    client_ref    TEXT,
    note          TEXT NOT NULL,
    found_ms      INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL,
    -- How it stopped being an orphan: adopted, deleted on an attestation,
    -- or no longer listed by the provider.
    resolved_ms   INTEGER,
    resolution    TEXT
);
CREATE INDEX orphans_open ON orphans (resolved_ms, found_ms);
