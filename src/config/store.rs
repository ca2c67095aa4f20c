//! The store's settings group: the Redis topology (standalone, Cluster or
//! Sentinel; none: the embedded store), credentials, TLS to Redis
//! ([`RedisTlsArgs`]), replica acknowledgements, namespace, timeout and
//! pool, with their checks. URLs are never quoted in errors.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::check;
use crate::domain::{ConfigError, HistoryBound};

/// Where leases are kept and how the store is reached.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Standalone Redis URL (`redis://` or `rediss://`); unset: the embedded store.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_URL",
        hide_env_values = true,
        display_order = 30
    )]
    pub redis_url: Option<String>,
    /// Redis Cluster: comma-separated seed node URLs (`redis://` or `rediss://`).
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_CLUSTER_NODES",
        value_delimiter = ',',
        hide_env_values = true,
        display_order = 40
    )]
    pub redis_cluster_nodes: Vec<String>,
    /// Redis Sentinel: comma-separated sentinel URLs; needs `LEASEHOLD_REDIS_SENTINEL_MASTER`.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_SENTINELS",
        value_delimiter = ',',
        hide_env_values = true,
        display_order = 50
    )]
    pub redis_sentinels: Vec<String>,
    /// Redis Sentinel: the monitored master's name.
    #[arg(long, env = "LEASEHOLD_REDIS_SENTINEL_MASTER", display_order = 60)]
    pub redis_sentinel_master: Option<String>,
    /// TLS to Redis (`rediss://` only).
    #[command(flatten)]
    pub tls: RedisTlsArgs,
    /// Redis ACL user name (data nodes; overrides the URL's).
    #[arg(long, env = "LEASEHOLD_REDIS_USERNAME", display_order = 100)]
    pub redis_username: Option<String>,
    /// File holding the Redis password (first line; data nodes; overrides the URL's).
    #[arg(long, env = "LEASEHOLD_REDIS_PASSWORD_FILE", display_order = 110)]
    pub redis_password_file: Option<PathBuf>,
    /// After each mutating script, `WAIT` for this many replicas (0: off) and say in the answer how many acknowledged.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_MIN_REPLICAS",
        default_value_t = 0,
        display_order = 120
    )]
    pub redis_min_replicas: u32,
    /// How long `WAIT` may block for replica acknowledgements.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_REPLICA_TIMEOUT_MS",
        default_value_t = 100,
        display_order = 130
    )]
    pub redis_replica_timeout_ms: u64,
    /// Key namespace; must not contain `{`, `}`, `:` or whitespace.
    #[arg(
        long,
        env = "LEASEHOLD_NAMESPACE",
        default_value = "leasehold",
        display_order = 140
    )]
    pub namespace: String,
    /// Bound on every store call, pool wait included.
    #[arg(
        long,
        env = "LEASEHOLD_COMMAND_TIMEOUT_MS",
        default_value_t = 200,
        display_order = 150
    )]
    pub command_timeout_ms: u64,
    /// Pooled Redis connections.
    #[arg(
        long,
        env = "LEASEHOLD_POOL_SIZE",
        default_value_t = 32,
        display_order = 240
    )]
    pub pool_size: u32,
    /// Live leases the embedded store holds at most.
    #[arg(
        long,
        env = "LEASEHOLD_MEMORY_MAX_LEASES",
        default_value_t = 1_000_000,
        display_order = 310
    )]
    pub memory_max_leases: usize,
    /// Entries a resource's history keeps at most (the newest; also the largest `limit` a history read takes).
    #[arg(
        long,
        env = "LEASEHOLD_HISTORY_ENTRIES",
        default_value_t = 100,
        display_order = 312
    )]
    pub history_entries: u32,
    /// How long a history entry is kept: older ones are not shown, and a resource's history goes this long after its last entry (after a plain lease's release, at least half as long).
    #[arg(
        long,
        env = "LEASEHOLD_HISTORY_MAX_AGE_MS",
        default_value_t = 3_600_000,
        display_order = 314
    )]
    pub history_max_age_ms: u64,
}

/// TLS to Redis: whom to trust, and the client certificate for mutual TLS.
#[derive(Debug, Clone, Args)]
pub struct RedisTlsArgs {
    /// PEM file of the CA(s) that sign the Redis servers' certificates (`rediss://` only; default: the system roots).
    #[arg(long, env = "LEASEHOLD_REDIS_CA_FILE", display_order = 70)]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with `LEASEHOLD_REDIS_CLIENT_KEY`).
    #[arg(long, env = "LEASEHOLD_REDIS_CLIENT_CERT", display_order = 80)]
    pub redis_client_cert: Option<PathBuf>,
    /// PEM private key of `LEASEHOLD_REDIS_CLIENT_CERT`.
    #[arg(long, env = "LEASEHOLD_REDIS_CLIENT_KEY", display_order = 90)]
    pub redis_client_key: Option<PathBuf>,
}

impl StoreArgs {
    /// What a resource's history keeps (after [`StoreArgs::validate`]).
    pub fn history_bound(&self) -> HistoryBound {
        HistoryBound {
            entries: self.history_entries,
            max_age_ms: self.history_max_age_ms,
        }
    }

    /// Checks the group, naming the setting that is wrong.
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
        check::positive(&[
            ("LEASEHOLD_COMMAND_TIMEOUT_MS", self.command_timeout_ms),
            ("LEASEHOLD_POOL_SIZE", u64::from(self.pool_size)),
            ("LEASEHOLD_MEMORY_MAX_LEASES", self.memory_max_leases as u64),
            ("LEASEHOLD_HISTORY_ENTRIES", u64::from(self.history_entries)),
            ("LEASEHOLD_HISTORY_MAX_AGE_MS", self.history_max_age_ms),
        ])?;
        check::at_most(&[
            (
                "LEASEHOLD_HISTORY_ENTRIES",
                u64::from(self.history_entries),
                u64::from(HistoryBound::MAX_ENTRIES),
                "",
            ),
            (
                "LEASEHOLD_HISTORY_MAX_AGE_MS",
                self.history_max_age_ms,
                HistoryBound::MAX_AGE_MS,
                "",
            ),
            (
                "LEASEHOLD_COMMAND_TIMEOUT_MS",
                self.command_timeout_ms,
                60_000,
                "",
            ),
            ("LEASEHOLD_POOL_SIZE", u64::from(self.pool_size), 1024, ""),
        ])?;
        self.validate_redis()
    }

    /// The Redis topology settings: exactly one topology, TLS files only with
    /// `rediss://`, replica acks only with Redis. URLs are never quoted (they
    /// may carry a password).
    fn validate_redis(&self) -> Result<(), ConfigError> {
        const URL: &str = "LEASEHOLD_REDIS_URL";
        const NODES: &str = "LEASEHOLD_REDIS_CLUSTER_NODES";
        const SENTINELS: &str = "LEASEHOLD_REDIS_SENTINELS";
        const MASTER: &str = "LEASEHOLD_REDIS_SENTINEL_MASTER";
        let nodes = self.cluster_nodes();
        let sentinels = self.sentinels();
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
        self.tls.validate(tls == Some(true))?;
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

    /// The Cluster seed URLs, trimmed, empty items dropped.
    pub fn cluster_nodes(&self) -> Vec<&str> {
        non_empty(&self.redis_cluster_nodes)
    }

    /// The Sentinel URLs, trimmed, empty items dropped.
    pub fn sentinels(&self) -> Vec<&str> {
        non_empty(&self.redis_sentinels)
    }

    /// The store command timeout.
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.command_timeout_ms)
    }
}

impl RedisTlsArgs {
    /// The files only with `rediss://` URLs (`tls`); certificate and key
    /// both or neither.
    fn validate(&self, tls: bool) -> Result<(), ConfigError> {
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
            if on && !tls {
                return Err(ConfigError::new(name, "needs rediss:// URLs (TLS)"));
            }
        }
        match (
            self.redis_client_cert.is_some(),
            self.redis_client_key.is_some(),
        ) {
            (true, false) => Err(ConfigError::new(
                "LEASEHOLD_REDIS_CLIENT_KEY",
                "is required with LEASEHOLD_REDIS_CLIENT_CERT",
            )),
            (false, true) => Err(ConfigError::new(
                "LEASEHOLD_REDIS_CLIENT_CERT",
                "is required with LEASEHOLD_REDIS_CLIENT_KEY",
            )),
            _ => Ok(()),
        }
    }
}

/// The items of a comma-separated list setting, trimmed, empty ones dropped.
fn non_empty(items: &[String]) -> Vec<&str> {
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
