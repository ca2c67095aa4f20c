//! The response schemas, one per outcome, in the exact shape
//! [`crate::http::problem`] writes them: documentation only (the answers
//! are written by the outcome types themselves).

use serde::Serialize;
use utoipa::ToSchema;

use serde_json::{json, Value};

use crate::domain::FieldError;
use crate::domain::{HeldBy, Lease};
use crate::http::problem::type_uri;
use crate::http::problem_table::{ProblemType, Words, BODY_TIMEOUT, LIMIT, LOST_NOT_OWNER};

/// One-value enums: the `outcome` member of each answer, so every schema
/// names exactly the outcome it describes.
macro_rules! outcome_tags {
    ($($name:ident => $variant:ident),* $(,)?) => {
        $(
            #[doc = "The outcome tag."]
            #[derive(Debug, Clone, Copy, Serialize, ToSchema)]
            #[serde(rename_all = "snake_case")]
            pub enum $name {
                #[allow(missing_docs)]
                $variant,
            }
        )*
    };
}

outcome_tags! {
    AcquiredTag => Acquired,
    ReplayedSameOperationTag => ReplayedSameOperation,
    RenewedTag => Renewed,
    ReleasedTag => Released,
    AlreadyAbsentTag => AlreadyAbsent,
    InspectedTag => Inspected,
    OwnerOperationConflictTag => OwnerOperationConflict,
    ContendedTag => Contended,
    LimitMismatchTag => LimitMismatch,
    LostTag => Lost,
    NotOwnerTag => NotOwner,
    UnavailableTag => Unavailable,
    OverloadedTag => Overloaded,
    RequestTimeoutTag => RequestTimeout,
    IndeterminateTag => Indeterminate,
    InvalidRequestTag => InvalidRequest,
    PayloadTooLargeTag => PayloadTooLarge,
    HeadersTooLargeTag => HeadersTooLarge,
    UnsupportedMediaTypeTag => UnsupportedMediaType,
    UnauthorizedTag => Unauthorized,
    ForbiddenTag => Forbidden,
    NotFoundTag => NotFound,
    NotReadyTag => NotReady,
    BrokenTag => Broken,
    NothingToBreakTag => NothingToBreak,
    SessionFullTag => SessionFull,
}

/// `reason` of a 404 `lost`: `absent`, `revoked` or `max_hold`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AbsentReason {
    /// No lease exists (it expired or was released).
    Absent,
    /// An operator broke the caller's permit (`POST …/break`).
    Revoked,
    /// The lease reached its hold bound (`maxHoldMs` of its acquisition).
    MaxHold,
}

/// `reason: not_owner`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotOwnerReason {
    /// Someone else holds the lease now.
    NotOwner,
}

// ---------------------------------------------------------- 2xx answers --

/// `acquired` (201): the caller now holds the lease.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "acquired",
    "lease": {"purpose": "invoice-export", "digest": "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
              "fencingToken": 1764686400000000_u64, "ttlMs": 30000, "remainingMs": 30000, "guarantee": "fenced"}
}))]
pub struct Acquired {
    #[schema(inline)]
    pub outcome: AcquiredTag,
    /// The lease.
    pub lease: Lease,
    /// How long the request waited server-side; present only when it waited.
    #[schema(nullable = false, minimum = 0, maximum = 3600000)]
    pub waited_ms: Option<u64>,
}

/// `replayed_same_operation` (200): the same attempt already holds the lease.
/// Its TTL was **not** extended: `remainingMs` is the store's PTTL now.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "replayed_same_operation",
    "lease": {"purpose": "invoice-export", "digest": "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
              "fencingToken": 1764686400000000_u64, "ttlMs": 30000, "remainingMs": 21345, "guarantee": "fenced"}
}))]
pub struct ReplayedSameOperation {
    #[schema(inline)]
    pub outcome: ReplayedSameOperationTag,
    /// The lease, `remainingMs` read from the store in the same script run.
    pub lease: Lease,
}

/// `renewed` (200): the TTL was reset, counted from now; same fencing token.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "renewed",
    "lease": {"purpose": "invoice-export", "digest": "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
              "fencingToken": 1764686400000000_u64, "ttlMs": 30000, "remainingMs": 30000, "guarantee": "fenced"}
}))]
pub struct Renewed {
    #[schema(inline)]
    pub outcome: RenewedTag,
    /// The lease with its new remaining time.
    pub lease: Lease,
}

/// `released` (200): the caller's lease was deleted; waiters were woken.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"outcome": "released"}))]
pub struct Released {
    #[schema(inline)]
    pub outcome: ReleasedTag,
}

/// `already_absent` (200): no lease existed. Release is idempotent.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"outcome": "already_absent"}))]
pub struct AlreadyAbsent {
    #[schema(inline)]
    pub outcome: AlreadyAbsentTag,
    /// Present when the store knows why the caller's permit is gone:
    /// `revoked` (an operator broke it) or `max_hold` (it reached its
    /// `maxHoldMs`). Left out: it expired or was released.
    #[schema(nullable = false)]
    pub reason: Option<crate::domain::EndedReason>,
}

/// `broken` (200): an operator's break removed `permitsBroken` live permits.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"outcome": "broken", "permitsBroken": 1}))]
pub struct Broken {
    #[schema(inline)]
    pub outcome: BrokenTag,
    /// How many live permits were removed.
    #[schema(minimum = 1, maximum = 10000)]
    pub permits_broken: u32,
}

/// Who broke a lease and why: in a `revoked` event's data only.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"reason": "stuck since the 03:00 deploy", "keyName": "ops-oncall"}))]
pub struct RevocationView {
    /// The operator's reason, when one was given.
    #[schema(nullable = false, min_length = 1, max_length = 256)]
    pub reason: Option<String>,
    /// The public name of the API key that broke it (`name=` in the keys
    /// file; never the key); absent without keys or without a name.
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 64,
        pattern = r"^[A-Za-z0-9._-]{1,64}$"
    )]
    pub key_name: Option<String>,
}

/// The 200 answers of release.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "outcome", mapping(
    ("released" = "#/components/schemas/Released"),
    ("already_absent" = "#/components/schemas/AlreadyAbsent"),
)))]
pub enum ReleaseSuccess {
    /// `released`.
    Released(Released),
    /// `already_absent`.
    AlreadyAbsent(AlreadyAbsent),
}

/// `inspected` (200): a read-only view of the lease. Never reveals the
/// holder's token.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"outcome": "inspected", "held": true, "version": "12.1", "remainingMs": 12000, "fencingToken": 1764686400000000_u64, "heldBy": "caller", "holder": "worker-7:8080", "ttlMs": 30000, "acquiredAt": "2026-12-03T14:55:00.123Z", "renewedAt": "2026-12-03T14:55:18.120Z"}))]
pub struct Inspected {
    #[schema(inline)]
    pub outcome: InspectedTag,
    /// Whether any lease is held.
    pub held: bool,
    /// Opaque: changes when the resource is acquired, released, expires or
    /// its holder label changes (renewals alone do not change it). Send it
    /// back as `changedSince` to wait for the next change.
    #[schema(min_length = 1, max_length = 64, example = "12.1")]
    pub version: String,
    /// The holder's public label; present when held and the holder gave one.
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 256,
        example = "worker-7:8080"
    )]
    pub holder: Option<String>,
    /// The TTL the holder was granted or last renewed with; present when held.
    #[schema(nullable = false, minimum = 1, maximum = 604800000)]
    pub ttl_ms: Option<u64>,
    /// When the holder acquired it (RFC 3339, UTC, ms; the store's clock);
    /// present when held.
    #[schema(nullable = false, format = DateTime, example = "2026-12-03T14:55:00.123Z")]
    pub acquired_at: Option<String>,
    /// When the holder last renewed it; present when held.
    #[schema(nullable = false, format = DateTime, example = "2026-12-03T14:55:18.120Z")]
    pub renewed_at: Option<String>,
    /// The limit the holders agreed on; present when held.
    #[schema(nullable = false, minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
    /// The holders' mode; present when held.
    #[schema(nullable = false)]
    pub mode: Option<crate::domain::Mode>,
    /// How many hold it now (0 when free).
    #[schema(minimum = 0, maximum = 10000)]
    pub holders: u32,
    /// Every holder, oldest first; present when held. The top-level
    /// `holder`, `fencingToken`, `remainingMs`, `ttlMs`, `acquiredAt` and
    /// `renewedAt` are the first one's.
    #[schema(nullable = false)]
    pub permits: Option<Vec<crate::domain::PermitView>>,
    /// A lock-delay that runs after a holder's lease expired: how long it
    /// has left; present only then (on a free resource, or beside the live
    /// permits of a counting lease).
    #[schema(nullable = false, minimum = 1, maximum = 60000)]
    pub lock_delay_remaining_ms: Option<u64>,
    /// The holder's remaining time to live; present when held.
    #[schema(nullable = false, minimum = 0, maximum = 604800000)]
    pub remaining_ms: Option<u64>,
    /// The holder's fencing token; present when held.
    #[schema(nullable = false, minimum = 1, maximum = 9007199254740991_i64)]
    pub fencing_token: Option<u64>,
    /// Who holds it relative to the caller; present only when held and
    /// `Lease-Owner-Token` was sent (`caller` only when `Lease-Operation-Id`
    /// was sent too and names the holding operation).
    #[schema(nullable = false)]
    pub held_by: Option<HeldBy>,
    /// Who broke the lease and why: only in the data of a `revoked`
    /// event of a watch stream, never in an inspect answer.
    #[schema(nullable = false)]
    pub revocation: Option<RevocationView>,
}

// -------------------------------------------------------- problem answers --

/// A problem answer's example with the problem's usual status and words
/// (from the problem table, as the answer writes them), and the outcome's
/// own members (which may give their own `detail`).
pub(super) fn example(problem: ProblemType, members: Value) -> Value {
    example_with(problem, problem.words(), problem.status().as_u16(), members)
}

/// A problem answer's example with other words or another status.
pub(super) fn example_with(
    problem: ProblemType,
    words: Words,
    status: u16,
    members: Value,
) -> Value {
    let mut example = json!({
        "type": type_uri(&problem.outcome()),
        "title": words.title,
        "status": status,
        "detail": words.detail,
        "outcome": problem.outcome(),
    });
    if let (Some(example), Value::Object(members)) = (example.as_object_mut(), members) {
        example.extend(members);
    }
    example
}

/// The usual detail of a size limit's problem, at the default 16 KiB.
fn limited(problem: ProblemType) -> String {
    problem.words().detail.replace(LIMIT, "16384")
}

/// A problem answer (RFC 9457): `type`, `title`, `status`, `detail`, the
/// `outcome` tag, then the outcome's own members.
macro_rules! problem {
    (
        $(#[$meta:meta])*
        $name:ident, $tag:ident, $min:tt ..= $max:tt
        { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }
    ) => {
        #[derive(Debug, Serialize, ToSchema)]
        #[serde(rename_all = "camelCase")]
        $(#[$meta])*
        pub struct $name {
            /// The problem type, a URI reference: `/problems/` and the outcome
            /// with dashes, relative to the request's URI (RFC 9457 3.1.1). The
            /// service serves a page describing it there.
            #[schema(format = "uri-reference", pattern = "^/problems/[a-z][a-z-]*$")]
            pub r#type: String,
            /// A short summary of the problem type.
            pub title: String,
            /// The HTTP status code.
            #[schema(minimum = $min, maximum = $max)]
            pub status: u16,
            /// A human-readable explanation of this occurrence.
            pub detail: String,
            #[schema(inline)]
            pub outcome: $tag,
            $($(#[$fmeta])* pub $field: $ty,)*
        }
    };
}
pub(super) use problem;

problem! {
    /// `owner_operation_conflict` (409): the same owner token holds the lease
    /// for another operation id; an operation never inherits another's lease.
    #[schema(example = json!(example(ProblemType::OwnerOperationConflict, json!({"retryAfterMs": 12000}))))]
    OwnerOperationConflictProblem, OwnerOperationConflictTag, 409 ..= 409 {
        /// The holder's remaining time to live (or the configured fallback).
        #[schema(minimum = 1, maximum = 604800000)]
        retry_after_ms: u64,
    }
}

problem! {
    /// `contended` (409): someone else holds the lease. Retry after
    /// `retryAfterMs`, or send `waitMs` to wait server-side.
    #[schema(example = json!(example(ProblemType::Contended, json!({"retryAfterMs": 2450}))))]
    ContendedProblem, ContendedTag, 409 ..= 409 {
        /// The holder's remaining time to live, or the configured 50 ms fallback.
        #[schema(minimum = 1, maximum = 604800000)]
        retry_after_ms: u64,
        /// How long the request waited server-side; present only when it waited.
        #[schema(nullable = false, minimum = 0, maximum = 3600000)]
        waited_ms: Option<u64>,
        /// Why, when it is not simply held: `lock_delay` (an expired
        /// holder's lock-delay runs) or `queued` (earlier waiters go first).
        #[schema(nullable = false)]
        reason: Option<crate::domain::ContendedReason>,
    }
}

problem! {
    /// `limit_mismatch` (409): the resource is held with another `limit`;
    /// every holder must ask with the same one.
    #[schema(example = json!(example(ProblemType::LimitMismatch, json!({"limit": 4}))))]
    LimitMismatchProblem, LimitMismatchTag, 409 ..= 409 {
        /// The limit the current holders agreed on.
        #[schema(minimum = 1, maximum = 10000)]
        limit: u32,
    }
}

/// The 409 answers of acquire.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "outcome", mapping(
    ("owner_operation_conflict" = "#/components/schemas/OwnerOperationConflictProblem"),
    ("contended" = "#/components/schemas/ContendedProblem"),
    ("limit_mismatch" = "#/components/schemas/LimitMismatchProblem"),
)))]
pub enum AcquireConflict {
    /// `owner_operation_conflict`.
    OwnerOperationConflict(OwnerOperationConflictProblem),
    /// `contended`.
    Contended(ContendedProblem),
    /// `limit_mismatch`.
    LimitMismatch(LimitMismatchProblem),
}

problem! {
    /// `lost` with `reason: absent` (404): no lease exists any more (it
    /// expired or was released). Stop the work it protected.
    #[schema(example = json!(example(ProblemType::Lost, json!({"reason": "absent"}))))]
    LostAbsentProblem, LostTag, 404 ..= 404 {
        #[schema(inline)]
        reason: AbsentReason,
    }
}

problem! {
    /// `lost` with `reason: not_owner` (409): someone else holds the lease
    /// now. Stop the work it protected.
    #[schema(example = json!(example_with(ProblemType::Lost, LOST_NOT_OWNER, 409, json!({"reason": "not_owner"}))))]
    LostNotOwnerProblem, LostTag, 409 ..= 409 {
        #[schema(inline)]
        reason: NotOwnerReason,
    }
}

problem! {
    /// `not_owner` (409): someone else holds the lease; nothing was changed.
    #[schema(example = json!(example(ProblemType::NotOwner, json!({}))))]
    NotOwnerProblem, NotOwnerTag, 409 ..= 409 {}
}

problem! {
    /// `unavailable` (503): definitely not applied. The store could not be
    /// reached or refused the command (no connection, pool empty before
    /// send, READONLY/LOADING/MASTERDOWN/CLUSTERDOWN/OOM). Retry later.
    #[schema(example = json!(example(ProblemType::Unavailable, json!({"retryAfterMs": 1000}))))]
    UnavailableProblem, UnavailableTag, 503 ..= 503 {
        /// When to try again.
        #[schema(minimum = 1, maximum = 604800000)]
        retry_after_ms: u64,
    }
}

problem! {
    /// `overloaded` (503): shed by the service's own admission limit (store
    /// calls in flight, or server-side waiters) before touching the store;
    /// nothing was applied.
    #[schema(example = json!(example(ProblemType::Overloaded, json!({"retryAfterMs": 50}))))]
    OverloadedProblem, OverloadedTag, 503 ..= 503 {
        /// When to try again.
        #[schema(minimum = 1, maximum = 604800000)]
        retry_after_ms: u64,
    }
}

problem! {
    /// `request_timeout` (503): the request exceeded the service's
    /// per-request timeout (the wait bound plus the store command timeout).
    /// For a lease verb, the effect is unknown: inspect, or retry with the
    /// same attempt.
    #[schema(example = json!(example(ProblemType::RequestTimeout, json!({}))))]
    RequestTimeoutProblem, RequestTimeoutTag, 503 ..= 503 {}
}

problem! {
    /// `request_timeout` (408): the request body did not arrive within the
    /// service's request timeout (less half a second), so nothing reached
    /// the store and nothing was done: send it again.
    #[schema(example = json!(example_with(ProblemType::RequestTimeout, BODY_TIMEOUT, 408, json!({}))))]
    BodyTimeoutProblem, RequestTimeoutTag, 408 ..= 408 {}
}

/// The 503 answers: `unavailable`, `overloaded` or `request_timeout`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "outcome", mapping(
    ("unavailable" = "#/components/schemas/UnavailableProblem"),
    ("overloaded" = "#/components/schemas/OverloadedProblem"),
    ("request_timeout" = "#/components/schemas/RequestTimeoutProblem"),
)))]
pub enum ServiceUnavailable {
    /// `unavailable`.
    Unavailable(UnavailableProblem),
    /// `overloaded`.
    Overloaded(OverloadedProblem),
    /// `request_timeout`.
    RequestTimeout(RequestTimeoutProblem),
}

problem! {
    /// `indeterminate` (504): the command was sent but no certain reply came;
    /// it may or may not have been applied. Inspect, or retry with the same
    /// attempt (a retry answers `replayed_same_operation` if it was applied).
    #[schema(example = json!(example(ProblemType::Indeterminate, json!({"operationId": "export-2026-12-02"}))))]
    IndeterminateProblem, IndeterminateTag, 504 ..= 504 {
        /// The operation whose effect is unknown.
        #[schema(pattern = "^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128)]
        operation_id: String,
    }
}

problem! {
    /// `invalid_request` (400 when the request's shape is wrong: path
    /// parameters, attempt headers, JSON syntax; 422 when well-formed JSON
    /// holds invalid values: bounds, types, unknown or missing members).
    /// `errors` names each invalid field.
    #[schema(example = json!(example_with(ProblemType::InvalidRequest, ProblemType::InvalidRequest.words(), 422, json!({
        "detail": "ttlMs: must be between 20 and 3600000 milliseconds",
        "errors": [{"field": "ttlMs", "message": "must be between 20 and 3600000 milliseconds"}]}))))]
    InvalidRequestProblem, InvalidRequestTag, 400 ..= 422 {
        /// Each invalid field, at least one.
        #[schema(min_items = 1)]
        errors: Vec<FieldError>,
    }
}

problem! {
    /// `payload_too_large` (413): the request body is over the limit (16 KiB by default).
    #[schema(example = json!(example(ProblemType::PayloadTooLarge, json!({"detail": limited(ProblemType::PayloadTooLarge)}))))]
    PayloadTooLargeProblem, PayloadTooLargeTag, 413 ..= 413 {}
}

problem! {
    /// `headers_too_large` (431): the request's header block (names and
    /// values) is over 16 KiB.
    #[schema(example = json!(example(ProblemType::HeadersTooLarge, json!({"detail": limited(ProblemType::HeadersTooLarge)}))))]
    HeadersTooLargeProblem, HeadersTooLargeTag, 431 ..= 431 {}
}

problem! {
    /// `unsupported_media_type` (415): the body is not `application/json`.
    #[schema(example = json!(example(ProblemType::UnsupportedMediaType, json!({}))))]
    UnsupportedMediaTypeProblem, UnsupportedMediaTypeTag, 415 ..= 415 {}
}

problem! {
    /// `unauthorized` (401): API keys are configured and no valid
    /// `Authorization: Bearer <key>` was sent.
    #[schema(example = json!(example(ProblemType::Unauthorized, json!({}))))]
    UnauthorizedProblem, UnauthorizedTag, 401 ..= 401 {}
}

problem! {
    /// `forbidden` (403): the API key may not use this purpose, or lacks
    /// the scope the route needs (`scope` names it).
    #[schema(example = json!(example(ProblemType::Forbidden, json!({}))))]
    ForbiddenProblem, ForbiddenTag, 403 ..= 403 {
        /// The scope the key lacks (`read`, `write`, `admin` or `metrics`);
        /// absent when the key may not use the purpose at all.
        #[schema(nullable = false, pattern = "^(read|write|admin|metrics)$")]
        scope: Option<String>,
        /// The purpose the key lacks `scope` on; absent for `metrics`.
        #[schema(nullable = false, pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63)]
        purpose: Option<String>,
    }
}

problem! {
    /// `not_found` (404): no such route, e.g. an empty path segment.
    #[schema(example = json!(example(ProblemType::NotFound, json!({}))))]
    NotFoundProblem, NotFoundTag, 404 ..= 404 {}
}

/// The 404 answers of renew: the lease is `lost` (`reason: absent`), or the
/// path matched no route.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "outcome", mapping(
    ("lost" = "#/components/schemas/LostAbsentProblem"),
    ("not_found" = "#/components/schemas/NotFoundProblem"),
)))]
pub enum LeaseNotFound {
    /// `lost`, `reason: absent`.
    Lost(LostAbsentProblem),
    /// `not_found`.
    NotFound(NotFoundProblem),
}

problem! {
    /// `nothing_to_break` (404): no live permit (with that fencing token);
    /// nothing was changed.
    #[schema(example = json!(example(ProblemType::NothingToBreak, json!({}))))]
    NothingToBreakProblem, NothingToBreakTag, 404 ..= 404 {}
}

/// The 404 answers of break: `nothing_to_break`, or the path matched no
/// route.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "outcome", mapping(
    ("nothing_to_break" = "#/components/schemas/NothingToBreakProblem"),
    ("not_found" = "#/components/schemas/NotFoundProblem"),
)))]
pub enum BreakNotFound {
    /// `nothing_to_break`.
    NothingToBreak(NothingToBreakProblem),
    /// `not_found`.
    NotFound(NotFoundProblem),
}

problem! {
    /// `not_ready` (503): the store did not answer as a writable primary
    /// within the command timeout.
    #[schema(example = json!(example(ProblemType::NotReady, json!({
        "detail": "connection refused", "topology": "standalone", "writable": false, "waiters": 0}))))]
    NotReadyProblem, NotReadyTag, 503 ..= 503 {
        /// `memory`, `standalone`, `cluster` or `sentinel`.
        topology: String,
        /// Always false here.
        writable: bool,
        /// Acquire requests waiting server-side on this instance.
        waiters: u64,
    }
}
