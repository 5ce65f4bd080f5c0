-- The database's clock (docs/protocol.md §4.1). SQLite has no server whose
-- clock every process can read: its clock is the wall clock read once per
-- boot of the host, by the first process that asks (never behind the newest
-- time recorded in the file), advanced by the host's boot-time clock, which
-- no wall-clock step moves. One row: that reading. PostgreSQL reads
-- clock_timestamp() and leaves the table empty (it exists on both stores so
-- that the schemas stay alike).
CREATE TABLE IF NOT EXISTS clock_anchor (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    boot_id    TEXT    NOT NULL,
    wall_ms    BIGINT  NOT NULL,
    uptime_ms  BIGINT  NOT NULL
);
