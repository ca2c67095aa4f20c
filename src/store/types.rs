//! The store's vocabulary, shared by both stores and the service: what a
//! verb answers (`StoreAcquire`, ..., `StoreInspect`, `StorePage`), what it
//! is asked (`AcquireSpec`, `Probe`), replication and ended holds, the
//! readiness answer, and [`StoreError`]. A leaf: the stores import it,
//! it imports neither.

use super::queueing::{InQueue, Moved};

use crate::domain::{Attempt, HeldBy, HolderLabel, LeaseShape, Mode, OwnerToken, StoreTime, Ttl};
use crate::domain::{ListCursor, ResourceDigest, SessionId};

/// A live lease as the store holds it: the public record of its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLease {
    /// The lease's fencing token.
    pub fencing_token: u64,
    /// Remaining time to live, read in the same script run.
    pub remaining_ms: u64,
    /// The TTL granted by the acquisition or the last renewal.
    pub ttl_ms: u64,
    /// When it was acquired (store clock).
    pub acquired_at: StoreTime,
    /// When it was last renewed (store clock; the acquisition if never).
    pub renewed_at: StoreTime,
    /// The public holder label, if one was given.
    pub holder: Option<HolderLabel>,
    /// The bound on the whole hold (`maxHoldMs` of the acquisition), if
    /// one was asked: no renewal reaches past `acquired_at + max_hold_ms`.
    pub max_hold_ms: Option<u64>,
    /// The lock-delay that would follow its expiry (`lockDelayMs` of the
    /// acquisition; 0: none); `None` where the store call did not read it.
    pub lock_delay_ms: Option<u64>,
    /// The session the lease is on (docs/design.md §18), if any.
    pub session: Option<SessionId>,
}

impl StoreLease {
    /// What an acquisition of `spec` (its own, or a release's grant) wrote.
    pub fn acquired(spec: &AcquireSpec<'_>, fencing_token: u64, at: StoreTime) -> Self {
        Self {
            fencing_token,
            remaining_ms: spec.ttl.ms(),
            ttl_ms: spec.ttl.ms(),
            acquired_at: at,
            renewed_at: at,
            holder: spec.holder.cloned(),
            max_hold_ms: spec.max_hold_ms,
            lock_delay_ms: Some(spec.shape.lock_delay_ms),
            session: spec.session.cloned(),
        }
    }
}

/// What an acquire asks the store for.
#[derive(Debug, Clone, Copy)]
pub struct AcquireSpec<'a> {
    /// The TTL to grant.
    pub ttl: Ttl,
    /// The public holder label.
    pub holder: Option<&'a HolderLabel>,
    /// Limit, mode and lock-delay.
    pub shape: LeaseShape,
    /// How the caller stands to the resource's fair queue (it waits, or
    /// goes only when nobody waits).
    pub queue: InQueue<&'a str>,
    /// `maxHoldMs`: no renewal of the permit reaches past its acquisition
    /// plus this (the TTL is at most this already: the service caps it).
    pub max_hold_ms: Option<u64>,
    /// The session the lease is taken on (its permit carries the id).
    pub session: Option<&'a SessionId>,
}

impl<'a> AcquireSpec<'a> {
    /// A plain lease for `ttl`, not queued.
    pub fn plain(ttl: Ttl) -> Self {
        Self {
            ttl,
            holder: None,
            shape: LeaseShape::default(),
            queue: InQueue::No,
            max_hold_ms: None,
            session: None,
        }
    }
}

/// Why an acquire found no permit for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contention {
    /// Every permit is taken, or holders of the other mode hold it.
    Held,
    /// A lock-delay runs after a holder's expiry.
    LockDelay,
    /// Free, but waiters queued earlier go first.
    Queued,
    /// The caller's queue entry is gone (its instance missed heartbeats):
    /// it must enter again.
    Requeue,
}

/// What an acquire script found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAcquire {
    /// The lease was free and is now the caller's (`remaining_ms` = the
    /// granted TTL).
    Acquired(StoreLease),
    /// The same attempt already held it; nothing changed.
    Replayed(StoreLease),
    /// Held by the same owner token for another operation.
    OwnerOperationConflict {
        /// The holder's remaining time to live.
        remaining_ms: Option<u64>,
    },
    /// No permit for the caller now.
    Contended {
        /// When to look again: the soonest holder expiry, the lock-delay
        /// left, or when the first queued waiter's heartbeat lapses.
        remaining_ms: Option<u64>,
        /// Why.
        why: Contention,
        /// What it did to the caller's queue entry.
        moved: Moved,
    },
    /// Live holders agreed on another limit.
    LimitMismatch {
        /// Their limit.
        limit: u32,
    },
}

/// What a renew script found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreRenew {
    /// The caller's lease now lives for the new TTL.
    Renewed(StoreLease),
    /// No lease.
    Absent,
    /// Someone else's lease.
    NotOwner,
    /// The caller's permit ended before its TTL said, and its tombstone
    /// says why (until the permit would have expired, or for one TTL after
    /// its hold bound).
    Ended(EndedEarly),
}

/// Why a permit ended before its holder's TTL said, as its tombstone
/// records it (renew answers `lost`, release `already_absent`, with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedEarly {
    /// An operator broke it (`POST …/break`).
    Revoked,
    /// Its `maxHoldMs` ran out: renewals stopped at the bound.
    MaxHold,
}

/// What a release script found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreRelease {
    /// The caller's lease was deleted.
    Released {
        /// How long the permit was held: the store's clock at the release
        /// minus the permit's `acquiredAt`, in ms (for the hold-time
        /// histogram; not part of the API's answer).
        held_ms: u64,
    },
    /// There was no lease.
    AlreadyAbsent,
    /// Someone else's lease; untouched.
    NotOwner,
    /// The caller's permit is gone before its TTL said (tombstone: an
    /// operator broke it, or its hold bound ran out).
    Ended(EndedEarly),
}

/// What a break script found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreBreak {
    /// This many live permits were removed, each leaving a tombstone.
    Broken(u32),
    /// No live permit (with that fencing token): nothing changed.
    NothingToBreak,
}

/// Who asks an inspect, for `heldBy`.
#[derive(Debug, Clone, Copy)]
pub enum Probe<'a> {
    /// Nobody in particular: no `heldBy`.
    Anyone,
    /// An owner token alone: compared by token only.
    Owner(&'a OwnerToken),
    /// A whole attempt.
    Attempt(&'a Attempt),
}

/// The most permits one inspection or one listed lease shows (the oldest,
/// by fencing token); `holders` counts them all. A read of a counting lease
/// with 10 000 holders stays one bounded answer (docs/design.md §14), and a
/// list page of 100 leases at most 100 × this many permits.
pub const PERMITS_SHOWN: usize = 100;

/// What an inspect script read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreInspect {
    /// No live holder.
    Free {
        /// The resource's version (`<changes>.0`).
        version: String,
        /// A lock-delay that runs: how long it has left.
        lock_delay_ms: Option<u64>,
    },
    /// Held by one or more.
    Held {
        /// How many live permits there are (all of them).
        holders: u32,
        /// The live permits with the smallest fencing tokens (the oldest),
        /// at most [`PERMITS_SHOWN`], oldest first.
        permits: Vec<StoreLease>,
        /// The limit its holders agreed on.
        limit: u32,
        /// Their mode.
        mode: Mode,
        /// Relative to the prober, if one asked.
        held_by: Option<HeldBy>,
        /// The resource's version.
        version: String,
        /// A lock-delay that runs beside the live permits (a permit of a
        /// counting lease expired): how long it has left.
        lock_delay_ms: Option<u64>,
    },
}

impl StoreInspect {
    /// The resource's version.
    pub fn version(&self) -> &str {
        match self {
            StoreInspect::Free { version, .. } | StoreInspect::Held { version, .. } => version,
        }
    }
}

/// A held resource as a listing reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreListed {
    /// The resource.
    pub digest: ResourceDigest,
    /// How many live permits there are (all of them).
    pub holders: u32,
    /// The live permits with the smallest fencing tokens (the oldest), at
    /// most [`PERMITS_SHOWN`], oldest first; never empty.
    pub permits: Vec<StoreLease>,
    /// The limit its holders agreed on.
    pub limit: u32,
    /// Their mode.
    pub mode: Mode,
}

/// One page of a purpose's leases, as a store read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorePage {
    /// The held resources of this page, each at most once.
    pub leases: Vec<StoreListed>,
    /// Where the next page starts; `None` when the listing is complete.
    pub next: Option<ListCursor>,
}

/// A store call that did not produce an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Definitely not applied (nothing sent, or a definite refusal).
    #[error("store unavailable: {0}")]
    Unavailable(&'static str),
    /// Sent, but no certain reply: it may have been applied.
    #[error("store reply uncertain: {0}")]
    Indeterminate(&'static str),
}

/// How many replicas acknowledged a write, when replica acknowledgements
/// are configured (`LEASEHOLD_REDIS_MIN_REPLICAS`): the store ran `WAIT
/// required timeout` right after the script wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    /// Replicas that confirmed the write within the timeout (0 when `WAIT`
    /// itself got no answer).
    pub acknowledged: u32,
    /// Replicas asked for.
    pub required: u32,
}

impl Replication {
    /// Whether at least `required` replicas have the write.
    pub fn satisfied(&self) -> bool {
        self.acknowledged >= self.required
    }
}

/// A store answer plus, for a write with replica acks configured, how far
/// it was replicated (`None`: not asked, or nothing was written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicated<T> {
    /// The answer.
    pub value: T,
    /// Replica acknowledgement of the write.
    pub replication: Option<Replication>,
    /// Permits of the resource this call saw end other than by their
    /// holder's release (an expiry it recorded in the history, each once; a
    /// break), with how long each was held: for the hold-time histogram.
    pub ended_holds: Vec<EndedHold>,
}

/// One permit's end that no release reported, and how long it was held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedHold {
    /// How it ended.
    pub end: HoldEnd,
    /// `expiresAt - acquiredAt` (expired) or the break's time minus
    /// `acquiredAt` (broken), in ms.
    pub held_ms: u64,
}

/// How a permit ended, when no release ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    /// It ran out (seen by the next call that read the resource).
    Expired,
    /// An operator broke it.
    Broken,
}

impl HoldEnd {
    /// The `end` label of `leasehold_lease_hold_seconds`.
    pub fn label(self) -> &'static str {
        match self {
            HoldEnd::Expired => "expired",
            HoldEnd::Broken => "broken",
        }
    }
}

impl<T> Replicated<T> {
    pub(super) fn unreplicated(value: T) -> Self {
        Self {
            value,
            replication: None,
            ended_holds: Vec::new(),
        }
    }

    pub(super) fn with_ended(mut self, ended_holds: Vec<EndedHold>) -> Self {
        self.ended_holds = ended_holds;
        self
    }
}

/// The store readiness answer for `/readyz`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Readiness {
    /// `memory`, `standalone`, `cluster` or `sentinel`.
    pub topology: &'static str,
    /// Whether a writable primary answered within the command timeout.
    pub writable: bool,
    /// Why not, when not (never contains credentials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}
