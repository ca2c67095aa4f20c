//! The lease verbs served outside hyper on a kept-alive plain connection
//! (`src/http/keep_alive.rs`), over raw TCP so the bytes on the wire are
//! the test's: requests answered in order (pipelined ones too), hyper
//! taking the connection at the first request of another route with the
//! bytes already read, and a caller that closes its connection mid-wait
//! leaving the queue at once.

#[allow(unused_imports)]
use crate::common;

use std::time::Duration;

use common::app::{digest, Backend, TestApp, TestAttempt};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const P: &str = "keep-alive";

/// Reads what comes next on `conn` onto `rest`.
async fn read_more(conn: &mut TcpStream, rest: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
        .await
        .expect("an answer within 10 s")
        .expect("read");
    assert!(n > 0, "connection closed before the answer was whole");
    rest.extend_from_slice(&buf[..n]);
}

/// One answer read off `conn`: status, head (lower-cased), body. `rest`
/// keeps what was read past it (the next answer's bytes).
async fn answer(conn: &mut TcpStream, rest: &mut Vec<u8>) -> (u16, String, String) {
    let head_end = loop {
        if let Some(at) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        read_more(conn, rest).await;
    };
    let head = String::from_utf8_lossy(&rest[..head_end]).to_lowercase();
    let status: u16 = head[9..12].parse().expect("status");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length")
        .trim()
        .parse()
        .expect("length");
    while rest.len() < head_end + length {
        read_more(conn, rest).await;
    }
    let body = String::from_utf8_lossy(&rest[head_end..head_end + length]).into_owned();
    rest.drain(..head_end + length);
    (status, head, body)
}

fn acquire(d: &str, who: &TestAttempt, body: &str) -> String {
    format!(
        "PUT /leases/{P}/{d} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nlease-owner-token: {}\r\nlease-operation-id: {}\r\n\r\n{body}",
        body.len(),
        who.token,
        who.op
    )
}

fn plain(method: &str, path: &str, who: &TestAttempt) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nlease-owner-token: {}\r\nlease-operation-id: {}\r\n\r\n",
        who.token, who.op
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_verbs_share_one_connection_until_another_route_hands_it_to_hyper() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let d = digest();
    let a = app.attempt().await;
    let mut conn = TcpStream::connect(app.addr).await.expect("connect");
    let mut rest = Vec::new();

    conn.write_all(acquire(&d, &a, r#"{"ttlMs":30000}"#).as_bytes())
        .await
        .expect("write");
    let (status, head, body) = answer(&mut conn, &mut rest).await;
    assert_eq!(status, 201, "{head}{body}");
    assert!(body.contains(r#""outcome":"acquired""#), "{body}");
    for header in ["date: ", "x-request-id: ", "content-type: application/json"] {
        assert!(head.contains(header), "no {header} in {head}");
    }
    assert!(!head.contains("connection: close"), "{head}");

    // Two requests in one write: both answered, in order.
    let path = format!("/leases/{P}/{d}");
    let two = plain("GET", &path, &a) + &plain("DELETE", &path, &a);
    conn.write_all(two.as_bytes()).await.expect("write");
    let (status, _, inspected) = answer(&mut conn, &mut rest).await;
    assert_eq!(status, 200, "{inspected}");
    assert!(inspected.contains(r#""held":true"#), "{inspected}");
    let (status, _, released) = answer(&mut conn, &mut rest).await;
    assert_eq!(status, 200, "{released}");
    assert!(released.contains(r#""outcome":"released""#), "{released}");

    // Another route, with a lease verb right behind it in the same write:
    // hyper takes the connection with both and answers both.
    let b = TestApp::other_operation(&a);
    let mixed = plain("GET", "/livez", &a) + &acquire(&d, &b, r#"{"ttlMs":30000}"#);
    conn.write_all(mixed.as_bytes()).await.expect("write");
    let (status, _, _) = answer(&mut conn, &mut rest).await;
    assert_eq!(status, 200);
    let (status, _, again) = answer(&mut conn, &mut rest).await;
    assert_eq!(status, 201, "{again}");
    assert!(again.contains(r#""outcome":"acquired""#), "{again}");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
}

/// The caller closes its connection while its acquire waits: the wait
/// ends at once (its future is dropped, as under hyper), it does not
/// linger in the queue until its deadline, and the lease goes to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_closes_mid_wait_leaves_at_once() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let d = digest();
    let holder = app.attempt().await;
    assert_eq!(
        app.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let waiter = app.attempt().await;
    let mut conn = TcpStream::connect(app.addr).await.expect("connect");
    conn.write_all(acquire(&d, &waiter, r#"{"ttlMs":30000,"waitMs":20000}"#).as_bytes())
        .await
        .expect("write");
    app.until_waiters(1).await;
    drop(conn);
    // Well before the 20 s deadline.
    app.until_waiters(0).await;
    assert_eq!(app.release(P, &d, &holder).await.outcome(), "released");
    let next = app.attempt().await;
    assert_eq!(
        app.acquire(P, &d, &next, 30_000).await.outcome(),
        "acquired"
    );
}

/// At shutdown a request in flight on a kept-alive connection is still
/// answered (a wait ends `contended`), and then that connection and an
/// idle one are closed, so the shutdown finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_shutdown_a_wait_is_answered_and_kept_alive_connections_close() {
    let mut app = TestApp::spawn(&Backend::Memory).await;
    let d = digest();
    let holder = app.attempt().await;
    assert_eq!(
        app.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    // An idle connection: one request answered, then nothing.
    let looker = app.attempt().await;
    let mut idle = TcpStream::connect(app.addr).await.expect("connect");
    let mut idle_rest = Vec::new();
    idle.write_all(plain("GET", &format!("/leases/{P}/{d}"), &looker).as_bytes())
        .await
        .expect("write");
    let (status, _, _) = answer(&mut idle, &mut idle_rest).await;
    assert_eq!(status, 200);
    // A waiting acquire on another.
    let waiter = app.attempt().await;
    let mut busy = TcpStream::connect(app.addr).await.expect("connect");
    let mut busy_rest = Vec::new();
    busy.write_all(acquire(&d, &waiter, r#"{"ttlMs":30000,"waitMs":20000}"#).as_bytes())
        .await
        .expect("write");
    app.until_waiters(1).await;
    app.begin_shutdown();
    let (_, head, body) = answer(&mut busy, &mut busy_rest).await;
    assert!(body.contains(r#""outcome":"contended""#), "{head}{body}");
    for (name, conn) in [("busy", &mut busy), ("idle", &mut idle)] {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("the {name} connection was not closed"));
        assert!(matches!(read, Ok(0) | Err(_)), "{name}: {read:?}");
    }
    app.finished().await;
}
