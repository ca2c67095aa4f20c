//! Small decoders of script replies shared by the verbs.

use redis::Value;

use super::reply::{bad_reply, ints};
use crate::domain::StoreTime;
use crate::store::StoreError;

pub(super) fn non_negative(pttl: i64) -> Option<u64> {
    u64::try_from(pttl).ok()
}

/// The inspect reply's head: six integers around the mode letter at 4.
pub(super) fn ints_or_mode(items: &[Value]) -> Result<[i64; 7], StoreError> {
    if items.len() < 7 {
        return Err(bad_reply());
    }
    let [status, changes, live, limit] = ints::<4>(items)?;
    let [delay, held_by] = ints::<2>(&items[5..])?;
    Ok([status, changes, live, limit, 0, delay, held_by])
}

pub(super) fn store_time(ms: i64) -> Result<StoreTime, StoreError> {
    u64::try_from(ms).map(StoreTime).map_err(|_| bad_reply())
}

pub(super) fn token_of(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v)
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(bad_reply)
}
