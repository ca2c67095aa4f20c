//! `/livez`, `/readyz`, `/metrics`.

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::app::AppState;
use super::problem::problem_response;
use super::problem_table::{ProblemType, Words};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{ForbiddenProblem, NotReadyProblem, UnauthorizedProblem};
use crate::telemetry::POOL_CONNECTIONS;

/// The liveness route (also its metric label).
pub const LIVEZ: &str = "/livez";

/// The readiness route (also its metric label).
pub const READYZ: &str = "/readyz";

/// The metrics route (also its metric label), on the API listener or its own.
pub const METRICS: &str = "/metrics";

/// `/livez`, `/readyz`, and `/metrics` when it is served on the API listener.
pub(super) fn routes(serve_metrics: bool) -> Router<AppState> {
    let routes = Router::new()
        .route(LIVEZ, get(livez))
        .route(READYZ, get(readyz));
    if serve_metrics {
        routes.route(METRICS, get(metrics_on_api))
    } else {
        routes
    }
}

/// `/metrics` alone, for the separate metrics listener.
pub(super) fn metrics_routes() -> Router<AppState> {
    Router::new().route(METRICS, get(metrics))
}

/// Liveness answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"status": "ok"}))]
pub struct Live {
    #[schema(value_type = LiveStatus, inline)]
    pub status: &'static str,
}

/// Always `ok` while the process serves requests.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LiveStatus {
    /// The process serves requests.
    Ok,
}

/// Readiness answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"status": "ready", "topology": "standalone", "writable": true, "waiters": 0, "watchers": 0, "auth": "keys"}))]
pub struct Ready {
    #[schema(value_type = ReadyStatus, inline)]
    pub status: &'static str,
    /// `memory`, `standalone`, `cluster` or `sentinel`.
    #[schema(example = "standalone")]
    pub topology: &'static str,
    /// Whether a writable primary answered within the command timeout.
    pub writable: bool,
    /// Acquire requests waiting server-side on this instance.
    #[schema(minimum = 0, example = 0)]
    pub waiters: usize,
    /// Watches (long-polls and event streams) open on this instance.
    #[schema(minimum = 0, example = 0)]
    pub watchers: usize,
    // (No doc comment here: utoipa would wrap the inline enum in an
    // `allOf` with an object; the enum's own doc describes it.)
    #[schema(value_type = AuthMode, inline)]
    pub auth: &'static str,
}

/// `keys` when API keys are configured; `open` when anyone who can reach
/// the service may use every purpose (docs/design.md §14).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// API keys are required.
    Keys,
    /// No key is configured: the API is open.
    Open,
}

/// `ready`: a writable primary answered within the command timeout.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadyStatus {
    /// A writable primary answered within the command timeout.
    Ready,
}

/// Liveness probe.
///
/// Answers 200 while the process serves requests; never touches the store.
#[utoipa::path(
    get,
    path = LIVEZ,
    operation_id = "livez",
    tag = "operations",
    responses((status = 200, description = "The process serves requests.", body = Live, example = json!({"status": "ok"}))),
    security(())
)]
pub async fn livez() -> Response {
    axum::Json(Live { status: "ok" }).into_response()
}

/// Readiness probe.
///
/// 200 when the store answers as a writable primary within the command
/// timeout (always, for the embedded store); 503 `not_ready` otherwise.
#[utoipa::path(
    get,
    path = READYZ,
    operation_id = "readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready to serve leases.", body = Ready, example = json!({"status": "ready", "topology": "memory", "writable": true, "waiters": 0, "watchers": 0, "auth": "keys"})),
        (status = 503, description = "`not_ready`: the store is not reachable or not writable.", body = NotReadyProblem, content_type = "application/problem+json"),
    ),
    security(())
)]
pub async fn readyz(State(app): State<AppState>) -> Response {
    let r = app.service.store().readiness().await;
    if r.writable {
        return axum::Json(Ready {
            status: "ready",
            topology: r.topology,
            writable: true,
            waiters: app.service.waiters().waiting(),
            watchers: app.service.waiters().watch().watchers(),
            auth: app.api_keys.mode(),
        })
        .into_response();
    }
    not_ready(r.topology, app.service.waiters().waiting(), r.detail)
}

/// 503 problem+json `not_ready`: the store's reason as the detail, or the
/// usual one when it gave none.
pub fn not_ready(topology: &str, waiters: usize, reason: Option<String>) -> Response {
    let mut members = Map::new();
    members.insert("topology".into(), Value::from(topology));
    members.insert("writable".into(), Value::Bool(false));
    members.insert("waiters".into(), Value::from(waiters));
    let Words { title, detail } = ProblemType::NotReady.words();
    problem_response(
        ProblemType::NotReady.status(),
        &ProblemType::NotReady.outcome(),
        title,
        reason.as_deref().unwrap_or(detail),
        members,
    )
}

/// Prometheus metrics.
///
/// The Prometheus text exposition format (0.0.4): lease operations by verb,
/// outcome and purpose, operation and store latency histograms, pool
/// connections and waits, current waiters, HTTP requests by method, route
/// template and status, and build info. Served here unless
/// `LEASEHOLD_METRICS_LISTEN` moves it to a separate listener. With API keys,
/// only a key with the `metrics` scope reads it here.
#[utoipa::path(
    get,
    path = METRICS,
    operation_id = "metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text format.", content_type = "text/plain; version=0.0.4; charset=utf-8", body = String,
        example = "# HELP leasehold_build_info Build information; the value is always 1.\n# TYPE leasehold_build_info gauge\nleasehold_build_info{version=\"0.1.0\"} 1\n"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key lacks the `metrics` scope.", body = ForbiddenProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn metrics_on_api(State(app): State<AppState>, headers: HeaderMap) -> Response {
    // Metrics name every purpose and its traffic: with API keys, only a key
    // with the `metrics` scope reads them here (the separate metrics
    // listener, for a scraper inside the cluster, needs none).
    if let Err(refused) = app.api_keys.authorize_metrics(&headers) {
        return refused.into_response();
    }
    metrics(State(app)).await
}

/// `/metrics` on the separate metrics listener.
pub async fn metrics(State(app): State<AppState>) -> Response {
    if let Some((open, idle)) = app.service.store().pool_state() {
        metrics::gauge!(POOL_CONNECTIONS, "state" => "in_use")
            .set(f64::from(open.saturating_sub(idle)));
        metrics::gauge!(POOL_CONNECTIONS, "state" => "idle").set(f64::from(idle));
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}
