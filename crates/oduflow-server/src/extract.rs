//! Extractors whose rejections are [`ApiError`]s, so that no request can be
//! answered with axum's plain-text bodies.

use crate::error::ApiError;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use oduflow_model::ClientName;
use serde::de::DeserializeOwned;

/// A JSON body; its type should carry `#[serde(deny_unknown_fields)]`.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(r) => Err(json_rejection(r)),
        }
    }
}

fn json_rejection(r: JsonRejection) -> ApiError {
    match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(crate::BODY_BYTES_MAX),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType,
        // Well-formed JSON of the wrong shape: wrong types, unknown or
        // missing fields. serde's message names the field, not our internals.
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::InvalidInput(r.body_text()),
        _ => ApiError::BadRequest(r.body_text()),
    }
}

/// Query parameters.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(r @ QueryRejection::FailedToDeserializeQueryString(_)) => Err(ApiError::InvalidInput(r.body_text())),
            Err(r) => Err(ApiError::BadRequest(r.body_text())),
        }
    }
}

/// The `{name}` of a client route, validated by the same rules as the CLI
/// before anything is looked up.
pub struct ClientPath(pub ClientName);

impl<S: Send + Sync> FromRequestParts<S> for ClientPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(name) =
            Path::<String>::from_request_parts(parts, state).await.map_err(|r| ApiError::BadRequest(r.body_text()))?;
        Ok(ClientPath(ClientName::parse(&name)?))
    }
}
