-- A client imported from servers made outside oduflow is observed only
-- (1) until an operator promotes it (0): tracked and reported, never sent
-- a request that changes anything.
ALTER TABLE infra ADD COLUMN observe_only INTEGER NOT NULL DEFAULT 0;
