-- A receipt is never replaced, whatever the connection (see the SQLite
-- migration: its REPLACE deletes the row in the way without firing the
-- DELETE trigger unless the connection set `recursive_triggers`).
-- PostgreSQL has no REPLACE; `INSERT ... ON CONFLICT DO UPDATE` fires the
-- receipts' BEFORE UPDATE triggers, which already refuse any rewrite, and
-- nothing deletes without firing the DELETE trigger. Nothing to add here:
-- this migration keeps the two schemas at the same version.
SELECT 1;
