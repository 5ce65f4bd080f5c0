//! The OpenAPI 3.1 document, derived by utoipa from the handlers' and DTOs'
//! annotations in `api.rs`, plus the bearer security scheme. Served at
//! `/openapi.json` (behind the token, like everything but `/health`).

use crate::error::{ErrorBody, ErrorDetail};
use crate::resolve::Resolution;
use crate::{api, feed};
use axum::http::Method;
use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "oduflow", description = "Operator API of oduflow: clients, interventions, actions, receipts, events, queue."),
    paths(
        api::health,
        api::clients_list, api::clients_create, api::clients_show, api::clients_delete, api::clients_update, api::clients_put,
        api::clients_receipts, api::clients_events,
        api::clients_reconcile, api::clients_adopt, api::clients_abandon, api::bulk_reconcile, api::bulk_abandon,
        api::clients_promote, api::import,
        api::interventions, api::receipts, api::orphans, api::orphans_adopt, api::orphans_delete, api::events, feed::events_feed,
        api::queue, api::queue_pause, api::queue_resume,
        api::inventory, api::credentials_rotate,
    ),
    components(schemas(ErrorBody, ErrorDetail, Resolution, feed::FeedPageView, feed::FeedEventView)),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    /// The bearer scheme, and on each operation the token scope it needs
    /// (the one the server enforces).
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        for (route, item) in openapi.paths.paths.iter_mut().filter(|(r, _)| r.starts_with("/api/")) {
            let ops = [
                (Method::GET, &mut item.get),
                (Method::POST, &mut item.post),
                (Method::PATCH, &mut item.patch),
                (Method::DELETE, &mut item.delete),
                (Method::PUT, &mut item.put),
            ];
            for (method, op) in ops {
                if let Some(op) = op.as_mut().filter(|op| op.security.is_none()) {
                    let scope = crate::auth::scope_needed(&method, route);
                    op.security = Some(vec![SecurityRequirement::new("bearer", [scope.as_str()])]);
                    if method != Method::GET {
                        op.parameters.get_or_insert_with(Vec::new).push(idempotency_key().into());
                    }
                }
            }
        }
    }
}

/// The `Idempotency-Key` header every changing operation takes.
fn idempotency_key() -> utoipa::openapi::path::Parameter {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(crate::idempotency::IDEMPOTENCY_KEY_LEN_MAX))
        .pattern(Some("^[!-~]+$"));
    ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(utoipa::openapi::Required::False)
        .description(Some(
            "A retry with the same key, method, path and body gets the first answer again (Idempotency-Replayed: \
             true) and changes nothing more; the same key with another request: 422 idempotency_key_reused. \
             Keys are the token's own, kept 24 h.",
        ))
        .schema(Some(schema))
        .build()
}

/// The document as JSON text.
pub fn openapi_json() -> String {
    ApiDoc::openapi().to_pretty_json().expect("the OpenAPI document serializes")
}

pub(crate) async fn serve_openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json())
}
