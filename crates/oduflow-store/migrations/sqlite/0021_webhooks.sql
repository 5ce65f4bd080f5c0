-- Webhooks: each endpoint reads the event feed from its own cursor (the
-- feed is the outbox: every event is written in the transaction of the
-- change it records) and is delivered to by one process at a time (a
-- lease on the database's clock). The signing secret is not stored: it is
-- derived from ODUFLOW_WEBHOOK_KEY and the endpoint's id.
CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    -- The event kinds delivered, as a JSON array; empty: every kind.
    kinds TEXT NOT NULL,
    -- The last feed position delivered, dead-lettered or skipped.
    cursor INTEGER NOT NULL,
    -- Failed attempts at the event after the cursor, and when to try again.
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    delivered INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until_ms INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    removed_ms INTEGER
);
CREATE UNIQUE INDEX webhook_endpoints_live_name ON webhook_endpoints (name) WHERE removed_ms IS NULL;
-- Events an endpoint refused or could not take within its attempts; kept
-- until replayed and delivered.
CREATE TABLE webhook_dead_letters (
    endpoint_id TEXT NOT NULL REFERENCES webhook_endpoints (id),
    position INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT NOT NULL,
    dead_ms INTEGER NOT NULL,
    replay_ms INTEGER,
    delivered_ms INTEGER,
    PRIMARY KEY (endpoint_id, position)
);
