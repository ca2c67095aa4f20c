//! `lua/history.lua` from the Rust side, and the history entries the
//! record scripts write (`<kind>|<at>|<fence>|<version>|[<extra>|]<holder>`,
//! acquire.lua's header), decoded into [`HistoryEntry`].

use std::sync::LazyLock;

use super::super::call::Call;
use super::super::evalsha::{values, Named, Script};
use super::super::keys::history_key;
use super::super::lua;
use super::super::reply::bad_reply;
use super::super::store::RedisStore;
use super::decode::{holder_slot, int, store_time, STATUS};
use crate::domain::{HistoryEntry, HistoryEvent, ResourceId, StoreTime};
use crate::store::StoreError;

/// The script, hashed once.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("history", lua::HISTORY.assembled));

/// A read: no `WAIT`.
const WAITS_FOR_REPLICAS: bool = false;

/// The script's `KEYS`, as its header names them.
fn keys(history: &str) -> Named<'_, 1> {
    [("history", history)]
}

/// The script's `ARGV` (the nonce, last, is added per call).
#[derive(Default)]
struct Args<'a> {
    limit: &'a str,
}

impl<'a> Args<'a> {
    /// Each argument with its header name, in `ARGV` order.
    fn named(&self) -> Named<'a, 1> {
        [("limit", self.limit)]
    }
}

/// Positions in `{tag(1), now, entry...}`.
mod at {
    pub const NOW: usize = 1;
    pub const FIRST_ENTRY: usize = 2;
}

/// One entry as a script wrote it; `None` when it is not one the scripts
/// write (an unknown kind from a later release is skipped by the caller).
pub(in crate::store) fn parse_entry(text: &str) -> Option<HistoryEntry> {
    let mut parts = text.splitn(5, '|');
    let kind = parts.next()?;
    let at = StoreTime(parts.next()?.parse().ok()?);
    let fencing_token = parts.next()?.parse().ok()?;
    let version = parts.next()?.to_owned();
    let rest = parts.next()?;
    let (event, noticed, holder) = match kind {
        "a" => (HistoryEvent::Acquired, false, rest),
        "r" => (HistoryEvent::Released, false, rest),
        "e" => (HistoryEvent::SessionEnded, false, rest),
        "x" => (HistoryEvent::Expired, false, rest),
        "X" => (HistoryEvent::Expired, true, rest),
        "h" => (HistoryEvent::HolderChanged, false, rest),
        "d" => {
            let (ms, holder) = rest.split_once('|')?;
            let lock_delay_ms = ms.parse().ok()?;
            (HistoryEvent::LockDelay { lock_delay_ms }, false, holder)
        }
        "b" => {
            // b|at|fence|version|<key name>|<reason bytes>|<reason><holder>
            let (key_name, rest) = rest.split_once('|')?;
            let (len, rest) = rest.split_once('|')?;
            let len: usize = len.parse().ok()?;
            let (reason, holder) = (rest.get(..len)?, rest.get(len..)?);
            let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
            let event = HistoryEvent::Revoked {
                reason: some(reason),
                key_name: some(key_name),
            };
            (event, false, holder)
        }
        _ => return None,
    };
    // The permit's label slot, a hold bound's mark and all.
    let (holder, _max_hold_ms, _session) = holder_slot(holder)?;
    Some(HistoryEntry {
        event,
        at,
        noticed,
        fencing_token,
        version,
        holder,
    })
}

impl RedisStore {
    /// `history.lua`: the newest `limit` entries of `resource`'s history
    /// within the age bound, newest first.
    pub(in crate::store) async fn history(
        &self,
        resource: &ResourceId,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let history = history_key(&self.namespace, resource);
        let tag = resource.tag();
        let limit = limit.to_string();
        let done = self
            .run(Call {
                script: &SCRIPT,
                tag: &tag,
                keys: &values(&keys(&history)),
                args: &values(&Args { limit: &limit }.named()),
                acks: self.acks.filter(|_| WAITS_FOR_REPLICAS),
            })
            .await?;
        decode(&done.value, self.history)
    }
}

/// `{1, now, entry...}` → the entries the bound still shows.
fn decode(
    items: &[redis::Value],
    bound: crate::domain::HistoryBound,
) -> Result<Vec<HistoryEntry>, StoreError> {
    if int(items, STATUS)? != 1 {
        return Err(bad_reply());
    }
    let now = store_time(int(items, at::NOW)?)?;
    let mut entries = Vec::with_capacity(items.len().saturating_sub(at::FIRST_ENTRY));
    for item in items.iter().skip(at::FIRST_ENTRY) {
        let redis::Value::BulkString(bytes) = item else {
            return Err(bad_reply());
        };
        let entry = std::str::from_utf8(bytes).ok().and_then(parse_entry);
        if let Some(entry) = entry.filter(|e| bound.keeps(e.at, now)) {
            entries.push(entry);
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::super::super::evalsha::names;
    use super::super::header;
    use super::*;
    use crate::domain::HistoryBound;

    #[test]
    fn the_header_lists_the_arguments_rust_passes() {
        header::assert_lists(
            lua::HISTORY.entry,
            names(&keys("")),
            names(&Args::default().named()),
        );
    }

    #[test]
    fn entries_decode_by_kind() {
        let a = parse_entry("a|1000|7|3.1|pod|1").expect("acquired");
        assert_eq!(a.event, HistoryEvent::Acquired);
        assert_eq!(
            (a.at, a.fencing_token, a.version.as_str()),
            (StoreTime(1000), 7, "3.1")
        );
        assert_eq!(
            a.holder.map(|h| h.as_str().to_owned()),
            Some("pod|1".into())
        );
        assert_eq!(parse_entry("r|1|7|3.0|").map(|e| e.holder), Some(None));
        // A bounded hold's mark is not part of the label.
        assert_eq!(
            parse_entry("d|5|7|3.0|250|\u{1e}60000|pod").and_then(|e| e.holder),
            crate::domain::HolderLabel::parse("pod").ok()
        );
        assert!(parse_entry("X|5|7|3.0|").is_some_and(|e| e.noticed));
        assert_eq!(
            parse_entry("d|5|7|3.0|250|").map(|e| e.event),
            Some(HistoryEvent::LockDelay { lock_delay_ms: 250 })
        );
        let b = parse_entry("b|5|7|3.0|ops|6|stuck!pod-1").expect("revoked");
        assert_eq!(
            b.event,
            HistoryEvent::Revoked {
                reason: Some("stuck!".into()),
                key_name: Some("ops".into())
            }
        );
        assert_eq!(
            b.holder.map(|h| h.as_str().to_owned()),
            Some("pod-1".into())
        );
        for bad in [
            "",
            "a|x|7|3.1|",
            "q|1|7|3.1|",
            "d|5|7|3.0|",
            "b|5|7|3.0|ops|9|ab",
        ] {
            assert_eq!(parse_entry(bad), None, "{bad}");
        }
    }

    #[test]
    fn old_entries_are_left_out() {
        use redis::Value;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let bound = HistoryBound {
            entries: 10,
            max_age_ms: 100,
        };
        let items = [
            Value::Int(1),
            Value::Int(1000),
            bulk("r|950|8|2.0|"),
            bulk("zz"),
            bulk("a|900|8|2.1|"),
        ];
        let got = decode(&items, bound).expect("decoded");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].event, HistoryEvent::Released);
    }
}
