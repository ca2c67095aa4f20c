//! HTTPS serving: certificates made by openssl in the test
//! ([`TlsMaterial`]), a client driven by tokio-rustls (ring) and hyper's
//! client half, a real leasehold instance in this process.
//!
//! Waits are on events (a handshake that shows the new certificate, a
//! closed socket), each bounded by a generous deadline.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::app::{args, digest, unique, Backend};
use common::redis::TlsMaterial;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Bound on anything that should happen at once on an idle machine.
const PROMPT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// an HTTPS client
// ---------------------------------------------------------------------------

fn der(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .as_ref()
        .to_vec()
}

/// A client that trusts `ca` and, when given, presents `client` (cert, key).
fn client_config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca file") {
        roots.add(cert.expect("ca pem")).expect("ca cert");
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .expect("client cert")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("client cert pem"),
                PrivateKeyDer::from_pem_file(key).expect("client key"),
            )
            .expect("client auth"),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS connection to `addr` as `localhost`; errors as text.
async fn connect(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
) -> Result<TlsStream<TcpStream>, String> {
    let attempt = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        TlsConnector::from(Arc::clone(config))
            .connect(ServerName::try_from("localhost").expect("name"), tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))
    };
    tokio::time::timeout(PROMPT, attempt)
        .await
        .unwrap_or_else(|_| Err("handshake timed out".into()))
}

/// The leaf certificate the server presents now.
async fn served_leaf(config: &Arc<ClientConfig>, addr: SocketAddr) -> Result<Vec<u8>, String> {
    let tls = connect(config, addr).await?;
    let (_, conn) = tls.get_ref();
    Ok(conn.peer_certificates().expect("server certificate")[0]
        .as_ref()
        .to_vec())
}

/// One answer.
#[derive(Debug)]
struct Reply {
    status: u16,
    body: Value,
}

/// One request on a fresh connection; transport errors as text.
async fn request(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Result<Reply, String> {
    let tls = connect(config, addr).await?;
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"http/1.1"[..]),
        "ALPN http/1.1"
    );
    let exchange = async {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("http handshake: {e}"))?;
        tokio::spawn(conn);
        let mut rb = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost");
        for (name, value) in headers {
            rb = rb.header(*name, *value);
        }
        let payload = match body {
            Some(v) => {
                rb = rb.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let resp = sender
            .send_request(rb.body(Full::new(payload)).expect("request"))
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Reply { status, body })
    };
    tokio::time::timeout(PROMPT, exchange)
        .await
        .unwrap_or_else(|_| Err("request timed out".into()))
}

// ---------------------------------------------------------------------------
// a leasehold instance serving HTTPS
// ---------------------------------------------------------------------------

struct TlsApp {
    addr: SocketAddr,
    metrics_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), leasehold::RunError>>,
}

impl TlsApp {
    /// Starts an instance on the embedded store with these extra flags and a
    /// metrics listener of its own. Both listeners are bound before `run`
    /// starts, so a client may connect at once.
    async fn start(extra: &[&str]) -> TlsApp {
        let api = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (addr, metrics_addr) = (
            api.local_addr().expect("addr"),
            metrics.local_addr().expect("addr"),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(leasehold::run_with(
            api,
            Some(metrics),
            args(&Backend::Memory, extra),
            async move {
                let _ = stopped.await;
            },
        ));
        TlsApp {
            addr,
            metrics_addr,
            stop: Some(stop),
            task,
        }
    }

    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(PROMPT, &mut self.task)
            .await
            .expect("shut down in time")
            .expect("join")
            .expect("run");
    }
}

fn flags<'a>(cert: &'a Path, key: &'a Path) -> Vec<&'a str> {
    vec![
        "--tls-cert-file",
        cert.to_str().expect("utf-8 path"),
        "--tls-key-file",
        key.to_str().expect("utf-8 path"),
        "--tls-reload-interval-ms",
        "100",
    ]
}

/// A lease cycle over HTTPS: attempt, acquire, inspect, release.
async fn lease_cycle(config: &Arc<ClientConfig>, addr: SocketAddr) {
    let op = unique("op-");
    let r = request(
        config,
        addr,
        "POST",
        "/attempts",
        &[],
        Some(json!({ "operationId": op })),
    )
    .await
    .expect("attempt");
    assert_eq!(r.status, 201, "{:?}", r.body);
    let token = r.body["ownerToken"].as_str().expect("token").to_owned();
    let path = format!("/leases/tls-test/{}", digest());
    let attempt = [
        ("lease-owner-token", token.as_str()),
        ("lease-operation-id", op.as_str()),
    ];
    let r = request(
        config,
        addr,
        "PUT",
        &path,
        &attempt,
        Some(json!({ "ttlMs": 30_000 })),
    )
    .await
    .expect("acquire");
    assert_eq!(
        (r.status, r.body["outcome"].as_str()),
        (201, Some("acquired")),
        "{:?}",
        r.body
    );
    let r = request(config, addr, "GET", &path, &attempt, None)
        .await
        .expect("inspect");
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["held"], json!(true), "{:?}", r.body);
    assert_eq!(r.body["heldBy"], json!("caller"), "{:?}", r.body);
    let r = request(config, addr, "DELETE", &path, &attempt, None)
        .await
        .expect("release");
    assert_eq!(
        (r.status, r.body["outcome"].as_str()),
        (200, Some("released")),
        "{:?}",
        r.body
    );
}

// ---------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------

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
    // The connection is idle and kept alive; shutdown closes it.
    app.shutdown().await;
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
async fn a_replaced_client_ca_applies_without_a_restart() {
    let tls = TlsMaterial::generate();
    let client_ca = tls.dir.join("client-ca.pem");
    std::fs::copy(&tls.ca_cert, &client_ca).expect("copy");
    let ca = client_ca.to_str().expect("utf-8").to_owned();
    let mut extra = flags(&tls.server_cert, &tls.server_key);
    extra.extend(["--tls-client-ca-file", &ca]);
    let app = TlsApp::start(&extra).await;
    let known = client_config(&tls.ca_cert, Some((&tls.client_cert, &tls.client_key)));
    let accepted = || async {
        request(&known, app.addr, "GET", "/livez", &[], None)
            .await
            .is_ok_and(|r| r.status == 200)
    };
    assert!(accepted().await, "the client CA at start");

    // Another CA replaces the file: the client is refused from some
    // handshake on; the file back, accepted again.
    for (ca_file, want) in [(&tls.other_ca_cert, false), (&tls.ca_cert, true)] {
        std::fs::copy(ca_file, tls.dir.join("client-ca.pem.new")).expect("copy");
        std::fs::rename(tls.dir.join("client-ca.pem.new"), &client_ca).expect("rename");
        let deadline = Instant::now() + Duration::from_secs(30);
        while accepted().await != want {
            assert!(
                Instant::now() < deadline,
                "client CA change not applied within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    app.shutdown().await;
}

/// Polls handshakes until the server presents `want` (bounded); every
/// handshake on the way must succeed with `old` or `want`: a rotation
/// never interrupts serving.
async fn until_served(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
    old: &[u8],
    want: &[u8],
) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut handshakes = 0;
    loop {
        let leaf = served_leaf(config, addr)
            .await
            .expect("every handshake succeeds");
        handshakes += 1;
        if leaf == want {
            return handshakes;
        }
        assert_eq!(leaf, old, "neither the old nor the new certificate");
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart() {
    use std::os::unix::fs::symlink;
    let tls = TlsMaterial::generate();
    let (cert_b, key_b) = tls.issue_server_cert("rotated-b", false);
    let (cert_c, key_c) = tls.issue_server_cert("rotated-c", false);

    // A Kubernetes Secret volume: tls.crt -> ..data/tls.crt, ..data -> a
    // timestamped directory; an update writes a new directory and renames
    // a new ..data symlink over the old one.
    let volume = tls.dir.join("secret-volume");
    let version = |name: &str, cert: &Path, key: &Path| -> PathBuf {
        let dir = volume.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::copy(cert, dir.join("tls.crt")).expect("copy cert");
        std::fs::copy(key, dir.join("tls.key")).expect("copy key");
        dir
    };
    version("..2026_12_03_a", &tls.server_cert, &tls.server_key);
    symlink("..2026_12_03_a", volume.join("..data")).expect("symlink");
    symlink("..data/tls.crt", volume.join("tls.crt")).expect("symlink");
    symlink("..data/tls.key", volume.join("tls.key")).expect("symlink");
    let (cert, key) = (volume.join("tls.crt"), volume.join("tls.key"));

    let app = TlsApp::start(&flags(&cert, &key)).await;
    let client = client_config(&tls.ca_cert, None);
    let der_a = der(&tls.server_cert);
    assert_eq!(
        served_leaf(&client, app.addr).await.expect("handshake"),
        der_a
    );
    // A connection opened before the rotation keeps working after it.
    let op = unique("op-");
    let before = request(
        &client,
        app.addr,
        "POST",
        "/attempts",
        &[],
        Some(json!({ "operationId": op })),
    )
    .await
    .expect("attempt");
    assert_eq!(before.status, 201);

    // Rotation 1: the Secret volume swaps its ..data symlink.
    version("..2026_12_03_b", &cert_b, &key_b);
    symlink("..2026_12_03_b", volume.join("..data_tmp")).expect("symlink");
    let swapped = Instant::now();
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).expect("swap");
    let der_b = der(&cert_b);
    let n = until_served(&client, app.addr, &der_a, &der_b).await;
    println!(
        "symlink swap served after {} ms ({n} handshakes; reload interval 100 ms)",
        swapped.elapsed().as_millis()
    );
    assert_eq!(
        served_leaf(&client, app.metrics_addr)
            .await
            .expect("handshake"),
        der_b
    );
    lease_cycle(&client, app.addr).await;

    // Rotation 2, file by file (cert-manager's way elsewhere: rename over
    // each file), through a broken state: garbage in the certificate, then
    // the new certificate with the old key. Serving never stops; the old
    // certificate stays until the pair is whole.
    let target = volume.join("..2026_12_03_b");
    std::fs::write(
        target.join("tls.crt.new"),
        b"-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .expect("write");
    std::fs::rename(target.join("tls.crt.new"), target.join("tls.crt")).expect("rename");
    assert_eq!(
        served_leaf(&client, app.addr).await.expect("still served"),
        der_b
    );
    std::fs::copy(&cert_c, target.join("tls.crt.new")).expect("copy");
    std::fs::rename(target.join("tls.crt.new"), target.join("tls.crt")).expect("rename");
    assert_eq!(
        served_leaf(&client, app.addr).await.expect("still served"),
        der_b
    );
    std::fs::copy(&key_c, target.join("tls.key.new")).expect("copy");
    let replaced = Instant::now();
    std::fs::rename(target.join("tls.key.new"), target.join("tls.key")).expect("rename");
    let n = until_served(&client, app.addr, &der_b, &der(&cert_c)).await;
    println!(
        "file rename served after {} ms ({n} handshakes)",
        replaced.elapsed().as_millis()
    );
    lease_cycle(&client, app.addr).await;
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

/// Runs `leasehold healthcheck` with only these `LEASEHOLD_*` variables.
async fn healthcheck(env: &[(&str, String)], extra: &[&str]) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.arg("healthcheck").args(extra);
    for (name, _) in std::env::vars() {
        if name.starts_with("LEASEHOLD_") {
            cmd.env_remove(name);
        }
    }
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = tokio::time::timeout(PROMPT, cmd.output())
        .await
        .expect("healthcheck ends in time")
        .expect("run leasehold healthcheck");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_probes_https_pinned_to_the_served_certificate() {
    let tls = TlsMaterial::generate();
    // A serving certificate that may also act as a client: the healthcheck
    // presents it when client certificates are required.
    let (cert, key) = tls.issue_server_cert("dual-use", true);
    let app = TlsApp::start(&flags(&cert, &key)).await;
    let path = |p: &Path| p.display().to_string();
    let base = [
        ("LEASEHOLD_LISTEN", app.addr.to_string()),
        ("LEASEHOLD_TLS_CERT_FILE", path(&cert)),
        ("LEASEHOLD_TLS_KEY_FILE", path(&key)),
    ];
    let (ok, stderr) = healthcheck(&base, &[]).await;
    assert!(ok, "the default https:// probe passes: {stderr}");

    // Another certificate than the one served: refused.
    let wrong = [
        ("LEASEHOLD_LISTEN", app.addr.to_string()),
        ("LEASEHOLD_TLS_CERT_FILE", path(&tls.server_cert)),
    ];
    let (ok, stderr) = healthcheck(&wrong, &[]).await;
    assert!(!ok, "a different pinned certificate must fail");
    assert!(stderr.contains("https://"), "{stderr}");

    // Plain http to the TLS port fails.
    let url = format!("http://{}/readyz", app.addr);
    let (ok, _) = healthcheck(&[], &["--url", &url]).await;
    assert!(!ok, "plain http to the TLS port must fail");
    app.shutdown().await;

    // Client certificates required: the probe presents the service's own.
    let ca = tls.ca_cert.to_str().expect("utf-8").to_owned();
    let mut extra = flags(&cert, &key);
    extra.extend(["--tls-client-ca-file", &ca]);
    let app = TlsApp::start(&extra).await;
    let mut env = vec![
        ("LEASEHOLD_LISTEN", app.addr.to_string()),
        ("LEASEHOLD_TLS_CERT_FILE", path(&cert)),
        ("LEASEHOLD_TLS_KEY_FILE", path(&key)),
    ];
    let (ok, stderr) = healthcheck(&env, &[]).await;
    assert!(
        !ok,
        "without LEASEHOLD_TLS_CLIENT_CA_FILE it sends no certificate: {stderr}"
    );
    env.push(("LEASEHOLD_TLS_CLIENT_CA_FILE", path(&tls.ca_cert)));
    let (ok, stderr) = healthcheck(&env, &[]).await;
    assert!(ok, "with a client certificate: {stderr}");
    app.shutdown().await;
}
