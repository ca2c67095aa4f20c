//! What the embedded store keeps once everything has ended (issue 39): the
//! sweeper drops tombstones past their end and histories past their age,
//! as Redis drops those keys with their PTTL, so that after the longest
//! TTL and the history age only the change stamps of freed resources
//! (bounded, the embedded counterpart of the 7-day sequence keys) and ends
//! not yet reported (bounded) remain. [`MemoryStore::residue`] counts it.

use std::time::Instant;

use super::{MemoryStore, State};
use crate::domain::StoreTime;

/// The sizes of the embedded store's maps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryResidue {
    /// Resources with a record (live permits or a lock-delay).
    pub leases: usize,
    /// Resources with tombstones.
    pub tombstoned: usize,
    /// Tombstones.
    pub tombstones: usize,
    /// Resources with a history.
    pub histories: usize,
    /// History entries.
    pub history_entries: usize,
    /// Resources with hold ends not yet reported to the metrics (at most
    /// 4 096).
    pub ended: usize,
    /// Change stamps of freed resources (at most twice the lease cap).
    pub freed: usize,
}

impl State {
    /// Part of the sweep (every second, in the background): tombstones
    /// whose permit would have ended, and histories whose newest entry is
    /// past the age bound.
    pub(super) fn drop_ended(&mut self, now: Instant, wall: StoreTime) {
        self.tombs.retain(|_, tombs| {
            tombs.retain(|t| t.until > now);
            !tombs.is_empty()
        });
        self.history.drop_aged(wall);
    }
}

impl MemoryStore {
    /// The sizes of its maps (a test reads them to see nothing is left
    /// behind; no request path calls it).
    pub fn residue(&self) -> MemoryResidue {
        let state = self.lock();
        let (histories, history_entries, ended) = state.history.sizes();
        MemoryResidue {
            leases: state.leases.len(),
            tombstoned: state.tombs.len(),
            tombstones: state.tombs.values().map(Vec::len).sum(),
            histories,
            history_entries,
            ended,
            freed: state.freed.len(),
        }
    }
}
