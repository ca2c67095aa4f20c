//! `GET /leases/{purpose}/{digest}/waiters`: who waits for a resource, in
//! the order they will acquire (docs/design.md §12), for people and the
//! console. Never an owner token or operation id.

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
use crate::domain::{QueueInstance, Waiter, Waiters, WaitersLimit, WAITERS_MAX};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    ForbiddenProblem, HeadersTooLargeProblem, InvalidRequestProblem, NotFoundProblem,
    ServiceUnavailable, UnauthorizedProblem,
};

/// The route template (also its metric label).
pub const ROUTE: &str = "/leases/{purpose}/{digest}/waiters";

/// `GET /leases/{purpose}/{digest}/waiters`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(waiters))
}

/// The outcome tag.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitersTag {
    /// `waiters`.
    Waiters,
}

/// `waiters` (200): who waits for a resource, first in line first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "waiters",
    "waiting": 2,
    "complete": true,
    "waiters": [
        {"position": 1, "instance": "9f2c41d07a3b8e65", "mode": "exclusive",
         "since": "2026-12-05T20:14:03.120Z", "waitedMs": 12004, "holder": "worker-9"},
        {"position": 2, "instance": "03b7aa91c2d4e5f6", "mode": "exclusive",
         "since": "2026-12-05T20:14:09.877Z", "waitedMs": 5247}
    ],
    "instances": [{"instance": "9f2c41d07a3b8e65", "aliveForMs": 1500, "heartbeatAgeMs": 500},
                  {"instance": "03b7aa91c2d4e5f6", "aliveForMs": 900, "heartbeatAgeMs": 1100}]
}))]
pub struct WaitersAnswer {
    #[schema(inline)]
    pub outcome: WaitersTag,
    /// How many wait: the live entries among the first 1 000 of the queue.
    #[schema(minimum = 0, maximum = 1000)]
    pub waiting: u32,
    /// False when the queue holds more than the 1 000 entries read.
    pub complete: bool,
    /// The first `limit` waiters, in the order they will acquire.
    #[schema(max_items = 100)]
    pub waiters: Vec<Waiter>,
    /// The instances with waiters here (among the entries read, in queue
    /// order, at most 64) and how long their last heartbeat keeps them
    /// queued (empty on the embedded store: one instance).
    #[schema(max_items = 64)]
    pub instances: Vec<QueueInstance>,
}

impl Answer for Waiters {
    fn status(&self) -> axum::http::StatusCode {
        axum::http::StatusCode::OK
    }
}

/// Read a resource's waiters.
///
/// The waiters of the resource's fair queue, first in line first: each
/// with its position, the instance it waits on, the mode it asks for,
/// when it took its place and how long it has waited (the store's clock),
/// and its holder label when its acquire gave one (known for waiters of a
/// plain lease). `waiting` counts them all (among the first 1 000
/// entries), and `instances` lists the instances they wait on with their
/// heartbeats (the first 64 in queue order). Never an owner token or
/// operation id. Reads at most 1 000 entries. Needs the `read` scope.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "leaseWaiters",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource digest.",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("limit" = Option<u16>, Query, nullable = false, description = "Most waiters returned, 1 to 100; 20 when left out.",
            minimum = 1, maximum = 100, example = 20),
    ),
    responses(
        (status = 200, description = "`waiters`: the queue, first in line first.", body = WaitersAnswer),
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
pub async fn waiters(
    State(app): State<AppState>,
    path: RawPath,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let resource = path_resource(path, &mut problems);
        let limit = parse_limit(query.as_deref(), &mut problems);
        problems.finish()?;
        let resource = resource.ok_or(ApiError::Internal)?;
        app.authorize(&headers, &resource, Role::Read)?;
        let limit = limit.unwrap_or_default();
        Ok::<_, ApiError>(respond(&app.service.read_queue(&resource, limit).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// `limit` from the query string (other parameters are ignored); given
/// twice, empty, not a whole number in 1 ..= 100: refused, naming it.
fn parse_limit(raw: Option<&str>, problems: &mut Problems) -> Option<WaitersLimit> {
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
            let limit = WaitersLimit::parse(one);
            if limit.is_none() {
                problems.shape(
                    "limit",
                    format!("must be a whole number from 1 to {WAITERS_MAX}"),
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
        let mut problems = Problems::default();
        let got = parse_limit(Some("limit=7&other=x"), &mut problems);
        assert!(problems.finish().is_ok());
        assert_eq!(got.map(WaitersLimit::get), Some(7));
        for bad in [
            "limit=0",
            "limit=",
            "limit=101",
            "limit=1&limit=2",
            "limit=%ff",
        ] {
            let mut problems = Problems::default();
            parse_limit(Some(bad), &mut problems);
            assert!(problems.finish().is_err(), "{bad}");
        }
    }
}
