//! Honest answers where the request and the store fall out of step
//! (docs/design.md §8), beyond the refusal and history suites:
//!
//! - a body that arrives slower than the request timeout is a 408: the
//!   request never reached the store, so it is never `indeterminate`;
//! - replica acknowledgements (`WAIT`) never hold up other requests'
//!   commands: the write and its `WAIT` get a connection to themselves.

#[allow(unused_imports)]
use crate::common;

use std::time::{Duration, Instant};

use common::app::{args, digest, Backend, TestApp};
use common::redis::RedisServer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const P: &str = "honesty";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_the_request_timeout_is_408_and_changes_nothing() {
    // Request timeout = max wait + 3 × command timeout + 1 s = 1.4 s; the
    // body must be in half a second before that.
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--max-wait-ms", "100", "--command-timeout-ms", "100"],
    ))
    .await;
    let a = app.attempt().await;
    let d = digest();
    let body = br#"{"ttlMs": 30000}"#;
    let head = format!(
        "PUT /leases/{P}/{d} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nlease-owner-token: {}\r\nlease-operation-id: {}\r\n\r\n",
        body.len(),
        a.token,
        a.op
    );
    let mut conn = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    conn.write_all(head.as_bytes()).await.expect("head");
    // Half the body, then nothing: the client is stuck mid-body.
    conn.write_all(&body[..body.len() / 2]).await.expect("part");
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The service answers, then (HTTP/1.1, body unread) closes.
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.windows(4).any(|w| w == b"\r\n\r\n")
                        && String::from_utf8_lossy(&answer).contains("\"outcome\"")
                    {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer to a stalled body within 20 s");
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.starts_with("HTTP/1.1 408"),
        "a stalled body must be 408, got: {text}"
    );
    assert!(text.contains("application/problem+json"), "{text}");
    assert!(text.contains("\"outcome\":\"request_timeout\""), "{text}");
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "answered before the request timeout: {:?}",
        started.elapsed()
    );
    // Nothing reached the store.
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(seen.body["held"], false, "{:?}", seen.body);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_replica_ack_does_not_hold_up_other_requests() {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let app = TestApp::spawn_with(args(
        &Backend::Redis(master.url()),
        &[
            "--redis-min-replicas",
            "1",
            "--redis-replica-timeout-ms",
            "4000",
            "--command-timeout-ms",
            "2000",
        ],
    ))
    .await;
    // One write while the replica answers, so the pool is warm and synced.
    let warm = app.attempt().await;
    let warm_digest = digest();
    assert_eq!(
        app.acquire(P, &warm_digest, &warm, 30_000).await.status,
        201
    );

    replica.freeze();
    let a = app.attempt().await;
    let d = digest();
    let slow = {
        let (base, http) = (app.base.clone(), app.http.clone());
        let a = a.clone();
        let d = d.clone();
        tokio::spawn(async move {
            let resp = http
                .put(format!("{base}/leases/{P}/{d}"))
                .header("lease-owner-token", &a.token)
                .header("lease-operation-id", &a.op)
                .json(&serde_json::json!({"ttlMs": 30000}))
                .send()
                .await
                .expect("acquire");
            (resp.status().as_u16(), Instant::now())
        })
    };
    // The WAIT is on the master now (its connection blocked for 4 s).
    let seen_wait = tokio::task::spawn_blocking({
        let master_port = master.port();
        move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                let out = std::process::Command::new("redis-cli")
                    .args(["-p", &master_port.to_string(), "CLIENT", "LIST"])
                    .output()
                    .expect("redis-cli");
                if String::from_utf8_lossy(&out.stdout).contains("cmd=wait") {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        }
    })
    .await
    .expect("poll");
    assert!(seen_wait, "the acquire never reached WAIT");
    // Other requests go on while that WAIT blocks its connection.
    let started = Instant::now();
    for _ in 0..5 {
        let seen = app.inspect(P, &warm_digest, None).await;
        assert_eq!(seen.status, 200, "{:?}", seen.body);
        assert_eq!(seen.body["held"], true);
    }
    let inspected_at = Instant::now();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "inspects waited behind the WAIT: {:?}",
        started.elapsed()
    );
    let (status, acquired_at) = slow.await.expect("acquire task");
    replica.thaw();
    assert_eq!(status, 201);
    assert!(
        acquired_at > inspected_at,
        "the acquire's WAIT ended before the inspects: the test proved nothing"
    );
    app.shutdown().await;
}
