//! Typed outcomes of every lease verb: what a caller may and may not assume.
//!
//! Each verb answers `Result<Success, Failure>`: the success side holds the
//! verb's own outcomes (`acquired`, `contended`, `lost`, ...), the failure side
//! the three that any verb can meet (`unavailable`, `overloaded`,
//! `indeterminate`). The HTTP layer maps each variant to its status code.

use serde::Serialize;
use utoipa::ToSchema;

use super::bounds::Mode;
use super::names::{HolderLabel, OperationId, Purpose, ResourceDigest};
use super::time::StoreTime;

/// What a lease answer promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// Exclusive where the effect target checks the fencing token; the
    /// lease alone is an efficiency measure.
    Fenced,
}

/// A lease the caller holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// What the lease is for.
    #[schema(value_type = String, pattern = "^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export")]
    pub purpose: Purpose,
    /// The resource digest.
    #[schema(value_type = String, pattern = "^v1\\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")]
    pub digest: ResourceDigest,
    /// Strictly increasing per resource across acquisitions; present it to
    /// the protected resource, which rejects tokens lower than one it has seen.
    #[schema(
        minimum = 1,
        maximum = 9007199254740991_i64,
        example = 1764686400000000_i64
    )]
    pub fencing_token: u64,
    /// The TTL this lease was granted or last renewed with (a replay
    /// reports the TTL of the acquisition it replays).
    #[schema(minimum = 1, example = 30000)]
    pub ttl_ms: u64,
    /// The store's remaining time to live, read in the same script run.
    /// Treat the lease as yours for at most `remainingMs - drift budget`,
    /// counted from when you *sent* the request.
    #[schema(minimum = 0, example = 30000)]
    pub remaining_ms: u64,
    /// The public holder label, when one was given (acquire or renew).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256, example = "worker-7:8080")]
    pub holder: Option<HolderLabel>,
    /// When this lease was acquired (RFC 3339, UTC, ms; the store's clock).
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T14:55:00.123Z")]
    pub acquired_at: StoreTime,
    /// When it was last renewed (the acquisition, if never).
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T14:55:10.456Z")]
    pub renewed_at: StoreTime,
    /// Present when the acquisition bounded the hold (`maxHoldMs`): no
    /// renewal reaches past `holdEndsAt`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(
        minimum = 20,
        maximum = 2592000000_i64,
        example = 3600000,
        nullable = false
    )]
    pub max_hold_ms: Option<u64>,
    /// `acquiredAt + maxHoldMs`, when the hold is bounded: the renew that
    /// would reach past it is granted the time left (`ttlMs` and
    /// `remainingMs` below what was asked), and after it the lease is
    /// `lost` with `reason: max_hold`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-03T15:55:00.123Z", nullable = false)]
    pub hold_ends_at: Option<StoreTime>,
    /// What this answer promises.
    pub guarantee: Guarantee,
    /// Present only when replica acknowledgements are configured
    /// (`LEASEHOLD_REDIS_MIN_REPLICAS`): how many replicas confirmed this
    /// write. `acknowledged < required` means the lease exists on the primary
    /// but a failover may lose it; fencing still protects the effect target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<Replication>,
}

/// Replica acknowledgement of a write (Redis `WAIT` right after the script).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Replication {
    /// Replicas that confirmed the write within the replica timeout.
    #[schema(minimum = 0, example = 1)]
    pub acknowledged: u32,
    /// Replicas asked for.
    #[schema(minimum = 1, example = 1)]
    pub required: u32,
}

/// Outcomes of acquire other than the shared failures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AcquireOutcome {
    /// The caller now holds the lease (201).
    Acquired {
        /// The lease.
        lease: Lease,
        /// How long the request waited server-side, when it waited.
        #[serde(rename = "waitedMs", skip_serializing_if = "Option::is_none")]
        waited_ms: Option<u64>,
    },
    /// The same attempt already holds it; its TTL was not extended (200).
    ReplayedSameOperation {
        /// The lease, `remainingMs` being the store's PTTL now.
        lease: Lease,
    },
    /// The same owner token holds it for another operation (409).
    OwnerOperationConflict {
        /// The holder's remaining time to live.
        #[serde(rename = "retryAfterMs")]
        retry_after_ms: u64,
    },
    /// Someone else holds it (409).
    Contended {
        /// The holder's remaining time to live, or the configured fallback.
        #[serde(rename = "retryAfterMs")]
        retry_after_ms: u64,
        /// How long the request waited server-side, when it waited.
        #[serde(rename = "waitedMs", skip_serializing_if = "Option::is_none")]
        waited_ms: Option<u64>,
        /// Why, when it is not simply held: a lock-delay runs, or waiters
        /// queued earlier go first.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<ContendedReason>,
    },
    /// Live holders agreed on another `limit` (409).
    LimitMismatch {
        /// The limit they hold it with.
        limit: u32,
    },
}

/// Why a free-looking resource still answered `contended`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContendedReason {
    /// A holder's lease expired and its lock-delay still runs.
    LockDelay,
    /// Waiters that started earlier go first (fair queue).
    Queued,
}

/// One holder of a resource, as anyone may see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermitView {
    /// The holder's public label, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256, example = "worker-7:8080")]
    pub holder: Option<HolderLabel>,
    /// Its fencing token.
    #[schema(
        minimum = 1,
        maximum = 9007199254740991_i64,
        example = 1764686400000000_i64
    )]
    pub fencing_token: u64,
    /// Its remaining time to live.
    #[schema(minimum = 0, example = 12000)]
    pub remaining_ms: u64,
    /// The TTL it was granted or last renewed with.
    #[schema(minimum = 1, example = 30000)]
    pub ttl_ms: u64,
    /// When it was acquired.
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T14:55:00.123Z")]
    pub acquired_at: StoreTime,
    /// When it was last renewed.
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T14:55:18.120Z")]
    pub renewed_at: StoreTime,
    /// Its hold bound (`maxHoldMs` of its acquisition), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        minimum = 20,
        maximum = 2592000000_i64,
        example = 3600000,
        nullable = false
    )]
    pub max_hold_ms: Option<u64>,
    /// `acquiredAt + maxHoldMs`: no renewal reaches past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-03T15:55:00.123Z", nullable = false)]
    pub hold_ends_at: Option<StoreTime>,
    /// The lock-delay that follows its expiry (`lockDelayMs` of its
    /// acquisition), when it has one: another attempt may acquire only
    /// this long after the permit expires (a release or a break starts
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 60000, example = 5000, nullable = false)]
    pub lock_delay_ms: Option<u64>,
    /// The session it was taken on (docs/sessions.md), when it was: it
    /// ends when the session does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = r"^s1\.[0-9a-f]{32}$", example = "s1.7c3f0e2a9b814d6f8a1c2e3b4d5f6a7b", nullable = false)]
    pub session: Option<super::SessionId>,
}

/// Why a renew found the lease gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LostReason {
    /// No lease exists (expired or released) (404).
    Absent,
    /// Someone else holds it now (409).
    NotOwner,
    /// An operator broke the caller's permit (`POST …/break`) (404;
    /// whoever holds the resource now).
    Revoked,
    /// The lease reached its hold bound (`maxHoldMs` of its acquisition)
    /// and ended there (404; whoever holds the resource now).
    MaxHold,
}

/// Outcomes of renew other than the shared failures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RenewOutcome {
    /// The TTL was reset; same fencing token (200).
    Renewed {
        /// The lease with its new remaining time.
        lease: Lease,
    },
    /// The caller no longer holds the lease.
    Lost {
        /// Why.
        reason: LostReason,
    },
}

/// Outcomes of release other than the shared failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ReleaseOutcome {
    /// The caller's lease was deleted (200).
    Released,
    /// No lease existed: release is idempotent (200).
    AlreadyAbsent {
        /// Why, when the store knows: an operator broke the caller's
        /// permit (`revoked`). Left out: it expired or was released.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<EndedReason>,
    },
    /// Someone else holds it; nothing was changed (409).
    NotOwner,
}

/// Why a release found the caller's permit gone, when the store knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndedReason {
    /// An operator broke it (`POST …/break`).
    Revoked,
    /// It reached its hold bound (`maxHoldMs`) and ended there.
    MaxHold,
}

/// Outcomes of break other than the shared failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum BreakOutcome {
    /// These permits were removed (200).
    Broken {
        /// How many.
        #[serde(rename = "permitsBroken")]
        permits: u32,
    },
    /// No live permit (with that fencing token, when one was given):
    /// nothing was changed (404).
    NothingToBreak,
}

/// Who holds an inspected lease, relative to the attempt the caller sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HeldBy {
    /// The caller's own attempt.
    Caller,
    /// The caller's owner token, for another operation.
    CallerOtherOperation,
    /// Someone else.
    Other,
}

/// A read-only view of a resource's lease. Never reveals the holder's token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename = "inspected", rename_all = "camelCase")]
pub struct Inspection {
    /// Whether any lease is held.
    pub held: bool,
    /// Opaque; changes when the resource is acquired, released, expires or
    /// its holder label changes (renewals alone do not change it).
    pub version: String,
    /// The holder's remaining time to live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<u64>,
    /// The holder's fencing token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// Who holds it, present only when the attempt headers were sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<HeldBy>,
    /// The holder's public label, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderLabel>,
    /// The TTL the holder was granted or last renewed with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// When the holder acquired it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<StoreTime>,
    /// When the holder last renewed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewed_at: Option<StoreTime>,
    /// The limit the holders agreed on (when held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The holders' mode (when held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// How many hold it now.
    pub holders: u32,
    /// The holders, oldest (smallest fencing token) first, at most 100 of
    /// them: `holders` counts them all (when held).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub permits: Vec<PermitView>,
    /// A lock-delay that runs after an expiry (on a free resource, or
    /// beside the live permits of a counting lease): how long it has left.
    #[serde(
        rename = "lockDelayRemainingMs",
        skip_serializing_if = "Option::is_none"
    )]
    pub lock_delay_ms: Option<u64>,
}

/// The outcomes any verb can meet: the request failed, and how sure we are
/// about what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Failure {
    /// Definitely not applied: the store could not be reached, or refused
    /// the command outright (503).
    Unavailable {
        /// When to try again.
        #[serde(rename = "retryAfterMs")]
        retry_after_ms: u64,
    },
    /// Shed by this service's own admission limit before touching the
    /// store (503).
    Overloaded {
        /// When to try again.
        #[serde(rename = "retryAfterMs")]
        retry_after_ms: u64,
    },
    /// Sent, but no certain reply: it may or may not have been applied.
    /// Inspect, or retry with the same attempt (504).
    Indeterminate {
        /// The operation whose effect is unknown.
        #[serde(rename = "operationId", serialize_with = "ser_display")]
        operation_id: OperationId,
    },
}

fn ser_display<S: serde::Serializer>(v: &OperationId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v.as_str())
}

/// Every outcome name, for metrics labels and documentation.
pub trait OutcomeName {
    /// The snake_case `outcome` tag.
    fn outcome_name(&self) -> &'static str;
}

impl OutcomeName for AcquireOutcome {
    fn outcome_name(&self) -> &'static str {
        match self {
            Self::Acquired { .. } => "acquired",
            Self::ReplayedSameOperation { .. } => "replayed_same_operation",
            Self::OwnerOperationConflict { .. } => "owner_operation_conflict",
            Self::Contended { .. } => "contended",
            Self::LimitMismatch { .. } => "limit_mismatch",
        }
    }
}

impl OutcomeName for RenewOutcome {
    fn outcome_name(&self) -> &'static str {
        match self {
            Self::Renewed { .. } => "renewed",
            Self::Lost { .. } => "lost",
        }
    }
}

impl OutcomeName for ReleaseOutcome {
    fn outcome_name(&self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::AlreadyAbsent { .. } => "already_absent",
            Self::NotOwner => "not_owner",
        }
    }
}

impl OutcomeName for BreakOutcome {
    fn outcome_name(&self) -> &'static str {
        match self {
            Self::Broken { .. } => "broken",
            Self::NothingToBreak => "nothing_to_break",
        }
    }
}

impl OutcomeName for Inspection {
    fn outcome_name(&self) -> &'static str {
        "inspected"
    }
}

impl OutcomeName for Failure {
    fn outcome_name(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "unavailable",
            Self::Overloaded { .. } => "overloaded",
            Self::Indeterminate { .. } => "indeterminate",
        }
    }
}

impl<T: OutcomeName> OutcomeName for Result<T, Failure> {
    fn outcome_name(&self) -> &'static str {
        match self {
            Ok(v) => v.outcome_name(),
            Err(f) => f.outcome_name(),
        }
    }
}

/// One invalid field of a request (the `errors` of `invalid_request`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// Where: a path parameter (`purpose`, `digest`), a header
    /// (`Lease-Owner-Token`), a body member (`ttlMs`), or `body`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}
