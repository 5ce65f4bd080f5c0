-- A receipt is never replaced, whatever the connection. `INSERT OR REPLACE`
-- and `REPLACE INTO` delete the row in the way (same key, or same label)
-- without firing its DELETE trigger unless that connection set
-- `recursive_triggers`, which the store's own connections do and the sqlite3
-- shell or a maintenance script need not: a receipt could be re-pointed at
-- another resource or removed. A BEFORE INSERT trigger fires before that
-- implicit delete, on every connection. The receipt writer's own claims
-- (`INSERT ... ON CONFLICT DO NOTHING`) meet it too and read its refusal as
-- "the receipt exists", as they read the conflict before.
CREATE TRIGGER dispatch_receipts_no_replace BEFORE INSERT ON dispatch_receipts
    WHEN EXISTS (SELECT 1 FROM dispatch_receipts WHERE operation_key = NEW.operation_key OR label = NEW.label)
BEGIN
    SELECT RAISE(ABORT, 'a receipt is never replaced');
END;
CREATE TRIGGER change_receipts_no_replace BEFORE INSERT ON change_receipts
    WHEN EXISTS (SELECT 1 FROM change_receipts WHERE operation_key = NEW.operation_key)
BEGIN
    SELECT RAISE(ABORT, 'a receipt is never replaced');
END;
