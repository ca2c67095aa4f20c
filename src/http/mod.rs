//! The HTTP surface: [`router`] wires every route, the problem+json
//! fallbacks, request ids, tracing, HTTP metrics and the per-request timeout.

pub mod attempts;
pub mod auth;
pub mod docs;
pub mod extract;
pub mod health;
pub mod leases;
pub mod problem;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

use self::auth::ApiKeys;
use self::problem::ApiError;
use crate::domain::ResourceId;
use crate::service::LeaseService;
use crate::telemetry::{HTTP_DURATION, HTTP_REQUESTS};

/// Shared state of every handler.
pub type AppState = Arc<App>;

/// What handlers need.
pub struct App {
    /// The lease service.
    pub service: LeaseService,
    /// Request body limit in bytes.
    pub body_limit: usize,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// API keys (empty: open).
    pub api_keys: ApiKeys,
    /// Bound on one request, waits included.
    pub request_timeout: Duration,
}

impl App {
    /// 401 unless authenticated (when keys are configured).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.api_keys.authenticate(headers)
    }

    /// 401/403 unless the caller may use the resource's purpose.
    pub fn authorize(&self, headers: &HeaderMap, resource: &ResourceId) -> Result<(), ApiError> {
        self.api_keys.authorize(headers, &resource.purpose)
    }
}

const REQUEST_ID: &str = "x-request-id";

/// Request ids: honoured when the client sends one, else generated.
#[derive(Clone)]
struct NextRequestId {
    prefix: u32,
    counter: Arc<AtomicU64>,
}

impl MakeRequestId for NextRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}{:016x}", self.prefix, n))
            .ok()
            .map(RequestId::new)
    }
}

/// The full router: API, operational endpoints, and (unless `metrics_on_api`
/// is false) `/metrics`.
pub fn router(app: AppState, metrics_on_api: bool) -> Router {
    let body_limit = app.body_limit;
    let mut prefix = [0u8; 4];
    let _ = getrandom::fill(&mut prefix);
    let ids = NextRequestId {
        prefix: u32::from_le_bytes(prefix),
        counter: Arc::new(AtomicU64::new(1)),
    };

    let mut routes = Router::new()
        .route("/attempts", post(attempts::create))
        .route(
            "/leases/{purpose}/{digest}",
            put(leases::acquire)
                .patch(leases::renew)
                .delete(leases::release)
                .get(leases::inspect),
        )
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(docs::openapi_json))
        .route("/docs", get(docs::page));
    if metrics_on_api {
        routes = routes.route("/metrics", get(health::metrics));
    }
    routes
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), observe))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .map_or("unmatched", MatchedPath::as_str);
            let id = req
                .headers()
                .get(REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            tracing::info_span!("request", method = %req.method(), route, request_id = id)
        }))
        .layer(PropagateRequestIdLayer::new(
            axum::http::HeaderName::from_static(REQUEST_ID),
        ))
        .layer(SetRequestIdLayer::new(
            axum::http::HeaderName::from_static(REQUEST_ID),
            ids,
        ))
        .with_state(app)
}

/// A router serving only `/metrics`, for a separate metrics listener.
pub fn metrics_router(app: AppState) -> Router {
    Router::new()
        .route("/metrics", get(health::metrics))
        .fallback(|| async { ApiError::NotFound })
        .with_state(app)
}

/// HTTP metrics by route template (never the raw path) and the per-request
/// timeout, answered as problem+json.
async fn observe(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let response = match tokio::time::timeout(app.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::RequestTimeout.into_response(),
    };
    let status = response.status().as_u16().to_string();
    metrics::counter!(HTTP_REQUESTS, "method" => method.clone(), "route" => route.clone(), "status" => status).increment(1);
    metrics::histogram!(HTTP_DURATION, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
