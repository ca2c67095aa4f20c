//! OpenTelemetry traces (cargo feature `otel`): a span per HTTP request,
//! its parent taken from a valid W3C `traceparent`, with the store call
//! and each script run under it as child spans, exported in batches over
//! OTLP/HTTP (JSON encoding) when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `…_TRACES_ENDPOINT`) is set ([`settings`]).
//!
//! Written on crates already in the tree (hyper's client half, serde_json)
//! rather than the `opentelemetry` SDK with tonic/prost (docs/tracing.md).
//!
//! The current span travels in a tokio task-local ([`CURRENT`]): the HTTP
//! front sets it around a request ([`RequestSpan::serve`]), a store call
//! opens a child under it ([`child`]), and work handed to another task
//! takes it along ([`propagate`]). With no exporter configured nothing sets
//! it, and a store call's only cost is one failed task-local lookup.
//!
//! Attributes are fixed strings and numbers chosen here (method, route
//! template, status, script name, error class): never a path, a header or a
//! body, so no owner token or API key can reach a span.

pub mod context;
mod export;
pub mod settings;
mod span;

use std::future::Future;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;

pub use self::context::{Ids, Parent, SpanId, TraceId};
pub use self::export::{Exporter, Tracer};
pub use self::settings::{SettingError, Settings};
pub use self::span::{Kind, SpanData, Value};

/// The span a task is in.
#[derive(Clone)]
pub struct Current {
    tracer: Arc<Tracer>,
    trace_id: TraceId,
    span_id: SpanId,
    trace_state: Option<Arc<str>>,
}

tokio::task_local! {
    /// The span the running task's work belongs to, when traces are on.
    pub static CURRENT: Current;
}

/// A span's clock: wall time at its start (what OTLP wants), measured to
/// its end with the monotonic clock.
struct Clock {
    start_ns: u64,
    started: Instant,
}

impl Clock {
    fn start() -> Self {
        let start_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Self {
            start_ns,
            started: Instant::now(),
        }
    }

    fn end_ns(&self) -> u64 {
        let elapsed = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.start_ns.saturating_add(elapsed)
    }
}

/// The span of one HTTP request, started before routing.
pub struct RequestSpan {
    current: Current,
    parent: Option<SpanId>,
    clock: Clock,
    method: &'static str,
    route: &'static str,
}

impl RequestSpan {
    /// Starts the request's span: in the caller's trace when `headers`
    /// carry a valid `traceparent`, in a new one otherwise. `None` when the
    /// caller's `traceparent` says "not sampled" (the parent's decision is
    /// kept, as OpenTelemetry's default parent-based sampler does).
    pub fn start(
        tracer: &Arc<Tracer>,
        headers: &HeaderMap,
        method: &'static str,
        route: &'static str,
    ) -> Option<Self> {
        let parent = headers.get("traceparent").and_then(|tp| {
            context::parse(
                tp.as_bytes(),
                headers.get("tracestate").map(|ts| ts.as_bytes()),
            )
        });
        let (trace_id, parent_span, trace_state) = match parent {
            Some(parent) if !parent.sampled => return None,
            Some(parent) => (
                parent.trace_id,
                Some(parent.span_id),
                parent.trace_state.map(Arc::from),
            ),
            None => (tracer.ids().trace_id(), None, None),
        };
        Some(Self {
            current: Current {
                tracer: Arc::clone(tracer),
                trace_id,
                span_id: tracer.ids().span_id(),
                trace_state,
            },
            parent: parent_span,
            clock: Clock::start(),
            method,
            route,
        })
    }

    /// Runs the request's future as the current span and records the span
    /// when it ends, with the status `status` reads from its output.
    pub async fn serve<F: Future>(
        self,
        answer: F,
        status: impl FnOnce(&F::Output) -> u16,
    ) -> F::Output {
        let out = CURRENT.scope(self.current.clone(), answer).await;
        let status = status(&out);
        let Current {
            tracer,
            trace_id,
            span_id,
            trace_state,
        } = self.current;
        tracer.record(SpanData {
            trace_id,
            span_id,
            parent: self.parent,
            trace_state,
            name: (self.method, self.route),
            kind: Kind::Server,
            start_ns: self.clock.start_ns,
            end_ns: self.clock.end_ns(),
            attributes: vec![
                ("http.request.method", Value::Str(self.method)),
                ("http.route", Value::Str(self.route)),
                ("http.response.status_code", Value::Int(i64::from(status))),
            ],
            // OpenTelemetry's HTTP conventions: a server span is an error
            // for 5xx only; 4xx is the client's.
            error: (status >= 500).then_some("server error"),
        });
        out
    }
}

/// Runs `work` as a child span of the current one, named `name`, when there
/// is a current span; otherwise just runs it. `error` reads an error class
/// and a description (fixed strings such as `unavailable` and `READONLY`)
/// from the output, `None` for success.
pub async fn child<F: Future>(
    name: (&'static str, &'static str),
    kind: Kind,
    attributes: Vec<(&'static str, Value)>,
    work: F,
    error: impl FnOnce(&F::Output) -> Option<(&'static str, &'static str)>,
) -> F::Output {
    let Ok(parent) = CURRENT.try_with(Clone::clone) else {
        return work.await;
    };
    let clock = Clock::start();
    let mut current = parent.clone();
    current.span_id = parent.tracer.ids().span_id();
    let out = CURRENT.scope(current.clone(), work).await;
    let error = error(&out);
    let mut attributes = attributes;
    if let Some((class, _)) = error {
        attributes.push(("error.type", Value::Str(class)));
    }
    parent.tracer.record(SpanData {
        trace_id: current.trace_id,
        span_id: current.span_id,
        parent: Some(parent.span_id),
        trace_state: current.trace_state,
        name,
        kind,
        start_ns: clock.start_ns,
        end_ns: clock.end_ns(),
        attributes,
        error: error.map(|(_, description)| description),
    });
    out
}

/// `work`, carrying the current span (if any) along: for work spawned onto
/// another task on the request's behalf.
pub fn propagate<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let current = CURRENT.try_with(Clone::clone).ok();
    async move {
        match current {
            Some(current) => CURRENT.scope(current, work).await,
            None => work.await,
        }
    }
}
