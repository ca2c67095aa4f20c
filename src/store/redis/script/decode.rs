//! Reading one item of a script answer (`{status, ...}`, the nonce tag
//! already replaced by the status): an integer, a time, a fencing token, a
//! holder label. Each script's module names the positions it reads.

use redis::Value;

use super::super::reply::bad_reply;
use crate::domain::{HolderLabel, SessionId, StoreTime};
use crate::store::{EndedEarly, EndedHold, HoldEnd, StoreError};

/// Every answer's first item: the script's status.
pub const STATUS: usize = 0;

/// The integer at `items[at]`.
pub fn int(items: &[Value], at: usize) -> Result<i64, StoreError> {
    match items.get(at) {
        Some(Value::Int(v)) => Ok(*v),
        _ => Err(bad_reply()),
    }
}

/// The text at `items[at]` (a bulk or simple string of UTF-8).
pub fn text(items: &[Value], at: usize) -> Result<&str, StoreError> {
    match items.get(at) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).map_err(|_| bad_reply()),
        Some(Value::SimpleString(s)) => Ok(s.as_str()),
        _ => Err(bad_reply()),
    }
}

/// Status `-2` of renew and release: the caller's permit ended early and
/// its tombstone says why (`items[1]`).
pub const ENDED_EARLY: i64 = -2;

/// The tombstone's reason at `items[1]`: `revoked` (break.lua) or
/// `max_hold` (renew.lua, at a hold bound); anything else is a bad reply.
pub fn ended(items: &[Value]) -> Result<EndedEarly, StoreError> {
    match text(items, 1)? {
        "revoked" => Ok(EndedEarly::Revoked),
        "max_hold" => Ok(EndedEarly::MaxHold),
        _ => Err(bad_reply()),
    }
}

/// The first byte of a permit's holder slot when the permit has a hold
/// bound: the slot is then `"\x1e<maxHoldMs>|<label>"` (a label has no
/// control characters, so the mark cannot be a label's; see
/// docs/decisions/storage-v2.md, "Bounded holds").
pub const HOLD_MARK: char = '\u{1e}';

/// The mark of a permit taken on a session (docs/design.md §18): after the
/// hold bound's, if any, `"\x1d<session id>|"` before the label.
pub const SESSION_MARK: char = '\u{1d}';

/// A permit's holder slot as the scripts store it: the label, the hold
/// bound in ms when the slot starts with [`HOLD_MARK`], and the session
/// after a [`SESSION_MARK`]. `None` when it is not what the service writes.
pub fn holder_slot(slot: &str) -> Option<Slot> {
    let (label, max_hold_ms) = match slot.strip_prefix(HOLD_MARK) {
        Some(rest) => {
            let (ms, label) = rest.split_once('|')?;
            (label, Some(ms.parse().ok()?))
        }
        None => (slot, None),
    };
    let (label, session) = match label.strip_prefix(SESSION_MARK) {
        Some(rest) => {
            let (id, label) = rest.split_once('|')?;
            (label, Some(SessionId::parse(id).ok()?))
        }
        None => (label, None),
    };
    if label.is_empty() {
        return Some((None, max_hold_ms, session));
    }
    HolderLabel::parse(label)
        .ok()
        .map(|label| (Some(label), max_hold_ms, session))
}

/// A holder slot read: the label, the hold bound, the session.
pub type Slot = (Option<HolderLabel>, Option<u64>, Option<SessionId>);

/// The hold times a script appends after an answer's own `fixed` items
/// (acquire.lua and release.lua: the expiries it wrote; break.lua: the
/// permits it broke), each ended by `end`. A negative time (the server's
/// clock stepped back) counts as 0; anything but an integer is a bad reply.
pub fn ended_holds(
    items: &[Value],
    fixed: usize,
    end: HoldEnd,
) -> Result<Vec<EndedHold>, StoreError> {
    items
        .iter()
        .skip(fixed)
        .map(|item| match item {
            Value::Int(ms) => Ok(EndedHold {
                end,
                held_ms: non_negative(*ms).unwrap_or(0),
            }),
            _ => Err(bad_reply()),
        })
        .collect()
}

/// A remaining time: `None` when negative (no expiry, or none left).
pub fn non_negative(pttl: i64) -> Option<u64> {
    u64::try_from(pttl).ok()
}

/// An instant of the store's clock, in ms.
pub fn store_time(ms: i64) -> Result<StoreTime, StoreError> {
    u64::try_from(ms).map(StoreTime).map_err(|_| bad_reply())
}

/// A fencing token: always positive.
pub fn token_of(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v)
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(bad_reply)
}

/// The holder slot at `items[at]` ([`holder_slot`]): the label (`''` is
/// none) and the hold bound; anything the service could not have written
/// is a bad reply.
pub fn label(items: &[Value], at: usize) -> Result<Slot, StoreError> {
    holder_slot(text(items, at)?).ok_or_else(bad_reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn shown(slot: &str) -> Result<(Option<String>, Option<u64>), StoreError> {
        label(&[bulk(slot)], 0).map(|(l, b, _)| (l.map(|l| l.as_str().to_owned()), b))
    }

    #[test]
    fn a_session_is_read_off_the_slot_after_a_hold_bound() {
        let id = "s1.0123456789abcdef0123456789abcdef";
        let read = |slot: &str| label(&[bulk(slot)], 0);
        let (l, b, s) = read(&format!("\u{1d}{id}|pod")).expect("slot");
        assert_eq!(
            (l.map(|l| l.as_str().to_owned()), b),
            (Some("pod".to_owned()), None)
        );
        assert_eq!(s.map(|s| s.as_str().to_owned()), Some(id.to_owned()));
        let (l, b, s) = read(&format!("\u{1e}500|\u{1d}{id}|")).expect("slot");
        assert_eq!((l, b, s.is_some()), (None, Some(500), true));
        assert!(read("\u{1d}s1.nope|pod").is_err());
        assert!(read(&format!("\u{1d}{id}")).is_err());
    }

    #[test]
    fn labels_are_empty_or_valid() {
        assert_eq!(shown(""), Ok((None, None)));
        assert_eq!(shown("pod-1|a"), Ok((Some("pod-1|a".to_owned()), None)));
        assert!(label(&[bulk("a\nb")], 0).is_err());
        assert!(label(&[Value::Int(1)], 0).is_err());
        assert!(label(&[], 0).is_err());
    }

    #[test]
    fn a_hold_bound_is_read_off_the_front_of_the_slot() {
        assert_eq!(shown("\u{1e}60000|"), Ok((None, Some(60_000))));
        assert_eq!(
            shown("\u{1e}60000|pod|1"),
            Ok((Some("pod|1".to_owned()), Some(60_000)))
        );
        assert!(shown("\u{1e}x|pod").is_err());
        assert!(shown("\u{1e}60000").is_err());
    }

    #[test]
    fn hold_times_follow_the_fixed_items() {
        let items = [
            Value::Int(1),
            Value::Int(7),
            Value::Int(1500),
            Value::Int(-3),
        ];
        let held: Vec<u64> = ended_holds(&items, 2, HoldEnd::Expired)
            .expect("holds")
            .iter()
            .map(|h| h.held_ms)
            .collect();
        assert_eq!(held, [1500, 0]);
        assert_eq!(ended_holds(&items, 4, HoldEnd::Broken), Ok(Vec::new()));
        assert!(ended_holds(&[Value::Int(1), bulk("x")], 1, HoldEnd::Expired).is_err());
    }

    #[test]
    fn ints_are_read_where_they_are() {
        let items = [Value::Int(1), Value::Int(2), bulk("x")];
        assert_eq!(int(&items, STATUS), Ok(1));
        assert_eq!(int(&items, 1), Ok(2));
        assert!(int(&items, 2).is_err());
        assert!(int(&items, 3).is_err());
    }

    #[test]
    fn times_and_tokens_are_never_negative() {
        assert_eq!(non_negative(-1), None);
        assert_eq!(non_negative(5), Some(5));
        assert!(store_time(-1).is_err());
        assert_eq!(store_time(7), Ok(StoreTime(7)));
        assert!(token_of(0).is_err());
        assert_eq!(token_of(3), Ok(3));
    }
}
