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
    -- The last slot handed out and the clock when it was, so the statement
    -- can return both the slot and the wait.
    last_slot_us     BIGINT NOT NULL,
    last_us          BIGINT NOT NULL,
    -- The spacing the last reservation asked for: the next one is spaced by
    -- the larger of its own and this, so a process set to a higher rate
    -- cannot speed up a group whose other processes ask for less.
    interval_us      BIGINT NOT NULL,
    reservations     BIGINT NOT NULL,
    pauses           BIGINT NOT NULL,
    -- Slot waits of every process of the group, as flushed (never pruned, so
    -- the group's counters only grow).
    waits            BIGINT NOT NULL,
    wait_us          BIGINT NOT NULL
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
