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
//! The client CA file (`LEASEHOLD_TLS_CLIENT_CA_FILE`) is watched the same
//! way: new usable contents build a new server config, which every later
//! handshake uses ([`CurrentAcceptor`]); broken contents keep the previous
//! CA.

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

use crate::domain::ConfigError;

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

/// HTTPS ready to serve: the acceptor both listeners take each new
/// connection's handshake from, and the reloader that keeps it current.
pub struct ServerTls {
    /// The acceptor in use now (certificate and client CA).
    pub acceptor: CurrentAcceptor,
    /// Re-reads the files; see [`spawn_reloader`].
    pub reloader: Arc<TlsReloader>,
}

impl ServerTls {
    /// Reads and checks every file; an error names the setting at fault.
    pub fn load(files: &TlsFiles) -> Result<Self, ConfigError> {
        let reloader = TlsReloader::load(files, provider())?;
        Ok(Self {
            acceptor: reloader.acceptor(),
            reloader: Arc::new(reloader),
        })
    }
}

/// The acceptor new connections use: swapped when the client CA changes
/// (a new certificate needs no new acceptor: see [`CurrentCert`]). Clones
/// share it.
#[derive(Clone)]
pub struct CurrentAcceptor(Arc<RwLock<TlsAcceptor>>);

impl CurrentAcceptor {
    /// The acceptor for the next connection.
    pub fn get(&self) -> TlsAcceptor {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, acceptor: TlsAcceptor) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = acceptor;
    }
}

impl std::fmt::Debug for CurrentAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentAcceptor").finish_non_exhaustive()
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

/// What one look at a set of files found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    /// Same contents as last time (or unreadable just now): nothing to do.
    Unchanged,
    /// New, usable contents: in use from the next handshake on.
    Replaced,
    /// New contents that are not usable: the previous ones stay. The
    /// reason names the setting; it never quotes the key.
    Rejected(String),
}

/// The file contents last looked at (loaded or rejected).
#[derive(Debug)]
struct Seen {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Vec<u8>,
}

/// Reads the TLS files and swaps what is served when they hold something
/// new and usable: the certificate pair into [`CurrentCert`], a new client
/// CA into a new acceptor in [`CurrentAcceptor`].
#[derive(Debug)]
pub struct TlsReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    client_ca_path: Option<PathBuf>,
    provider: Arc<CryptoProvider>,
    current: Arc<CurrentCert>,
    acceptor: CurrentAcceptor,
    seen: Mutex<Seen>,
}

impl TlsReloader {
    /// Loads every file now; at start anything broken is a configuration
    /// error naming its setting.
    pub fn load(files: &TlsFiles, provider: Arc<CryptoProvider>) -> Result<Self, ConfigError> {
        let cert = read_file(CERT_SETTING, &files.cert)?;
        let key = read_file(KEY_SETTING, &files.key)?;
        let current = Arc::new(CurrentCert(RwLock::new(Arc::new(certified_key(
            &cert, &key, &provider,
        )?))));
        let client_ca = match &files.client_ca {
            Some(path) => read_file(CLIENT_CA_SETTING, path)?,
            None => Vec::new(),
        };
        let config = server_config(
            &provider,
            Arc::clone(&current),
            files.client_ca.is_some().then_some(&client_ca[..]),
        )?;
        Ok(Self {
            cert_path: files.cert.clone(),
            key_path: files.key.clone(),
            client_ca_path: files.client_ca.clone(),
            provider,
            current,
            acceptor: CurrentAcceptor(Arc::new(RwLock::new(TlsAcceptor::from(Arc::new(config))))),
            seen: Mutex::new(Seen {
                cert,
                key,
                client_ca,
            }),
        })
    }

    /// The resolver the server config serves the certificate from.
    pub fn current(&self) -> Arc<CurrentCert> {
        Arc::clone(&self.current)
    }

    /// The acceptor the listeners take each handshake from.
    pub fn acceptor(&self) -> CurrentAcceptor {
        self.acceptor.clone()
    }

    /// Looks at the certificate and key files once (blocking file reads:
    /// call it off the runtime's worker threads).
    pub fn check(&self) -> Reload {
        // A file missing or unreadable for a moment (mid-swap) is not a
        // change: the next look sees the finished swap.
        let (Ok(cert), Ok(key)) = (
            std::fs::read(&self.cert_path),
            std::fs::read(&self.key_path),
        ) else {
            return Reload::Unchanged;
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.cert == cert && seen.key == key {
            return Reload::Unchanged;
        }
        let outcome = match certified_key(&cert, &key, &self.provider) {
            Ok(pair) => {
                self.current.set(Arc::new(pair));
                Reload::Replaced
            }
            Err(e) => Reload::Rejected(format!("{} {}", e.setting, e.reason)),
        };
        (seen.cert, seen.key) = (cert, key);
        outcome
    }

    /// Looks at the client CA file once (if one is set); a new usable one
    /// applies to every later handshake.
    pub fn check_client_ca(&self) -> Reload {
        let Some(path) = &self.client_ca_path else {
            return Reload::Unchanged;
        };
        let Ok(client_ca) = std::fs::read(path) else {
            return Reload::Unchanged;
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.client_ca == client_ca {
            return Reload::Unchanged;
        }
        let outcome =
            match server_config(&self.provider, Arc::clone(&self.current), Some(&client_ca)) {
                Ok(config) => {
                    self.acceptor.set(TlsAcceptor::from(Arc::new(config)));
                    Reload::Replaced
                }
                Err(e) => Reload::Rejected(format!("{} {}", e.setting, e.reason)),
            };
        seen.client_ca = client_ca;
        outcome
    }
}

/// The server config: HTTP/1.1 only, the certificate from `resolver`, and
/// client certificates required when a client CA is given.
fn server_config(
    provider: &Arc<CryptoProvider>,
    resolver: Arc<CurrentCert>,
    client_ca_pem: Option<&[u8]>,
) -> Result<ServerConfig, ConfigError> {
    let builder = ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new(CERT_SETTING, format!("TLS setup failed: {e}")))?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in parse_certs(CLIENT_CA_SETTING, pem)? {
                roots.add(cert).map_err(|e| {
                    ConfigError::new(
                        CLIENT_CA_SETTING,
                        format!("holds a certificate that is not a usable CA: {e}"),
                    )
                })?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
                    .build()
                    .map_err(|e| {
                        ConfigError::new(CLIENT_CA_SETTING, format!("is not usable: {e}"))
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Checks the TLS files every `interval` until `stop`, logging each
/// replacement (info) and each rejected new content (warning).
pub fn spawn_reloader(reloader: Arc<TlsReloader>, interval: Duration, stop: CancellationToken) {
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
            let Ok((pair, client_ca)) =
                tokio::task::spawn_blocking(move || (look.check(), look.check_client_ca())).await
            else {
                break;
            };
            log_reload("certificate", &reloader.cert_path, pair);
            if let Some(path) = &reloader.client_ca_path {
                log_reload("client CA", path, client_ca);
            }
        }
    });
}

fn log_reload(what: &'static str, file: &Path, outcome: Reload) {
    match outcome {
        Reload::Unchanged => {}
        Reload::Replaced => tracing::info!(
            file = %file.display(),
            "TLS {what} file changed; in use from the next handshake"
        ),
        Reload::Rejected(reason) => tracing::warn!(
            file = %file.display(),
            %reason,
            "TLS {what} file changed but is not usable; still using the previous one"
        ),
    }
}

/// The whole file; an error names the setting and the kind of failure.
fn read_file(setting: &'static str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|e| ConfigError::new(setting, format!("cannot be read: {}", e.kind())))
}

/// Every PEM certificate in `pem` (at least one).
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

    fn files(cert: &Path, key: &Path, client_ca: Option<&Path>) -> TlsFiles {
        TlsFiles {
            cert: cert.to_owned(),
            key: key.to_owned(),
            client_ca: client_ca.map(Path::to_owned),
        }
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
        let reloader = TlsReloader::load(&files(&cert, &key, None), provider()).expect("load");
        let served = |r: &TlsReloader| r.current().get().cert[0].as_ref().to_vec();
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
    fn a_new_client_ca_gets_a_new_acceptor_and_a_broken_one_keeps_the_old() {
        let dir = temp_dir();
        let (cert_a, key_a) = self_signed(&dir, "a");
        let (cert_b, _) = self_signed(&dir, "b");
        let (cert, key, ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.pem"));
        std::fs::write(&cert, &cert_a).expect("write");
        std::fs::write(&key, &key_a).expect("write");
        std::fs::write(&ca, &cert_a).expect("write");
        let reloader = TlsReloader::load(&files(&cert, &key, Some(&ca)), provider()).expect("load");
        let acceptor = reloader.acceptor();
        let config = |a: &CurrentAcceptor| Arc::as_ptr(a.get().config());
        let first = config(&acceptor);
        assert_eq!(reloader.check_client_ca(), Reload::Unchanged);
        std::fs::write(&ca, b"junk").expect("write");
        assert!(
            matches!(reloader.check_client_ca(), Reload::Rejected(r) if r.contains(CLIENT_CA_SETTING))
        );
        assert_eq!(config(&acceptor), first, "the old acceptor stays");
        std::fs::write(&ca, &cert_b).expect("write");
        assert_eq!(reloader.check_client_ca(), Reload::Replaced);
        assert_ne!(config(&acceptor), first, "a new acceptor");
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
            TlsReloader::load(&files(&cert, &key, None), provider()).map(|_| ())
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
        let missing = TlsReloader::load(&files(&dir.join("none.crt"), &key, None), provider());
        assert_eq!(missing.expect_err("missing").setting, CERT_SETTING);
        assert!(load(&cert_a, &key_a).is_ok());
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, b"junk").expect("write");
        let bad_ca = TlsReloader::load(&files(&cert, &key, Some(&ca)), provider());
        assert_eq!(bad_ca.expect_err("junk CA").setting, CLIENT_CA_SETTING);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
