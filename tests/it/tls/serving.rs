//! HTTPS answers, refuses what it must, and stays bounded.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::support::{
    client_config, connect, der, flags, lease_cycle, request, served_leaf, TlsApp, PROMPT,
};
use crate::common::redis::TlsMaterial;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_a_lease_cycle_with_the_configured_certificate() {
    let tls = TlsMaterial::generate();
    let app = TlsApp::start(&flags(&tls.server_cert, &tls.server_key)).await;
    let client = client_config(&tls.ca_cert, None);

    assert_eq!(
        served_leaf(&client, app.addr).await.expect("handshake"),
        der(&tls.server_cert),
        "the configured certificate"
    );
    lease_cycle(&client, app.addr).await;

    // The metrics listener serves HTTPS with the same certificate.
    assert_eq!(
        served_leaf(&client, app.metrics_addr)
            .await
            .expect("handshake"),
        der(&tls.server_cert)
    );
    let r = request(&client, app.metrics_addr, "GET", "/metrics", &[], None)
        .await
        .expect("scrape");
    assert_eq!(r.status, 200);
    let text = r.body.as_str().expect("text");
    assert!(text.contains("leasehold_http_requests_total"), "{text}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_https_connection_does_not_hold_up_shutdown() {
    let tls = TlsMaterial::generate();
    // A grace period far beyond the test's bound: only a graceful close of
    // the idle connection lets `run` return in time.
    let mut extra = flags(&tls.server_cert, &tls.server_key);
    extra.extend(["--shutdown-grace-ms", "120000"]);
    let app = TlsApp::start(&extra).await;
    let client = client_config(&tls.ca_cert, None);
    // One that never starts its handshake (the bound is 10 s); connected
    // first, so it is accepted before the one below is served.
    let _silent = TcpStream::connect(app.addr).await.expect("connect");
    let stream = connect(&client, app.addr).await.expect("handshake");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("http handshake");
    let conn = tokio::spawn(conn);
    let live = sender
        .send_request(
            hyper::Request::get("/livez")
                .header("host", "localhost")
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("livez");
    assert_eq!(live.status(), 200);
    drop(live);
    // The connection is idle and kept alive; shutdown closes it, and drops
    // the silent one without waiting for its handshake bound.
    let started = Instant::now();
    app.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "shutdown took {took:?}: it waited for a handshake"
    );
    tokio::time::timeout(PROMPT, conn)
        .await
        .expect("the server closed the idle connection")
        .expect("join")
        .ok();
    drop(sender);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trusting_another_ca_or_speaking_plain_http_is_refused() {
    let tls = TlsMaterial::generate();
    let app = TlsApp::start(&flags(&tls.server_cert, &tls.server_key)).await;

    let wrong_ca = client_config(&tls.other_ca_cert, None);
    let err = connect(&wrong_ca, app.addr)
        .await
        .expect_err("unknown issuer");
    assert!(err.contains("handshake"), "{err}");

    // Plain HTTP to the TLS port: no HTTP answer, the connection is closed.
    let mut tcp = TcpStream::connect(app.addr).await.expect("connect");
    tcp.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(PROMPT, tcp.read_to_end(&mut answer))
        .await
        .expect("closed in time")
        .ok();
    assert!(
        !answer.starts_with(b"HTTP/"),
        "an HTTP answer on the TLS port: {:?}",
        String::from_utf8_lossy(&answer)
    );

    // The refusals did not hurt the listener.
    lease_cycle(&client_config(&tls.ca_cert, None), app.addr).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_when_a_client_ca_is_set() {
    let tls = TlsMaterial::generate();
    let ca = tls.ca_cert.to_str().expect("utf-8").to_owned();
    let mut extra = flags(&tls.server_cert, &tls.server_key);
    extra.extend(["--tls-client-ca-file", &ca]);
    let app = TlsApp::start(&extra).await;

    // Without a certificate: refused (TLS 1.3 reports it at the first read).
    let anonymous = client_config(&tls.ca_cert, None);
    for addr in [app.addr, app.metrics_addr] {
        let refused = request(&anonymous, addr, "GET", "/livez", &[], None).await;
        assert!(
            refused.is_err(),
            "answered without a client certificate: {refused:?}"
        );
    }
    // A certificate from another CA: refused too.
    let (stranger_cert, stranger_key) =
        (tls.dir.join("other-ca.crt"), tls.dir.join("other-ca.key"));
    let stranger = client_config(&tls.ca_cert, Some((&stranger_cert, &stranger_key)));
    let refused = request(&stranger, app.addr, "GET", "/livez", &[], None).await;
    assert!(
        refused.is_err(),
        "answered a certificate of another CA: {refused:?}"
    );

    // With the client certificate: served.
    let known = client_config(&tls.ca_cert, Some((&tls.client_cert, &tls.client_key)));
    lease_cycle(&known, app.addr).await;
    let r = request(&known, app.metrics_addr, "GET", "/metrics", &[], None)
        .await
        .expect("scrape");
    assert_eq!(r.status, 200);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_neither_blocks_accepting_nor_stays_open() {
    let tls = TlsMaterial::generate();
    let mut extra = flags(&tls.server_cert, &tls.server_key);
    extra.extend(["--idle-timeout-ms", "1000"]);
    let app = TlsApp::start(&extra).await;
    let client = client_config(&tls.ca_cert, None);

    // A client that connects and never sends a ClientHello.
    let mut silent = TcpStream::connect(app.addr).await.expect("connect");
    let opened = Instant::now();
    // The handshakes of other clients are not held up behind it.
    lease_cycle(&client, app.addr).await;
    // It is closed once the handshake bound (here the idle timeout, 1 s)
    // passes.
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(PROMPT, silent.read(&mut buf))
        .await
        .expect("the silent connection is closed within the bound");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "closed, not answered: {read:?}"
    );
    println!(
        "silent connection closed after {} ms",
        opened.elapsed().as_millis()
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_in_its_handshake_counts_against_the_cap() {
    let tls = TlsMaterial::generate();
    let mut extra = flags(&tls.server_cert, &tls.server_key);
    extra.extend(["--idle-timeout-ms", "1500", "--max-connections", "1"]);
    let app = TlsApp::start(&extra).await;
    let client = client_config(&tls.ca_cert, None);

    // The one connection allowed, silent: the next client is accepted only
    // when the handshake bound (1.5 s) closes it.
    let mut silent = TcpStream::connect(app.addr).await.expect("connect");
    let started = Instant::now();
    let leaf = served_leaf(&client, app.addr)
        .await
        .expect("served after the silent one");
    let waited = started.elapsed();
    assert_eq!(leaf, der(&tls.server_cert));
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(PROMPT, silent.read(&mut buf))
        .await
        .expect("closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // A lower bound only: it cannot be shorter unless the cap let the
    // second connection in while the first was still in its handshake.
    assert!(
        waited >= Duration::from_millis(1000),
        "handshake done after {waited:?}, before the silent connection was closed"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_certificate_at_start_names_the_setting() {
    let tls = TlsMaterial::generate();
    // The key of another certificate.
    let app = TlsApp::start(&flags(&tls.server_cert, &tls.client_key)).await;
    let err = tokio::time::timeout(PROMPT, app.task)
        .await
        .expect("returns at once")
        .expect("join")
        .expect_err("a mismatched key must not start");
    let text = err.to_string();
    assert!(text.contains("LEASEHOLD_TLS_KEY_FILE"), "{text}");
    assert!(!text.contains("PRIVATE KEY"), "never the key: {text}");

    let missing = tls.dir.join("missing.crt");
    let app = TlsApp::start(&flags(&missing, &tls.server_key)).await;
    let err = tokio::time::timeout(PROMPT, app.task)
        .await
        .expect("returns at once")
        .expect("join")
        .expect_err("a missing certificate must not start");
    assert!(err.to_string().contains("LEASEHOLD_TLS_CERT_FILE"), "{err}");
}
