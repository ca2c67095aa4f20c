//! The client's TLS: a rustls configuration on the `ring` provider (as for
//! Redis), trusting the system roots or a CA file, with an optional client
//! certificate. reqwest is built with `rustls-no-provider` and always gets
//! this configuration, so neither aws-lc nor a process-wide provider is
//! needed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::error::BuildError;

/// A client certificate and its private key, both PEM files, presented to
/// a service that asks for one (mutual TLS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain, leaf first (PEM).
    pub cert_file: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1). A secret: only its
    /// path is ever printed.
    pub key_file: PathBuf,
}

/// Whom an `https://` client trusts and what it presents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// Trust only the CA certificates in this PEM file; `None`: the
    /// operating system's trust store.
    pub ca_file: Option<PathBuf>,
    /// Present this certificate when the service asks for one.
    pub client_identity: Option<ClientIdentity>,
}

fn tls_error(path: &Path, reason: impl std::fmt::Display) -> BuildError {
    BuildError::Tls(format!("{}: {reason}", path.display()))
}

/// The CA certificates of a PEM file (at least one).
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, BuildError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(path, e))?;
    if certs.is_empty() {
        return Err(tls_error(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

fn roots(settings: &TlsSettings) -> Result<RootCertStore, BuildError> {
    let mut roots = RootCertStore::empty();
    match &settings.ca_file {
        Some(path) => {
            for cert in read_certs(path)? {
                roots.add(cert).map_err(|e| tls_error(path, e))?;
            }
        }
        None => {
            // Unreadable entries are skipped, as browsers do; an empty
            // store is an error worth naming.
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(BuildError::Tls(
                    "no trusted CA certificates found in the system store; pass a CA file"
                        .to_owned(),
                ));
            }
        }
    }
    Ok(roots)
}

/// The rustls configuration for `settings`. With `https == false` (a
/// plain `http://` base URL) nothing is read and nothing is trusted: reqwest
/// still wants a configuration, and it is never used.
pub(super) fn client_config(
    settings: &TlsSettings,
    https: bool,
) -> Result<ClientConfig, BuildError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BuildError::Tls(e.to_string()))?;
    if !https {
        return Ok(builder
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth());
    }
    let builder = builder.with_root_certificates(roots(settings)?);
    match &settings.client_identity {
        None => Ok(builder.with_no_client_auth()),
        Some(id) => {
            let chain = read_certs(&id.cert_file)?;
            // Never the key's content in an error: only its path.
            let key = PrivateKeyDer::from_pem_file(&id.key_file)
                .map_err(|_| tls_error(&id.key_file, "no readable PEM private key"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_error(&id.cert_file, e))
        }
    }
}

/// Whether the server refused the connection for want of an acceptable
/// client certificate: a TLS alert (`certificate_required`,
/// `bad_certificate`, ...) received. With TLS 1.3 it arrives after the
/// client's side of the handshake, when the request is already written; but
/// the server never completed the handshake, so it never read the request.
pub(super) fn refused_client_certificate(error: &(dyn std::error::Error + 'static)) -> bool {
    use rustls::AlertDescription as A;
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(rustls::Error::AlertReceived(alert)) = e.downcast_ref::<rustls::Error>() {
            return matches!(
                alert,
                A::CertificateRequired
                    | A::BadCertificate
                    | A::UnknownCA
                    | A::CertificateUnknown
                    | A::UnsupportedCertificate
                    | A::CertificateExpired
                    | A::CertificateRevoked
                    | A::AccessDenied
            );
        }
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

/// Whether a transport error was a failed TLS handshake (an untrusted or
/// mismatched certificate, a refused client certificate).
pub(super) fn is_tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<rustls::Error>() {
            return true;
        }
        // An io::Error's source() skips the error it wraps (which may be
        // another io::Error around the rustls one): descend into it instead.
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}
