//! The Redis store: one Lua script per verb, run with EVALSHA on a pooled
//! connection to the right master, every call bounded by the command timeout
//! and classified as answered, `Unavailable` (definitely not applied) or
//! `Indeterminate` (written, no certain reply).
//!
//! Three topologies share everything but "which master": standalone (one
//! pool), Redis Cluster ([`cluster`]: the master of the resource's slot) and
//! Redis Sentinel ([`sentinel`]: the master the sentinels name, abandoned the
//! moment a failover of it begins). TLS (`rediss://`, own CA, client
//! certificate) and ACL credentials apply to every data node. With replica
//! acknowledgements configured, a mutating script is followed by `WAIT` on
//! the same connection and the answer says how many replicas have the write.

mod cluster;
mod exec;
mod list;
mod node;
mod pool;
mod reply;
mod scripts;
mod sentinel;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, RedisError, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::cluster::ClusterBackend;
use self::exec::{send, RunError};
use self::node::{NodeTemplate, Tls};
use self::pool::{Conn, NodePool};
use self::reply::{bad_reply, ints, label};
use self::scripts::{Script, SCRIPTS};
use self::sentinel::{Master, SentinelBackend};
use super::{
    AcquireSpec, Contention, Probe, QueueOp, Readiness, Replicated, Replication, StoreAcquire,
    StoreError, StoreInspect, StoreLease, StoreRelease, StoreRenew,
};
use crate::domain::Change;
use crate::domain::{Attempt, HeldBy, HolderLabel, Mode, ResourceId, StoreTime, Ttl};
use crate::notify::WaitRegistry;

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

enum Backend {
    Standalone { pool: NodePool, pubsub: Box<Client> },
    Cluster(Arc<ClusterBackend>),
    Sentinel(Arc<SentinelBackend>),
}

/// Redis through pools of multiplexed connections.
pub struct RedisStore {
    backend: Backend,
    /// This instance's id in fair queues (random per process).
    instance: String,
    queue_members: std::sync::atomic::AtomicU64,
    namespace: String,
    wake_channel: String,
    command_timeout: Duration,
    acks: Option<Acks>,
    waiters: Arc<WaitRegistry>,
    /// `leasehold_store_command_duration_seconds` by script.
    durations: crate::telemetry::Handles<&'static str, metrics::Histogram>,
}

/// Replica acknowledgement settings as a call uses them.
#[derive(Clone, Copy)]
struct Acks {
    required: u32,
    timeout_ms: u64,
    /// Client-side bound on the `WAIT` reply.
    budget: Duration,
}

/// The key of a resource's lease: `<ns>:lease:v2:{<purpose>:<digest>}`.
pub fn lease_key(namespace: &str, resource: &ResourceId) -> String {
    key(namespace, "lease", resource)
}

/// The key of a resource's fencing counter: `<ns>:seq:v2:{<purpose>:<digest>}`.
pub fn seq_key(namespace: &str, resource: &ResourceId) -> String {
    key(namespace, "seq", resource)
}

/// `<ns>:<kind>:v2:{<purpose>:<digest>}`, built in one allocation (keys are
/// built on every request; `format!` grew each one several times).
fn key(namespace: &str, kind: &str, resource: &ResourceId) -> String {
    let (purpose, digest) = (resource.purpose.as_str(), resource.digest.as_str());
    let mut key =
        String::with_capacity(namespace.len() + kind.len() + purpose.len() + digest.len() + 8);
    for part in [namespace, ":", kind, ":v2:{", purpose, ":", digest, "}"] {
        key.push_str(part);
    }
    key
}

/// How long a fencing counter outlives its last acquisition. Losing it is
/// safe (the server clock floors the next token); keeping it bounds memory.
const SEQ_KEY_TTL_MS: u64 = 7 * 24 * 3600 * 1000;
/// [`SEQ_KEY_TTL_MS`] as a script argument.
const SEQ_KEY_TTL_TEXT: &str = "604800000";
/// How far ahead an instance that follows a resource marks it watched; its
/// watch group re-reads (and so re-marks) well within this.
const WATCH_MARK_MS: &str = "30000";
/// How far ahead a heartbeat keeps this instance's queue entries alive; a
/// SIGKILLed instance's waiters stop holding up a queue within this.
const QUEUE_HORIZON_MS: &str = "2000";

/// One script call: what to run, for which resource, and whether a write
/// must be followed by `WAIT`.
struct Call<'a> {
    script: &'a Script,
    /// The resource's hash tag (Cluster routes by it).
    tag: &'a str,
    keys: &'a [&'a str],
    args: &'a [&'a str],
    acks: Option<Acks>,
}

/// A script's answer (its reply with the nonce tag replaced by the plain
/// status) and, after a write with acks configured, its replication.
struct Executed {
    value: Vec<Value>,
    replication: Option<Replication>,
}

impl Call<'_> {
    /// Runs the script on `conn` with a fresh nonce; when it wrote (status
    /// 1 in every script) and acks are configured, `WAIT`s on the same
    /// connection (checked out exclusively for that: see
    /// [`NodePool::checkout_as`]). A `WAIT` without an answer leaves the
    /// script's answer standing and counts as no acknowledgement.
    async fn run_on(
        &self,
        conn: &mut Conn,
        asking: bool,
        deadline: Instant,
    ) -> Result<Executed, RunError> {
        let nonce = reply::next_nonce();
        let value = exec::run_script(
            conn,
            self.script,
            self.keys,
            self.args,
            &nonce,
            asking,
            deadline,
        )
        .await?;
        let replication = match self.acks {
            Some(acks) if status_of(&value) == Some(1) => {
                let acknowledged = exec::wait_for_replicas(
                    conn,
                    acks.required,
                    acks.timeout_ms,
                    Instant::now() + acks.budget,
                )
                .await;
                Some(Replication {
                    acknowledged: acknowledged.unwrap_or(0),
                    required: acks.required,
                })
            }
            _ => None,
        };
        Ok(Executed { value, replication })
    }
}

fn status_of(answer: &[Value]) -> Option<i64> {
    match answer.first() {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    }
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
            durations: crate::telemetry::Handles::new(),
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
    async fn run(&self, call: Call<'_>) -> Result<Executed, StoreError> {
        let started = std::time::Instant::now();
        let deadline = Instant::now() + self.command_timeout;
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

    pub(super) async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        spec: &AcquireSpec<'_>,
    ) -> Result<Replicated<StoreAcquire>, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let ttl = spec.ttl;
        let ttl_text = ttl.ms().to_string();
        let shape = spec.shape;
        // The script's `shape` argument: empty for the common case, so the
        // uncontended plain acquire sends (and Redis parses) no more than it
        // must.
        let shape_text = if shape.is_plain() && shape.lock_delay_ms == 0 && spec.queued_as.is_none()
        {
            String::new()
        } else {
            format!(
                "{}:{}:{}:{}",
                shape.limit,
                shape.mode.code(),
                shape.lock_delay_ms,
                spec.queued_as.unwrap_or("")
            )
        };
        let done = self
            .run(Call {
                script: &SCRIPTS.acquire,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &ttl_text,
                    spec.holder.map_or("", HolderLabel::as_str),
                    &shape_text,
                ],
                acks: self.acks,
            })
            .await?;
        let items = &done.value;
        let [status] = ints::<1>(items)?;
        let value = match status {
            1 => {
                let [_, token, now] = ints::<3>(items)?;
                let now = store_time(now)?;
                StoreAcquire::Acquired(StoreLease {
                    fencing_token: token_of(token)?,
                    remaining_ms: ttl.ms(),
                    ttl_ms: ttl.ms(),
                    acquired_at: now,
                    renewed_at: now,
                    holder: spec.holder.cloned(),
                })
            }
            2 => {
                let [_, remaining, token, acquired, renewed, granted] = ints::<6>(items)?;
                StoreAcquire::Replayed(StoreLease {
                    fencing_token: token_of(token)?,
                    remaining_ms: non_negative(remaining).unwrap_or(0),
                    ttl_ms: non_negative(granted).ok_or_else(bad_reply)?,
                    acquired_at: store_time(acquired)?,
                    renewed_at: store_time(renewed)?,
                    holder: label(items, 6)?,
                })
            }
            3 => StoreAcquire::OwnerOperationConflict {
                remaining_ms: non_negative(ints::<2>(items)?[1]),
            },
            0 => {
                let [_, retry, why] = ints::<3>(items)?;
                StoreAcquire::Contended {
                    remaining_ms: non_negative(retry),
                    why: match why {
                        0 => Contention::Held,
                        1 => Contention::LockDelay,
                        2 => Contention::Queued,
                        3 => Contention::Requeue,
                        _ => return Err(bad_reply()),
                    },
                }
            }
            4 => StoreAcquire::LimitMismatch {
                limit: u32::try_from(ints::<2>(items)?[1]).map_err(|_| bad_reply())?,
            },
            _ => return Err(bad_reply()),
        };
        Ok(Replicated {
            value,
            replication: done.replication,
        })
    }

    pub(super) fn queue_member(&self, mode: Mode) -> String {
        let n = self
            .queue_members
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}:{}:{n}", mode.code(), self.instance)
    }

    pub(super) async fn queue(
        &self,
        resource: &ResourceId,
        op: QueueOp<'_>,
    ) -> Result<(), StoreError> {
        let queue = key(&self.namespace, "queue", resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let (verb, member) = match op {
            QueueOp::Enter(member) => ("enter", member),
            QueueOp::EnterFront(member) => ("front", member),
            QueueOp::Beat => ("beat", ""),
            QueueOp::Leave(member) => ("leave", member),
        };
        let done = self
            .run(Call {
                script: &SCRIPTS.queue,
                tag: &tag,
                keys: &[&queue, &seq],
                args: &[
                    verb,
                    &self.instance,
                    QUEUE_HORIZON_MS,
                    SEQ_KEY_TTL_TEXT,
                    &self.wake_channel,
                    &tag,
                    member,
                ],
                acks: None,
            })
            .await?;
        match ints::<1>(&done.value)? {
            [1] => Ok(()),
            _ => Err(bad_reply()),
        }
    }

    pub(super) async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<Replicated<StoreRenew>, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let ttl_text = ttl.ms().to_string();
        let seq_ttl = SEQ_KEY_TTL_MS.max(ttl.ms()).to_string();
        let done = self
            .run(Call {
                script: &SCRIPTS.renew,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &ttl_text,
                    holder.map_or("", HolderLabel::as_str),
                    &seq_ttl,
                    &self.wake_channel,
                    &tag,
                ],
                acks: self.acks,
            })
            .await?;
        let [status] = ints::<1>(&done.value)?;
        let value = match status {
            1 => {
                let [_, token, acquired, now] = ints::<4>(&done.value)?;
                let _ = holder; // sent; the script answers the label now held
                StoreRenew::Renewed(StoreLease {
                    fencing_token: token_of(token)?,
                    remaining_ms: ttl.ms(),
                    ttl_ms: ttl.ms(),
                    acquired_at: store_time(acquired)?,
                    renewed_at: store_time(now)?,
                    holder: label(&done.value, 4)?,
                })
            }
            0 => StoreRenew::Absent,
            -1 => StoreRenew::NotOwner,
            _ => return Err(bad_reply()),
        };
        Ok(Replicated {
            value,
            replication: done.replication,
        })
    }

    pub(super) async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<Replicated<StoreRelease>, StoreError> {
        let (status, replication) = self.release_as(resource, attempt, "").await?;
        let value = match status {
            1 => StoreRelease::Released,
            0 => StoreRelease::AlreadyAbsent,
            -1 => StoreRelease::NotOwner,
            _ => return Err(bad_reply()),
        };
        Ok(Replicated { value, replication })
    }

    /// The clean-up release of an acquisition whose waiter left: true when
    /// the permit went, false when it was claimed by a replay or renewed
    /// since (or is gone already).
    pub(super) async fn release_abandoned(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<bool, StoreError> {
        match self.release_as(resource, attempt, "a").await?.0 {
            1 => Ok(true),
            0 | -1 | 2 => Ok(false),
            _ => Err(bad_reply()),
        }
    }

    /// `release.lua` in `mode` (see its header): the status and replication.
    async fn release_as(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        mode: &str,
    ) -> Result<(i64, Option<Replication>), StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let done = self
            .run(Call {
                script: &SCRIPTS.release,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &self.wake_channel,
                    &tag,
                    mode,
                ],
                acks: self.acks,
            })
            .await?;
        let [status] = ints::<1>(&done.value)?;
        Ok((status, done.replication))
    }

    pub(super) async fn inspect(
        &self,
        resource: &ResourceId,
        probe: Probe<'_>,
        watching: bool,
    ) -> Result<StoreInspect, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let (token, op) = match probe {
            Probe::Anyone => ("", ""),
            Probe::Owner(token) => (token.expose(), ""),
            Probe::Attempt(a) => (a.owner_token.expose(), a.operation_id.as_str()),
        };
        let watch = if watching { WATCH_MARK_MS } else { "0" };
        let done = self
            .run(Call {
                script: &SCRIPTS.inspect,
                tag: &tag,
                keys: &[&lease, &seq],
                args: &[token, op, watch, SEQ_KEY_TTL_TEXT],
                acks: None,
            })
            .await?;
        let items = done.value;
        let [status, changes, live, limit, _, delay, held_by] = ints_or_mode(&items)?;
        let changes = non_negative(changes).ok_or_else(bad_reply)?;
        let live = usize::try_from(live).map_err(|_| bad_reply())?;
        let version = format!("{changes}.{live}");
        if status == 0 {
            return Ok(StoreInspect::Free {
                version,
                lock_delay_ms: non_negative(delay).filter(|d| *d > 0),
            });
        }
        if status != 1 || live == 0 || items.len() != 7 + 6 * live {
            return Err(bad_reply());
        }
        let mode = match items.get(4) {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(Mode::from_code),
            Some(Value::SimpleString(s)) => Mode::from_code(s),
            _ => None,
        }
        .ok_or_else(bad_reply)?;
        let mut permits = Vec::with_capacity(live);
        for at in (7..items.len()).step_by(6) {
            let [remaining, fence, acquired, renewed, granted] = ints::<5>(&items[at..])?;
            permits.push(StoreLease {
                fencing_token: token_of(fence)?,
                remaining_ms: non_negative(remaining).unwrap_or(0),
                ttl_ms: non_negative(granted).ok_or_else(bad_reply)?,
                acquired_at: store_time(acquired)?,
                renewed_at: store_time(renewed)?,
                holder: label(&items, at + 5)?,
            });
        }
        permits.sort_by_key(|p| p.fencing_token);
        Ok(StoreInspect::Held {
            permits,
            limit: u32::try_from(limit).map_err(|_| bad_reply())?,
            mode,
            held_by: match held_by {
                1 => Some(HeldBy::Caller),
                2 => Some(HeldBy::CallerOtherOperation),
                3 => Some(HeldBy::Other),
                _ => None,
            },
            version,
            lock_delay_ms: non_negative(delay).filter(|d| *d > 0),
        })
    }

    pub(super) async fn readiness(&self) -> Readiness {
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

    pub(super) fn start_background(self: &Arc<Self>, shutdown: CancellationToken) {
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
        let channel = self.wake_channel.clone();
        let waiters = Arc::clone(&self.waiters);
        tokio::spawn(subscribe_wakeups(
            source,
            channel,
            waiters,
            self.command_timeout,
            shutdown,
        ));
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Where the wake-up subscription connects.
enum WakeSource {
    /// Always this server.
    Fixed(Box<Client>),
    /// Any node: a classic PUBLISH reaches every node of a cluster.
    Cluster(Arc<ClusterBackend>),
    /// The current master; re-subscribed when it changes.
    Sentinel(Arc<SentinelBackend>),
}

impl WakeSource {
    /// The client to subscribe with on attempt `n`, and a receiver that
    /// fires when the subscription should move elsewhere.
    fn pick(&self, n: usize) -> (Option<Client>, Option<tokio::sync::watch::Receiver<Master>>) {
        match self {
            WakeSource::Fixed(client) => (Some(Client::clone(client)), None),
            WakeSource::Cluster(c) => {
                let candidates = c.subscription_candidates();
                let client =
                    (!candidates.is_empty()).then(|| candidates[n % candidates.len()].clone());
                (client.and_then(|addr| c.pubsub_client(&addr)), None)
            }
            WakeSource::Sentinel(s) => {
                let mut rx = s.watch();
                let client = s.pubsub_client(&rx.borrow_and_update());
                (client, Some(rx))
            }
        }
    }
}

/// Follows the wake-up channel: every release on any instance publishes the
/// resource there. After a (re)connect every local waiter re-checks once, so
/// a message missed while disconnected costs one round trip, never a stuck
/// waiter.
async fn subscribe_wakeups(
    source: WakeSource,
    channel: String,
    waiters: Arc<WaitRegistry>,
    timeout: Duration,
    shutdown: CancellationToken,
) {
    use futures_util::StreamExt as _;
    let mut backoff = Duration::from_millis(50);
    let connect_timeout = timeout.max(Duration::from_secs(1));
    for attempt in 0usize.. {
        let (client, mut moved) = source.pick(attempt);
        let moved_fut = async {
            match moved.as_mut() {
                Some(rx) => {
                    let _ = rx.changed().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(moved_fut);
        if let Some(client) = client {
            let connected = async {
                let mut pubsub = tokio::time::timeout(connect_timeout, client.get_async_pubsub())
                    .await
                    .map_err(|_| RedisError::from((redis::ErrorKind::Io, "connect timed out")))??;
                pubsub.subscribe(&channel).await?;
                Ok::<_, RedisError>(pubsub)
            };
            let pubsub = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = connected => r,
            };
            match pubsub {
                Ok(mut pubsub) => {
                    backoff = Duration::from_millis(50);
                    tracing::debug!("wake-up subscription established");
                    waiters.wake_all();
                    let mut messages = pubsub.on_message();
                    let mut master_moved = false;
                    loop {
                        let message = tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = &mut moved_fut => {
                                master_moved = true;
                                break;
                            }
                            m = messages.next() => m,
                        };
                        let Some(message) = message else {
                            tracing::warn!("wake-up subscription lost; reconnecting");
                            break;
                        };
                        match message.get_payload::<String>() {
                            Ok(payload) => on_event(&waiters, &payload),
                            Err(_) => waiters.wake_all(),
                        }
                    }
                    waiters.wake_all();
                    if master_moved {
                        continue; // the master moved: follow it at once
                    }
                }
                Err(err) => {
                    tracing::debug!(kind = ?err.kind(), "wake-up subscription failed; retrying");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = &mut moved_fut => {}
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// One wake-up channel message: `<tag>\t<version>\t<kind>` (a bare
/// `<tag>` is read as "something changed").
fn on_event(waiters: &WaitRegistry, payload: &str) {
    let mut parts = payload.split('\t');
    let tag = parts.next().unwrap_or_default();
    match parts.nth(1) {
        // The fair queue moved (a waiter left, or a permit is free for the
        // next one): only waiters look; the resource itself did not change.
        Some("queue") => waiters.wake(tag),
        kind => match kind.and_then(Change::parse) {
            Some(change) => waiters.changed(tag, change),
            None => waiters.changed_somehow(tag),
        },
    }
}

fn non_negative(pttl: i64) -> Option<u64> {
    u64::try_from(pttl).ok()
}

/// The inspect reply's head: six integers around the mode letter at 4.
fn ints_or_mode(items: &[Value]) -> Result<[i64; 7], StoreError> {
    if items.len() < 7 {
        return Err(bad_reply());
    }
    let [status, changes, live, limit] = ints::<4>(items)?;
    let [delay, held_by] = ints::<2>(&items[5..])?;
    Ok([status, changes, live, limit, 0, delay, held_by])
}

fn store_time(ms: i64) -> Result<StoreTime, StoreError> {
    u64::try_from(ms).map(StoreTime).map_err(|_| bad_reply())
}

fn token_of(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v)
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(bad_reply)
}
