//! `GET /leases/{purpose}`: list a purpose's leases, a page at a time.

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{RawPathParams, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use utoipa::ToSchema;

use super::app::AppState;
use super::auth::Role;
use super::extract::{Headers, Problems};
use super::problem::{respond, Answer, ApiError};
use crate::domain::{ListCursor, ListLimit, ListedLease, Listing, Purpose};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    ForbiddenProblem, HeadersTooLargeProblem, InvalidRequestProblem, NotFoundProblem,
    ServiceUnavailable, UnauthorizedProblem,
};

/// The route template (also its metric label).
pub const ROUTE: &str = "/leases/{purpose}";

/// `GET /leases/{purpose}`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(list))
}

/// The outcome tag.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListedTag {
    /// `listed`.
    Listed,
}

/// `listed` (200): one page of a purpose's leases. Never an owner token or
/// operation id.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "listed",
    "leases": [{"digest": "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                "holder": "worker-7:8080", "fencingToken": 1764686400000000_u64, "remainingMs": 12000,
                "ttlMs": 30000, "acquiredAt": "2026-12-03T14:55:00.123Z", "renewedAt": "2026-12-03T14:55:18.120Z"}],
    "nextCursor": "aW52b2ljZS1leHBvcnQvcy8wLzQ1YzM5ZWQ2MGY3ZTk5YjAvMTc"
}))]
pub struct Listed {
    #[schema(inline)]
    pub outcome: ListedTag,
    /// The leases of this page: at most `limit` (on Redis, more only when
    /// one SCAN call returned over 64 keys beyond it, rather than lose
    /// one), possibly fewer, even none, when the page's work budget ran out
    /// first; `nextCursor` says whether more may follow.
    pub leases: Vec<ListedLease>,
    /// Send it back as `cursor` for the next page; absent when the listing
    /// is complete. Opaque.
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 6144,
        pattern = "^[A-Za-z0-9_-]+$"
    )]
    pub next_cursor: Option<String>,
}

impl Answer for Listing {
    fn status(&self) -> axum::http::StatusCode {
        axum::http::StatusCode::OK
    }
}

/// The query of a listing, each parameter validated.
struct ListQuery {
    limit: Option<ListLimit>,
    cursor: Option<ListCursor>,
}

/// List leases.
///
/// One page of the leases held on `purpose`, each with its public record
/// (never an owner token or operation id). Page with `cursor`: send back
/// `nextCursor` until an answer has none. A lease held throughout a listing
/// is on at least one page, and on exactly one with the embedded store; on
/// Redis it can be on two when the keyspace shrank (many leases ended)
/// during the listing, so de-duplicate by `digest`. A lease gone before the
/// listing began is on none. Each page does bounded work: it may hold fewer
/// than `limit` leases, even none, and still carry `nextCursor`.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "listLeases",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the leases are for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("limit" = Option<u16>, Query, nullable = false, description = "Most leases in this page, 1 to 1000 (100 when left out).",
            minimum = 1, maximum = 1000, example = 100),
        ("cursor" = Option<String>, Query, nullable = false, description = "Where to continue: the previous page's `nextCursor`, unchanged. Left out: from the start.",
            min_length = 1, max_length = 6144, pattern = r"^[A-Za-z0-9_-]+$"),
    ),
    responses(
        (status = 200, description = "`listed`: one page of leases.", body = Listed),
        (status = 400, description = "`invalid_request`: a malformed purpose, `limit` or `cursor`.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `read` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: the path matched no route.", body = NotFoundProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: nothing was read. Retry later with the same cursor.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
    ),
    security((), ("apiKey" = []))
)]
pub async fn list(
    State(app): State<AppState>,
    path: Result<RawPathParams, RawPathParamsRejection>,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let purpose = match &path {
            Ok(params) => {
                let raw = params
                    .iter()
                    .find(|(name, _)| *name == "purpose")
                    .map_or("", |(_, value)| value);
                Purpose::parse(raw)
                    .map_err(|e| problems.shape("purpose", e.to_string()))
                    .ok()
            }
            Err(_) => {
                problems.shape("path", "path parameters must be valid UTF-8");
                None
            }
        };
        let query = parse_query(query.as_deref(), purpose.as_ref(), &mut problems);
        if query
            .cursor
            .as_ref()
            .is_some_and(|c| !app.service.accepts_cursor(c))
        {
            problems.shape(
                "cursor",
                "was issued by a service with another store (start over without a cursor)",
            );
        }
        problems.finish()?;
        let purpose = purpose.ok_or(ApiError::Internal)?;
        app.authorize_purpose(&headers, &purpose, Role::Read)?;
        let limit = query.limit.unwrap_or(ListLimit::DEFAULT);
        Ok::<_, ApiError>(respond(
            &app.service
                .list(&purpose, query.cursor.as_ref(), limit)
                .await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// `limit` and `cursor` from the query string; other parameters are
/// ignored. A parameter given twice, empty, or not percent-decodable to
/// UTF-8 is refused, naming it.
fn parse_query(raw: Option<&str>, purpose: Option<&Purpose>, problems: &mut Problems) -> ListQuery {
    let mut query = ListQuery {
        limit: None,
        cursor: None,
    };
    let (mut limit, mut cursor): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match (percent_decode(name).as_deref(), percent_decode(value)) {
            (Some("limit"), Some(v)) => limit.push(v),
            (Some("cursor"), Some(v)) => cursor.push(v),
            (Some("limit"), None) => problems.shape("limit", "is not valid percent-encoded UTF-8"),
            (Some("cursor"), None) => {
                problems.shape("cursor", "is not valid percent-encoded UTF-8")
            }
            _ => {}
        }
    }
    match limit.as_slice() {
        [] => {}
        [one] => {
            query.limit = ListLimit::parse(one)
                .map_err(|e| problems.shape("limit", e.to_string()))
                .ok();
        }
        _ => problems.shape("limit", "is given more than once"),
    }
    match cursor.as_slice() {
        [] => {}
        [one] => {
            // Without a valid purpose the cursor cannot be checked against it.
            if let Some(purpose) = purpose {
                query.cursor = ListCursor::parse(one, purpose)
                    .map_err(|e| problems.shape("cursor", e.to_string()))
                    .ok();
            }
        }
        _ => problems.shape("cursor", "is given more than once"),
    }
    query
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a
/// byte; `None` for a bad escape or bytes that are not UTF-8.
pub(super) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Db+c").as_deref(), Some("a-b c"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%4"), None);
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("%C3%A9").as_deref(), Some("é"));
    }

    #[test]
    fn query_parameters_are_validated_by_name() {
        let p = Purpose::parse("p").expect("purpose");
        let mut problems = Problems::default();
        let q = parse_query(Some("limit=7&other=x"), Some(&p), &mut problems);
        assert!(problems.finish().is_ok());
        assert_eq!(q.limit.map(ListLimit::get), Some(7));
        for bad in [
            "limit=0",
            "limit=",
            "limit=1&limit=2",
            "cursor=",
            "cursor=%ff",
            "cursor=abc",
        ] {
            let mut problems = Problems::default();
            parse_query(Some(bad), Some(&p), &mut problems);
            assert!(problems.finish().is_err(), "{bad}");
        }
    }
}
