//! One script call ([`Call`]) and its answer ([`Executed`]): run on a
//! connection with a fresh nonce, then `WAIT` for replicas after a write
//! when acknowledgements are configured.

use super::{exec, reply};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::evalsha::Script;
use super::exec::RunError;
use super::pool::Conn;
use crate::store::Replication;

/// Replica acknowledgement settings as a call uses them.
#[derive(Clone, Copy)]
pub(super) struct Acks {
    pub(super) required: u32,
    pub(super) timeout_ms: u64,
    /// Client-side bound on the `WAIT` reply.
    pub(super) budget: Duration,
}

/// One script call: what to run, for which resource, and whether a write
/// must be followed by `WAIT`.
pub(super) struct Call<'a> {
    pub(super) script: &'a Script,
    /// The resource's hash tag (Cluster routes by it).
    pub(super) tag: &'a str,
    pub(super) keys: &'a [&'a str],
    pub(super) args: &'a [&'a str],
    pub(super) acks: Option<Acks>,
}

/// A script's answer (its reply with the nonce tag replaced by the plain
/// status) and, after a write with acks configured, its replication.
pub(super) struct Executed {
    pub(super) value: Vec<Value>,
    pub(super) replication: Option<Replication>,
}

impl Call<'_> {
    /// Runs the script on `conn` with a fresh nonce; when it wrote (status
    /// 1 in every script) and acks are configured, `WAIT`s on the same
    /// connection (checked out exclusively for that: see
    /// [`NodePool::checkout_as`]). A `WAIT` without an answer leaves the
    /// script's answer standing and counts as no acknowledgement.
    pub(super) async fn run_on(
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

pub(super) fn status_of(answer: &[Value]) -> Option<i64> {
    match answer.first() {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    }
}
