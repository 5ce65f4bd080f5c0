-- Issue 17: what an identity adapter owns, and the facts it was ensured with.
--
-- `owned`: the adapter's own ownership record (JSON): for DNS, each record it
-- created or adopted, by id, and a create it claimed whose answer was lost.
-- Written before anything depends on it, on the receipt writer's connection,
-- and only by compare-and-set on `owned_version`, so a stale run cannot
-- overwrite what a newer one recorded.
-- `facts`: the client's facts (addresses, hostname, DNS name, plan) the
-- identity was last ensured with: a removal gets these, not the VM's (which
-- is gone by then), and an ensured identity whose facts changed is ensured
-- again.
ALTER TABLE adapter_state ADD COLUMN owned TEXT NOT NULL DEFAULT '{}';
ALTER TABLE adapter_state ADD COLUMN owned_version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE adapter_state ADD COLUMN facts TEXT NOT NULL DEFAULT '{}';

-- The client's DNS record name when it is not the client's name.
ALTER TABLE infra ADD COLUMN dns_name TEXT;
