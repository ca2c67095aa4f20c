//! The HTTP surface. Which path a request takes:
//!
//! 1. [`server`] accepts the connection (cap, one head deadline, TLS).
//! 2. The front door, [`lanes`], reads a plain connection's heads and puts
//!    each request in its lane (its opening comment tables them): a lease
//!    verb is served by [`keep_alive`] outside hyper, an opened lease event
//!    stream is written by [`direct`], and at the first request of any
//!    other lane hyper takes the connection. TLS connections, and all of
//!    them with `LEASEHOLD_HTTP_FAST_PATHS=false`, are hyper's from the
//!    start.
//! 3. Whichever path read it, the request goes through [`Front`] (request
//!    ids, tracing, HTTP metrics, the per-request timeout, the panic
//!    guard). The front calls the lease verbs' handlers itself
//!    (`leases::serve`, by the same classifier) and hands everything else
//!    to [`router`], which merges every resource module's routes (each
//!    module's `routes()` and its route template consts) and adds the
//!    problem+json fallbacks. [`service`] is the front around the router.
//!
//! Module imports point one way: this file names the resource modules;
//! they import what they share from [`app`] (the handlers' state), never
//! from here.

pub mod app;
pub mod attempts;
pub mod auth;
pub mod conn_timer;
pub mod console;
pub mod direct;
pub mod docs;
pub mod extract;
pub mod health;
pub mod history;
pub mod instances;
pub mod keep_alive;
pub mod keepalive;
pub mod lanes;
mod lease_json;
pub mod leases;
pub mod list;
pub mod openapi;
pub mod operator;
pub mod problem;
pub mod problem_table;
pub mod problems;
pub mod purpose_watch;
pub mod schemas;
pub mod server;
pub mod session_extract;
pub mod session_schemas;
pub mod sessions;
pub mod tls;
pub mod verb;
pub mod waiters;
pub mod watch;
pub mod watch_stream;
pub mod write_timeout;

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::future::Either;
use futures_util::FutureExt as _;
use tower::Service;
use tracing::Instrument as _;

pub use self::app::{App, AppState};
use self::conn_timer::{ConnTimer, Slot};
use self::lanes::{route_label, Lane};
use self::problem::ApiError;
use crate::telemetry::{HTTP_DURATION, HTTP_REQUESTS};

/// The request id header: honoured when the client sends a well-formed one,
/// generated otherwise, and returned on every answer.
pub const REQUEST_ID: &str = "x-request-id";

/// [`REQUEST_ID`] as a header name: built at compile time, so looking it
/// up or inserting it neither parses the name nor (for a name outside the
/// standard set) allocates a copy of it, as a `&str` key does per call.
const REQUEST_ID_NAME: HeaderName = HeaderName::from_static(REQUEST_ID);

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

    /// 24 lowercase hex digits: the prefix, then the counter.
    fn next(&self) -> HeaderValue {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut id = [0u8; 24];
        for (i, digit) in id[..8].iter_mut().enumerate() {
            *digit = HEX[(self.prefix >> (28 - 4 * i) & 0xf) as usize];
        }
        for (i, digit) in id[8..].iter_mut().enumerate() {
            *digit = HEX[(n >> (60 - 4 * i) & 0xf) as usize];
        }
        HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("0"))
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

/// The routes: API, operational endpoints, (unless `metrics_on_api` is
/// false) `/metrics`, and problem+json for unknown paths and methods. Each
/// resource module lists its own routes; a new route also gets its label
/// in `lanes::route_label`. What
/// every request passes through on its way here is [`Front`]; [`service`]
/// puts the two together.
pub fn router(app: AppState, metrics_on_api: bool) -> Router {
    Router::new()
        .merge(attempts::routes())
        .merge(leases::routes())
        .merge(list::routes())
        .merge(history::routes())
        .merge(waiters::routes())
        .merge(watch::routes())
        .merge(operator::routes())
        .merge(purpose_watch::routes())
        .merge(health::routes(metrics_on_api))
        .merge(instances::routes())
        .merge(sessions::routes())
        .merge(keepalive::routes())
        .merge(openapi::routes())
        .merge(docs::routes())
        .merge(console::routes())
        .merge(problems::routes())
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(app)
}

/// The served stack: [`Front`] around [`router`]. (Bodies are read within
/// the body limit by [`extract::HeadersAndBody`], the one extractor that
/// reads them, so no `DefaultBodyLimit` layer inserts its extension into
/// every request.)
///
/// The front is one service around the whole router rather than layers
/// added with `Router::layer`, which wraps every route separately and, per
/// layer and request, boxes the inner service's future and clones the
/// inner service (about 7 000 instructions per layer per request here).
///
/// `fast_paths` false (`LEASEHOLD_HTTP_FAST_PATHS=false`): every request
/// goes through the router, the lease verbs too.
pub fn service(
    app: AppState,
    metrics_on_api: bool,
    fast_paths: bool,
) -> Front<impl Service<Request, Response = Response, Error = Infallible, Future: Send> + Clone> {
    let inner = router(Arc::clone(&app), metrics_on_api);
    Front {
        inner,
        app,
        ids: RequestIds::new(),
        serves_metrics: metrics_on_api,
        fast_paths,
        timer: None,
    }
}

/// A router serving only `/metrics`, for a separate metrics listener.
pub fn metrics_router(app: AppState) -> Router {
    health::metrics_routes()
        .fallback(|| async { ApiError::NotFound })
        .with_state(app)
}

/// What every request passes through before the router, in this order:
///
/// - request id: a client's well-formed `X-Request-Id` is kept, otherwise
///   one is generated; it is returned on every answer;
/// - header-size limit: a header block over [`MAX_HEADER_BYTES`] is `431`;
/// - tracing: a DEBUG span per request (method, route template, request
///   id) and a DEBUG line per answer. DEBUG, not INFO: at the default level
///   a request then costs no log work (an INFO span and line were 28 % of
///   the service's CPU per request; docs/perf-log/2026-12-02.md). Store failures
///   behind a 5xx are logged at WARN by the service;
/// - the per-request timeout: a lease verb that may have mutated (PUT,
///   PATCH, DELETE) and timed out is `indeterminate` with its operation id,
///   never a clean failure; anything else is 503 `request_timeout`;
/// - a panic guard: a panicking handler is answered problem+json 500;
/// - HTTP metrics by method, route template (never the raw path) and status;
/// - with the `otel` feature and an OTLP endpoint: a trace span per request
///   (`crate::telemetry::trace`).
#[derive(Clone)]
pub struct Front<S> {
    inner: S,
    app: AppState,
    ids: RequestIds,
    serves_metrics: bool,
    /// Whether the lease verbs skip the router ([`lanes`]).
    fast_paths: bool,
    /// The connection's timer, for the request timeout: set on the clone
    /// that serves one hyper connection ([`server::Served`]).
    timer: Option<ConnTimer>,
}

/// The front for one connection times its requests out with the
/// connection's timer (shared with hyper's header-read timeout).
impl<S: Clone> server::Served for Front<S> {
    fn on_connection(&self, timer: &ConnTimer) -> Self {
        Self {
            timer: Some(timer.clone()),
            ..self.clone()
        }
    }
}

impl<S> Service<Request> for Front<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let started = Instant::now();
        let app = Arc::clone(&self.app);
        let timer = self.timer.clone();
        // The client's header block, as it came.
        let header_bytes: usize = req
            .headers()
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len())
            .sum();
        // The id goes on the answer only: nothing behind the front reads it
        // from the request, and a copy there cost an allocation per request
        // (the first clone of a generated value's bytes). A client's
        // unacceptable id is still taken off the request.
        let id = match req.headers().get(&REQUEST_ID_NAME) {
            Some(v) if acceptable_request_id(v) => v.clone(),
            Some(_) => {
                req.headers_mut().remove(&REQUEST_ID_NAME);
                self.ids.next()
            }
            None => self.ids.next(),
        };
        // The lease verbs, the hot path, are served without the router
        // (`leases::serve`) when the front door's classifier puts them in
        // their lane (`lanes`: no `%`, which the router decodes, no dot
        // segment, ...); anything else goes through the router.
        let target = req.uri().path_and_query().map_or("/", |t| t.as_str());
        let lane = if self.fast_paths {
            lanes::classify(req.method().as_str(), target)
        } else {
            Lane::Hyper
        };
        let (method, route, verb) = match lane {
            Lane::Verb(verb) => (verb.method_label(), leases::ROUTE, Some(verb)),
            Lane::Events | Lane::Hyper => (
                method_label(req.method()),
                route_label(req.uri().path(), self.serves_metrics),
                None,
            ),
        };
        let mutating = matches!(*req.method(), Method::PUT | Method::PATCH | Method::DELETE);
        let inner = match verb {
            Some(verb) => Either::Left(verb),
            None => {
                // The router is always ready; take the instance that was polled.
                let ready = self.inner.clone();
                Either::Right(std::mem::replace(&mut self.inner, ready))
            }
        };
        // Kept raw (a cheap refcounted clone) and parsed only if the timeout fires.
        let operation_id = req
            .headers()
            .get(&extract::OPERATION_ID_NAME)
            .filter(|_| mutating)
            .cloned();
        // With traces on (feature `otel` and an endpoint set): the request's
        // span, its parent from a valid `traceparent`.
        #[cfg(feature = "otel")]
        let trace_span = app.tracer.as_ref().and_then(|tracer| {
            crate::telemetry::trace::RequestSpan::start(tracer, req.headers(), method, route)
        });
        let span = tracing::debug_span!(
            "request",
            method,
            route,
            request_id = id.to_str().unwrap_or("")
        );
        let answer = async move {
            let mut response = if header_bytes > MAX_HEADER_BYTES {
                ApiError::HeadersTooLarge {
                    limit: MAX_HEADER_BYTES,
                }
                .into_response()
            } else {
                let handled = match inner {
                    // Boxed where it starts: a future is copied whole at
                    // every move (into this block's box, the span, the
                    // timeout), and the lease verbs' futures are the
                    // largest; the router's are boxed by the router.
                    Either::Left(verb) => {
                        Either::Left(Box::pin(leases::serve(Arc::clone(&app), verb, req).map(Ok)))
                    }
                    Either::Right(mut inner) => Either::Right(inner.call(req)),
                };
                let guarded = AssertUnwindSafe(handled).catch_unwind();
                let timed = match timer {
                    Some(timer) => {
                        // From the clock read the front took already.
                        let deadline =
                            tokio::time::Instant::from_std(started + app.request_timeout);
                        Either::Left(
                            async move { timer.within(Slot::Request, deadline, guarded).await },
                        )
                    }
                    None => Either::Right(
                        tokio::time::timeout(app.request_timeout, guarded)
                            .map(|timed| timed.map_err(|_| ())),
                    ),
                };
                match timed.await {
                    Ok(Ok(Ok(response))) => response,
                    Ok(Ok(Err(never))) => match never {},
                    Ok(Err(_panic)) => {
                        tracing::error!("a handler panicked; answered 500");
                        ApiError::Internal.into_response()
                    }
                    Err(_) => match operation_id
                        .as_ref()
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| crate::domain::OperationId::parse(v).ok())
                    {
                        Some(operation_id) => {
                            problem::respond_one(&crate::domain::Failure::Indeterminate {
                                operation_id,
                            })
                        }
                        None => ApiError::RequestTimeout.into_response(),
                    },
                }
            };
            response.headers_mut().insert(REQUEST_ID_NAME, id);
            let status = response.status().as_u16();
            let elapsed = started.elapsed();
            tracing::debug!(
                status,
                latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
                "answered"
            );
            let (requests, duration) = app.http_meters.get((method, route, status), || {
                (
                    metrics::counter!(HTTP_REQUESTS, "method" => method, "route" => route, "status" => status.to_string()),
                    metrics::histogram!(HTTP_DURATION, "method" => method, "route" => route),
                )
            });
            requests.increment(1);
            duration.record(elapsed.as_secs_f64());
            Ok(response)
        };
        #[cfg(feature = "otel")]
        if let Some(trace_span) = trace_span {
            let status = |out: &Result<Response, Infallible>| match out {
                Ok(response) => response.status().as_u16(),
                Err(never) => match *never {},
            };
            return Box::pin(trace_span.serve(answer, status).instrument(span));
        }
        Box::pin(answer.instrument(span))
    }
}
