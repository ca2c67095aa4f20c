//! `/sessions`: one liveness for many leases (docs/design.md §18, §19).
//! Make (POST), renew (PATCH), end (DELETE), read (GET), a keep-alive
//! stream, and acquire and release of a lease on a session.

use axum::extract::{RawPathParams, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde::Deserialize;

use super::app::AppState;
use super::auth::Role;
use super::extract::{self, Headers, HeadersAndBody, Problems, RawPath};
use super::problem::{respond, respond_one, Answer, ApiError};
use super::problem_table::{ProblemType, Words, LOST_SESSION_ENDED, LOST_SESSION_EXPIRED};
use super::session_extract::{path_id, secret};
use crate::domain::{LeaseShape, SessionGone, SessionOutcome};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    AcquireConflict, Acquired, BodyTimeoutProblem, ForbiddenProblem, HeadersTooLargeProblem,
    IndeterminateProblem, InvalidRequestProblem, NotOwnerProblem, PayloadTooLargeProblem,
    ReleaseSuccess, ReplayedSameOperation, ServiceUnavailable, SessionAcquireConflict,
    SessionCreateConflict, SessionLostProblem, SessionNotOwnerProblem, UnauthorizedProblem,
    UnsupportedMediaTypeProblem,
};
use crate::service::{AcquireRequest, SessionAcquire};

pub use super::session_schemas::*;

/// `POST /sessions` (also its metric label).
pub const ROUTE: &str = "/sessions";
/// `/sessions/{id}` (also its metric label).
pub const ONE: &str = "/sessions/{id}";
/// `/sessions/{id}/leases/{purpose}/{digest}` (also its metric label).
pub const LEASE: &str = "/sessions/{id}/leases/{purpose}/{digest}";

/// The session routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route(ROUTE, post(create))
        .route(ONE, get(read).patch(renew).delete(end))
        .route(LEASE, put(acquire).delete(release))
}

impl Answer for SessionOutcome {
    fn status(&self) -> StatusCode {
        match self {
            Self::SessionCreated { .. } => StatusCode::CREATED,
            Self::ReplayedSameOperation { .. }
            | Self::Renewed { .. }
            | Self::Ended { .. }
            | Self::AlreadyAbsent
            | Self::Session { .. } => StatusCode::OK,
            Self::Lost { .. } => StatusCode::NOT_FOUND,
            Self::OwnerOperationConflict | Self::NotOwner | Self::SessionFull { .. } => {
                StatusCode::CONFLICT
            }
        }
    }
    fn describe(&self) -> Words {
        match self {
            Self::Lost {
                reason: SessionGone::SessionEnded,
            } => LOST_SESSION_ENDED,
            Self::Lost {
                reason: SessionGone::SessionExpired | SessionGone::Absent,
            } => LOST_SESSION_EXPIRED,
            Self::OwnerOperationConflict => super::problem_table::SESSION_OTHER_OPERATION,
            Self::NotOwner => super::problem_table::SESSION_NOT_OWNER,
            Self::SessionFull { .. } => ProblemType::SessionFull.words(),
            _ => Words::NONE,
        }
    }
}

fn parsed<T>(value: Option<T>) -> Result<T, ApiError> {
    value.ok_or(ApiError::Internal)
}

fn params_of(
    path: Result<RawPathParams, impl std::fmt::Debug>,
    problems: &mut Problems,
) -> Option<RawPathParams> {
    path.map_err(|_| problems.shape("path", "path parameters must be valid UTF-8"))
        .ok()
}

/// Make a session.
///
/// Made with an attempt, like a lease: `Lease-Owner-Token` (the session's
/// secret, kept by the caller; no answer carries it) and
/// `Lease-Operation-Id`. The session's public `id` is derived from the
/// token, so a retry of the same attempt after a lost reply answers
/// `replayed_same_operation`. Leases acquired on the session
/// (`PUT /sessions/{id}/leases/...`) end when it does.
#[utoipa::path(
    post,
    path = ROUTE,
    operation_id = "createSession",
    tag = "sessions",
    params(
        ("Lease-Owner-Token" = String, Header, description = "The owner token from `POST /attempts`: the session's secret.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32, example = "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz"),
        ("Lease-Operation-Id" = String, Header, description = "The operation id the owner token was created for.",
            pattern = r"^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128, example = "shard-owner-7"),
    ),
    request_body(content = SessionBody, description = "The session's TTL and holder label."),
    responses(
        (status = 201, description = "`session_created`.", body = SessionAnswer,
            links(
                ("renew" = (operation_id = "renewSession", description = "Renew the session just made.", parameters(
                    ("id" = "$response.body#/session/id"),
                    ("header.Lease-Owner-Token" = "$request.header.Lease-Owner-Token"),
                ))),
                ("read" = (operation_id = "readSession", description = "Read the session just made.", parameters(
                    ("id" = "$response.body#/session/id"),
                ))),
                ("keepalive" = (operation_id = "keepSessionAlive", description = "Keep the session just made alive.", parameters(
                    ("id" = "$response.body#/session/id"),
                    ("header.Lease-Owner-Token" = "$request.header.Lease-Owner-Token"),
                ))),
                ("end" = (operation_id = "endSession", description = "End the session just made.", parameters(
                    ("id" = "$response.body#/session/id"),
                    ("header.Lease-Owner-Token" = "$request.header.Lease-Owner-Token"),
                ))),
            )),
        (status = 200, description = "`replayed_same_operation`: this attempt made it already.", body = SessionAnswer),
        (status = 400, description = "`invalid_request`: a malformed header or JSON body.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key has the scope on no purpose (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`lost`: this attempt's session ended or expired (make a new attempt).", body = SessionLostProblem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`.", body = BodyTimeoutProblem, content_type = "application/problem+json"),
        (status = 409, description = "`owner_operation_conflict`: the owner token made a live session for another operation.", body = SessionCreateConflict, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`.", body = PayloadTooLargeProblem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`.", body = UnsupportedMediaTypeProblem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: invalid values.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: not applied.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds."))),
        (status = 504, description = "`indeterminate`: retry with the same attempt.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn create(
    State(app): State<AppState>,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let result = async {
        app.authorize_any(&headers, Role::Write)?;
        let mut problems = Problems::default();
        let attempt = extract::attempt(&headers, true, &mut problems);
        let body =
            extract::json_body::<SessionBody>(&headers, body, app.body_limit, &mut problems)?;
        let ttl = body
            .as_ref()
            .and_then(|b| session_ttl(&app, b.ttl_ms, &mut problems));
        problems.finish()?;
        let (attempt, ttl) = (parsed(attempt)?, parsed(ttl)?);
        let holder = body.as_ref().and_then(|b| b.holder.as_ref());
        Ok::<_, ApiError>(respond(
            &app.service.create_session(&attempt, ttl, holder).await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// A session TTL: at least a second, at most the largest lease TTL.
fn session_ttl(app: &AppState, ms: u64, problems: &mut Problems) -> Option<crate::domain::Ttl> {
    let bounds = app.service.bounds();
    match bounds.ttl(ms) {
        Ok(ttl) if ms >= 1000 => Some(ttl),
        _ => {
            problems.value(
                "ttlMs",
                format!(
                    "must be between 1000 and {} milliseconds",
                    bounds.max_ttl_ms
                ),
            );
            None
        }
    }
}

/// Renew a session, and every lease on it.
///
/// The session lives `ttlMs` (left out: its own TTL) from now, and every
/// lease attached to it ends then too. `lost` lists the attached leases it
/// no longer holds (broken by an operator, past their hold bound, or
/// released); it is no longer attached to them.
#[utoipa::path(
    patch,
    path = ONE,
    operation_id = "renewSession",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id.", pattern = r"^s1\.[0-9a-f]{32}$", min_length = 35, max_length = 35),
        ("Lease-Owner-Token" = String, Header, description = "The session's secret.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32),
    ),
    request_body(content = SessionRenewBody, description = "The new TTL (optional)."),
    responses(
        (status = 200, description = "`renewed`.", body = SessionAnswer),
        (status = 400, description = "`invalid_request`: a malformed path, header or JSON body.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key has the scope on no purpose (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`lost`: the session ended (`session_ended`) or expired (`session_expired`), or none exists (`absent`).", body = SessionLostProblem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`.", body = BodyTimeoutProblem, content_type = "application/problem+json"),
        (status = 409, description = "`not_owner`: the token is not this session's secret.", body = SessionNotOwnerProblem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`.", body = PayloadTooLargeProblem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`.", body = UnsupportedMediaTypeProblem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: invalid values.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: retry (a renew is safe to repeat).", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds."))),
        (status = 504, description = "`indeterminate`: retry.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn renew(
    State(app): State<AppState>,
    path: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let result = async {
        app.authorize_any(&headers, Role::Write)?;
        let mut problems = Problems::default();
        let id = params_of(path, &mut problems).and_then(|p| path_id(&p, &mut problems));
        let token = secret(&headers, &mut problems);
        let body =
            extract::json_body::<SessionRenewBody>(&headers, body, app.body_limit, &mut problems)?;
        let ttl = body
            .as_ref()
            .and_then(|b| b.ttl_ms)
            .map(|ms| session_ttl(&app, ms, &mut problems));
        problems.finish()?;
        let (id, token) = (parsed(id)?, parsed(token)?);
        let ttl = match ttl {
            Some(t) => Some(parsed(t)?),
            None => None,
        };
        Ok::<_, ApiError>(respond(&app.service.renew_session(&id, &token, ttl).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// End a session.
///
/// Ends it at once and releases every lease on it (their waiters wake; a
/// lease's own lock-delay does not start: a release ends it).
#[utoipa::path(
    delete,
    path = ONE,
    operation_id = "endSession",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id.", pattern = r"^s1\.[0-9a-f]{32}$", min_length = 35, max_length = 35),
        ("Lease-Owner-Token" = String, Header, description = "The session's secret.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32),
    ),
    responses(
        (status = 200, description = "`ended` (`released` leases), or `already_absent`.", body = SessionAnswer),
        (status = 400, description = "`invalid_request`: a malformed path or header.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key has the scope on no purpose (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 409, description = "`not_owner`: the token is not this session's secret.", body = SessionNotOwnerProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: retry.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds."))),
        (status = 504, description = "`indeterminate`: retry.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn end(
    State(app): State<AppState>,
    path: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authorize_any(&headers, Role::Write)?;
        let mut problems = Problems::default();
        let id = params_of(path, &mut problems).and_then(|p| path_id(&p, &mut problems));
        let token = secret(&headers, &mut problems);
        problems.finish()?;
        let (id, token) = (parsed(id)?, parsed(token)?);
        Ok::<_, ApiError>(respond(&app.service.end_session(&id, &token).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// Query of `GET /sessions/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    limit: Option<u64>,
    cursor: Option<String>,
}

/// Read a session.
///
/// The session (never its secret) and a page of its leases, in the order
/// they were attached.
#[utoipa::path(
    get,
    path = ONE,
    operation_id = "readSession",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id.", pattern = r"^s1\.[0-9a-f]{32}$", min_length = 35, max_length = 35),
        ("limit" = Option<u64>, Query, description = "Leases per page, 1 to 1000 (left out: 100).", minimum = 1, maximum = 1000),
        ("cursor" = Option<String>, Query, description = "`nextCursor` of the previous page.", pattern = r"^[0-9]{1,9}$"),
    ),
    responses(
        (status = 200, description = "`session`.", body = SessionAnswer),
        (status = 400, description = "`invalid_request`: a malformed path or query.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key has the scope on no purpose (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`lost`: the session ended, expired or never was.", body = SessionLostProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds."))),
    ),
    security((), ("apiKey" = []))
)]
pub async fn read(
    State(app): State<AppState>,
    path: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authorize_any(&headers, Role::Read)?;
        let mut problems = Problems::default();
        let id = params_of(path, &mut problems).and_then(|p| path_id(&p, &mut problems));
        let q: Option<PageQuery> =
            serde_urlencoded_query(query.as_deref().unwrap_or(""), &mut problems);
        let limit = q.as_ref().and_then(|q| q.limit).unwrap_or(100);
        if !(1..=1000).contains(&limit) {
            problems.shape("limit", "must be between 1 and 1000");
        }
        let offset = match q.as_ref().and_then(|q| q.cursor.as_deref()) {
            None => 0,
            Some(c) => match c.parse::<u64>() {
                Ok(n) if c.len() <= 9 && c.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => {
                    problems.shape("cursor", "must be a nextCursor this service gave");
                    0
                }
            },
        };
        problems.finish()?;
        let id = parsed(id)?;
        Ok::<_, ApiError>(respond(&app.service.get_session(&id, offset, limit).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// Parses a query string as `T` (no external decoder: the two members are
/// plain numbers and a cursor).
fn serde_urlencoded_query<T: serde::de::DeserializeOwned>(
    query: &str,
    problems: &mut Problems,
) -> Option<T> {
    let mut map = serde_json::Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let value = match v.parse::<u64>() {
            Ok(n) if k == "limit" && v.bytes().all(|b| b.is_ascii_digit()) => {
                serde_json::Value::from(n)
            }
            _ => serde_json::Value::from(v),
        };
        if map.insert(k.to_owned(), value).is_some() {
            problems.shape(k, "is given twice");
        }
    }
    match serde_json::from_value(serde_json::Value::Object(map)) {
        Ok(q) => Some(q),
        Err(e) => {
            problems.shape("query", e.to_string());
            None
        }
    }
}

/// Acquire a lease on a session.
///
/// As `PUT /leases/{purpose}/{digest}`, but the lease has no TTL of its
/// own: it ends when the session does (renewing the session renews it,
/// ending the session releases it). `Lease-Owner-Token` is the session's
/// secret; `Lease-Operation-Id` is this lease's own. Each lease keeps its
/// own fencing token, limit, mode, wait and queue place.
#[utoipa::path(
    put,
    path = LEASE,
    operation_id = "acquireSessionLease",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id.", pattern = r"^s1\.[0-9a-f]{32}$", min_length = 35, max_length = 35),
        ("purpose" = String, Path, description = "What the lease is for.", pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63),
        ("digest" = String, Path, description = "The resource digest.", pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67),
        ("Lease-Owner-Token" = String, Header, description = "The session's secret.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32),
        ("Lease-Operation-Id" = String, Header, description = "This lease's operation id.",
            pattern = r"^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128),
    ),
    request_body(content = SessionAcquireBody, description = "As an acquire's body, without `ttlMs`."),
    responses(
        (status = 201, description = "`acquired`.", body = Acquired),
        (status = 200, description = "`replayed_same_operation`.", body = ReplayedSameOperation),
        (status = 400, description = "`invalid_request`: a malformed path, header or JSON body.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the key may not write this purpose.", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`lost`: the session ended, expired or never was.", body = SessionLostProblem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`.", body = BodyTimeoutProblem, content_type = "application/problem+json"),
        (status = 409, description = "As an acquire's 409 (`contended`, `owner_operation_conflict`, `limit_mismatch`), or `not_owner` (the token is not the session's secret), or `session_full`.", body = SessionAcquireConflict, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`.", body = PayloadTooLargeProblem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`.", body = UnsupportedMediaTypeProblem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: invalid values.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: not applied.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds."))),
        (status = 504, description = "`indeterminate`: retry with the same attempt.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn acquire(
    State(app): State<AppState>,
    path: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let params = params_of(path, &mut problems);
        let id = params.as_ref().and_then(|p| path_id(p, &mut problems));
        let resource = params
            .and_then(|p| super::extract::path_resource(RawPath::Routed(Ok(p)), &mut problems));
        let attempt = extract::attempt(&headers, true, &mut problems);
        let body = extract::json_body::<SessionAcquireBody>(
            &headers,
            body,
            app.body_limit,
            &mut problems,
        )?;
        let bounds = app.service.bounds();
        let request = body.as_ref().and_then(|b| {
            let wait = bounds
                .wait(b.wait_ms)
                .map_err(|m| problems.value("waitMs", m))
                .ok();
            let limit = LeaseShape::limit(b.limit.unwrap_or(1))
                .map_err(|m| problems.value("limit", m))
                .ok();
            let lock_delay_ms = LeaseShape::lock_delay(b.lock_delay_ms.unwrap_or(0))
                .map_err(|m| problems.value("lockDelayMs", m))
                .ok();
            let max_hold_ms = match b.max_hold_ms {
                None => Some(None),
                Some(ms) => bounds
                    .max_hold(ms)
                    .map_err(|m| problems.value("maxHoldMs", m))
                    .ok()
                    .map(Some),
            };
            Some(AcquireRequest {
                ttl: bounds.max_ttl(),
                wait: wait?,
                holder: b.holder.clone(),
                shape: LeaseShape {
                    limit: limit?,
                    mode: b.mode.unwrap_or_default(),
                    lock_delay_ms: lock_delay_ms?,
                },
                max_hold_ms: max_hold_ms?,
                session: None,
            })
        });
        problems.finish()?;
        let (id, resource, attempt, request) = (
            parsed(id)?,
            parsed(resource)?,
            parsed(attempt)?,
            parsed(request)?,
        );
        app.authorize(&headers, &resource, Role::Write)?;
        let answer = app
            .service
            .acquire_on_session(&resource, &attempt, &id, &request)
            .await;
        Ok::<_, ApiError>(match answer {
            Ok(SessionAcquire::Lease(outcome)) => respond_one(&outcome),
            Ok(SessionAcquire::Session(outcome)) => respond_one(&outcome),
            Err(failure) => respond_one(&failure),
        })
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// Release a lease of a session.
///
/// Releases it (as `DELETE /leases/{purpose}/{digest}`) and takes it off
/// the session.
#[utoipa::path(
    delete,
    path = LEASE,
    operation_id = "releaseSessionLease",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id.", pattern = r"^s1\.[0-9a-f]{32}$", min_length = 35, max_length = 35),
        ("purpose" = String, Path, description = "What the lease is for.", pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63),
        ("digest" = String, Path, description = "The resource digest.", pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67),
        ("Lease-Owner-Token" = String, Header, description = "The session's secret.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32),
        ("Lease-Operation-Id" = String, Header, description = "This lease's operation id.",
            pattern = r"^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128),
    ),
    responses(
        (status = 200, description = "`released` or `already_absent`.", body = ReleaseSuccess),
        (status = 400, description = "`invalid_request`: a malformed path or header.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the key may not write this purpose.", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 409, description = "`not_owner`: someone else holds it, or the token is not the session's secret.", body = NotOwnerProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds."))),
        (status = 504, description = "`indeterminate`: retry.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn release(
    State(app): State<AppState>,
    path: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let params = params_of(path, &mut problems);
        let id = params.as_ref().and_then(|p| path_id(p, &mut problems));
        let resource = params
            .and_then(|p| super::extract::path_resource(RawPath::Routed(Ok(p)), &mut problems));
        let attempt = extract::attempt(&headers, true, &mut problems);
        problems.finish()?;
        let (id, resource, attempt) = (parsed(id)?, parsed(resource)?, parsed(attempt)?);
        app.authorize(&headers, &resource, Role::Write)?;
        if !id.is_secret(&attempt.owner_token) {
            return Ok(respond_one(&SessionOutcome::NotOwner));
        }
        Ok::<_, ApiError>(respond(
            &app.service
                .release_session_lease(&id, &resource, &attempt)
                .await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}
