//! `/openapi.json` and `/docs`.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// GET /openapi.json
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document_json(),
    )
        .into_response()
}

/// GET /docs: a self-contained reference page (no CDN).
pub async fn page() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("docs.html"),
    )
        .into_response()
}
