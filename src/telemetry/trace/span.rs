//! A finished span as the exporter encodes it: ids, name, kind, times,
//! attributes (fixed strings and numbers only) and status.

use std::sync::Arc;

use super::context::{SpanId, TraceId};

/// OTLP span kinds used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// In-process work (the store call with its retries).
    Internal = 1,
    /// The HTTP request.
    Server = 2,
    /// A command sent to Redis.
    Client = 3,
}

/// An attribute value.
#[derive(Debug, Clone)]
pub enum Value {
    /// A fixed string.
    Str(&'static str),
    /// An integer.
    Int(i64),
}

/// A finished span, as the exporter encodes it.
#[derive(Debug, Clone)]
pub struct SpanData {
    /// The trace.
    pub trace_id: TraceId,
    /// This span.
    pub span_id: SpanId,
    /// The parent span (another process's for a request with a `traceparent`).
    pub parent: Option<SpanId>,
    /// The caller's `tracestate`, carried on.
    pub trace_state: Option<Arc<str>>,
    /// The name: the two parts joined by a space (`PUT /leases/{purpose}/{digest}`,
    /// `store acquire`, `EVALSHA acquire`).
    pub name: (&'static str, &'static str),
    /// What kind of span.
    pub kind: Kind,
    /// Start, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// End, nanoseconds since the Unix epoch.
    pub end_ns: u64,
    /// Attributes.
    pub attributes: Vec<(&'static str, Value)>,
    /// Status `ERROR` with this description when set, else `UNSET`.
    pub error: Option<&'static str>,
}
