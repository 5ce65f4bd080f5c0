-- When an inventory pass after a restore found a change receipt already
-- confirmed: the copy's change was made, but a resize the provider shows
-- since may be one the discarded timeline sent, never this change's.
ALTER TABLE change_receipts ADD COLUMN restored_ms INTEGER;
