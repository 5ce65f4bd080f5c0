-- Issue 13: one rate budget per group of processes that reach Vultr through
-- one source address. One row per group: the next free send slot and the end
-- of the current pause (a Retry-After seen by any process), both in
-- microseconds since the Unix epoch on the clock that reserves (PostgreSQL's
-- on PostgreSQL, the host's on SQLite). A reservation is one statement;
-- nothing is held after it.
CREATE TABLE rate_budget (
    grp              TEXT PRIMARY KEY,
    next_us          BIGINT NOT NULL,
    paused_until_us  BIGINT NOT NULL,
    -- The clock at the last reservation, so the statement can return the wait.
    last_us          BIGINT NOT NULL,
    reservations     BIGINT NOT NULL,
    pauses           BIGINT NOT NULL
);
-- Waits for a slot, per process and group, flushed every few seconds, for
-- /metrics.
CREATE TABLE rate_budget_usage (
    grp         TEXT NOT NULL,
    process     TEXT NOT NULL,
    waits       BIGINT NOT NULL,
    wait_us     BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL,
    PRIMARY KEY (grp, process)
);
