//! Sessions (docs/design.md §18, §19): one liveness for many leases. A
//! session is made with an attempt; its id is derived from the attempt's
//! owner token, which is the session's secret, so a retry of the same
//! attempt finds the same session and no answer ever carries the secret.

use std::fmt;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::{HolderLabel, NameError, OwnerToken, StoreTime};

/// The public id of a session: `s1.` and 32 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// The pattern a session id matches.
    pub const PATTERN: &'static str = "^s1\\.[0-9a-f]{32}$";

    /// The id of the session whose secret is `token`.
    pub fn of(token: &OwnerToken) -> Self {
        let mut h = Sha256::new();
        h.update(b"leasehold-session\x1f");
        h.update(token.expose().as_bytes());
        let sum = h.finalize();
        let mut id = String::with_capacity(35);
        id.push_str("s1.");
        for b in &sum[..16] {
            id.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            id.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        Self(id)
    }

    /// Parses an id from a path or body.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let ok = raw.len() == 35
            && raw.starts_with("s1.")
            && raw[3..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(NameError("must be `s1.` and 32 lowercase hex digits"))
        }
    }

    /// Whether `token` is this session's secret.
    pub fn is_secret(&self, token: &OwnerToken) -> bool {
        Self::of(token) == *self
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(|e| serde::de::Error::custom(e.0))
    }
}

/// A session as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The operation id of the attempt that made it (not a secret).
    pub operation_id: String,
    /// The public holder label, if one was given.
    pub holder: Option<HolderLabel>,
    /// The TTL of the last renewal (or of the creation).
    pub ttl_ms: u64,
    /// When it was made (store clock).
    pub created_at: StoreTime,
    /// When it was last renewed (store clock).
    pub renewed_at: StoreTime,
    /// When it ends unless renewed (store clock); every attached lease
    /// ends then too.
    pub expires_at: StoreTime,
    /// How many leases are attached.
    pub leases: u64,
    /// The store's clock when this was read.
    pub now: StoreTime,
}

impl SessionRecord {
    /// Its time left when it was read (store clock).
    pub fn remaining_ms(&self) -> u64 {
        self.expires_at.0.saturating_sub(self.now.0)
    }
}

/// Why a session is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionGone {
    /// Ended by `DELETE`, or by its keep-alive stream closing.
    SessionEnded,
    /// Not renewed in time.
    SessionExpired,
    /// No such session (never made, or gone long enough that its record
    /// was dropped).
    Absent,
}

/// The outcomes of the session verbs (docs/design.md §18).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SessionOutcome {
    /// Made (201).
    SessionCreated {
        /// The session.
        session: SessionView,
    },
    /// The same attempt made it already (200).
    ReplayedSameOperation {
        /// The session.
        session: SessionView,
    },
    /// The owner token made a session for another operation, which lives
    /// (409).
    OwnerOperationConflict,
    /// Renewed, and every attached lease with it (200).
    Renewed {
        /// The session.
        session: SessionView,
        /// Attached leases it no longer holds.
        lost: Vec<LostLease>,
    },
    /// Ended; its leases released (200).
    Ended {
        /// How many leases were released.
        released: u64,
    },
    /// Nothing to end (200).
    AlreadyAbsent,
    /// The session and a page of its leases (200).
    Session {
        /// The session.
        session: SessionView,
        /// Its leases, in the order they were attached.
        leases: Vec<SessionLease>,
        /// The next page's cursor, when there may be more.
        #[serde(rename = "nextCursor", skip_serializing_if = "Option::is_none")]
        next_cursor: Option<String>,
    },
    /// The session is gone (404).
    Lost {
        /// Why.
        reason: SessionGone,
    },
    /// The owner token sent is not this session's secret (409).
    NotOwner,
    /// The session holds the most leases it may (409).
    SessionFull {
        /// The bound.
        limit: u64,
    },
}

impl super::OutcomeName for SessionOutcome {
    fn outcome_name(&self) -> &'static str {
        match self {
            Self::SessionCreated { .. } => "session_created",
            Self::ReplayedSameOperation { .. } => "replayed_same_operation",
            Self::OwnerOperationConflict => "owner_operation_conflict",
            Self::Renewed { .. } => "renewed",
            Self::Ended { .. } => "ended",
            Self::AlreadyAbsent => "already_absent",
            Self::Session { .. } => "session",
            Self::Lost { .. } => "lost",
            Self::NotOwner => "not_owner",
            Self::SessionFull { .. } => "session_full",
        }
    }
}

/// A lease of a session, as `GET /sessions/{id}` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLease {
    /// Its purpose.
    pub purpose: String,
    /// Its digest.
    pub digest: String,
}

/// A session as an answer shows it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The public id.
    pub id: SessionId,
    /// The public holder label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderLabel>,
    /// The TTL of the last renewal.
    pub ttl_ms: u64,
    /// Time left, by the store's clock.
    pub remaining_ms: u64,
    /// When it ends unless renewed (RFC 3339, UTC, ms).
    pub expires_at: StoreTime,
    /// When it was made.
    pub created_at: StoreTime,
    /// When it was last renewed.
    pub renewed_at: StoreTime,
    /// How many leases are attached.
    pub leases: u64,
}

impl SessionView {
    /// The answer's view of `record`.
    pub fn of(id: &SessionId, record: &SessionRecord) -> Self {
        Self {
            id: id.clone(),
            holder: record.holder.clone(),
            ttl_ms: record.ttl_ms,
            remaining_ms: record.remaining_ms(),
            expires_at: record.expires_at,
            created_at: record.created_at,
            renewed_at: record.renewed_at,
            leases: record.leases,
        }
    }
}

/// An attached lease a session renew no longer holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LostLease {
    /// Its purpose.
    pub purpose: String,
    /// Its digest.
    pub digest: String,
    /// Why: `absent`, `revoked`, `max_hold` or `not_owner`.
    pub reason: super::LostReason,
}

/// How one attached lease fared in a session renew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachedRenew {
    /// Its expiry is the session's again.
    Renewed,
    /// The light path could not decide (gone, counted, bounded): the
    /// service renews it as a lease of its own.
    Unsure,
}

/// A member of a session's lease set: `<purpose>\x1f<digest>\x1f<operation id>`.
pub fn member(purpose: &str, digest: &str, operation_id: &str) -> String {
    format!("{purpose}\x1f{digest}\x1f{operation_id}")
}

/// The parts of a [`member`].
pub fn member_parts(member: &str) -> Option<(&str, &str, &str)> {
    let mut it = member.splitn(3, '\x1f');
    Some((it.next()?, it.next()?, it.next()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_derived_from_the_token_and_parses() {
        let token = OwnerToken::parse("Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz").expect("token");
        let id = SessionId::of(&token);
        assert_eq!(id.as_str().len(), 35);
        assert_eq!(SessionId::parse(id.as_str()), Ok(id.clone()));
        assert!(id.is_secret(&token));
        let other = OwnerToken::parse("Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTI0").expect("token");
        assert!(!id.is_secret(&other));
        assert!(SessionId::parse("s1.ABCDEF0123456789abcdef0123456789").is_err());
        assert!(SessionId::parse("s2.0123456789abcdef0123456789abcdef").is_err());
        assert!(SessionId::parse("s1.0123456789abcdef0123456789abcde").is_err());
    }

    #[test]
    fn members_split_back() {
        let m = member("p", "v1.ab", "op-1");
        assert_eq!(member_parts(&m), Some(("p", "v1.ab", "op-1")));
        assert_eq!(member_parts("p\x1fd"), None);
    }
}
