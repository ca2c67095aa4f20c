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
    Healthcheck {
        /// The URL to probe (plain http).
        #[arg(long, default_value = "http://127.0.0.1:8080/readyz")]
        url: String,
    },
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
    /// Redis ACL user name.
    #[arg(long, env = "LEASEHOLD_REDIS_USERNAME")]
    pub redis_username: Option<String>,
    /// File holding the Redis password (first line).
    #[arg(long, env = "LEASEHOLD_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,
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
    /// Pooled Redis connections.
    #[arg(long, env = "LEASEHOLD_POOL_SIZE", default_value_t = 32)]
    pub pool_size: u32,
    /// Concurrent store calls; more are answered `overloaded`.
    #[arg(long, env = "LEASEHOLD_MAX_IN_FLIGHT", default_value_t = 1024)]
    pub max_in_flight: usize,
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
    /// Log format.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
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
            ("LEASEHOLD_BODY_LIMIT_BYTES", self.body_limit_bytes as u64),
            ("LEASEHOLD_MEMORY_MAX_LEASES", self.memory_max_leases as u64),
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
        if self.max_wait_ms > 3_600_000 {
            return Err(ConfigError::new(
                "LEASEHOLD_MAX_WAIT_MS",
                "must be at most 3600000",
            ));
        }
        if self.pool_size > 1024 {
            return Err(ConfigError::new(
                "LEASEHOLD_POOL_SIZE",
                "must be at most 1024",
            ));
        }
        Ok(())
    }

    /// The store command timeout.
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.command_timeout_ms)
    }
}

/// A setting that is wrong; the message names it and never quotes secrets.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {setting} {reason}")]
pub struct ConfigError {
    /// The variable.
    pub setting: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    /// A new error.
    pub fn new(setting: &'static str, reason: impl Into<String>) -> Self {
        Self {
            setting,
            reason: reason.into(),
        }
    }
}
