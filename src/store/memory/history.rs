//! The embedded store's history of each resource: the same entries the
//! Redis scripts write (docs/decisions/storage-v2.md, "History"), kept in a map
//! beside the leases, bounded per resource and in the number of resources.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use crate::domain::{HistoryBound, HistoryEntry, HistoryEvent, StoreTime};
use crate::store::{EndedHold, HoldEnd};

use super::records::{Entry, Permit};

/// Every resource's history, newest entry first.
pub(super) struct Histories {
    map: HashMap<String, VecDeque<HistoryEntry>>,
    bound: HistoryBound,
    /// Resources with a history, at most (past it, the stale go, then the
    /// oldest-written).
    cap: usize,
    /// Ends no release reported (an expiry noted, a break), by resource,
    /// until an acquire, release or break of it hands them on
    /// ([`Histories::take_ended`]); at most [`ENDED_MAX`] resources.
    ended: HashMap<String, Vec<EndedHold>>,
}

/// Most resources with ends waiting to be taken. An expiry noted by an
/// inspect or a renew waits for the resource's next acquire, release or
/// break, which may never come; past this many such resources the waiting
/// ends are dropped (not observed), so they never pile up.
const ENDED_MAX: usize = 4096;

impl Histories {
    pub(super) fn new(bound: HistoryBound, cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            bound,
            cap: cap.max(1024),
            ended: HashMap::new(),
        }
    }

    /// Records that a permit of `key` ended by `end` after `held_ms`.
    pub(super) fn ended(&mut self, key: &str, end: HoldEnd, held_ms: u64) {
        let hold = EndedHold { end, held_ms };
        if let Some(waiting) = self.ended.get_mut(key) {
            waiting.push(hold);
            return;
        }
        if self.ended.len() >= ENDED_MAX {
            self.ended.clear();
        }
        self.ended.insert(key.to_owned(), vec![hold]);
    }

    /// The ends recorded for `key`, taken.
    pub(super) fn take_ended(&mut self, key: &str) -> Vec<EndedHold> {
        self.ended.remove(key).unwrap_or_default()
    }

    pub(super) fn bound(&self) -> HistoryBound {
        self.bound
    }

    /// Adds `entry` as the newest of `key`'s history, trimmed to the bound.
    pub(super) fn push(&mut self, key: &str, entry: HistoryEntry) {
        if !self.map.contains_key(key) && self.map.len() >= self.cap {
            self.shed(entry.at);
        }
        let list = self.map.entry(key.to_owned()).or_default();
        list.push_front(entry);
        list.truncate(self.bound.entries as usize);
    }

    /// Drops the histories whose newest entry is past the age bound (the
    /// sweeper, as Redis drops a history key with its PTTL).
    pub(super) fn drop_aged(&mut self, now: StoreTime) {
        let bound = self.bound;
        self.map
            .retain(|_, list| list.front().is_some_and(|e| bound.keeps(e.at, now)));
    }

    /// Resources with a history, their entries, and resources with ends
    /// waiting to be taken.
    pub(super) fn sizes(&self) -> (usize, usize, usize) {
        let entries = self.map.values().map(VecDeque::len).sum();
        (self.map.len(), entries, self.ended.len())
    }

    /// Makes room for one more resource: drops the histories whose newest
    /// entry is past the age bound, and if none was, the one written least
    /// recently.
    fn shed(&mut self, now: StoreTime) {
        let bound = self.bound;
        self.map
            .retain(|_, list| list.front().is_some_and(|e| bound.keeps(e.at, now)));
        if self.map.len() >= self.cap {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, list)| list.front().map_or(0, |e| e.at.0))
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        }
    }

    /// Writes, once per permit, the expiry of every permit of `entry` that
    /// ran out (at its expiry), then the lock-delay it started: what the
    /// Redis scripts write when they read an expired permit.
    pub(super) fn note_expiries(&mut self, key: &str, entry: &mut Entry, now: Instant) {
        if !entry.permits.iter().any(|p| !p.noted && !p.live(now)) {
            return;
        }
        let live = entry.live_count(now);
        let version = format!("{}.{live}", entry.changes);
        for p in entry
            .permits
            .iter_mut()
            .filter(|p| !p.live(now) && !p.noted)
        {
            p.noted = true;
            // The wall-clock expiry, as the Redis scripts compute it.
            let at = StoreTime(p.renewed_at.0.saturating_add(p.ttl_ms));
            self.push(key, of(p, HistoryEvent::Expired, at, &version));
            self.ended(key, HoldEnd::Expired, at.0.saturating_sub(p.acquired_at.0));
            if !p.lock_delay.is_zero() {
                let lock_delay_ms = u64::try_from(p.lock_delay.as_millis()).unwrap_or(u64::MAX);
                self.push(
                    key,
                    of(p, HistoryEvent::LockDelay { lock_delay_ms }, at, &version),
                );
            }
        }
    }

    /// The newest `limit` entries of `key` within the age bound at `now`.
    pub(super) fn read(&self, key: &str, limit: usize, now: StoreTime) -> Vec<HistoryEntry> {
        self.map.get(key).map_or_else(Vec::new, |list| {
            list.iter()
                .filter(|e| self.bound.keeps(e.at, now))
                .take(limit)
                .cloned()
                .collect()
        })
    }
}

/// The entry `event` of permit `p` at `at`, the resource then at `version`.
pub(super) fn of(p: &Permit, event: HistoryEvent, at: StoreTime, version: &str) -> HistoryEntry {
    HistoryEntry {
        event,
        at,
        noticed: false,
        fencing_token: p.fencing_token,
        version: version.to_owned(),
        holder: p.holder.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_taken_by_their_resource_and_never_pile_up() {
        let mut h = Histories::new(HistoryBound::default(), 0);
        h.ended("a", HoldEnd::Expired, 5);
        h.ended("b", HoldEnd::Broken, 7);
        h.ended("a", HoldEnd::Broken, 9);
        let a: Vec<u64> = h.take_ended("a").iter().map(|e| e.held_ms).collect();
        assert_eq!(a, [5, 9]);
        assert!(h.take_ended("a").is_empty(), "taken once");
        assert_eq!(h.take_ended("b").len(), 1);
        // Ends nobody takes (noted by inspects) stay bounded: past the cap
        // the waiting ones go, and a new end is still kept.
        for i in 0..ENDED_MAX {
            h.ended(&format!("r{i}"), HoldEnd::Expired, 1);
        }
        assert_eq!(h.ended.len(), ENDED_MAX);
        h.ended("c", HoldEnd::Expired, 3);
        assert_eq!(h.ended.len(), 1);
        assert_eq!(h.take_ended("c").len(), 1);
    }
}
