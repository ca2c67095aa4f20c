//! `lua/waiters.lua` from the Rust side: a resource's fair queue read for
//! people (who waits, in which order, on which instance, since when), its
//! keys and arguments by the names its header gives them, and its reply
//! decoded by named positions. A read: it changes nothing.

use std::sync::LazyLock;

use redis::Value;

use super::super::call::Call;
use super::super::evalsha::{values, Named, Script};
use super::super::keys::{KeyBuf, QUEUE_HORIZON_MS};
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{int, label, store_time, text, STATUS};
use crate::domain::{
    Mode, QueueEntry, QueueInstance, QueueRead, ResourceId, StoreTime, QUEUE_SCAN,
};
use crate::store::StoreError;

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("waiters", lua::WAITERS.assembled));

/// A read: no `WAIT`.
const WAITS_FOR_REPLICAS: bool = false;

/// The script's `KEYS`, as its header names them.
fn keys<'a>(k: &[&'a str; 2]) -> Named<'a, 2> {
    let [queue, asks] = k;
    [("queue", *queue), ("asks", *asks)]
}

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    limit: &'a str,
    scan: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 2> {
        [("limit", self.limit), ("scan", self.scan)]
    }
}

/// Positions in the reply's head: `{tag(1), now, live, complete, shown,
/// ...}`, then three items per shown waiter, then two per instance.
mod at {
    pub const NOW: usize = 1;
    pub const LIVE: usize = 2;
    pub const COMPLETE: usize = 3;
    pub const SHOWN: usize = 4;
    pub const LEN: usize = 5;
    /// Items per shown waiter: member, since µs, holder slot.
    pub const WAITER: usize = 3;
    /// Items per instance: id, heartbeat deadline ms.
    pub const INSTANCE: usize = 2;
}

/// A member `<mode>:<instance>:<n>` → its mode and instance.
fn member_parts(member: &str) -> Option<(Mode, &str)> {
    let mut parts = member.splitn(3, ':');
    let mode = Mode::from_code(parts.next()?)?;
    let instance = parts.next().filter(|i| !i.is_empty())?;
    parts.next()?;
    Some((mode, instance))
}

/// `{1, now, live, complete, shown, waiter..., instance...}`.
fn decode(items: &[Value]) -> Result<QueueRead, StoreError> {
    if items.len() < at::LEN || int(items, STATUS)? != 1 {
        return Err(bad_reply());
    }
    let now = store_time(int(items, at::NOW)?)?;
    let count = |at| usize::try_from(int(items, at)?).map_err(|_| bad_reply());
    let (live, shown) = (count(at::LIVE)?, count(at::SHOWN)?);
    let instances_at = at::LEN + shown * at::WAITER;
    if items.len() < instances_at || !(items.len() - instances_at).is_multiple_of(at::INSTANCE) {
        return Err(bad_reply());
    }
    let mut entries = Vec::with_capacity(shown);
    for i in (at::LEN..instances_at).step_by(at::WAITER) {
        let (mode, instance) = member_parts(text(items, i)?).ok_or_else(bad_reply)?;
        let micros: f64 = text(items, i + 1)?.parse().map_err(|_| bad_reply())?;
        let (holder, _max_hold, _session) = label(items, i + 2)?;
        entries.push(QueueEntry {
            instance: instance.to_owned(),
            mode,
            // Whole ms of the store's clock (the score is µs, below 2^53).
            since: StoreTime((micros / 1000.0) as u64),
            holder,
        });
    }
    // A heartbeat sets its deadline the horizon ahead of the store's clock.
    let horizon: u64 = QUEUE_HORIZON_MS.parse().map_err(|_| bad_reply())?;
    let mut instances = Vec::new();
    for i in (instances_at..items.len()).step_by(at::INSTANCE) {
        let alive_for_ms = store_time(int(items, i + 1)?)?.0.saturating_sub(now.0);
        instances.push(QueueInstance {
            instance: text(items, i)?.to_owned(),
            alive_for_ms,
            heartbeat_age_ms: horizon.saturating_sub(alive_for_ms),
        });
    }
    Ok(QueueRead {
        now,
        waiting: u32::try_from(live).map_err(|_| bad_reply())?,
        complete: int(items, at::COMPLETE)? == 1,
        entries,
        instances,
    })
}

impl RedisStore {
    /// `waiters.lua`: the first `limit` live waiters of `resource`'s fair
    /// queue, in order, and the instances they wait on.
    pub(in crate::store) async fn waiters(
        &self,
        resource: &ResourceId,
        limit: usize,
    ) -> Result<QueueRead, StoreError> {
        let buf = KeyBuf::new(&self.namespace, resource, ["queue", "ask"], None);
        let all = buf.get();
        let tag = resource.tag();
        let (limit, scan) = (limit.to_string(), QUEUE_SCAN.to_string());
        let args = Args {
            limit: &limit,
            scan: &scan,
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
        decode(&done.value)
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
            lua::WAITERS.entry,
            names(&keys(&Default::default())),
            names(&Args::default().named()),
        );
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_queue_decodes_without_secrets() {
        let items = vec![
            Value::Int(1),
            Value::Int(10_000),
            Value::Int(2),
            Value::Int(1),
            Value::Int(1),
            bulk("x:ab12:7"),
            bulk("4000000"),
            bulk("\u{1e}60000|pod-9"),
            bulk("ab12"),
            Value::Int(11_500),
        ];
        let read = decode(&items).expect("decoded");
        assert_eq!((read.waiting, read.complete), (2, true));
        assert_eq!(read.entries.len(), 1);
        let e = &read.entries[0];
        assert_eq!(
            (e.instance.as_str(), e.mode, e.since),
            ("ab12", Mode::Exclusive, StoreTime(4_000))
        );
        assert_eq!(e.holder.as_ref().map(|h| h.as_str()), Some("pod-9"));
        assert_eq!(read.instances[0].alive_for_ms, 1_500);
        assert_eq!(read.instances[0].heartbeat_age_ms, 500);
        assert!(decode(&items[..items.len() - 1]).is_err());
        assert!(decode(&items[..7]).is_err());
        assert_eq!(member_parts("s:i:1"), Some((Mode::Shared, "i")));
        assert_eq!(member_parts("~i"), None);
        assert_eq!(member_parts("x::1"), None);
    }
}
