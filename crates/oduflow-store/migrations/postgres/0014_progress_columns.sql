-- A run's progress on a client (failed preflight and upgrade reads, the
-- spec generation the identity adapters were updated for, the backup
-- schedule read back and the sets sent, the volume size last read) in
-- typed columns of their own, carried over from the JSON text column
-- `progress` that held them until now.
--
-- An older binary keeps working on this schema (the upgrade restarts the
-- processes after `init`): it reads and writes `progress` alone. So this
-- build writes both, and a trigger sets the columns from `progress`
-- whenever a write sets it: a run or a `client delete` of an older binary
-- is seen by this one, and this one's writes by the older.
ALTER TABLE infra
    ADD COLUMN preflight_read_failures BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN upgrades_read_failures_generation BIGINT,
    ADD COLUMN upgrades_read_failures BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN updated_generation BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN backup_schedule TEXT,
    ADD COLUMN backup_schedule_sets BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN volume_size_id TEXT,
    ADD COLUMN volume_size_gb BIGINT;

CREATE FUNCTION infra_progress_columns() RETURNS trigger AS $$
BEGIN
    NEW.preflight_read_failures := COALESCE((NEW.progress::jsonb ->> 'preflight_read_failures')::BIGINT, 0);
    NEW.upgrades_read_failures_generation := (NEW.progress::jsonb -> 'upgrades_read_failures' ->> 'generation')::BIGINT;
    NEW.upgrades_read_failures := COALESCE((NEW.progress::jsonb -> 'upgrades_read_failures' ->> 'count')::BIGINT, 0);
    NEW.updated_generation := COALESCE((NEW.progress::jsonb ->> 'updated_generation')::BIGINT, 0);
    NEW.backup_schedule := NEW.progress::jsonb ->> 'backup_schedule';
    NEW.backup_schedule_sets := COALESCE((NEW.progress::jsonb ->> 'backup_schedule_sets')::BIGINT, 0);
    NEW.volume_size_id := NEW.progress::jsonb -> 'volume_size' ->> 'id';
    NEW.volume_size_gb := (NEW.progress::jsonb -> 'volume_size' ->> 'gb')::BIGINT;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER infra_progress_columns BEFORE UPDATE OF progress ON infra
    FOR EACH ROW EXECUTE FUNCTION infra_progress_columns();

-- Every row's columns from what it holds now.
UPDATE infra SET progress = progress WHERE progress <> '{}';
