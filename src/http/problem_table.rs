//! Every problem the service answers, written once: its status(es), the
//! `title` and `detail` of its answers, and what its `/problems/<slug>`
//! page says it means and what to do about it.
//!
//! The answers ([`super::problem`]), the pages ([`super::problems`]) and
//! the OpenAPI examples ([`super::openapi`]) all read their words from
//! here; a unit test (`openapi/same_words.rs`) renders each and compares.
//! To add a problem: a [`ProblemType`] variant, its place in
//! [`ProblemType::ALL`], and its [`Row`].

use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

/// What one kind of problem answer says: its `title` and `detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Words {
    /// The `title` member.
    pub title: &'static str,
    /// The `detail` member. [`LIMIT`], [`SCOPE`] or [`PURPOSE`] in it
    /// stand for the occurrence's value.
    pub detail: &'static str,
}

impl Words {
    /// No words: the answer is not a problem.
    pub const NONE: Self = Self {
        title: "",
        detail: "",
    };
}

/// In a `detail`: the limit the request was over, in bytes.
pub const LIMIT: &str = "{limit}";

/// In a `detail`: the scope the API key lacks.
pub const SCOPE: &str = "{scope}";

/// In a `detail`: the purpose the request named.
pub const PURPOSE: &str = "{purpose}";

/// One problem type: what its answers say and what its page says.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The page's path segment: the `outcome` with dashes.
    pub slug: &'static str,
    /// The statuses it is answered with (the first is the usual one).
    pub statuses: &'static [u16],
    /// The `title` of its answers, and its page's heading.
    pub title: &'static str,
    /// The `detail` of its answers. Empty for `invalid_request`, whose
    /// detail lists the invalid fields; for `not_ready`, the detail when
    /// the store gave no reason.
    pub detail: &'static str,
    /// Its page: what happened (HTML).
    pub meaning: &'static str,
    /// Its page: what to do (HTML).
    pub action: &'static str,
}

/// A problem type: the `outcome` of a problem answer, with dashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemType {
    /// `invalid_request`.
    InvalidRequest,
    /// `unauthorized`.
    Unauthorized,
    /// `forbidden`.
    Forbidden,
    /// `not_found`.
    NotFound,
    /// `method_not_allowed`.
    MethodNotAllowed,
    /// `payload_too_large`.
    PayloadTooLarge,
    /// `unsupported_media_type`.
    UnsupportedMediaType,
    /// `headers_too_large`.
    HeadersTooLarge,
    /// `owner_operation_conflict`.
    OwnerOperationConflict,
    /// `contended`.
    Contended,
    /// `limit_mismatch`.
    LimitMismatch,
    /// `lost`.
    Lost,
    /// `not_owner`.
    NotOwner,
    /// `nothing_to_break`.
    NothingToBreak,
    /// `session_full`.
    SessionFull,
    /// `unavailable`.
    Unavailable,
    /// `overloaded`.
    Overloaded,
    /// `request_timeout`.
    RequestTimeout,
    /// `not_ready`.
    NotReady,
    /// `indeterminate`.
    Indeterminate,
    /// `internal`.
    Internal,
}

impl ProblemType {
    /// Every problem type, in the order of the index.
    pub const ALL: [Self; 21] = [
        Self::InvalidRequest,
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::HeadersTooLarge,
        Self::OwnerOperationConflict,
        Self::Contended,
        Self::LimitMismatch,
        Self::Lost,
        Self::NotOwner,
        Self::NothingToBreak,
        Self::SessionFull,
        Self::Unavailable,
        Self::Overloaded,
        Self::RequestTimeout,
        Self::NotReady,
        Self::Indeterminate,
        Self::Internal,
    ];

    /// The path segment: the outcome with dashes.
    pub const fn slug(self) -> &'static str {
        self.row().slug
    }

    /// The `outcome` member of its answers.
    pub fn outcome(self) -> String {
        self.slug().replace('-', "_")
    }

    /// The problem type a slug names.
    pub fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.slug() == slug)
    }

    /// The status its answers usually have (the first listed).
    pub fn status(self) -> StatusCode {
        self.row()
            .statuses
            .first()
            .and_then(|s| StatusCode::from_u16(*s).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The `title` and `detail` of its usual answer.
    pub const fn words(self) -> Words {
        let row = self.row();
        Words {
            title: row.title,
            detail: row.detail,
        }
    }

    /// The table: every problem type's row.
    pub const fn row(self) -> Row {
        match self {
            Self::InvalidRequest => Row {
                slug: "invalid-request",
                statuses: &[400, 422],
                title: "Invalid request",
                detail: "",
                meaning: "A path parameter, an attempt header or the JSON body is malformed (400), or well-formed JSON holds an invalid value: a TTL or wait out of bounds, a wrong type, an unknown or missing member (422). Nothing was done.",
                action: "Read <code>errors</code>: each entry names a field (<code>purpose</code>, <code>digest</code>, <code>Lease-Owner-Token</code>, <code>ttlMs</code>, <code>body</code>, ...) and what is wrong with it. Fix the request; retrying it unchanged gives the same answer.",
            },
            Self::Unauthorized => Row {
                slug: "unauthorized",
                statuses: &[401],
                title: "Unauthorized",
                detail: "Send a valid API key as 'Authorization: Bearer <key>'.",
                meaning: "The service runs with API keys and the request carried no valid one.",
                action: "Send <code>Authorization: Bearer &lt;key&gt;</code> with a key from the service's keys file.",
            },
            Self::Forbidden => Row {
                slug: "forbidden",
                statuses: &[403],
                title: "Forbidden",
                detail: "This API key may not use this purpose.",
                meaning: "The API key is valid but may not use this lease's purpose, or lacks the scope the route needs: <code>read</code> to inspect, list or watch, <code>write</code> to acquire, renew or release, <code>admin</code> to break, <code>metrics</code> for <code>/metrics</code> (the problem's <code>scope</code> member names it, and <code>purpose</code> the purpose when there is one).",
                action: "Use a key allowed this purpose or scope, or ask the operator to grant it in the keys file.",
            },
            Self::NotFound => Row {
                slug: "not-found",
                statuses: &[404],
                title: "Not found",
                detail: "No such route. See /openapi.json.",
                meaning: "No route matches the path (for example an empty or extra path segment), or no such problem type page exists.",
                action: "Check the path against <a href=\"/openapi.json\">/openapi.json</a> or <a href=\"/docs\">/docs</a>.",
            },
            Self::MethodNotAllowed => Row {
                slug: "method-not-allowed",
                statuses: &[405],
                title: "Method not allowed",
                detail: "This route does not accept this method. See /openapi.json.",
                meaning: "The route exists but not with this method.",
                action: "Check the methods of the route in <a href=\"/openapi.json\">/openapi.json</a>.",
            },
            Self::PayloadTooLarge => Row {
                slug: "payload-too-large",
                statuses: &[413],
                title: "Request body too large",
                detail: "The request body is limited to {limit} bytes.",
                meaning: "The request body is over the service's limit (16 KiB by default). Nothing was done.",
                action: "Send a smaller body; lease bodies are a few bytes.",
            },
            Self::UnsupportedMediaType => Row {
                slug: "unsupported-media-type",
                statuses: &[415],
                title: "Unsupported media type",
                detail: "Send the body as application/json.",
                meaning: "The request body is not declared as JSON. Nothing was done.",
                action: "Send the body with <code>Content-Type: application/json</code>.",
            },
            Self::HeadersTooLarge => Row {
                slug: "headers-too-large",
                statuses: &[431],
                title: "Request headers too large",
                detail: "The request's headers are limited to {limit} bytes in all.",
                meaning: "The request's header block (names and values) is over 16 KiB. Nothing was done.",
                action: "Send fewer or shorter headers.",
            },
            Self::OwnerOperationConflict => Row {
                slug: "owner-operation-conflict",
                statuses: &[409],
                title: "Held by another operation of the same owner",
                detail: "The owner token holds this lease for a different operation id; an operation never inherits another's lease.",
                meaning: "The owner token holds this lease for a different operation id. An operation never inherits another's lease.",
                action: "Finish or release the other operation's lease, or wait <code>retryAfterMs</code>. Use one attempt (owner token and operation id) per unit of work.",
            },
            Self::Contended => Row {
                slug: "contended",
                statuses: &[409],
                title: "Lease held by someone else",
                detail: "Another owner holds this lease. Retry after retryAfterMs, or send waitMs to wait server-side.",
                meaning: "Another owner holds the lease (or every permit of a counting lease, or holders of the other mode). Nothing was changed. <code>retryAfterMs</code> is the soonest holder expiry (or a short fallback); <code>waitedMs</code> is present when the request waited server-side. <code>reason</code>, when present: <code>lock_delay</code> (a holder's lease expired and its lock-delay runs for <code>retryAfterMs</code> more) or <code>queued</code> (waiters that started earlier go first).",
                action: "Retry after <code>retryAfterMs</code> (also in <code>Retry-After</code>, whole seconds), or send <code>waitMs</code> to wait server-side, in a fair queue, until it is your turn.",
            },
            Self::LimitMismatch => Row {
                slug: "limit-mismatch",
                statuses: &[409],
                title: "Limit mismatch",
                detail: "The resource is held with another limit; every holder must ask with the same limit (the current one is in `limit`).",
                meaning: "The resource is held as a counting lease with another <code>limit</code> than the one asked for. Every holder must ask with the same limit; <code>limit</code> carries the current one. Nothing was changed.",
                action: "Ask with the current <code>limit</code>, or wait until every holder has let go (then any limit starts afresh).",
            },
            Self::Lost => Row {
                slug: "lost",
                statuses: &[404, 409],
                title: "Lease lost",
                detail: "No lease exists any more (it expired or was released). Stop the work it protected.",
                meaning: "A renew found that the caller no longer holds the lease: <code>reason: absent</code> (404) when no lease exists any more (it expired or was released), <code>reason: revoked</code> (404) when an operator broke the caller's permit (whoever holds the resource now), <code>reason: not_owner</code> (409) when someone else holds it now.",
                action: "Stop the work the lease protected, at once. Acquire again (with a new attempt) before resuming it; the new lease has a higher fencing token.",
            },
            Self::NotOwner => Row {
                slug: "not-owner",
                statuses: &[409],
                title: "Not the owner",
                detail: "Someone else holds this lease; nothing was changed.",
                meaning: "A release found the lease held by someone else. Nothing was changed.",
                action: "Nothing to release: the caller's lease ended earlier. Check that the attempt headers are the ones the lease was acquired with.",
            },
            Self::SessionFull => Row {
                slug: "session-full",
                statuses: &[409],
                title: "Session full",
                detail: "The session holds the most leases a session may; the lease was not taken.",
                meaning: "An acquire on a session (<code>PUT /sessions/{id}/leases/...</code>) found the session holding <code>limit</code> leases, the configured most (<code>LEASEHOLD_SESSION_MAX_LEASES</code>, 10000 by default). Nothing was taken.",
                action: "Release leases of the session, or spread the work over several sessions.",
            },
            Self::NothingToBreak => Row {
                slug: "nothing-to-break",
                statuses: &[404],
                title: "Nothing to break",
                detail: "No live permit of this resource (with that fencing token); nothing was changed.",
                meaning: "A break found no live permit of the resource, or none with the <code>fencingToken</code> asked for (it expired, was released or was broken already). Nothing was changed.",
                action: "Inspect the resource: its <code>permits</code> list the live fencing tokens. Nothing is left to break when it is free.",
            },
            Self::Unavailable => Row {
                slug: "unavailable",
                statuses: &[503],
                title: "Store unavailable",
                detail: "The lease store could not be reached or refused the command; nothing was applied. Retry later.",
                meaning: "The lease store could not be reached or refused the command (no connection, pool empty, a read-only or loading replica, out of memory). The command was definitely <em>not</em> applied.",
                action: "Retry after <code>retryAfterMs</code> (also in <code>Retry-After</code>), with the same attempt.",
            },
            Self::Overloaded => Row {
                slug: "overloaded",
                statuses: &[503],
                title: "Overloaded",
                detail: "The service shed this request before touching the store; nothing was applied. Retry later.",
                meaning: "The service shed the request by its own admission limit (store calls in flight, or server-side waiters) before touching the store. Nothing was applied.",
                action: "Retry after <code>retryAfterMs</code> (also in <code>Retry-After</code>), with the same attempt.",
            },
            Self::RequestTimeout => Row {
                slug: "request-timeout",
                statuses: &[503],
                title: "Request timed out",
                detail: "The request exceeded the service's request timeout.",
                meaning: "The request took longer than the service's per-request timeout.",
                action: "Retry after <code>Retry-After</code>. For a lease verb whose effect may matter, inspect the lease or retry with the same attempt.",
            },
            Self::NotReady => Row {
                slug: "not-ready",
                statuses: &[503],
                title: "Not ready",
                detail: "The store did not answer as a writable primary.",
                meaning: "<code>/readyz</code>: the store did not answer as a writable primary within the command timeout.",
                action: "Route traffic to another instance until this one is ready; check the store.",
            },
            Self::Indeterminate => Row {
                slug: "indeterminate",
                statuses: &[504],
                title: "Outcome unknown",
                detail: "The command was sent but no certain reply came: it may or may not have been applied. Inspect, or retry with the same attempt.",
                meaning: "The command was sent to the store but no certain reply came: it may or may not have been applied. <code>operationId</code> names the operation.",
                action: "Inspect the lease with the same attempt headers, or retry with the same attempt: a retried acquire that had been applied answers <code>replayed_same_operation</code>, never a second lease.",
            },
            Self::Internal => Row {
                slug: "internal",
                statuses: &[500],
                title: "Internal error",
                detail: "The service failed unexpectedly; the failure was logged.",
                meaning: "The service failed unexpectedly. The answer carries no internal detail; the failure was logged.",
                action: "Retry; report the request id (<code>X-Request-Id</code>) to the operator if it persists.",
            },
        }
    }
}

// Answers that say something else than their type's usual words.

/// `contended` with `reason: lock_delay`.
pub const CONTENDED_LOCK_DELAY: Words = Words {
    title: "Lock-delay running",
    detail: "The last holder's lease expired and its lock-delay still runs; nobody else may acquire it until retryAfterMs has passed.",
};

/// `contended` with `reason: queued`.
pub const CONTENDED_QUEUED: Words = Words {
    title: "Waiters go first",
    detail: "Waiters that started earlier are queued for this resource and go first. Send waitMs to take a place in the queue.",
};

/// `lost` with `reason: not_owner` (409); `reason: absent` (404) is the usual one.
pub const LOST_NOT_OWNER: Words = Words {
    title: ProblemType::Lost.row().title,
    detail: "Someone else holds the lease now. Stop the work it protected.",
};

/// `lost` with `reason: revoked` (404).
pub const LOST_REVOKED: Words = Words {
    title: ProblemType::Lost.row().title,
    detail: "An operator broke this lease. Stop the work it protected.",
};

/// `lost` (404) after the lease's hold bound (`maxHoldMs`) ran out.
pub const LOST_MAX_HOLD: Words = Words {
    title: ProblemType::Lost.row().title,
    detail: "This lease reached its maxHoldMs and ended there. Stop the work it protected.",
};

/// `lost` (404): the session a call named was ended.
pub const LOST_SESSION_ENDED: Words = Words {
    title: ProblemType::Lost.row().title,
    detail: "The session was ended (DELETE, or its keep-alive stream closed); its leases were released. Stop the work they protected.",
};

/// `lost` (404): the session a call named expired, or never was.
pub const LOST_SESSION_EXPIRED: Words = Words {
    title: ProblemType::Lost.row().title,
    detail: "The session expired (it was not renewed in time), or no such session exists; its leases ended with it. Stop the work they protected.",
};

/// `owner_operation_conflict` (409): the owner token made a live session
/// for another operation.
pub const SESSION_OTHER_OPERATION: Words = Words {
    title: ProblemType::OwnerOperationConflict.row().title,
    detail: "The owner token made a live session for a different operation id; nothing was made. Make a new attempt for a new session.",
};

/// `not_owner` (409): the owner token sent is not the session's secret.
pub const SESSION_NOT_OWNER: Words = Words {
    title: ProblemType::NotOwner.row().title,
    detail: "The owner token sent is not this session's secret; nothing was changed.",
};

/// `forbidden` for a route that needs a scope the key lacks.
pub const MISSING_SCOPE: Words = Words {
    title: ProblemType::Forbidden.row().title,
    detail: "This API key lacks the '{scope}' scope.",
};

/// `forbidden` for a lease verb that needs a scope (`read`, `write`) the key
/// lacks on the purpose it may otherwise use.
pub const MISSING_PURPOSE_SCOPE: Words = Words {
    title: ProblemType::Forbidden.row().title,
    detail: "This API key lacks the '{scope}' scope for purpose '{purpose}'.",
};

/// `request_timeout` (408) when the request body did not arrive in time.
pub const BODY_TIMEOUT: Words = Words {
    title: "Request body timed out",
    detail:
        "The request body did not arrive within the service's request timeout; nothing was done.",
};
