//! The allocation budget per request (issue 25, docs/performance.md
//! "Allocation budget"): the service runs on a thread of its own whose
//! allocations a counting global allocator ([`counter`]) counts; a client on
//! the test's runtime sends batches of one kind of request over one
//! keep-alive connection, each request counted from just before it is sent
//! until its answer is read, and each kind's mean allocations and bytes per
//! request must stay within the budget stated below.
//!
//! Counted: everything the service's thread allocates while a batch runs:
//! hyper, axum, the handler, the store call (the embedded store, or the
//! Redis connection's send and parse), metrics. Not counted: start-up, the
//! warm-up batches, the client. No log subscriber is installed (as in the
//! other tests; `TEST_LOG` unset).
//!
//! Where they come from: `ALLOC_TRACE_FROM_BYTES=0 cargo test --all-features
//! --test metrics -- allocation_budget --nocapture` prints a backtrace of
//! every counted allocation of the measured batches (of at least that many
//! bytes), each batch opened by a `batch:` line. The tracer's own
//! allocations are not counted, but it slows each request enough for some
//! background work to land in the counts: the budget fails under it.

use std::net::SocketAddr;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::SERIAL;
use crate::common::app::{args, digest, unique, Backend};
use crate::common::redis::RedisServer;

mod counter;

use counter::Counts;

/// Requests of each kind measured (after the warm-up).
const N: usize = 200;
/// Requests of each kind sent first and not measured: connection set-up,
/// metric handles cached, maps grown.
const WARM_UP: usize = 30;

/// The budget: at most this many allocations, and bytes, per request on
/// average. The measured figure plus a small margin (docs/performance.md
/// "Allocation budget" has the figures).
#[derive(Clone, Copy, Debug)]
struct Budget {
    allocations: f64,
    bytes: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Acquire,
    Renew,
    Contended,
    Release,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Acquire, Kind::Renew, Kind::Contended, Kind::Release];

    fn name(self) -> &'static str {
        match self {
            Kind::Acquire => "acquire (PUT, acquired)",
            Kind::Renew => "renew (PATCH, renewed)",
            Kind::Contended => "acquire (PUT, contended)",
            Kind::Release => "release (DELETE, released)",
        }
    }

    fn outcome(self) -> &'static str {
        match self {
            Kind::Acquire => "acquired",
            Kind::Renew => "renewed",
            Kind::Contended => "contended",
            Kind::Release => "released",
        }
    }

    fn budget(self, backend: &Backend) -> Budget {
        // (allocations, bytes) per request: the measured mean (debug build,
        // 2026-12-05, after the lease verbs left the router) rounded up
        // plus 2 allocations, and plus 5 % of the bytes rounded up to 500.
        // Lower them when a change cuts one.
        let (allocations, bytes) = match (backend, self) {
            (Backend::Memory, Kind::Acquire) => (33.0, 26_500.0),
            (Backend::Memory, Kind::Renew) => (23.0, 24_500.0),
            (Backend::Memory, Kind::Contended) => (30.0, 25_500.0),
            (Backend::Memory, Kind::Release) => (26.0, 24_500.0),
            (Backend::Redis(_), Kind::Acquire) => (36.0, 27_500.0),
            (Backend::Redis(_), Kind::Renew) => (37.0, 28_000.0),
            (Backend::Redis(_), Kind::Contended) => (42.0, 28_500.0),
            (Backend::Redis(_), Kind::Release) => (39.0, 28_000.0),
        };
        Budget { allocations, bytes }
    }
}

/// A leasehold instance on a thread of its own, with a current-thread
/// runtime: every task of the service (connections, handlers, the store's
/// connection driver, background work) runs there, and only there are
/// allocations counted.
struct CountedApp {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CountedApp {
    fn spawn(backend: &Backend) -> CountedApp {
        let config = args(backend, &[]).validate().expect("valid test settings");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("counted-service".into())
            .spawn(move || {
                counter::count_this_thread();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                    leasehold::run(listener, config, async move {
                        let _ = rx.await;
                    })
                    .await
                    .expect("leasehold::run");
                });
            })
            .expect("service thread");
        CountedApp {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("service thread");
        }
    }
}

/// One keep-alive HTTP/1.1 connection, one request at a time: a pooled
/// client may dial a second connection while the first is on its way back
/// to the pool, and a new connection's set-up would be counted as the
/// request's.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        Conn {
            stream: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::with_capacity(4096),
        }
    }

    /// Sends one request and reads its answer: (status, JSON body).
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        who: Option<&(String, String)>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: leasehold\r\n");
        if let Some((token, op)) = who {
            request.push_str(&format!(
                "Lease-Owner-Token: {token}\r\nLease-Operation-Id: {op}\r\n"
            ));
        }
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        self.stream
            .write_all(request.as_bytes())
            .await
            .expect("write");
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head) =
                response.parse(&self.buf).expect("an HTTP/1.1 answer")
            {
                let length: usize = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map(|h| {
                        std::str::from_utf8(h.value)
                            .expect("ascii")
                            .parse()
                            .expect("length")
                    })
                    .expect("content-length");
                let status = response.code.expect("status");
                if self.buf.len() >= head + length {
                    let body = serde_json::from_slice(&self.buf[head..head + length])
                        .unwrap_or(Value::Null);
                    self.buf.drain(..head + length);
                    return (status, body);
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the service closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// A new attempt: (owner token, operation id).
    async fn attempt(&mut self) -> (String, String) {
        let op = unique("op-");
        let (status, body) = self
            .call(
                "POST",
                "/attempts",
                None,
                Some(json!({ "operationId": op })),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let token = body["ownerToken"].as_str().expect("ownerToken").to_owned();
        (token, op)
    }

    /// One request of `kind` on `digest`, checked for its outcome.
    async fn request(&mut self, kind: Kind, purpose: &str, digest: &str, who: &(String, String)) {
        let path = format!("/leases/{purpose}/{digest}");
        let ttl = Some(json!({ "ttlMs": 60_000 }));
        let (_, body) = match kind {
            Kind::Acquire | Kind::Contended => self.call("PUT", &path, Some(who), ttl).await,
            Kind::Renew => self.call("PATCH", &path, Some(who), ttl).await,
            Kind::Release => self.call("DELETE", &path, Some(who), None).await,
        };
        assert_eq!(body["outcome"], kind.outcome(), "{kind:?}: {body}");
    }

    /// Runs `n` leases (each held by one attempt, contended by another)
    /// through acquire, renew, a contended acquire and release, one batch
    /// per kind; returns each kind's counts over its batch.
    async fn cycle(&mut self, purpose: &str, n: usize) -> Vec<(Kind, Counts)> {
        let mut leases = Vec::with_capacity(n);
        for _ in 0..n {
            leases.push((digest(), self.attempt().await, self.attempt().await));
        }
        let mut out = Vec::new();
        for kind in Kind::ALL {
            eprintln!("batch: {n} × {}", kind.name());
            // Counted from just before each request is sent until its
            // answer is read: the service's background work between
            // requests stays out, whatever the machine's pace.
            let mut total = Counts::default();
            for (d, holder, other) in &leases {
                let who = if kind == Kind::Contended {
                    other
                } else {
                    holder
                };
                let before = Counts::now();
                self.request(kind, purpose, d, who).await;
                total = total.plus(Counts::now().since(before));
            }
            out.push((kind, total));
        }
        out
    }
}

async fn requests_stay_within_the_allocation_budget(backend: Backend, store: &str) {
    let app = CountedApp::spawn(&backend);
    let mut conn = Conn::open(app.addr).await;
    // One purpose for the warm-up and the measured batches: its metric
    // handles are created once, in the warm-up.
    let purpose = unique("alloc-");
    conn.cycle(&purpose, WARM_UP).await;
    if let Some(bytes) = std::env::var("ALLOC_TRACE_FROM_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        counter::trace_from(bytes);
    }
    let measured = conn.cycle(&purpose, N).await;
    drop(conn);
    app.shutdown();

    let mut report = String::new();
    let mut over = Vec::new();
    for (kind, counts) in measured {
        let allocations = counts.allocations as f64 / N as f64;
        let bytes = counts.bytes as f64 / N as f64;
        let budget = kind.budget(&backend);
        let line = format!(
            "{store}: {:<27} {allocations:5.1} allocations, {bytes:6.0} bytes per request \
             (budget {:.0}, {:.0})",
            kind.name(),
            budget.allocations,
            budget.bytes
        );
        if allocations > budget.allocations || bytes > budget.bytes {
            over.push(line.clone());
        }
        report.push_str(&line);
        report.push('\n');
    }
    eprint!("{report}");
    assert!(
        over.is_empty(),
        "over the allocation budget (tests/it/metrics/allocations.rs, \
         docs/performance.md#allocation-budget):\n{}\nall figures:\n{report}",
        over.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_requests_stay_within_the_allocation_budget() {
    let _turn = SERIAL.lock().await;
    requests_stay_within_the_allocation_budget(Backend::Memory, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_requests_stay_within_the_allocation_budget() {
    let _turn = SERIAL.lock().await;
    let server = RedisServer::start();
    requests_stay_within_the_allocation_budget(Backend::Redis(server.url()), "redis").await;
    drop(server);
}
