//! `lua/inspect.lua` from the Rust side: its keys and arguments by the
//! names its header gives them, in the header's order, the call, and its
//! reply (a head, then one group per shown permit: at most
//! [`PERMITS_SHOWN`], the oldest) decoded by named positions.

use std::sync::LazyLock;

use redis::Value;

use super::super::evalsha::{values, Named, Script};
use super::super::keys::{lease_key, record_keys, seq_key, WATCH_MARK_MS};
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{int, label, non_negative, store_time, token_of, STATUS};
use crate::domain::{HeldBy, Mode, ResourceId};
use crate::store::{Probe, StoreError, StoreInspect, StoreLease, PERMITS_SHOWN};

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("inspect", lua::INSPECT.assembled));

/// An inspect changes no permit (at most a watch mark): no `WAIT`.
const WAITS_FOR_REPLICAS: bool = false;

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    /// `''`: nobody in particular.
    owner_token: &'a str,
    /// `''` with a token: compare the token only.
    operation_id: &'a str,
    /// `> 0`: this instance follows the resource (marks it watched).
    watch_ms: &'a str,
    seq_ttl_ms: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 4> {
        [
            ("caller's owner token", self.owner_token),
            ("operation id", self.operation_id),
            ("watch ms", self.watch_ms),
            ("sequence key ttl ms", self.seq_ttl_ms),
        ]
    }
}

/// Positions in the reply's head: `{tag(status), changes, live, limit,
/// mode, lock-delay left, held_by, ...}`.
mod head {
    pub const CHANGES: usize = 1;
    pub const LIVE: usize = 2;
    pub const LIMIT: usize = 3;
    pub const MODE: usize = 4;
    pub const LOCK_DELAY_LEFT: usize = 5;
    pub const HELD_BY: usize = 6;
    /// Where the first permit's group starts.
    pub const LEN: usize = 7;
}

/// Positions in one live permit's group (from its start): `remaining,
/// fence, acquiredAt, renewedAt, ttlMs, holder, lockDelayMs`.
mod permit {
    pub const REMAINING: usize = 0;
    pub const FENCE: usize = 1;
    pub const ACQUIRED_AT: usize = 2;
    pub const RENEWED_AT: usize = 3;
    pub const TTL_MS: usize = 4;
    pub const HOLDER: usize = 5;
    pub const LOCK_DELAY_MS: usize = 6;
    /// Items per permit.
    pub const LEN: usize = 7;
}

/// The mode letter at `items[at]`.
fn mode_at(items: &[Value], at: usize) -> Result<Mode, StoreError> {
    match items.get(at) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(Mode::from_code),
        Some(Value::SimpleString(s)) => Mode::from_code(s),
        _ => None,
    }
    .ok_or_else(bad_reply)
}

/// The permit whose group starts at `items[at]`.
fn permit_at(items: &[Value], at: usize) -> Result<StoreLease, StoreError> {
    use permit::*;
    let [remaining, fence, acquired, renewed, granted] =
        [REMAINING, FENCE, ACQUIRED_AT, RENEWED_AT, TTL_MS].map(|p| int(items, at + p));
    let (holder, max_hold_ms, session) = label(items, at + HOLDER)?;
    Ok(StoreLease {
        fencing_token: token_of(fence?)?,
        remaining_ms: non_negative(remaining?).unwrap_or(0),
        ttl_ms: non_negative(granted?).ok_or_else(bad_reply)?,
        acquired_at: store_time(acquired?)?,
        renewed_at: store_time(renewed?)?,
        holder,
        max_hold_ms,
        lock_delay_ms: non_negative(int(items, at + LOCK_DELAY_MS)?),
        session,
    })
}

/// Decodes an answer (`{status, ...}`): status 0 free, 1 held.
fn decode(items: &[Value]) -> Result<StoreInspect, StoreError> {
    use head::*;
    if items.len() < head::LEN {
        return Err(bad_reply());
    }
    let status = int(items, STATUS)?;
    let changes = non_negative(int(items, CHANGES)?).ok_or_else(bad_reply)?;
    let live = usize::try_from(int(items, LIVE)?).map_err(|_| bad_reply())?;
    let limit = int(items, LIMIT)?;
    let lock_delay_ms = non_negative(int(items, LOCK_DELAY_LEFT)?).filter(|d| *d > 0);
    let held_by = int(items, HELD_BY)?;
    let version = format!("{changes}.{live}");
    if status == 0 {
        return Ok(StoreInspect::Free {
            version,
            lock_delay_ms,
        });
    }
    // At most PERMITS_SHOWN permits follow the head; `live` counts them all.
    let shown = live.min(PERMITS_SHOWN);
    if status != 1 || live == 0 || items.len() != head::LEN + permit::LEN * shown {
        return Err(bad_reply());
    }
    let mode = mode_at(items, MODE)?;
    let mut permits = Vec::with_capacity(shown);
    for at in (head::LEN..items.len()).step_by(permit::LEN) {
        permits.push(permit_at(items, at)?);
    }
    permits.sort_by_key(|p| p.fencing_token);
    Ok(StoreInspect::Held {
        holders: u32::try_from(live).map_err(|_| bad_reply())?,
        permits,
        limit: u32::try_from(limit).map_err(|_| bad_reply())?,
        mode,
        held_by: match held_by {
            1 => Some(HeldBy::Caller),
            2 => Some(HeldBy::CallerOtherOperation),
            3 => Some(HeldBy::Other),
            _ => None,
        },
        version,
        lock_delay_ms,
    })
}

impl RedisStore {
    /// `inspect.lua`: the resource read, `heldBy` relative to `probe`;
    /// `watching` marks the resource watched.
    pub(in crate::store) async fn inspect(
        &self,
        resource: &ResourceId,
        probe: Probe<'_>,
        watching: bool,
    ) -> Result<StoreInspect, StoreError> {
        let tag = resource.tag();
        let (owner_token, operation_id) = match probe {
            Probe::Anyone => ("", ""),
            Probe::Owner(token) => (token.expose(), ""),
            Probe::Attempt(a) => (a.owner_token.expose(), a.operation_id.as_str()),
        };
        let args = Args {
            owner_token,
            operation_id,
            watch_ms: if watching { WATCH_MARK_MS } else { "0" },
            seq_ttl_ms: &self.seq_ttl_text,
        };
        let (lease, seq) = (
            lease_key(&self.namespace, resource),
            seq_key(&self.namespace, resource),
        );
        let keys = record_keys(&lease, &seq);
        let done = self
            .run_on_record(
                &SCRIPT,
                &values(&keys),
                &tag,
                &values(&args.named()),
                WAITS_FOR_REPLICAS,
            )
            .await?;
        decode(&done.value)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::evalsha::names;
    use super::super::super::keys::record_keys;
    use super::super::header;
    use super::*;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            lua::INSPECT.entry,
            names(&record_keys("", "")),
            names(&Args::default().named()),
        );
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_free_resource_and_a_held_one_decode() {
        let free = [0, 4, 0, 1].map(Value::Int).into_iter();
        let free: Vec<Value> = free
            .chain([bulk("x"), Value::Int(250), Value::Int(0)])
            .collect();
        assert_eq!(
            decode(&free),
            Ok(StoreInspect::Free {
                version: "4.0".into(),
                lock_delay_ms: Some(250)
            })
        );
        assert!(decode(&free[..6]).is_err());
        let mut held: Vec<Value> = [1, 5, 2, 2].map(Value::Int).to_vec();
        held.extend([bulk("s"), Value::Int(0), Value::Int(3)]);
        for fence in [9, 8] {
            held.extend([10, fence, 100, 100, 30_000].map(Value::Int));
            held.push(bulk(""));
            held.push(Value::Int(0));
        }
        let Ok(StoreInspect::Held {
            holders,
            permits,
            limit,
            mode,
            held_by,
            version,
            lock_delay_ms,
        }) = decode(&held)
        else {
            panic!("held: {:?}", decode(&held));
        };
        assert_eq!(
            permits.iter().map(|p| p.fencing_token).collect::<Vec<_>>(),
            [8, 9]
        );
        assert_eq!(
            (limit, mode, held_by),
            (2, Mode::Shared, Some(HeldBy::Other))
        );
        assert_eq!((version.as_str(), lock_delay_ms), ("5.2", None));
        assert_eq!(holders, 2);
        assert!(decode(&held[..held.len() - 1]).is_err());
    }
}
