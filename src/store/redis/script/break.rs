//! `lua/break.lua` from the Rust side: its keys and arguments by the names
//! its header gives them, in the header's order, the call, and its answer
//! read by the positions the header's `Returns` gives.

use std::sync::LazyLock;

use super::super::call::Call;
use super::super::evalsha::{values, Named, Script};
use super::super::keys::KeyBuf;
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{ended_holds, int, STATUS};
use crate::domain::{ResourceId, Revocation};
use crate::store::{HoldEnd, Replicated, StoreBreak, StoreError};

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("break", lua::BREAK.assembled));

/// A break deletes permits: with replica acks configured, `WAIT` follows.
const WAITS_FOR_REPLICAS: bool = true;

/// The script's `KEYS`, as its header names them.
fn keys<'a>(k: &[&'a str; 5]) -> Named<'a, 5> {
    let [record, seq, tombs, index, hist] = k;
    [
        ("record", record),
        ("sequence", seq),
        ("tombstones", tombs),
        ("index", index),
        ("history", hist),
    ]
    .map(|(name, key)| (name, *key))
}

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    /// `''`: every permit.
    fencing_token: &'a str,
    seq_ttl_ms: &'a str,
    event_channel: &'a str,
    resource_tag: &'a str,
    reason: &'a str,
    key_name: &'a str,
    /// [`RedisStore::history_args`]: the history's bound.
    history_length: &'a str,
    history_ttl_ms: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 8> {
        [
            ("fencing token", self.fencing_token),
            ("sequence key ttl ms", self.seq_ttl_ms),
            ("event channel", self.event_channel),
            ("resource tag", self.resource_tag),
            ("reason", self.reason),
            ("key name", self.key_name),
            ("history length", self.history_length),
            ("history ttl ms", self.history_ttl_ms),
        ]
    }
}

/// Positions in `{tag(1), permits}`: broken (the other answer is the
/// status alone).
mod broken {
    pub const PERMITS: usize = 1;
}

fn decode(items: &[redis::Value]) -> Result<StoreBreak, StoreError> {
    match int(items, STATUS)? {
        1 => u32::try_from(int(items, broken::PERMITS)?)
            .ok()
            .filter(|n| *n > 0)
            .map(StoreBreak::Broken)
            .ok_or_else(bad_reply),
        0 => Ok(StoreBreak::NothingToBreak),
        _ => Err(bad_reply()),
    }
}

impl RedisStore {
    /// `break.lua`: every live permit of `resource`, or the one with
    /// `fencing_token`, goes; with the replica acknowledgement of the
    /// write when acks are configured.
    pub(in crate::store) async fn break_lease(
        &self,
        resource: &ResourceId,
        fencing_token: Option<u64>,
        revocation: &Revocation,
    ) -> Result<Replicated<StoreBreak>, StoreError> {
        let ns = &self.namespace;
        let buf = KeyBuf::new(ns, resource, ["lease", "seq", "tomb", "exp", "hist"], None);
        let all = buf.get();
        let tag = resource.tag();
        let token = fencing_token.map(|t| t.to_string()).unwrap_or_default();
        let args = Args {
            fencing_token: &token,
            seq_ttl_ms: &self.seq_ttl_text,
            event_channel: &self.wake_channel,
            resource_tag: &tag,
            reason: revocation.reason.as_ref().map_or("", |r| r.as_str()),
            key_name: revocation.key_name.as_deref().unwrap_or(""),
            history_length: &self.history_args[0],
            history_ttl_ms: &self.history_args[1],
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
        let value = decode(&done.value)?;
        // Each broken permit's hold time follows `{status, permits}`.
        let ended_holds = match value {
            StoreBreak::Broken(_) => ended_holds(&done.value, 2, HoldEnd::Broken)?,
            StoreBreak::NothingToBreak => Vec::new(),
        };
        Ok(Replicated {
            value,
            replication: done.replication,
            ended_holds,
        })
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::super::super::evalsha::names;
    use super::super::header;
    use super::*;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            lua::BREAK.entry,
            names(&keys(&Default::default())),
            names(&Args::default().named()),
        );
    }

    #[test]
    fn replies_decode_by_status() {
        let reply = |items: &[i64]| items.iter().map(|v| Value::Int(*v)).collect::<Vec<_>>();
        assert_eq!(decode(&reply(&[1, 3])), Ok(StoreBreak::Broken(3)));
        assert_eq!(decode(&reply(&[0])), Ok(StoreBreak::NothingToBreak));
        assert!(decode(&reply(&[1, 0])).is_err());
        assert!(decode(&reply(&[1])).is_err());
        assert!(decode(&reply(&[-1])).is_err());
    }
}
