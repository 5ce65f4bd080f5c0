-- Issue 19: when a listing (the bulk view) first showed a receipt's resource
-- by its id. Not `seen_ms`: only a GET by id establishes that (deletion
-- bookkeeping: a listing may show a new resource while GET by id and DELETE
-- still answer 404). But a resource a listing showed exists: its dispatch has
-- a known outcome and can no longer be abandoned.
ALTER TABLE dispatch_receipts ADD COLUMN listed_ms INTEGER;

-- Evidence is written once, as `seen_ms` is.
CREATE TRIGGER dispatch_receipts_listed_once BEFORE UPDATE ON dispatch_receipts
    WHEN OLD.listed_ms IS NOT NULL AND NEW.listed_ms IS NOT OLD.listed_ms
BEGIN
    SELECT RAISE(ABORT, 'recorded evidence never changes');
END;
