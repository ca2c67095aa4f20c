//! Logs and metrics: names, help texts, the Prometheus recorder, and the
//! bounded `purpose` label; with the `otel` feature, traces ([`trace`]).

#[cfg(feature = "otel")]
pub mod trace;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{PoisonError, RwLock};

use metrics::{describe_counter, describe_gauge, describe_histogram, Counter, Histogram, Unit};
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
/// Acquires answered `contended`, by why (`held`, `lock_delay`, `queued`).
pub const CONTENDED: &str = "leasehold_lease_contended_total";
/// How long acquires that asked to wait waited, by purpose and outcome.
pub const LEASE_WAIT: &str = "leasehold_lease_wait_seconds";
/// How long permits were held (acquire to release), by purpose and end.
pub const LEASE_HOLD: &str = "leasehold_lease_hold_seconds";
/// HTTP requests by method, route template and status.
pub const HTTP_REQUESTS: &str = "leasehold_http_requests_total";
/// HTTP request latency by method and route template.
pub const HTTP_DURATION: &str = "leasehold_http_request_duration_seconds";
// Watches (docs/design.md §9).
/// Watches (long-polls and event streams) open on this instance.
pub const WATCHERS: &str = "leasehold_watchers";
/// Resources with at least one watcher on this instance (one store reader each).
pub const WATCH_GROUPS: &str = "leasehold_watch_groups";
/// Changes delivered to watchers, by kind.
pub const WATCH_EVENTS: &str = "leasehold_watch_events_total";
/// Store reads made by watch groups, by result (`ok`, `error`).
pub const WATCH_READS: &str = "leasehold_watch_reads_total";
/// Constant 1, labelled with the version.
pub const BUILD_INFO: &str = "leasehold_build_info";
/// Leases returned by listing pages (`GET /leases/{purpose}`).
pub const LIST_LEASES: &str = "leasehold_list_leases_total";
/// Session verbs by op and outcome (docs/design.md §18).
pub const SESSION_OPERATIONS: &str = "leasehold_session_operations_total";
/// Leases a session renew renewed, by path (`light`: the batched script;
/// `full`: as a lease of its own).
pub const SESSION_LEASES_RENEWED: &str = "leasehold_session_leases_renewed_total";
/// Keep-alive streams open on this instance (sessions it keeps alive).
pub const KEEPALIVES: &str = "leasehold_session_keepalive_streams";

const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Server-side waits: 1 ms (the lease came free at once) to 30 s.
const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0,
];

/// Hold times: 10 ms (a short critical section) to 1 h (a long job).
const HOLD_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Installs the process-wide Prometheus recorder (once; later calls reuse
/// it, so tests can start many services in one process).
pub fn install_metrics() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // A full name is matched before a suffix.
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(LEASE_WAIT.into()), WAIT_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(LEASE_HOLD.into()), HOLD_BUCKETS)
                })
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
            metrics::gauge!(WATCHERS).set(0.0);
            metrics::gauge!(WATCH_GROUPS).set(0.0);
            metrics::gauge!(KEEPALIVES).set(0.0);
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
        "Time spent waiting for a pooled store connection (0 when the last connection was reused)."
    );
    describe_gauge!(
        WAITERS,
        Unit::Count,
        "Acquire requests currently waiting server-side."
    );
    describe_gauge!(
        WATCHERS,
        Unit::Count,
        "Watches (long-polls and event streams) open on this instance."
    );
    describe_gauge!(
        WATCH_GROUPS,
        Unit::Count,
        "Resources with at least one watcher on this instance; each has one store reader."
    );
    describe_counter!(
        WATCH_EVENTS,
        Unit::Count,
        "Changes delivered to watchers, by kind (acquired, released, expired, holder_changed)."
    );
    describe_counter!(
        WATCH_READS,
        Unit::Count,
        "Store reads made by watch groups (once per change per instance, not per watcher), by result."
    );
    describe_counter!(
        CONTENDED,
        Unit::Count,
        "Acquires answered contended, by reason: held (every permit taken, or the other mode holds it), lock_delay (a lock-delay after an expiry runs), queued (waiters that started earlier go first)."
    );
    describe_histogram!(
        LEASE_WAIT,
        Unit::Seconds,
        "How long acquires that asked to wait (waitMs > 0) waited server-side, by purpose (capped as in leasehold_lease_operations_total) and outcome (acquired, contended)."
    );
    describe_histogram!(
        LEASE_HOLD,
        Unit::Seconds,
        "How long permits were held, acquire to end, by purpose (capped as in leasehold_lease_operations_total) and end: released (at the release), broken (at the break), expired (when the next acquire or release of the resource records the expiry; a plain lease that Redis already dropped is not counted)."
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
    describe_counter!(
        LIST_LEASES,
        Unit::Count,
        "Leases returned by listing pages (pages themselves count as verb 'list' in leasehold_lease_operations_total)."
    );
    describe_counter!(
        SESSION_OPERATIONS,
        Unit::Count,
        "Session verbs by op (create, renew, end, read, acquire, release) and outcome."
    );
    describe_counter!(
        SESSION_LEASES_RENEWED,
        Unit::Count,
        "Leases renewed with their session, by path: light (the batched script), full (renewed as a lease of its own: a bounded hold, or one the light path could not decide)."
    );
    describe_gauge!(
        KEEPALIVES,
        Unit::Count,
        "Keep-alive streams open on this instance: the sessions it keeps alive."
    );
    describe_gauge!(
        BUILD_INFO,
        Unit::Count,
        "Build information; the value is always 1."
    );
}

/// Metric handles looked up once per label set and then reused.
///
/// `metrics::counter!(name, labels)` builds a key (allocating its label
/// list) and hashes it into the recorder on every call; a lease request
/// made six such calls. Keys here come from bounded sets (fixed verbs,
/// outcomes, methods, routes and statuses; purposes capped by
/// [`PurposeLabels`]), so the map stays small.
pub struct Handles<K, V> {
    map: RwLock<LabelMap<K, V>>,
}

/// A map keyed by metric labels, hashed with [`LabelHasher`].
type LabelMap<K, V> = HashMap<K, V, BuildHasherDefault<LabelHasher>>;

/// The hasher of the label caches: a multiply-rotate hash a word at a time
/// (FxHash's), instead of std's SipHash, which was most of the cost of the
/// five cache lookups a lease request makes. SipHash's resistance to chosen
/// collisions is not needed here: the maps hold bounded sets (fixed verbs,
/// outcomes, methods, routes, statuses and scripts, and at most the
/// purpose label cap of purposes), so colliding keys can slow a lookup by
/// no more than that many comparisons.
#[derive(Default, Clone, Copy)]
pub struct LabelHasher(u64);

impl LabelHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for LabelHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl<K: Eq + Hash, V: Clone> Handles<K, V> {
    /// An empty cache.
    pub fn new() -> Self {
        Self {
            map: RwLock::new(LabelMap::default()),
        }
    }

    /// The handle for `key`, registered with `make` the first time.
    pub fn get(&self, key: K, make: impl FnOnce() -> V) -> V {
        if let Some(v) = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return v.clone();
        }
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_insert_with(make)
            .clone()
    }
}

impl<K: Eq + Hash, V: Clone> Default for Handles<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

/// Maps purposes to label values, admitting at most `cap` distinct ones;
/// the rest are `other`, so the label's cardinality stays bounded.
pub struct PurposeLabels {
    ids: RwLock<LabelMap<Box<str>, u32>>,
    cap: usize,
    /// When API keys are configured: the purposes some key names; every
    /// other purpose is `other` (a caller cannot fill the cap with junk).
    named: Option<std::collections::HashSet<String>>,
}

/// The id of every purpose beyond the cap, labelled `other`.
pub const OTHER_PURPOSE: u32 = u32::MAX;

impl PurposeLabels {
    /// A mapper admitting `cap` purposes.
    pub fn new(cap: usize) -> Self {
        Self::named(cap, None)
    }

    /// A mapper admitting `cap` purposes, of `named` only when given.
    pub fn named(cap: usize, named: Option<std::collections::HashSet<String>>) -> Self {
        Self {
            ids: RwLock::new(LabelMap::default()),
            cap,
            named,
        }
    }

    /// A small id for `purpose`: the same for the same purpose, and
    /// [`OTHER_PURPOSE`] once `cap` others were admitted.
    pub fn id(&self, purpose: &str) -> u32 {
        if let Some(id) = self
            .ids
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(purpose)
        {
            return *id;
        }
        if self.named.as_ref().is_some_and(|n| !n.contains(purpose)) {
            return OTHER_PURPOSE;
        }
        let mut ids = self.ids.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = ids.get(purpose) {
            return *id;
        }
        if ids.len() >= self.cap {
            return OTHER_PURPOSE;
        }
        let id = u32::try_from(ids.len()).unwrap_or(OTHER_PURPOSE);
        ids.insert(purpose.into(), id);
        id
    }
}

/// `leasehold_lease_operations_total` and `_duration_seconds`, with cached
/// handles.
pub struct OperationMeters {
    purposes: PurposeLabels,
    counters: Handles<(&'static str, &'static str, u32), Counter>,
    durations: Handles<&'static str, Histogram>,
    contended: Handles<&'static str, Counter>,
    waits: Handles<(&'static str, u32), Histogram>,
    holds: Handles<(&'static str, u32), Histogram>,
}

/// The `purpose` label value for `purpose`, admitted as `id`.
fn purpose_label(id: u32, purpose: &str) -> String {
    if id == OTHER_PURPOSE {
        "other".to_owned()
    } else {
        purpose.to_owned()
    }
}

impl OperationMeters {
    /// Meters admitting `max_purposes` purpose label values.
    pub fn new(max_purposes: usize, named: Option<std::collections::HashSet<String>>) -> Self {
        Self {
            purposes: PurposeLabels::named(max_purposes, named),
            counters: Handles::new(),
            durations: Handles::new(),
            contended: Handles::new(),
            waits: Handles::new(),
            holds: Handles::new(),
        }
    }

    /// Records how long an acquire that asked to wait waited on `purpose`
    /// before it was answered with `outcome` (`acquired` or `contended`).
    pub fn waited(&self, outcome: &'static str, purpose: &str, secs: f64) {
        let id = self.purposes.id(purpose);
        self.waits
            .get((outcome, id), || {
                let label = purpose_label(id, purpose);
                metrics::histogram!(LEASE_WAIT, "purpose" => label, "outcome" => outcome)
            })
            .record(secs);
    }

    /// Records how long a permit on `purpose` was held until it ended by
    /// `end` (`released`, `broken`, `expired`: a fixed set).
    pub fn held(&self, end: &'static str, purpose: &str, secs: f64) {
        let id = self.purposes.id(purpose);
        self.holds
            .get((end, id), || {
                let label = purpose_label(id, purpose);
                metrics::histogram!(LEASE_HOLD, "purpose" => label, "end" => end)
            })
            .record(secs);
    }

    /// Counts one acquire answered `contended` for `reason` (`held`,
    /// `lock_delay` or `queued`: a fixed set, so the label stays bounded).
    pub fn contended(&self, reason: &'static str) {
        self.contended
            .get(reason, || metrics::counter!(CONTENDED, "reason" => reason))
            .increment(1);
    }

    /// Counts one `verb` with `outcome` on `purpose` and records how long it took.
    pub fn record(&self, verb: &'static str, outcome: &'static str, purpose: &str, secs: f64) {
        let id = self.purposes.id(purpose);
        self.counters
            .get((verb, outcome, id), || {
                let label = purpose_label(id, purpose);
                metrics::counter!(OPERATIONS, "verb" => verb, "outcome" => outcome, "purpose" => label)
            })
            .increment(1);
        self.durations
            .get(
                verb,
                || metrics::histogram!(OPERATION_DURATION, "verb" => verb),
            )
            .record(secs);
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
    // Colour codes only for a terminal: a file or a log collector gets
    // plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
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
