//! [`RedisStore`]: the pools of the configured topology, how a call is
//! routed to its master, readiness, and the background wake-up task.

use super::{exec, node, pool};
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, RedisError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::call::*;
use super::cluster::ClusterBackend;
use super::exec::{send, RunError};
use super::node::{NodeTemplate, Tls};
use super::pool::NodePool;
use super::reply::bad_reply;
use super::sentinel::SentinelBackend;
use super::settings::*;
use super::wakeups::*;
use crate::notify::WaitRegistry;
use crate::store::{Readiness, StoreError};

pub(super) enum Backend {
    Standalone { pool: NodePool, pubsub: Box<Client> },
    Cluster(Arc<ClusterBackend>),
    Sentinel(Arc<SentinelBackend>),
}

/// Redis through pools of multiplexed connections.
pub struct RedisStore {
    pub(super) backend: Backend,
    /// This instance's id in fair queues (random per process).
    pub(super) instance: String,
    pub(super) queue_members: std::sync::atomic::AtomicU64,
    pub(super) namespace: String,
    pub(super) wake_channel: String,
    pub(super) command_timeout: Duration,
    pub(super) acks: Option<Acks>,
    pub(super) waiters: Arc<WaitRegistry>,
    /// What each resource's history keeps.
    pub(in crate::store) history: crate::domain::HistoryBound,
    /// The scripts' `history length` and `history ttl ms` arguments, as text once.
    pub(super) history_args: [String; 2],
    /// The scripts' `sequence key ttl ms` argument ([`super::keys::seq_key_ttl_ms`]).
    pub(super) seq_ttl_ms: u64,
    /// [`RedisStore::seq_ttl_ms`] as text.
    pub(super) seq_ttl_text: String,
    /// `leasehold_store_command_duration_seconds` by script.
    pub(super) durations: crate::telemetry::Handles<&'static str, metrics::Histogram>,
    /// The purposes marked watched at this instance's last read of the
    /// registry (docs/watching.md, "Watching a purpose").
    pub(super) watched_purposes: super::watched::WatchedPurposes,
    /// The plain leases' records this instance's session renews last
    /// wrote (`lua/session_renew.lua` compares them whole).
    pub(super) remembered: super::remembered::Remembered,
}

impl RedisStore {
    /// Builds the store; connections are opened lazily, so a Redis that is
    /// down at start makes `/readyz` fail rather than the process.
    pub fn new(
        settings: &RedisSettings,
        waiters: Arc<WaitRegistry>,
    ) -> Result<Self, RedisSetupError> {
        let timeout = settings.command_timeout;
        let pool_size = settings.pool_size.max(1);
        let certs = |tls: bool| -> Result<Tls, RedisSetupError> {
            if !tls {
                return Ok(Tls::Plain);
            }
            let files = &settings.tls;
            Ok(Tls::Verified(node::load_certificates(
                files.ca_file.as_deref(),
                files.client_cert.as_deref(),
                files.client_key.as_deref(),
            )?))
        };
        let credentials = |mut redis: redis::RedisConnectionInfo| {
            if let Some(user) = &settings.username {
                redis = redis.set_username(user);
            }
            if let Some(password) = &settings.password {
                redis = redis.set_password(password);
            }
            redis
        };
        let backend = match &settings.topology {
            Topology::Standalone { url } => {
                const SETTING: &str = "LEASEHOLD_REDIS_URL";
                let info = redis::IntoConnectionInfo::into_connection_info(url.trim())
                    .map_err(|_| RedisSetupError::BadUrl { setting: SETTING })?;
                let (client, pubsub) = match info.addr() {
                    redis::ConnectionAddr::Tcp(..) | redis::ConnectionAddr::TcpTls { .. } => {
                        let parsed = node::parse_url(url, SETTING)?;
                        let template =
                            NodeTemplate::new(credentials(parsed.redis), certs(parsed.tls)?);
                        let bad = |_: RedisError| RedisSetupError::BadUrl { setting: SETTING };
                        (
                            template
                                .resp3()
                                .client(&parsed.host, parsed.port)
                                .map_err(bad)?,
                            template.client(&parsed.host, parsed.port).map_err(bad)?,
                        )
                    }
                    // A unix socket: no TLS, no topology.
                    _ => {
                        let redis = credentials(info.redis_settings().clone());
                        let info = info.set_redis_settings(redis.clone());
                        let resp3 = info
                            .clone()
                            .set_redis_settings(redis.set_protocol(redis::ProtocolVersion::RESP3));
                        let bad = |_: RedisError| RedisSetupError::BadUrl { setting: SETTING };
                        (
                            Client::open(resp3).map_err(bad)?,
                            Client::open(info).map_err(bad)?,
                        )
                    }
                };
                Backend::Standalone {
                    pool: NodePool::new(client, pool_size, pool_size.clamp(1, 4), timeout, false),
                    pubsub: Box::new(pubsub),
                }
            }
            Topology::Cluster { nodes } => {
                const SETTING: &str = "LEASEHOLD_REDIS_CLUSTER_NODES";
                let parsed = nodes
                    .iter()
                    .map(|u| node::parse_url(u, SETTING))
                    .collect::<Result<Vec<_>, _>>()?;
                let first = parsed
                    .first()
                    .ok_or(RedisSetupError::BadUrl { setting: SETTING })?;
                let template =
                    NodeTemplate::new(credentials(first.redis.clone()), certs(first.tls)?);
                let seeds = parsed.iter().map(|p| host_port(&p.host, p.port)).collect();
                Backend::Cluster(Arc::new(ClusterBackend::new(
                    template, seeds, pool_size, timeout,
                )))
            }
            Topology::Sentinel { sentinels, master } => {
                const SETTING: &str = "LEASEHOLD_REDIS_SENTINELS";
                let parsed = sentinels
                    .iter()
                    .map(|u| node::parse_url(u, SETTING))
                    .collect::<Result<Vec<_>, _>>()?;
                let first = parsed
                    .first()
                    .ok_or(RedisSetupError::BadUrl { setting: SETTING })?;
                let tls = certs(first.tls)?;
                let clients = parsed
                    .iter()
                    .map(|p| {
                        NodeTemplate::new(p.redis.clone(), tls.clone()).client(&p.host, p.port)
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| RedisSetupError::BadUrl { setting: SETTING })?;
                // Data nodes: the configured user/password (sentinel URLs'
                // userinfo authenticates to the sentinels only).
                let template =
                    NodeTemplate::new(credentials(redis::RedisConnectionInfo::default()), tls);
                Backend::Sentinel(Arc::new(SentinelBackend::new(
                    clients,
                    master.trim().to_owned(),
                    template,
                    pool_size,
                    timeout,
                )))
            }
        };
        let mut id = [0u8; 8];
        let _ = getrandom::fill(&mut id);
        Ok(Self {
            backend,
            instance: id.iter().map(|b| format!("{b:02x}")).collect(),
            queue_members: std::sync::atomic::AtomicU64::new(0),
            wake_channel: format!("{}:wake:v2", settings.namespace),
            namespace: settings.namespace.clone(),
            command_timeout: timeout,
            acks: settings
                .replica_acks
                .filter(|a| a.min_replicas > 0)
                .map(|a| Acks {
                    required: a.min_replicas,
                    timeout_ms: u64::try_from(a.timeout.as_millis())
                        .unwrap_or(u64::MAX)
                        .max(1),
                    budget: a.timeout + timeout,
                }),
            waiters,
            history: settings.history,
            history_args: [
                settings.history.entries.to_string(),
                settings.history.max_age_ms.to_string(),
            ],
            seq_ttl_ms: super::keys::seq_key_ttl_ms(settings.history.max_age_ms),
            seq_ttl_text: super::keys::seq_key_ttl_ms(settings.history.max_age_ms).to_string(),
            durations: crate::telemetry::Handles::new(),
            watched_purposes: super::watched::WatchedPurposes::default(),
            remembered: super::remembered::Remembered::default(),
        })
    }

    /// Pool occupancy: (connections open, idle), over every node.
    pub fn pool_state(&self) -> (u32, u32) {
        match &self.backend {
            Backend::Standalone { pool, .. } => pool.state(),
            Backend::Cluster(c) => c.pool_state(),
            Backend::Sentinel(s) => s.pool_state(),
        }
    }

    /// Runs a script call on the topology's master for it.
    pub(super) async fn run(&self, call: Call<'_>) -> Result<Executed, StoreError> {
        // One clock read for both (tokio's clock is the system's monotonic
        // one unless a test pauses it).
        let started = Instant::now();
        let deadline = started + self.command_timeout;
        let result = match &self.backend {
            Backend::Standalone { pool, .. } => {
                async {
                    let mut conn = pool.checkout_as(call.acks.is_some(), deadline).await?;
                    call.run_on(&mut conn, false, deadline)
                        .await
                        .map_err(|err| match err {
                            RunError::Failed(err) => err,
                            RunError::Redirect(_) => StoreError::Unavailable(
                                "a standalone Redis answered with a cluster redirect",
                            ),
                        })
                }
                .await
            }
            Backend::Cluster(c) => c.execute(&call, deadline).await,
            Backend::Sentinel(s) => s.execute(&call, deadline).await,
        };
        let script = call.script.name;
        self.durations
            .get(
                script,
                || metrics::histogram!(crate::telemetry::STORE_DURATION, "script" => script),
            )
            .record(started.elapsed().as_secs_f64());
        result
    }

    pub(in crate::store) async fn readiness(&self) -> Readiness {
        let deadline = Instant::now() + self.command_timeout;
        match &self.backend {
            Backend::Standalone { pool, .. } => {
                let result = async {
                    let mut conn = pool.checkout(deadline).await?;
                    let mut info = redis::cmd("INFO");
                    info.arg("replication");
                    let reply = send(&mut conn, &info, deadline)
                        .await
                        .map_err(|e| exec::classify(&conn, e))?;
                    let text: String = redis::from_redis_value(reply).map_err(|_| bad_reply())?;
                    Ok::<bool, StoreError>(pool::is_master(&text))
                }
                .await;
                match result {
                    Ok(true) => Readiness {
                        topology: "standalone",
                        writable: true,
                        detail: None,
                    },
                    Ok(false) => Readiness {
                        topology: "standalone",
                        writable: false,
                        detail: Some("the configured Redis is a replica".into()),
                    },
                    Err(err) => Readiness {
                        topology: "standalone",
                        writable: false,
                        detail: Some(err.to_string()),
                    },
                }
            }
            Backend::Cluster(c) => c.readiness(deadline).await,
            Backend::Sentinel(s) => s.readiness(deadline).await,
        }
    }

    pub(in crate::store) fn start_background(self: &Arc<Self>, shutdown: CancellationToken) {
        let source = match &self.backend {
            Backend::Standalone { pubsub, .. } => WakeSource::Fixed(pubsub.clone()),
            Backend::Cluster(c) => {
                tokio::spawn(Arc::clone(c).refresh_task(shutdown.clone()));
                WakeSource::Cluster(Arc::clone(c))
            }
            Backend::Sentinel(s) => {
                s.start(&shutdown);
                WakeSource::Sentinel(Arc::clone(s))
            }
        };
        tokio::spawn(Arc::clone(self).poll_purposes(shutdown.clone()));
        let channel = self.wake_channel.clone();
        let waiters = Arc::clone(&self.waiters);
        tokio::spawn(subscribe_wakeups(
            source,
            channel,
            self.instance.clone(),
            waiters,
            self.command_timeout,
            shutdown,
        ));
    }
}

pub(super) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
