//! `POST /attempts`: a fresh owner token for an operation. Stateless.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::extract::{self, Problems};
use super::problem::ApiError;
use super::AppState;
use crate::domain::{OperationId, OwnerToken};

/// Body of an attempt creation.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
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

/// A new attempt: send both values as headers on every lease verb.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptCreated {
    /// The `attempt_created` tag.
    #[schema(example = "attempt_created")]
    pub outcome: String,
    /// Bearer secret naming the holder; keep it private.
    #[schema(
        pattern = "^[A-Za-z0-9_-]{32}$",
        example = "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz"
    )]
    pub owner_token: String,
    /// Echo of the operation id.
    #[schema(example = "export-2026-12-02")]
    pub operation_id: String,
}

/// POST /attempts
pub async fn create(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
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
    if let Err(e) = app.authenticate(&headers) {
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
            outcome: "attempt_created".into(),
            owner_token: token.expose().to_owned(),
            operation_id: op.as_str().to_owned(),
        }),
    )
        .into_response()
}
