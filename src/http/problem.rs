//! Every answer a handler gives: outcome bodies for 2xx, RFC 9457
//! `application/problem+json` for everything else, with `Retry-After` where
//! the outcome carries a retry hint. 5xx bodies never carry internal text.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::domain::{
    AcquireOutcome, Failure, Inspection, LostReason, OutcomeName, ReleaseOutcome, RenewOutcome,
};

/// The media type of problem answers.
pub const PROBLEM_JSON: &str = "application/problem+json";

pub use crate::domain::FieldError;

/// An answer and its HTTP status.
pub trait Answer: Serialize + OutcomeName {
    /// The status this outcome is answered with.
    fn status(&self) -> StatusCode;
    /// The retry hint, if the outcome carries one.
    fn retry_after_ms(&self) -> Option<u64> {
        None
    }
    /// Human-readable title and detail for a problem answer.
    fn describe(&self) -> (&'static str, &'static str) {
        ("", "")
    }
}

impl Answer for AcquireOutcome {
    fn status(&self) -> StatusCode {
        match self {
            Self::Acquired { .. } => StatusCode::CREATED,
            Self::ReplayedSameOperation { .. } => StatusCode::OK,
            Self::OwnerOperationConflict { .. }
            | Self::Contended { .. }
            | Self::LimitMismatch { .. } => StatusCode::CONFLICT,
        }
    }
    fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Self::Contended { retry_after_ms, .. }
            | Self::OwnerOperationConflict { retry_after_ms } => Some(*retry_after_ms),
            _ => None,
        }
    }
    fn describe(&self) -> (&'static str, &'static str) {
        match self {
            Self::OwnerOperationConflict { .. } => (
                "Held by another operation of the same owner",
                "The owner token holds this lease for a different operation id; an operation never inherits another's lease.",
            ),
            Self::Contended {
                reason: Some(crate::domain::ContendedReason::LockDelay),
                ..
            } => (
                "Lock-delay running",
                "The last holder's lease expired and its lock-delay still runs; nobody else may acquire it until retryAfterMs has passed.",
            ),
            Self::Contended {
                reason: Some(crate::domain::ContendedReason::Queued),
                ..
            } => (
                "Waiters go first",
                "Waiters that started earlier are queued for this resource and go first. Send waitMs to take a place in the queue.",
            ),
            Self::Contended { .. } => (
                "Lease held by someone else",
                "Another owner holds this lease. Retry after retryAfterMs, or send waitMs to wait server-side.",
            ),
            Self::LimitMismatch { .. } => (
                "Limit mismatch",
                "The resource is held with another limit; every holder must ask with the same limit (the current one is in `limit`).",
            ),
            _ => ("", ""),
        }
    }
}

impl Answer for RenewOutcome {
    fn status(&self) -> StatusCode {
        match self {
            Self::Renewed { .. } => StatusCode::OK,
            Self::Lost {
                reason: LostReason::Absent,
            } => StatusCode::NOT_FOUND,
            Self::Lost {
                reason: LostReason::NotOwner,
            } => StatusCode::CONFLICT,
        }
    }
    fn describe(&self) -> (&'static str, &'static str) {
        match self {
            Self::Lost { reason: LostReason::Absent } => (
                "Lease lost",
                "No lease exists any more (it expired or was released). Stop the work it protected.",
            ),
            Self::Lost { reason: LostReason::NotOwner } => (
                "Lease lost",
                "Someone else holds the lease now. Stop the work it protected.",
            ),
            Self::Renewed { .. } => ("", ""),
        }
    }
}

impl Answer for ReleaseOutcome {
    fn status(&self) -> StatusCode {
        match self {
            Self::Released | Self::AlreadyAbsent => StatusCode::OK,
            Self::NotOwner => StatusCode::CONFLICT,
        }
    }
    fn describe(&self) -> (&'static str, &'static str) {
        (
            "Not the owner",
            "Someone else holds this lease; nothing was changed.",
        )
    }
}

impl Answer for Inspection {
    fn status(&self) -> StatusCode {
        StatusCode::OK
    }
}

impl Answer for Failure {
    fn status(&self) -> StatusCode {
        match self {
            Self::Unavailable { .. } | Self::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Indeterminate { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }
    fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Self::Unavailable { retry_after_ms } | Self::Overloaded { retry_after_ms } => {
                Some(*retry_after_ms)
            }
            Self::Indeterminate { .. } => None,
        }
    }
    fn describe(&self) -> (&'static str, &'static str) {
        match self {
            Self::Unavailable { .. } => (
                "Store unavailable",
                "The lease store could not be reached or refused the command; nothing was applied. Retry later.",
            ),
            Self::Overloaded { .. } => (
                "Overloaded",
                "The service shed this request before touching the store; nothing was applied. Retry later.",
            ),
            Self::Indeterminate { .. } => (
                "Outcome unknown",
                "The command was sent but no certain reply came: it may or may not have been applied. Inspect, or retry with the same attempt.",
            ),
        }
    }
}

/// Turns a verb's result into a response.
pub fn respond<T: Answer>(result: &Result<T, Failure>) -> Response {
    match result {
        Ok(answer) => respond_one(answer),
        Err(failure) => respond_one(failure),
    }
}

/// Turns one answer into a response: JSON for 2xx, problem+json otherwise.
pub fn respond_one<T: Answer>(answer: &T) -> Response {
    let status = answer.status();
    let retry_after = answer.retry_after_ms();
    let mut response = if status.is_success() {
        // Sized for a lease answer, so serializing never reallocates.
        let mut body = Vec::with_capacity(384);
        match serde_json::to_writer(&mut body, answer) {
            Ok(()) => (
                status,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(_) => ApiError::Internal.into_response(),
        }
    } else {
        let body = serde_json::to_value(answer).unwrap_or(Value::Null);
        let (title, detail) = answer.describe();
        let mut map = match body {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        problem_response(
            status,
            answer.outcome_name(),
            title,
            detail,
            map_take(&mut map),
        )
    };
    if let Some(ms) = retry_after {
        set_retry_after(&mut response, ms);
    }
    response
}

fn map_take(map: &mut Map<String, Value>) -> Map<String, Value> {
    std::mem::take(map)
}

/// `Retry-After` in whole seconds, rounded up (at least 1).
pub fn set_retry_after(response: &mut Response, ms: u64) {
    let secs = ms.div_ceil(1000).max(1);
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
}

/// A problem+json response: `type`, `title`, `status`, `detail`, `outcome`
/// and the outcome's own members.
pub fn problem_response(
    status: StatusCode,
    outcome: &str,
    title: &str,
    detail: &str,
    mut members: Map<String, Value>,
) -> Response {
    members.insert("type".into(), Value::String(type_uri(outcome)));
    members.insert("title".into(), Value::String(title.to_owned()));
    members.insert("status".into(), Value::from(status.as_u16()));
    members.insert("detail".into(), Value::String(detail.to_owned()));
    members.insert("outcome".into(), Value::String(outcome.to_owned()));
    let body = serde_json::to_vec(&Value::Object(members)).unwrap_or_default();
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}

/// A request the service will not act on.
#[derive(Debug)]
pub enum ApiError {
    /// Bad input: 400 when the request's shape is wrong (path, headers, JSON
    /// syntax), 422 when well-formed JSON holds invalid values.
    Invalid {
        /// 400 or 422.
        status: StatusCode,
        /// Each invalid field.
        errors: Vec<FieldError>,
    },
    /// The body is over the limit (413).
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request's header block is over the limit (431).
    HeadersTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is not `application/json` (415).
    UnsupportedMediaType,
    /// No route (404).
    NotFound,
    /// The route exists but not with this method (405).
    MethodNotAllowed,
    /// Missing or unknown API key (401).
    Unauthorized,
    /// The API key may not use this purpose (403).
    Forbidden,
    /// The API key lacks the named scope (403).
    MissingScope(&'static str),
    /// The request took longer than the per-request timeout (503).
    RequestTimeout,
    /// A bug: answered without internal text (500).
    Internal,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let none = Map::new();
        match self {
            Self::Invalid { status, errors } => {
                let mut members = Map::new();
                members.insert(
                    "errors".into(),
                    serde_json::to_value(&errors).unwrap_or(Value::Null),
                );
                let detail = errors
                    .iter()
                    .map(|e| format!("{}: {}", e.field, e.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                problem_response(
                    status,
                    "invalid_request",
                    "Invalid request",
                    &detail,
                    members,
                )
            }
            Self::TooLarge { limit } => problem_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "Request body too large",
                &format!("The request body is limited to {limit} bytes."),
                none,
            ),
            Self::HeadersTooLarge { limit } => problem_response(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large",
                "Request headers too large",
                &format!("The request's headers are limited to {limit} bytes in all."),
                none,
            ),
            Self::UnsupportedMediaType => problem_response(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Unsupported media type",
                "Send the body as application/json.",
                none,
            ),
            Self::NotFound => problem_response(
                StatusCode::NOT_FOUND,
                "not_found",
                "Not found",
                "No such route. See /openapi.json.",
                none,
            ),
            Self::MethodNotAllowed => problem_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
                "This route does not accept this method. See /openapi.json.",
                none,
            ),
            Self::Unauthorized => {
                let mut r = problem_response(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "Unauthorized",
                    "Send a valid API key as 'Authorization: Bearer <key>'.",
                    none,
                );
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"leasehold\""),
                );
                r
            }
            Self::Forbidden => problem_response(
                StatusCode::FORBIDDEN,
                "forbidden",
                "Forbidden",
                "This API key may not use this purpose.",
                none,
            ),
            Self::MissingScope(scope) => {
                let mut members = Map::new();
                members.insert("scope".into(), Value::from(scope));
                problem_response(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "Forbidden",
                    &format!("This API key lacks the '{scope}' scope."),
                    members,
                )
            }
            Self::RequestTimeout => {
                let mut r = problem_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "request_timeout",
                    "Request timed out",
                    "The request exceeded the service's request timeout.",
                    none,
                );
                set_retry_after(&mut r, 1000);
                r
            }
            Self::Internal => problem_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "The service failed unexpectedly; the failure was logged.",
                none,
            ),
        }
    }
}

/// 408 problem+json `request_timeout`: the body did not arrive in time, so
/// nothing reached the store (never `indeterminate`).
pub fn body_timeout() -> Response {
    problem_response(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        "Request body timed out",
        "The request body did not arrive within the service's request timeout; nothing was done.",
        Map::new(),
    )
}

/// Where problem type pages are served; a problem's `type` is this and its slug.
pub const PREFIX: &str = "/problems/";

/// The `type` of a problem answer with this outcome: `/problems/` and the
/// outcome with dashes.
pub fn type_uri(outcome: &str) -> String {
    let mut uri = String::with_capacity(PREFIX.len() + outcome.len());
    uri.push_str(PREFIX);
    uri.extend(outcome.chars().map(|c| if c == '_' { '-' } else { c }));
    uri
}
