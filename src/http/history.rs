//! `GET /leases/{purpose}/{digest}/history`: the newest changes of a
//! resource (docs/design.md §17).

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use utoipa::ToSchema;

use super::app::AppState;
use super::auth::Role;
use super::extract::{path_resource, Headers, Problems, RawPath};
use super::list::percent_decode;
use super::problem::{respond, Answer, ApiError};
use crate::domain::{History, HistoryBound, HistoryItem, HistoryLimit};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    ForbiddenProblem, HeadersTooLargeProblem, InvalidRequestProblem, NotFoundProblem,
    ServiceUnavailable, UnauthorizedProblem,
};

/// The route template (also its metric label).
pub const ROUTE: &str = "/leases/{purpose}/{digest}/history";

/// `GET /leases/{purpose}/{digest}/history`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(history))
}

/// The outcome tag.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryTag {
    /// `history`.
    History,
}

/// `history` (200): the newest changes of a resource, newest first (in
/// the order the store wrote them).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "history",
    "entries": [
        {"event": "released", "at": "2026-12-04T13:05:09.870Z", "fencingToken": 1764853500123456_u64,
         "version": "3.0", "holder": "worker-7:8080"},
        {"event": "acquired", "at": "2026-12-04T13:05:00.123Z", "fencingToken": 1764853500123456_u64,
         "version": "3.1", "holder": "worker-7:8080"}
    ]
}))]
pub struct HistoryAnswer {
    #[schema(inline)]
    pub outcome: HistoryTag,
    /// At most `limit` entries, newest first; empty when the store kept
    /// none (never held, or nothing within the age bound).
    pub entries: Vec<HistoryItem>,
}

impl Answer for History {
    fn status(&self) -> axum::http::StatusCode {
        axum::http::StatusCode::OK
    }
}

/// Read a resource's history.
///
/// The newest changes of the resource, newest first: `acquired`,
/// `released`, `expired`, `holder_changed`, `lock_delay` and `revoked`,
/// each with its time (the store's clock), fencing token, holder label and
/// the resource's version after it. Expiry is lazy: an `expired` entry is
/// written by the next store call on the resource that finds the expired
/// permit (an acquire or release), with the permit's expiry as its time
/// (or, marked `noticed`, the time it was found, when the store had
/// already dropped the permit). Kept per resource: the newest 100 entries
/// and one hour by default (`LEASEHOLD_HISTORY_ENTRIES`,
/// `LEASEHOLD_HISTORY_MAX_AGE_MS`). Needs the `read` scope.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "leaseHistory",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource digest.",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("limit" = Option<u16>, Query, nullable = false, description = "Most entries returned, 1 to the entries the service keeps per resource (`LEASEHOLD_HISTORY_ENTRIES`, 100 by default); 20 when left out (or fewer, when it keeps fewer).",
            minimum = 1, maximum = 100, example = 20),
    ),
    responses(
        (status = 200, description = "`history`: the newest changes, newest first.", body = HistoryAnswer),
        (status = 400, description = "`invalid_request`: a malformed path parameter or `limit`.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `read` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: the path matched no route.", body = NotFoundProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: nothing was read. Retry later.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
    ),
    security((), ("apiKey" = []))
)]
pub async fn history(
    State(app): State<AppState>,
    path: RawPath,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let resource = path_resource(path, &mut problems);
        let bound = app.service.history_bound();
        let limit = parse_limit(query.as_deref(), bound, &mut problems);
        problems.finish()?;
        let resource = resource.ok_or(ApiError::Internal)?;
        app.authorize(&headers, &resource, Role::Read)?;
        let limit = limit.unwrap_or_else(|| HistoryLimit::default_for(bound));
        Ok::<_, ApiError>(respond(&app.service.history(&resource, limit).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// `limit` from the query string (other parameters are ignored); given
/// twice, empty, not a whole number in 1 ..= the bound: refused, naming it.
fn parse_limit(
    raw: Option<&str>,
    bound: HistoryBound,
    problems: &mut Problems,
) -> Option<HistoryLimit> {
    let mut given = Vec::new();
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode(name).as_deref() == Some("limit") {
            given.push(percent_decode(value));
        }
    }
    match given.as_slice() {
        [] => None,
        [Some(one)] => {
            let limit = HistoryLimit::parse(one, bound);
            if limit.is_none() {
                problems.shape(
                    "limit",
                    format!("must be a whole number from 1 to {}", bound.entries),
                );
            }
            limit
        }
        [None] => {
            problems.shape("limit", "is not valid percent-encoded UTF-8");
            None
        }
        _ => {
            problems.shape("limit", "is given more than once");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_validated_by_name() {
        let bound = HistoryBound::default();
        let mut problems = Problems::default();
        let got = parse_limit(Some("limit=7&other=x"), bound, &mut problems);
        assert!(problems.finish().is_ok());
        assert_eq!(got.map(HistoryLimit::get), Some(7));
        let mut problems = Problems::default();
        assert_eq!(parse_limit(None, bound, &mut problems), None);
        assert!(problems.finish().is_ok());
        for bad in [
            "limit=0",
            "limit=",
            "limit=101",
            "limit=1&limit=2",
            "limit=%ff",
            "limit=x",
        ] {
            let mut problems = Problems::default();
            parse_limit(Some(bad), bound, &mut problems);
            assert!(problems.finish().is_err(), "{bad}");
        }
    }
}
