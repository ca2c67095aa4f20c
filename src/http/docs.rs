//! `/openapi.json` and `/docs`.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The OpenAPI document.
///
/// This document: OpenAPI 3.1, generated from the code (also printed by
/// `leasehold openapi` and committed as `openapi/leasehold.json`).
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document.", content_type = "application/json", body = Object,
        example = json!({"openapi": "3.1.0", "info": {"title": "leasehold", "version": "0.1.0"}, "paths": {}}))),
    security(())
)]
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document_json(),
    )
        .into_response()
}

/// API reference page.
///
/// A self-contained page (no assets from a CDN) that renders
/// `/openapi.json`: operations, parameters, responses and schemas.
#[utoipa::path(
    get,
    path = "/docs",
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
