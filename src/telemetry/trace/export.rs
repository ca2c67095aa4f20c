//! Batched export: spans go into a bounded queue (full: the span is
//! dropped and counted, the request never waits), one background task
//! POSTs them as OTLP/HTTP JSON to the collector, at most
//! [`MAX_BATCH`] per request, at least every [`SCHEDULE_DELAY`], and once
//! more at shutdown ([`Exporter::shutdown`]).
//!
//! One export at a time, each bounded by [`EXPORT_TIMEOUT`]: a dead or
//! slow collector fills the queue and costs dropped spans
//! (`leasehold_trace_spans_dropped_total`, and a WARN line per export
//! cycle that dropped some), never request latency. A failed export is
//! not retried.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request};
use hyper_util::rt::TokioIo;
use metrics::{describe_counter, Counter, Unit};
use serde_json::{json, Value as Json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::context::{hex, Ids};
use super::settings::Settings;
use super::span::{SpanData, Value};

/// Spans waiting for export at most (the SDK's `OTEL_BSP_MAX_QUEUE_SIZE` default).
pub const MAX_QUEUE: usize = 2048;
/// Spans per export request at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
pub const MAX_BATCH: usize = 512;
/// How long a span waits for a batch to fill at most.
pub const SCHEDULE_DELAY: Duration = Duration::from_secs(1);
/// One export request's bound, connect included (`OTEL_EXPORTER_OTLP_TIMEOUT`).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last export at most, an export in
/// flight included: short, as it comes after the shutdown grace period
/// (Kubernetes' `terminationGracePeriodSeconds` leaves 2 s for it).
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// Spans dropped, by reason (`queue_full`, `export_failed`).
pub const SPANS_DROPPED: &str = "leasehold_trace_spans_dropped_total";
/// Spans the collector accepted.
pub const SPANS_EXPORTED: &str = "leasehold_trace_spans_exported_total";

/// What request paths hold: the id source and the queue's sending end.
pub struct Tracer {
    ids: Ids,
    queue: mpsc::Sender<SpanData>,
    queue_full: Counter,
    /// Dropped since the export task last reported (for its WARN line).
    unreported_drops: AtomicU64,
}

impl Tracer {
    /// The id source.
    pub fn ids(&self) -> &Ids {
        &self.ids
    }

    /// Queues a finished span; drops it (counted) when the queue is full.
    pub fn record(&self, span: SpanData) {
        if self.queue.try_send(span).is_err() {
            self.queue_full.increment(1);
            self.unreported_drops.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The export task's handle, kept by startup to flush at shutdown.
pub struct Exporter {
    tracer: Arc<Tracer>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Exporter {
    /// Starts the export task (call inside the runtime).
    pub fn start(settings: Settings) -> Exporter {
        describe_counter!(
            SPANS_DROPPED,
            Unit::Count,
            "Trace spans dropped before export, by reason (queue_full: the export queue was full; export_failed: the collector did not accept them)."
        );
        describe_counter!(
            SPANS_EXPORTED,
            Unit::Count,
            "Trace spans the OTLP collector accepted."
        );
        let (queue, rx) = mpsc::channel(MAX_QUEUE);
        let tracer = Arc::new(Tracer {
            ids: Ids::new(),
            queue,
            queue_full: metrics::counter!(SPANS_DROPPED, "reason" => "queue_full"),
            unreported_drops: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        tracing::info!(
            endpoint = %format!("http://{}{}", settings.authority, settings.path),
            service_name = %settings.service_name,
            "exporting traces over OTLP/HTTP (JSON)"
        );
        let task = tokio::spawn(run(settings, rx, Arc::clone(&tracer), stop.clone()));
        Exporter { tracer, stop, task }
    }

    /// What request paths record spans with.
    pub fn tracer(&self) -> &Arc<Tracer> {
        &self.tracer
    }

    /// Exports what is queued and stops the task, within `SHUTDOWN_FLUSH` (2 s).
    pub async fn shutdown(self) {
        self.stop.cancel();
        let mut task = self.task;
        if tokio::time::timeout(SHUTDOWN_FLUSH, &mut task)
            .await
            .is_err()
        {
            tracing::warn!("trace export did not finish in time at shutdown; spans dropped");
            task.abort();
        }
    }
}

async fn run(
    settings: Settings,
    mut rx: mpsc::Receiver<SpanData>,
    tracer: Arc<Tracer>,
    stop: CancellationToken,
) {
    let exported = metrics::counter!(SPANS_EXPORTED);
    let failed = metrics::counter!(SPANS_DROPPED, "reason" => "export_failed");
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut healthy = true;
    loop {
        // Wait for a first span, then up to SCHEDULE_DELAY for the batch to fill.
        let first = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            span = rx.recv() => match span {
                Some(span) => span,
                None => break,
            },
        };
        batch.push(first);
        let due = tokio::time::Instant::now() + SCHEDULE_DELAY;
        while batch.len() < MAX_BATCH {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(due) => break,
                span = rx.recv() => match span {
                    Some(span) => batch.push(span),
                    None => break,
                },
            }
        }
        healthy = send_batch(&settings, &mut batch, &exported, &failed, healthy).await;
        report_drops(&tracer);
    }
    // Shutdown: whatever is queued, in batches, bounded by the caller's timeout.
    while let Ok(span) = rx.try_recv() {
        batch.push(span);
        if batch.len() == MAX_BATCH {
            healthy = send_batch(&settings, &mut batch, &exported, &failed, healthy).await;
        }
    }
    if !batch.is_empty() {
        send_batch(&settings, &mut batch, &exported, &failed, healthy).await;
    }
    report_drops(&tracer);
}

/// One WARN line per export cycle that had drops, not one per span.
fn report_drops(tracer: &Tracer) {
    let dropped = tracer.unreported_drops.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(
            dropped,
            queue = MAX_QUEUE,
            "trace export queue full; spans dropped"
        );
    }
}

/// POSTs `batch` (emptied). Logs a failure when the previous export
/// worked and a recovery when it did not: one line per change, not per
/// batch. Returns whether this export worked.
async fn send_batch(
    settings: &Settings,
    batch: &mut Vec<SpanData>,
    exported: &Counter,
    failed: &Counter,
    was_healthy: bool,
) -> bool {
    let spans = batch.len() as u64;
    let body = encode(settings, batch);
    batch.clear();
    match tokio::time::timeout(EXPORT_TIMEOUT, post(settings, body)).await {
        Ok(Ok(())) => {
            exported.increment(spans);
            if !was_healthy {
                tracing::info!("trace export works again");
            }
            true
        }
        outcome => {
            failed.increment(spans);
            if was_healthy {
                let error = match outcome {
                    Ok(Err(e)) => e,
                    _ => "no answer within the export timeout".to_owned(),
                };
                tracing::warn!(error = %error, spans, "trace export failed; spans dropped until it works again");
            }
            false
        }
    }
}

/// One POST on a new connection; Ok on a 2xx answer.
async fn post(settings: &Settings, body: Vec<u8>) -> Result<(), String> {
    let stream = tokio::net::TcpStream::connect((settings.host.as_str(), settings.port))
        .await
        .map_err(|e| format!("connect: {}", e.kind()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let conn = tokio::spawn(conn);
    let mut request = Request::post(settings.path.as_str())
        .header(header::HOST, settings.authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len());
    for (name, value) in &settings.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(Body::from(body))
        .map_err(|_| "a header could not be sent".to_owned())?;
    let answer = sender.send_request(request).await;
    drop(sender);
    conn.abort();
    let status = answer.map_err(|e| format!("request: {e}"))?.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("the collector answered {status}"))
    }
}

/// An `ExportTraceServiceRequest` in OTLP's JSON encoding: ids as hex,
/// 64-bit times as decimal strings, enums as numbers.
fn encode(settings: &Settings, spans: &[SpanData]) -> Vec<u8> {
    let spans: Vec<Json> = spans.iter().map(span_json).collect();
    let request = json!({
        "resourceSpans": [{
            "resource": { "attributes": [
                { "key": "service.name", "value": { "stringValue": settings.service_name } },
                { "key": "service.version", "value": { "stringValue": env!("CARGO_PKG_VERSION") } },
            ]},
            "scopeSpans": [{
                "scope": { "name": "leasehold", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    });
    serde_json::to_vec(&request).unwrap_or_default()
}

fn span_json(span: &SpanData) -> Json {
    let attributes: Vec<Json> = span
        .attributes
        .iter()
        .map(|(key, value)| {
            let value = match value {
                Value::Str(s) => json!({ "stringValue": s }),
                Value::Int(n) => json!({ "intValue": n.to_string() }),
            };
            json!({ "key": key, "value": value })
        })
        .collect();
    let mut out = json!({
        "traceId": hex(&span.trace_id),
        "spanId": hex(&span.span_id),
        "name": format!("{} {}", span.name.0, span.name.1),
        "kind": span.kind as i32,
        "startTimeUnixNano": span.start_ns.to_string(),
        "endTimeUnixNano": span.end_ns.to_string(),
        "attributes": attributes,
        "status": match span.error {
            Some(message) => json!({ "code": 2, "message": message }),
            None => json!({}),
        },
    });
    if let Some(parent) = &span.parent {
        out["parentSpanId"] = json!(hex(parent));
    }
    if let Some(state) = &span.trace_state {
        out["traceState"] = json!(state.as_ref());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::span::Kind;
    use super::*;

    #[test]
    fn spans_encode_as_otlp_json() {
        let settings = Settings::from_lookup(|name| {
            (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://c:4318".to_owned())
        })
        .expect("valid")
        .expect("on");
        let span = SpanData {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: Some([3; 8]),
            trace_state: Some(Arc::from("k=v")),
            name: ("store", "acquire"),
            kind: Kind::Internal,
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_000_000_000_500,
            attributes: vec![
                ("leasehold.script", Value::Str("acquire")),
                ("n", Value::Int(3)),
            ],
            error: Some("unavailable"),
        };
        let body: Json = serde_json::from_slice(&encode(&settings, &[span])).expect("json");
        let resource = &body["resourceSpans"][0];
        assert_eq!(
            resource["resource"]["attributes"][0]["value"]["stringValue"],
            "leasehold"
        );
        let span = &resource["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "01010101010101010101010101010101");
        assert_eq!(span["spanId"], "0202020202020202");
        assert_eq!(span["parentSpanId"], "0303030303030303");
        assert_eq!(span["traceState"], "k=v");
        assert_eq!(span["name"], "store acquire");
        assert_eq!(span["kind"], 1);
        assert_eq!(span["startTimeUnixNano"], "1700000000000000000");
        assert_eq!(span["attributes"][1]["value"]["intValue"], "3");
        assert_eq!(span["status"]["code"], 2);
    }
}
