//! `/docs`: the document rendered in the browser, assets embedded.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::app::AppState;

/// The route (also its metric label).
pub const ROUTE: &str = "/docs";

/// `GET /docs`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(page))
}

/// API reference page.
///
/// A self-contained page (no assets from a CDN) that renders
/// `/openapi.json`: operations, parameters, responses and schemas.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "docs",
    tag = "operations",
    responses((status = 200, description = "An HTML page.", content_type = "text/html; charset=utf-8", body = String,
        example = "<!doctype html><title>leasehold API</title>")),
    security(())
)]
pub async fn page() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("docs.html"),
    )
        .into_response()
}
