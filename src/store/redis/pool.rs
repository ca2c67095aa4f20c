//! A bb8 pool of multiplexed Redis connections to one node that knows when a
//! connection has died.
//!
//! bb8-redis' manager never reports a connection as broken, and testing each
//! checkout with a PING would add a second round trip to every request. So
//! each connection here carries a flag that redis-rs' RESP3 push channel sets
//! the moment the connection's driver sees it close, and that the store sets
//! when a command times out. A flagged connection is dropped at check-in and
//! skipped at check-out: a command is never written to a connection already
//! known to be dead, which is what lets such a failure be reported as
//! `unavailable` (not sent) rather than `indeterminate`.
//!
//! The pool is bb8 as bb8-redis re-exports it (so bb8 and redis versions
//! always match); its `RedisConnectionManager` is not used for the reason
//! above.
//!
//! Every topology uses this pool: standalone has one, Cluster one per node,
//! Sentinel one per resolved master (replaced, not reused, when the master
//! changes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bb8_redis::bb8;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ErrorKind, PushInfo, PushKind, RedisError};
use tokio::time::{timeout_at, Instant};

use super::reply::{CONNECT_FAILED, NOT_MASTER};
use crate::store::StoreError;

/// A pooled connection and its liveness flag.
pub struct Conn {
    /// The multiplexed connection.
    pub inner: MultiplexedConnection,
    dead: Arc<AtomicBool>,
    /// For an exclusive checkout: the pool's slot, held until this handle
    /// is dropped, so no other call shares the connection meanwhile.
    _held: Option<Box<bb8::PooledConnection<'static, Manager>>>,
}

impl Conn {
    /// Whether the connection is known to be closed or unusable.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Marks the connection unusable (e.g. a reply never came); the pool
    /// drops it when it is returned.
    pub fn mark_dead(&self) {
        self.dead.store(true, Ordering::Release);
    }

    /// Another handle to the same connection, holding no pool slot: it
    /// shares the liveness flag, so marking either dead marks both.
    fn share(&self) -> Conn {
        Conn {
            inner: self.inner.clone(),
            dead: Arc::clone(&self.dead),
            _held: None,
        }
    }
}

/// Opens connections with a bounded connect time and a disconnect flag.
pub struct Manager {
    client: Client,
    connect_timeout: Duration,
    require_master: bool,
}

impl Manager {
    /// A manager for `client` whose connects give up after `connect_timeout`.
    /// With `require_master`, a new connection is kept only if the node says
    /// `role:master` (Sentinel: a stale address never serves writes).
    pub fn new(client: Client, connect_timeout: Duration, require_master: bool) -> Self {
        Self {
            client,
            connect_timeout,
            require_master,
        }
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    async fn connect(&self) -> Result<Conn, RedisError> {
        let dead = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&dead);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // The store bounds every command with its own deadline.
            .set_response_timeout(None)
            .set_push_sender(move |info: PushInfo| {
                if info.kind == PushKind::Disconnection {
                    flag.store(true, Ordering::Release);
                }
                Ok::<(), redis::aio::SendError>(())
            });
        let mut inner = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        if self.require_master {
            let mut info = redis::cmd("INFO");
            info.arg("replication");
            let text: String =
                tokio::time::timeout(self.connect_timeout, info.query_async(&mut inner))
                    .await
                    .map_err(|_| RedisError::from((ErrorKind::Io, "role check timed out")))??;
            if !is_master(&text) {
                return Err(RedisError::from((
                    ErrorKind::Client,
                    "the resolved node is not a master",
                )));
            }
        }
        Ok(Conn {
            inner,
            dead,
            _held: None,
        })
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), RedisError> {
        redis::cmd("PING").query_async::<()>(&mut conn.inner).await
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_dead()
    }
}

/// Whether `INFO replication` text says `role:master`.
pub fn is_master(info: &str) -> bool {
    info.lines().any(|l| l.trim() == "role:master")
}

/// How long a shared checkout's connection is handed out again without
/// asking bb8 (see [`NodePool::checkout_as`]).
const REUSE: Duration = Duration::from_secs(1);

/// The connection shared checkouts were last handed, kept for [`REUSE`].
struct Shared {
    /// A handle holding no pool slot.
    conn: Conn,
    /// Handed out while a checkout's deadline is before this one.
    until: Instant,
}

/// The pool of one node.
pub struct NodePool {
    pool: bb8::Pool<Manager>,
    /// The last shared checkout's connection (see [`NodePool::checkout_as`]).
    shared: std::sync::Mutex<Option<Shared>>,
    /// `leasehold_store_pool_wait_seconds`, looked up once.
    wait: std::sync::OnceLock<metrics::Histogram>,
}

impl NodePool {
    /// A lazily connecting pool: a node that is down makes calls fail
    /// `unavailable`, not the process. `warm` connections are opened in the
    /// background right away.
    pub fn new(
        client: Client,
        size: u32,
        warm: u32,
        timeout: Duration,
        require_master: bool,
    ) -> Self {
        let pool = bb8::Pool::builder()
            .max_size(size.max(1))
            .min_idle(Some(warm.min(size).max(1)))
            .connection_timeout(timeout)
            .test_on_check_out(false)
            .retry_connection(false)
            // Checkouts hand the connection straight back (see `checkout`),
            // so LIFO gives every request the same live connection and the
            // commands of one wake-up leave in one write (Redis: ~8 EVALSHA
            // per read at 10 000/s instead of ~1.9 with FIFO's rotation;
            // 20 % less Redis CPU per request). The rest stay warm spares.
            .queue_strategy(bb8::QueueStrategy::Lifo)
            .build_unchecked(Manager::new(client, timeout, require_master));
        Self {
            pool,
            shared: std::sync::Mutex::new(None),
            wait: std::sync::OnceLock::new(),
        }
    }

    /// (connections open, idle).
    pub fn state(&self) -> (u32, u32) {
        let state = self.pool.state();
        (state.connections, state.idle_connections)
    }

    /// Checks out a live connection before `deadline`; nothing is sent yet, so
    /// every failure here is `Unavailable`. The connection is shared: other
    /// calls pipeline on it at the same time.
    pub async fn checkout(&self, deadline: Instant) -> Result<Conn, StoreError> {
        self.checkout_as(false, deadline).await
    }

    /// [`NodePool::checkout`]; with `exclusive`, no other call is handed the
    /// connection until the returned handle is dropped. For a write followed
    /// by `WAIT`: `WAIT` blocks its connection for up to the replica timeout,
    /// and on a shared connection every command queued behind it would wait
    /// too.
    ///
    /// A shared checkout hands its connection straight back, and with LIFO
    /// the next one gets the same connection: so the connection is kept
    /// and handed out again, without bb8, its timer and its bookkeeping
    /// (about 1 500 instructions a request), for [`REUSE`], unless it is
    /// known dead. Every caller's deadline is its start plus the command
    /// timeout, so "this deadline is [`REUSE`] past the one the connection
    /// was taken with" tells that time without reading the clock. After
    /// that, bb8 is asked again: its view of the connection (idle time,
    /// lifetime, the pool's size) stays current.
    pub async fn checkout_as(
        &self,
        exclusive: bool,
        deadline: Instant,
    ) -> Result<Conn, StoreError> {
        if !exclusive {
            if let Some(conn) = self.reused(deadline) {
                self.record_wait(0.0);
                return Ok(conn);
            }
        }
        let started = std::time::Instant::now();
        loop {
            // Shared: a borrowed checkout, handed straight back below.
            // Exclusive: an owned one, held by the handle until it drops.
            let conn = if exclusive {
                let pooled = timeout_at(deadline, self.pool.get_owned())
                    .await
                    .map_err(|_| bb8::RunError::TimedOut)
                    .and_then(|got| got)
                    .map_err(checkout_failed)?;
                if pooled.is_dead() {
                    continue;
                }
                // The connection kept for shared checkouts may be this one
                // (bb8 counts it idle): no shared call may reuse it while
                // this exclusive one (a `WAIT`) blocks it.
                self.unkeep(&pooled.dead);
                Conn {
                    inner: pooled.inner.clone(),
                    dead: Arc::clone(&pooled.dead),
                    _held: Some(Box::new(pooled)),
                }
            } else {
                let pooled = timeout_at(deadline, self.pool.get())
                    .await
                    .map_err(|_| bb8::RunError::TimedOut)
                    .and_then(|got| got)
                    .map_err(checkout_failed)?;
                if pooled.is_dead() {
                    // Known closed: skip it (the pool drops it) without sending.
                    continue;
                }
                // Connections are multiplexed: take a handle to this one and
                // give it straight back, so concurrent commands share
                // (pipeline on) a few connections instead of each holding
                // one for its round trip. The liveness flag is shared, so
                // marking this handle dead marks the pooled connection,
                // which the next checkout then discards.
                let conn = pooled.share();
                self.keep(&conn, deadline);
                conn
            };
            self.record_wait(started.elapsed().as_secs_f64());
            return Ok(conn);
        }
    }

    /// The kept shared connection, when it is not known dead and was taken
    /// less than [`REUSE`] ago.
    fn reused(&self, deadline: Instant) -> Option<Conn> {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match shared.as_ref() {
            Some(kept) if deadline < kept.until && !kept.conn.is_dead() => Some(kept.conn.share()),
            Some(_) => {
                // Stale or dead: bb8 decides (and drops a dead one).
                *shared = None;
                None
            }
            None => None,
        }
    }

    /// Stops keeping the connection whose liveness flag is `dead` for
    /// shared checkouts, if it is the kept one.
    fn unkeep(&self, dead: &Arc<AtomicBool>) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if shared
            .as_ref()
            .is_some_and(|kept| Arc::ptr_eq(&kept.conn.dead, dead))
        {
            *shared = None;
        }
    }

    /// Keeps a shared checkout's connection for the next ones.
    fn keep(&self, conn: &Conn, deadline: Instant) {
        let kept = Shared {
            conn: conn.share(),
            until: deadline + REUSE,
        };
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = Some(kept);
    }

    fn record_wait(&self, seconds: f64) {
        self.wait
            .get_or_init(|| metrics::histogram!(crate::telemetry::POOL_WAIT))
            .record(seconds);
    }
}

/// A checkout that produced no connection: nothing was sent, so every case
/// is `Unavailable`.
fn checkout_failed(err: bb8::RunError<RedisError>) -> StoreError {
    match err {
        bb8::RunError::TimedOut => {
            StoreError::Unavailable("no Redis connection within the command timeout")
        }
        bb8::RunError::User(err) => {
            tracing::debug!(kind = ?err.kind(), "redis connect failed");
            StoreError::Unavailable(if err.kind() == ErrorKind::Client {
                NOT_MASTER
            } else {
                CONNECT_FAILED
            })
        }
    }
}
