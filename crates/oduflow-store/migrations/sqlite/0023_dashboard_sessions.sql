-- The dashboard's sign-in sessions: the cookie holds a random session id,
-- never the API token; only the id's SHA-256 is stored. A session ends at
-- its expiry, at sign-out, or when its token is revoked.
CREATE TABLE dashboard_sessions (
    id_sha256 TEXT PRIMARY KEY,
    token_id TEXT NOT NULL REFERENCES api_tokens (id),
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    revoked_ms INTEGER
);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_ms);
