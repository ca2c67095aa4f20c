//! `lua/queue.lua` from the Rust side: this instance's queue member names,
//! the script's keys and arguments by the names its header gives them, in
//! the header's order, the call, and its status read.

use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use super::super::call::Call;
use super::super::keys::{key, seq_key, QUEUE_HORIZON_MS, SEQ_KEY_TTL_TEXT};
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{int, STATUS};
use super::evalsha::{values, Named, Script};
use crate::domain::{Mode, ResourceId};
use crate::store::{QueueOp, StoreError};

/// The script, hashed once.
static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new("queue", include_str!("../../../../lua/queue.lua")));

/// A queue entry is this instance's alone and lapses by itself: no `WAIT`.
const WAITS_FOR_REPLICAS: bool = false;

/// The script's `KEYS`, as its header names them.
fn keys<'a>(queue: &'a str, seq: &'a str) -> Named<'a, 2> {
    [("queue", queue), ("sequence", seq)]
}

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    /// `enter`, `front`, `beat` or `leave`.
    verb: &'a str,
    instance_id: &'a str,
    heartbeat_horizon_ms: &'a str,
    seq_ttl_ms: &'a str,
    event_channel: &'a str,
    resource_tag: &'a str,
    /// The member (enter, front, leave) or the roster (beat).
    member: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 7> {
        [
            ("verb", self.verb),
            ("this instance's id", self.instance_id),
            ("heartbeat horizon ms", self.heartbeat_horizon_ms),
            ("sequence key ttl ms", self.seq_ttl_ms),
            ("event channel", self.event_channel),
            ("resource tag", self.resource_tag),
            ("member", self.member),
        ]
    }
}

/// The script's `verb` and `member` arguments for `op`.
fn verb_and_member(op: QueueOp<'_>) -> (&'static str, &str) {
    match op {
        QueueOp::Enter(member) => ("enter", member),
        QueueOp::EnterFront(member) => ("front", member),
        QueueOp::Beat(roster) => ("beat", roster),
        QueueOp::Leave(member) => ("leave", member),
    }
}

/// The only answer but a refusal: `{tag(1)}`.
const DONE: i64 = 1;

impl RedisStore {
    /// A new queue member of this instance: `<mode>:<instance>:<n>`.
    pub(in crate::store) fn queue_member(&self, mode: Mode) -> String {
        let n = self.queue_members.fetch_add(1, Ordering::Relaxed);
        format!("{}:{}:{n}", mode.code(), self.instance)
    }

    /// `queue.lua`: `op` on `resource`'s fair queue.
    pub(in crate::store) async fn queue(
        &self,
        resource: &ResourceId,
        op: QueueOp<'_>,
    ) -> Result<(), StoreError> {
        let queue = key(&self.namespace, "queue", resource);
        let seq = seq_key(&self.namespace, resource);
        let tag = resource.tag();
        let (verb, member) = verb_and_member(op);
        let args = Args {
            verb,
            instance_id: &self.instance,
            heartbeat_horizon_ms: QUEUE_HORIZON_MS,
            seq_ttl_ms: SEQ_KEY_TTL_TEXT,
            event_channel: &self.wake_channel,
            resource_tag: &tag,
            member,
        };
        let done = self
            .run(Call {
                script: &SCRIPT,
                tag: &tag,
                keys: &values(&keys(&queue, &seq)),
                args: &values(&args.named()),
                acks: self.acks.filter(|_| WAITS_FOR_REPLICAS),
            })
            .await?;
        match int(&done.value, STATUS)? {
            DONE => Ok(()),
            _ => Err(bad_reply()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::evalsha::names;
    use super::super::header;
    use super::*;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            SCRIPT.source,
            names(&keys("", "")),
            names(&Args::default().named()),
        );
    }

    #[test]
    fn every_op_names_its_verb() {
        assert_eq!(verb_and_member(QueueOp::Enter("m")), ("enter", "m"));
        assert_eq!(verb_and_member(QueueOp::EnterFront("m")), ("front", "m"));
        assert_eq!(verb_and_member(QueueOp::Beat("a,b")), ("beat", "a,b"));
        assert_eq!(verb_and_member(QueueOp::Leave("m")), ("leave", "m"));
    }
}
