//! `Idempotency-Key` on every changing route: a request retried after its
//! answer was lost, with the same key, the same method, path and body,
//! gets the first answer again (`Idempotency-Replayed: true`) and changes
//! nothing more; the same key with another request is refused (422
//! `idempotency_key_reused`); while the first runs, 409
//! `idempotency_key_in_progress` with `Retry-After`. Keys are the token's
//! own (its id), kept a day. The first request runs to its end even when
//! its caller hangs up (the lost answer a retry asks for). An answer that
//! decided nothing lasting is not kept, so the retry runs: a 5xx, and the
//! 4xx that say "not now" or "not read" (408, 409, 415, 429).

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oduflow_store::IdempotencyBegin;
use sha2::{Digest, Sha256};

/// The header.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// Longest key.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;
/// How long a key is kept.
pub const IDEMPOTENCY_KEEP_MS: i64 = 24 * 3600 * 1000;
/// How long a first request may run before a retry with its key runs
/// instead (its process died).
pub const IDEMPOTENCY_RUNNING_MAX_MS: i64 = 120_000;
/// The largest answer kept for a replay.
const RESPONSE_BYTES_MAX: usize = 1024 * 1024;

/// The key of a request, checked; none without the header.
fn key_of(req: &Request) -> Result<Option<String>, ApiError> {
    let Some(v) = req.headers().get(IDEMPOTENCY_HEADER) else { return Ok(None) };
    let k = v.to_str().unwrap_or_default();
    if k.is_empty() || k.len() > IDEMPOTENCY_KEY_LEN_MAX || !k.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::InvalidInput(format!(
            "Idempotency-Key: 1 to {IDEMPOTENCY_KEY_LEN_MAX} visible ASCII characters, no spaces"
        )));
    }
    Ok(Some(k.to_owned()))
}

pub(crate) async fn idempotency(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return next.run(req).await;
    }
    match keyed(&s, req, next).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn keyed(s: &AppState, req: Request, next: Next) -> Result<Response, ApiError> {
    let Some(key) = key_of(&req)? else { return Ok(next.run(req).await) };
    let token = req.extensions().get::<Caller>().map(|c| c.token_id.0.clone()).ok_or(ApiError::Unauthorized)?;
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, crate::BODY_BYTES_MAX)
        .await
        .map_err(|_| ApiError::PayloadTooLarge(crate::BODY_BYTES_MAX))?;
    let target = parts.uri.path_and_query().map_or("", |p| p.as_str());
    let mut h = Sha256::new();
    h.update(format!("{} {target}\n", parts.method).as_bytes());
    h.update(&body);
    let digest = format!("{:x}", h.finalize());
    let store = s.store();
    let begun = store
        .idempotency_begin(&token, &key, &digest, IDEMPOTENCY_KEEP_MS, IDEMPOTENCY_RUNNING_MAX_MS, s.now_ms())
        .await?;
    match begun {
        IdempotencyBegin::Run => {}
        IdempotencyBegin::Replay { status, response } => {
            let status = axum::http::StatusCode::from_u16(u16::try_from(status).unwrap_or(500))
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
            let mut r = (status, response).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r.headers_mut().insert("idempotency-replayed", HeaderValue::from_static("true"));
            return Ok(r);
        }
        IdempotencyBegin::Reused => {
            return Err(ApiError::IdempotencyKeyReused(format!(
                "Idempotency-Key {key:?} was first used with another request (method, path or body); \
                 use a new key for a new request"
            )));
        }
        IdempotencyBegin::Running => {
            return Err(ApiError::IdempotencyInProgress(format!(
                "the first request with Idempotency-Key {key:?} is still running; ask again shortly"
            )));
        }
    }
    // In a task of its own: a caller that hangs up (the answer it will ask
    // for again) does not cut the request short or leave the key running.
    let store = store.clone();
    let run = tokio::spawn(async move {
        let resp = next.run(Request::from_parts(parts, Body::from(body))).await;
        let (parts, body) = resp.into_parts();
        let body = axum::body::to_bytes(body, RESPONSE_BYTES_MAX).await.unwrap_or_default();
        let keep = kept(parts.status).then(|| (i64::from(parts.status.as_u16()), String::from_utf8_lossy(&body)));
        let finished = store.idempotency_finish(&token, &key, keep.as_ref().map(|(st, b)| (*st, b.as_ref()))).await;
        (Response::from_parts(parts, Body::from(body)), finished)
    });
    let (resp, finished) = run.await.map_err(|_| ApiError::Refused("the request's task ended".into()))?;
    finished?;
    Ok(resp)
}

/// Whether an answer is kept for replays: what decided something.
fn kept(status: axum::http::StatusCode) -> bool {
    !status.is_server_error() && !matches!(status.as_u16(), 408 | 409 | 415 | 429)
}
