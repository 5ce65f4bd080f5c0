-- What each API token may do: read (every GET), operate (create, update,
-- delete, reconcile, import, promote) or admin (attested actions,
-- orphans, the queue, the inventory, key rotation). Tokens made before
-- scopes existed could do everything, and keep that.
ALTER TABLE api_tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'admin'
    CHECK (scope IN ('read', 'operate', 'admin'));
