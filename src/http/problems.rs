//! `/problems/{type}`: one page per problem type, what the `type` member of
//! every problem+json answer points at.
//!
//! The `type` of a problem answer is the relative reference
//! `/problems/<outcome with dashes>` (RFC 9457 §3.1.1: resolved against the
//! request's URI, so it names a page on the very service that answered,
//! whatever host or port a deployment uses). [`ProblemType`] lists every
//! problem the service answers; each has a short HTML page saying what it
//! means and what a caller should do, in words from
//! [`super::problem_table`].

use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::app::AppState;
use super::problem::ApiError;
use super::problem::PREFIX;
use super::problem_table::{ProblemType, Row};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::NotFoundProblem;

/// The pages' route template (also its metric label).
pub const ROUTE: &str = "/problems/{type}";

/// `GET /problems/{type}`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(page))
}

/// A problem type's page, as HTML. Static text only: nothing from the
/// request is echoed.
pub fn html(problem: ProblemType) -> String {
    let Row {
        slug,
        statuses,
        title,
        meaning,
        action,
        ..
    } = problem.row();
    let statuses = statuses
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let outcome = problem.outcome();
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

/// A problem type's page.
///
/// What the `type` member of a problem answer points at: what the problem
/// means and what to do about it, as a small self-contained HTML page.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "problemType",
    tag = "operations",
    params(("type" = ProblemType, Path, description = "The problem type: the `outcome` of a problem answer, with dashes. A problem answer's `type` member is this page's path.")),
    responses(
        (status = 200, description = "An HTML page describing the problem type.", content_type = "text/html; charset=utf-8", body = String,
            example = json!(format!("<!doctype html><title>contended: {} | leasehold</title>", ProblemType::Contended.row().title))),
        (status = 404, description = "`not_found`: no such problem type.", body = NotFoundProblem, content_type = "application/problem+json"),
    ),
    security(())
)]
pub async fn page(uri: Uri) -> Response {
    let slug = uri.path().strip_prefix(PREFIX).unwrap_or("");
    match ProblemType::from_slug(slug) {
        Some(problem) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html(problem),
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
            assert!(html(t).contains(&format!("<code>{}</code>", t.slug().replace('-', "_"))));
        }
        assert_eq!(ProblemType::from_slug("contended-"), None);
        assert_eq!(ProblemType::from_slug(""), None);
    }
}
