-- The event feed: each event's position in the order events became
-- visible (SQLite commits in id order; PostgreSQL need not, hence a
-- position stamped after the commit, by one stamping pass at a time, on
-- both stores alike). The events before this migration keep their ids as
-- positions.
ALTER TABLE events ADD COLUMN position INTEGER;
UPDATE events SET position = id;
CREATE UNIQUE INDEX events_position ON events (position);
CREATE INDEX events_unstamped ON events (id) WHERE position IS NULL;
CREATE TRIGGER events_position_once BEFORE UPDATE ON events
    WHEN OLD.position IS NOT NULL AND NEW.position IS NOT OLD.position
BEGIN
    SELECT RAISE(ABORT, 'a feed position never changes');
END;
