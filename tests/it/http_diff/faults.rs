//! The differential suite's callers that misbehave: heads split at every
//! byte, half-close, a client that never reads, clients that leave
//! mid-request, mid-wait and mid-stream. Each compared between a fresh
//! connection (the hand-written paths) and one hyper has, and each left
//! behind by nothing: no CLOSE-WAIT socket, watchers and waiters back to
//! their baseline.

use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::time::Instant;

use super::cases::{acquire, normal_next, Fresh, BODY, LEASE, P, WAIT};
use super::wire::{until_no_close_wait, until_watchers, watchers, Conn, Next, LIVEZ};
use crate::common::app::{args, Backend, TestApp};

async fn conn(app: &TestApp, hyper: bool) -> Conn {
    if hyper {
        Conn::hyper(app.addr).await
    } else {
        Conn::open(app.addr).await
    }
}

/// Each request written in two parts, split at every byte (the server may
/// or may not read the first part alone; the answer must not depend on it),
/// answered as hyper answers it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_split_at_every_byte_are_answered_as_hyper_answers_them() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let templates: [(&str, Vec<u8>); 3] = [
        ("acquire", acquire(LEASE, "", None, BODY)),
        (
            "inspect with a query",
            format!("GET {LEASE}?x=1 HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes(),
        ),
        (
            "a refused stream",
            b"GET /leases/diff/v1.nothex/events HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
        ),
    ];
    for (name, template) in templates {
        let fresh = Fresh::new(&app).await;
        let whole = fresh.fill(&template);
        let mut hyper = Conn::hyper(app.addr).await;
        hyper.send(&whole).await;
        let expected = normal_next(&hyper.next(WAIT).await, &fresh);
        for at in 1..whole.len() {
            let fresh = Fresh::new(&app).await;
            let bytes = fresh.fill(&template);
            let mut conn = Conn::open(app.addr).await;
            conn.send(&bytes[..at]).await;
            // A moment for the server to read the first part alone.
            tokio::task::yield_now().await;
            conn.send(&bytes[at..]).await;
            let got = normal_next(&conn.next(WAIT).await, &fresh);
            assert_eq!(got, expected, "{name} split at byte {at}");
        }
    }
}

/// A request (and one pipelined behind it, or not), then the client's
/// write side closed. hyper itself answers this by timing: it drops the
/// request or the pipelined one when it reads the FIN before it has
/// answered them (seen in repeated runs with the fast paths off, both ways
/// hyper's). So both ways are held to what hyper may answer, not to each
/// other: the acquire's `201` or nothing, then the pipelined `/livez` or
/// nothing, then the connection's end, never silence, never garbage; and
/// nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_closed_connections_are_answered_as_hyper_may_answer_them() {
    let app = TestApp::spawn(&Backend::Memory).await;
    for pipelined in [false, true] {
        for hyper in [false, true] {
            let fresh = Fresh::new(&app).await;
            let mut c = conn(&app, hyper).await;
            let mut bytes = fresh.fill(&acquire(LEASE, "", None, BODY));
            let mut expected = vec![201];
            if pipelined {
                bytes.extend_from_slice(LIVEZ.as_bytes());
                expected.push(200);
            }
            c.send(&bytes).await;
            c.stream.shutdown().await.expect("half-close");
            let mut answered = Vec::new();
            loop {
                match c.next(WAIT).await {
                    Next::Answer(a) => answered.push(a.status),
                    Next::Closed => break,
                    other => panic!("pipelined {pipelined}, hyper {hyper}: {other:?}"),
                }
            }
            assert!(
                expected.starts_with(&answered),
                "pipelined {pipelined}, hyper {hyper}: answered {answered:?}"
            );
        }
    }
    until_no_close_wait(app.addr.port()).await;
}

/// The server's side of the connection from `local` (the client's port):
/// its TCP state (01: established), or `None` once it is gone.
fn server_state(server: u16, client: u16) -> Option<String> {
    let (server, client) = (format!(":{server:04X}"), format!(":{client:04X}"));
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .find_map(|table| {
            table.lines().skip(1).find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.len() > 3 && fields[1].ends_with(&server) && fields[2].ends_with(&client))
                    .then(|| fields[3].to_owned())
            })
        })
}

/// A client that sends requests and never reads an answer: once the
/// server's writes make no progress for the idle timeout (1 s here) the
/// connection is closed, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_closed_after_the_idle_timeout() {
    let app = TestApp::spawn_with(args(&Backend::Memory, &["--idle-timeout-ms", "1000"])).await;
    for hyper in [false, true] {
        let fresh = Fresh::new(&app).await;
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        let stream = socket.connect(app.addr).await.expect("connect");
        let port = stream.local_addr().expect("addr").port();
        let mut c = Conn::wrap(stream);
        if hyper {
            c.send(LIVEZ.as_bytes()).await;
            assert!(matches!(c.next(WAIT).await, Next::Answer(_)));
        }
        let inspect = fresh.fill(format!("GET {LEASE} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes());
        // Requests until the server stops taking them, or it closes.
        let began = Instant::now();
        let mut sent = 0usize;
        loop {
            assert!(began.elapsed() < Duration::from_secs(20), "never closed");
            match tokio::time::timeout(Duration::from_millis(100), c.stream.write_all(&inspect))
                .await
            {
                Ok(Ok(())) => sent += 1,
                // Closed by the server.
                Ok(Err(_)) => break,
                // The server reads no more: its writes are stuck. Wait
                // for it to let go of the connection.
                Err(_) => {
                    while server_state(app.addr.port(), port).as_deref() == Some("01") {
                        assert!(began.elapsed() < Duration::from_secs(20), "never closed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    break;
                }
            }
        }
        assert!(sent > 10, "hyper {hyper}: only {sent} requests taken");
        assert_ne!(
            server_state(app.addr.port(), port).as_deref(),
            Some("01"),
            "hyper {hyper}: still established"
        );
    }
    // The service still answers.
    let mut c = Conn::open(app.addr).await;
    c.send(LIVEZ.as_bytes()).await;
    assert!(matches!(c.next(WAIT).await, Next::Answer(a) if a.status == 200));
}

/// Clients that leave mid-head, mid-body, mid-wait and mid-stream: nothing
/// of theirs is left (sockets, waiters, watchers), both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_leave_mid_request_or_mid_stream_leave_nothing_behind() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let baseline = watchers(&app).await;
    for hyper in [false, true] {
        // Mid-head, mid-body.
        for part in [
            &b"PUT /leases/diff/x HTTP/1.1\r\nhost: x\r\ncontent-le"[..],
            b"PUT /leases/diff/x HTTP/1.1\r\ncontent-length: 14\r\n\r\n{\"ttl",
        ] {
            let mut c = conn(&app, hyper).await;
            c.send(part).await;
            drop(c);
        }
        // Mid-wait: a waiter on a held lease leaves.
        let fresh = Fresh::new(&app).await;
        let holder = app.attempt().await;
        assert_eq!(
            app.acquire(P, &fresh.d, &holder, 30_000).await.outcome(),
            "acquired"
        );
        let mut c = conn(&app, hyper).await;
        c.send(&fresh.fill(&acquire(
            LEASE,
            "",
            None,
            r#"{"ttlMs":5000,"waitMs":20000}"#,
        )))
        .await;
        app.until_waiters(1).await;
        drop(c);
        app.until_waiters(0).await;
        // Mid-stream: a lease's stream and the purpose's.
        for target in [
            format!("/leases/{P}/{}/events", fresh.d),
            format!("/leases/{P}/events"),
        ] {
            let mut c = conn(&app, hyper).await;
            c.send(format!("GET {target} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
                .await;
            match c.next(WAIT).await {
                Next::Answer(a) => assert!(a.stream, "{target}: {a:?}"),
                other => panic!("{target}: {other:?}"),
            }
            drop(c);
            until_watchers(&app, baseline).await;
        }
        until_no_close_wait(app.addr.port()).await;
    }
}
