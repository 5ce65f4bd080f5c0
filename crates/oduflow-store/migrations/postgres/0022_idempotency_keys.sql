-- Idempotency keys of the HTTP API: per token (its id: a name may be given
-- again after a revocation), the request a key was first
-- used with (a digest of its method, path and body) and the answer it got,
-- so a retried request after a lost answer gets that answer again instead
-- of acting twice. No answer yet: the first request is still running.
CREATE TABLE idempotency_keys (
    token_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    request_sha256 TEXT NOT NULL,
    status BIGINT,
    response TEXT,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (token_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_ms);
