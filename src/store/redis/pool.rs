//! A bb8 pool of multiplexed Redis connections that knows when a connection
//! has died.
//!
//! bb8-redis' manager never reports a connection as broken, and testing each
//! checkout with a PING would add a second round trip to every request. So
//! each connection here carries a flag that redis-rs' RESP3 push channel sets
//! the moment the connection's driver sees it close, and that the store sets
//! when a command times out. A flagged connection is dropped at check-in and
//! skipped at check-out: a command is never written to a connection already
//! known to be dead, which is what lets such a failure be reported as
//! `unavailable` (not sent) rather than `indeterminate`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, PushInfo, PushKind, RedisError};

/// A pooled connection and its liveness flag.
pub struct Conn {
    /// The multiplexed connection.
    pub inner: MultiplexedConnection,
    dead: Arc<AtomicBool>,
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
}

/// Opens connections with a bounded connect time and a disconnect flag.
pub struct Manager {
    client: Client,
    connect_timeout: Duration,
}

impl Manager {
    /// A manager for `client` whose connects give up after `connect_timeout`.
    pub fn new(client: Client, connect_timeout: Duration) -> Self {
        Self {
            client,
            connect_timeout,
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
        let inner = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Conn { inner, dead })
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), RedisError> {
        redis::cmd("PING").query_async::<()>(&mut conn.inner).await
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_dead()
    }
}
