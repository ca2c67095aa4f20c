//! The HTTP server's settings group: listeners, connection limits, runtime
//! threads, shutdown grace, and HTTPS ([`TlsArgs`]), with their checks.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::check;
use crate::domain::ConfigError;

/// The listeners and what they allow.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// Address of the API listener.
    #[arg(
        long,
        env = "LEASEHOLD_LISTEN",
        default_value = "127.0.0.1:8080",
        display_order = 10
    )]
    pub listen: SocketAddr,
    /// Serve /metrics on this separate address instead of the API listener.
    #[arg(long, env = "LEASEHOLD_METRICS_LISTEN", display_order = 20)]
    pub metrics_listen: Option<SocketAddr>,
    /// Open HTTP connections at most (each listener); at the limit new
    /// connections wait in the kernel's backlog until one closes.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_CONNECTIONS",
        default_value_t = 4096,
        display_order = 260
    )]
    pub max_connections: usize,
    /// A connection that sends no complete request head for this long (idle
    /// keep-alive, or a head trickled in) is closed. Keep it above the idle
    /// timeout of any load balancer in front (AWS ALB: 60 s).
    #[arg(
        long,
        env = "LEASEHOLD_IDLE_TIMEOUT_MS",
        default_value_t = 75_000,
        display_order = 270
    )]
    pub idle_timeout_ms: u64,
    /// Serve plain HTTP connections' lease verbs and event streams with the
    /// service's own hand-written HTTP/1.1 paths (faster, less memory per
    /// watcher); `false`: hyper (and the router) serves every request, one
    /// HTTP implementation.
    #[arg(long, env = "LEASEHOLD_HTTP_FAST_PATHS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL", display_order = 275)]
    pub http_fast_paths: bool,
    /// Runtime worker threads; 0 = one per CPU the process may use (cgroup
    /// CPU limits included, so a 1-CPU container gets one).
    #[arg(
        long,
        env = "LEASEHOLD_WORKER_THREADS",
        default_value_t = 0,
        display_order = 280
    )]
    pub worker_threads: usize,
    /// Request body limit in bytes.
    #[arg(
        long,
        env = "LEASEHOLD_BODY_LIMIT_BYTES",
        default_value_t = 16 * 1024,
        display_order = 290
    )]
    pub body_limit_bytes: usize,
    /// HTTPS on both listeners.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// After SIGTERM, how long in-flight requests may take before the process exits anyway.
    #[arg(
        long,
        env = "LEASEHOLD_SHUTDOWN_GRACE_MS",
        default_value_t = 10_000,
        display_order = 390
    )]
    pub shutdown_grace_ms: u64,
}

impl HttpArgs {
    /// Checks the group, naming the setting that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check::positive(&[
            ("LEASEHOLD_MAX_CONNECTIONS", self.max_connections as u64),
            ("LEASEHOLD_IDLE_TIMEOUT_MS", self.idle_timeout_ms),
            ("LEASEHOLD_BODY_LIMIT_BYTES", self.body_limit_bytes as u64),
        ])?;
        check::at_most(&[
            (
                "LEASEHOLD_WORKER_THREADS",
                self.worker_threads as u64,
                256,
                " (0: one per available CPU)",
            ),
            (
                "LEASEHOLD_MAX_CONNECTIONS",
                self.max_connections as u64,
                1_000_000,
                "",
            ),
            (
                "LEASEHOLD_IDLE_TIMEOUT_MS",
                self.idle_timeout_ms,
                3_600_000,
                "",
            ),
        ])?;
        self.tls.validate()
    }
}

/// HTTPS: the served certificate, its key, the client CA, and how often
/// they are re-read.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// PEM certificate chain (leaf first): serve HTTPS on the API and metrics
    /// listeners (with `LEASEHOLD_TLS_KEY_FILE`). Re-read when it changes.
    #[arg(long, env = "LEASEHOLD_TLS_CERT_FILE", display_order = 350)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `LEASEHOLD_TLS_CERT_FILE` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "LEASEHOLD_TLS_KEY_FILE", display_order = 360)]
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA certificate(s): require client certificates signed by them
    /// (both listeners). Unset: no client certificate is asked for. Re-read
    /// when it changes.
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA_FILE", display_order = 370)]
    pub tls_client_ca_file: Option<PathBuf>,
    /// How often the certificate, key and client CA files are checked for a change.
    #[arg(
        long,
        env = "LEASEHOLD_TLS_RELOAD_INTERVAL_MS",
        default_value_t = 5000,
        display_order = 380
    )]
    pub tls_reload_interval_ms: u64,
}

impl TlsArgs {
    /// Certificate and key both or neither; a client CA only with them; a
    /// reload interval of 1 ms to 1 h.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const RELOAD: &str = "LEASEHOLD_TLS_RELOAD_INTERVAL_MS";
        check::positive(&[(RELOAD, self.tls_reload_interval_ms)])?;
        check::at_most(&[(RELOAD, self.tls_reload_interval_ms, 3_600_000, "")])?;
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(_), None) => Err(ConfigError::new(
                "LEASEHOLD_TLS_KEY_FILE",
                "is required with LEASEHOLD_TLS_CERT_FILE",
            )),
            (None, Some(_)) => Err(ConfigError::new(
                "LEASEHOLD_TLS_CERT_FILE",
                "is required with LEASEHOLD_TLS_KEY_FILE",
            )),
            (None, None) if self.tls_client_ca_file.is_some() => Err(ConfigError::new(
                "LEASEHOLD_TLS_CLIENT_CA_FILE",
                "needs LEASEHOLD_TLS_CERT_FILE and LEASEHOLD_TLS_KEY_FILE (HTTPS)",
            )),
            _ => Ok(()),
        }
    }

    /// The certificate and key files, when HTTPS is on.
    pub fn cert_and_key(&self) -> Option<(&PathBuf, &PathBuf)> {
        self.tls_cert_file.as_ref().zip(self.tls_key_file.as_ref())
    }
}
