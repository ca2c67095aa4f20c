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
`status`, `detail`) with the same `outcome` member and the outcome's fields. `unavailable` (503) \
means definitely not applied; `indeterminate` (504) means the command was sent and may or may not \
have been applied: inspect, or retry with the same attempt.

**Fencing.** `fencingToken` strictly increases per resource across acquisitions. Present it to \
the protected resource, which rejects writes with a token lower than one it has seen: the lease \
alone is an efficiency measure (`guarantee: fenced`).

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
        crate::http::health::livez,
        crate::http::health::readyz,
        crate::http::health::metrics,
        crate::http::docs::openapi_json,
        crate::http::docs::page,
    ),
    components(schemas(
        AttemptBody, AttemptCreated, AcquireBody, RenewBody, Lease, Guarantee, HeldBy,
        Acquired, ReplayedSameOperation, Renewed, Released, AlreadyAbsent, ReleaseSuccess, Inspected,
        OwnerOperationConflictProblem, ContendedProblem, AcquireConflict,
        LostAbsentProblem, LostNotOwnerProblem, NotOwnerProblem,
        UnavailableProblem, OverloadedProblem, RequestTimeoutProblem, ServiceUnavailable,
        IndeterminateProblem, InvalidRequestProblem, FieldError,
        PayloadTooLargeProblem, UnsupportedMediaTypeProblem, UnauthorizedProblem, ForbiddenProblem,
        NotFoundProblem, LeaseNotFound, NotReadyProblem, Live, Ready,
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
    LostTag => Lost,
    NotOwnerTag => NotOwner,
    UnavailableTag => Unavailable,
    OverloadedTag => Overloaded,
    RequestTimeoutTag => RequestTimeout,
    IndeterminateTag => Indeterminate,
    InvalidRequestTag => InvalidRequest,
    PayloadTooLargeTag => PayloadTooLarge,
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
#[schema(example = json!({"outcome": "inspected", "held": true, "remainingMs": 12000, "fencingToken": 1764686400000000_u64, "heldBy": "caller"}))]
pub struct Inspected {
    #[schema(inline)]
    pub outcome: InspectedTag,
    /// Whether any lease is held.
    pub held: bool,
    /// The holder's remaining time to live; present when held.
    #[schema(nullable = false, minimum = 0, maximum = 604800000)]
    pub remaining_ms: Option<u64>,
    /// The holder's fencing token; present when held.
    #[schema(nullable = false, minimum = 1, maximum = 9007199254740991_i64)]
    pub fencing_token: Option<u64>,
    /// Who holds it relative to the attempt sent; present only when held and
    /// the attempt headers were sent.
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
            /// A URI naming the problem type: `https://leasehold.dev/problems/` and the outcome with dashes.
            #[schema(format = "uri")]
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/owner-operation-conflict", "title": "Held by another operation of the same owner",
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/contended", "title": "Lease held by someone else",
        "status": 409, "detail": "Another owner holds this lease. Retry after retryAfterMs, or send waitMs to wait server-side.",
        "outcome": "contended", "retryAfterMs": 2450}))]
    ContendedProblem, ContendedTag, 409 ..= 409 {
        /// The holder's remaining time to live, or the configured 50 ms fallback.
        #[schema(minimum = 1, maximum = 604800000)]
        retry_after_ms: u64,
        /// How long the request waited server-side; present only when it waited.
        #[schema(nullable = false, minimum = 0, maximum = 3600000)]
        waited_ms: Option<u64>,
    }
}

/// The 409 answers of acquire.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "outcome", mapping(
    ("owner_operation_conflict" = "#/components/schemas/OwnerOperationConflictProblem"),
    ("contended" = "#/components/schemas/ContendedProblem"),
)))]
pub enum AcquireConflict {
    /// `owner_operation_conflict`.
    OwnerOperationConflict(OwnerOperationConflictProblem),
    /// `contended`.
    Contended(ContendedProblem),
}

problem! {
    /// `lost` with `reason: absent` (404): no lease exists any more (it
    /// expired or was released). Stop the work it protected.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/lost", "title": "Lease lost", "status": 404,
        "detail": "No lease exists any more (it expired or was released). Stop the work it protected.", "outcome": "lost", "reason": "absent"}))]
    LostAbsentProblem, LostTag, 404 ..= 404 {
        #[schema(inline)]
        reason: AbsentReason,
    }
}

problem! {
    /// `lost` with `reason: not_owner` (409): someone else holds the lease
    /// now. Stop the work it protected.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/lost", "title": "Lease lost", "status": 409,
        "detail": "Someone else holds the lease now. Stop the work it protected.", "outcome": "lost", "reason": "not_owner"}))]
    LostNotOwnerProblem, LostTag, 409 ..= 409 {
        #[schema(inline)]
        reason: NotOwnerReason,
    }
}

problem! {
    /// `not_owner` (409): someone else holds the lease; nothing was changed.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/not-owner", "title": "Not the owner", "status": 409,
        "detail": "Someone else holds this lease; nothing was changed.", "outcome": "not_owner"}))]
    NotOwnerProblem, NotOwnerTag, 409 ..= 409 {}
}

problem! {
    /// `unavailable` (503): definitely not applied. The store could not be
    /// reached or refused the command (no connection, pool empty before
    /// send, READONLY/LOADING/MASTERDOWN/CLUSTERDOWN/OOM). Retry later.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/unavailable", "title": "Store unavailable", "status": 503,
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/overloaded", "title": "Overloaded", "status": 503,
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/request-timeout", "title": "Request timed out", "status": 503,
        "detail": "The request exceeded the service's request timeout.", "outcome": "request_timeout"}))]
    RequestTimeoutProblem, RequestTimeoutTag, 503 ..= 503 {}
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/indeterminate", "title": "Outcome unknown", "status": 504,
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/invalid-request", "title": "Invalid request", "status": 422,
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/payload-too-large", "title": "Request body too large", "status": 413,
        "detail": "The request body is limited to 16384 bytes.", "outcome": "payload_too_large"}))]
    PayloadTooLargeProblem, PayloadTooLargeTag, 413 ..= 413 {}
}

problem! {
    /// `unsupported_media_type` (415): the body is not `application/json`.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/unsupported-media-type", "title": "Unsupported media type", "status": 415,
        "detail": "Send the body as application/json.", "outcome": "unsupported_media_type"}))]
    UnsupportedMediaTypeProblem, UnsupportedMediaTypeTag, 415 ..= 415 {}
}

problem! {
    /// `unauthorized` (401): API keys are configured and no valid
    /// `Authorization: Bearer <key>` was sent.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/unauthorized", "title": "Unauthorized", "status": 401,
        "detail": "Send a valid API key as 'Authorization: Bearer <key>'.", "outcome": "unauthorized"}))]
    UnauthorizedProblem, UnauthorizedTag, 401 ..= 401 {}
}

problem! {
    /// `forbidden` (403): the API key may not use this purpose.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/forbidden", "title": "Forbidden", "status": 403,
        "detail": "This API key may not use this purpose.", "outcome": "forbidden"}))]
    ForbiddenProblem, ForbiddenTag, 403 ..= 403 {}
}

problem! {
    /// `not_found` (404): no such route, e.g. an empty path segment.
    #[schema(example = json!({"type": "https://leasehold.dev/problems/not-found", "title": "Not found", "status": 404,
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
    #[schema(example = json!({"type": "https://leasehold.dev/problems/not-ready", "title": "Not ready", "status": 503,
        "detail": "connection refused", "outcome": "not_ready", "topology": "standalone", "writable": false}))]
    NotReadyProblem, NotReadyTag, 503 ..= 503 {
        /// `memory`, `standalone`, `cluster` or `sentinel`.
        topology: String,
        /// Always false here.
        writable: bool,
    }
}
