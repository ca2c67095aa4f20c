//! Sessions in the store (docs/design.md §18): a session's record and its
//! set of attached leases ([`Store::session`], [`Store::session_page`]),
//! and the light renew of a batch of attached leases
//! ([`Store::renew_attached`]). On Redis the record and the set share the
//! session's slot (`lua/session.lua`); each lease stays in its own slot
//! (`lua/session_renew.lua`, batched per slot). The embedded store keeps
//! them in a map ([`MemorySessions`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::{Store, StoreError};
use crate::domain::{
    AttachedRenew, HolderLabel, OperationId, OwnerToken, ResourceId, SessionId, SessionRecord,
    StoreTime,
};

/// What a session call asks.
#[derive(Debug, Clone, Copy)]
pub enum SessionCall<'a> {
    /// Make it (or find the same attempt's).
    Create {
        /// The attempt's operation id.
        operation_id: &'a str,
        /// Its TTL.
        ttl_ms: u64,
        /// Its public label.
        holder: Option<&'a HolderLabel>,
    },
    /// Give it `ttl_ms` from now (`None`: its own TTL; the keep time
    /// then follows that TTL, as [`keep_ms`] says).
    Renew {
        /// The new TTL.
        ttl_ms: Option<u64>,
    },
    /// Add a lease (a [`crate::domain::member`]) unless it holds `max`.
    Attach {
        /// The lease.
        member: &'a str,
        /// The most leases a session holds.
        max: u64,
    },
    /// Remove a lease.
    Detach {
        /// The lease.
        member: &'a str,
    },
    /// Mark it ended (its leases are released by the caller, then
    /// [`SessionCall::Forget`]).
    End,
    /// Read it.
    Get,
    /// Drop its set of leases.
    Forget,
}

/// What a session call found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionFound {
    /// Live (after the call).
    Live(SessionRecord),
    /// `Create` found the same operation's session.
    Replayed(SessionRecord),
    /// `Create` found another operation's live session.
    OtherOperation,
    /// `Attach` found it holding the most leases.
    Full(SessionRecord),
    /// Ended.
    Ended,
    /// Not renewed in time.
    Expired,
    /// No such session (never made, or gone past its keep time).
    Absent,
    /// `Detach` and `Forget` done.
    Done,
}

/// How long a session's record outlives its end or expiry: its TTL, at
/// least a minute, at most an hour (design §20: nothing lives longer).
pub fn keep_ms(ttl_ms: u64) -> u64 {
    ttl_ms.clamp(60_000, 3_600_000)
}

impl Store {
    /// Runs `call` on session `id`.
    pub async fn session(
        &self,
        id: &SessionId,
        call: SessionCall<'_>,
        keep_ms: u64,
    ) -> Result<SessionFound, StoreError> {
        match self {
            Store::Memory(s) => Ok(s.sessions.call(id, call, keep_ms)),
            Store::Redis(s) => s.session(id, call, keep_ms).await,
        }
    }

    /// At most `limit` of session `id`'s leases from `offset` (in the
    /// order they were attached).
    pub async fn session_page(
        &self,
        id: &SessionId,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<String>, StoreError> {
        match self {
            Store::Memory(s) => Ok(s.sessions.page(id, offset, limit)),
            Store::Redis(s) => s.session_page(id, offset, limit).await,
        }
    }

    /// Gives each of `leases` (held by `owner` for the operation id) the
    /// expiry `expires_at` where nothing else needs deciding; the rest
    /// come back [`AttachedRenew::Unsure`], for the caller to renew as
    /// leases of their own (the embedded store: every one). `now`: the
    /// store's time at the session call that set `expires_at`, which a
    /// lease renewed from what this instance remembers records as renewed
    /// at (`src/store/redis/remembered.rs`).
    pub async fn renew_attached(
        &self,
        owner: &OwnerToken,
        leases: &[(ResourceId, OperationId)],
        expires_at: StoreTime,
        now: StoreTime,
    ) -> Result<Vec<AttachedRenew>, StoreError> {
        match self {
            Store::Memory(_) => Ok(vec![AttachedRenew::Unsure; leases.len()]),
            Store::Redis(s) => s.renew_attached(owner, leases, expires_at, now).await,
        }
    }
}

struct Kept {
    record: SessionRecord,
    ended: bool,
    /// When the record goes (its end or expiry plus the keep time).
    gone_at: u64,
    /// Members with the order they were attached in.
    leases: BTreeSet<(u64, String)>,
    seq: u64,
}

/// The embedded store's sessions, bounded: at most `cap` records (the
/// store's lease cap); records past their keep time go first.
pub struct MemorySessions {
    map: Mutex<HashMap<SessionId, Kept>>,
    cap: usize,
}

impl MemorySessions {
    /// At most `cap` sessions.
    pub fn new(cap: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            cap: cap.max(1),
        }
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn call(&self, id: &SessionId, call: SessionCall<'_>, keep_ms: u64) -> SessionFound {
        let now = Self::now();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(id).is_some_and(|k| k.gone_at <= now) {
            map.remove(id);
        }
        let Some(kept) = map.get_mut(id) else {
            let SessionCall::Create {
                operation_id,
                ttl_ms,
                holder,
            } = call
            else {
                return match call {
                    SessionCall::Detach { .. } | SessionCall::Forget => SessionFound::Done,
                    _ => SessionFound::Absent,
                };
            };
            if map.len() >= self.cap {
                map.retain(|_, k| k.gone_at > now);
            }
            if map.len() >= self.cap {
                // As full as the lease map may be: refuse, like a full store.
                return SessionFound::Full(SessionRecord {
                    operation_id: String::new(),
                    holder: None,
                    ttl_ms,
                    created_at: StoreTime(now),
                    renewed_at: StoreTime(now),
                    expires_at: StoreTime(now),
                    leases: 0,
                    now: StoreTime(now),
                });
            }
            let record = SessionRecord {
                operation_id: operation_id.to_owned(),
                holder: holder.cloned(),
                ttl_ms,
                created_at: StoreTime(now),
                renewed_at: StoreTime(now),
                expires_at: StoreTime(now + ttl_ms),
                leases: 0,
                now: StoreTime(now),
            };
            map.insert(
                id.clone(),
                Kept {
                    record: record.clone(),
                    ended: false,
                    gone_at: now + ttl_ms + keep_ms,
                    leases: BTreeSet::new(),
                    seq: 0,
                },
            );
            return SessionFound::Live(record);
        };
        match call {
            SessionCall::Detach { member } => {
                kept.leases.retain(|(_, m)| m != member);
                return SessionFound::Done;
            }
            SessionCall::Forget => {
                kept.leases.clear();
                return SessionFound::Done;
            }
            _ => {}
        }
        if kept.ended {
            return SessionFound::Ended;
        }
        if kept.record.expires_at.0 <= now {
            return SessionFound::Expired;
        }
        kept.record.now = StoreTime(now);
        match call {
            SessionCall::Create { operation_id, .. } => {
                if kept.record.operation_id == operation_id {
                    return SessionFound::Replayed(Self::view(kept));
                }
                return SessionFound::OtherOperation;
            }
            SessionCall::Renew { ttl_ms } => {
                let ttl_ms = ttl_ms.unwrap_or(kept.record.ttl_ms);
                let keep_ms = keep_ms.max(self::keep_ms(ttl_ms));
                kept.record.ttl_ms = ttl_ms;
                kept.record.renewed_at = StoreTime(now);
                kept.record.expires_at = StoreTime(now + ttl_ms);
                kept.gone_at = now + ttl_ms + keep_ms;
            }
            SessionCall::Attach { member, max } => {
                if !kept.leases.iter().any(|(_, m)| m == member) {
                    if kept.leases.len() as u64 >= max {
                        return SessionFound::Full(Self::view(kept));
                    }
                    kept.seq += 1;
                    kept.leases.insert((kept.seq, member.to_owned()));
                }
            }
            SessionCall::End => {
                kept.ended = true;
                kept.gone_at = now + keep_ms;
            }
            SessionCall::Get | SessionCall::Detach { .. } | SessionCall::Forget => {}
        }
        SessionFound::Live(Self::view(kept))
    }

    fn view(kept: &Kept) -> SessionRecord {
        SessionRecord {
            leases: kept.leases.len() as u64,
            ..kept.record.clone()
        }
    }

    fn page(&self, id: &SessionId, offset: u64, limit: u64) -> Vec<String> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(id).map_or_else(Vec::new, |k| {
            k.leases
                .iter()
                .skip(usize::try_from(offset).unwrap_or(usize::MAX))
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .map(|(_, m)| m.clone())
                .collect()
        })
    }
}
