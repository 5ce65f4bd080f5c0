-- The event feed: each event's position in the order events became
-- visible. An id is drawn when an insert begins, so a transaction that
-- commits later may hold a lower id than one a reader has already seen;
-- a position is stamped after the commit, by one stamping pass at a time,
-- so a reader that has seen position N never finds a later event below it.
-- The events before this migration keep their ids as positions.
ALTER TABLE events ADD COLUMN position BIGINT;
UPDATE events SET position = id;
CREATE UNIQUE INDEX events_position ON events (position);
CREATE INDEX events_unstamped ON events (id) WHERE position IS NULL;

CREATE FUNCTION events_position_once() RETURNS trigger AS $$
BEGIN
    IF OLD.position IS NOT NULL AND NEW.position IS DISTINCT FROM OLD.position THEN
        RAISE EXCEPTION 'a feed position never changes';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER events_position_once BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_position_once();
