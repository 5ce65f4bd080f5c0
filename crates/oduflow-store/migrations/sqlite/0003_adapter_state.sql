-- Per client, per identity adapter (DNS, VPN, Salt, ...): where its identity
-- stands. Written on the receipt writer's connection, so what an adapter did
-- survives the job rolling back or the worker dying.
CREATE TABLE adapter_state (
    client_id   TEXT NOT NULL,
    adapter     TEXT NOT NULL,
    -- ensured | removing | removed
    state       TEXT NOT NULL,
    detail      TEXT NOT NULL DEFAULT '',
    failures    BIGINT NOT NULL DEFAULT 0,
    updated_ms  BIGINT NOT NULL,
    PRIMARY KEY (client_id, adapter)
);
