//! The Redis store: one Lua script per verb, run with EVALSHA on a pooled
//! connection, every call bounded by the command timeout and classified as
//! answered, `Unavailable` (definitely not applied) or `Indeterminate`
//! (written, no certain reply).

mod pool;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use redis::{Client, IntoConnectionInfo, ProtocolVersion, RedisError, Value};
use tokio::time::{timeout_at, Instant};
use tokio_util::sync::CancellationToken;

use self::pool::{Conn, Manager};
use self::scripts::{Script, SCRIPTS};
use super::{Readiness, StoreAcquire, StoreError, StoreInspect, StoreRelease, StoreRenew};
use crate::domain::{Attempt, HeldBy, ResourceId, Ttl};
use crate::wait::WaitRegistry;

/// Settings for the Redis store.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://` or `rediss://` URL (may carry credentials; never logged).
    pub url: String,
    /// ACL user name, overriding the URL's.
    pub username: Option<String>,
    /// ACL password, overriding the URL's.
    pub password: Option<String>,
    /// Key namespace (validated: no `{` or `}`).
    pub namespace: String,
    /// Bound on every store call, pool wait included.
    pub command_timeout: Duration,
    /// Maximum pooled connections.
    pub pool_size: u32,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &"<redacted>")
            .field("namespace", &self.namespace)
            .field("command_timeout", &self.command_timeout)
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

/// Why the Redis store could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    /// The URL does not parse (the URL itself is not repeated: it may hold a password).
    #[error("LEASEHOLD_REDIS_URL is not a valid redis:// or rediss:// URL")]
    BadUrl,
}

/// Redis through a bb8 pool of multiplexed connections.
pub struct RedisStore {
    pool: bb8::Pool<Manager>,
    client: Client,
    namespace: String,
    wake_channel: String,
    command_timeout: Duration,
    waiters: Arc<WaitRegistry>,
}

/// The key of a resource's lease: `<ns>:lease:v1:{<purpose>:<digest>}`.
pub fn lease_key(namespace: &str, resource: &ResourceId) -> String {
    format!("{namespace}:lease:v1:{{{}}}", resource.tag())
}

/// The key of a resource's fencing counter: `<ns>:fence:v1:{<purpose>:<digest>}`.
pub fn fence_key(namespace: &str, resource: &ResourceId) -> String {
    format!("{namespace}:fence:v1:{{{}}}", resource.tag())
}

/// How long a fencing counter outlives its last acquisition. Losing it is
/// safe (the server clock floors the next token); keeping it bounds memory.
const FENCE_KEY_TTL_MS: u64 = 7 * 24 * 3600 * 1000;

impl RedisStore {
    /// Builds the store; connections are opened lazily, so a Redis that is
    /// down at start makes `/readyz` fail rather than the process.
    pub fn new(
        settings: &RedisSettings,
        waiters: Arc<WaitRegistry>,
    ) -> Result<Self, RedisSetupError> {
        let mut info = settings
            .url
            .as_str()
            .into_connection_info()
            .map_err(|_| RedisSetupError::BadUrl)?;
        let mut redis_settings = info.redis_settings().clone();
        if let Some(user) = &settings.username {
            redis_settings = redis_settings.set_username(user);
        }
        if let Some(password) = &settings.password {
            redis_settings = redis_settings.set_password(password);
        }
        info = info.set_redis_settings(redis_settings.clone());
        let pubsub_client = Client::open(info.clone()).map_err(|_| RedisSetupError::BadUrl)?;
        let info = info.set_redis_settings(redis_settings.set_protocol(ProtocolVersion::RESP3));
        let client = Client::open(info).map_err(|_| RedisSetupError::BadUrl)?;
        let pool = bb8::Pool::builder()
            .max_size(settings.pool_size.max(1))
            .min_idle(Some(settings.pool_size.clamp(1, 4)))
            .connection_timeout(settings.command_timeout)
            .test_on_check_out(false)
            .retry_connection(false)
            .build_unchecked(Manager::new(client, settings.command_timeout));
        Ok(Self {
            pool,
            client: pubsub_client,
            wake_channel: format!("{}:wake:v1", settings.namespace),
            namespace: settings.namespace.clone(),
            command_timeout: settings.command_timeout,
            waiters,
        })
    }

    /// Pool occupancy: (connections open, idle).
    pub fn pool_state(&self) -> (u32, u32) {
        let state = self.pool.state();
        (state.connections, state.idle_connections)
    }

    /// Checks out a live connection before `deadline`; nothing is sent yet, so
    /// every failure here is `Unavailable`.
    async fn checkout(
        &self,
        deadline: Instant,
    ) -> Result<bb8::PooledConnection<'_, Manager>, StoreError> {
        let started = std::time::Instant::now();
        loop {
            let conn = match timeout_at(deadline, self.pool.get()).await {
                Err(_) | Ok(Err(bb8::RunError::TimedOut)) => {
                    return Err(StoreError::Unavailable(
                        "no Redis connection within the command timeout",
                    ))
                }
                Ok(Err(bb8::RunError::User(err))) => {
                    tracing::debug!(kind = ?err.kind(), "redis connect failed");
                    return Err(StoreError::Unavailable("cannot connect to Redis"));
                }
                Ok(Ok(conn)) => conn,
            };
            if conn.is_dead() {
                // Known closed: skip it (the pool drops it) without sending.
                continue;
            }
            metrics::histogram!(crate::telemetry::POOL_WAIT)
                .record(started.elapsed().as_secs_f64());
            return Ok(conn);
        }
    }

    /// Runs `script` with EVALSHA; on NOSCRIPT loads it and retries once.
    async fn run(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Value, StoreError> {
        let started = std::time::Instant::now();
        let deadline = Instant::now() + self.command_timeout;
        let result = self.run_until(script, keys, args, deadline).await;
        metrics::histogram!(crate::telemetry::STORE_DURATION, "script" => script.name)
            .record(started.elapsed().as_secs_f64());
        result
    }

    async fn run_until(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        deadline: Instant,
    ) -> Result<Value, StoreError> {
        let mut conn = self.checkout(deadline).await?;
        match send(&mut conn, script.evalsha(keys, args), deadline).await {
            Err(err) if is_noscript(&err) => {}
            other => return other.map_err(|err| classify(&conn, err)),
        }
        // NOSCRIPT is a definite refusal: load the script and retry once.
        tracing::info!(
            script = script.name,
            "script cache empty (NOSCRIPT); loading it"
        );
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script.source);
        send(&mut conn, load, deadline)
            .await
            .map_err(|err| match classify(&conn, err) {
                // Loading changes no lease: an uncertain load is still "not applied".
                StoreError::Indeterminate(_) => StoreError::Unavailable("SCRIPT LOAD got no reply"),
                other => other,
            })?;
        match send(&mut conn, script.evalsha(keys, args), deadline).await {
            Err(err) if is_noscript(&err) => {
                Err(StoreError::Unavailable("NOSCRIPT after SCRIPT LOAD"))
            }
            other => other.map_err(|err| classify(&conn, err)),
        }
    }

    pub(super) async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
    ) -> Result<StoreAcquire, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let fence = fence_key(&self.namespace, resource);
        let ttl_text = ttl.ms().to_string();
        let fence_ttl = FENCE_KEY_TTL_MS.max(ttl.ms()).to_string();
        let reply = self
            .run(
                &SCRIPTS.acquire,
                &[&lease, &fence],
                &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &ttl_text,
                    &fence_ttl,
                ],
            )
            .await?;
        let [status, pttl, token] = ints::<3>(&reply)?;
        let remaining = non_negative(pttl);
        Ok(match status {
            1 => StoreAcquire::Acquired {
                fencing_token: token_of(token)?,
                remaining_ms: ttl.ms(),
            },
            2 => StoreAcquire::Replayed {
                fencing_token: token_of(token)?,
                remaining_ms: remaining.unwrap_or(0),
            },
            3 => StoreAcquire::OwnerOperationConflict {
                remaining_ms: remaining,
            },
            0 => StoreAcquire::Contended {
                remaining_ms: remaining,
            },
            _ => return Err(bad_reply()),
        })
    }

    pub(super) async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
    ) -> Result<StoreRenew, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let ttl_text = ttl.ms().to_string();
        let reply = self
            .run(
                &SCRIPTS.renew,
                &[&lease],
                &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &ttl_text,
                ],
            )
            .await?;
        let [status] = ints::<1>(&reply)?;
        Ok(match status {
            1 => {
                let [_, remaining, token] = ints::<3>(&reply)?;
                StoreRenew::Renewed {
                    fencing_token: token_of(token)?,
                    remaining_ms: non_negative(remaining).unwrap_or(0),
                }
            }
            0 => StoreRenew::Absent,
            -1 => StoreRenew::NotOwner,
            _ => return Err(bad_reply()),
        })
    }

    pub(super) async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<StoreRelease, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let tag = resource.tag();
        let reply = self
            .run(
                &SCRIPTS.release,
                &[&lease],
                &[
                    attempt.owner_token.expose(),
                    attempt.operation_id.as_str(),
                    &self.wake_channel,
                    &tag,
                ],
            )
            .await?;
        let [status] = ints::<1>(&reply)?;
        Ok(match status {
            1 => StoreRelease::Released,
            0 => StoreRelease::AlreadyAbsent,
            -1 => StoreRelease::NotOwner,
            _ => return Err(bad_reply()),
        })
    }

    pub(super) async fn inspect(
        &self,
        resource: &ResourceId,
        attempt: Option<&Attempt>,
    ) -> Result<StoreInspect, StoreError> {
        let lease = lease_key(&self.namespace, resource);
        let (token, op) = attempt.map_or(("", ""), |a| {
            (a.owner_token.expose(), a.operation_id.as_str())
        });
        let reply = self.run(&SCRIPTS.inspect, &[&lease], &[token, op]).await?;
        let [status] = ints::<1>(&reply)?;
        if status == 0 {
            return Ok(StoreInspect::Free);
        }
        let [_, pttl, fence, held_by] = ints::<4>(&reply)?;
        Ok(StoreInspect::Held {
            remaining_ms: non_negative(pttl).unwrap_or(0),
            fencing_token: token_of(fence)?,
            held_by: match held_by {
                1 => Some(HeldBy::Caller),
                2 => Some(HeldBy::CallerOtherOperation),
                3 => Some(HeldBy::Other),
                _ => None,
            },
        })
    }

    pub(super) async fn readiness(&self) -> Readiness {
        let deadline = Instant::now() + self.command_timeout;
        let result = async {
            let mut conn = self.checkout(deadline).await?;
            let mut info = redis::cmd("INFO");
            info.arg("replication");
            let reply = send(&mut conn, info, deadline)
                .await
                .map_err(|e| classify(&conn, e))?;
            let text: String = redis::from_redis_value(reply).map_err(|_| bad_reply())?;
            Ok::<bool, StoreError>(text.lines().any(|l| l.trim() == "role:master"))
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

    pub(super) fn start_background(self: &Arc<Self>, shutdown: CancellationToken) {
        let client = self.client.clone();
        let channel = self.wake_channel.clone();
        let waiters = Arc::clone(&self.waiters);
        tokio::spawn(subscribe_wakeups(client, channel, waiters, shutdown));
    }
}

/// Follows the wake-up channel: every release on any instance publishes the
/// resource there. After a (re)connect every local waiter re-checks once, so
/// a message missed while disconnected costs one round trip, never a stuck
/// waiter.
async fn subscribe_wakeups(
    client: Client,
    channel: String,
    waiters: Arc<WaitRegistry>,
    shutdown: CancellationToken,
) {
    use futures_util::StreamExt as _;
    let mut backoff = Duration::from_millis(50);
    loop {
        let connected = async {
            let mut pubsub = client.get_async_pubsub().await?;
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
                loop {
                    let message = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        m = messages.next() => m,
                    };
                    let Some(message) = message else { break };
                    match message.get_payload::<String>() {
                        Ok(tag) => waiters.wake(&tag),
                        Err(_) => waiters.wake_all(),
                    }
                }
                tracing::warn!("wake-up subscription lost; reconnecting");
                waiters.wake_all();
            }
            Err(err) => {
                tracing::debug!(kind = ?err.kind(), "wake-up subscription failed; retrying");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn send(conn: &mut Conn, cmd: redis::Cmd, deadline: Instant) -> Result<Value, SendError> {
    match timeout_at(deadline, cmd.query_async::<Value>(&mut conn.inner)).await {
        Err(_) => {
            // A reply may still come, or never: this connection can no longer
            // be trusted to pair replies with requests we care about.
            conn.mark_dead();
            Err(SendError::Timeout)
        }
        Ok(Err(err)) => Err(SendError::Redis(err)),
        Ok(Ok(value)) => Ok(value),
    }
}

enum SendError {
    Timeout,
    Redis(RedisError),
}

fn is_noscript(err: &SendError) -> bool {
    matches!(err, SendError::Redis(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}

/// Classifies a failure of a command that was handed to the connection.
fn classify(conn: &Conn, err: SendError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    let err = match err {
        SendError::Timeout => {
            return StoreError::Indeterminate("no reply within the command timeout")
        }
        SendError::Redis(err) => err,
    };
    match err.kind() {
        // An error reply means the server refused the command as a whole:
        // the scripts only write after every check passed, and Redis checks
        // OOM, READONLY, LOADING, MASTERDOWN and cluster state before running
        // a write.
        ErrorKind::Server(kind) => {
            let reason = match kind {
                ServerErrorKind::ReadOnly => {
                    // A replica now: drop the connection so the next one
                    // resolves the current primary.
                    conn.mark_dead();
                    "Redis answered READONLY"
                }
                ServerErrorKind::BusyLoading => "Redis is loading its dataset",
                ServerErrorKind::MasterDown => "Redis answered MASTERDOWN",
                ServerErrorKind::ClusterDown => "Redis Cluster is down",
                ServerErrorKind::TryAgain => "Redis Cluster asked to try again",
                ServerErrorKind::NoPerm => "the Redis user lacks a permission",
                _ if err.code() == Some("OOM") => "Redis is out of memory",
                _ => "Redis refused the command",
            };
            tracing::warn!(code = err.code().unwrap_or("?"), "redis error reply");
            StoreError::Unavailable(reason)
        }
        _ => {
            conn.mark_dead();
            if conn.is_dead() && err.is_connection_dropped() {
                tracing::warn!(kind = ?err.kind(), "redis connection lost with a command in flight");
            }
            StoreError::Indeterminate("connection failed with the command in flight")
        }
    }
}

fn bad_reply() -> StoreError {
    StoreError::Indeterminate("unexpected reply shape from a lease script")
}

fn ints<const N: usize>(reply: &Value) -> Result<[i64; N], StoreError> {
    let Value::Array(items) = reply else {
        return Err(bad_reply());
    };
    let mut out = [0i64; N];
    for (slot, item) in out.iter_mut().zip(items.iter()) {
        *slot = match item {
            Value::Int(v) => *v,
            _ => return Err(bad_reply()),
        };
    }
    if items.len() < N {
        return Err(bad_reply());
    }
    Ok(out)
}

fn non_negative(pttl: i64) -> Option<u64> {
    u64::try_from(pttl).ok()
}

fn token_of(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v)
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(bad_reply)
}
