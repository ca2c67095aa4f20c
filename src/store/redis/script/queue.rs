//! `lua/queue.lua` from the Rust side: this instance's queue member names,
//! the script's keys and arguments by the names its header gives them, in
//! the header's order, the call, and its status read.

use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use super::super::call::Call;
use super::super::evalsha::{values, Named, Script};
use super::super::keys::{KeyBuf, QUEUE_HORIZON_MS};
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::acquire::holder_arg;
use super::decode::{int, non_negative, STATUS};
use crate::domain::{Mode, ResourceId};
use crate::store::{Ask, QueueOp, Queued, StoreError};

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("queue", lua::QUEUE.assembled));

/// A queue entry is this instance's alone and lapses by itself: no `WAIT`.
const WAITS_FOR_REPLICAS: bool = false;

/// The script's `KEYS`, as its header names them.
fn keys<'a>(k: &[&'a str; 5]) -> Named<'a, 5> {
    let [queue, seq, asks, grants, record] = k;
    [
        ("queue", queue),
        ("sequence", seq),
        ("asks", asks),
        ("grants", grants),
        ("record", record),
    ]
    .map(|(name, key)| (name, *key))
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
    /// Enter and front: [`ask_arg`], or `''`; leave: the asking
    /// attempt's permit field `p:<owner token>:<operation id>`, or `''`.
    ask: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 8> {
        [
            ("verb", self.verb),
            ("this instance's id", self.instance_id),
            ("heartbeat horizon ms", self.heartbeat_horizon_ms),
            ("sequence key ttl ms", self.seq_ttl_ms),
            ("event channel", self.event_channel),
            ("resource tag", self.resource_tag),
            ("member", self.member),
            ("ask", self.ask),
        ]
    }
}

/// The script's `verb`, `member` and ask for `op`.
fn verb_and_member(op: QueueOp<'_>) -> (&'static str, &str, Option<Ask<'_>>) {
    match op {
        QueueOp::Enter(member, ask) => ("enter", member, ask),
        QueueOp::EnterFront(member, ask) => ("front", member, ask),
        QueueOp::Beat(roster) => ("beat", roster, None),
        QueueOp::Leave(member, _) => ("leave", member, None),
    }
}

/// The `ask` argument: `"<ttl ms>|<owner token>|<operation id>|<holder
/// label>"` (the label as acquire.lua's, with a hold bound's mark) for a
/// plain lease, which release.lua may grant; `''` for any other shape.
fn ask_arg(ask: Option<Ask<'_>>) -> String {
    let Some(Ask { attempt, spec }) = ask else {
        return String::new();
    };
    if !spec.shape.is_plain_undelayed() {
        return String::new();
    }
    format!(
        "{}|{}|{}|{}",
        spec.ttl.ms(),
        attempt.owner_token.expose(),
        attempt.operation_id.as_str(),
        holder_arg(&spec)
    )
}

/// The answer's status, and its one item (`{tag(1), n}`).
const DONE: i64 = 1;
const N: usize = 1;

impl RedisStore {
    /// A new queue member of this instance: `<mode>:<instance>:<n>`.
    pub(in crate::store) fn queue_member(&self, mode: Mode) -> String {
        let n = self.queue_members.fetch_add(1, Ordering::Relaxed);
        format!("{}:{}:{n}", mode.code(), self.instance)
    }

    /// Whether acquire.lua takes a waiter's place in the queue when it
    /// finds no permit: only without replica acks, as for an ask (below).
    pub(in crate::store) fn enters_when_held(&self) -> bool {
        self.acks.is_none()
    }

    /// `queue.lua`: `op` on `resource`'s fair queue. An ask is left with
    /// the entry only without replica acks: a grant is answered from its
    /// published message, before any `WAIT` could confirm it.
    pub(in crate::store) async fn queue(
        &self,
        resource: &ResourceId,
        op: QueueOp<'_>,
    ) -> Result<Queued, StoreError> {
        let ns = &self.namespace;
        let buf = KeyBuf::new(
            ns,
            resource,
            ["queue", "seq", "ask", "granted", "lease"],
            None,
        );
        let all = buf.get();
        let tag = resource.tag();
        let (verb, member, ask) = verb_and_member(op);
        let ask = match op {
            QueueOp::Leave(_, Some(attempt)) => format!(
                "p:{}:{}",
                attempt.owner_token.expose(),
                attempt.operation_id.as_str()
            ),
            _ => ask_arg(ask.filter(|_| self.acks.is_none())),
        };
        let args = Args {
            verb,
            instance_id: &self.instance,
            heartbeat_horizon_ms: QUEUE_HORIZON_MS,
            seq_ttl_ms: &self.seq_ttl_text,
            event_channel: &self.wake_channel,
            resource_tag: &tag,
            member,
            ask: &ask,
        };
        let done = self
            .run(Call {
                script: &SCRIPT,
                tag: &tag,
                keys: &values(&keys(&all)),
                args: &values(&args.named()),
                acks: self.acks.filter(|_| WAITS_FOR_REPLICAS),
            })
            .await?;
        if int(&done.value, STATUS)? != DONE {
            return Err(bad_reply());
        }
        let n = int(&done.value, N)?;
        Ok(match op {
            // How long the waiter may sleep (the record's PTTL, or the
            // first entry's heartbeat lapse); negative: look at once.
            QueueOp::Enter(..) | QueueOp::EnterFront(..) => Queued::Entered(non_negative(n)),
            QueueOp::Leave(..) => Queued::Left { granted: n == 1 },
            QueueOp::Beat(_) => Queued::Beaten,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::evalsha::names;
    use super::super::header;
    use super::*;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            lua::QUEUE.entry,
            names(&keys(&Default::default())),
            names(&Args::default().named()),
        );
    }

    #[test]
    fn every_op_names_its_verb() {
        let names = |op| {
            let (verb, member, _) = verb_and_member(op);
            (verb, member)
        };
        assert_eq!(names(QueueOp::Enter("m", None)), ("enter", "m"));
        assert_eq!(names(QueueOp::EnterFront("m", None)), ("front", "m"));
        assert_eq!(names(QueueOp::Beat("a,b")), ("beat", "a,b"));
        assert_eq!(names(QueueOp::Leave("m", None)), ("leave", "m"));
    }
}
