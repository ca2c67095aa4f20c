//! The OpenAPI 3.1 document, generated from the code.
//!
//! Handlers carry `#[utoipa::path]` (operation, parameters, every status
//! code); this module holds the response schemas, one per outcome, in the
//! exact shape [`crate::http::problem`] writes them (a unit test renders
//! every outcome through the real response code and checks it against the
//! document), and the document-wide parts (info, license, servers, the
//! optional API key scheme). `leasehold openapi` prints it, the service
//! serves it at `/openapi.json`, and `openapi/leasehold.json` is a committed
//! copy that a test keeps equal to it.

use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::openapi::{ContactBuilder, InfoBuilder, LicenseBuilder, RefOr};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::domain::{Guarantee, HeldBy, Lease};
use crate::http::attempts::{AttemptBody, AttemptCreated};
use crate::http::health::{Live, Ready};
use crate::http::leases::{AcquireBody, RenewBody};
use crate::http::problem::FieldError;
use crate::http::problems::ProblemType;

/// The command that rewrites the committed document.
pub const REGENERATE: &str = "cargo run -q -- openapi > openapi/leasehold.json";

const DESCRIPTION: &str = "\
Time-bounded, owner-checked leases with typed outcomes and fencing tokens.

**Flow.** `POST /attempts` hands out an owner token for one operation id. Send both as the \
`Lease-Owner-Token` and `Lease-Operation-Id` headers on every lease verb: \
`PUT` acquires (optionally waiting server-side with `waitMs`), `PATCH` renews, `DELETE` releases \
and `GET` inspects `/leases/{purpose}/{digest}`. Retrying with the same attempt after a lost reply \
is safe: the answer is `replayed_same_operation`, never a second lease.

**Outcomes.** Every lease answer carries `outcome` (snake_case). Each outcome has its own schema \
and status code. Non-2xx answers are RFC 9457 `application/problem+json` (`type`, `title`, \
`status`, `detail`) with the same `outcome` member and the outcome's fields. Their `type` is \
`/problems/<outcome with dashes>`, relative to the request's URI: the service serves a page there \
saying what the problem means and what to do. `unavailable` (503) \
means definitely not applied; `indeterminate` (504) means the command was sent and may or may not \
have been applied: inspect, or retry with the same attempt.

**Fencing.** `fencingToken` strictly increases per resource across acquisitions. Present it to \
the protected resource, which rejects writes with a token lower than one it has seen: the lease \
alone is an efficiency measure (`guarantee: fenced`).

**Optional members and headers.** A body member not listed as required may be left out: \
`waitMs` is 0 when absent. Inspect takes the attempt headers in any combination: both give `heldBy` \
relative to the attempt, `Lease-Owner-Token` alone compares the owner token only (`caller` needs \
both), `Lease-Operation-Id` alone names no one and gives no `heldBy`. The other lease verbs require \
both headers.

**Watching.** Every inspect answer carries `version`, which changes when the resource is acquired, \
released, expires or its holder label changes. Inspect with `changedSince=<version>&waitMs=<ms>` \
long-polls for the next change; `GET /leases/{purpose}/{digest}/events` streams every change as \
server-sent events (`Last-Event-ID` resumes). Both count against the service's watch cap.

**Validity.** Treat a lease as yours for at most `remainingMs` minus the drift budget (10 ms by \
default), counted from when you *sent* the request.

**Bounds.** The numbers in this document are the defaults: `ttlMs` from twice the drift budget \
(20) to 3600000, `waitMs` up to 30000, request bodies up to 16 KiB. A deployment may configure \
other bounds; a value outside them is answered `422 invalid_request` naming the field.

**Authentication.** Optional: when the service runs with `LEASEHOLD_API_KEYS_FILE`, send \
`Authorization: Bearer <key>` (401 without a valid key, 403 when the key may not use the purpose).";

/// The API description.
#[derive(OpenApi)]
#[openapi(
    paths(
        crate::http::attempts::create,
        crate::http::leases::acquire,
        crate::http::leases::renew,
        crate::http::leases::release,
        crate::http::leases::inspect,
        crate::http::list::list,
        crate::http::watch::events,
        crate::http::health::livez,
        crate::http::health::readyz,
        crate::http::health::metrics_on_api,
        crate::http::docs::openapi_json,
        crate::http::docs::page,
        crate::http::problems::page,
    ),
    components(schemas(
        AttemptBody, AttemptCreated, AcquireBody, RenewBody, Lease, Guarantee, HeldBy,
        Acquired, ReplayedSameOperation, Renewed, Released, AlreadyAbsent, ReleaseSuccess, Inspected,
        OwnerOperationConflictProblem, ContendedProblem, LimitMismatchProblem, AcquireConflict,
        LostAbsentProblem, LostNotOwnerProblem, NotOwnerProblem,
        UnavailableProblem, OverloadedProblem, RequestTimeoutProblem, BodyTimeoutProblem, ServiceUnavailable,
        IndeterminateProblem, InvalidRequestProblem, FieldError,
        PayloadTooLargeProblem, HeadersTooLargeProblem, UnsupportedMediaTypeProblem, UnauthorizedProblem, ForbiddenProblem,
        NotFoundProblem, LeaseNotFound, NotReadyProblem, Live, Ready, ProblemType,
        crate::http::list::Listed, crate::domain::ListedLease,
    )),
    modifiers(&Meta),
    tags(
        (name = "attempts", description = "Owner tokens for units of work. Stateless: nothing is stored."),
        (name = "leases", description = "Acquire, renew, release and inspect leases. Every answer is a typed outcome."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
    )
)]
pub struct ApiDoc;

/// Info, license, servers, the API key scheme, and required `Retry-After` headers.
struct Meta;

impl Modify for Meta {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        doc.info = InfoBuilder::new()
            .title("leasehold")
            .version(env!("CARGO_PKG_VERSION"))
            .description(Some(DESCRIPTION))
            .license(Some(
                LicenseBuilder::new()
                    .name("Apache-2.0")
                    .identifier(Some("Apache-2.0"))
                    .build(),
            ))
            .contact(Some(
                ContactBuilder::new()
                    .name(Some("leasehold maintainers"))
                    .build(),
            ))
            .build();
        let mut server = Server::new("http://127.0.0.1:8080");
        server.description = Some("A local instance with the default LEASEHOLD_LISTEN".into());
        doc.servers = Some(vec![server]);
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "apiKey",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key from LEASEHOLD_API_KEYS_FILE, each allowed a set of purposes. \
                         Only enforced when the service is configured with keys.",
                    ))
                    .build(),
            ),
        );
        // Where `Retry-After` is declared it is always sent: say so, so a
        // client (and a conformance checker) may rely on it.
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                for response in op.responses.responses.values_mut() {
                    let RefOr::T(response) = response else {
                        continue;
                    };
                    if let Some(RefOr::T(header)) = response.headers.get_mut("Retry-After") {
                        // A status shared by outcomes of which only some
                        // carry it says so ("... not with ...").
                        if header
                            .description
                            .as_deref()
                            .is_some_and(|d| d.contains("not with"))
                        {
                            continue;
                        }
                        header
                            .extensions
                            .get_or_insert_with(Default::default)
                            .insert("required".into(), serde_json::Value::Bool(true));
                    }
                }
            }
        }
    }
}

/// The document as pretty JSON (what `leasehold openapi` prints, `/openapi.json`
/// serves and `openapi/leasehold.json` holds).
pub fn document_json() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_default()
}

// ------------------------------------------------------------- outcome tags --

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
}

/// `reason: absent`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AbsentReason {
    /// No lease exists (it expired or was released).
    Absent,
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
}

// -------------------------------------------------------- problem answers --

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

problem! {
    /// `owner_operation_conflict` (409): the same owner token holds the lease
    /// for another operation id; an operation never inherits another's lease.
    #[schema(example = json!({"type": "/problems/owner-operation-conflict", "title": "Held by another operation of the same owner",
        "status": 409, "detail": "The owner token holds this lease for a different operation id; an operation never inherits another's lease.",
        "outcome": "owner_operation_conflict", "retryAfterMs": 12000}))]
    OwnerOperationConflictProblem, OwnerOperationConflictTag, 409 ..= 409 {
        /// The holder's remaining time to live (or the configured fallback).
        #[schema(minimum = 1, maximum = 604800000)]
        retry_after_ms: u64,
    }
}

problem! {
    /// `contended` (409): someone else holds the lease. Retry after
    /// `retryAfterMs`, or send `waitMs` to wait server-side.
    #[schema(example = json!({"type": "/problems/contended", "title": "Lease held by someone else",
        "status": 409, "detail": "Another owner holds this lease. Retry after retryAfterMs, or send waitMs to wait server-side.",
        "outcome": "contended", "retryAfterMs": 2450}))]
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
    #[schema(example = json!({"type": "/problems/limit-mismatch", "title": "Limit mismatch",
        "status": 409, "detail": "The resource is held with another limit; every holder must ask with the same limit (the current one is in `limit`).",
        "outcome": "limit_mismatch", "limit": 4}))]
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
    #[schema(example = json!({"type": "/problems/lost", "title": "Lease lost", "status": 404,
        "detail": "No lease exists any more (it expired or was released). Stop the work it protected.", "outcome": "lost", "reason": "absent"}))]
    LostAbsentProblem, LostTag, 404 ..= 404 {
        #[schema(inline)]
        reason: AbsentReason,
    }
}

problem! {
    /// `lost` with `reason: not_owner` (409): someone else holds the lease
    /// now. Stop the work it protected.
    #[schema(example = json!({"type": "/problems/lost", "title": "Lease lost", "status": 409,
        "detail": "Someone else holds the lease now. Stop the work it protected.", "outcome": "lost", "reason": "not_owner"}))]
    LostNotOwnerProblem, LostTag, 409 ..= 409 {
        #[schema(inline)]
        reason: NotOwnerReason,
    }
}

problem! {
    /// `not_owner` (409): someone else holds the lease; nothing was changed.
    #[schema(example = json!({"type": "/problems/not-owner", "title": "Not the owner", "status": 409,
        "detail": "Someone else holds this lease; nothing was changed.", "outcome": "not_owner"}))]
    NotOwnerProblem, NotOwnerTag, 409 ..= 409 {}
}

problem! {
    /// `unavailable` (503): definitely not applied. The store could not be
    /// reached or refused the command (no connection, pool empty before
    /// send, READONLY/LOADING/MASTERDOWN/CLUSTERDOWN/OOM). Retry later.
    #[schema(example = json!({"type": "/problems/unavailable", "title": "Store unavailable", "status": 503,
        "detail": "The lease store could not be reached or refused the command; nothing was applied. Retry later.",
        "outcome": "unavailable", "retryAfterMs": 1000}))]
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
    #[schema(example = json!({"type": "/problems/overloaded", "title": "Overloaded", "status": 503,
        "detail": "The service shed this request before touching the store; nothing was applied. Retry later.",
        "outcome": "overloaded", "retryAfterMs": 50}))]
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
    #[schema(example = json!({"type": "/problems/request-timeout", "title": "Request timed out", "status": 503,
        "detail": "The request exceeded the service's request timeout.", "outcome": "request_timeout"}))]
    RequestTimeoutProblem, RequestTimeoutTag, 503 ..= 503 {}
}

problem! {
    /// `request_timeout` (408): the request body did not arrive within the
    /// service's request timeout (less half a second), so nothing reached
    /// the store and nothing was done: send it again.
    #[schema(example = json!({"type": "/problems/request-timeout", "title": "Request body timed out", "status": 408,
        "detail": "The request body did not arrive within the service's request timeout; nothing was done.", "outcome": "request_timeout"}))]
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
    #[schema(example = json!({"type": "/problems/indeterminate", "title": "Outcome unknown", "status": 504,
        "detail": "The command was sent but no certain reply came: it may or may not have been applied. Inspect, or retry with the same attempt.",
        "outcome": "indeterminate", "operationId": "export-2026-12-02"}))]
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
    #[schema(example = json!({"type": "/problems/invalid-request", "title": "Invalid request", "status": 422,
        "detail": "ttlMs: must be between 20 and 3600000 milliseconds", "outcome": "invalid_request",
        "errors": [{"field": "ttlMs", "message": "must be between 20 and 3600000 milliseconds"}]}))]
    InvalidRequestProblem, InvalidRequestTag, 400 ..= 422 {
        /// Each invalid field, at least one.
        #[schema(min_items = 1)]
        errors: Vec<FieldError>,
    }
}

problem! {
    /// `payload_too_large` (413): the request body is over the limit (16 KiB by default).
    #[schema(example = json!({"type": "/problems/payload-too-large", "title": "Request body too large", "status": 413,
        "detail": "The request body is limited to 16384 bytes.", "outcome": "payload_too_large"}))]
    PayloadTooLargeProblem, PayloadTooLargeTag, 413 ..= 413 {}
}

problem! {
    /// `headers_too_large` (431): the request's header block (names and
    /// values) is over 16 KiB.
    #[schema(example = json!({"type": "/problems/headers-too-large", "title": "Request headers too large", "status": 431,
        "detail": "The request's headers are limited to 16384 bytes in all.", "outcome": "headers_too_large"}))]
    HeadersTooLargeProblem, HeadersTooLargeTag, 431 ..= 431 {}
}

problem! {
    /// `unsupported_media_type` (415): the body is not `application/json`.
    #[schema(example = json!({"type": "/problems/unsupported-media-type", "title": "Unsupported media type", "status": 415,
        "detail": "Send the body as application/json.", "outcome": "unsupported_media_type"}))]
    UnsupportedMediaTypeProblem, UnsupportedMediaTypeTag, 415 ..= 415 {}
}

problem! {
    /// `unauthorized` (401): API keys are configured and no valid
    /// `Authorization: Bearer <key>` was sent.
    #[schema(example = json!({"type": "/problems/unauthorized", "title": "Unauthorized", "status": 401,
        "detail": "Send a valid API key as 'Authorization: Bearer <key>'.", "outcome": "unauthorized"}))]
    UnauthorizedProblem, UnauthorizedTag, 401 ..= 401 {}
}

problem! {
    /// `forbidden` (403): the API key may not use this purpose.
    #[schema(example = json!({"type": "/problems/forbidden", "title": "Forbidden", "status": 403,
        "detail": "This API key may not use this purpose.", "outcome": "forbidden"}))]
    ForbiddenProblem, ForbiddenTag, 403 ..= 403 {}
}

problem! {
    /// `not_found` (404): no such route, e.g. an empty path segment.
    #[schema(example = json!({"type": "/problems/not-found", "title": "Not found", "status": 404,
        "detail": "No such route. See /openapi.json.", "outcome": "not_found"}))]
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
    /// `not_ready` (503): the store did not answer as a writable primary
    /// within the command timeout.
    #[schema(example = json!({"type": "/problems/not-ready", "title": "Not ready", "status": 503,
        "detail": "connection refused", "outcome": "not_ready", "topology": "standalone", "writable": false, "waiters": 0}))]
    NotReadyProblem, NotReadyTag, 503 ..= 503 {
        /// `memory`, `standalone`, `cluster` or `sentinel`.
        topology: String,
        /// Always false here.
        writable: bool,
        /// Acquire requests waiting server-side on this instance.
        waiters: u64,
    }
}

#[cfg(test)]
mod tests {
    //! Every outcome, rendered by the real response code, conforms to the
    //! response the document declares for its operation and status.

    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use serde_json::{json, Value};

    use crate::domain::{
        AcquireOutcome, Failure, Guarantee, HeldBy, Inspection, Lease, LostReason, OperationId,
        Purpose, ReleaseOutcome, RenewOutcome, ResourceDigest,
    };
    use crate::http::problem::{respond_one, ApiError, FieldError};

    /// A JSON Schema subset: what this document uses (`$ref`, `oneOf`,
    /// `allOf`, `type`, `enum`, `properties`, `required`,
    /// `additionalProperties: false`, numeric and length bounds, `items`).
    fn validate(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let name = r.trim_start_matches("#/components/schemas/");
            return validate(doc, &doc["components"]["schemas"][name], value, at);
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for s in all {
                validate(doc, s, value, at)?;
            }
        }
        if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
            let matching = one
                .iter()
                .filter(|s| validate(doc, s, value, at).is_ok())
                .count();
            if matching != 1 {
                return Err(format!("{at}: {matching} oneOf branches match {value}"));
            }
        }
        if let Some(types) = schema.get("type") {
            let types: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let ok = types.iter().any(|t| match *t {
                "object" => value.is_object(),
                "string" => value.is_string(),
                "integer" => value.is_u64() || value.is_i64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                "array" => value.is_array(),
                "null" => value.is_null(),
                _ => false,
            });
            if !ok {
                return Err(format!("{at}: {value} is not of type {types:?}"));
            }
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            if !values.contains(value) {
                return Err(format!("{at}: {value} not in {values:?}"));
            }
        }
        if let (Some(min), Some(n)) = (
            schema.get("minimum").and_then(Value::as_f64),
            value.as_f64(),
        ) {
            if n < min {
                return Err(format!("{at}: {n} < minimum {min}"));
            }
        }
        if let (Some(max), Some(n)) = (
            schema.get("maximum").and_then(Value::as_f64),
            value.as_f64(),
        ) {
            if n > max {
                return Err(format!("{at}: {n} > maximum {max}"));
            }
        }
        if let Some(s) = value.as_str() {
            let len = s.chars().count() as u64;
            if schema
                .get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len < m)
                || schema
                    .get("maxLength")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| len > m)
            {
                return Err(format!("{at}: length of {s:?} out of bounds"));
            }
        }
        if let Some(items) = value.as_array() {
            if schema
                .get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| (items.len() as u64) < m)
            {
                return Err(format!("{at}: too few items"));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(doc, item_schema, item, &format!("{at}[{i}]"))?;
                }
            }
        }
        if let Some(object) = value.as_object() {
            let properties = schema.get("properties").and_then(Value::as_object);
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = name.as_str().unwrap_or_default();
                if !object.contains_key(name) {
                    return Err(format!("{at}: required member {name} missing"));
                }
            }
            for (name, member) in object {
                match properties.and_then(|p| p.get(name)) {
                    Some(s) => validate(doc, s, member, &format!("{at}.{name}"))?,
                    None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("{at}: unknown member {name}"));
                    }
                    // Problem schemas are open (RFC 9457 allows extension
                    // members), but ours never send undocumented ones.
                    None if properties.is_some() => {
                        return Err(format!("{at}: undocumented member {name}"))
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    async fn check(
        doc: &Value,
        path: &str,
        method: &str,
        response: Response,
    ) -> (StatusCode, Value) {
        let status = response.status();
        let content_type = response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_owned();
        let retry_after = response.headers().get("retry-after").is_some();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let body: Value = serde_json::from_slice(&body).expect("JSON body");
        let declared = &doc["paths"][path][method]["responses"][status.as_str()];
        assert!(
            declared.is_object(),
            "{method} {path}: status {status} is not documented ({body})"
        );
        let schema = &declared["content"][content_type.as_str()]["schema"];
        assert!(
            schema.is_object(),
            "{method} {path} {status}: content type {content_type} is not documented"
        );
        if let Err(e) = validate(doc, schema, &body, "body") {
            panic!("{method} {path} {status}: {e}\n{body:#}");
        }
        let required_retry = declared["headers"]["Retry-After"]["required"] == json!(true);
        assert!(
            !required_retry || retry_after,
            "{method} {path} {status}: Retry-After documented as always sent"
        );
        if !status.is_success() {
            assert_eq!(content_type, "application/problem+json");
            assert_eq!(body["status"], json!(status.as_u16()));
        }
        (status, body)
    }

    fn lease() -> Lease {
        Lease {
            purpose: Purpose::parse("invoice-export").expect("purpose"),
            digest: ResourceDigest::of_raw_id("order-42"),
            fencing_token: 1_764_686_400_000_000,
            ttl_ms: 30_000,
            remaining_ms: 29_990,
            guarantee: Guarantee::Fenced,
            replication: None,
            holder: None,
            acquired_at: crate::domain::StoreTime(1_764_686_400_000),
            renewed_at: crate::domain::StoreTime(1_764_686_400_000),
        }
    }

    fn permit(holder: Option<&str>) -> crate::domain::PermitView {
        crate::domain::PermitView {
            holder: holder.and_then(|h| crate::domain::HolderLabel::parse(h).ok()),
            fencing_token: 7,
            remaining_ms: 10,
            ttl_ms: 30_000,
            acquired_at: crate::domain::StoreTime(1_764_686_400_000),
            renewed_at: crate::domain::StoreTime(1_764_686_400_000),
        }
    }

    fn failures() -> Vec<Response> {
        let op = OperationId::parse("export-1").expect("op");
        vec![
            respond_one(&Failure::Unavailable {
                retry_after_ms: 1000,
            }),
            respond_one(&Failure::Overloaded { retry_after_ms: 50 }),
            respond_one(&Failure::Indeterminate { operation_id: op }),
            ApiError::RequestTimeout.into_response(),
        ]
    }

    fn refusals(with_body: bool) -> Vec<Response> {
        let error = |field: &str| FieldError {
            field: field.into(),
            message: "is wrong".into(),
        };
        let mut all = vec![
            ApiError::Invalid {
                status: StatusCode::BAD_REQUEST,
                errors: vec![error("purpose"), error("Lease-Owner-Token")],
            }
            .into_response(),
            ApiError::Unauthorized.into_response(),
            ApiError::HeadersTooLarge { limit: 16384 }.into_response(),
        ];
        if with_body {
            all.push(
                ApiError::Invalid {
                    status: StatusCode::UNPROCESSABLE_ENTITY,
                    errors: vec![error("ttlMs")],
                }
                .into_response(),
            );
            all.push(ApiError::TooLarge { limit: 16384 }.into_response());
            all.push(ApiError::UnsupportedMediaType.into_response());
        }
        all
    }

    #[tokio::test]
    async fn every_outcome_conforms_to_its_documented_response() {
        let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
        let lease_path = "/leases/{purpose}/{digest}";
        let mut acquire = vec![
            respond_one(&AcquireOutcome::Acquired {
                lease: lease(),
                waited_ms: None,
            }),
            respond_one(&AcquireOutcome::Acquired {
                lease: lease(),
                waited_ms: Some(120),
            }),
            respond_one(&AcquireOutcome::ReplayedSameOperation { lease: lease() }),
            respond_one(&AcquireOutcome::OwnerOperationConflict {
                retry_after_ms: 1200,
            }),
            respond_one(&AcquireOutcome::Contended {
                retry_after_ms: 50,
                waited_ms: None,
                reason: None,
            }),
            respond_one(&AcquireOutcome::Contended {
                retry_after_ms: 2500,
                waited_ms: Some(5000),
                reason: Some(crate::domain::ContendedReason::Queued),
            }),
            respond_one(&AcquireOutcome::Contended {
                retry_after_ms: 900,
                waited_ms: None,
                reason: Some(crate::domain::ContendedReason::LockDelay),
            }),
            respond_one(&AcquireOutcome::LimitMismatch { limit: 4 }),
        ];
        let mut renew = vec![
            respond_one(&RenewOutcome::Renewed { lease: lease() }),
            respond_one(&RenewOutcome::Lost {
                reason: LostReason::Absent,
            }),
            respond_one(&RenewOutcome::Lost {
                reason: LostReason::NotOwner,
            }),
        ];
        let mut release = vec![
            respond_one(&ReleaseOutcome::Released),
            respond_one(&ReleaseOutcome::AlreadyAbsent),
            respond_one(&ReleaseOutcome::NotOwner),
        ];
        let mut inspect = vec![
            respond_one(&Inspection {
                held: false,
                version: "3.0".into(),
                remaining_ms: None,
                fencing_token: None,
                held_by: None,
                holder: None,
                ttl_ms: None,
                acquired_at: None,
                renewed_at: None,
                limit: None,
                mode: None,
                holders: 0,
                permits: Vec::new(),
                lock_delay_ms: Some(700),
            }),
            respond_one(&Inspection {
                held: true,
                version: "4.1".into(),
                remaining_ms: Some(10),
                fencing_token: Some(7),
                held_by: None,
                holder: None,
                ttl_ms: Some(30_000),
                acquired_at: Some(crate::domain::StoreTime(1_764_686_400_000)),
                renewed_at: Some(crate::domain::StoreTime(1_764_686_400_000)),
                limit: Some(1),
                mode: Some(crate::domain::Mode::Exclusive),
                holders: 1,
                permits: vec![permit(None)],
                lock_delay_ms: None,
            }),
            respond_one(&Inspection {
                held: true,
                version: "5.1".into(),
                remaining_ms: Some(10),
                fencing_token: Some(7),
                held_by: Some(HeldBy::CallerOtherOperation),
                holder: crate::domain::HolderLabel::parse("pod-1").ok(),
                ttl_ms: Some(30_000),
                acquired_at: Some(crate::domain::StoreTime(1_764_686_400_000)),
                renewed_at: Some(crate::domain::StoreTime(1_764_686_401_000)),
                limit: Some(4),
                mode: Some(crate::domain::Mode::Shared),
                holders: 2,
                permits: vec![permit(Some("pod-1")), permit(None)],
                lock_delay_ms: None,
            }),
        ];
        for list in [&mut acquire, &mut renew, &mut release, &mut inspect] {
            list.extend(failures());
            list.push(ApiError::Forbidden.into_response());
            list.push(ApiError::NotFound.into_response());
        }
        acquire.extend(refusals(true));
        renew.extend(refusals(true));
        acquire.push(crate::http::problem::body_timeout());
        renew.push(crate::http::problem::body_timeout());
        release.extend(refusals(false));
        inspect.extend(refusals(false));
        let mut seen = std::collections::BTreeSet::new();
        for (method, responses) in [
            ("put", acquire),
            ("patch", renew),
            ("delete", release),
            ("get", inspect),
        ] {
            for response in responses {
                let (status, body) = check(&doc, lease_path, method, response).await;
                seen.insert((
                    method,
                    status.as_u16(),
                    body["outcome"].as_str().unwrap_or("").to_owned(),
                ));
            }
        }
        // Every documented status of every lease operation was exercised.
        for method in ["put", "patch", "delete", "get"] {
            for status in doc["paths"][lease_path][method]["responses"]
                .as_object()
                .expect("responses")
                .keys()
            {
                let status: u16 = status.parse().expect("numeric status");
                assert!(
                    seen.iter().any(|(m, s, _)| *m == method && *s == status),
                    "{method} {status} never checked"
                );
            }
        }

        let created = crate::http::attempts::AttemptCreated {
            outcome: crate::http::attempts::AttemptCreatedTag::AttemptCreated,
            owner_token: "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz".into(),
            operation_id: "export-1".into(),
        };
        let mut attempts = vec![(StatusCode::CREATED, axum::Json(created)).into_response()];
        attempts.extend(refusals(true));
        for response in attempts {
            check(&doc, "/attempts", "post", response).await;
        }

        // Listing: a page with and without a next cursor, and every refusal.
        let listed = |holder: Option<&str>, next: Option<&str>| {
            respond_one(&crate::domain::Listing {
                leases: vec![crate::domain::ListedLease {
                    digest: ResourceDigest::of_raw_id("order-42"),
                    holder: holder.and_then(|h| crate::domain::HolderLabel::parse(h).ok()),
                    fencing_token: 7,
                    remaining_ms: 10,
                    ttl_ms: 30_000,
                    acquired_at: crate::domain::StoreTime(1_764_686_400_000),
                    renewed_at: crate::domain::StoreTime(1_764_686_401_000),
                    holders: if next.is_some() { 2 } else { 1 },
                    limit: if next.is_some() { 3 } else { 1 },
                    mode: crate::domain::Mode::Exclusive,
                    // Two holders: both listed.
                    permits: next.map(|_| {
                        [7, 9]
                            .map(|fencing_token| crate::domain::PermitView {
                                holder: None,
                                fencing_token,
                                remaining_ms: 10,
                                ttl_ms: 30_000,
                                acquired_at: crate::domain::StoreTime(1_764_686_400_000),
                                renewed_at: crate::domain::StoreTime(1_764_686_401_000),
                            })
                            .to_vec()
                    }),
                }],
                next_cursor: next.map(str::to_owned),
            })
        };
        let mut list = vec![
            listed(None, None),
            listed(Some("pod-1"), Some("aW52b2ljZS1leHBvcnQvYS92MQ")),
            ApiError::Forbidden.into_response(),
            ApiError::NotFound.into_response(),
        ];
        list.extend(failures().into_iter().skip(3));
        list.extend(refusals(false));
        for failure in [
            Failure::Unavailable {
                retry_after_ms: 1000,
            },
            Failure::Overloaded { retry_after_ms: 50 },
        ] {
            list.push(respond_one(&failure));
        }
        let mut statuses = std::collections::BTreeSet::new();
        for response in list {
            statuses.insert(check(&doc, "/leases/{purpose}", "get", response).await.0);
        }
        for status in doc["paths"]["/leases/{purpose}"]["get"]["responses"]
            .as_object()
            .expect("responses")
            .keys()
        {
            assert!(
                statuses.iter().any(|s| s.as_str() == status),
                "list {status} never checked"
            );
        }
    }

    /// openapi-typescript (and other generators) make a member with a
    /// `default` required; a member a caller may leave out must not carry one.
    #[test]
    fn optional_members_carry_no_default() {
        let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
        let mut optional = 0;
        for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for (member, property) in schema["properties"].as_object().into_iter().flatten() {
                if !required.contains(&member.as_str()) {
                    optional += 1;
                    assert!(
                        property.get("default").is_none(),
                        "{name}.{member} is optional but has a default: generated clients would require it"
                    );
                }
            }
        }
        assert!(optional >= 5, "optional members were found ({optional})");
        let wait = &doc["components"]["schemas"]["AcquireBody"];
        assert_eq!(wait["required"], json!(["ttlMs"]), "waitMs is optional");
    }

    /// A header or path parameter is text: it is sent or left out, never
    /// JSON `null` (which a generator would send as the string "null").
    #[test]
    fn no_parameter_is_nullable() {
        let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
        let mut parameters = 0;
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                for p in op["parameters"].as_array().into_iter().flatten() {
                    parameters += 1;
                    let types = &p["schema"]["type"];
                    assert!(
                        types.is_null() || types.is_string(),
                        "{method} {path} {}: type {types} allows null",
                        p["name"]
                    );
                }
            }
        }
        assert!(parameters >= 16, "{parameters} parameters");
    }

    /// Every problem the document declares has a page at its `type`.
    #[test]
    fn every_documented_problem_type_has_a_page() {
        use crate::http::problems::ProblemType;
        let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
        let mut problems = 0;
        for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
            if schema["properties"]["type"].is_null() {
                continue;
            }
            problems += 1;
            for outcome in schema["properties"]["outcome"]["enum"]
                .as_array()
                .expect("outcome enum")
            {
                let slug = outcome.as_str().expect("string").replace('_', "-");
                assert!(
                    ProblemType::from_slug(&slug).is_some(),
                    "{name}: no page for outcome {outcome}: add it to ProblemType (src/http/problems.rs)"
                );
                let example = &schema["example"]["type"];
                assert_eq!(
                    example,
                    &json!(format!("/problems/{slug}")),
                    "{name}: example type"
                );
            }
        }
        assert!(problems >= 15, "{problems} problem schemas");
        let listed = &doc["components"]["schemas"]["ProblemType"]["enum"];
        assert_eq!(
            listed.as_array().map(Vec::len),
            Some(ProblemType::ALL.len()),
            "the document lists every problem type page"
        );
    }

    #[test]
    fn the_validator_rejects_what_it_should() {
        let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
        let schema = |name: &str| json!({ "$ref": format!("#/components/schemas/{name}") });
        let contended = json!({"type": "/problems/contended", "title": "t", "status": 409, "detail": "d",
            "outcome": "contended", "retryAfterMs": 50});
        assert!(validate(&doc, &schema("ContendedProblem"), &contended, "b").is_ok());
        assert!(validate(&doc, &schema("AcquireConflict"), &contended, "b").is_ok());
        assert!(
            validate(
                &doc,
                &schema("OwnerOperationConflictProblem"),
                &contended,
                "b"
            )
            .is_err(),
            "wrong tag"
        );
        let mut extra = contended.clone();
        extra["leaked"] = json!(1);
        assert!(
            validate(&doc, &schema("ContendedProblem"), &extra, "b").is_err(),
            "undocumented member"
        );
        let mut missing = contended.clone();
        missing
            .as_object_mut()
            .expect("object")
            .remove("retryAfterMs");
        assert!(
            validate(&doc, &schema("ContendedProblem"), &missing, "b").is_err(),
            "missing member"
        );
        assert!(
            validate(&doc, &schema("AcquireBody"), &json!({"ttlMs": 10}), "b").is_err(),
            "below minimum"
        );
        assert!(
            validate(
                &doc,
                &schema("AcquireBody"),
                &json!({"ttlMs": 30000, "x": 1}),
                "b"
            )
            .is_err(),
            "closed body"
        );
    }
}
