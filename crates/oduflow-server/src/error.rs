//! The one API error type and the only place where an error becomes an HTTP
//! status. Every error answer is `{"error": {"code", "message"}}`: `code` is
//! stable (clients branch on it), `message` is for people. Internal detail
//! (database or provider errors) goes to the log, never to the caller.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oduflow_engine::operator::OperatorError;
use oduflow_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request could not be read: malformed JSON, query or path.
    #[error("{0}")]
    BadRequest(String),
    /// The request was read but its content is not acceptable: wrong types,
    /// unknown or missing fields, a name or spec outside the rules.
    #[error("{0}")]
    InvalidInput(String),
    #[error("the request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("a valid bearer token is required (Authorization: Bearer TOKEN)")]
    Unauthorized,
    /// An `Idempotency-Key` first used with another request.
    #[error("{0}")]
    IdempotencyKeyReused(String),
    /// The first request with this `Idempotency-Key` is still running.
    #[error("{0}")]
    IdempotencyInProgress(String),
    /// The token is valid but its scope is below the route's.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// The request clashes with what exists (a client name in use).
    #[error("{0}")]
    Conflict(String),
    /// The protocol does not allow this action now; the message says why.
    #[error("{0}")]
    Refused(String),
    /// This server was started without a Vultr API key: it serves reads
    /// only.
    #[error(
        "this oduflow serve was started without a Vultr API key and serves reads only (dashboard, GET routes, \
         /metrics); set VULTR_API_KEY and restart it to act, or use the oduflow command where the key is"
    )]
    ReadOnly,
    /// The client's records are bound to another API key than the one this
    /// server acts with (a rotation made elsewhere, or a server started
    /// with an older or newer key); the message says both fingerprints and
    /// how to give this server the right key.
    #[error("{0}")]
    KeyMismatch(String),
    /// The database failed; the cause is logged, not shown.
    #[error("the database is unavailable; try again")]
    Store(#[source] StoreError),
    /// `/health`: the database did not answer one query within
    /// `HEALTH_DB_WAIT` (no cause) or failed it; the cause is logged.
    #[error("the database is down: it did not answer one query within 2 s")]
    DatabaseDown(#[source] Option<StoreError>),
    /// The provider failed during an operator action; the cause is logged.
    #[error("the provider could not be reached or answered an error; try again")]
    Provider(#[source] oduflow_model::provider::ProviderError),
}

/// The JSON error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code: bad_request, invalid_input,
    /// unsupported_media_type, payload_too_large, unauthorized, forbidden,
    /// idempotency_key_reused, idempotency_key_in_progress, not_found,
    /// method_not_allowed, conflict, refused, read_only, key_mismatch,
    /// unavailable, database_down, provider_error.
    pub code: String,
    /// Human-readable explanation; never internal detail.
    pub message: String,
}

impl ApiError {
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::InvalidInput(_) => "invalid_input",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::IdempotencyKeyReused(_) => "idempotency_key_reused",
            ApiError::IdempotencyInProgress(_) => "idempotency_key_in_progress",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::Refused(_) => "refused",
            ApiError::ReadOnly => "read_only",
            ApiError::KeyMismatch(_) => "key_mismatch",
            ApiError::Store(_) => "unavailable",
            ApiError::DatabaseDown(_) => "database_down",
            ApiError::Provider(_) => "provider_error",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::InvalidInput(_) | ApiError::IdempotencyKeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_)
            | ApiError::Refused(_)
            | ApiError::ReadOnly
            | ApiError::KeyMismatch(_)
            | ApiError::IdempotencyInProgress(_) => StatusCode::CONFLICT,
            // Not the caller's fault and worth retrying.
            ApiError::Store(_) | ApiError::DatabaseDown(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Provider(_) => StatusCode::BAD_GATEWAY,
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody { error: ErrorDetail { code: self.code().to_owned(), message: self.to_string() } }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::ClientExists(n) => ApiError::Conflict(format!("a client named {n} already exists")),
            StoreError::ClientNotFound(n) => ApiError::NotFound(format!("no client named {n}")),
            e @ (StoreError::ClientAbsent(_)
            | StoreError::ClientStillDeleting(_)
            | StoreError::ClientMoved(_)
            | StoreError::DnsNameTaken { .. }
            | StoreError::FeedCursorAhead { .. }) => ApiError::Conflict(e.to_string()),
            // What Vultr cannot do in place: the content is the problem.
            StoreError::UpdateRefused(r) => ApiError::InvalidInput(r.to_string()),
            e => ApiError::Store(e),
        }
    }
}

impl From<OperatorError> for ApiError {
    fn from(e: OperatorError) -> Self {
        match e {
            OperatorError::Store(e) => e.into(),
            OperatorError::Provider(e) => ApiError::Provider(e),
            OperatorError::Refused(m) => ApiError::Refused(m),
            OperatorError::Invalid(m) => ApiError::InvalidInput(m),
            // The command line's advice ("rotate first") is wrong for a
            // server whose key predates a rotation made elsewhere.
            OperatorError::KeyMismatch { client, bound, configured } => ApiError::KeyMismatch(format!(
                "{client} is bound to API key {bound} but this server acts with key {configured}: if the key was \
                 rotated elsewhere (`oduflow credentials rotate`), give this server the new key (POST \
                 /api/v1/credentials/rotate with it, or set VULTR_API_KEY in its environment file and restart it); if \
                 this server has the new key, rotate with it (POST /api/v1/credentials/rotate)"
            )),
        }
    }
}

impl From<oduflow_model::SpecError> for ApiError {
    fn from(e: oduflow_model::SpecError) -> Self {
        ApiError::InvalidInput(e.to_string())
    }
}

/// The whole source chain, for the log.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(code = self.code(), error = %chain(&self), "request failed");
        }
        let mut resp = (status, axum::Json(self.body())).into_response();
        if matches!(self, ApiError::Unauthorized) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if matches!(self, ApiError::IdempotencyInProgress(_)) {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
