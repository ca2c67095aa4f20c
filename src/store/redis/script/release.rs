//! `lua/release.lua` from the Rust side: its keys and arguments by the
//! names its header gives them, in the header's order, the call in either
//! mode (the caller's release, the clean-up of an abandoned acquisition),
//! and its answer read by the positions the header's `Returns` gives.

use std::sync::LazyLock;

use super::super::evalsha::{values, Named, Script};
use super::super::keys::{KeyBuf, CLAIM};
use super::super::lua;
use super::super::reply::{bad_reply, refusal_reason};
use super::super::store::RedisStore;
use super::decode::{ended, ended_holds, int, non_negative, ENDED_EARLY, STATUS};
use crate::domain::{Attempt, ResourceId};
#[cfg(test)]
use crate::store::EndedEarly;
use crate::store::{HoldEnd, Replicated, StoreError, StoreRelease};

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("release", lua::RELEASE.assembled));

/// A release deletes a permit: with replica acks configured, `WAIT` follows.
const WAITS_FOR_REPLICAS: bool = true;

/// The script's `mode` argument.
#[derive(Clone, Copy)]
enum Mode {
    /// `''`: the caller's release.
    Caller,
    /// `'a'`: the clean-up of an acquisition whose waiter left before
    /// hearing of it; the permit goes only if nobody was told it is held.
    Abandoned,
    /// `'s'`: the caller's release because its session ended (the history
    /// entry says so).
    SessionEnded,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Caller => "",
            Mode::Abandoned => "a",
            Mode::SessionEnded => "s",
        }
    }
}

/// The script's `KEYS`, as its header names them: every key it touches.
fn keys<'a>(k: &[&'a str; 9]) -> Named<'a, 9> {
    let [record, seq, tombs, hist, index, queue, asks, claim, grants] = k;
    [
        ("record", record),
        ("sequence", seq),
        ("tombstones", tombs),
        ("history", hist),
        ("index", index),
        ("queue", queue),
        ("asks", asks),
        ("claim", claim),
        ("grants", grants),
    ]
    .map(|(name, key)| (name, *key))
}

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    owner_token: &'a str,
    operation_id: &'a str,
    event_channel: &'a str,
    resource_tag: &'a str,
    mode: &'a str,
    /// [`RedisStore::history_args`]: the history's bound.
    history_length: &'a str,
    history_ttl_ms: &'a str,
    /// Its waiters may be granted the lease (lua/release.lua, "Hand-off").
    instance_id: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 8> {
        [
            ("owner token", self.owner_token),
            ("operation id", self.operation_id),
            ("event channel", self.event_channel),
            ("resource tag", self.resource_tag),
            ("mode", self.mode),
            ("history length", self.history_length),
            ("history ttl ms", self.history_ttl_ms),
            ("this instance's id", self.instance_id),
        ]
    }
}

/// The statuses of the header's `Returns`.
mod status {
    pub const RELEASED: i64 = 1;
    pub const ABSENT: i64 = 0;
    pub const NOT_OWNER: i64 = -1;
    /// Mode `'a'` only: the permit was claimed or renewed (untouched).
    pub const CLAIMED: i64 = 2;
}

/// Positions in the reply, by status (the header's `Returns`; the other
/// statuses are the status alone).
mod at {
    /// `{tag(1), heldMs}`: released.
    pub mod released {
        pub const HELD_MS: usize = 1;
    }
}

/// The caller's release (`{status, ...}`, the nonce tag already replaced).
fn decode(items: &[redis::Value]) -> Result<StoreRelease, StoreError> {
    match int(items, STATUS)? {
        status::RELEASED => Ok(StoreRelease::Released {
            // Below zero only if the server's clock stepped back since
            // the acquire: nothing held, as far as it can tell.
            held_ms: non_negative(int(items, at::released::HELD_MS)?).unwrap_or(0),
        }),
        status::ABSENT => Ok(StoreRelease::AlreadyAbsent),
        status::NOT_OWNER => Ok(StoreRelease::NotOwner),
        ENDED_EARLY => ended(items).map(StoreRelease::Ended),
        _ => Err(bad_reply()),
    }
}

/// The clean-up: true when the permit went.
fn decode_abandoned(items: &[redis::Value]) -> Result<bool, StoreError> {
    match int(items, STATUS)? {
        status::RELEASED => Ok(true),
        status::ABSENT | status::NOT_OWNER | status::CLAIMED | ENDED_EARLY => Ok(false),
        _ => Err(bad_reply()),
    }
}

/// Whether `why` is a refusal that also refuses a replay's claim write
/// (acquire.lua answers the replay all the same).
fn refuses_claims(why: &str) -> bool {
    ["OOM", "NOREPLICAS", "READONLY", "MISCONF", "NOPERM"]
        .into_iter()
        .any(|code| why == refusal_reason(code))
}

impl RedisStore {
    /// `release.lua` for `attempt`, with the replica acknowledgement of a
    /// write when acks are configured.
    pub(in crate::store) async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        session_ended: bool,
    ) -> Result<Replicated<StoreRelease>, StoreError> {
        let mode = if session_ended {
            Mode::SessionEnded
        } else {
            Mode::Caller
        };
        let done = self.release_as(resource, attempt, mode).await?;
        let value = decode(&done.value)?;
        // The expiries the run wrote follow the answer's own items.
        let fixed = match value {
            StoreRelease::Released { .. } | StoreRelease::Ended(_) => 2,
            StoreRelease::AlreadyAbsent | StoreRelease::NotOwner => 1,
        };
        Ok(Replicated {
            ended_holds: ended_holds(&done.value, fixed, HoldEnd::Expired)?,
            value,
            replication: done.replication,
        })
    }

    /// The clean-up release of an acquisition whose waiter left: true when
    /// the permit went, false when it was claimed by a replay or renewed
    /// since (or is gone already), and false when Redis refused it as it
    /// refuses a replay's claim (full, NOREPLICAS, READONLY, MISCONF, an
    /// ACL: the script's
    /// first write is that claim key's `SET`, lua/release.lua): a replay
    /// may have been answered meanwhile without its claim, so the
    /// clean-up is not tried again once writes are allowed; the permit
    /// ends with its TTL.
    pub(in crate::store) async fn release_abandoned(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<bool, StoreError> {
        match self.release_as(resource, attempt, Mode::Abandoned).await {
            Err(StoreError::Unavailable(why)) if refuses_claims(why) => Ok(false),
            done => decode_abandoned(&done?.value),
        }
    }

    /// `release.lua` in `mode`: its answer and replication.
    async fn release_as(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        mode: Mode,
    ) -> Result<Replicated<Vec<redis::Value>>, StoreError> {
        let tag = resource.tag();
        // The caller's release: the slim script first
        // (lua/plain_release.lua), this one when it says so. Not when this
        // instance has waiters for the resource: a queue (which the slim
        // script leaves to this one, for its hand-off) is likely, and a
        // second script run would follow the first.
        if matches!(mode, Mode::Caller) && !self.waiters.waits_on(&tag) {
            if let Some(done) = self.plain_release(resource, &tag, attempt).await? {
                return Ok(done);
            }
        }
        let args = Args {
            owner_token: attempt.owner_token.expose(),
            operation_id: attempt.operation_id.as_str(),
            event_channel: &self.wake_channel,
            resource_tag: &tag,
            mode: mode.arg(),
            history_length: &self.history_args[0],
            history_ttl_ms: &self.history_args[1],
            instance_id: &self.instance,
        };
        let ns = &self.namespace;
        let kinds = [
            "lease", "seq", "tomb", "hist", "exp", "queue", "ask", CLAIM, "granted",
        ];
        let buf = KeyBuf::new(ns, resource, kinds, Some(attempt));
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
            value: done.value,
            replication: done.replication,
            ended_holds: Vec::new(),
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
            lua::RELEASE.entry,
            names(&keys(&Default::default())),
            names(&Args::default().named()),
        );
    }

    use redis::Value;

    fn reply(items: &[i64]) -> Vec<Value> {
        items.iter().map(|v| Value::Int(*v)).collect()
    }

    #[test]
    fn the_refusals_of_a_claim_are_told_apart() {
        for code in ["OOM", "NOREPLICAS", "READONLY", "MISCONF", "NOPERM"] {
            assert!(refuses_claims(refusal_reason(code)), "{code}");
        }
        for code in ["BUSY", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN"] {
            assert!(!refuses_claims(refusal_reason(code)), "{code}");
        }
    }

    #[test]
    fn statuses_decode_by_mode() {
        assert_eq!(
            decode(&reply(&[1, 1500])),
            Ok(StoreRelease::Released { held_ms: 1500 })
        );
        // A clock that stepped back holds for nothing, not for ever.
        assert_eq!(
            decode(&reply(&[1, -3])),
            Ok(StoreRelease::Released { held_ms: 0 })
        );
        // Released without its hold time is not a reply the script gives.
        assert!(decode(&reply(&[1])).is_err());
        assert_eq!(decode(&reply(&[0])), Ok(StoreRelease::AlreadyAbsent));
        assert_eq!(decode(&reply(&[-1])), Ok(StoreRelease::NotOwner));
        assert!(decode(&reply(&[2])).is_err());
        let broken = [Value::Int(-2), Value::BulkString(b"revoked".to_vec())];
        assert_eq!(
            decode(&broken),
            Ok(StoreRelease::Ended(EndedEarly::Revoked))
        );
        let held_out = [Value::Int(-2), Value::BulkString(b"max_hold".to_vec())];
        assert_eq!(
            decode(&held_out),
            Ok(StoreRelease::Ended(EndedEarly::MaxHold))
        );
        assert_eq!(decode_abandoned(&broken), Ok(false));
        assert!(decode(&[]).is_err());
        assert_eq!(decode_abandoned(&reply(&[1, 20])), Ok(true));
        for gone_or_kept in [0, -1, 2] {
            assert_eq!(decode_abandoned(&reply(&[gone_or_kept])), Ok(false));
        }
        assert!(decode_abandoned(&reply(&[3])).is_err());
    }
}
