//! The Rust client and the CLI over HTTPS: against leasehold itself serving
//! HTTPS (`--tls-cert-file`, `--tls-client-ca-file`), and through a
//! TLS-terminating proxy started here in front of a `TestApp` (the CA and
//! certificates come from `TlsMaterial`, made with openssl). The right CA
//! works; a wrong CA or the system trust store is refused as a TLS failure
//! (exit 69); a client certificate is presented when the server requires
//! one.

#[allow(unused_imports)]
use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::app::{args, unique, Backend, TestApp};
use common::cli::run;
use common::redis::TlsMaterial;
use leasehold::client::{Cause, Client, ClientIdentity, ClientSettings, Error, TlsSettings};
use leasehold::domain::OperationId;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A TLS-terminating proxy in front of `upstream`, with the test CA's
/// server certificate; requires a client certificate signed by the CA when
/// `require_client_cert`.
async fn tls_proxy(
    tls: &TlsMaterial,
    upstream: std::net::SocketAddr,
    require_client_cert: bool,
) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.server_cert)
        .expect("server cert")
        .collect::<Result<_, _>>()
        .expect("server cert pem");
    let key = PrivateKeyDer::from_pem_file(&tls.server_key).expect("server key");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = if require_client_cert {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&tls.ca_cert).expect("ca") {
            roots.add(cert.expect("ca pem")).expect("ca cert");
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(certs, key).expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A failed handshake is the client's business: drop it.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    addr
}

fn https_client(base: &str, ca: &Path, identity: Option<ClientIdentity>) -> Client {
    let mut settings = ClientSettings::new(base);
    settings.tls = TlsSettings {
        ca_file: Some(ca.to_path_buf()),
        client_identity: identity,
    };
    Client::new(settings).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_the_cli_speak_https_and_refuse_an_untrusted_server() {
    let tls = TlsMaterial::generate();
    let app = TestApp::spawn(&Backend::Memory).await;
    let proxy = tls_proxy(&tls, app.addr, false).await;
    let base = format!("https://127.0.0.1:{}", proxy.port());
    let op = OperationId::parse("https-1").expect("op");

    // The Rust client: the right CA works, an unrelated one is a typed
    // `unavailable` (nothing was sent), not a hang or a panic.
    let attempt = https_client(&base, &tls.ca_cert, None)
        .create_attempt(&op)
        .await
        .expect("attempt over https");
    assert_eq!(attempt.operation_id, op);
    let refused = https_client(&base, &tls.other_ca_cert, None)
        .create_attempt(&op)
        .await;
    assert_eq!(
        refused,
        Err(Error::Unavailable {
            retry_after: None,
            cause: Cause::Tls
        })
    );

    // Without a CA file the system's trust store is used: it does not know
    // the test CA.
    let system = Client::new(ClientSettings::new(base.clone())).unwrap_or_else(|e| {
        panic!("{e}: install the system CA certificates (apt-get install ca-certificates)")
    });
    assert_eq!(
        system.create_attempt(&op).await,
        Err(Error::Unavailable {
            retry_after: None,
            cause: Cause::Tls
        })
    );

    // The CLI: a whole lock cycle over https, and 69 with the wrong CA.
    let ca = tls.ca_cert.to_str().expect("utf-8 path");
    let raw = unique("order-");
    let out = run(&[
        "lock",
        "--url",
        &base,
        "--ca-file",
        ca,
        "export",
        &raw,
        "--",
        "sh",
        "-c",
        "test -n \"$LEASEHOLD_FENCING_TOKEN\"",
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let out = run(&[
        "inspect",
        "--url",
        &base,
        "--ca-file",
        ca,
        "--json",
        "export",
        &raw,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let other = tls.other_ca_cert.to_str().expect("utf-8 path");
    let out = run(&[
        "inspect",
        "--url",
        &base,
        "--ca-file",
        other,
        "export",
        &raw,
    ])
    .await;
    assert_eq!(out.code(), 69, "stderr: {}", out.stderr);
    assert!(out.stderr.contains("TLS"), "says why: {}", out.stderr);
    // A CA file that is not PEM is a usage error, named.
    let out = run(&[
        "inspect",
        "--url",
        &base,
        "--ca-file",
        "/dev/null",
        "export",
        &raw,
    ])
    .await;
    assert_eq!(out.code(), 64, "stderr: {}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_when_the_server_requires_one() {
    let tls = TlsMaterial::generate();
    let app = TestApp::spawn(&Backend::Memory).await;
    let proxy = tls_proxy(&tls, app.addr, true).await;
    let base = format!("https://127.0.0.1:{}", proxy.port());
    let op = OperationId::parse("mtls-1").expect("op");
    let identity = ClientIdentity {
        cert_file: tls.client_cert.clone(),
        key_file: tls.client_key.clone(),
    };
    https_client(&base, &tls.ca_cert, Some(identity))
        .create_attempt(&op)
        .await
        .expect("attempt with a client certificate");
    let without = https_client(&base, &tls.ca_cert, None)
        .create_attempt(&op)
        .await;
    assert!(
        matches!(
            without,
            Err(Error::Unavailable { .. } | Error::Indeterminate { .. })
        ),
        "{without:?}"
    );

    let ca = tls.ca_cert.to_str().expect("utf-8 path");
    let cert = tls.client_cert.to_str().expect("utf-8 path");
    let key = tls.client_key.to_str().expect("utf-8 path");
    let out = run(&[
        "inspect",
        "--url",
        &base,
        "--ca-file",
        ca,
        "--client-cert",
        cert,
        "--client-key",
        key,
        "export",
        "x",
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let out = run(&["inspect", "--url", &base, "--ca-file", ca, "export", "x"]).await;
    assert_eq!(
        out.code(),
        69,
        "refused without a client certificate: {}",
        out.stderr
    );
    // The user is told what is missing, not "connection lost".
    assert!(
        out.stderr.contains("requires a client certificate")
            && out.stderr.contains("--client-cert"),
        "{}",
        out.stderr
    );
}

/// leasehold serving HTTPS on the embedded store; requires client
/// certificates from the test CA when `client_ca`. Stops when the sender is
/// dropped.
async fn https_service(tls: &TlsMaterial, client_ca: bool) -> (String, oneshot::Sender<()>) {
    let mut flags = vec![
        "--tls-cert-file",
        tls.server_cert.to_str().expect("utf-8 path"),
        "--tls-key-file",
        tls.server_key.to_str().expect("utf-8 path"),
    ];
    if client_ca {
        flags.extend([
            "--tls-client-ca-file",
            tls.ca_cert.to_str().expect("utf-8 path"),
        ]);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let settings = args(&Backend::Memory, &flags)
        .validate()
        .expect("valid settings");
    tokio::spawn(async move {
        leasehold::run(listener, settings, async move {
            let _ = stopped.await;
        })
        .await
        .expect("leasehold::run over https");
    });
    (format!("https://127.0.0.1:{}", addr.port()), stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_locks_against_leasehold_serving_https() {
    let tls = TlsMaterial::generate();
    let (base, _stop) = https_service(&tls, false).await;
    let ca = tls.ca_cert.to_str().expect("utf-8 path");
    let raw = unique("order-");
    let out = run(&[
        "lock",
        "--url",
        &base,
        "--ca-file",
        ca,
        "export",
        &raw,
        "--",
        "sh",
        "-c",
        "test -n \"$LEASEHOLD_FENCING_TOKEN\" && exit 5",
    ])
    .await;
    assert_eq!(out.code(), 5, "stderr: {}", out.stderr);
    let out = run(&[
        "inspect",
        "--url",
        &base,
        "--ca-file",
        ca,
        "--json",
        "export",
        &raw,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    assert!(
        out.stdout.contains("\"held\":false"),
        "released: {}",
        out.stdout
    );
    let other = tls.other_ca_cert.to_str().expect("utf-8 path");
    let out = run(&[
        "lock",
        "--url",
        &base,
        "--ca-file",
        other,
        "export",
        &raw,
        "--",
        "true",
    ])
    .await;
    assert_eq!(out.code(), 69, "stderr: {}", out.stderr);
    assert!(out.stderr.contains("TLS"), "says why: {}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_presents_a_client_certificate_to_leasehold_requiring_one() {
    let tls = TlsMaterial::generate();
    let (base, _stop) = https_service(&tls, true).await;
    let ca = tls.ca_cert.to_str().expect("utf-8 path");
    let cert = tls.client_cert.to_str().expect("utf-8 path");
    let key = tls.client_key.to_str().expect("utf-8 path");
    let out = run(&[
        "lock",
        "--url",
        &base,
        "--ca-file",
        ca,
        "--client-cert",
        cert,
        "--client-key",
        key,
        "export",
        "x",
        "--",
        "true",
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let out = run(&[
        "lock",
        "--url",
        &base,
        "--ca-file",
        ca,
        "export",
        "x",
        "--",
        "true",
    ])
    .await;
    assert_eq!(
        out.code(),
        69,
        "refused without a client certificate: {}",
        out.stderr
    );
}
