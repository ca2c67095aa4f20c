//! The instances sharing the store, as the roster of their heartbeats
//! lists them (`GET /instances`; docs/storage.md, "Keys"), and the
//! roster's bounds.

use std::time::Duration;

use super::StoreTime;

/// How often an instance beats into the roster.
pub const BEAT_EVERY: Duration = Duration::from_secs(5);

/// An instance whose latest beat is older than this (3 beats) is gone
/// from the roster; the roster key itself expires this long after the
/// latest beat of any instance.
pub const STALE_AFTER: Duration = Duration::from_secs(15);

/// The most instances the roster lists: a beat that finds it full of live
/// instances is not added (and logs that, at most once a minute).
pub const ROSTER_CAP: usize = 256;

/// One instance as the roster lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSeen {
    /// Random per process (the id its fair-queue members carry).
    pub id: String,
    /// Its service version.
    pub version: String,
    /// When it started serving (its own clock).
    pub started: StoreTime,
    /// How long ago its latest beat was, by the store's clock.
    pub beat_age_ms: u64,
    /// Whether it is the instance answering.
    pub this: bool,
}

/// The instances that beat within [`STALE_AFTER`], by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roster {
    /// The store's clock when it read.
    pub now: StoreTime,
    /// At most [`ROSTER_CAP`], sorted by id.
    pub instances: Vec<InstanceSeen>,
}

impl Roster {
    /// The roster of `instances`, sorted by id.
    pub fn sorted(now: StoreTime, mut instances: Vec<InstanceSeen>) -> Self {
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        Self { now, instances }
    }
}
