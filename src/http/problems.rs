//! `/problems/{type}`: one page per problem type, what the `type` member of
//! every problem+json answer points at.
//!
//! The `type` of a problem answer is the relative reference
//! `/problems/<outcome with dashes>` (RFC 9457 §3.1.1: resolved against the
//! request's URI, so it names a page on the very service that answered,
//! whatever host or port a deployment uses). [`ProblemType`] lists every
//! problem the service answers; each has a short HTML page saying what it
//! means and what a caller should do.

use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::problem::ApiError;
use super::problem::PREFIX;
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::openapi::NotFoundProblem;

/// A problem type: the `outcome` of a problem answer, with dashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemType {
    /// `invalid_request` (400, 422).
    InvalidRequest,
    /// `unauthorized` (401).
    Unauthorized,
    /// `forbidden` (403).
    Forbidden,
    /// `not_found` (404).
    NotFound,
    /// `method_not_allowed` (405).
    MethodNotAllowed,
    /// `payload_too_large` (413).
    PayloadTooLarge,
    /// `unsupported_media_type` (415).
    UnsupportedMediaType,
    /// `headers_too_large` (431).
    HeadersTooLarge,
    /// `owner_operation_conflict` (409).
    OwnerOperationConflict,
    /// `contended` (409).
    Contended,
    /// `limit_mismatch` (409).
    LimitMismatch,
    /// `lost` (404, 409).
    Lost,
    /// `not_owner` (409).
    NotOwner,
    /// `unavailable` (503).
    Unavailable,
    /// `overloaded` (503).
    Overloaded,
    /// `request_timeout` (503).
    RequestTimeout,
    /// `not_ready` (503).
    NotReady,
    /// `indeterminate` (504).
    Indeterminate,
    /// `internal` (500).
    Internal,
}

/// What a problem type's page says.
struct Page {
    statuses: &'static str,
    title: &'static str,
    meaning: &'static str,
    action: &'static str,
}

impl ProblemType {
    /// Every problem type, in the order of the index.
    pub const ALL: [Self; 19] = [
        Self::InvalidRequest,
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::HeadersTooLarge,
        Self::OwnerOperationConflict,
        Self::Contended,
        Self::LimitMismatch,
        Self::Lost,
        Self::NotOwner,
        Self::Unavailable,
        Self::Overloaded,
        Self::RequestTimeout,
        Self::NotReady,
        Self::Indeterminate,
        Self::Internal,
    ];

    /// The path segment: the outcome with dashes.
    pub fn slug(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid-request",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not-found",
            Self::MethodNotAllowed => "method-not-allowed",
            Self::PayloadTooLarge => "payload-too-large",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::HeadersTooLarge => "headers-too-large",
            Self::OwnerOperationConflict => "owner-operation-conflict",
            Self::Contended => "contended",
            Self::LimitMismatch => "limit-mismatch",
            Self::Lost => "lost",
            Self::NotOwner => "not-owner",
            Self::Unavailable => "unavailable",
            Self::Overloaded => "overloaded",
            Self::RequestTimeout => "request-timeout",
            Self::NotReady => "not-ready",
            Self::Indeterminate => "indeterminate",
            Self::Internal => "internal",
        }
    }

    /// The problem type a slug names.
    pub fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.slug() == slug)
    }

    fn page(self) -> Page {
        let page = |statuses, title, meaning, action| Page {
            statuses,
            title,
            meaning,
            action,
        };
        match self {
            Self::InvalidRequest => page(
                "400, 422",
                "Invalid request",
                "A path parameter, an attempt header or the JSON body is malformed (400), or well-formed JSON holds an invalid value: a TTL or wait out of bounds, a wrong type, an unknown or missing member (422). Nothing was done.",
                "Read <code>errors</code>: each entry names a field (<code>purpose</code>, <code>digest</code>, <code>Lease-Owner-Token</code>, <code>ttlMs</code>, <code>body</code>, ...) and what is wrong with it. Fix the request; retrying it unchanged gives the same answer.",
            ),
            Self::Unauthorized => page(
                "401",
                "Unauthorized",
                "The service runs with API keys and the request carried no valid one.",
                "Send <code>Authorization: Bearer &lt;key&gt;</code> with a key from the service's keys file.",
            ),
            Self::Forbidden => page(
                "403",
                "Forbidden",
                "The API key is valid but may not use this lease's purpose, or lacks the scope the route needs (the problem's <code>scope</code> member names it, e.g. <code>metrics</code>).",
                "Use a key allowed this purpose or scope, or ask the operator to grant it in the keys file.",
            ),
            Self::NotFound => page(
                "404",
                "Not found",
                "No route matches the path (for example an empty or extra path segment), or no such problem type page exists.",
                "Check the path against <a href=\"/openapi.json\">/openapi.json</a> or <a href=\"/docs\">/docs</a>.",
            ),
            Self::MethodNotAllowed => page(
                "405",
                "Method not allowed",
                "The route exists but not with this method.",
                "Check the methods of the route in <a href=\"/openapi.json\">/openapi.json</a>.",
            ),
            Self::PayloadTooLarge => page(
                "413",
                "Request body too large",
                "The request body is over the service's limit (16 KiB by default). Nothing was done.",
                "Send a smaller body; lease bodies are a few bytes.",
            ),
            Self::UnsupportedMediaType => page(
                "415",
                "Unsupported media type",
                "The request body is not declared as JSON. Nothing was done.",
                "Send the body with <code>Content-Type: application/json</code>.",
            ),
            Self::HeadersTooLarge => page(
                "431",
                "Request headers too large",
                "The request's header block (names and values) is over 16 KiB. Nothing was done.",
                "Send fewer or shorter headers.",
            ),
            Self::OwnerOperationConflict => page(
                "409",
                "Held by another operation of the same owner",
                "The owner token holds this lease for a different operation id. An operation never inherits another's lease.",
                "Finish or release the other operation's lease, or wait <code>retryAfterMs</code>. Use one attempt (owner token and operation id) per unit of work.",
            ),
            Self::Contended => page(
                "409",
                "Lease held by someone else",
                "Another owner holds the lease (or every permit of a counting lease, or holders of the other mode). Nothing was changed. <code>retryAfterMs</code> is the soonest holder expiry (or a short fallback); <code>waitedMs</code> is present when the request waited server-side. <code>reason</code>, when present: <code>lock_delay</code> (a holder's lease expired and its lock-delay runs for <code>retryAfterMs</code> more) or <code>queued</code> (waiters that started earlier go first).",
                "Retry after <code>retryAfterMs</code> (also in <code>Retry-After</code>, whole seconds), or send <code>waitMs</code> to wait server-side, in a fair queue, until it is your turn.",
            ),
            Self::LimitMismatch => page(
                "409",
                "Limit mismatch",
                "The resource is held as a counting lease with another <code>limit</code> than the one asked for. Every holder must ask with the same limit; <code>limit</code> carries the current one. Nothing was changed.",
                "Ask with the current <code>limit</code>, or wait until every holder has let go (then any limit starts afresh).",
            ),
            Self::Lost => page(
                "404, 409",
                "Lease lost",
                "A renew found that the caller no longer holds the lease: <code>reason: absent</code> (404) when no lease exists any more (it expired or was released), <code>reason: not_owner</code> (409) when someone else holds it now.",
                "Stop the work the lease protected, at once. Acquire again (with a new attempt) before resuming it; the new lease has a higher fencing token.",
            ),
            Self::NotOwner => page(
                "409",
                "Not the owner",
                "A release found the lease held by someone else. Nothing was changed.",
                "Nothing to release: the caller's lease ended earlier. Check that the attempt headers are the ones the lease was acquired with.",
            ),
            Self::Unavailable => page(
                "503",
                "Store unavailable",
                "The lease store could not be reached or refused the command (no connection, pool empty, a read-only or loading replica, out of memory). The command was definitely <em>not</em> applied.",
                "Retry after <code>retryAfterMs</code> (also in <code>Retry-After</code>), with the same attempt.",
            ),
            Self::Overloaded => page(
                "503",
                "Overloaded",
                "The service shed the request by its own admission limit (store calls in flight, or server-side waiters) before touching the store. Nothing was applied.",
                "Retry after <code>retryAfterMs</code> (also in <code>Retry-After</code>), with the same attempt.",
            ),
            Self::RequestTimeout => page(
                "503",
                "Request timed out",
                "The request took longer than the service's per-request timeout.",
                "Retry after <code>Retry-After</code>. For a lease verb whose effect may matter, inspect the lease or retry with the same attempt.",
            ),
            Self::NotReady => page(
                "503",
                "Not ready",
                "<code>/readyz</code>: the store did not answer as a writable primary within the command timeout.",
                "Route traffic to another instance until this one is ready; check the store.",
            ),
            Self::Indeterminate => page(
                "504",
                "Outcome unknown",
                "The command was sent to the store but no certain reply came: it may or may not have been applied. <code>operationId</code> names the operation.",
                "Inspect the lease with the same attempt headers, or retry with the same attempt: a retried acquire that had been applied answers <code>replayed_same_operation</code>, never a second lease.",
            ),
            Self::Internal => page(
                "500",
                "Internal error",
                "The service failed unexpectedly. The answer carries no internal detail; the failure was logged.",
                "Retry; report the request id (<code>X-Request-Id</code>) to the operator if it persists.",
            ),
        }
    }

    /// The page, as HTML. Static text only: nothing from the request is echoed.
    fn html(self) -> String {
        let Page {
            statuses,
            title,
            meaning,
            action,
        } = self.page();
        let slug = self.slug();
        let outcome = slug.replace('-', "_");
        format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{outcome}: {title} | leasehold</title>\
             <style>body{{font-family:system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem;line-height:1.5}}\
             code{{background:#f3f3f3;padding:0 .2em}}</style></head>\n<body>\n\
             <h1>{title}</h1>\n\
             <p><code>type</code>: <code>{PREFIX}{slug}</code>; <code>outcome</code>: <code>{outcome}</code>; status {statuses}.</p>\n\
             <h2>What happened</h2>\n<p>{meaning}</p>\n\
             <h2>What to do</h2>\n<p>{action}</p>\n\
             <p>Every problem answer is <code>application/problem+json</code> (RFC 9457) with <code>type</code>, \
             <code>title</code>, <code>status</code>, <code>detail</code>, <code>outcome</code> and the outcome's own members. \
             See <a href=\"/docs\">the API reference</a>.</p>\n</body></html>\n"
        )
    }
}

/// A problem type's page.
///
/// What the `type` member of a problem answer points at: what the problem
/// means and what to do about it, as a small self-contained HTML page.
#[utoipa::path(
    get,
    path = "/problems/{type}",
    operation_id = "problemType",
    tag = "operations",
    params(("type" = ProblemType, Path, description = "The problem type: the `outcome` of a problem answer, with dashes. A problem answer's `type` member is this page's path.")),
    responses(
        (status = 200, description = "An HTML page describing the problem type.", content_type = "text/html; charset=utf-8", body = String,
            example = "<!doctype html><title>contended: Lease held by someone else | leasehold</title>"),
        (status = 404, description = "`not_found`: no such problem type.", body = NotFoundProblem, content_type = "application/problem+json"),
    ),
    security(())
)]
pub async fn page(uri: Uri) -> Response {
    let slug = uri.path().strip_prefix(PREFIX).unwrap_or("");
    match ProblemType::from_slug(slug) {
        Some(problem) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            problem.html(),
        )
            .into_response(),
        None => ApiError::NotFound.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::problem::type_uri;

    #[test]
    fn slugs_are_the_outcomes_with_dashes_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for t in ProblemType::ALL {
            let json = serde_json::to_value(t).expect("serializes");
            assert_eq!(json, serde_json::json!(t.slug()), "serde name of {t:?}");
            assert_eq!(ProblemType::from_slug(t.slug()), Some(t));
            assert_eq!(
                type_uri(&t.slug().replace('-', "_")),
                format!("/problems/{}", t.slug())
            );
            assert!(seen.insert(t.slug()), "{t:?} twice");
            assert!(t
                .html()
                .contains(&format!("<code>{}</code>", t.slug().replace('-', "_"))));
        }
        assert_eq!(ProblemType::from_slug("contended-"), None);
        assert_eq!(ProblemType::from_slug(""), None);
    }
}
