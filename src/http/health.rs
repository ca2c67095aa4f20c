//! `/livez`, `/readyz`, `/metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use crate::telemetry::POOL_CONNECTIONS;

/// Liveness answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Live {
    /// Always `ok` while the process serves requests.
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// Readiness answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    /// `ready` or `not_ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// `memory`, `standalone`, `cluster` or `sentinel`.
    #[schema(example = "standalone")]
    pub topology: &'static str,
    /// Whether a writable primary answered within the command timeout.
    pub writable: bool,
    /// Why not ready (never contains credentials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Acquire requests waiting server-side on this instance.
    pub waiters: usize,
}

/// GET /livez
pub async fn livez() -> Response {
    axum::Json(Live { status: "ok" }).into_response()
}

/// GET /readyz
pub async fn readyz(State(app): State<AppState>) -> Response {
    let r = app.service.store().readiness().await;
    let status = if r.writable {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Ready {
        status: if r.writable { "ready" } else { "not_ready" },
        topology: r.topology,
        writable: r.writable,
        detail: r.detail,
        waiters: app.service.waiters().waiting(),
    };
    (status, axum::Json(body)).into_response()
}

/// GET /metrics
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
