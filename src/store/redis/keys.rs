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

/// The kind whose key in a [`KeyBuf`] is `attempt`'s claim key (lua/acquire.lua
/// `KEYS[7]`): `<ns>:claim:v2:{<purpose>:<digest>}:p:<owner token>:<operation id>`.
pub(super) const CLAIM: &str = "claim";

/// The kind whose entry in a [`KeyBuf`] is not a key but `attempt`'s permit
/// field, `p:<owner token>:<operation id>` (the slim scripts' first
/// argument, lua/plain_*.lua): built in the same allocation as the keys.
pub(super) const PERMIT_FIELD: &str = "permit field";

/// The `KEYS` of one script call on a resource, built into one string: one
/// allocation a call, not one a key (acquire passes 8 keys and release 9,
/// since every key a script touches comes in `KEYS`; issue 39, item 11).
pub(super) struct KeyBuf<const N: usize> {
    text: String,
    ends: [usize; N],
}

impl<const N: usize> KeyBuf<N> {
    /// The keys of `kinds` of `resource`, in that order; the kind [`CLAIM`]
    /// gets `attempt`'s claim key (without an attempt, the bare claim prefix).
    pub(super) fn new(
        namespace: &str,
        resource: &ResourceId,
        kinds: [&str; N],
        attempt: Option<&Attempt>,
    ) -> Self {
        let (purpose, digest) = (resource.purpose.as_str(), resource.digest.as_str());
        let claim = attempt.map(|a| (a.owner_token.expose(), a.operation_id.as_str()));
        let each = namespace.len() + purpose.len() + digest.len() + 8;
        let extra = claim.map_or(0, |(owner, op)| owner.len() + op.len() + 4);
        let kinds_len: usize = kinds.iter().map(|k| k.len()).sum();
        let mut text = String::with_capacity(each * N + kinds_len + extra);
        let mut ends = [0; N];
        for (kind, end) in kinds.iter().zip(ends.iter_mut()) {
            if let (true, Some((owner, op))) = (*kind == PERMIT_FIELD, claim) {
                for part in ["p:", owner, ":", op] {
                    text.push_str(part);
                }
                *end = text.len();
                continue;
            }
            for part in [namespace, ":", kind, ":v2:{", purpose, ":", digest, "}"] {
                text.push_str(part);
            }
            if let (true, Some((owner, op))) = (*kind == CLAIM, claim) {
                for part in [":p:", owner, ":", op] {
                    text.push_str(part);
                }
            }
            *end = text.len();
        }
        KeyBuf { text, ends }
    }

    /// The keys, as slices of the one string.
    pub(super) fn get(&self) -> [&str; N] {
        let mut start = 0;
        self.ends.map(|end| {
            let k = self.text.get(start..end).unwrap_or("");
            start = end;
            k
        })
    }
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

/// The least a sequence key (`<ns>:seq:v2:T`: fencing token, change
/// count, watch and queue marks) outlives its last write: past the watch
/// mark (30 s) and the queue's horizon it carries, and a margin against a
/// server clock stepped back (the clock floors the next token, design §8).
pub(super) const SEQ_KEY_FLOOR_MS: u64 = 60_000;

/// How long a sequence key outlives a write that comes without a lease's
/// TTL (docs/storage.md, "Keys"): the history's age, at least
/// [`SEQ_KEY_FLOOR_MS`]. Its change count numbers the history's versions and
/// tells an acquire that a holder may have expired unnoticed, so it lives
/// as long as the history it annotates, and no longer: losing it is safe
/// (the server clock floors the next token), and what a released resource
/// leaves behind lives an hour by default, not 7 days (design §20). An
/// acquire (and a renew's label change) keeps it at least the lease's TTL
/// and lock-delay.
pub(super) fn seq_key_ttl_ms(history_age_ms: u64) -> u64 {
    history_age_ms.max(SEQ_KEY_FLOOR_MS)
}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{OperationId, OwnerToken, Purpose, ResourceDigest};

    #[test]
    fn a_key_buf_holds_each_kinds_key_and_the_attempts_claim() {
        let resource = ResourceId {
            purpose: Purpose::parse("invoice-export").expect("purpose"),
            digest: ResourceDigest::of_raw_id("order-42"),
        };
        let attempt = Attempt {
            owner_token: OwnerToken::generate().expect("token"),
            operation_id: OperationId::parse("op-1").expect("operation id"),
        };
        let buf = KeyBuf::new("ns", &resource, ["lease", CLAIM, "seq"], Some(&attempt));
        let claim = format!(
            "{}:p:{}:op-1",
            key("ns", CLAIM, &resource),
            attempt.owner_token.expose()
        );
        assert_eq!(
            buf.get(),
            [
                lease_key("ns", &resource).as_str(),
                claim.as_str(),
                seq_key("ns", &resource).as_str()
            ]
        );
        let with_field = KeyBuf::new("ns", &resource, ["lease", PERMIT_FIELD], Some(&attempt));
        let field = format!("p:{}:op-1", attempt.owner_token.expose());
        assert_eq!(
            with_field.get(),
            [lease_key("ns", &resource).as_str(), field.as_str()]
        );
        let bare = KeyBuf::new("ns", &resource, [CLAIM], None);
        assert_eq!(bare.get(), [key("ns", CLAIM, &resource).as_str()]);
    }
}
