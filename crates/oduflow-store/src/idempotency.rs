//! Idempotency keys of the HTTP API: a request retried with the key of one
//! whose answer was lost gets that answer again, and acts once.

use crate::{Result, Store, both};

/// What a request carrying a key may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdempotencyBegin {
    /// The key is new (or its first request never finished and was given
    /// up): run the request, then record its answer.
    Run,
    /// The key's first request, the same as this one, was answered so.
    Replay { status: i64, response: String },
    /// The key was first used with another request.
    Reused,
    /// The key's first request is still running.
    Running,
}

impl Store {
    /// Claims `key` of `token` for the request with this digest. A key is
    /// kept `keep_ms`; a first request that has not answered within
    /// `running_max_ms` (its process died) is given up.
    pub async fn idempotency_begin(
        &self,
        token: &str,
        key: &str,
        request_sha256: &str,
        keep_ms: i64,
        running_max_ms: i64,
        now_ms: i64,
    ) -> Result<IdempotencyBegin> {
        crate::named("idempotency_begin", async move {
            both!(self, p => {
                let mut tx = crate::BeginWrite::begin_write(p).await?;
                sqlx::query("DELETE FROM idempotency_keys WHERE created_ms < $1")
                    .bind(now_ms - keep_ms).execute(&mut *tx).await?;
                let row: Option<(String, Option<i64>, Option<String>, i64)> = sqlx::query_as(
                    "SELECT request_sha256, status, response, created_ms FROM idempotency_keys \
                     WHERE token_id = $1 AND idem_key = $2")
                    .bind(token).bind(key).fetch_optional(&mut *tx).await?;
                let begin = match row {
                    Some((sha, ..)) if sha != request_sha256 => IdempotencyBegin::Reused,
                    Some((_, Some(status), response, _)) => {
                        IdempotencyBegin::Replay { status, response: response.unwrap_or_default() }
                    }
                    Some((_, None, _, created)) if created > now_ms - running_max_ms => IdempotencyBegin::Running,
                    Some((_, _, _, created)) => {
                        // Taken over only by the one retry that moves its
                        // stamp (PostgreSQL: another may have read it too).
                        let n = sqlx::query(
                            "UPDATE idempotency_keys SET created_ms = $3 WHERE token_id = $1 AND idem_key = $2 \
                             AND status IS NULL AND created_ms = $4")
                            .bind(token).bind(key).bind(now_ms).bind(created).execute(&mut *tx).await?.rows_affected();
                        if n == 1 { IdempotencyBegin::Run } else { IdempotencyBegin::Running }
                    }
                    None => {
                        let n = sqlx::query(
                            "INSERT INTO idempotency_keys (token_id, idem_key, request_sha256, created_ms) \
                             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
                            .bind(token).bind(key).bind(request_sha256).bind(now_ms)
                            .execute(&mut *tx).await?.rows_affected();
                        if n == 1 { IdempotencyBegin::Run } else { IdempotencyBegin::Running }
                    }
                };
                tx.commit().await?;
                Ok(begin)
            })
        })
        .await
    }

    /// Records the answer of the key's first request; with none, gives the
    /// key up (an answer that says nothing was decided: the retry runs).
    pub async fn idempotency_finish(&self, token: &str, key: &str, answer: Option<(i64, &str)>) -> Result<()> {
        crate::named("idempotency_finish", async move {
            both!(self, p => {
                match answer {
                    Some((status, response)) => sqlx::query(
                        "UPDATE idempotency_keys SET status = $3, response = $4 \
                         WHERE token_id = $1 AND idem_key = $2 AND status IS NULL")
                        .bind(token).bind(key).bind(status).bind(response).execute(p).await?,
                    None => sqlx::query(
                        "DELETE FROM idempotency_keys WHERE token_id = $1 AND idem_key = $2 AND status IS NULL")
                        .bind(token).bind(key).execute(p).await?,
                };
            });
            Ok(())
        })
        .await
    }
}
