-- Bearer tokens for `oduflow serve`. Only the SHA-256 of a token is stored:
-- a copy of the database (a backup, a dump) grants no access. Tokens are
-- revoked, never deleted, so the audit trail can always name them.

CREATE TABLE api_tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_ms  BIGINT NOT NULL,
    revoked_ms  BIGINT
);
-- One live token per name, so `token revoke NAME` names exactly one token.
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_ms IS NULL;
