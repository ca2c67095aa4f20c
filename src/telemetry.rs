//! Logs and metrics: names, help texts, the Prometheus recorder, and the
//! bounded `purpose` label.

use std::collections::HashSet;
use std::sync::Mutex;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Lease operations by verb, outcome and (bounded) purpose.
pub const OPERATIONS: &str = "leasehold_lease_operations_total";
/// Lease operation latency by verb, as the service saw it.
pub const OPERATION_DURATION: &str = "leasehold_lease_operation_duration_seconds";
/// Store script latency by script, pool wait included.
pub const STORE_DURATION: &str = "leasehold_store_command_duration_seconds";
/// Pool connections by state (`in_use`, `idle`).
pub const POOL_CONNECTIONS: &str = "leasehold_store_pool_connections";
/// Time spent waiting for a pooled connection.
pub const POOL_WAIT: &str = "leasehold_store_pool_wait_seconds";
/// Acquire requests currently waiting server-side.
pub const WAITERS: &str = "leasehold_waiters";
/// HTTP requests by method, route template and status.
pub const HTTP_REQUESTS: &str = "leasehold_http_requests_total";
/// HTTP request latency by method and route template.
pub const HTTP_DURATION: &str = "leasehold_http_request_duration_seconds";
/// Constant 1, labelled with the version.
pub const BUILD_INFO: &str = "leasehold_build_info";

const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Installs the process-wide Prometheus recorder (once; later calls reuse
/// it, so tests can start many services in one process).
pub fn install_metrics() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let handle = match builder.install_recorder() {
                Ok(handle) => handle,
                // Another recorder is installed (embedding application):
                // keep ours local so /metrics still renders something.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            };
            describe();
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            metrics::gauge!(WAITERS).set(0.0);
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(OPERATIONS, Unit::Count, "Lease operations by verb, outcome and purpose (purposes beyond the label cap are counted as 'other').");
    describe_histogram!(
        OPERATION_DURATION,
        Unit::Seconds,
        "Lease operation latency by verb as seen by the service, server-side waits included."
    );
    describe_histogram!(
        STORE_DURATION,
        Unit::Seconds,
        "Store script latency by script, pool wait included."
    );
    describe_gauge!(
        POOL_CONNECTIONS,
        Unit::Count,
        "Store pool connections by state (in_use, idle)."
    );
    describe_histogram!(
        POOL_WAIT,
        Unit::Seconds,
        "Time spent waiting for a pooled store connection."
    );
    describe_gauge!(
        WAITERS,
        Unit::Count,
        "Acquire requests currently waiting server-side."
    );
    describe_counter!(
        HTTP_REQUESTS,
        Unit::Count,
        "HTTP requests by method, route template and status."
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "HTTP request latency by method and route template."
    );
    describe_gauge!(
        BUILD_INFO,
        Unit::Count,
        "Build information; the value is always 1."
    );
}

/// Maps purposes to label values, admitting at most `cap` distinct ones;
/// the rest are `other`, so the label's cardinality stays bounded.
pub struct PurposeLabels {
    seen: Mutex<HashSet<String>>,
    cap: usize,
}

impl PurposeLabels {
    /// A mapper admitting `cap` purposes.
    pub fn new(cap: usize) -> Self {
        Self {
            seen: Mutex::new(HashSet::new()),
            cap,
        }
    }

    /// The label value for `purpose`.
    pub fn label(&self, purpose: &str) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(purpose) {
            return purpose.to_owned();
        }
        if seen.len() < self.cap {
            seen.insert(purpose.to_owned());
            return purpose.to_owned();
        }
        "other".to_owned()
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber (`RUST_LOG` filters, default info).
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        // The current span (method, route template, request id) is enough;
        // the span list would repeat it on every line.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_span_list(false)
            .try_init(),
    };
}
