//! Redis settings as the service was configured: the [`Topology`], TLS
//! files, replica acknowledgements, and why a setup can fail.

use std::path::PathBuf;
use std::time::Duration;

/// Which Redis deployment to talk to. URLs may carry credentials and are
/// never logged.
#[derive(Clone)]
pub enum Topology {
    /// One server (`redis://`, `rediss://` or a unix socket URL).
    Standalone {
        /// Its URL.
        url: String,
    },
    /// Redis Cluster, discovered from any of these seed URLs.
    Cluster {
        /// Seed node URLs.
        nodes: Vec<String>,
    },
    /// Redis Sentinel: the master `master` as these sentinels see it.
    Sentinel {
        /// Sentinel URLs (their userinfo authenticates to the sentinels).
        sentinels: Vec<String>,
        /// The monitored master's name.
        master: String,
    },
}

impl Topology {
    /// `standalone`, `cluster` or `sentinel`.
    pub fn name(&self) -> &'static str {
        match self {
            Topology::Standalone { .. } => "standalone",
            Topology::Cluster { .. } => "cluster",
            Topology::Sentinel { .. } => "sentinel",
        }
    }
}

/// TLS files (PEM) for `rediss://`.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    /// CA(s) to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (mutual TLS).
    pub client_cert: Option<PathBuf>,
    /// Its private key.
    pub client_key: Option<PathBuf>,
}

/// `WAIT` after every mutating script.
#[derive(Clone, Copy, Debug)]
pub struct ReplicaAcks {
    /// Replicas that must acknowledge.
    pub min_replicas: u32,
    /// How long `WAIT` may block.
    pub timeout: Duration,
}

/// Settings for the Redis store.
#[derive(Clone)]
pub struct RedisSettings {
    /// Where Redis is.
    pub topology: Topology,
    /// ACL user name for the data nodes, overriding the URL's.
    pub username: Option<String>,
    /// ACL password for the data nodes, overriding the URL's.
    pub password: Option<String>,
    /// TLS trust and client certificate.
    pub tls: TlsFiles,
    /// Replica acknowledgements, when wanted.
    pub replica_acks: Option<ReplicaAcks>,
    /// Key namespace (validated: no `{` or `}`).
    pub namespace: String,
    /// Bound on every store call, pool wait included.
    pub command_timeout: Duration,
    /// Maximum pooled connections (per node for Cluster).
    pub pool_size: u32,
    /// What each resource's history keeps.
    pub history: crate::domain::HistoryBound,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("topology", &self.topology.name())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("replica_acks", &self.replica_acks)
            .field("namespace", &self.namespace)
            .field("command_timeout", &self.command_timeout)
            .field("pool_size", &self.pool_size)
            .field("history", &self.history)
            .finish()
    }
}

/// Why the Redis store could not be built. Never quotes a URL (it may hold
/// a password) or a file's content.
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    /// A URL does not parse or is not a TCP `redis://`/`rediss://` URL.
    #[error("is not a valid redis:// or rediss:// URL")]
    BadUrl {
        /// The setting holding it.
        setting: &'static str,
    },
    /// A file cannot be read.
    #[error("cannot be read: {kind}")]
    File {
        /// The setting naming it.
        setting: &'static str,
        /// Why.
        kind: std::io::ErrorKind,
    },
    /// A PEM file does not hold what it should.
    #[error("does not hold a usable PEM certificate/key")]
    Pem {
        /// The settings involved.
        setting: &'static str,
    },
}

impl RedisSetupError {
    /// The setting the error is about.
    pub fn setting(&self) -> &'static str {
        match self {
            RedisSetupError::BadUrl { setting }
            | RedisSetupError::File { setting, .. }
            | RedisSetupError::Pem { setting } => setting,
        }
    }
}
