-- When an inventory pass after a restore found a change receipt (open or
-- confirmed): a resize the provider shows since may be one the discarded
-- timeline sent, never this change's. Written once.
ALTER TABLE change_receipts ADD COLUMN restored_ms BIGINT;

CREATE FUNCTION change_receipts_restored_guard() RETURNS trigger AS $$
BEGIN
    IF OLD.restored_ms IS NOT NULL AND NEW.restored_ms IS DISTINCT FROM OLD.restored_ms THEN
        RAISE EXCEPTION 'a recorded restore never changes';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER change_receipts_no_restored_rewrite BEFORE UPDATE ON change_receipts
    FOR EACH ROW EXECUTE FUNCTION change_receipts_restored_guard();
