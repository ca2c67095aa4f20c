//! Every answer a handler gives: outcome bodies for 2xx, RFC 9457
//! `application/problem+json` for everything else, with `Retry-After` where
//! the outcome carries a retry hint. 5xx bodies never carry internal text.
//! What each problem says is in [`super::problem_table`].

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

use super::problem_table::{
    ProblemType, Words, BODY_TIMEOUT, CONTENDED_LOCK_DELAY, CONTENDED_QUEUED, LIMIT, LOST_MAX_HOLD,
    LOST_NOT_OWNER, LOST_REVOKED, MISSING_PURPOSE_SCOPE, MISSING_SCOPE, PURPOSE, SCOPE,
};
use crate::domain::{
    AcquireOutcome, BreakOutcome, ContendedReason, Failure, Inspection, LostReason, OutcomeName,
    Purpose, ReleaseOutcome, RenewOutcome,
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
    fn describe(&self) -> Words {
        Words::NONE
    }
    /// Writes a 2xx body by hand (the same bytes as `Serialize`, cheaper);
    /// `Ok(false)`: serde writes it.
    fn write_json(&self, _out: &mut Vec<u8>) -> serde_json::Result<bool> {
        Ok(false)
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
    fn describe(&self) -> Words {
        match self {
            Self::OwnerOperationConflict { .. } => ProblemType::OwnerOperationConflict.words(),
            Self::Contended {
                reason: Some(ContendedReason::LockDelay),
                ..
            } => CONTENDED_LOCK_DELAY,
            Self::Contended {
                reason: Some(ContendedReason::Queued),
                ..
            } => CONTENDED_QUEUED,
            Self::Contended { .. } => ProblemType::Contended.words(),
            Self::LimitMismatch { .. } => ProblemType::LimitMismatch.words(),
            _ => Words::NONE,
        }
    }
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<bool> {
        super::lease_json::acquire(self, out)
    }
}

impl Answer for RenewOutcome {
    fn status(&self) -> StatusCode {
        match self {
            Self::Renewed { .. } => StatusCode::OK,
            Self::Lost {
                reason: LostReason::Absent | LostReason::Revoked | LostReason::MaxHold,
            } => StatusCode::NOT_FOUND,
            Self::Lost {
                reason: LostReason::NotOwner,
            } => StatusCode::CONFLICT,
        }
    }
    fn describe(&self) -> Words {
        match self {
            Self::Lost {
                reason: LostReason::Absent,
            } => ProblemType::Lost.words(),
            Self::Lost {
                reason: LostReason::NotOwner,
            } => LOST_NOT_OWNER,
            Self::Lost {
                reason: LostReason::Revoked,
            } => LOST_REVOKED,
            Self::Lost {
                reason: LostReason::MaxHold,
            } => LOST_MAX_HOLD,
            Self::Renewed { .. } => Words::NONE,
        }
    }
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<bool> {
        super::lease_json::renew(self, out)
    }
}

impl Answer for ReleaseOutcome {
    fn status(&self) -> StatusCode {
        match self {
            Self::Released | Self::AlreadyAbsent { .. } => StatusCode::OK,
            Self::NotOwner => StatusCode::CONFLICT,
        }
    }
    fn describe(&self) -> Words {
        match self {
            Self::NotOwner => ProblemType::NotOwner.words(),
            Self::Released | Self::AlreadyAbsent { .. } => Words::NONE,
        }
    }
}

impl Answer for BreakOutcome {
    fn status(&self) -> StatusCode {
        match self {
            Self::Broken { .. } => StatusCode::OK,
            Self::NothingToBreak => StatusCode::NOT_FOUND,
        }
    }
    fn describe(&self) -> Words {
        match self {
            Self::Broken { .. } => Words::NONE,
            Self::NothingToBreak => ProblemType::NothingToBreak.words(),
        }
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
    fn describe(&self) -> Words {
        match self {
            Self::Unavailable { .. } => ProblemType::Unavailable.words(),
            Self::Overloaded { .. } => ProblemType::Overloaded.words(),
            Self::Indeterminate { .. } => ProblemType::Indeterminate.words(),
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
        let written = match answer.write_json(&mut body) {
            Ok(true) => Ok(()),
            Ok(false) => serde_json::to_writer(&mut body, answer),
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => with_body(status, "application/json", body),
            Err(_) => ApiError::Internal.into_response(),
        }
    } else {
        let body = serde_json::to_value(answer).unwrap_or(Value::Null);
        let Words { title, detail } = answer.describe();
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
    // Straight from the number: no `String` in between.
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
}

/// A problem+json response: `type`, `title`, `status`, `detail`, `outcome`
/// and the outcome's own members.
pub fn problem_response(
    status: StatusCode,
    outcome: &str,
    title: &str,
    detail: &str,
    members: Map<String, Value>,
) -> Response {
    let body = problem_body(status, outcome, title, detail, &members).unwrap_or_default();
    with_body(status, PROBLEM_JSON, body)
}

/// One of the five members every problem answer has.
enum Fixed<'a> {
    Text(&'a str),
    Status(u16),
    Type(&'a str),
}

/// The body of [`problem_response`], written into one buffer: the
/// outcome's own members and the five problem members merged in name order
/// (the order serde_json's `Map`, a `BTreeMap`, writes them in), a problem
/// member replacing an own member of the same name. The same bytes as
/// inserting the five into `members` and serialising the map (a unit test
/// holds the two together), without an owned key and value per member.
fn problem_body(
    status: StatusCode,
    outcome: &str,
    title: &str,
    detail: &str,
    members: &Map<String, Value>,
) -> serde_json::Result<Vec<u8>> {
    // In name order.
    let fixed = [
        ("detail", Fixed::Text(detail)),
        ("outcome", Fixed::Text(outcome)),
        ("status", Fixed::Status(status.as_u16())),
        ("title", Fixed::Text(title)),
        ("type", Fixed::Type(outcome)),
    ];
    let mut own = members
        .iter()
        .filter(|(name, _)| !fixed.iter().any(|(f, _)| f == name))
        .peekable();
    let mut fixed = fixed.iter().peekable();
    let mut out = Vec::with_capacity(160 + title.len() + detail.len() + 48 * members.len());
    out.push(b'{');
    loop {
        let own_first = match (own.peek(), fixed.peek()) {
            (None, None) => break,
            (Some((name, _)), Some((f, _))) => name.as_str() < *f,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        if out.len() > 1 {
            out.push(b',');
        }
        if let (true, Some((name, value))) = (own_first, own.peek()) {
            serde_json::to_writer(&mut out, name)?;
            out.push(b':');
            serde_json::to_writer(&mut out, value)?;
            own.next();
        } else if let Some((name, value)) = fixed.next() {
            serde_json::to_writer(&mut out, name)?;
            out.push(b':');
            match value {
                Fixed::Text(text) => serde_json::to_writer(&mut out, text)?,
                Fixed::Status(code) => serde_json::to_writer(&mut out, code)?,
                Fixed::Type(outcome) => {
                    // `PREFIX` and outcome names hold nothing to escape.
                    out.push(b'"');
                    out.extend_from_slice(PREFIX.as_bytes());
                    out.extend(type_slug(outcome));
                    out.push(b'"');
                }
            }
        }
    }
    out.push(b'}');
    Ok(out)
}

/// A response of `status` with `body` of `content_type`, built directly:
/// `(status, headers, Vec<u8>).into_response()` first sets
/// `application/octet-stream` (the `Vec`'s own type) and then replaces it,
/// through axum's generic parts machinery, at several times the cost.
fn with_body(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response {
    let mut response = Response::new(axum::body::Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
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
    /// The API key may use the purpose, but lacks the named scope on it
    /// (403).
    MissingPurposeScope {
        /// `read`, `write` or `admin`.
        scope: &'static str,
        /// The purpose (already validated: safe to echo).
        purpose: Purpose,
    },
    /// The request took longer than the per-request timeout (503).
    RequestTimeout,
    /// A bug: answered without internal text (500).
    Internal,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
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
                refusal(ProblemType::InvalidRequest, status, &detail, members)
            }
            Self::TooLarge { limit } => usual_with(ProblemType::PayloadTooLarge, LIMIT, limit),
            Self::HeadersTooLarge { limit } => {
                usual_with(ProblemType::HeadersTooLarge, LIMIT, limit)
            }
            Self::UnsupportedMediaType => usual(ProblemType::UnsupportedMediaType),
            Self::NotFound => usual(ProblemType::NotFound),
            Self::MethodNotAllowed => usual(ProblemType::MethodNotAllowed),
            Self::Unauthorized => {
                let mut r = usual(ProblemType::Unauthorized);
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"leasehold\""),
                );
                r
            }
            Self::Forbidden => usual(ProblemType::Forbidden),
            Self::MissingScope(scope) => {
                let mut members = Map::new();
                members.insert("scope".into(), Value::from(scope));
                problem_response(
                    ProblemType::Forbidden.status(),
                    &ProblemType::Forbidden.outcome(),
                    MISSING_SCOPE.title,
                    &MISSING_SCOPE.detail.replace(SCOPE, scope),
                    members,
                )
            }
            Self::MissingPurposeScope { scope, purpose } => {
                let mut members = Map::new();
                members.insert("scope".into(), Value::from(scope));
                members.insert("purpose".into(), Value::from(purpose.as_str()));
                problem_response(
                    ProblemType::Forbidden.status(),
                    &ProblemType::Forbidden.outcome(),
                    MISSING_PURPOSE_SCOPE.title,
                    &MISSING_PURPOSE_SCOPE
                        .detail
                        .replace(SCOPE, scope)
                        .replace(PURPOSE, purpose.as_str()),
                    members,
                )
            }
            Self::RequestTimeout => {
                let mut r = usual(ProblemType::RequestTimeout);
                set_retry_after(&mut r, 1000);
                r
            }
            Self::Internal => usual(ProblemType::Internal),
        }
    }
}

/// A problem answer of `problem` with its usual status, title and detail.
fn usual(problem: ProblemType) -> Response {
    let Words { detail, .. } = problem.words();
    refusal(problem, problem.status(), detail, Map::new())
}

/// [`usual`], with the placeholder in the detail filled in.
fn usual_with(problem: ProblemType, placeholder: &str, value: impl ToString) -> Response {
    let detail = problem
        .words()
        .detail
        .replace(placeholder, &value.to_string());
    refusal(problem, problem.status(), &detail, Map::new())
}

/// A problem answer of `problem` with its usual title.
fn refusal(
    problem: ProblemType,
    status: StatusCode,
    detail: &str,
    members: Map<String, Value>,
) -> Response {
    problem_response(
        status,
        &problem.outcome(),
        problem.words().title,
        detail,
        members,
    )
}

/// 408 problem+json `request_timeout`: the body did not arrive in time, so
/// nothing reached the store (never `indeterminate`).
pub fn body_timeout() -> Response {
    problem_response(
        StatusCode::REQUEST_TIMEOUT,
        &ProblemType::RequestTimeout.outcome(),
        BODY_TIMEOUT.title,
        BODY_TIMEOUT.detail,
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
    uri.extend(type_slug(outcome).map(char::from));
    uri
}

/// An outcome as its problem type names it: `_` becomes `-` (outcome
/// names are ASCII).
fn type_slug(outcome: &str) -> impl Iterator<Item = u8> + '_ {
    outcome.bytes().map(|b| if b == b'_' { b'-' } else { b })
}

#[cfg(test)]
#[path = "problem_tests.rs"]
mod tests;
