//! Command line and `LEASEHOLD_*` settings, validated once at start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::telemetry::LogFormat;

/// leasehold: time-bounded, owner-checked leases with typed outcomes and fencing tokens.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (the default).
    Serve(Box<ServeArgs>),
    /// Print the `v1.<sha256-hex>` digest of a raw resource id.
    Digest {
        /// The raw resource id (never sent to the service).
        raw_id: String,
    },
    /// Print the OpenAPI document.
    Openapi,
    /// GET a URL and exit 0 on a 2xx answer (a container health check without a shell).
    Healthcheck(HealthcheckArgs),
}

/// Settings of `leasehold healthcheck`: the same `LEASEHOLD_*` variables the
/// service reads, so inside the service's container it probes what the
/// service serves (HTTPS when `LEASEHOLD_TLS_CERT_FILE` is set).
#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// The URL to probe; default: `/readyz` on this container's
    /// `LEASEHOLD_LISTEN` port at the loopback address, `https://` when
    /// `LEASEHOLD_TLS_CERT_FILE` is set.
    #[arg(long)]
    pub url: Option<String>,
    /// The service's API listener (for the default URL).
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The certificate the service serves: an `https://` probe accepts
    /// exactly this certificate and nothing else.
    #[arg(long, env = "LEASEHOLD_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `LEASEHOLD_TLS_CERT_FILE`: presented as the client
    /// certificate when the service requires one.
    #[arg(long, env = "LEASEHOLD_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Set when the service requires client certificates.
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA_FILE")]
    pub tls_client_ca_file: Option<PathBuf>,
}

/// Settings of `leasehold serve`; every flag has a `LEASEHOLD_*` variable.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the API listener.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Serve /metrics on this separate address instead of the API listener.
    #[arg(long, env = "LEASEHOLD_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Standalone Redis URL (`redis://` or `rediss://`); unset: the embedded store.
    #[arg(long, env = "LEASEHOLD_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// Redis Cluster: comma-separated seed node URLs (`redis://` or `rediss://`).
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_CLUSTER_NODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_cluster_nodes: Vec<String>,
    /// Redis Sentinel: comma-separated sentinel URLs; needs `LEASEHOLD_REDIS_SENTINEL_MASTER`.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_SENTINELS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_sentinels: Vec<String>,
    /// Redis Sentinel: the monitored master's name.
    #[arg(long, env = "LEASEHOLD_REDIS_SENTINEL_MASTER")]
    pub redis_sentinel_master: Option<String>,
    /// PEM file of the CA(s) that sign the Redis servers' certificates (`rediss://` only; default: the system roots).
    #[arg(long, env = "LEASEHOLD_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with `LEASEHOLD_REDIS_CLIENT_KEY`).
    #[arg(long, env = "LEASEHOLD_REDIS_CLIENT_CERT")]
    pub redis_client_cert: Option<PathBuf>,
    /// PEM private key of `LEASEHOLD_REDIS_CLIENT_CERT`.
    #[arg(long, env = "LEASEHOLD_REDIS_CLIENT_KEY")]
    pub redis_client_key: Option<PathBuf>,
    /// Redis ACL user name (data nodes; overrides the URL's).
    #[arg(long, env = "LEASEHOLD_REDIS_USERNAME")]
    pub redis_username: Option<String>,
    /// File holding the Redis password (first line; data nodes; overrides the URL's).
    #[arg(long, env = "LEASEHOLD_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,
    /// After each mutating script, `WAIT` for this many replicas (0: off) and say in the answer how many acknowledged.
    #[arg(long, env = "LEASEHOLD_REDIS_MIN_REPLICAS", default_value_t = 0)]
    pub redis_min_replicas: u32,
    /// How long `WAIT` may block for replica acknowledgements.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_REPLICA_TIMEOUT_MS",
        default_value_t = 100
    )]
    pub redis_replica_timeout_ms: u64,
    /// Key namespace; must not contain `{`, `}`, `:` or whitespace.
    #[arg(long, env = "LEASEHOLD_NAMESPACE", default_value = "leasehold")]
    pub namespace: String,
    /// Bound on every store call, pool wait included.
    #[arg(long, env = "LEASEHOLD_COMMAND_TIMEOUT_MS", default_value_t = 200)]
    pub command_timeout_ms: u64,
    /// `retryAfterMs` when the holder's remaining TTL is unknown, and for `overloaded`.
    #[arg(long, env = "LEASEHOLD_RETRY_AFTER_MS", default_value_t = 50)]
    pub retry_after_ms: u64,
    /// Clock drift budget; the smallest TTL is twice this.
    #[arg(long, env = "LEASEHOLD_DRIFT_BUDGET_MS", default_value_t = 10)]
    pub drift_budget_ms: u64,
    /// Largest TTL.
    #[arg(long, env = "LEASEHOLD_MAX_TTL_MS", default_value_t = 3_600_000)]
    pub max_ttl_ms: u64,
    /// Largest server-side wait.
    #[arg(long, env = "LEASEHOLD_MAX_WAIT_MS", default_value_t = 30_000)]
    pub max_wait_ms: u64,
    /// Concurrent server-side waits; more are answered `overloaded`.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS", default_value_t = 10_000)]
    pub max_waiters: usize,
    /// Release what a waiting acquire got after its caller had gone, unless
    /// a replay claimed it since (`true`); `false` (this release's default)
    /// leaves it to expire with its TTL. Turn it on once no instance of the
    /// previous release serves the same store: their replays do not claim
    /// (migrations-none.md).
    #[arg(long, env = "LEASEHOLD_RELEASE_ABANDONED", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub release_abandoned: bool,
    /// Concurrent watches (long-polls and event streams); more are answered `overloaded`.
    #[arg(long, env = "LEASEHOLD_MAX_WATCHERS", default_value_t = 16_384)]
    pub max_watchers: usize,
    /// Internal (tests): an event stream's keep-alive comment interval, at most 15 s.
    #[arg(
        long,
        env = "LEASEHOLD_SSE_KEEPALIVE_MS",
        default_value_t = 15_000,
        hide = true
    )]
    pub sse_keepalive_ms: u64,
    /// Pooled Redis connections.
    #[arg(long, env = "LEASEHOLD_POOL_SIZE", default_value_t = 32)]
    pub pool_size: u32,
    /// Concurrent store calls; more are answered `overloaded`.
    #[arg(long, env = "LEASEHOLD_MAX_IN_FLIGHT", default_value_t = 1024)]
    pub max_in_flight: usize,
    /// Open HTTP connections at most (each listener); at the limit new
    /// connections wait in the kernel's backlog until one closes.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// A connection that sends no complete request head for this long (idle
    /// keep-alive, or a head trickled in) is closed. Keep it above the idle
    /// timeout of any load balancer in front (AWS ALB: 60 s).
    #[arg(long, env = "LEASEHOLD_IDLE_TIMEOUT_MS", default_value_t = 75_000)]
    pub idle_timeout_ms: u64,
    /// Runtime worker threads; 0 = one per CPU the process may use (cgroup
    /// CPU limits included, so a 1-CPU container gets one).
    #[arg(long, env = "LEASEHOLD_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,
    /// Request body limit in bytes.
    #[arg(long, env = "LEASEHOLD_BODY_LIMIT_BYTES", default_value_t = 16 * 1024)]
    pub body_limit_bytes: usize,
    /// Distinct purposes shown as metric labels; the rest are `other`.
    #[arg(long, env = "LEASEHOLD_MAX_PURPOSE_LABELS", default_value_t = 50)]
    pub max_purpose_labels: usize,
    /// Live leases the embedded store holds at most.
    #[arg(long, env = "LEASEHOLD_MEMORY_MAX_LEASES", default_value_t = 1_000_000)]
    pub memory_max_leases: usize,
    /// File of API keys, `<key> <purpose>[,<purpose>...]` or `<key> *` per line; unset: open API.
    #[arg(long, env = "LEASEHOLD_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// Refuse to start without API keys (no open API by accident).
    #[arg(long, env = "LEASEHOLD_API_KEYS_REQUIRED", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub api_keys_required: bool,
    /// Log format.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// PEM certificate chain (leaf first): serve HTTPS on the API and metrics
    /// listeners (with `LEASEHOLD_TLS_KEY_FILE`). Re-read when it changes.
    #[arg(long, env = "LEASEHOLD_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `LEASEHOLD_TLS_CERT_FILE` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "LEASEHOLD_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA certificate(s): require client certificates signed by them
    /// (both listeners). Unset: no client certificate is asked for. Re-read
    /// when it changes.
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA_FILE")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// How often the certificate, key and client CA files are checked for a change.
    #[arg(long, env = "LEASEHOLD_TLS_RELOAD_INTERVAL_MS", default_value_t = 5000)]
    pub tls_reload_interval_ms: u64,
    /// After SIGTERM, how long in-flight requests may take before the process exits anyway.
    #[arg(long, env = "LEASEHOLD_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    pub shutdown_grace_ms: u64,
}

impl ServeArgs {
    /// The settings from the environment alone (what `leasehold` with no subcommand uses).
    pub fn from_env() -> Result<Self, clap::Error> {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            args: ServeArgs,
        }
        Only::try_parse_from(["leasehold"]).map(|o| o.args)
    }

    /// Checks every setting, naming the one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ns = &self.namespace;
        if ns.is_empty()
            || ns.len() > 64
            || ns
                .chars()
                .any(|c| matches!(c, '{' | '}' | ':') || c.is_whitespace() || c.is_control())
        {
            return Err(ConfigError::new(
                "LEASEHOLD_NAMESPACE",
                "must be 1-64 characters without '{', '}', ':' or whitespace (braces would put every key in one Redis Cluster slot)",
            ));
        }
        let positive = [
            ("LEASEHOLD_COMMAND_TIMEOUT_MS", self.command_timeout_ms),
            ("LEASEHOLD_RETRY_AFTER_MS", self.retry_after_ms),
            ("LEASEHOLD_DRIFT_BUDGET_MS", self.drift_budget_ms),
            ("LEASEHOLD_MAX_TTL_MS", self.max_ttl_ms),
            ("LEASEHOLD_POOL_SIZE", u64::from(self.pool_size)),
            ("LEASEHOLD_MAX_IN_FLIGHT", self.max_in_flight as u64),
            ("LEASEHOLD_MAX_CONNECTIONS", self.max_connections as u64),
            ("LEASEHOLD_IDLE_TIMEOUT_MS", self.idle_timeout_ms),
            ("LEASEHOLD_BODY_LIMIT_BYTES", self.body_limit_bytes as u64),
            ("LEASEHOLD_MEMORY_MAX_LEASES", self.memory_max_leases as u64),
            ("LEASEHOLD_MAX_WATCHERS", self.max_watchers as u64),
            ("LEASEHOLD_SSE_KEEPALIVE_MS", self.sse_keepalive_ms),
            (
                "LEASEHOLD_TLS_RELOAD_INTERVAL_MS",
                self.tls_reload_interval_ms,
            ),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(ConfigError::new(name, "must be greater than 0"));
            }
        }
        if self.command_timeout_ms > 60_000 {
            return Err(ConfigError::new(
                "LEASEHOLD_COMMAND_TIMEOUT_MS",
                "must be at most 60000",
            ));
        }
        if self.max_ttl_ms < 2 * self.drift_budget_ms {
            return Err(ConfigError::new(
                "LEASEHOLD_MAX_TTL_MS",
                "must be at least twice LEASEHOLD_DRIFT_BUDGET_MS",
            ));
        }
        if self.max_ttl_ms > 7 * 24 * 3600 * 1000 {
            return Err(ConfigError::new(
                "LEASEHOLD_MAX_TTL_MS",
                "must be at most 7 days",
            ));
        }
        // Upper bounds: (setting, value, largest allowed, note after the bound).
        let at_most = [
            ("LEASEHOLD_MAX_WAIT_MS", self.max_wait_ms, 3_600_000, ""),
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
            ("LEASEHOLD_POOL_SIZE", u64::from(self.pool_size), 1024, ""),
            (
                "LEASEHOLD_MAX_WATCHERS",
                self.max_watchers as u64,
                1_000_000,
                "",
            ),
            (
                "LEASEHOLD_SSE_KEEPALIVE_MS",
                self.sse_keepalive_ms,
                15_000,
                "",
            ),
            (
                "LEASEHOLD_TLS_RELOAD_INTERVAL_MS",
                self.tls_reload_interval_ms,
                3_600_000,
                "",
            ),
        ];
        for (name, value, max, note) in at_most {
            if value > max {
                return Err(ConfigError::new(
                    name,
                    format!("must be at most {max}{note}"),
                ));
            }
        }
        self.validate_tls()?;
        self.validate_redis()
    }

    /// HTTPS: certificate and key both or neither; a client CA only with them.
    fn validate_tls(&self) -> Result<(), ConfigError> {
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

    /// The HTTPS files, when HTTPS is on.
    pub fn tls_files(&self) -> Option<crate::http::tls::TlsFiles> {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some(crate::http::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca_file.clone(),
            }),
            _ => None,
        }
    }

    /// The Redis topology settings: exactly one topology, TLS files only with
    /// `rediss://`, replica acks only with Redis. URLs are never quoted (they
    /// may carry a password).
    fn validate_redis(&self) -> Result<(), ConfigError> {
        const URL: &str = "LEASEHOLD_REDIS_URL";
        const NODES: &str = "LEASEHOLD_REDIS_CLUSTER_NODES";
        const SENTINELS: &str = "LEASEHOLD_REDIS_SENTINELS";
        const MASTER: &str = "LEASEHOLD_REDIS_SENTINEL_MASTER";
        let nodes = non_empty(&self.redis_cluster_nodes);
        let sentinels = non_empty(&self.redis_sentinels);
        let set: Vec<&str> = [
            (URL, self.redis_url.is_some()),
            (NODES, !nodes.is_empty()),
            (SENTINELS, !sentinels.is_empty()),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if set.len() > 1 {
            return Err(ConfigError::new(
                "LEASEHOLD_REDIS_URL / LEASEHOLD_REDIS_CLUSTER_NODES / LEASEHOLD_REDIS_SENTINELS",
                format!(
                    "name exactly one Redis topology, but {} are all set",
                    set.join(" and ")
                ),
            ));
        }
        let master = self
            .redis_sentinel_master
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty());
        match (sentinels.is_empty(), master) {
            (false, None) => {
                return Err(ConfigError::new(
                    MASTER,
                    "is required with LEASEHOLD_REDIS_SENTINELS",
                ))
            }
            (true, Some(_)) => {
                return Err(ConfigError::new(
                    MASTER,
                    "is only valid with LEASEHOLD_REDIS_SENTINELS",
                ))
            }
            (false, Some(m)) if m.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                return Err(ConfigError::new(MASTER, "must not contain whitespace"))
            }
            _ => {}
        }
        let (setting, urls): (&'static str, Vec<&str>) =
            match (&self.redis_url, nodes.is_empty(), sentinels.is_empty()) {
                (Some(url), _, _) => (URL, vec![url.as_str()]),
                (None, false, _) => (NODES, nodes),
                (None, true, false) => (SENTINELS, sentinels),
                (None, true, true) => (URL, Vec::new()),
            };
        let mut schemes = urls.iter().map(|u| url_scheme(u));
        let tls = match schemes.next() {
            None => None,
            Some(first) => {
                if schemes.any(|s| s != first) {
                    return Err(ConfigError::new(
                        setting,
                        "mixes URL schemes; use redis:// or rediss:// for all",
                    ));
                }
                if setting != URL && !matches!(first, "redis" | "rediss") {
                    return Err(ConfigError::new(
                        setting,
                        "must be comma-separated redis:// or rediss:// URLs",
                    ));
                }
                Some(first == "rediss")
            }
        };
        let files = [
            ("LEASEHOLD_REDIS_CA_FILE", self.redis_ca_file.is_some()),
            (
                "LEASEHOLD_REDIS_CLIENT_CERT",
                self.redis_client_cert.is_some(),
            ),
            (
                "LEASEHOLD_REDIS_CLIENT_KEY",
                self.redis_client_key.is_some(),
            ),
        ];
        for (name, on) in files {
            if on && tls != Some(true) {
                return Err(ConfigError::new(name, "needs rediss:// URLs (TLS)"));
            }
        }
        match (
            self.redis_client_cert.is_some(),
            self.redis_client_key.is_some(),
        ) {
            (true, false) => {
                return Err(ConfigError::new(
                    "LEASEHOLD_REDIS_CLIENT_KEY",
                    "is required with LEASEHOLD_REDIS_CLIENT_CERT",
                ))
            }
            (false, true) => {
                return Err(ConfigError::new(
                    "LEASEHOLD_REDIS_CLIENT_CERT",
                    "is required with LEASEHOLD_REDIS_CLIENT_KEY",
                ))
            }
            _ => {}
        }
        if self.redis_min_replicas > 0 {
            if tls.is_none() {
                return Err(ConfigError::new(
                    "LEASEHOLD_REDIS_MIN_REPLICAS",
                    "needs a Redis topology (the embedded store has no replicas)",
                ));
            }
            if self.redis_min_replicas > 64 {
                return Err(ConfigError::new(
                    "LEASEHOLD_REDIS_MIN_REPLICAS",
                    "must be at most 64",
                ));
            }
            if self.redis_replica_timeout_ms == 0 || self.redis_replica_timeout_ms > 60_000 {
                return Err(ConfigError::new(
                    "LEASEHOLD_REDIS_REPLICA_TIMEOUT_MS",
                    "must be 1-60000 (WAIT with 0 would block forever)",
                ));
            }
        }
        Ok(())
    }

    /// The store command timeout.
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.command_timeout_ms)
    }
}

/// The items of a comma-separated list setting, trimmed, empty ones dropped.
pub fn non_empty(items: &[String]) -> Vec<&str> {
    items
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The scheme of a URL, lower-cased (`""` when there is none).
fn url_scheme(url: &str) -> &'static str {
    let scheme = url.trim().split_once("://").map_or("", |(s, _)| s);
    ["redis", "rediss", "unix", "redis+unix"]
        .into_iter()
        .find(|known| known.eq_ignore_ascii_case(scheme))
        .unwrap_or("")
}

pub use crate::domain::ConfigError;

/// A clap error about a value that came from a `LEASEHOLD_*` variable rather
/// than the command line, told in the variable's name (clap names the flag,
/// which the operator never typed). `None`: not such an error.
pub fn env_value_error(err: &clap::Error, command: &clap::Command) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        err.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    // "--max-ttl-ms <MS>"
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let flag = format!("--{long}");
    if std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}="))) {
        return None;
    }
    fn env_of(command: &clap::Command, long: &str) -> Option<String> {
        command
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .and_then(|a| a.get_env())
            .and_then(|v| v.to_str())
            .map(str::to_owned)
            .or_else(|| command.get_subcommands().find_map(|c| env_of(c, long)))
    }
    let var = env_of(command, long)?;
    let value = std::env::var(&var).ok()?;
    // clap's first line: "error: invalid value 'abc' for '--x <X>': <why>".
    let rendered = err.to_string();
    let first = rendered.lines().next().unwrap_or("");
    let why = first
        .split_once(&format!("'{arg}': "))
        .map_or("not a valid value", |(_, why)| why);
    Some(format!(
        "error: {var}={value:?} is not a valid value: {why} (the environment variable behind {flag})"
    ))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
