//! `POST /attempts`: a fresh owner token for an operation. Stateless.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::app::AppState;
use super::extract::{self, HeadersAndBody, Problems};
use super::problem::ApiError;
use crate::domain::{OperationId, OwnerToken};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    HeadersTooLargeProblem, InvalidRequestProblem, PayloadTooLargeProblem, UnauthorizedProblem,
    UnsupportedMediaTypeProblem,
};

/// The route template (also its metric label).
pub const ROUTE: &str = "/attempts";

/// `POST /attempts`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, post(create))
}

/// Body of an attempt creation.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(example = json!({"operationId": "export-2026-12-02"}))]
pub struct AttemptBody {
    /// The caller's id for this unit of work.
    #[schema(
        pattern = "^[A-Za-z0-9._~-]{1,128}$",
        min_length = 1,
        max_length = 128,
        example = "export-2026-12-02"
    )]
    pub operation_id: String,
}

/// `attempt_created` (201): send both values as the `Lease-Owner-Token` and
/// `Lease-Operation-Id` headers on every lease verb of this operation.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"outcome": "attempt_created", "ownerToken": "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz", "operationId": "export-2026-12-02"}))]
pub struct AttemptCreated {
    #[schema(inline)]
    pub outcome: AttemptCreatedTag,
    /// Bearer secret naming the holder; keep it private.
    #[schema(
        pattern = "^[A-Za-z0-9_-]{32}$",
        example = "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz"
    )]
    pub owner_token: String,
    /// Echo of the operation id.
    #[schema(
        pattern = "^[A-Za-z0-9._~-]{1,128}$",
        min_length = 1,
        max_length = 128,
        example = "export-2026-12-02"
    )]
    pub operation_id: String,
}

/// The outcome tag of [`AttemptCreated`].
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptCreatedTag {
    /// A new owner token was drawn.
    AttemptCreated,
}

/// Create an attempt.
///
/// Draws a fresh owner token (24 bytes from the OS CSPRNG, base64url) for
/// one unit of work, before its first acquire, so that a retry after a lost
/// reply can be told apart from a new acquisition. Stateless: nothing is
/// written to the store. The token is a bearer secret: keep it private.
#[utoipa::path(
    post,
    path = ROUTE,
    operation_id = "createAttempt",
    tag = "attempts",
    request_body(content = AttemptBody, description = "The caller's id for this unit of work.",
        example = json!({"operationId": "export-2026-12-02"})),
    responses(
        (status = 201, description = "`attempt_created`: a fresh owner token.", body = AttemptCreated,
            links(("acquire" = (operation_id = "acquireLease", description = "Acquire a lease with this attempt.", parameters(
                ("header.Lease-Owner-Token" = "$response.body#/ownerToken"),
                ("header.Lease-Operation-Id" = "$response.body#/operationId"),
            ))))),
        (status = 400, description = "`invalid_request`: malformed JSON.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: the body is over the limit.", body = PayloadTooLargeProblem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`: the body is not `application/json`.", body = UnsupportedMediaTypeProblem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: an invalid, missing or unknown member.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn create(
    State(app): State<AppState>,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    if let Err(e) = app.authenticate(&headers) {
        return e.into_response();
    }
    let mut problems = Problems::default();
    let body: Option<AttemptBody> =
        match extract::json_body(&headers, body, app.body_limit, &mut problems) {
            Ok(b) => b,
            Err(e) => return e.into_response(),
        };
    let op = body.and_then(|b| {
        OperationId::parse(&b.operation_id)
            .map_err(|e| problems.value("operationId", e.to_string()))
            .ok()
    });
    if let Err(e) = problems.finish() {
        return e.into_response();
    }
    let (Some(op), Ok(token)) = (op, OwnerToken::generate()) else {
        tracing::error!("the OS random number generator failed");
        return ApiError::Internal.into_response();
    };
    metrics::counter!(crate::telemetry::OPERATIONS, "verb" => "attempt", "outcome" => "attempt_created", "purpose" => "none")
        .increment(1);
    (
        StatusCode::CREATED,
        axum::Json(AttemptCreated {
            outcome: AttemptCreatedTag::AttemptCreated,
            owner_token: token.expose().to_owned(),
            operation_id: op.as_str().to_owned(),
        }),
    )
        .into_response()
}
