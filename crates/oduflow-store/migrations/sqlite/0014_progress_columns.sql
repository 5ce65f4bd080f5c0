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
ALTER TABLE infra ADD COLUMN preflight_read_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN upgrades_read_failures_generation INTEGER;
ALTER TABLE infra ADD COLUMN upgrades_read_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN updated_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN backup_schedule TEXT;
ALTER TABLE infra ADD COLUMN backup_schedule_sets INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN volume_size_id TEXT;
ALTER TABLE infra ADD COLUMN volume_size_gb INTEGER;

CREATE TRIGGER infra_progress_columns AFTER UPDATE OF progress ON infra
BEGIN
    UPDATE infra SET
        preflight_read_failures = COALESCE(json_extract(NEW.progress, '$.preflight_read_failures'), 0),
        upgrades_read_failures_generation = json_extract(NEW.progress, '$.upgrades_read_failures.generation'),
        upgrades_read_failures = COALESCE(json_extract(NEW.progress, '$.upgrades_read_failures.count'), 0),
        updated_generation = COALESCE(json_extract(NEW.progress, '$.updated_generation'), 0),
        backup_schedule = json_extract(NEW.progress, '$.backup_schedule'),
        backup_schedule_sets = COALESCE(json_extract(NEW.progress, '$.backup_schedule_sets'), 0),
        volume_size_id = json_extract(NEW.progress, '$.volume_size.id'),
        volume_size_gb = json_extract(NEW.progress, '$.volume_size.gb')
    WHERE client_id = NEW.client_id;
END;

-- Every row's columns from what it holds now.
UPDATE infra SET progress = progress WHERE progress <> '{}';
