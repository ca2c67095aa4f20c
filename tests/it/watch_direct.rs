//! Event streams written outside hyper (`src/http/direct.rs`): a fresh
//! plain connection whose first request is `GET …/events` is answered by
//! the hand-written paths, an opened stream with `connection: close` and a
//! chunked body; the same request on a connection hyper already serves is
//! hyper's. Raw TCP,
//! so which path answered is visible in the head. Every wait is on a
//! server-side event (bytes, an end of stream, /readyz), bounded.

#[allow(unused_imports)]
use crate::common;

use std::time::{Duration, Instant};

use crate::watch::{readyz_watchers, until_watchers};
use common::app::{args, digest, Backend, TestApp, TestAttempt};
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const P: &str = "direct";

/// An instance whose fast paths are on, whatever the suite's setting:
/// these tests are of the path outside hyper.
async fn direct_app(extra: &[&str]) -> TestApp {
    let mut flags = vec!["--http-fast-paths", "true"];
    flags.extend_from_slice(extra);
    TestApp::spawn_with(args(&Backend::Memory, &flags)).await
}

/// Bound on any single wait in this file.
const BOUND: Duration = Duration::from_secs(10);

/// A raw HTTP/1.1 connection, read as a head and then a chunked body.
struct Raw {
    tcp: TcpStream,
    /// Bytes read and not yet consumed.
    buf: Vec<u8>,
    /// Decoded body bytes not yet split into events.
    body: String,
}

impl Raw {
    async fn connect(app: &TestApp) -> Raw {
        let tcp = TcpStream::connect(app.addr).await.expect("connect");
        Raw {
            tcp,
            buf: Vec::new(),
            body: String::new(),
        }
    }

    async fn send(&mut self, request: &str) {
        self.tcp
            .write_all(request.as_bytes())
            .await
            .expect("write request");
    }

    /// More bytes from the socket; false at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(BOUND, self.tcp.read(&mut chunk))
            .await
            .expect("the server sent nothing within the bound")
            .expect("read");
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// The next response head, lower-cased.
    async fn head(&mut self) -> String {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head: Vec<u8> = self.buf.drain(..end + 4).collect();
                return String::from_utf8(head).expect("ASCII head").to_lowercase();
            }
            assert!(self.fill().await, "closed before a head");
        }
    }

    /// `n` body bytes (a `content-length` body).
    async fn bytes(&mut self, n: usize) -> String {
        while self.buf.len() < n {
            assert!(self.fill().await, "closed inside a body");
        }
        String::from_utf8(self.buf.drain(..n).collect()).expect("UTF-8 body")
    }

    /// The next chunk's data; `None` for the last (empty) chunk.
    async fn chunk(&mut self) -> Option<String> {
        let line = loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..end + 2).collect();
                break String::from_utf8(line).expect("ASCII size line");
            }
            assert!(self.fill().await, "closed inside the chunked body");
        };
        let size = usize::from_str_radix(line.trim_end(), 16).expect("hex chunk size");
        while self.buf.len() < size + 2 {
            assert!(self.fill().await, "closed inside a chunk");
        }
        let data: Vec<u8> = self.buf.drain(..size + 2).collect();
        assert_eq!(&data[size..], b"\r\n", "a chunk ends with CRLF");
        (size > 0).then(|| String::from_utf8(data[..size].to_vec()).expect("UTF-8"))
    }

    /// The next event's name (comment lines skipped).
    async fn event(&mut self) -> String {
        loop {
            if let Some(end) = self.body.find("\n\n") {
                let block: String = self.body.drain(..end + 2).collect();
                if block.starts_with(':') {
                    continue;
                }
                let name = block.lines().find_map(|l| l.strip_prefix("event: "));
                return name.expect("an event line").to_owned();
            }
            let data = self.chunk().await.expect("the stream ended early");
            self.body.push_str(&data);
        }
    }

    /// Whether the server closes the connection (reads until it does, or
    /// until `BOUND`).
    async fn closed_by_server(&mut self) -> bool {
        let deadline = Instant::now() + BOUND;
        while Instant::now() < deadline {
            if !self.fill().await {
                return true;
            }
        }
        false
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn events_request(d: &str, query: &str) -> String {
    format!("GET /leases/{P}/{d}/events{query} HTTP/1.1\r\nhost: x\r\n\r\n")
}

async fn acquire(app: &TestApp, d: &str) -> TestAttempt {
    let a = app.attempt().await;
    let r = app
        .acquire_body(P, d, &a, &json!({"ttlMs": 30_000, "holder": "w"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    a
}

#[tokio::test]
async fn a_fresh_connection_streams_outside_hyper_and_ends_with_the_last_chunk() {
    let app = direct_app(&[]).await;
    let d = digest();
    let mut raw = Raw::connect(&app).await;
    raw.send(&events_request(&d, "?maxEvents=2")).await;
    let head = raw.head().await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    for line in [
        "content-type: text/event-stream",
        "cache-control: no-cache",
        "transfer-encoding: chunked",
        "connection: close",
        "x-request-id: ",
        "date: ",
    ] {
        assert!(head.contains(line), "{line:?} missing from {head}");
    }
    assert_eq!(raw.event().await, "state");
    acquire(&app, &d).await;
    assert_eq!(raw.event().await, "acquired");
    // maxEvents reached: the last chunk, then the server closes.
    assert_eq!(raw.chunk().await, None);
    assert!(raw.closed_by_server().await);
    until_watchers(&app, 0).await;
}

#[tokio::test]
async fn a_stream_on_a_connection_hyper_serves_is_hyper_s() {
    let app = direct_app(&[]).await;
    let d = digest();
    let mut raw = Raw::connect(&app).await;
    raw.send("GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let head = raw.head().await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .expect("content-length");
    raw.bytes(length).await;
    raw.send(&events_request(&d, "?maxEvents=1")).await;
    let head = raw.head().await;
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    assert_eq!(raw.event().await, "state");
    assert_eq!(raw.chunk().await, None);
    // Keep-alive: the same connection answers again.
    raw.send("GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(raw.head().await.starts_with("http/1.1 200 ok\r\n"));
}

#[tokio::test]
async fn a_client_that_closes_its_direct_stream_frees_its_watcher_at_once() {
    // The longest keep-alive (15 s), beyond the 10 s bound: no write
    // finds the socket gone in time; only noticing the close can.
    let app = direct_app(&["--sse-keepalive-ms", "15000"]).await;
    let d = digest();
    let mut raw = Raw::connect(&app).await;
    raw.send(&events_request(&d, "")).await;
    assert!(raw.head().await.contains("connection: close"));
    assert_eq!(raw.event().await, "state");
    assert_eq!(readyz_watchers(&app).await, 1);
    drop(raw);
    until_watchers(&app, 0).await;
}

/// A refused stream is answered as hyper answers it (the front door's
/// rule, `src/http/lanes.rs`): a problem with a `content-length`, on a
/// connection kept alive for the next request.
#[tokio::test]
async fn refused_direct_streams_are_problems_on_a_kept_alive_connection() {
    let app = direct_app(&["--max-watchers", "1"]).await;
    let mut bad = Raw::connect(&app).await;
    bad.send(&events_request("v1.nothex", "")).await;
    let head = bad.head().await;
    assert!(head.starts_with("http/1.1 400 bad request\r\n"), "{head}");
    assert!(head.contains("content-type: application/problem+json"));
    assert!(!head.contains("connection: close"), "{head}");
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .expect("content-length");
    let body: serde_json::Value =
        serde_json::from_str(&bad.bytes(length).await).expect("problem JSON");
    assert_eq!(body["errors"][0]["field"], "digest", "{body}");
    bad.send("GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(bad.head().await.starts_with("http/1.1 200 ok\r\n"));

    // The cap: the second stream is `overloaded`, with Retry-After.
    let d = digest();
    let mut one = Raw::connect(&app).await;
    one.send(&events_request(&d, "")).await;
    assert!(one.head().await.starts_with("http/1.1 200 ok"));
    let mut two = Raw::connect(&app).await;
    two.send(&events_request(&d, "")).await;
    let head = two.head().await;
    assert!(
        head.starts_with("http/1.1 503 service unavailable\r\n"),
        "{head}"
    );
    assert!(head.contains("retry-after: "), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
}

#[tokio::test]
async fn shutdown_ends_direct_streams_with_the_last_chunk() {
    let mut app = direct_app(&[]).await;
    let d = digest();
    let mut raw = Raw::connect(&app).await;
    raw.send(&events_request(&d, "")).await;
    assert!(raw.head().await.contains("connection: close"));
    assert_eq!(raw.event().await, "state");
    app.begin_shutdown();
    loop {
        match raw.chunk().await {
            None => break,
            // Only keep-alive comments may come before the end.
            Some(data) => assert!(data.starts_with(':'), "{data}"),
        }
    }
    assert!(raw.closed_by_server().await);
    tokio::time::timeout(BOUND, app.finished())
        .await
        .expect("shutdown did not hang on a direct stream");
}

#[tokio::test]
async fn a_direct_stream_whose_client_stops_reading_holds_up_nobody_and_is_closed() {
    // A write that makes no progress for 1 s closes the stream.
    let app = direct_app(&["--idle-timeout-ms", "1000"]).await;
    let d = digest();
    // The stalled client: a small receive buffer; it reads the head and
    // the first event, then nothing.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stalled = Raw {
        tcp: socket.connect(app.addr).await.expect("connect"),
        buf: Vec::new(),
        body: String::new(),
    };
    stalled.send(&events_request(&d, "")).await;
    assert!(stalled.head().await.contains("connection: close"));
    assert_eq!(stalled.event().await, "state");
    let mut reader = Raw::connect(&app).await;
    reader.send(&events_request(&d, "")).await;
    assert!(reader.head().await.contains("connection: close"));
    assert_eq!(reader.event().await, "state");
    // Changes, each seen by the reader before the next, until the stalled
    // stream's socket is full for 1 s and the server lets it go (about
    // 3 200 cycles here: the kernel lets the server's send buffer grow to
    // 4 MiB, `net.ipv4.tcp_wmem`). A long holder label makes the events
    // larger.
    let label = "h".repeat(200);
    let mut cycles = 0;
    while cycles % 50 != 0 || readyz_watchers(&app).await == 2 {
        assert!(cycles < 20_000, "the stalled stream was never closed");
        let a = app.attempt().await;
        let r = app
            .acquire_body(P, &d, &a, &json!({"ttlMs": 30_000, "holder": label}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        assert_eq!(reader.event().await, "acquired");
        assert_eq!(app.release(P, &d, &a).await.status, StatusCode::OK);
        assert_eq!(reader.event().await, "released");
        cycles += 1;
    }
    eprintln!("the stalled stream was closed after {cycles} cycles");
    // The reader's stream goes on.
    acquire(&app, &d).await;
    assert_eq!(reader.event().await, "acquired");
    assert_eq!(readyz_watchers(&app).await, 1);
}

// ---- a session's keep-alive stream, written outside hyper too ----

/// A session of `ttl_ms` made over HTTP: (id, its secret).
async fn session(app: &TestApp, ttl_ms: u64) -> (String, String) {
    let a = app.attempt().await;
    let r = TestApp::reply(
        app.http
            .post(format!("{}/sessions", app.base))
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
            .json(&json!({"ttlMs": ttl_ms, "holder": "w"}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["session"]["id"].as_str().expect("id").to_owned();
    (id, a.token)
}

fn keepalive_request(id: &str, secret: &str, query: &str) -> String {
    format!(
        "GET /sessions/{id}/keepalive{query} HTTP/1.1\r\nhost: x\r\nlease-owner-token: {secret}\r\n\r\n"
    )
}

/// Reads session `id` until it is no longer live (bounded): its `reason`.
async fn until_session_lost(app: &TestApp, id: &str) -> String {
    let deadline = Instant::now() + BOUND;
    loop {
        let r = app.get(&format!("/sessions/{id}")).await;
        if r.outcome() == "lost" {
            return r.body["reason"].as_str().expect("reason").to_owned();
        }
        assert_eq!(r.outcome(), "session", "{:?}", r.body);
        assert!(Instant::now() < deadline, "{id} still live: {:?}", r.body);
        // The end runs on the server after the close: give it the core.
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_keepalive_on_a_fresh_connection_is_written_outside_hyper() {
    // A 3 s TTL renews every second: a second `renewed` event within the
    // bound shows the task renews, not only the first answer.
    let app = direct_app(&[]).await;
    let (id, secret) = session(&app, 3_000).await;
    let mut raw = Raw::connect(&app).await;
    raw.send(&keepalive_request(&id, &secret, "?maxMs=2500"))
        .await;
    let head = raw.head().await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    for line in [
        "content-type: text/event-stream",
        "transfer-encoding: chunked",
        "connection: close",
        "x-request-id: ",
    ] {
        assert!(head.contains(line), "{line:?} missing from {head}");
    }
    assert_eq!(raw.event().await, "renewed");
    assert_eq!(raw.event().await, "renewed");
    // maxMs: the session is ended, the last chunk written, the connection
    // closed.
    loop {
        match raw.chunk().await {
            None => break,
            Some(data) => assert!(data.starts_with("event: renewed"), "{data}"),
        }
    }
    assert!(raw.closed_by_server().await);
    assert_eq!(until_session_lost(&app, &id).await, "session_ended");
    assert_eq!(readyz_watchers(&app).await, 0);
}

#[tokio::test]
async fn a_client_that_closes_its_direct_keepalive_ends_the_session_at_once() {
    // A TTL of a minute: only noticing the close ends it within the bound.
    let app = direct_app(&[]).await;
    let (id, secret) = session(&app, 60_000).await;
    let d = digest();
    let taken = TestApp::reply(
        app.http
            .put(format!("{}/sessions/{id}/leases/{P}/{d}", app.base))
            .header("Lease-Owner-Token", &secret)
            .header("Lease-Operation-Id", "op-1")
            .json(&json!({}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(taken.status, StatusCode::CREATED, "{:?}", taken.body);
    let mut raw = Raw::connect(&app).await;
    raw.send(&keepalive_request(&id, &secret, "")).await;
    assert!(raw.head().await.contains("connection: close"));
    assert_eq!(raw.event().await, "renewed");
    until_watchers(&app, 1).await;
    drop(raw);
    assert_eq!(until_session_lost(&app, &id).await, "session_ended");
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);
    until_watchers(&app, 0).await;
}

#[tokio::test]
async fn a_refused_keepalive_is_a_problem_on_the_kept_alive_connection() {
    let app = direct_app(&[]).await;
    let (id, _) = session(&app, 60_000).await;
    let mut raw = Raw::connect(&app).await;
    raw.send(&keepalive_request(&id, &"x".repeat(32), "")).await;
    let head = raw.head().await;
    assert!(head.starts_with("http/1.1 409 conflict\r\n"), "{head}");
    assert!(head.contains("application/problem+json"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .expect("content-length");
    assert!(raw.bytes(length).await.contains("not_owner"));
    // The connection goes on.
    raw.send("GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(raw.head().await.starts_with("http/1.1 200 ok\r\n"));
}

#[tokio::test]
async fn shutdown_ends_direct_keepalives_with_the_last_chunk() {
    let mut app = direct_app(&[]).await;
    let (id, secret) = session(&app, 60_000).await;
    let mut raw = Raw::connect(&app).await;
    raw.send(&keepalive_request(&id, &secret, "")).await;
    assert!(raw.head().await.contains("connection: close"));
    assert_eq!(raw.event().await, "renewed");
    app.begin_shutdown();
    assert_eq!(raw.chunk().await, None);
    assert!(raw.closed_by_server().await);
    tokio::time::timeout(BOUND, app.finished())
        .await
        .expect("shutdown did not hang on a keep-alive stream");
}

/// An instance with its fast paths on (the stream written outside hyper)
/// or off (hyper's): the keep-alive behaves the same under both.
async fn app_with_fast_paths(on: bool) -> TestApp {
    let on = if on { "true" } else { "false" };
    TestApp::spawn_with(args(&Backend::Memory, &["--http-fast-paths", on])).await
}

#[tokio::test]
async fn bytes_sent_after_a_keepalive_neither_wedge_it_nor_end_its_session() {
    bytes_after_a_keepalive(true).await;
}

#[tokio::test]
async fn bytes_sent_after_a_keepalive_hyper_serves_neither_wedge_it_nor_end_its_session() {
    bytes_after_a_keepalive(false).await;
}

async fn bytes_after_a_keepalive(fast: bool) {
    // A pipelined request and 256 KiB of junk behind the keep-alive's
    // request, in one write: the stream goes on renewing (outside hyper
    // the bytes are read and dropped: its head said `connection: close`),
    // and the session ends only when the client goes.
    let app = app_with_fast_paths(fast).await;
    let (id, secret) = session(&app, 3_000).await;
    let mut raw = Raw::connect(&app).await;
    let mut sent = keepalive_request(&id, &secret, "");
    sent.push_str("GET /livez HTTP/1.1\r\nhost: x\r\n\r\n");
    sent.push_str(&"#\0\r\n x".repeat(256 * 1024 / 6));
    raw.send(&sent).await;
    let head = raw.head().await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    // A 3 s TTL renews every second: three renewals are past the TTL the
    // session was made with.
    for _ in 0..4 {
        assert_eq!(raw.event().await, "renewed");
    }
    let live = app.get(&format!("/sessions/{id}")).await;
    assert_eq!(live.outcome(), "session", "{:?}", live.body);
    raw.send("more junk after the stream began\r\n\r\n").await;
    assert_eq!(raw.event().await, "renewed");
    drop(raw);
    assert_eq!(until_session_lost(&app, &id).await, "session_ended");
    until_watchers(&app, 0).await;
}

#[tokio::test]
async fn two_keepalives_on_one_session_end_it_when_either_client_goes() {
    // Each stream renews the session; the session ends with the first
    // connection that closes, and the other stream hears it as `lost`.
    let app = direct_app(&[]).await;
    let (id, secret) = session(&app, 60_000).await;
    let (mut first, mut second) = (Raw::connect(&app).await, Raw::connect(&app).await);
    for raw in [&mut first, &mut second] {
        raw.send(&keepalive_request(&id, &secret, "")).await;
        assert!(raw.head().await.contains("connection: close"));
        assert_eq!(raw.event().await, "renewed");
    }
    until_watchers(&app, 2).await;
    drop(first);
    assert_eq!(second.event().await, "lost");
    assert_eq!(second.chunk().await, None);
    assert!(second.closed_by_server().await);
    assert_eq!(until_session_lost(&app, &id).await, "session_ended");
    until_watchers(&app, 0).await;
}

#[tokio::test]
async fn a_keepalive_whose_client_half_closes_ends_the_session() {
    half_closed_keepalive(true).await;
}

#[tokio::test]
async fn a_keepalive_hyper_serves_whose_client_half_closes_ends_the_session() {
    half_closed_keepalive(false).await;
}

async fn half_closed_keepalive(fast: bool) {
    let app = app_with_fast_paths(fast).await;
    let (id, secret) = session(&app, 60_000).await;
    let mut raw = Raw::connect(&app).await;
    raw.send(&keepalive_request(&id, &secret, "")).await;
    let head = raw.head().await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    assert_eq!(head.contains("connection: close"), fast, "{head}");
    assert_eq!(raw.event().await, "renewed");
    raw.tcp.shutdown().await.expect("half-close");
    assert_eq!(until_session_lost(&app, &id).await, "session_ended");
    until_watchers(&app, 0).await;
}
