-- A DNS name belongs to at most one client not yet deleted: two clients
-- given one name each got an A record at it, the name round-robining
-- between two tenants' servers. `dns_key` is the client's effective DNS
-- name (the spec's `dns_name`, else the client's name), kept by the store
-- on every write of the spec; the unique index refuses a second holder
-- atomically, whichever request or process comes second.
ALTER TABLE infra ADD COLUMN dns_key TEXT;

UPDATE infra SET dns_key = (SELECT coalesce(infra.dns_name, c.name) FROM clients c WHERE c.id = infra.client_id);

-- Duplicates made before this check: the oldest client keeps the name; the
-- others keep their records (and their owned ids) but hold no name, so
-- their next change of spec is refused the name another client holds.
UPDATE infra SET dns_key = NULL
WHERE status <> 'deleted' AND EXISTS (
    SELECT 1 FROM infra o
    JOIN clients oc ON oc.id = o.client_id
    JOIN clients me ON me.id = infra.client_id
    WHERE o.client_id <> infra.client_id AND o.status <> 'deleted' AND o.dns_key = infra.dns_key
      AND (oc.created_ms < me.created_ms OR (oc.created_ms = me.created_ms AND oc.id < me.id))
);

CREATE UNIQUE INDEX infra_dns_key_live ON infra (dns_key) WHERE status <> 'deleted';
