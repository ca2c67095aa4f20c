//! Running a lease script on one checked-out connection, and classifying
//! what went wrong: the same rules for every topology.
//!
//! | what happened | answer |
//! | --- | --- |
//! | no connection, connect refused, pool empty (nothing sent) | `Unavailable` |
//! | an error reply, by its code (READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, OOM, NOREPLICAS, MISCONF, BUSY, NOPERM, ...), confirmed as ours by `PING <nonce>` | `Unavailable`, connection kept: Redis refused before anything was written |
//! | a script reply `{nonce, -9, error}`: a write inside the script refused | `Unavailable`, connection kept |
//! | MOVED / ASK | not an answer: the caller follows the redirect |
//! | a reply that does not echo this call's nonce, or an error reply not confirmed | `Indeterminate`, connection dropped |
//! | no reply before the deadline, connection lost with the command in flight | `Indeterminate`, connection dropped |

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::{timeout_at, Instant};

use super::evalsha::Script;
use super::pool::Conn;
use super::reply::{
    self, Nonce, Opened, CLUSTER_DOWN, CONNECTION_LOST, CONNECT_FAILED, DESYNC, MASTER_DOWN,
    NOT_MASTER, READONLY, TRY_AGAIN,
};
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

/// Runs `script` with EVALSHA on `conn` (ASKING first, in the same write,
/// when `asking`); on NOSCRIPT loads it and retries once. The reply must
/// lead with a tag made from `nonce` (every lease script's first element is
/// `nonce * 16 + status + 9`): one that does not
/// answers another request, so the call is `Indeterminate` and the
/// connection is dropped. Returns the script's answer, `{status, ...}`.
pub async fn run_script(
    conn: &mut Conn,
    script: &Script,
    keys: &[&str],
    args: &[&str],
    nonce: &Nonce,
    asking: bool,
    deadline: Instant,
) -> Result<Vec<Value>, RunError> {
    let run = evalsha(conn, script, keys, args, nonce, asking, deadline);
    // Traces (feature `otel`): each script run is a span under the store call.
    #[cfg(feature = "otel")]
    let run = {
        use crate::telemetry::trace::{child, Kind, Value::Str};
        let attributes = vec![
            ("db.system.name", Str("redis")),
            ("db.operation.name", Str("EVALSHA")),
            ("leasehold.script", Str(script.name)),
        ];
        child(
            ("EVALSHA", script.name),
            Kind::Client,
            attributes,
            run,
            |out| match out {
                Ok(_) => None,
                Err(RunError::Redirect(_)) => Some(("redirect", "MOVED/ASK")),
                Err(RunError::Failed(err)) => Some(trace_error(err)),
            },
        )
    };
    run.await
}

/// A store failure as a span's error class and description.
#[cfg(feature = "otel")]
pub fn trace_error(err: &StoreError) -> (&'static str, &'static str) {
    match err {
        StoreError::Unavailable(why) => ("unavailable", why),
        StoreError::Indeterminate(why) => ("indeterminate", why),
    }
}

/// [`run_script`] without its span.
async fn evalsha(
    conn: &mut Conn,
    script: &Script,
    keys: &[&str],
    args: &[&str],
    nonce: &Nonce,
    asking: bool,
    deadline: Instant,
) -> Result<Vec<Value>, RunError> {
    let evalsha = script.evalsha(keys, args, nonce);
    // Only the reply is on the hot path; the rest is boxed so that every
    // call's future (moved at each await up the chain) stays small.
    match send_script(conn, &evalsha, asking, deadline).await {
        Ok(value) => opened(conn, value, nonce),
        Err(err) if is_noscript(&err) => {
            Box::pin(reload_and_retry(
                conn, script, &evalsha, nonce, asking, deadline,
            ))
            .await
        }
        Err(err) => Box::pin(failed(conn, err, nonce, deadline)).await,
    }
}

/// NOSCRIPT is a definite refusal once it is proven ours (`PING <nonce>`,
/// as for every untagged reply): then nothing ran, so loading the script
/// and retrying once is safe, and a load that fails leaves the call "not
/// applied". Unproven, the NOSCRIPT may be another request's reply while
/// ours is still coming: the call is `Indeterminate`.
async fn reload_and_retry(
    conn: &mut Conn,
    script: &Script,
    evalsha: &redis::Cmd,
    nonce: &Nonce,
    asking: bool,
    deadline: Instant,
) -> Result<Vec<Value>, RunError> {
    if !in_step(conn, nonce, None, deadline).await {
        return Err(StoreError::Indeterminate(DESYNC).into());
    }
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
    match send_script(conn, evalsha, asking, deadline).await {
        Ok(value) => opened(conn, value, nonce),
        Err(err) if is_noscript(&err) => {
            Err(StoreError::Unavailable("NOSCRIPT after SCRIPT LOAD").into())
        }
        Err(err) => failed(conn, err, nonce, deadline).await,
    }
}

/// Sends the EVALSHA, after ASKING when `asking`. The two go out as one
/// pipeline, so no other request's command on this multiplexed connection
/// can come between them and take the ASKING.
async fn send_script(
    conn: &mut Conn,
    evalsha: &redis::Cmd,
    asking: bool,
    deadline: Instant,
) -> Result<Value, SendError> {
    if asking {
        // Rare (a slot migration): boxed, so the common path's future
        // stays small (every await moves it).
        Box::pin(send_asking(conn, evalsha, deadline)).await
    } else {
        send(conn, evalsha, deadline).await
    }
}

async fn send_asking(
    conn: &mut Conn,
    evalsha: &redis::Cmd,
    deadline: Instant,
) -> Result<Value, SendError> {
    let mut pipe = redis::pipe();
    pipe.add_command(redis::cmd("ASKING"))
        .add_command(evalsha.clone());
    let sent = timeout_at(deadline, conn.inner.send_packed_commands(&pipe, 0, 2)).await;
    match sent {
        Err(_) => {
            conn.mark_dead();
            Err(SendError::Timeout)
        }
        Ok(Err(err)) => Err(SendError::Redis(err)),
        Ok(Ok(mut replies)) => match replies.pop() {
            Some(Value::ServerError(err)) => Err(SendError::Redis(err.into())),
            Some(value) if replies.len() == 1 => Ok(value),
            // Not two replies for two commands: out of step.
            _ => Ok(Value::Nil),
        },
    }
}

/// A script's reply: its answer when it carries this call's nonce.
fn opened(conn: &Conn, value: Value, nonce: &Nonce) -> Result<Vec<Value>, RunError> {
    match reply::open(value, nonce) {
        Ok(Opened::Answer(items)) => Ok(items),
        Ok(Opened::Refused(code)) => Err(RunError::Failed(refused(conn, &code))),
        Err(()) => {
            conn.mark_dead();
            tracing::warn!("a script reply did not carry its request's nonce; connection dropped");
            Err(RunError::Failed(StoreError::Indeterminate(DESYNC)))
        }
    }
}

/// No reply value: an error reply (a refusal before the script wrote
/// anything, or a redirect), a timeout or a broken connection.
async fn failed(
    conn: &mut Conn,
    err: SendError,
    nonce: &Nonce,
    deadline: Instant,
) -> Result<Vec<Value>, RunError> {
    match err {
        SendError::Redis(err) if err.code().is_some() => {
            // It carries no nonce: prove it is ours before believing it.
            if !in_step(conn, nonce, err.code(), deadline).await {
                return Err(RunError::Failed(StoreError::Indeterminate(DESYNC)));
            }
            match redirect_of(&err) {
                Some(redirect) => Err(RunError::Redirect(redirect)),
                None => Err(RunError::Failed(classify(conn, SendError::Redis(err)))),
            }
        }
        err => Err(RunError::Failed(classify(conn, err))),
    }
}

/// `PING <nonce>` on the connection right after an untagged reply: when its
/// reply echoes the nonce, replies on this connection are paired with their
/// requests (a lost reply would have shifted this one too), so the reply
/// before it was ours. When it does not, or none comes, the connection is
/// dropped.
///
/// A master that cannot persist refuses PING with MISCONF (on purpose, so
/// that clients notice) but still answers `ECHO`: the nonce is echoed that
/// way instead. A server running a long script answers everything but a
/// script kill with BUSY, so nothing can echo; a BUSY answer to the PING
/// is taken as proof only when the call's own error was BUSY too: in step,
/// it was ours; one reply short, the PING's answer was the call's own, a
/// BUSY refusal. (Two replies short on one connection needs two replies
/// lost without the connection breaking, which TCP does not do; the first
/// tagged reply after one such loss drops the connection.)
async fn in_step(conn: &mut Conn, nonce: &Nonce, code: Option<&str>, deadline: Instant) -> bool {
    let echoed = |value: &Value| match value {
        Value::BulkString(b) => b.as_slice() == nonce.as_str().as_bytes(),
        Value::SimpleString(s) => s == nonce.as_str(),
        _ => false,
    };
    let mut ping = redis::cmd("PING");
    ping.arg(nonce.as_str());
    let confirmed = match send(conn, &ping, deadline).await {
        Ok(value) => echoed(&value),
        Err(SendError::Redis(err)) => match err.code() {
            Some("BUSY") => code == Some("BUSY"),
            Some("MISCONF") => {
                let mut echo = redis::cmd("ECHO");
                echo.arg(nonce.as_str());
                matches!(send(conn, &echo, deadline).await, Ok(value) if echoed(&value))
            }
            _ => false,
        },
        Err(SendError::Timeout) => false,
    };
    if !confirmed {
        conn.mark_dead();
        tracing::warn!("an error reply could not be matched to its request; connection dropped");
    }
    confirmed
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

/// A refusal by error code: `Unavailable`, and the connection is kept (it
/// is healthy; Redis said no), except READONLY: the node is a replica now,
/// so the next connection should resolve the current primary.
fn refused(conn: &Conn, code: &str) -> StoreError {
    if code == "READONLY" {
        conn.mark_dead();
    }
    tracing::warn!(code, "redis refused a lease command");
    StoreError::Unavailable(reply::refusal_reason(code))
}

/// Classifies a failure of a command that was handed to the connection.
pub fn classify(conn: &Conn, err: SendError) -> StoreError {
    let err = match err {
        SendError::Timeout => {
            return StoreError::Indeterminate("no reply within the command timeout")
        }
        SendError::Redis(err) => err,
    };
    match err.code() {
        // An error reply: the server refused the command as a whole. Read by
        // its code: redis-rs lists only some codes as kinds; the rest (OOM,
        // NOREPLICAS, MISCONF, BUSY, ...) arrive as `Extension`.
        Some(code) => refused(conn, code),
        None => {
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
