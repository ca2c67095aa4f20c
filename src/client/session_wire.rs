//! The session answers as the client reads them (docs/design.md §18, §19):
//! [`SessionInfo`], the lost leases of a session renew, the gone reasons,
//! and the id a session's secret names.

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::domain::{HolderLabel, OwnerToken, StoreTime};

/// A session as the service shows it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The public id: `s1.` and 32 lowercase hex digits.
    pub id: String,
    /// The public holder label, when one was given.
    #[serde(default)]
    pub holder: Option<HolderLabel>,
    /// The TTL of the last renewal (or of the creation).
    pub ttl_ms: u64,
    /// Time left by the store's clock when the answer was made. Treat the
    /// session as alive for at most this minus the drift budget, counted
    /// from when the request was *sent*.
    pub remaining_ms: u64,
    /// When it ends unless renewed (the store's clock).
    pub expires_at: StoreTime,
    /// When it was made.
    pub created_at: StoreTime,
    /// When it was last renewed.
    pub renewed_at: StoreTime,
    /// How many leases are attached.
    pub leases: u64,
}

/// Why the service says a session is gone (`lost` `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionGone {
    /// `session_ended`: ended by a `DELETE`, or its keep-alive stream closed.
    Ended,
    /// `session_expired`: not renewed in time.
    Expired,
    /// `absent`: no such session (never made, or gone long enough that
    /// the service forgot it).
    Absent,
}

impl SessionGone {
    /// Reads a `reason` member.
    pub(super) fn parse(reason: &str) -> Option<Self> {
        match reason {
            "session_ended" => Some(Self::Ended),
            "session_expired" => Some(Self::Expired),
            "absent" => Some(Self::Absent),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ended => "session_ended",
            Self::Expired => "session_expired",
            Self::Absent => "absent",
        }
    }
}

/// An attached lease a session renew no longer holds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LostLease {
    /// Its purpose.
    pub purpose: String,
    /// Its digest.
    pub digest: String,
    /// `revoked` (an operator broke it), `max_hold` (its hold bound),
    /// `not_owner` or `absent`.
    pub reason: String,
}

/// One attached lease of a `GET /sessions/{id}` page.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AttachedLease {
    /// Its purpose.
    pub purpose: String,
    /// Its digest.
    pub digest: String,
}

/// A page of `GET /sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPage {
    /// The session now.
    pub session: SessionInfo,
    /// Up to `limit` of its leases.
    pub leases: Vec<AttachedLease>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<String>,
}

/// Every member a session answer (or keep-alive event) may carry.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SessionWire {
    #[serde(default)]
    pub(super) outcome: Option<String>,
    #[serde(default)]
    pub(super) session: Option<SessionInfo>,
    #[serde(default)]
    pub(super) lost: Option<Vec<LostLease>>,
    #[serde(default)]
    pub(super) reason: Option<String>,
    #[serde(default)]
    pub(super) released: Option<u64>,
    #[serde(default)]
    pub(super) leases: Option<Vec<AttachedLease>>,
    #[serde(default)]
    pub(super) next_cursor: Option<String>,
}

impl SessionWire {
    /// The members of `bytes`, or nothing when it is not a JSON object.
    pub(super) fn read(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// A keep-alive stream event's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StreamData {
    /// `renewed`: the session as the renewal left it, and any attached
    /// leases the renewal found gone (when the service says).
    Renewed {
        session: SessionInfo,
        lost: Vec<LostLease>,
    },
    /// `lost`: the session is gone.
    Lost(SessionGone),
    /// Something else (a future event): ignored.
    Other,
}

/// Reads one keep-alive event; `None` when its data breaks the contract.
pub(super) fn stream_data(event: &str, data: &str) -> Option<StreamData> {
    match event {
        "renewed" => {
            // The data is a renew's answer (`session`, `lost`); a bare
            // Session is read too.
            if let Ok(session) = serde_json::from_str::<SessionInfo>(data) {
                return Some(StreamData::Renewed {
                    session,
                    lost: serde_json::from_str::<SessionWire>(data)
                        .ok()
                        .and_then(|w| w.lost)
                        .unwrap_or_default(),
                });
            }
            let wire: SessionWire = serde_json::from_str(data).ok()?;
            Some(StreamData::Renewed {
                session: wire.session?,
                lost: wire.lost.unwrap_or_default(),
            })
        }
        "lost" => {
            let wire: SessionWire = serde_json::from_str(data).ok()?;
            SessionGone::parse(wire.reason.as_deref()?).map(StreamData::Lost)
        }
        _ => Some(StreamData::Other),
    }
}

/// The id of the session whose secret is `token`: `s1.` and the first 16
/// bytes of `sha256("leasehold-session\x1f" + token)` in lowercase hex.
pub fn session_id_of(token: &OwnerToken) -> String {
    let mut hash = Sha256::new();
    hash.update(b"leasehold-session\x1f");
    hash.update(token.expose().as_bytes());
    let sum = hash.finalize();
    let mut id = String::with_capacity(35);
    id.push_str("s1.");
    for b in &sum[..16] {
        id.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        id.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    id
}
