//! The key layout: every key of a resource shares its hash tag
//! (`{<purpose>:<digest>}`), so one script touches one Cluster slot
//! (docs/decisions/storage-v2.md), and the lifetimes the scripts are given.

use crate::domain::{Attempt, ResourceId};

/// The key of a resource's lease: `<ns>:lease:v2:{<purpose>:<digest>}`.
pub fn lease_key(namespace: &str, resource: &ResourceId) -> String {
    key(namespace, "lease", resource)
}

/// The key of a resource's fencing counter: `<ns>:seq:v2:{<purpose>:<digest>}`.
pub fn seq_key(namespace: &str, resource: &ResourceId) -> String {
    key(namespace, "seq", resource)
}

/// The key of a resource's history: `<ns>:hist:v2:{<purpose>:<digest>}`, a
/// list the record scripts write (and derive from the lease key, as they
/// do the queue and expiry index keys; docs/decisions/storage-v2.md, "History").
pub fn history_key(namespace: &str, resource: &ResourceId) -> String {
    key(namespace, "hist", resource)
}

/// The claim key of `attempt`'s permit (lua/acquire.lua `KEYS[7]`):
/// `<ns>:claim:v2:{<purpose>:<digest>}:p:<owner token>:<operation id>`.
pub(super) fn claim_key(namespace: &str, resource: &ResourceId, attempt: &Attempt) -> String {
    let (owner, op) = (attempt.owner_token.expose(), attempt.operation_id.as_str());
    let mut claim = key(namespace, "claim", resource);
    claim.reserve(owner.len() + op.len() + 4);
    for part in [":p:", owner, ":", op] {
        claim.push_str(part);
    }
    claim
}

/// `<ns>:<kind>:v2:{<purpose>:<digest>}`, built in one allocation (keys are
/// built on every request; `format!` grew each one several times).
pub(super) fn key(namespace: &str, kind: &str, resource: &ResourceId) -> String {
    let (purpose, digest) = (resource.purpose.as_str(), resource.digest.as_str());
    let mut key =
        String::with_capacity(namespace.len() + kind.len() + purpose.len() + digest.len() + 8);
    for part in [namespace, ":", kind, ":v2:{", purpose, ":", digest, "}"] {
        key.push_str(part);
    }
    key
}

/// How long a fencing counter outlives its last acquisition. Losing it is
/// safe (the server clock floors the next token); keeping it bounds memory.
pub(super) const SEQ_KEY_TTL_MS: u64 = 7 * 24 * 3600 * 1000;
/// [`SEQ_KEY_TTL_MS`] as a script argument.
pub(super) const SEQ_KEY_TTL_TEXT: &str = "604800000";
/// How far ahead an instance that follows a resource marks it watched; its
/// watch group re-reads (and so re-marks) well within this.
pub(super) const WATCH_MARK_MS: &str = "30000";
/// How far ahead a heartbeat keeps this instance's queue entries alive; a
/// SIGKILLed instance's waiters stop holding up a queue within this.
pub(super) const QUEUE_HORIZON_MS: &str = "2000";

/// The `KEYS` of the scripts of one lease record (acquire, renew, release,
/// inspect), as their headers name them: the record and its sequence.
pub(super) fn record_keys<'a>(lease: &'a str, seq: &'a str) -> [(&'static str, &'a str); 2] {
    [("record", lease), ("sequence", seq)]
}
