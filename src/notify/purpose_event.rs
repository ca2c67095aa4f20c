//! One event of a purpose's stream ([`PurposeEvent`]), its id and its data
//! (docs/watching.md, "Watching a purpose").

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::watch::Snapshot;
use crate::domain::{Change, ResourceDigest};

/// What an event of a purpose's stream says happened to a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurposeChange {
    /// Its version moved ([`Change`]: acquired, released, expired, …).
    Changed(Change),
    /// Its holders renewed it: the same version, a later end (`renewed`;
    /// at most one per lease per `RENEWAL_GAP`).
    Renewed,
}

impl PurposeChange {
    /// The event name (`renewed`, or the change's).
    pub fn as_str(self) -> &'static str {
        match self {
            PurposeChange::Changed(change) => change.as_str(),
            PurposeChange::Renewed => "renewed",
        }
    }
}

/// One change of a lease of the purpose.
#[derive(Debug)]
pub struct PurposeEvent {
    /// The group's epoch (the event id's first part).
    pub epoch: u32,
    /// Its place in the group's sequence (the event id's second part).
    pub seq: u64,
    /// What happened.
    pub change: PurposeChange,
    /// Which resource.
    pub digest: ResourceDigest,
    /// The state after it.
    pub snapshot: Arc<Snapshot>,
    /// The event as sent ([`PurposeEvent::encoded`]).
    pub(super) encoded: OnceLock<Bytes>,
}

impl PurposeEvent {
    /// The event as `encode` writes it: encoded on the first call, then the
    /// same bytes (a reference count, no copy) for every other watcher.
    pub fn encoded(&self, encode: impl FnOnce(&Self) -> Bytes) -> Bytes {
        self.encoded.get_or_init(|| encode(self)).clone()
    }

    /// The event id: `<epoch, 8 hex digits>-<seq>`.
    pub fn id(&self) -> String {
        event_id(self.epoch, self.seq)
    }

    /// The state as JSON with the digest first, rendered once for every
    /// watcher (`remainingMs` as of the read).
    pub fn data(&self) -> String {
        let data = with_digest(&self.digest, self.snapshot.json());
        match (&self.snapshot.revocation, self.change) {
            (Some(revocation), PurposeChange::Changed(Change::Revoked)) => {
                let who = serde_json::to_string(revocation).unwrap_or_else(|_| "{}".into());
                let open = data.strip_suffix('}').unwrap_or(&data);
                format!("{open},\"revocation\":{who}}}")
            }
            _ => data,
        }
    }
}

/// `{"digest":"…",` then the inspection's members.
pub fn with_digest(digest: &ResourceDigest, inspection_json: &str) -> String {
    let rest = inspection_json.strip_prefix('{').unwrap_or(inspection_json);
    format!("{{\"digest\":\"{}\",{rest}", digest.as_str())
}

/// An event id: `<epoch hex>-<seq>`.
pub fn event_id(epoch: u32, seq: u64) -> String {
    format!("{epoch:08x}-{seq}")
}

pub(super) fn parse_id(id: &str) -> Option<(u32, u64)> {
    let (epoch, seq) = id.split_once('-')?;
    if epoch.len() != 8 {
        return None;
    }
    Some((u32::from_str_radix(epoch, 16).ok()?, seq.parse().ok()?))
}
