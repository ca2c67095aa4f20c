//! Operator control over one resource (docs/design.md §17):
//! `POST /leases/{purpose}/{digest}/break`, for `admin` keys.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use utoipa::ToSchema;

use super::app::AppState;
use super::auth::Role;
use super::extract::{self, path_resource, HeadersAndBody, Problems, RawPath};
use super::problem::{respond, ApiError};
use crate::domain::{BreakReason, Revocation};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    BreakNotFound, Broken, ForbiddenProblem, HeadersTooLargeProblem, IndeterminateProblem,
    InvalidRequestProblem, PayloadTooLargeProblem, ServiceUnavailable, UnauthorizedProblem,
    UnsupportedMediaTypeProblem,
};

/// The route template (also its metric label).
pub const ROUTE: &str = "/leases/{purpose}/{digest}/break";

/// `POST /leases/{purpose}/{digest}/break`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, post(break_lease))
}

/// Body of a break (an empty body is `{}`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(example = json!({"fencingToken": 1764686400000000_u64, "reason": "stuck since the 03:00 deploy"}))]
pub struct BreakBody {
    /// Optional: break only the permit with this fencing token (left out:
    /// every permit of the resource).
    // A whole number sent as `5.0` is that integer, as for `ttlMs`
    // (schemathesis sends one; the schema says `integer`).
    #[serde(default, deserialize_with = "super::leases::whole_opt")]
    #[schema(
        minimum = 1,
        maximum = 9007199254740991_i64,
        nullable = false,
        example = 1764686400000000_i64
    )]
    pub fencing_token: Option<u64>,
    /// Optional: why, 1–256 characters, no control characters. Watchers
    /// see it in the `revoked` event.
    #[serde(default)]
    #[schema(value_type = Option<String>, nullable = false, min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$", example = "stuck since the 03:00 deploy")]
    pub reason: Option<BreakReason>,
}

/// Break a lease.
///
/// An operator removes every permit of the resource, or only the one with
/// `fencingToken`. Waiters are woken as by a release; no lock-delay
/// starts; the version moves. Each broken holder's next renew answers
/// `lost` with `reason: revoked` (404) and its release `already_absent`
/// with `reason: revoked`, until its permit would have expired. Watchers
/// get an `event: revoked` whose data carries `revocation` (the reason and
/// the breaking key's name, never the key). Needs the `admin` scope.
#[utoipa::path(
    post,
    path = ROUTE,
    operation_id = "breakLease",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource digest.",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ),
    request_body(content = BreakBody, description = "Which permit (all when left out) and why; the body itself may be left out (as `{}`).",
        example = json!({"reason": "stuck since the 03:00 deploy"})),
    responses(
        (status = 200, description = "`broken`: `permitsBroken` live permits were removed.", body = Broken),
        (status = 400, description = "`invalid_request`: a malformed path parameter or JSON body.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `admin` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`nothing_to_break`: no live permit (with that `fencingToken`); nothing was changed. Or `not_found`: the path matched no route.", body = BreakNotFound, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: the body is over the limit.", body = PayloadTooLargeProblem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`: a body that is not `application/json`.", body = UnsupportedMediaTypeProblem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: well-formed JSON with invalid values (a reason out of bounds, a wrong type, an unknown member).", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: not applied.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
        (status = 504, description = "`indeterminate` (`operationId: break`): sent, no certain reply; it may have been applied. Inspect, or break again (a second break finds nothing to break).", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn break_lease(
    State(app): State<AppState>,
    path: RawPath,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let result = async {
        let (resource, body) = parts(&app, path, &headers, body)?;
        app.authorize(&headers, &resource, Role::Admin)?;
        let revocation = Revocation {
            reason: body.reason,
            key_name: app.api_keys.key_name(&headers),
        };
        Ok::<_, ApiError>(respond(
            &app.service
                .break_lease(&resource, body.fencing_token, &revocation)
                .await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// The resource and the body (an empty body is `{}`), every bad field
/// named in one answer.
fn parts(
    app: &AppState,
    path: RawPath,
    headers: &HeaderMap,
    body: Result<Bytes, extract::BodyError>,
) -> Result<(crate::domain::ResourceId, BreakBody), ApiError> {
    app.authenticate(headers)?;
    let mut problems = Problems::default();
    let resource = path_resource(path, &mut problems);
    let body = match body {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Some(BreakBody::default()),
        body => extract::json_body::<BreakBody>(headers, body, app.body_limit, &mut problems)?,
    };
    if body
        .as_ref()
        .and_then(|b| b.fencing_token)
        .is_some_and(|t| t == 0 || t > 9_007_199_254_740_991)
    {
        problems.value("fencingToken", "must be from 1 to 9007199254740991");
    }
    problems.finish()?;
    match (resource, body) {
        (Some(resource), Some(body)) => Ok((resource, body)),
        _ => Err(ApiError::Internal),
    }
}
