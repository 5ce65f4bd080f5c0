-- A run's progress on a client (failed preflight and upgrade reads, the
-- spec generation the identity adapters were updated for, the backup
-- schedule read back and the sets sent, the volume size last read) in
-- typed columns of their own. The JSON text column `progress` held them
-- until now: what it holds is carried over, then it is emptied; it stays
-- (columns are never renamed or dropped) and nothing writes it any more.
ALTER TABLE infra
    ADD COLUMN preflight_read_failures BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN upgrades_read_failures_generation BIGINT,
    ADD COLUMN upgrades_read_failures BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN updated_generation BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN backup_schedule TEXT,
    ADD COLUMN backup_schedule_sets BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN volume_size_id TEXT,
    ADD COLUMN volume_size_gb BIGINT;

UPDATE infra SET
    preflight_read_failures = COALESCE((progress::jsonb ->> 'preflight_read_failures')::BIGINT, 0),
    upgrades_read_failures_generation = (progress::jsonb -> 'upgrades_read_failures' ->> 'generation')::BIGINT,
    upgrades_read_failures = COALESCE((progress::jsonb -> 'upgrades_read_failures' ->> 'count')::BIGINT, 0),
    updated_generation = COALESCE((progress::jsonb ->> 'updated_generation')::BIGINT, 0),
    backup_schedule = progress::jsonb ->> 'backup_schedule',
    backup_schedule_sets = COALESCE((progress::jsonb ->> 'backup_schedule_sets')::BIGINT, 0),
    volume_size_id = progress::jsonb -> 'volume_size' ->> 'id',
    volume_size_gb = (progress::jsonb -> 'volume_size' ->> 'gb')::BIGINT,
    progress = '{}'
WHERE progress <> '{}';
