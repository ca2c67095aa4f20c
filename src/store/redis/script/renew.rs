//! `lua/renew.lua` from the Rust side: its keys and arguments by the names
//! its header gives them, in the header's order, the call, and its reply
//! decoded by named positions.

use std::sync::LazyLock;

use super::super::evalsha::{values, Named, Script};
use super::super::keys::KeyBuf;
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{ended, int, label, non_negative, store_time, token_of, ENDED_EARLY, STATUS};
use crate::domain::{Attempt, HolderLabel, ResourceId, Ttl};
#[cfg(test)]
use crate::store::EndedEarly;
use crate::store::{Replicated, StoreError, StoreLease, StoreRenew};

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("renew", lua::RENEW.assembled));

/// A renew rewrites the permit: with replica acks configured, `WAIT` follows.
const WAITS_FOR_REPLICAS: bool = true;

/// The script's `KEYS`, as its header names them: every key it touches.
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
    owner_token: &'a str,
    operation_id: &'a str,
    ttl_ms: &'a str,
    /// `''`: keep the label.
    new_holder_label: &'a str,
    seq_ttl_ms: &'a str,
    event_channel: &'a str,
    resource_tag: &'a str,
    /// [`RedisStore::history_args`]: the history's bound.
    history_length: &'a str,
    history_ttl_ms: &'a str,
    /// `'1'` while the purpose is watched (docs/watching.md), else `''`.
    purpose_watched: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 10> {
        [
            ("owner token", self.owner_token),
            ("operation id", self.operation_id),
            ("ttl ms", self.ttl_ms),
            ("new holder label", self.new_holder_label),
            ("sequence key ttl ms", self.seq_ttl_ms),
            ("event channel", self.event_channel),
            ("resource tag", self.resource_tag),
            ("history length", self.history_length),
            ("history ttl ms", self.history_ttl_ms),
            ("purpose watched", self.purpose_watched),
        ]
    }
}

/// Positions in `{tag(1), fence, acquiredAt, now, holder slot, ttl
/// granted}`: renewed (the other answers are the status alone, or the
/// status and why).
mod renewed {
    pub const FENCE: usize = 1;
    pub const ACQUIRED_AT: usize = 2;
    pub const NOW: usize = 3;
    pub const HOLDER: usize = 4;
    pub const TTL_GRANTED: usize = 5;
}

/// Decodes an answer (`{status, ...}`); a renewal lives for the TTL the
/// script granted from now: `ttl`, or less at a hold bound.
fn decode(items: &[redis::Value], ttl: Ttl) -> Result<StoreRenew, StoreError> {
    use renewed::*;
    Ok(match int(items, STATUS)? {
        // The label sent or not, the script answers the label now held.
        1 => {
            let granted = non_negative(int(items, TTL_GRANTED)?)
                .filter(|ms| (1..=ttl.ms()).contains(ms))
                .ok_or_else(bad_reply)?;
            let (holder, max_hold_ms, session) = label(items, HOLDER)?;
            StoreRenew::Renewed(StoreLease {
                fencing_token: token_of(int(items, FENCE)?)?,
                remaining_ms: granted,
                ttl_ms: granted,
                acquired_at: store_time(int(items, ACQUIRED_AT)?)?,
                renewed_at: store_time(int(items, NOW)?)?,
                holder,
                max_hold_ms,
                lock_delay_ms: None,
                session,
            })
        }
        0 => StoreRenew::Absent,
        -1 => StoreRenew::NotOwner,
        ENDED_EARLY => StoreRenew::Ended(ended(items)?),
        _ => return Err(bad_reply()),
    })
}

impl RedisStore {
    /// `renew.lua` for `attempt`; `holder` replaces the label. With the
    /// replica acknowledgement of a write when acks are configured.
    pub(in crate::store) async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<Replicated<StoreRenew>, StoreError> {
        let tag = resource.tag();
        let ttl_ms = ttl.ms().to_string();
        let seq_ttl_ms = self.seq_ttl_ms.max(ttl.ms()).to_string();
        let args = Args {
            owner_token: attempt.owner_token.expose(),
            operation_id: attempt.operation_id.as_str(),
            ttl_ms: &ttl_ms,
            new_holder_label: holder.map_or("", HolderLabel::as_str),
            seq_ttl_ms: &seq_ttl_ms,
            event_channel: &self.wake_channel,
            resource_tag: &tag,
            history_length: &self.history_args[0],
            history_ttl_ms: &self.history_args[1],
            purpose_watched: self.purpose_watched_arg(resource),
        };
        // A renew that keeps the label: the slim script first
        // (lua/plain_renew.lua), this one when it says so.
        if holder.is_none() {
            if let Some(done) = self.plain_renew(resource, &tag, attempt, &ttl_ms).await? {
                return Ok(Replicated {
                    value: decode(&done.value, ttl)?,
                    replication: done.replication,
                    ended_holds: Vec::new(),
                });
            }
        }
        let ns = &self.namespace;
        let buf = KeyBuf::new(ns, resource, ["lease", "seq", "tomb", "exp", "hist"], None);
        let all = buf.get();
        let keys = keys(&all);
        let done = self
            .run_on_record(
                &SCRIPT,
                &values(&keys),
                &tag,
                &values(&args.named()),
                WAITS_FOR_REPLICAS,
            )
            .await?;
        Ok(Replicated {
            value: decode(&done.value, ttl)?,
            replication: done.replication,
            ended_holds: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::super::super::evalsha::names;
    use super::super::header;
    use super::*;
    use crate::domain::Bounds;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            lua::RENEW.entry,
            names(&keys(&Default::default())),
            names(&Args::default().named()),
        );
    }

    #[test]
    fn replies_decode_by_status() {
        let ttl = Bounds::new(10, 3_600_000, 30_000).ttl(5000).expect("ttl");
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let items = [1, 9, 100, 200].map(Value::Int);
        let mut renewed = items.to_vec();
        renewed.push(bulk("pod-1"));
        renewed.push(Value::Int(5000));
        assert!(matches!(decode(&renewed, ttl), Ok(StoreRenew::Renewed(l))
            if l.fencing_token == 9 && l.acquired_at.0 == 100 && l.renewed_at.0 == 200
                && l.holder.as_ref().is_some_and(|h| h.as_str() == "pod-1")
                && l.remaining_ms == 5000 && l.max_hold_ms.is_none()));
        // At a hold bound: less granted than asked, the bound read off the slot.
        renewed[4] = bulk("\u{1e}9000|pod-1");
        renewed[5] = Value::Int(1200);
        assert!(matches!(decode(&renewed, ttl), Ok(StoreRenew::Renewed(l))
            if l.remaining_ms == 1200 && l.ttl_ms == 1200 && l.max_hold_ms == Some(9000)
                && l.holder.as_ref().is_some_and(|h| h.as_str() == "pod-1")));
        // Never more than asked, never nothing.
        renewed[5] = Value::Int(5001);
        assert!(decode(&renewed, ttl).is_err());
        renewed[5] = Value::Int(0);
        assert!(decode(&renewed, ttl).is_err());
        assert!(decode(&items, ttl).is_err());
        assert_eq!(decode(&[Value::Int(0)], ttl), Ok(StoreRenew::Absent));
        assert_eq!(decode(&[Value::Int(-1)], ttl), Ok(StoreRenew::NotOwner));
        assert!(decode(&[Value::Int(5)], ttl).is_err());
        assert_eq!(
            decode(&[Value::Int(-2), bulk("revoked")], ttl),
            Ok(StoreRenew::Ended(EndedEarly::Revoked))
        );
        assert_eq!(
            decode(&[Value::Int(-2), bulk("max_hold")], ttl),
            Ok(StoreRenew::Ended(EndedEarly::MaxHold))
        );
        assert!(decode(&[Value::Int(-2), bulk("later")], ttl).is_err());
    }
}
