-- A run's progress on a client (failed preflight and upgrade reads, the
-- spec generation the identity adapters were updated for, the backup
-- schedule read back and the sets sent, the volume size last read) in
-- typed columns of their own. The JSON text column `progress` held them
-- until now: what it holds is carried over, then it is emptied; it stays
-- (columns are never renamed or dropped) and nothing writes it any more.
ALTER TABLE infra ADD COLUMN preflight_read_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN upgrades_read_failures_generation INTEGER;
ALTER TABLE infra ADD COLUMN upgrades_read_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN updated_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN backup_schedule TEXT;
ALTER TABLE infra ADD COLUMN backup_schedule_sets INTEGER NOT NULL DEFAULT 0;
ALTER TABLE infra ADD COLUMN volume_size_id TEXT;
ALTER TABLE infra ADD COLUMN volume_size_gb INTEGER;

UPDATE infra SET
    preflight_read_failures = COALESCE(json_extract(progress, '$.preflight_read_failures'), 0),
    upgrades_read_failures_generation = json_extract(progress, '$.upgrades_read_failures.generation'),
    upgrades_read_failures = COALESCE(json_extract(progress, '$.upgrades_read_failures.count'), 0),
    updated_generation = COALESCE(json_extract(progress, '$.updated_generation'), 0),
    backup_schedule = json_extract(progress, '$.backup_schedule'),
    backup_schedule_sets = COALESCE(json_extract(progress, '$.backup_schedule_sets'), 0),
    volume_size_id = json_extract(progress, '$.volume_size.id'),
    volume_size_gb = json_extract(progress, '$.volume_size.gb'),
    progress = '{}'
WHERE progress <> '{}';
