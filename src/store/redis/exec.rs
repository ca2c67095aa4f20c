//! Running a lease script on one checked-out connection, and classifying
//! what went wrong: the same rules for every topology.
//!
//! | what happened | answer |
//! | --- | --- |
//! | no connection, connect refused, pool empty (nothing sent) | `Unavailable` |
//! | an error reply (READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, OOM, NOPERM, ...) | `Unavailable`: Redis refused the command as a whole |
//! | MOVED / ASK | not an answer: the caller follows the redirect |
//! | no reply before the deadline, connection lost with the command in flight | `Indeterminate` |

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::{timeout_at, Instant};

use super::pool::Conn;
use super::scripts::Script;
use crate::store::StoreError;

/// A command handed to a connection did not produce a value.
pub enum SendError {
    /// No reply before the deadline (the connection is marked dead).
    Timeout,
    /// A reply that is an error, or a connection failure.
    Redis(RedisError),
}

/// Sends `cmd` on `conn` and waits for its reply until `deadline`.
pub async fn send(
    conn: &mut Conn,
    cmd: &redis::Cmd,
    deadline: Instant,
) -> Result<Value, SendError> {
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

/// Where a Redis Cluster node told us to go instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// MOVED: the slot lives on `addr` now.
    Moved {
        /// The slot.
        slot: u16,
        /// `host:port` of its owner.
        addr: String,
    },
    /// ASK: this one command goes to `addr` (a slot migration is under way).
    Ask {
        /// `host:port` of the importing node.
        addr: String,
    },
}

/// A script run that did not produce its reply.
pub enum RunError {
    /// A definite outcome for the caller.
    Failed(StoreError),
    /// The node does not own the slot: not applied, try there.
    Redirect(Redirect),
}

impl From<StoreError> for RunError {
    fn from(err: StoreError) -> Self {
        RunError::Failed(err)
    }
}

/// Runs `script` with EVALSHA on `conn` (after ASKING when `asking`); on
/// NOSCRIPT loads it and retries once.
pub async fn run_script(
    conn: &mut Conn,
    script: &Script,
    keys: &[&str],
    args: &[&str],
    asking: bool,
    deadline: Instant,
) -> Result<Value, RunError> {
    let evalsha = script.evalsha(keys, args);
    if asking {
        asking_cmd(conn, deadline).await?;
    }
    match send(conn, &evalsha, deadline).await {
        Err(err) if is_noscript(&err) => {}
        other => return finish(conn, other),
    }
    // NOSCRIPT is a definite refusal: load the script and retry once.
    tracing::info!(
        script = script.name,
        "script cache empty (NOSCRIPT); loading it"
    );
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(script.source);
    send(conn, &load, deadline)
        .await
        .map_err(|err| match classify(conn, err) {
            // Loading changes no lease: an uncertain load is still "not applied".
            StoreError::Indeterminate(_) => StoreError::Unavailable("SCRIPT LOAD got no reply"),
            other => other,
        })?;
    if asking {
        asking_cmd(conn, deadline).await?;
    }
    match send(conn, &evalsha, deadline).await {
        Err(err) if is_noscript(&err) => {
            Err(StoreError::Unavailable("NOSCRIPT after SCRIPT LOAD").into())
        }
        other => finish(conn, other),
    }
}

/// ASKING before a redirected command; it changes no data, so any failure
/// is `Unavailable`.
async fn asking_cmd(conn: &mut Conn, deadline: Instant) -> Result<(), StoreError> {
    send(conn, &redis::cmd("ASKING"), deadline)
        .await
        .map(drop)
        .map_err(|err| match classify(conn, err) {
            StoreError::Indeterminate(_) => StoreError::Unavailable("ASKING got no reply"),
            other => other,
        })
}

fn finish(conn: &Conn, result: Result<Value, SendError>) -> Result<Value, RunError> {
    match result {
        Ok(value) => Ok(value),
        Err(SendError::Redis(err)) => match redirect_of(&err) {
            Some(redirect) => Err(RunError::Redirect(redirect)),
            None => Err(RunError::Failed(classify(conn, SendError::Redis(err)))),
        },
        Err(err) => Err(RunError::Failed(classify(conn, err))),
    }
}

/// MOVED/ASK as a [`Redirect`].
pub fn redirect_of(err: &RedisError) -> Option<Redirect> {
    let (addr, slot) = err.redirect_node()?;
    let addr = addr.to_owned();
    match err.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => Some(Redirect::Moved { slot, addr }),
        ErrorKind::Server(ServerErrorKind::Ask) => Some(Redirect::Ask { addr }),
        _ => None,
    }
}

fn is_noscript(err: &SendError) -> bool {
    matches!(err, SendError::Redis(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
}

/// Whether a failure means the node we talked to is no longer the right
/// one (a replica now, gone, or its cluster is reconfiguring): the topology
/// should be looked up again.
pub fn suggests_topology_change(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::Unavailable(
            READONLY | CLUSTER_DOWN | TRY_AGAIN | MASTER_DOWN | CONNECT_FAILED | NOT_MASTER
        ) | StoreError::Indeterminate(CONNECTION_LOST)
    )
}

const READONLY: &str = "Redis answered READONLY";
const CLUSTER_DOWN: &str = "Redis Cluster is down";
const TRY_AGAIN: &str = "Redis Cluster asked to try again";
const MASTER_DOWN: &str = "Redis answered MASTERDOWN";
pub(super) const CONNECT_FAILED: &str = "cannot connect to Redis";
pub(super) const NOT_MASTER: &str = "the resolved Redis node is not a master";
const CONNECTION_LOST: &str = "connection failed with the command in flight";

/// Classifies a failure of a command that was handed to the connection.
pub fn classify(conn: &Conn, err: SendError) -> StoreError {
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
                    READONLY
                }
                ServerErrorKind::BusyLoading => "Redis is loading its dataset",
                ServerErrorKind::MasterDown => MASTER_DOWN,
                ServerErrorKind::ClusterDown => CLUSTER_DOWN,
                ServerErrorKind::TryAgain => TRY_AGAIN,
                ServerErrorKind::NoPerm => "the Redis user lacks a permission",
                _ if err.code() == Some("OOM") => "Redis is out of memory",
                _ => "Redis refused the command",
            };
            tracing::warn!(code = err.code().unwrap_or("?"), "redis error reply");
            StoreError::Unavailable(reason)
        }
        _ => {
            conn.mark_dead();
            tracing::warn!(kind = ?err.kind(), "redis connection failed with a command in flight");
            StoreError::Indeterminate(CONNECTION_LOST)
        }
    }
}

/// Whether the node answered as (or turned out to be) a replica.
pub fn is_not_master(err: &StoreError) -> bool {
    matches!(err, StoreError::Unavailable(READONLY | NOT_MASTER))
}

/// `WAIT required timeout` on the connection that just wrote: how many
/// replicas acknowledged every write of this connection so far. `None` when
/// no reply came (the write itself stands; only its replication is unknown).
pub async fn wait_for_replicas(
    conn: &mut Conn,
    required: u32,
    timeout_ms: u64,
    deadline: Instant,
) -> Option<u32> {
    let mut wait = redis::cmd("WAIT");
    wait.arg(required).arg(timeout_ms);
    match send(conn, &wait, deadline).await {
        Ok(Value::Int(n)) => u32::try_from(n).ok(),
        Ok(_) => None,
        Err(SendError::Timeout) => None,
        Err(SendError::Redis(err)) => {
            if !matches!(err.kind(), ErrorKind::Server(_)) {
                conn.mark_dead();
            }
            tracing::warn!(code = err.code().unwrap_or("?"), kind = ?err.kind(), "WAIT for replicas failed");
            None
        }
    }
}
