//! HTTPS for both listeners: rustls on the `ring` provider (as for Redis; no
//! aws-lc), HTTP/1.1 only (ALPN `http/1.1`), and the certificate re-read
//! when its files change, without a restart.
//!
//! ## Rotation
//!
//! The certificate in use lives in [`CurrentCert`], the server's
//! `ResolvesServerCert`: every handshake takes the `Arc<CertifiedKey>` that
//! is current at that moment. A background task ([`spawn_reloader`]) reads
//! the certificate and key files every `LEASEHOLD_TLS_RELOAD_INTERVAL_MS`
//! (default 5 s) and compares their *contents* with what it read last time.
//! Comparing contents, not modification times or inodes, catches every way a
//! file gets replaced: an in-place write, a rename over it (cert-manager), a
//! Kubernetes Secret volume swapping its `..data` symlink, a copy that keeps
//! the old mtime. Two small files read every few seconds cost nothing
//! measurable, and no watcher crate (inotify does not follow a symlink swap
//! of a parent directory without extra care) is needed.
//!
//! When the contents changed, the pair is parsed and checked (the key must
//! match the certificate). A usable pair replaces the current one for every
//! later handshake; connections already open keep theirs. A broken pair
//! (half written, key and certificate from different rotations, garbage)
//! keeps the previous certificate and logs a warning once per distinct
//! content; the next change is tried again. So a rotation is served at most
//! one interval after both files hold the new pair.
//!
//! The client CA (`LEASEHOLD_TLS_CLIENT_CA_FILE`) is read once at start: a
//! new client CA needs a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigError;

/// The setting naming the certificate file.
pub const CERT_SETTING: &str = "LEASEHOLD_TLS_CERT_FILE";
/// The setting naming the key file.
pub const KEY_SETTING: &str = "LEASEHOLD_TLS_KEY_FILE";
/// The setting naming the client CA file.
pub const CLIENT_CA_SETTING: &str = "LEASEHOLD_TLS_CLIENT_CA_FILE";

/// The files HTTPS is served from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf.
    pub key: PathBuf,
    /// PEM CA certificate(s) client certificates must chain to; `None`: no
    /// client certificate is asked for.
    pub client_ca: Option<PathBuf>,
}

/// The rustls provider every TLS config here uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// HTTPS ready to serve: one acceptor for both listeners and the reloader
/// that keeps its certificate current.
pub struct ServerTls {
    /// Accepts TLS connections with the current certificate.
    pub acceptor: TlsAcceptor,
    /// Re-reads the certificate files; see [`spawn_reloader`].
    pub reloader: Arc<CertReloader>,
}

impl ServerTls {
    /// Reads and checks every file; an error names the setting at fault.
    pub fn load(files: &TlsFiles) -> Result<Self, ConfigError> {
        let provider = provider();
        let reloader = CertReloader::load(files.cert.clone(), files.key.clone(), &provider)?;
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| ConfigError::new(CERT_SETTING, format!("TLS setup failed: {e}")))?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs(CLIENT_CA_SETTING, path)? {
                    roots.add(cert).map_err(|e| {
                        ConfigError::new(
                            CLIENT_CA_SETTING,
                            format!("holds a certificate that is not a usable CA: {e}"),
                        )
                    })?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| ConfigError::new(CLIENT_CA_SETTING, format!("is not usable: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(reloader.current());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            reloader: Arc::new(reloader),
        })
    }
}

/// The certificate every new handshake is served; swapped on rotation.
#[derive(Debug)]
pub struct CurrentCert(RwLock<Arc<CertifiedKey>>);

impl CurrentCert {
    /// The certificate and key in use now.
    pub fn get(&self) -> Arc<CertifiedKey> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn set(&self, key: Arc<CertifiedKey>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = key;
    }
}

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// What one look at the certificate files found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    /// Same contents as last time (or unreadable just now): nothing to do.
    Unchanged,
    /// A new, usable pair: served from the next handshake on.
    Replaced,
    /// New contents that are not a usable pair: the previous one stays.
    /// The reason names the setting; it never quotes the key.
    Rejected(String),
}

/// Reads the certificate and key files and swaps [`CurrentCert`] when they
/// hold a new usable pair.
#[derive(Debug)]
pub struct CertReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Arc<CurrentCert>,
    /// The contents last looked at (loaded or rejected).
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl CertReloader {
    /// Loads the pair now; at start a broken pair is a configuration error.
    pub fn load(
        cert_path: PathBuf,
        key_path: PathBuf,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self, ConfigError> {
        let cert_pem = read_file(CERT_SETTING, &cert_path)?;
        let key_pem = read_file(KEY_SETTING, &key_path)?;
        let key = certified_key(&cert_pem, &key_pem, provider)?;
        Ok(Self {
            cert_path,
            key_path,
            provider: Arc::clone(provider),
            current: Arc::new(CurrentCert(RwLock::new(Arc::new(key)))),
            seen: Mutex::new((cert_pem, key_pem)),
        })
    }

    /// The resolver the server config serves from.
    pub fn current(&self) -> Arc<CurrentCert> {
        Arc::clone(&self.current)
    }

    /// Looks at the files once (blocking file reads: call it off the
    /// runtime's worker threads).
    pub fn check(&self) -> Reload {
        // A file missing or unreadable for a moment (mid-swap) is not a
        // change: the next look sees the finished swap.
        let (Ok(cert_pem), Ok(key_pem)) = (
            std::fs::read(&self.cert_path),
            std::fs::read(&self.key_path),
        ) else {
            return Reload::Unchanged;
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.0 == cert_pem && seen.1 == key_pem {
            return Reload::Unchanged;
        }
        let outcome = match certified_key(&cert_pem, &key_pem, &self.provider) {
            Ok(key) => {
                self.current.set(Arc::new(key));
                Reload::Replaced
            }
            Err(e) => Reload::Rejected(e.to_string()),
        };
        *seen = (cert_pem, key_pem);
        outcome
    }
}

/// Checks the certificate files every `interval` until `stop`, logging each
/// replacement (info) and each rejected new pair (warning).
pub fn spawn_reloader(reloader: Arc<CertReloader>, interval: Duration, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let look = Arc::clone(&reloader);
            let Ok(outcome) = tokio::task::spawn_blocking(move || look.check()).await else {
                break;
            };
            match outcome {
                Reload::Unchanged => {}
                Reload::Replaced => tracing::info!(
                    cert_file = %reloader.cert_path.display(),
                    "TLS certificate files changed; serving the new certificate"
                ),
                Reload::Rejected(reason) => tracing::warn!(
                    cert_file = %reloader.cert_path.display(),
                    %reason,
                    "TLS certificate files changed but are not usable; still serving the previous certificate"
                ),
            }
        }
    });
}

/// The whole file; an error names the setting and the kind of failure.
fn read_file(setting: &'static str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|e| ConfigError::new(setting, format!("cannot be read: {}", e.kind())))
}

/// Every PEM certificate in a file (at least one).
fn read_certs(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    parse_certs(setting, &read_file(setting, path)?)
}

fn parse_certs(
    setting: &'static str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| ConfigError::new(setting, "is not valid PEM"))?;
    if certs.is_empty() {
        return Err(ConfigError::new(setting, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The certificate chain and its key, checked to belong together.
fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, ConfigError> {
    let chain = parse_certs(CERT_SETTING, cert_pem)?;
    // The parser's error is not shown: it could quote part of the key.
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
        ConfigError::new(
            KEY_SETTING,
            "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
        )
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        ConfigError::new(
            KEY_SETTING,
            format!("does not fit the certificate in {CERT_SETTING}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed pair made with the openssl CLI (as the integration
    /// tests do); panics naming the package when openssl is missing.
    fn self_signed(dir: &Path, name: &str) -> (Vec<u8>, Vec<u8>) {
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .unwrap_or_else(|e| panic!("openssl not runnable ({e}): apt-get install openssl"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            std::fs::read(cert).expect("cert"),
            std::fs::read(key).expect("key"),
        )
    }

    fn temp_dir() -> PathBuf {
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).expect("random");
        let dir =
            std::env::temp_dir().join(format!("leasehold-tls-unit-{}", u64::from_le_bytes(r)));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn a_broken_new_pair_keeps_the_old_certificate_and_a_good_one_replaces_it() {
        let dir = temp_dir();
        let (cert_a, key_a) = self_signed(&dir, "a");
        let (cert_b, key_b) = self_signed(&dir, "b");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &cert_a).expect("write");
        std::fs::write(&key, &key_a).expect("write");
        let reloader = CertReloader::load(cert.clone(), key.clone(), &provider()).expect("load");
        let served = |r: &CertReloader| r.current().get().cert[0].as_ref().to_vec();
        let der_a = served(&reloader);
        assert_eq!(reloader.check(), Reload::Unchanged);

        // Half a rotation: the new certificate with the old key.
        std::fs::write(&cert, &cert_b).expect("write");
        let Reload::Rejected(reason) = reloader.check() else {
            panic!("a mismatched pair must be rejected");
        };
        assert!(reason.contains(KEY_SETTING), "{reason}");
        assert_eq!(served(&reloader), der_a, "still the old certificate");
        assert_eq!(
            reloader.check(),
            Reload::Unchanged,
            "rejected once, not every tick"
        );

        // Garbage in the key file.
        std::fs::write(&key, b"not a key").expect("write");
        assert!(matches!(reloader.check(), Reload::Rejected(_)));
        assert_eq!(served(&reloader), der_a);

        // The rotation completes.
        std::fs::write(&key, &key_b).expect("write");
        assert_eq!(reloader.check(), Reload::Replaced);
        assert_ne!(served(&reloader), der_a, "the new certificate");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn start_up_errors_name_the_setting() {
        let dir = temp_dir();
        let (cert_a, key_a) = self_signed(&dir, "a");
        let (_, key_b) = self_signed(&dir, "b");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let load = |c: &[u8], k: &[u8]| {
            std::fs::write(&cert, c).expect("write");
            std::fs::write(&key, k).expect("write");
            CertReloader::load(cert.clone(), key.clone(), &provider()).map(|_| ())
        };
        assert!(load(&cert_a, &key_a).is_ok());
        assert_eq!(
            load(b"junk", &key_a).expect_err("junk cert").setting,
            CERT_SETTING
        );
        assert_eq!(
            load(&cert_a, b"junk").expect_err("junk key").setting,
            KEY_SETTING
        );
        let mismatch = load(&cert_a, &key_b).expect_err("mismatch");
        assert_eq!(mismatch.setting, KEY_SETTING);
        let missing = CertReloader::load(dir.join("none.crt"), key.clone(), &provider());
        assert_eq!(missing.expect_err("missing").setting, CERT_SETTING);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
