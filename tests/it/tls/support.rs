//! The HTTPS client (tokio-rustls on ring + hyper's client half) and a
//! leasehold instance serving HTTPS in this process.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::common::app::{args, digest, unique, Backend};

/// Bound on anything that should happen at once on an idle machine.
pub const PROMPT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// an HTTPS client
// ---------------------------------------------------------------------------

pub fn der(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .as_ref()
        .to_vec()
}

/// A client that trusts `ca` and, when given, presents `client` (cert, key).
pub fn client_config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<ClientConfig> {
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
pub async fn connect(
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
pub async fn served_leaf(config: &Arc<ClientConfig>, addr: SocketAddr) -> Result<Vec<u8>, String> {
    let tls = connect(config, addr).await?;
    let (_, conn) = tls.get_ref();
    Ok(conn.peer_certificates().expect("server certificate")[0]
        .as_ref()
        .to_vec())
}

/// One answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

/// One request on a fresh connection; transport errors as text.
pub async fn request(
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

pub struct TlsApp {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<Result<(), leasehold::RunError>>,
}

impl TlsApp {
    /// Starts an instance on the embedded store with these extra flags and a
    /// metrics listener of its own. Both listeners are bound before `run`
    /// starts, so a client may connect at once.
    pub async fn start(extra: &[&str]) -> TlsApp {
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
            args(&Backend::Memory, extra)
                .validate()
                .expect("valid settings"),
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

    pub async fn shutdown(mut self) {
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

pub fn flags<'a>(cert: &'a Path, key: &'a Path) -> Vec<&'a str> {
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
pub async fn lease_cycle(config: &Arc<ClientConfig>, addr: SocketAddr) {
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
