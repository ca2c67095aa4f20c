//! `/console`: a page for operators, served from the binary. Its HTML, CSS
//! and JavaScript are embedded with `include_str!`; the page fetches
//! nothing but this service's own API, by relative URLs (so it works
//! behind a path prefix and over HTTPS), under a `Content-Security-Policy`
//! that allows only `'self'`. An API key, when the service wants one, is
//! entered once and kept in the tab's `sessionStorage`. [`purposes`] is
//! the small read-only endpoint the page starts from.

pub mod purposes;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::app::AppState;

/// The page's route (also its metric label).
pub const ROUTE: &str = "/console";
/// The script's route (relative to the page: `console/app.js`).
pub const SCRIPT: &str = "/console/app.js";
/// The style sheet's route (relative to the page: `console/app.css`).
pub const STYLE: &str = "/console/app.css";

/// Every route this module serves, each its own metric label.
pub const ROUTES: [&str; 4] = [ROUTE, SCRIPT, STYLE, purposes::ROUTE];

/// What the console's answers may load and run: only this service's own
/// script, styles, images and API; no inline script or style, no frames,
/// no form posted elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// `GET /console`, its script and style sheet, and `GET /purposes`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(ROUTE, get(page))
        .route(SCRIPT, get(script))
        .route(STYLE, get(style))
        .merge(purposes::routes())
}

/// An embedded asset with the console's security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Operator console.
///
/// A self-contained page (its script and style sheet served beside it, no
/// CDN) that lists the purposes the API key may read, the live leases of
/// one with their holders, permits, remaining time and lock-delay, their
/// waiters and the purpose's longest waits, a lease's history, and for
/// `admin` keys a break button with a confirmation. Sent with a `Content-Security-Policy` allowing only
/// `'self'`.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "console",
    tag = "operations",
    responses((status = 200, description = "An HTML page.", content_type = "text/html; charset=utf-8", body = String,
        headers(("Content-Security-Policy" = String, description = "Allows only `'self'`.")),
        example = "<!doctype html><title>leasehold console</title>")),
    security(())
)]
pub async fn page() -> Response {
    asset(
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    )
}

/// The console's script.
async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    )
}

/// The console's style sheet.
async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("assets/app.css"))
}
