//! What this instance last saw written of each plain lease its session
//! renews (docs/sessions.md, "What a session renew costs Redis"), so that
//! `lua/session_renew.lua` compares a lease's record whole and writes the
//! next from pieces given, instead of taking the record apart: the
//! renewing instance's memory traded for Redis's work.
//!
//! Only ever a hint: the script writes from it only where the record in
//! Redis is exactly the text remembered, so a stale, lost or wrong entry
//! costs the one lease the longer path, never a wrong write. Bounded:
//! at most [`CAP`] leases; a full map is emptied and fills again with
//! the leases still renewed.

use std::collections::HashMap;
use std::sync::Mutex;

/// The most leases remembered (about 250 bytes each).
pub const CAP: usize = 50_000;

/// One plain lease's record as last written:
/// `p:<token>:<op>|fence|exp|acq|renewed|ttl|ld|slot` (`lua/acquire.lua`;
/// neither the owner token nor the operation id holds a `|`). `Debug`
/// leaves out the text: it holds the owner token.
#[derive(Clone, PartialEq, Eq)]
pub struct Written {
    text: String,
    /// Its expiry and renewedAt (ms).
    pub expires_at: u64,
    renewed_at: u64,
    /// Where its expiry starts and ends, its renewedAt starts, its TTL ends.
    exp: (usize, usize),
    renewed: usize,
    ttl_end: usize,
}

impl Written {
    /// `text` when it is a plain lease's record with no bound on its hold
    /// (a bounded one is never renewed on the light path).
    pub fn parse(text: String) -> Option<Self> {
        let bars: Vec<usize> = text
            .bytes()
            .enumerate()
            .filter(|&(_, b)| b == b'|')
            .map(|(i, _)| i)
            .take(7)
            .collect();
        let [op, fence, exp, acq, renewed, ttl, _ld] = bars[..] else {
            return None;
        };
        let digits = |from: usize, to: usize| {
            to > from + 1 && text.as_bytes()[from + 1..to].iter().all(u8::is_ascii_digit)
        };
        let plain = text.starts_with("p:")
            && [
                (op, fence),
                (fence, exp),
                (exp, acq),
                (acq, renewed),
                (renewed, ttl),
            ]
            .iter()
            .all(|&(a, b)| digits(a, b))
            && !text[ttl + 1..]
                .split('|')
                .nth(1)
                .is_some_and(|s| s.starts_with('\x1e'));
        let number = |from: usize, to: usize| text.get(from + 1..to)?.parse::<u64>().ok();
        let (expires_at, renewed_at) = (number(fence, exp)?, number(acq, renewed)?);
        plain.then_some(Self {
            expires_at,
            renewed_at,
            exp: (fence + 1, exp),
            renewed: acq + 1,
            ttl_end: ttl,
            text,
        })
    }

    /// Whether this is the permit of `owner` for operation `op`: the map
    /// is keyed by record only, and what this instance last wrote there
    /// may be another session's (the lease was broken or lost, and the
    /// other session took the resource). Only the owner's own record is
    /// ever sent to be compared and rewritten.
    pub fn is_for(&self, owner: &str, op: &str) -> bool {
        self.text
            .strip_prefix("p:")
            .and_then(|t| t.strip_prefix(owner))
            .and_then(|t| t.strip_prefix(':'))
            .and_then(|t| t.strip_prefix(op))
            .is_some_and(|t| t.starts_with('|'))
    }

    /// The record as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The record a renew at `now` to expiry `ends` writes in its place
    /// (`lua/session_renew.lua` writes it as given): `None` when `now` is
    /// before this record's renewedAt (a clock gone back: the script then
    /// writes its own) or not before `ends`.
    pub fn renewed(&self, ends: u64, now: u64) -> Option<Self> {
        if now < self.renewed_at {
            return None;
        }
        let t = &self.text;
        let (from, to) = self.exp;
        let text = format!(
            "{}{ends}{}{now}|{}{}",
            &t[..from],
            &t[to..self.renewed],
            ends.checked_sub(now).filter(|&ttl| ttl > 0)?,
            &t[self.ttl_end..]
        );
        Self::parse(text)
    }
}

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Written")
            .field("expires_at", &self.expires_at)
            .field("renewed_at", &self.renewed_at)
            .finish_non_exhaustive()
    }
}

/// Leases' records by record key.
#[derive(Debug, Default)]
pub struct Remembered {
    map: Mutex<HashMap<String, Written>>,
}

impl Remembered {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is remembered of the record at `key`.
    pub fn get(&self, key: &str) -> Option<Written> {
        self.map().get(key).cloned()
    }

    /// Remembers `written` at `key` (or forgets the key: `None`); `now`
    /// (ms): a full map first forgets the records expired by then (a
    /// lease released or ended since), then, still full, everything.
    pub fn set(&self, key: &str, written: Option<Written>, now: u64) {
        let mut map = self.map();
        match written {
            Some(w) => {
                if map.len() >= CAP && !map.contains_key(key) {
                    map.retain(|_, w| w.expires_at > now);
                    if map.len() >= CAP {
                        map.clear();
                    }
                }
                map.insert(key.to_owned(), w);
            }
            None => {
                map.remove(key);
            }
        }
    }

    /// How many leases are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REC: &str = "p:tok-1:op.2|7|1000|500|600|400|0|worker-7";

    #[test]
    fn a_plain_record_is_read_and_renewed_as_the_script_writes_it() {
        let w = Written::parse(REC.to_owned()).expect("a plain record");
        assert_eq!((w.expires_at, w.renewed_at), (1000, 600));
        let next = w.renewed(2000, 1500).expect("renewed");
        assert_eq!(next.text(), "p:tok-1:op.2|7|2000|500|1500|500|0|worker-7");
        assert_eq!((next.expires_at, next.renewed_at), (2000, 1500));
        // Nothing to write from memory: an expiry not after now, a clock
        // gone back.
        assert_eq!(w.renewed(1500, 1500), None);
        assert_eq!(w.renewed(2000, 599), None);
    }

    #[test]
    fn a_record_is_for_its_owner_and_operation_only() {
        let w = Written::parse(REC.to_owned()).expect("a plain record");
        assert!(w.is_for("tok-1", "op.2"));
        for (owner, op) in [
            ("tok-2", "op.2"),
            ("tok-1", "op.3"),
            ("tok-1", "op."),
            ("tok", "-1:op.2"),
        ] {
            assert!(!w.is_for(owner, op), "{owner} {op}");
        }
    }

    #[test]
    fn debug_leaves_out_the_owner_token() {
        let w = Written::parse(REC.to_owned()).expect("a plain record");
        let shown = format!("{w:?} {:?}", Remembered::default());
        assert!(!shown.contains("tok-1"), "{shown}");
        assert!(shown.contains("expires_at: 1000"), "{shown}");
    }

    #[test]
    fn anything_else_is_not_remembered() {
        for bad in [
            "",
            "x:tok:op|7|1000|500|600|400|0|",
            "p:tok:op|7|10a0|500|600|400|0|",
            "p:tok:op|7|1000|500|600",
            "p:tok:op|7||500|600|400|0|",
            // A bounded hold (a slot "\x1e<maxHoldMs>|").
            "p:tok:op|7|1000|500|600|400|0|\x1e9000|w",
        ] {
            assert_eq!(Written::parse(bad.to_owned()), None, "{bad:?}");
        }
        // An empty holder slot is a plain record.
        assert!(Written::parse("p:tok:op|7|1000|500|600|400|0|".to_owned()).is_some());
    }

    #[test]
    fn a_full_map_forgets_the_expired_then_everything() {
        let r = Remembered::default();
        let (old, live) = (
            Written::parse(REC.to_owned()),
            Written::parse("p:tok:op|7|5000|500|600|4400|0|".to_owned()),
        );
        for i in 0..CAP {
            r.set(
                &i.to_string(),
                if i % 2 == 0 {
                    old.clone()
                } else {
                    live.clone()
                },
                0,
            );
        }
        assert_eq!(r.len(), CAP);
        r.set("0", old.clone(), 2000);
        assert_eq!(r.len(), CAP, "a key already there forgets nothing");
        // At 2000 the records expiring at 1000 are gone, those at 5000 stay.
        r.set("new", old.clone(), 2000);
        assert_eq!(r.len(), CAP / 2 + 1);
        assert_eq!(r.get("1"), live);
        for i in 0..CAP {
            r.set(&format!("more-{i}"), live.clone(), 2000);
        }
        assert!(r.len() <= CAP, "{}", r.len());
        r.set("new", None, 2000);
        assert_eq!(r.get("new"), None);
    }
}
