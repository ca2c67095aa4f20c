//! The OpenAPI shapes of the session routes ([`super::sessions`]): bodies,
//! answers and problems.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::{HolderLabel, Mode};

/// Body of `POST /sessions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(example = json!({"ttlMs": 15000, "holder": "worker-7"}))]
pub struct SessionBody {
    /// The session's time to live in milliseconds, from 1000 to the largest
    /// TTL (3600000 by default); every lease on it ends when it does.
    #[serde(deserialize_with = "super::leases::whole_ms")]
    #[schema(minimum = 1000, maximum = 3600000, example = 15000)]
    pub ttl_ms: u64,
    /// Optional: a public label for the holder, as a lease's.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$", example = "worker-7")]
    pub holder: Option<HolderLabel>,
}

/// Body of `PATCH /sessions/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(example = json!({"ttlMs": 15000}))]
pub struct SessionRenewBody {
    /// Optional: the new TTL in milliseconds (1000 to 3600000 by default;
    /// left out: the session's own).
    #[serde(default, deserialize_with = "super::leases::whole_opt")]
    #[schema(minimum = 1000, maximum = 3600000, example = 15000, nullable = false)]
    pub ttl_ms: Option<u64>,
}

/// Body of `PUT /sessions/{id}/leases/{purpose}/{digest}`: an acquire's,
/// without `ttlMs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(example = json!({"holder": "worker-7", "waitMs": 0}))]
pub struct SessionAcquireBody {
    /// Optional: how long to wait server-side (0 to 30000 ms by default).
    #[serde(default, deserialize_with = "super::leases::whole_ms")]
    #[schema(minimum = 0, maximum = 30000, example = 0)]
    pub wait_ms: u64,
    /// Optional: a public label for the holder.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$", example = "worker-7")]
    pub holder: Option<HolderLabel>,
    /// Optional: how many may hold it at once (1 to 10000; left out: 1).
    #[serde(default, deserialize_with = "super::leases::whole_opt")]
    #[schema(minimum = 1, maximum = 10000, nullable = false)]
    pub limit: Option<u64>,
    /// Optional: `exclusive` (left out) or `shared`.
    #[serde(default)]
    #[schema(nullable = false)]
    pub mode: Option<Mode>,
    /// Optional: the lock-delay after an expiry (0 to 60000 ms; left out: 0).
    #[serde(default, deserialize_with = "super::leases::whole_opt")]
    #[schema(minimum = 0, maximum = 60000, nullable = false)]
    pub lock_delay_ms: Option<u64>,
    /// Optional: bounds the whole hold (20 to 2592000000 ms; left out: none).
    #[serde(default, deserialize_with = "super::leases::whole_opt")]
    #[schema(minimum = 20, maximum = 2592000000_i64, nullable = false)]
    pub max_hold_ms: Option<u64>,
}

/// A session as answers show it (never its secret).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDoc {
    /// The public id: `s1.` and 32 hex digits, derived from the secret.
    #[schema(
        pattern = r"^s1\.[0-9a-f]{32}$",
        example = "s1.7c3f0e2a9b814d6f8a1c2e3b4d5f6a7b"
    )]
    pub id: String,
    /// The public holder label, when one was given.
    #[schema(nullable = false)]
    pub holder: Option<String>,
    /// The TTL of the last renewal.
    #[schema(minimum = 1, maximum = 3600000)]
    pub ttl_ms: u64,
    /// Time left, by the store's clock.
    #[schema(minimum = 0, maximum = 3600000)]
    pub remaining_ms: u64,
    /// When it ends unless renewed (RFC 3339, UTC, ms).
    #[schema(format = DateTime)]
    pub expires_at: String,
    /// When it was made.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When it was last renewed.
    #[schema(format = DateTime)]
    pub renewed_at: String,
    /// How many leases are on it.
    #[schema(minimum = 0)]
    pub leases: u64,
}

/// An attached lease a renew no longer holds.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LostLeaseDoc {
    /// Its purpose.
    pub purpose: String,
    /// Its digest.
    pub digest: String,
    /// Why: `absent`, `revoked`, `max_hold` or `not_owner`.
    #[schema(pattern = "^(absent|revoked|max_hold|not_owner)$")]
    pub reason: String,
}

/// A lease on a session, as `readSession` lists it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionLeaseDoc {
    /// Its purpose.
    pub purpose: String,
    /// Its digest.
    pub digest: String,
}

/// The 2xx answers of the session verbs: `outcome` says which members come.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"outcome": "session_created", "session": {"id": "s1.7c3f0e2a9b814d6f8a1c2e3b4d5f6a7b",
    "holder": "worker-7", "ttlMs": 15000, "remainingMs": 15000, "expiresAt": "2026-12-06T00:00:15.000Z",
    "createdAt": "2026-12-06T00:00:00.000Z", "renewedAt": "2026-12-06T00:00:00.000Z", "leases": 0}}))]
pub struct SessionAnswer {
    /// `session_created`, `replayed_same_operation`, `renewed` (`session`,
    /// `lost`), `ended` (`released`), `already_absent`, or `session`
    /// (`session`, `leases`, `nextCursor`?).
    #[schema(
        pattern = "^(session_created|replayed_same_operation|renewed|ended|already_absent|session)$"
    )]
    pub outcome: String,
    /// The session.
    #[schema(nullable = false)]
    pub session: Option<SessionDoc>,
    /// `renewed`: the attached leases it no longer holds.
    #[schema(nullable = false)]
    pub lost: Option<Vec<LostLeaseDoc>>,
    /// `ended`: how many leases it released.
    #[schema(nullable = false, minimum = 0)]
    pub released: Option<u64>,
    /// `session`: a page of its leases.
    #[schema(nullable = false, max_items = 1000)]
    pub leases: Option<Vec<SessionLeaseDoc>>,
    /// `session`: the next page's cursor.
    #[schema(nullable = false, pattern = r"^[0-9]{1,9}$")]
    pub next_cursor: Option<String>,
}
