-- Issue 12: a create provably never sent, unfinished runs, evidence written once.

-- A create or attach whose connection was never established (DNS failure,
-- connection refused, TLS handshake failed): provably never sent, so it may
-- be sent again on this same receipt. Cleared before every send.
ALTER TABLE dispatch_receipts ADD COLUMN not_sent_ms INTEGER;
ALTER TABLE dispatch_receipts ADD COLUMN not_sent_reason TEXT;
ALTER TABLE dispatch_receipts ADD COLUMN not_sent_count INTEGER NOT NULL DEFAULT 0;

-- Evidence is written once: when the resource was first seen, when a DELETE
-- was first sent, when the first request left.
CREATE TRIGGER dispatch_receipts_evidence_once BEFORE UPDATE ON dispatch_receipts
    WHEN (OLD.seen_ms IS NOT NULL AND NEW.seen_ms IS NOT OLD.seen_ms)
      OR (OLD.delete_sent_ms IS NOT NULL AND NEW.delete_sent_ms IS NOT OLD.delete_sent_ms)
      OR (OLD.sent_ms IS NOT NULL AND NEW.sent_ms IS NOT OLD.sent_ms)
BEGIN
    SELECT RAISE(ABORT, 'recorded evidence never changes');
END;

-- Runs of a job that started and have not finished (committed or recorded
-- as failed). Written on a connection of its own when a run starts, so a run
-- killed outright still counts: a job that kills its worker every time ends
-- blocked attempts_exhausted instead of retrying for ever.
CREATE TABLE job_starts (
    job_id      INTEGER PRIMARY KEY,
    unfinished  INTEGER NOT NULL
);
