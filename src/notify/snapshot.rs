//! [`Snapshot`]: a state a watch group read, shared by every watcher of the
//! resource: its JSON and its events are rendered once, whoever they go to.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::domain::{Change, Inspection, Revocation};

/// A state a group read, and when.
#[derive(Debug)]
pub struct Snapshot {
    /// What the store answered (no `heldBy`: a group reads as nobody).
    pub inspection: Inspection,
    /// When the read completed.
    pub read_at: Instant,
    /// The inspection as JSON, rendered once for every watcher.
    json: OnceLock<String>,
    /// This state's event as sent, per change kind ([`kind_index`]):
    /// encoded once, shared by every watcher it goes to.
    encoded: [OnceLock<Bytes>; KINDS],
    /// Who broke the lease and why, when this state follows a break.
    pub revocation: Option<Revocation>,
}

impl Snapshot {
    /// A state read just now.
    pub fn new(inspection: Inspection) -> Self {
        Self {
            inspection,
            read_at: Instant::now(),
            json: OnceLock::new(),
            encoded: Default::default(),
            revocation: None,
        }
    }

    /// This state's event for `change` as `encode` writes it: encoded on
    /// the first call, then the same bytes (a reference count, no copy)
    /// for every other watcher the change goes to.
    pub fn encoded(&self, change: Change, encode: impl FnOnce(&Self) -> Bytes) -> Bytes {
        self.encoded[kind_index(change)]
            .get_or_init(|| encode(self))
            .clone()
    }

    /// The inspection as read, as JSON: serialized once, however many
    /// watchers a change goes to (`remainingMs` as of the read, which for a
    /// change event is a moment ago).
    pub fn json(&self) -> &str {
        self.json
            .get_or_init(|| serde_json::to_string(&self.inspection).unwrap_or_default())
    }

    /// The version.
    pub fn version(&self) -> &str {
        &self.inspection.version
    }

    /// The inspection as of now: every remaining time counted down since
    /// the read.
    pub fn now(&self) -> Inspection {
        let mut inspection = self.inspection.clone();
        let elapsed = u64::try_from(self.read_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        let left = |ms: u64| ms.saturating_sub(elapsed);
        inspection.remaining_ms = inspection.remaining_ms.map(left);
        inspection.lock_delay_ms = inspection.lock_delay_ms.map(|ms| left(ms).max(1));
        for permit in &mut inspection.permits {
            permit.remaining_ms = left(permit.remaining_ms);
        }
        inspection
    }

    /// When the first of the holders' permits runs out, as far as this read
    /// knows.
    pub(super) fn expires_at(&self) -> Option<Instant> {
        let i = &self.inspection;
        let soonest = i
            .permits
            .iter()
            .map(|p| p.remaining_ms)
            .min()
            .or(i.remaining_ms)?;
        i.held
            .then(|| self.read_at + Duration::from_millis(soonest))
    }

    /// The fencing tokens of the live permits, each with its end.
    pub(super) fn fences(&self) -> Vec<(u64, Instant)> {
        let i = &self.inspection;
        let at = |ms: u64| self.read_at + Duration::from_millis(ms);
        if !i.permits.is_empty() {
            return i
                .permits
                .iter()
                .map(|p| (p.fencing_token, at(p.remaining_ms)))
                .collect();
        }
        match (i.held, i.fencing_token) {
            (true, Some(fence)) => vec![(fence, at(i.remaining_ms.unwrap_or(0)))],
            _ => Vec::new(),
        }
    }
}

/// Kinds of change ([`kind_index`]).
pub(super) const KINDS: usize = 5;

pub(super) fn kind_index(change: Change) -> usize {
    match change {
        Change::Acquired => 0,
        Change::Released => 1,
        Change::Expired => 2,
        Change::HolderChanged => 3,
        Change::Revoked => 4,
    }
}
