//! Unit tests of the front door (`lanes.rs`): the labels, the lanes, the
//! head parser, and the bounded collection of an answer body.

use super::*;

/// The labels are what dashboards and alerts name: the modules' route
/// templates must stay these very strings.
#[test]
fn route_labels_are_the_templates_dashboards_know() {
    let cases = [
        ("/attempts", "/attempts"),
        ("/leases/p/v1.d", "/leases/{purpose}/{digest}"),
        ("/leases/p", "/leases/{purpose}"),
        ("/leases/p/v1.d/events", "/leases/{purpose}/{digest}/events"),
        (
            "/leases/p/v1.d/history",
            "/leases/{purpose}/{digest}/history",
        ),
        ("/leases/p/events", "/leases/{purpose}/events"),
        ("/leases/p/v1.d/break", "/leases/{purpose}/{digest}/break"),
        ("/livez", "/livez"),
        ("/readyz", "/readyz"),
        ("/openapi.json", "/openapi.json"),
        ("/docs", "/docs"),
        ("/console", "/console"),
        ("/console/app.js", "/console/app.js"),
        ("/purposes", "/purposes"),
        ("/metrics", "/metrics"),
        ("/problems/contended", "/problems/{type}"),
        ("/problems/", "unmatched"),
        ("/nowhere", "unmatched"),
    ];
    for (path, label) in cases {
        assert_eq!(route_label(path, true), label, "{path}");
    }
    assert_eq!(route_label("/metrics", false), "unmatched");
}

#[test]
fn targets_are_classified_into_their_lanes() {
    let cases = [
        ("PUT", "/leases/p/v1.d", Lane::Verb(Verb::Acquire)),
        ("PATCH", "/leases/p/v1.d", Lane::Verb(Verb::Renew)),
        ("DELETE", "/leases/p/v1.d", Lane::Verb(Verb::Release)),
        ("GET", "/leases/p/v1.d", Lane::Verb(Verb::Inspect)),
        ("GET", "/leases/p/v1.d?waitMs=5", Lane::Verb(Verb::Inspect)),
        ("GET", "/leases/p/v1.d/events", Lane::Events),
        ("GET", "/leases/p/v1.d/events?maxEvents=1", Lane::Events),
        // Issue 39 item 1: the fragment is dropped by the `Uri`.
        ("GET", "/leases/p/events#x", Lane::Hyper),
        ("GET", "/leases/p/events#/events", Lane::Hyper),
        ("PUT", "/leases/p/v1.d#x", Lane::Hyper),
        ("GET", "/leases/p/v1.d/events#", Lane::Hyper),
        ("PUT", "http://x/leases/p/v1.d", Lane::Hyper),
        ("OPTIONS", "*", Lane::Hyper),
        ("PUT", "/leases/p/v1%2Ed", Lane::Hyper),
        ("PUT", "/leases/./v1.d", Lane::Hyper),
        ("GET", "/leases/p/../events", Lane::Hyper),
        ("GET", "/leases/p/v1.d/..", Lane::Hyper),
        ("GET", "/leases/p/v1.d/.", Lane::Hyper),
        ("GET", "/leases/p/.hidden", Lane::Verb(Verb::Inspect)),
        ("GET", "/leases/p/..d", Lane::Verb(Verb::Inspect)),
        ("PUT", "/leases/p/v1.d?x=1", Lane::Hyper),
        ("HEAD", "/leases/p/v1.d", Lane::Hyper),
        ("put", "/leases/p/v1.d", Lane::Hyper),
        ("POST", "/leases/p/v1.d/events", Lane::Hyper),
        ("GET", "/leases/p/events", Lane::Hyper),
        ("GET", "/leases/p", Lane::Hyper),
        ("POST", "/attempts", Lane::Hyper),
    ];
    for (method, target, lane) in cases {
        assert_eq!(classify(method, target), lane, "{method} {target}");
    }
}

fn read(bytes: &[u8]) -> Read {
    read_head(bytes, &mut Vec::new())
}

#[test]
fn complete_lease_verbs_are_read_here() {
    let put = b"PUT /leases/p/v1.d HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{\"ttlMs\":1000}GET /next";
    let mut lines = Vec::new();
    let Read::Request(head) = read_head(put, &mut lines) else {
        panic!("not read here");
    };
    let len = head.len;
    assert_eq!(len, put.len() - b"GET /next".len());
    let bytes = Bytes::copy_from_slice(&put[..len]);
    let request = head.request(&bytes, &mut lines).expect("a request");
    assert_eq!(request.method(), Method::PUT);
    assert_eq!(request.uri().path(), "/leases/p/v1.d");
    assert_eq!(request.headers()["content-type"], "application/json");
    assert_eq!(request.headers()["content-length"], "14");
    let attempt =
        b"DELETE /leases/p/v1.d HTTP/1.1\r\nLease-Owner-Token: t\r\nlease-operation-id: o\r\n\r\n";
    let Read::Request(head) = read_head(attempt, &mut lines) else {
        panic!("not read here");
    };
    let bytes = Bytes::copy_from_slice(attempt);
    let request = head.request(&bytes, &mut lines).expect("a request");
    assert_eq!(request.headers()["lease-owner-token"], "t");
    assert_eq!(request.headers()["lease-operation-id"], "o");
    let watch =
        b"GET /leases/p/v1.d/events?maxEvents=2 HTTP/1.1\r\nhost: x\r\nlast-event-id: 3.1\r\n\r\n";
    let Read::Request(head) = read_head(watch, &mut lines) else {
        panic!("not read here");
    };
    assert_eq!(head.lane, Lane::Events);
    let bytes = Bytes::copy_from_slice(watch);
    let request = head.request(&bytes, &mut lines).expect("a request");
    assert_eq!(request.uri().query(), Some("maxEvents=2"));
    assert_eq!(request.headers()["last-event-id"], "3.1");
}

#[test]
fn incomplete_heads_wait_for_more() {
    for partial in [
        &b"PUT /leases/p/v1.d HTTP/1.1\r\nhost: x\r\n"[..],
        b"PUT /leases/p/v1.d HT",
        b"GET /leases/p/events#x",
    ] {
        assert!(
            matches!(read(partial), Read::Partial),
            "{}",
            String::from_utf8_lossy(partial)
        );
    }
}

#[test]
fn anything_else_is_hypers() {
    for other in [
        &b"PUT /leases/p/v1.d HTTP/1.0\r\n\r\n"[..],
        b"HEAD /leases/p/v1.d HTTP/1.1\r\n\r\n",
        b"POST /attempts HTTP/1.1\r\n\r\n",
        b"GET /leases/p HTTP/1.1\r\n\r\n",
        b"GET /leases/p/events#x HTTP/1.1\r\n\r\n",
        b"GET /leases/p/events#/events HTTP/1.1\r\n\r\n",
        b"PUT /leases/p/v1%2Ed HTTP/1.1\r\n\r\n",
        b"PUT /leases/p/v1.d?x=1 HTTP/1.1\r\n\r\n",
        b"PUT /leases/p/v1.d HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
        b"PUT /leases/p/v1.d HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
        b"PUT /leases/p/v1.d HTTP/1.1\r\nconnection: close\r\n\r\n",
        b"GET /leases/p/v1.d HTTP/1.1\r\nupgrade: websocket\r\n\r\n",
        b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}",
        b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: +2\r\n\r\n{}",
        b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: 99999999\r\n\r\n",
        b"PUT http://x/leases/p/v1.d HTTP/1.1\r\n\r\n",
        b"NOT HTTP\r\n\r\n",
        b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: 14\r\n\r\n{\"ttlMs\"",
        b"GET /leases/p/v1.d/events HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc",
        b"GET /leases/p/v1.d/events HTTP/1.1\r\nupgrade: websocket\r\n\r\n",
        b"GET /leases/p/v1.d/events HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
    ] {
        assert!(
            matches!(read(other), Read::Hyper),
            "{}",
            String::from_utf8_lossy(other)
        );
    }
}

/// A connected pair of loopback sockets: the server's end and the client's.
async fn pair() -> (TcpStream, TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (server, _) = listener.accept().await.expect("accept");
    (server, client)
}

/// A body that sends `chunks` then never ends.
fn endless(chunks: Vec<Bytes>) -> Body {
    use futures_util::StreamExt as _;
    let frames = futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    Body::from_stream(frames.chain(futures_util::stream::pending()))
}

#[tokio::test]
async fn a_full_body_is_collected_at_once() {
    let (server, _client) = pair().await;
    let mut spill = BytesMut::new();
    let body = collect(
        Body::from("answer"),
        &server,
        &mut spill,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(body.as_deref(), Some(&b"answer"[..]));
}

#[tokio::test]
async fn a_body_that_never_ends_is_abandoned_when_the_client_leaves() {
    let (server, client) = pair().await;
    let collecting = tokio::spawn(async move {
        let mut spill = BytesMut::new();
        let body = endless(vec![Bytes::from_static(b": keepalive\n\n")]);
        collect(body, &server, &mut spill, Duration::from_secs(60)).await
    });
    drop(client);
    let collected = tokio::time::timeout(Duration::from_secs(10), collecting)
        .await
        .expect("abandoned within 10 s, not at the 60 s idle timeout")
        .expect("task");
    assert_eq!(collected, None);
}

#[tokio::test]
async fn a_body_past_the_bound_or_not_whole_in_time_is_abandoned() {
    let (server, _client) = pair().await;
    let mut spill = BytesMut::new();
    let big = endless(vec![
        Bytes::from(vec![b'x'; MAX_ANSWER]),
        Bytes::from_static(b"y"),
    ]);
    let idle = Duration::from_secs(60);
    let collected = tokio::time::timeout(
        Duration::from_secs(10),
        collect(big, &server, &mut spill, idle),
    )
    .await
    .expect("refused at the bound, not at the idle timeout");
    assert_eq!(collected, None);
    let started = std::time::Instant::now();
    let stalled = endless(vec![Bytes::from_static(b"x")]);
    let collected = collect(stalled, &server, &mut spill, Duration::from_millis(200)).await;
    assert_eq!(collected, None);
    assert!(started.elapsed() >= Duration::from_millis(200));
}
