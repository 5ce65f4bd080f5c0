//! `GET /api/v1/events/feed`: every event, oldest first, from a cursor that
//! stays valid (the store's feed), with each client's name beside its id,
//! and a wait for the next events instead of polling.

use crate::AppState;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiQuery;
use axum::Json;
use axum::extract::State;
use oduflow_store::{FeedEvent, FeedPage, FeedQuery};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FeedParams {
    /// The cursor: the events after this position (`next` of the page
    /// before; 0, the default, from the first event).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// At most this many events, oldest first (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Seconds to wait for an event when there is none after the cursor
    /// (default 0: answer at once), at most 30.
    #[param(minimum = 0, maximum = 30)]
    pub wait: Option<u64>,
}

/// One event of the feed.
#[derive(Debug, Serialize, ToSchema)]
pub struct FeedEventView {
    /// Its place in the feed: pass the last one read as `after`.
    pub position: i64,
    /// The event's id (as `/api/v1/events` and `/api/v1/clients/{name}/events` show it).
    pub id: i64,
    pub client_id: Option<String>,
    /// The client's name; names are never given to another client.
    pub client: Option<String>,
    /// What happened: one of the event kinds oduflow writes.
    pub kind: String,
    /// The event's evidence, as written with it.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    /// When it was written, by the database's clock (ms since the epoch).
    pub at_ms: i64,
    /// Who asked for the change it records: `api-token:NAME`, the command
    /// line's actor (`cli:USER` by default), or a pass of oduflow's own
    /// (`verification`, `lineage`); none for what a run records of itself.
    pub actor: Option<String>,
}

/// A page of the feed.
#[derive(Debug, Serialize, ToSchema)]
pub struct FeedPageView {
    pub events: Vec<FeedEventView>,
    /// The cursor for the next read: the last event's position, or `after`
    /// when there was none.
    pub next: i64,
    /// The highest position so far.
    pub head: i64,
}

impl From<FeedEvent> for FeedEventView {
    fn from(e: FeedEvent) -> Self {
        let FeedEvent { position, id, client_id, client, kind, detail, at_ms, actor } = e;
        Self { position, id, client_id, client, kind, detail, at_ms, actor }
    }
}

impl From<FeedPage> for FeedPageView {
    fn from(p: FeedPage) -> Self {
        Self { events: p.events.into_iter().map(Into::into).collect(), next: p.next, head: p.head }
    }
}

/// Every event, oldest first, after a cursor that stays valid: a client's
/// whole history can be paged back from the first event, and `wait`
/// answers as soon as the next event is written. An event whose transaction
/// commits late is placed after the events already given out, never
/// skipped. A cursor past the last position (a database restored from an
/// older copy) is refused with 409.
#[utoipa::path(get, path = "/api/v1/events/feed", tag = "evidence", params(FeedParams),
    responses((status = 200, body = FeedPageView), (status = 401, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn events_feed(
    State(s): State<AppState>,
    ApiQuery(f): ApiQuery<FeedParams>,
) -> ApiResult<Json<FeedPageView>> {
    let q = FeedQuery::new(f.after, f.limit, f.wait).map_err(ApiError::InvalidInput)?;
    Ok(Json(s.store().feed_read(&q).await?.into()))
}
