-- When an inventory pass after a restore found a change receipt (open or
-- confirmed): a resize the provider shows since may be one the discarded
-- timeline sent, never this change's. Written once.
ALTER TABLE change_receipts ADD COLUMN restored_ms INTEGER;

CREATE TRIGGER change_receipts_no_restored_rewrite BEFORE UPDATE ON change_receipts
    WHEN OLD.restored_ms IS NOT NULL AND (NEW.restored_ms IS NULL OR NEW.restored_ms <> OLD.restored_ms)
BEGIN
    SELECT RAISE(ABORT, 'a recorded restore never changes');
END;
