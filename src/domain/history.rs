//! A resource's history: the changes a store saw, newest first, kept
//! bounded ([`HistoryBound`]), and what a read of it asks ([`HistoryLimit`]).

use serde::Serialize;
use utoipa::ToSchema;

use super::{HolderLabel, StoreTime};

/// What one history entry records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryEvent {
    /// A permit was acquired.
    Acquired,
    /// Its holder released it.
    Released,
    /// Its session ended (docs/design.md §18), which released it: event
    /// `released`, `reason: session_ended`.
    SessionEnded,
    /// Its TTL ran out (written by the next script run that saw it: expiry
    /// is lazy).
    Expired,
    /// Its holder label changed on a renew.
    HolderChanged,
    /// An expiry started a lock-delay of this many ms.
    LockDelay {
        /// The delay.
        lock_delay_ms: u64,
    },
    /// An admin broke it.
    Revoked {
        /// The reason given, if any.
        reason: Option<String>,
        /// The name of the API key that broke it (public, never the key).
        key_name: Option<String>,
    },
}

impl HistoryEvent {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            HistoryEvent::Acquired => "acquired",
            HistoryEvent::Released | HistoryEvent::SessionEnded => "released",
            HistoryEvent::Expired => "expired",
            HistoryEvent::HolderChanged => "holder_changed",
            HistoryEvent::LockDelay { .. } => "lock_delay",
            HistoryEvent::Revoked { .. } => "revoked",
        }
    }
}

/// One change of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// What happened.
    pub event: HistoryEvent,
    /// When (store clock): for an expiry, the permit's expiry, unless
    /// `noticed`.
    pub at: StoreTime,
    /// An expiry whose permit was already gone from the store when it was
    /// seen: `at` is when the store noticed, not when it lapsed.
    pub noticed: bool,
    /// The permit's fencing token.
    pub fencing_token: u64,
    /// The resource's version after the change (`<changes>.<live holders>`).
    pub version: String,
    /// The permit's holder label, if it had one.
    pub holder: Option<HolderLabel>,
}

/// `history` (200): the newest changes of a resource, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename = "history", rename_all = "camelCase")]
pub struct History {
    /// The entries, newest first (at most `limit`).
    pub entries: Vec<HistoryItem>,
}

impl super::OutcomeName for History {
    fn outcome_name(&self) -> &'static str {
        "history"
    }
}

/// One change of a resource as the API shows it. Never an owner token or
/// operation id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"event": "acquired", "at": "2026-12-04T13:05:00.123Z",
    "fencingToken": 1764853500123456_u64, "version": "3.1", "holder": "worker-7:8080"}))]
pub struct HistoryItem {
    /// What happened: `acquired`, `released`, `expired` (written by the
    /// next store call that saw the expired permit), `holder_changed`,
    /// `lock_delay` (an expiry started a lock-delay) or `revoked` (broken
    /// by an admin).
    #[schema(value_type = String, example = "acquired",
        pattern = "^(acquired|released|expired|holder_changed|lock_delay|revoked)$")]
    pub event: &'static str,
    /// When (RFC 3339, UTC, ms; the store's clock). For `expired` and
    /// `lock_delay`, the permit's expiry, unless `noticed`.
    #[schema(value_type = String, format = DateTime, example = "2026-12-04T13:05:00.123Z")]
    pub at: StoreTime,
    /// `expired` only, when true: the store had already dropped the
    /// permit when it saw the expiry, so `at` is when it noticed, not when
    /// the permit ran out (which was before).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub noticed: bool,
    /// The permit's fencing token.
    #[schema(
        minimum = 1,
        maximum = 9007199254740991_i64,
        example = 1764853500123456_i64
    )]
    pub fencing_token: u64,
    /// The resource's version after the change (`<changes>.<live holders>`,
    /// as inspect answers it).
    #[schema(
        pattern = r"^[0-9]{1,20}\.[0-9]{1,20}$",
        min_length = 3,
        max_length = 41,
        example = "3.1"
    )]
    pub version: String,
    /// The permit's public holder label, when it had one (for
    /// `holder_changed`, the new one).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, nullable = false, min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$", example = "worker-7:8080")]
    pub holder: Option<HolderLabel>,
    /// `lock_delay` only: the delay, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1, example = 5000)]
    pub lock_delay_ms: Option<u64>,
    /// `revoked`: the reason the admin gave; `released`: `session_ended`
    /// when the lease's session ended (docs/sessions.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, example = "stuck since the deploy")]
    pub reason: Option<String>,
    /// `revoked` only: the name of the API key that broke it (the public
    /// name from the keys file, never the key).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, example = "ops-oncall")]
    pub key_name: Option<String>,
}

impl From<HistoryEntry> for HistoryItem {
    fn from(e: HistoryEntry) -> Self {
        let event = e.event.as_str();
        let (lock_delay_ms, reason, key_name) = match e.event {
            HistoryEvent::LockDelay { lock_delay_ms } => (Some(lock_delay_ms), None, None),
            HistoryEvent::Revoked { reason, key_name } => (None, reason, key_name),
            HistoryEvent::SessionEnded => (None, Some("session_ended".to_owned()), None),
            _ => (None, None, None),
        };
        Self {
            event,
            at: e.at,
            noticed: e.noticed,
            fencing_token: e.fencing_token,
            version: e.version,
            holder: e.holder,
            lock_delay_ms,
            reason,
            key_name,
        }
    }
}

/// One change of a resource as a client reads it (docs/api.md): a
/// [`HistoryItem`] with the event as text (a later service may add kinds).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRecord {
    /// `acquired`, `released`, `expired`, `holder_changed`, `lock_delay` or
    /// `revoked` (a later service may add others).
    pub event: String,
    /// When (the store's clock).
    pub at: StoreTime,
    /// `expired` only: `at` is when the store noticed, not the expiry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub noticed: bool,
    /// The permit's fencing token.
    pub fencing_token: u64,
    /// The resource's version after the change.
    pub version: String,
    /// The permit's holder label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderLabel>,
    /// `lock_delay` only: the delay in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// `revoked` only: the reason given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `revoked` only: the name of the API key that broke it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
}

/// What a store keeps of each resource's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryBound {
    /// The newest entries kept, at most (and the largest read `limit`).
    pub entries: u32,
    /// Older entries are not shown; a history goes this long after its
    /// last entry.
    pub max_age_ms: u64,
}

impl HistoryBound {
    /// The largest `LEASEHOLD_HISTORY_ENTRIES`.
    pub const MAX_ENTRIES: u32 = 10_000;
    /// The largest `LEASEHOLD_HISTORY_MAX_AGE_MS` (30 days).
    pub const MAX_AGE_MS: u64 = 30 * 24 * 3600 * 1000;

    /// Whether an entry written at `at` is still shown at `now`.
    pub fn keeps(&self, at: StoreTime, now: StoreTime) -> bool {
        at.0.saturating_add(self.max_age_ms) > now.0
    }
}

impl Default for HistoryBound {
    /// 100 entries, one hour (what a released resource leaves lives at
    /// most that long by default, design §20).
    fn default() -> Self {
        Self {
            entries: 100,
            max_age_ms: 3600 * 1000,
        }
    }
}

/// How many entries a history read returns: 1 ..= the configured entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimit(u32);

impl HistoryLimit {
    /// Without `limit`: 20, or fewer when the store keeps fewer.
    pub const DEFAULT: u32 = 20;

    /// The default under `bound`.
    pub fn default_for(bound: HistoryBound) -> Self {
        Self(Self::DEFAULT.min(bound.entries).max(1))
    }

    /// Parses the query parameter; `None` when it is not an integer in
    /// 1 ..= `bound.entries`.
    pub fn parse(text: &str, bound: HistoryBound) -> Option<Self> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 9 {
            return None;
        }
        let n: u32 = text.parse().ok()?;
        (1..=bound.entries).contains(&n).then_some(Self(n))
    }

    /// The number.
    pub fn get(self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_stay_within_the_bound() {
        let bound = HistoryBound {
            entries: 5,
            max_age_ms: 1000,
        };
        assert_eq!(HistoryLimit::default_for(bound).get(), 5);
        assert_eq!(HistoryLimit::default_for(HistoryBound::default()).get(), 20);
        assert_eq!(
            HistoryLimit::parse("5", bound).map(HistoryLimit::get),
            Some(5)
        );
        for bad in ["0", "6", "-1", "", "1.5", "x", "+3", "99999999999"] {
            assert_eq!(HistoryLimit::parse(bad, bound), None, "{bad}");
        }
        assert!(bound.keeps(StoreTime(1000), StoreTime(1999)));
        assert!(!bound.keeps(StoreTime(1000), StoreTime(2000)));
    }
}
