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
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_http::LatencyUnit;
use tracing::Level;

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

/// The request id header: honoured when the client sends a well-formed one,
/// generated otherwise, and returned on every answer.
pub const REQUEST_ID: &str = "x-request-id";

/// Bound on the request's header block (names and values), answered `431`
/// problem+json. hyper itself refuses more than 100 headers, or a header
/// block over its read buffer (about 400 KiB), before any of this code runs,
/// with a bare `431` and no body.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Generates request ids: a random per-process prefix and a counter.
#[derive(Clone)]
struct RequestIds {
    prefix: u32,
    counter: Arc<AtomicU64>,
}

impl RequestIds {
    fn new() -> Self {
        let mut prefix = [0u8; 4];
        let _ = getrandom::fill(&mut prefix);
        Self {
            prefix: u32::from_le_bytes(prefix),
            counter: Arc::new(AtomicU64::new(1)),
        }
    }

    fn next(&self) -> HeaderValue {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}{:016x}", self.prefix, n))
            .unwrap_or_else(|_| HeaderValue::from_static("0"))
    }
}

/// A client's request id is kept when it is 1-128 characters of
/// `[A-Za-z0-9._:-]`; anything else (which could carry a secret or garble a
/// log line) is replaced by a generated one.
fn acceptable_request_id(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Route templates and methods as metric labels: bounded sets, never the raw
/// path or an arbitrary method token.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// The full router: API, operational endpoints, and (unless `metrics_on_api`
/// is false) `/metrics`.
///
/// Layers, outermost first: request id and header-size limit
/// ([`front_door`]), tracing (one span per request carrying method, route
/// template and request id; one INFO line per answer), HTTP metrics and the
/// per-request timeout ([`observe`]), a panic guard answering problem+json
/// 500, the body limit.
pub fn router(app: AppState, metrics_on_api: bool) -> Router {
    let body_limit = app.body_limit;
    let ids = RequestIds::new();
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
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                tracing::error!("a handler panicked; answered 500");
                ApiError::Internal.into_response()
            },
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), observe))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    let route = req
                        .extensions()
                        .get::<MatchedPath>()
                        .map_or("unmatched", MatchedPath::as_str);
                    let id = req
                        .headers()
                        .get(REQUEST_ID)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    tracing::info_span!(
                        "request",
                        method = method_label(req.method()),
                        route,
                        request_id = id
                    )
                })
                .on_request(())
                .on_response(
                    DefaultOnResponse::new()
                        .level(Level::INFO)
                        .latency_unit(LatencyUnit::Micros),
                ),
        )
        .layer(middleware::from_fn_with_state(ids, front_door))
        .with_state(app)
}

/// A router serving only `/metrics`, for a separate metrics listener.
pub fn metrics_router(app: AppState) -> Router {
    Router::new()
        .route("/metrics", get(health::metrics))
        .fallback(|| async { ApiError::NotFound })
        .with_state(app)
}

/// Request ids (honoured or generated, returned on every answer) and the
/// header-size limit.
async fn front_door(State(ids): State<RequestIds>, mut req: Request, next: Next) -> Response {
    let id = match req.headers().get(REQUEST_ID) {
        Some(v) if acceptable_request_id(v) => v.clone(),
        _ => ids.next(),
    };
    req.headers_mut().insert(REQUEST_ID, id.clone());
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    let mut response = if header_bytes > MAX_HEADER_BYTES {
        ApiError::HeadersTooLarge {
            limit: MAX_HEADER_BYTES,
        }
        .into_response()
    } else {
        next.run(req).await
    };
    response.headers_mut().insert(REQUEST_ID, id);
    response
}

/// HTTP metrics by route template (never the raw path) and the per-request
/// timeout, answered as problem+json. A lease verb that may have mutated
/// (PUT, PATCH, DELETE) and timed out is `indeterminate` with its operation
/// id, never a clean failure; anything else is 503 `request_timeout`.
async fn observe(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let mutating = matches!(*req.method(), Method::PUT | Method::PATCH | Method::DELETE);
    // Kept raw (a cheap refcounted clone) and parsed only if the timeout fires.
    let operation_id = req
        .headers()
        .get(extract::OPERATION_ID_HEADER)
        .filter(|_| mutating)
        .cloned();
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let response = match tokio::time::timeout(app.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => match operation_id
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| crate::domain::OperationId::parse(v).ok())
        {
            Some(operation_id) => {
                problem::respond_one(&crate::domain::Failure::Indeterminate { operation_id })
            }
            None => ApiError::RequestTimeout.into_response(),
        },
    };
    let status = response.status().as_u16().to_string();
    metrics::counter!(HTTP_REQUESTS, "method" => method, "route" => route.clone(), "status" => status).increment(1);
    metrics::histogram!(HTTP_DURATION, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
