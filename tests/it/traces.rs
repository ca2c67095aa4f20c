//! Traces (feature `otel`): the real binary, run as a subprocess with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a small OTLP/HTTP receiver
//! this test starts (`traces/receiver.rs`). Each test synchronises on the
//! service's graceful shutdown, which exports the last spans before the
//! process exits: after the exit, the receiver holds everything it will
//! ever get.
//!
//! Checked: one trace per request; on Redis, the store call a child of the
//! request span and each script run a child of the store call; an incoming
//! `traceparent`'s trace id and parent span honoured (an invalid one
//! ignored, an unsampled one kept unsampled); the OTLP request itself
//! (`POST /v1/traces`, `application/json`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_SERVICE_NAME`); no owner token, API key, purpose or digest in
//! the exported bytes; nothing exported, not even a connection, without
//! the variable; an https endpoint refused at startup.

mod receiver;

#[allow(unused_imports)]
use crate::common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::app::{digest, unique};
use common::redis::RedisServer;
use receiver::Receiver;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

const PATIENCE: Duration = Duration::from_secs(30);

/// A `leasehold serve` child process; killed if the test fails first.
struct Service {
    child: Child,
    base: String,
    logs: Arc<Mutex<String>>,
    logged: Arc<tokio::sync::Notify>,
}

impl Service {
    /// Starts the binary with `envs` (and nothing else from this process's
    /// environment) and waits for its "listening" line.
    async fn start(envs: &[(&str, String)]) -> Service {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        cmd.arg("serve")
            .env_clear()
            .env("LEASEHOLD_LISTEN", "127.0.0.1:0")
            .env("LEASEHOLD_NAMESPACE", unique("traces"))
            .env("LEASEHOLD_COMMAND_TIMEOUT_MS", "2000")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn leasehold");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let logs = Arc::new(Mutex::new(String::new()));
        let logged = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn({
            let logs = Arc::clone(&logs);
            let logged = Arc::clone(&logged);
            async move {
                let mut tx = Some(tx);
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains("leasehold listening") {
                        if let (Some(tx), Some(i)) = (tx.take(), line.find("addr=")) {
                            let addr = line[i + 5..].split_whitespace().next().unwrap_or("");
                            let _ = tx.send(addr.to_owned());
                        }
                    }
                    {
                        let mut logs = logs.lock().expect("lock");
                        logs.push_str(&line);
                        logs.push('\n');
                    }
                    logged.notify_waiters();
                }
            }
        });
        let addr = tokio::time::timeout(PATIENCE, rx)
            .await
            .expect("leasehold listens within 30 s")
            .unwrap_or_else(|_| {
                panic!(
                    "leasehold exited before listening: {}",
                    logs.lock().expect("lock")
                )
            });
        Service {
            child,
            base: format!("http://{addr}"),
            logs,
            logged,
        }
    }

    /// Waits (at most 30 s) for a log line containing `needle`.
    async fn until_logged(&self, needle: &str) {
        let seen = async {
            loop {
                let next = self.logged.notified();
                tokio::pin!(next);
                next.as_mut().enable();
                if self.logs.lock().expect("lock").contains(needle) {
                    return;
                }
                next.await;
            }
        };
        if tokio::time::timeout(PATIENCE, seen).await.is_err() {
            panic!(
                "no {needle:?} in 30 s:\n{}",
                self.logs.lock().expect("lock")
            );
        }
    }

    /// `/metrics`' value of the sample `series` (0 when absent).
    async fn metric(&self, series: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.base))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// SIGTERM, then the exit (graceful shutdown flushes the spans).
    async fn stop(mut self) -> String {
        let pid = self.child.id().expect("pid").to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("run kill");
        assert!(sent.success());
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("exit within 30 s of SIGTERM")
            .expect("wait");
        let logs = self.logs.lock().expect("lock").clone();
        assert!(status.success(), "exit after SIGTERM: {status}\n{logs}");
        logs
    }
}

/// A keys file with one `write` key on every purpose; (dir, key).
fn keys_file() -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(unique("leasehold-traces-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let key = unique("traces-api-key-0123456789-");
    std::fs::write(dir.join("keys"), format!("{key} * write\n")).expect("write keys");
    (dir, key)
}

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

async fn spans_per_request(redis: Option<&RedisServer>) {
    let receiver = Receiver::start("127.0.0.1:0").await;
    let (dir, key) = keys_file();
    let mut envs = vec![
        (
            "LEASEHOLD_API_KEYS_FILE",
            dir.join("keys").to_string_lossy().into_owned(),
        ),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{}", receiver.addr),
        ),
        ("OTEL_SERVICE_NAME", "leasehold-under-test".to_owned()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team%20a".to_owned()),
    ];
    if let Some(redis) = redis {
        envs.push(("LEASEHOLD_REDIS_URL", redis.url()));
    }
    let service = Service::start(&envs).await;
    let http = reqwest::Client::new();
    let bearer = format!("Bearer {key}");
    let (purpose, digest) = (unique("tracedpurpose"), digest());
    let lease = format!("{}/leases/{purpose}/{digest}", service.base);

    // 1. POST /attempts: a fresh trace.
    let op = unique("op-");
    let r = http
        .post(format!("{}/attempts", service.base))
        .header("authorization", &bearer)
        .json(&json!({ "operationId": op }))
        .send()
        .await
        .expect("attempt");
    assert_eq!(r.status(), StatusCode::CREATED);
    let body: Value = r.json().await.expect("json");
    let token = body["ownerToken"].as_str().expect("token").to_owned();
    let with_attempt = |rb: reqwest::RequestBuilder| {
        rb.header("authorization", &bearer)
            .header("lease-owner-token", &token)
            .header("lease-operation-id", &op)
    };
    // 2. Acquire: a fresh trace.
    let r = with_attempt(http.put(&lease))
        .json(&json!({ "ttlMs": 30000 }))
        .send()
        .await
        .expect("acquire");
    assert_eq!(r.status(), StatusCode::CREATED);
    // 3. Renew in the caller's trace, under the caller's span.
    let r = with_attempt(http.patch(&lease))
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .header("tracestate", "vendor=abc")
        .json(&json!({ "ttlMs": 30000 }))
        .send()
        .await
        .expect("renew");
    assert_eq!(r.status(), StatusCode::OK);
    // 4. Inspect with an invalid traceparent: ignored, not an error.
    let r = http
        .get(&lease)
        .header("authorization", &bearer)
        .header("traceparent", "00-not-a-trace-parent-01")
        .send()
        .await
        .expect("inspect");
    assert_eq!(r.status(), StatusCode::OK);
    // 5. Release in a caller's trace that is not sampled: no span.
    let r = with_attempt(http.delete(&lease))
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-00"))
        .send()
        .await
        .expect("release");
    assert_eq!(r.status(), StatusCode::OK);
    let logs = service.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    // The OTLP requests.
    let exports = receiver.exports();
    assert!(!exports.is_empty(), "nothing exported; logs:\n{logs}");
    for export in &exports {
        assert_eq!(
            (export.method.as_str(), export.path.as_str()),
            ("POST", "/v1/traces")
        );
        assert_eq!(export.header("content-type"), Some("application/json"));
        assert_eq!(export.header("x-tenant"), Some("team a"));
        let bytes = String::from_utf8_lossy(&export.body);
        for (what, secret) in [
            ("API key", key.as_str()),
            ("owner token", token.as_str()),
            ("purpose", purpose.as_str()),
            ("digest", digest.as_str()),
        ] {
            assert!(!bytes.contains(secret), "the {what} was exported: {bytes}");
        }
    }
    let spans = receiver.spans();
    for (resource, _) in &spans {
        assert!(
            resource["attributes"]
                .as_array()
                .expect("resource attributes")
                .contains(&json!({ "key": "service.name", "value": { "stringValue": "leasehold-under-test" } })),
            "{resource}"
        );
    }
    let spans: Vec<Value> = spans.into_iter().map(|(_, span)| span).collect();
    let named =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
    let one = |name: &str| -> &Value {
        let found = named(name);
        assert_eq!(found.len(), 1, "one {name} span: {spans:#?}");
        found[0]
    };
    let requests: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 2).collect();
    assert_eq!(
        requests.len(),
        4,
        "a span per sampled request: {requests:#?}"
    );
    let attempt = one("POST /attempts");
    let acquire = one("PUT /leases/{purpose}/{digest}");
    let renew = one("PATCH /leases/{purpose}/{digest}");
    let inspect = one("GET /leases/{purpose}/{digest}");
    // One trace per request.
    let mut traces: Vec<&str> = requests
        .iter()
        .map(|s| s["traceId"].as_str().expect("traceId"))
        .collect();
    traces.sort_unstable();
    traces.dedup();
    assert_eq!(traces.len(), 4, "{requests:#?}");
    for span in [attempt, acquire, inspect] {
        assert!(span.get("parentSpanId").is_none(), "a root span: {span}");
        assert_ne!(span["traceId"], CALLER_TRACE);
    }
    assert_eq!(renew["traceId"], CALLER_TRACE);
    assert_eq!(renew["parentSpanId"], CALLER_SPAN);
    assert_eq!(renew["traceState"], "vendor=abc");
    let attribute = |span: &Value, key: &str| -> Value {
        span["attributes"]
            .as_array()
            .expect("attributes")
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| a["value"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        attribute(acquire, "http.route"),
        json!({ "stringValue": "/leases/{purpose}/{digest}" })
    );
    assert_eq!(
        attribute(acquire, "http.response.status_code"),
        json!({ "intValue": "201" })
    );

    let store_spans: Vec<&Value> = spans.iter().filter(|s| s["kind"] != 2).collect();
    if redis.is_none() {
        // The embedded store runs no command: only request spans.
        assert_eq!(store_spans.len(), 0, "{store_spans:#?}");
        return;
    }
    // On Redis: request → store call → script run, in the request's trace.
    for (request, script) in [(acquire, "acquire"), (renew, "renew"), (inspect, "inspect")] {
        let store = one(&format!("store {script}"));
        assert_eq!(store["traceId"], request["traceId"], "{store}");
        assert_eq!(store["parentSpanId"], request["spanId"], "{store}");
        assert_eq!(store["kind"], 1);
        let run = one(&format!("EVALSHA {script}"));
        assert_eq!(run["traceId"], request["traceId"], "{run}");
        assert_eq!(run["parentSpanId"], store["spanId"], "{run}");
        assert_eq!(run["kind"], 3);
        assert_eq!(
            attribute(run, "db.system.name"),
            json!({ "stringValue": "redis" })
        );
    }
    // Nothing else: the unsampled release left no store span either.
    assert_eq!(store_spans.len(), 6, "{store_spans:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_requests_are_traced_with_the_store_call_as_a_child() {
    let server = RedisServer::start();
    spans_per_request(Some(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_requests_are_traced() {
    spans_per_request(None).await;
}

/// Without an endpoint, nothing is exported: the receiver listens on the
/// OTLP/HTTP default port (4318, where an SDK would send by default) and
/// gets no connection, through a lease cycle and the shutdown's flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_exported_without_an_endpoint() {
    let receiver = Receiver::start("127.0.0.1:4318").await;
    let service = Service::start(&[("OTEL_SERVICE_NAME", "leasehold-under-test".to_owned())]).await;
    let http = reqwest::Client::new();
    let op = unique("op-");
    let r = http
        .post(format!("{}/attempts", service.base))
        .json(&json!({ "operationId": op }))
        .send()
        .await
        .expect("attempt");
    assert_eq!(r.status(), StatusCode::CREATED);
    let body: Value = r.json().await.expect("json");
    let lease = format!("{}/leases/{}/{}", service.base, unique("p"), digest());
    let r = http
        .put(&lease)
        .header(
            "lease-owner-token",
            body["ownerToken"].as_str().expect("token"),
        )
        .header("lease-operation-id", &op)
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&json!({ "ttlMs": 30000 }))
        .send()
        .await
        .expect("acquire");
    assert_eq!(r.status(), StatusCode::CREATED);
    let logs = service.stop().await;
    assert_eq!(receiver.connections(), 0, "something was exported");
    assert!(!logs.contains("exporting traces"), "{logs}");
}

/// An https endpoint (this exporter has no TLS) stops the start, naming
/// the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_refused_at_startup() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("serve")
        .env_clear()
        .env("LEASEHOLD_LISTEN", "127.0.0.1:0")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://collector.example:4318",
        )
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(PATIENCE, out)
        .await
        .expect("exits in time")
        .expect("run leasehold");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{stderr}");
}

/// A collector that refuses connections: requests are answered, the
/// export failure is logged once (not per batch) and its spans counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_export_is_logged_once_and_counted() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = dead.local_addr().expect("addr");
    drop(dead);
    let service =
        Service::start(&[("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))]).await;
    for _ in 0..3 {
        let r = reqwest::get(format!("{}/livez", service.base))
            .await
            .expect("livez");
        assert_eq!(r.status(), StatusCode::OK);
    }
    service.until_logged("trace export failed").await;
    let failed = service
        .metric("leasehold_trace_spans_dropped_total{reason=\"export_failed\"}")
        .await;
    assert!(failed >= 1.0, "export_failed drops counted: {failed}");
    // More requests, another failed export (at shutdown): still one line.
    let r = reqwest::get(format!("{}/livez", service.base))
        .await
        .expect("livez");
    assert_eq!(r.status(), StatusCode::OK);
    let logs = service.stop().await;
    assert_eq!(logs.matches("trace export failed").count(), 1, "{logs}");
}

/// A collector that accepts and never answers: the export in flight waits
/// for its timeout, the queue fills, and further spans are dropped and
/// counted while every request is still answered; shutdown does not wait
/// for it beyond its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_collector_costs_spans_not_requests() {
    let receiver = Receiver::start_silent().await;
    let service = Service::start(&[(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://{}", receiver.addr),
    )])
    .await;
    let http = reqwest::Client::new();
    // The first batch is sent (and hangs) once the receiver is connected
    // to; after it, the queue (2048) fills.
    let first = http
        .get(format!("{}/livez", service.base))
        .send()
        .await
        .expect("livez");
    assert_eq!(first.status(), StatusCode::OK);
    let requests = 3000;
    for _ in 0..requests {
        let r = http
            .get(format!("{}/livez", service.base))
            .send()
            .await
            .expect("livez");
        assert_eq!(r.status(), StatusCode::OK);
    }
    let dropped = service
        .metric("leasehold_trace_spans_dropped_total{reason=\"queue_full\"}")
        .await;
    // At most one batch (512) in flight plus the queue (2048) are kept.
    assert!(
        dropped >= f64::from(requests - 512 - 2048),
        "queue_full drops counted: {dropped}"
    );
    assert!(receiver.connections() <= 1, "one export at a time");
    // Graceful shutdown gives the hung export 2 s, then exits anyway.
    let logs = service.stop().await;
    assert!(
        logs.contains("trace export did not finish in time"),
        "{logs}"
    );
}

/// A waiting acquire's later tries run on a task of their own (so that a
/// caller who leaves cannot be handed the lease): their store calls are
/// still in the waiter's trace, under its request span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_keeps_its_store_calls_under_its_span() {
    let redis = RedisServer::start();
    let receiver = Receiver::start("127.0.0.1:0").await;
    let service = Service::start(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{}", receiver.addr),
        ),
        ("LEASEHOLD_REDIS_URL", redis.url()),
    ])
    .await;
    let http = reqwest::Client::new();
    let lease = format!("{}/leases/{}/{}", service.base, unique("p"), digest());
    let mut attempts = Vec::new();
    for _ in 0..2 {
        let op = unique("op-");
        let r = http
            .post(format!("{}/attempts", service.base))
            .json(&json!({ "operationId": op }))
            .send()
            .await
            .expect("attempt");
        let body: Value = r.json().await.expect("json");
        attempts.push((body["ownerToken"].as_str().expect("token").to_owned(), op));
    }
    let put = |(token, op): &(String, String), body: Value| {
        http.put(&lease)
            .header("lease-owner-token", token)
            .header("lease-operation-id", op)
            .json(&body)
            .send()
    };
    let r = put(&attempts[0], json!({ "ttlMs": 30000 }))
        .await
        .expect("acquire");
    assert_eq!(r.status(), StatusCode::CREATED);
    // A lock-delay makes it a lease the release script does not hand off
    // (docs/queues.md): the waiter's own task runs the acquire after the
    // release, which is the store call this test follows.
    let waiter = tokio::spawn(put(
        &attempts[1],
        json!({ "ttlMs": 30000, "waitMs": 20000, "lockDelayMs": 1 }),
    ));
    // The waiter is queued (as TestApp::until_waiters does it).
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let ready: Value = reqwest::get(format!("{}/readyz", service.base))
            .await
            .expect("readyz")
            .json()
            .await
            .expect("json");
        if ready["waiters"] == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no waiter: {ready}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let r = http
        .delete(&lease)
        .header("lease-owner-token", &attempts[0].0)
        .header("lease-operation-id", &attempts[0].1)
        .send()
        .await
        .expect("release");
    assert_eq!(r.status(), StatusCode::OK);
    let r = waiter.await.expect("task").expect("waiting acquire");
    assert_eq!(r.status(), StatusCode::CREATED);
    service.stop().await;

    let spans: Vec<Value> = receiver.spans().into_iter().map(|(_, s)| s).collect();
    let puts: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "PUT /leases/{purpose}/{digest}")
        .collect();
    assert_eq!(puts.len(), 2, "{puts:#?}");
    let stores: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "store acquire")
        .collect();
    for store in &stores {
        assert!(
            puts.iter()
                .any(|p| p["spanId"] == store["parentSpanId"] && p["traceId"] == store["traceId"]),
            "a store call outside its request's trace: {store}"
        );
    }
    // The holder's one try; the waiter's first (contended) and, from its
    // own task, the one after the release.
    let under = |put: &Value| {
        stores
            .iter()
            .filter(|s| s["parentSpanId"] == put["spanId"])
            .count()
    };
    let mut counts = [under(puts[0]), under(puts[1])];
    counts.sort_unstable();
    assert!(
        counts[0] == 1 && counts[1] >= 2,
        "store calls per PUT: {counts:?}"
    );
}
