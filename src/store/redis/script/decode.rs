//! Reading one item of a script answer (`{status, ...}`, the nonce tag
//! already replaced by the status): an integer, a time, a fencing token, a
//! holder label. Each script's module names the positions it reads.

use redis::Value;

use super::super::reply::bad_reply;
use crate::domain::{HolderLabel, StoreTime};
use crate::store::StoreError;

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
/// its tombstone says why (`items[1]`); `revoked` is the only reason yet.
pub const ENDED_EARLY: i64 = -2;

/// Whether the tombstone's reason at `items[1]` is one this build knows
/// (`revoked`); anything else is a bad reply.
pub fn revoked(items: &[Value]) -> Result<(), StoreError> {
    match text(items, 1)? {
        "revoked" => Ok(()),
        _ => Err(bad_reply()),
    }
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

/// The holder label at `items[at]`: `''` is none; anything that is not a
/// label the service could have written is a bad reply.
pub fn label(items: &[Value], at: usize) -> Result<Option<HolderLabel>, StoreError> {
    let text = match items.get(at) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).map_err(|_| bad_reply())?,
        Some(Value::SimpleString(s)) => s.as_str(),
        _ => return Err(bad_reply()),
    };
    if text.is_empty() {
        return Ok(None);
    }
    HolderLabel::parse(text).map(Some).map_err(|_| bad_reply())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn labels_are_empty_or_valid() {
        assert_eq!(label(&[bulk("")], 0), Ok(None));
        assert_eq!(
            label(&[bulk("pod-1|a")], 0).map(|l| l.map(|l| l.as_str().to_owned())),
            Ok(Some("pod-1|a".to_owned()))
        );
        assert!(label(&[bulk("a\nb")], 0).is_err());
        assert!(label(&[Value::Int(1)], 0).is_err());
        assert!(label(&[], 0).is_err());
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
