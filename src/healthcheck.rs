//! `leasehold healthcheck`: one HTTP/1.0 GET with blocking std I/O (no
//! runtime, no shell in the image), exit 0 on a 2xx answer. It is the
//! image's Docker `HEALTHCHECK`.
//!
//! Over HTTPS it does not verify the server against a CA and a host name:
//! it runs inside the service's own container, against the loopback
//! address, where the certificate's names (the Service's DNS name) do not
//! match and the CA that signed it may not be on disk at all. Instead it
//! *pins* the certificate: the handshake succeeds only when the server
//! presents exactly the leaf certificate of `LEASEHOLD_TLS_CERT_FILE`, the
//! file the service itself serves from. That proves the answer comes from
//! this service with its configured certificate, and needs nothing but the
//! service's own settings. Right after a rotation the service may still
//! serve the previous certificate for up to one reload interval; a probe
//! then fails once, which the health check's retries absorb.
//!
//! When the service requires client certificates
//! (`LEASEHOLD_TLS_CLIENT_CA_FILE`), the probe presents the service's own
//! certificate and key as its client certificate: issue the serving
//! certificate from the client CA with both usages (cert-manager: `usages:
//! [server auth, client auth]`).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};

use crate::config::HealthcheckArgs;

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the handshake and the answer may take.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a probe failed (printed to stderr by the binary).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The URL or the settings do not allow a probe.
    #[error("{0}")]
    Setup(String),
    /// Connecting, the handshake or the exchange failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The service answered, but not 2xx.
    #[error("did not answer 2xx")]
    NotHealthy,
}

/// The URL probed when `--url` is not given: `/readyz` on the API
/// listener's port at the loopback address (the listener's own address
/// when it is bound to one), `https` when the service serves HTTPS.
pub fn default_url(args: &HealthcheckArgs) -> String {
    let ip = match args.listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if args.tls_cert_file.is_some() {
        "https"
    } else {
        "http"
    };
    format!(
        "{scheme}://{}/readyz",
        SocketAddr::new(ip, args.listen.port())
    )
}

/// Probes `url` once.
pub fn probe(url: &str, args: &HealthcheckArgs) -> Result<(), ProbeError> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        return Err(ProbeError::Setup(
            "only http:// and https:// URLs are supported".into(),
        ));
    };
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
    let addr = host
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| ProbeError::Setup(format!("{host}: no address")))?;
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    let mut head = [0u8; 12];
    if tls {
        let config = pinned_config(args)?;
        let name = ServerName::from(addr.ip());
        let conn = ClientConnection::new(Arc::new(config), name)
            .map_err(|e| ProbeError::Setup(format!("TLS setup failed: {e}")))?;
        let mut stream = StreamOwned::new(conn, stream);
        stream.write_all(request.as_bytes())?;
        stream.read_exact(&mut head)?;
    } else {
        stream.write_all(request.as_bytes())?;
        stream.read_exact(&mut head)?;
    }
    if head.starts_with(b"HTTP/1.") && head[9] == b'2' {
        Ok(())
    } else {
        Err(ProbeError::NotHealthy)
    }
}

/// A client config that trusts exactly the leaf of `LEASEHOLD_TLS_CERT_FILE`
/// and presents it as the client certificate when a client CA is set.
fn pinned_config(args: &HealthcheckArgs) -> Result<ClientConfig, ProbeError> {
    let cert_file = args.tls_cert_file.as_deref().ok_or_else(|| {
        ProbeError::Setup(
            "an https:// probe needs LEASEHOLD_TLS_CERT_FILE (the certificate the service serves)"
                .into(),
        )
    })?;
    let chain = read_chain(cert_file)?;
    let provider = crate::http::tls::provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeError::Setup(format!("TLS setup failed: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            leaf: chain[0].clone(),
            provider,
        }));
    let mut config = match (&args.tls_client_ca_file, &args.tls_key_file) {
        (Some(_), Some(key_file)) => {
            // The parser's error is not shown: it could quote the key.
            let key = PrivateKeyDer::from_pem_file(key_file).map_err(|_| {
                ProbeError::Setup("LEASEHOLD_TLS_KEY_FILE holds no usable PEM private key".into())
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ProbeError::Setup(format!("client certificate not usable: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, ProbeError> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ProbeError::Setup(format!("LEASEHOLD_TLS_CERT_FILE: {e}")))?;
    if chain.is_empty() {
        return Err(ProbeError::Setup(
            "LEASEHOLD_TLS_CERT_FILE holds no PEM certificate".into(),
        ));
    }
    Ok(chain)
}

/// Accepts exactly one leaf certificate (signatures still checked with
/// its key, so a server without the private key cannot pass).
#[derive(Debug)]
struct Pinned {
    leaf: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.leaf.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the server's certificate is not the one in LEASEHOLD_TLS_CERT_FILE".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
