//! `lua/acquire.lua` from the Rust side: its keys and arguments by the
//! names its header gives them, in the header's order, the call, and its
//! reply decoded by named positions.

use std::sync::LazyLock;

use super::super::evalsha::{values, Named, Script};
use super::super::keys::{KeyBuf, CLAIM, QUEUE_HORIZON_MS};
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{
    ended_holds, int, label, non_negative, store_time, token_of, HOLD_MARK, SESSION_MARK, STATUS,
};
use crate::domain::{Attempt, HolderLabel, ResourceId};
use crate::store::{
    AcquireSpec, Contention, HoldEnd, InQueue, Moved, Replicated, StoreAcquire, StoreError,
    StoreLease,
};

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("acquire", lua::ACQUIRE.assembled));

/// An acquire writes a permit: with replica acks configured, `WAIT` follows.
const WAITS_FOR_REPLICAS: bool = true;

/// The script's `KEYS`, as its header names them: every key it touches.
fn keys<'a>(k: &[&'a str; 8]) -> Named<'a, 8> {
    let [record, seq, hist, index, queue, asks, claim, grants] = k;
    [
        ("record", record),
        ("sequence", seq),
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
    ttl_ms: &'a str,
    /// The label, after `"\x1e<maxHoldMs>|"` when the hold is bounded
    /// ([`holder_arg`]).
    holder_label: &'a str,
    /// `''` for a plain lease not queued, `+<horizon ms>:<member>` for a
    /// plain waiter that enters the queue as `member` when refused, else
    /// `<limit>:<mode>:<lock-delay ms>:<queue member or ''>` (the member
    /// part `+<horizon ms>:<member>` for a waiter that enters when refused).
    shape: &'a str,
    /// [`RedisStore::history_args`]: the history's bound.
    history_length: &'a str,
    history_ttl_ms: &'a str,
    /// `'1'` while the purpose is watched (docs/watching.md), else `''`.
    purpose_watched: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 8> {
        [
            ("owner token", self.owner_token),
            ("operation id", self.operation_id),
            ("ttl ms", self.ttl_ms),
            ("holder label", self.holder_label),
            ("shape", self.shape),
            ("history length", self.history_length),
            ("history ttl ms", self.history_ttl_ms),
            ("purpose watched", self.purpose_watched),
        ]
    }
}

/// The script's `shape` argument: empty for the common case, so the
/// uncontended plain acquire sends (and Redis parses) no more than it must.
fn shape_arg(spec: &AcquireSpec<'_>) -> String {
    let shape = spec.shape;
    let member = match spec.queue {
        InQueue::No => String::new(),
        InQueue::As(member) => member.to_owned(),
        InQueue::Entering(member) => format!("+{QUEUE_HORIZON_MS}:{member}"),
        InQueue::Leaving(member) => format!("-{member}"),
    };
    if shape.is_plain_undelayed() && spec.queue.queued_as().is_none() {
        return member;
    }
    format!(
        "{}:{}:{}:{member}",
        shape.limit,
        shape.mode.code(),
        shape.lock_delay_ms,
    )
}

/// The `holder label` argument: the label, or `''`; with a hold bound,
/// `"\x1e<maxHoldMs>|<label>"`, which the permit keeps in its label slot
/// (docs/decisions/storage-v2.md, "Bounded holds": renew.lua reads the bound there,
/// and every reader takes it off the label).
pub(super) fn holder_arg<'a>(spec: &AcquireSpec<'a>) -> std::borrow::Cow<'a, str> {
    let label = spec.holder.map_or("", HolderLabel::as_str);
    match (spec.max_hold_ms, spec.session) {
        (None, None) => label.into(),
        (Some(ms), None) => format!("{HOLD_MARK}{ms}|{label}").into(),
        (None, Some(id)) => format!("{SESSION_MARK}{id}|{label}").into(),
        (Some(ms), Some(id)) => format!("{HOLD_MARK}{ms}|{SESSION_MARK}{id}|{label}").into(),
    }
}

/// Positions in the reply, by status (the header's `Returns:`).
mod at {
    /// `{tag(1), fence, now}`: acquired.
    pub mod acquired {
        pub const FENCE: usize = 1;
        pub const NOW: usize = 2;
    }
    /// `{tag(2), remaining, fence, acquiredAt, renewedAt, ttlMs, holder}`:
    /// the same attempt already holds a permit.
    pub mod replayed {
        pub const REMAINING: usize = 1;
        pub const FENCE: usize = 2;
        pub const ACQUIRED_AT: usize = 3;
        pub const RENEWED_AT: usize = 4;
        pub const TTL_MS: usize = 5;
        pub const HOLDER: usize = 6;
        /// 1: a release granted the waiting caller this permit.
        pub const GRANTED: usize = 7;
    }
    /// `{tag(3), remaining}`: the owner token holds it for another operation.
    pub mod other_operation {
        pub const REMAINING: usize = 1;
    }
    /// `{tag(0), retry, why}`: contended.
    pub mod contended {
        pub const RETRY: usize = 1;
        pub const WHY: usize = 2;
        /// `why` + 4: the caller entered the queue in the run; + 8: its
        /// entry left it (a last look).
        pub const ENTERED: i64 = 4;
        pub const LEFT: i64 = 8;
    }
    /// `{tag(4), limit}`: live holders agreed on another limit.
    pub mod limit_mismatch {
        pub const LIMIT: usize = 1;
    }
}

/// Decodes an answer (`{status, ...}`); `spec` is what was asked (an
/// acquisition answers with the granted TTL and the label sent).
fn decode(items: &[redis::Value], spec: &AcquireSpec<'_>) -> Result<StoreAcquire, StoreError> {
    Ok(match int(items, STATUS)? {
        1 => {
            use at::acquired::*;
            let now = store_time(int(items, NOW)?)?;
            StoreAcquire::Acquired(StoreLease::acquired(
                spec,
                token_of(int(items, FENCE)?)?,
                now,
            ))
        }
        2 => {
            use at::replayed::*;
            let (holder, max_hold_ms, session) = label(items, HOLDER)?;
            let lease = StoreLease {
                fencing_token: token_of(int(items, FENCE)?)?,
                remaining_ms: non_negative(int(items, REMAINING)?).unwrap_or(0),
                ttl_ms: non_negative(int(items, TTL_MS)?).ok_or_else(bad_reply)?,
                acquired_at: store_time(int(items, ACQUIRED_AT)?)?,
                renewed_at: store_time(int(items, RENEWED_AT)?)?,
                holder,
                max_hold_ms,
                lock_delay_ms: None,
                session,
            };
            // A grant whose message this instance missed: the waiter's
            // acquisition, not a replay of an earlier one.
            if int(items, GRANTED)? == 1 {
                StoreAcquire::Acquired(lease)
            } else {
                StoreAcquire::Replayed(lease)
            }
        }
        3 => StoreAcquire::OwnerOperationConflict {
            remaining_ms: non_negative(int(items, at::other_operation::REMAINING)?),
        },
        0 => {
            use at::contended::*;
            let why = int(items, WHY)?;
            let (moved, why) = (why - why % ENTERED, why % ENTERED);
            if !matches!(moved, 0 | ENTERED | LEFT) || (moved == ENTERED && why == 3) {
                return Err(bad_reply());
            }
            StoreAcquire::Contended {
                remaining_ms: non_negative(int(items, RETRY)?),
                why: match why {
                    0 => Contention::Held,
                    1 => Contention::LockDelay,
                    2 => Contention::Queued,
                    3 => Contention::Requeue,
                    _ => return Err(bad_reply()),
                },
                moved: match moved {
                    ENTERED => Moved::Entered,
                    LEFT => Moved::Left,
                    _ => Moved::Stayed,
                },
            }
        }
        4 => StoreAcquire::LimitMismatch {
            limit: u32::try_from(int(items, at::limit_mismatch::LIMIT)?)
                .map_err(|_| bad_reply())?,
        },
        _ => return Err(bad_reply()),
    })
}

impl RedisStore {
    /// `acquire.lua` for `attempt`, with the replica acknowledgement of a
    /// write when acks are configured.
    pub(in crate::store) async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        spec: &AcquireSpec<'_>,
    ) -> Result<Replicated<StoreAcquire>, StoreError> {
        let tag = resource.tag();
        // Entering with the look leaves an ask: not with replica acks
        // (nor leaving with it: the plain leave then).
        let queue = match spec.queue {
            InQueue::Entering(_) if !self.enters_when_held() => InQueue::No,
            InQueue::Leaving(member) if !self.enters_when_held() => InQueue::As(member),
            queue => queue,
        };
        let spec = &AcquireSpec { queue, ..*spec };
        let (ttl_ms, shape) = (spec.ttl.ms().to_string(), shape_arg(spec));
        let holder = holder_arg(spec);
        let args = Args {
            owner_token: attempt.owner_token.expose(),
            operation_id: attempt.operation_id.as_str(),
            ttl_ms: &ttl_ms,
            holder_label: &holder,
            shape: &shape,
            history_length: &self.history_args[0],
            history_ttl_ms: &self.history_args[1],
            purpose_watched: self.purpose_watched_arg(resource),
        };
        // A plain lease asked by a caller not queued: the slim script
        // first (lua/plain_acquire.lua), this one when it says so. Not
        // while this instance has waiters for the resource (a waiter's
        // first look that could not enter, behind another one's): a queue
        // is likely, which the slim script leaves to this one, and that
        // second run would be a look that found nothing.
        let slim = if shape.is_empty()
            && spec.shape.is_plain_undelayed()
            && !self.waiters.waits_on(&tag)
        {
            self.plain_acquire(resource, &tag, attempt, &ttl_ms, &holder)
                .await?
        } else {
            None
        };
        let done = match slim {
            Some(done) => done,
            None => {
                let ns = &self.namespace;
                let kinds = [
                    "lease", "seq", "hist", "exp", "queue", "ask", CLAIM, "granted",
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
                Replicated {
                    value: done.value,
                    replication: done.replication,
                    ended_holds: Vec::new(),
                }
            }
        };
        let value = decode(&done.value, spec)?;
        // The expiries the run wrote follow the answer's own items.
        // (By status: a replay that was a grant decodes as `Acquired`.)
        let fixed = match int(&done.value, STATUS)? {
            2 => done.value.len(),
            0 | 1 => 3,
            _ => 2,
        };
        Ok(Replicated {
            ended_holds: ended_holds(&done.value, fixed, HoldEnd::Expired)?,
            value,
            replication: done.replication,
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
            lua::ACQUIRE.entry,
            names(&keys(&Default::default())),
            names(&Args::default().named()),
        );
    }

    #[test]
    fn replies_decode_by_status() {
        let ttl = Bounds::new(10, 3_600_000, 30_000).ttl(5000).expect("ttl");
        let spec = AcquireSpec::plain(ttl);
        let acquired = decode(&[Value::Int(1), Value::Int(7), Value::Int(100)], &spec);
        assert!(
            matches!(acquired, Ok(StoreAcquire::Acquired(l)) if l.fencing_token == 7
            && l.acquired_at.0 == 100 && l.ttl_ms == 5000)
        );
        let contended = decode(&[Value::Int(0), Value::Int(30), Value::Int(2)], &spec);
        assert_eq!(
            contended,
            Ok(StoreAcquire::Contended {
                remaining_ms: Some(30),
                why: Contention::Queued,
                moved: Moved::Stayed,
            })
        );
        let entered = decode(&[Value::Int(0), Value::Int(30), Value::Int(4)], &spec);
        assert_eq!(
            entered,
            Ok(StoreAcquire::Contended {
                remaining_ms: Some(30),
                why: Contention::Held,
                moved: Moved::Entered,
            })
        );
        let left = decode(&[Value::Int(0), Value::Int(30), Value::Int(10)], &spec);
        assert!(matches!(
            left,
            Ok(StoreAcquire::Contended {
                why: Contention::Queued,
                moved: Moved::Left,
                ..
            })
        ));
        assert!(decode(&[Value::Int(0), Value::Int(30), Value::Int(12)], &spec).is_err());
        assert!(decode(&[Value::Int(0), Value::Int(30), Value::Int(-1)], &spec).is_err());
        // Requeue never comes with an enter.
        assert!(decode(&[Value::Int(0), Value::Int(30), Value::Int(7)], &spec).is_err());
        assert!(decode(&[Value::Int(0), Value::Int(30), Value::Int(16)], &spec).is_err());
        assert!(decode(&[Value::Int(1), Value::Int(0), Value::Int(100)], &spec).is_err());
        assert_eq!(
            decode(&[Value::Int(4), Value::Int(3)], &spec),
            Ok(StoreAcquire::LimitMismatch { limit: 3 })
        );
    }

    #[test]
    fn a_waiter_not_queued_yet_asks_to_enter_in_its_shape() {
        use crate::domain::{LeaseShape, Mode};
        let ttl = Bounds::new(10, 3_600_000, 30_000).ttl(5000).expect("ttl");
        let plain = AcquireSpec::plain(ttl);
        assert_eq!(shape_arg(&plain), "");
        let entering = AcquireSpec {
            queue: InQueue::Entering("x:i:1"),
            ..plain
        };
        assert_eq!(shape_arg(&entering), "+2000:x:i:1");
        let shared = LeaseShape {
            limit: 1,
            mode: Mode::Shared,
            lock_delay_ms: 0,
        };
        let counting = AcquireSpec {
            shape: shared,
            queue: InQueue::Entering("s:i:2"),
            ..plain
        };
        assert_eq!(shape_arg(&counting), "1:s:0:+2000:s:i:2");
        let queued = AcquireSpec {
            queue: InQueue::As("s:i:2"),
            ..counting
        };
        assert_eq!(shape_arg(&queued), "1:s:0:s:i:2");
        let last = AcquireSpec {
            queue: InQueue::Leaving("s:i:2"),
            ..queued
        };
        assert_eq!(shape_arg(&last), "1:s:0:-s:i:2");
    }

    #[test]
    fn a_replay_is_an_acquisition_when_a_release_granted_it() {
        let ttl = Bounds::new(10, 3_600_000, 30_000).ttl(5000).expect("ttl");
        let spec = AcquireSpec::plain(ttl);
        let replay = |granted| {
            let label = Value::BulkString(b"w".to_vec());
            let items = [2, 4000, 7, 100, 100, 5000].map(Value::Int);
            let mut items = items.to_vec();
            items.extend([label, Value::Int(granted)]);
            decode(&items, &spec)
        };
        assert!(matches!(replay(0), Ok(StoreAcquire::Replayed(l)) if l.fencing_token == 7));
        assert!(
            matches!(replay(1), Ok(StoreAcquire::Acquired(l)) if l.fencing_token == 7
            && l.remaining_ms == 4000 && l.acquired_at.0 == 100)
        );
    }
}
