//! The embedded store: leases in a map inside this process.
//!
//! Same contract as Redis, fencing included: tokens come from one counter for
//! the whole process, `max(last + 1, wall clock in µs)`, so they are strictly
//! increasing per resource (and across resources) and stay above any token
//! handed out before a restart as long as the wall clock does not step back.
//! It serves one instance only: two processes each with their own map would
//! both grant the same lease. Startup logs a warning saying so.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::{
    Probe, Readiness, StoreAcquire, StoreError, StoreInspect, StoreLease, StorePage, StoreRelease,
    StoreRenew,
};
use crate::domain::{
    Attempt, HeldBy, HolderLabel, ListCursor, Purpose, ResourceDigest, ResourceId, StoreTime, Ttl,
};
use crate::wait::{Change, WaitRegistry};

struct Entry {
    owner_token: String,
    operation_id: String,
    fencing_token: u64,
    expires_at: Instant,
    ttl_ms: u64,
    acquired_at: StoreTime,
    renewed_at: StoreTime,
    holder: Option<HolderLabel>,
    /// The change stamp of the acquisition or last holder change.
    changes: u64,
}

impl Entry {
    fn remaining_ms(&self, now: Instant) -> u64 {
        // Round up like Redis' PTTL would never report 0 for a live key.
        let left = self.expires_at.saturating_duration_since(now);
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    fn held_by(&self, attempt: &Attempt) -> HeldBy {
        if self.owner_token != attempt.owner_token.expose() {
            HeldBy::Other
        } else if self.operation_id != attempt.operation_id.as_str() {
            HeldBy::CallerOtherOperation
        } else {
            HeldBy::Caller
        }
    }

    fn probed(&self, probe: Probe<'_>) -> Option<HeldBy> {
        match probe {
            Probe::Anyone => None,
            Probe::Owner(token) if self.owner_token == token.expose() => {
                Some(HeldBy::CallerOtherOperation)
            }
            Probe::Owner(_) => Some(HeldBy::Other),
            Probe::Attempt(a) => Some(self.held_by(a)),
        }
    }

    fn record(&self, now: Instant) -> StoreLease {
        StoreLease {
            fencing_token: self.fencing_token,
            remaining_ms: self.remaining_ms(now),
            ttl_ms: self.ttl_ms,
            acquired_at: self.acquired_at,
            renewed_at: self.renewed_at,
            holder: self.holder.clone(),
        }
    }
}

struct State {
    /// Ordered by `<purpose>:<digest>`, so a purpose's leases are a range.
    leases: BTreeMap<String, Entry>,
    last_fence: u64,
    /// One counter for every change in this process: a resource's version
    /// is `<stamp of its last change>.<live holders>`.
    changes: u64,
    /// The change stamps of resources that are free again, so their version
    /// stays put; bounded (cleared when it outgrows the lease cap, which at
    /// worst makes a free resource's version `0.0`, still different from
    /// any held version).
    freed: HashMap<String, u64>,
}

/// In-process lease store for a single instance.
pub struct MemoryStore {
    state: Mutex<State>,
    max_leases: usize,
    waiters: Arc<WaitRegistry>,
}

fn wall_ms() -> StoreTime {
    StoreTime(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    )
}

impl MemoryStore {
    /// A store holding at most `max_leases` live leases; releases wake `waiters`.
    pub fn new(max_leases: usize, waiters: Arc<WaitRegistry>) -> Self {
        Self {
            state: Mutex::new(State {
                leases: BTreeMap::new(),
                last_fence: 0,
                changes: 0,
                freed: HashMap::new(),
            }),
            max_leases,
            waiters,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-written
        // (every mutation is a single insert/remove), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks up a live entry, dropping it when it has expired.
    fn live<'a>(state: &'a mut State, key: &str, now: Instant) -> Option<&'a mut Entry> {
        let expired = state.leases.get(key).is_some_and(|e| e.expires_at <= now);
        if expired {
            Self::forget(state, key);
        }
        state.leases.get_mut(key)
    }

    /// Removes an entry, keeping its change stamp for the version.
    fn forget(state: &mut State, key: &str) {
        if let Some(entry) = state.leases.remove(key) {
            if state.freed.len() >= state.leases.len().max(1024) * 2 {
                state.freed.clear();
            }
            state.freed.insert(key.to_owned(), entry.changes);
        }
    }

    fn next_fence(state: &mut State) -> u64 {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        state.last_fence = (state.last_fence + 1).max(now_us);
        state.last_fence
    }

    pub(super) async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<StoreAcquire, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        if let Some(entry) = Self::live(&mut state, &key, now) {
            let remaining_ms = entry.remaining_ms(now);
            return Ok(match entry.held_by(attempt) {
                HeldBy::Caller => StoreAcquire::Replayed(entry.record(now)),
                HeldBy::CallerOtherOperation => StoreAcquire::OwnerOperationConflict {
                    remaining_ms: Some(remaining_ms),
                },
                HeldBy::Other => StoreAcquire::Contended {
                    remaining_ms: Some(remaining_ms),
                },
            });
        }
        if state.leases.len() >= self.max_leases {
            let expired: Vec<String> = state
                .leases
                .iter()
                .filter(|(_, e)| e.expires_at <= now)
                .map(|(k, _)| k.clone())
                .collect();
            for k in expired {
                Self::forget(&mut state, &k);
            }
            if state.leases.len() >= self.max_leases {
                return Err(StoreError::Unavailable("embedded store is full"));
            }
        }
        let fencing_token = Self::next_fence(&mut state);
        state.changes += 1;
        let changes = state.changes;
        state.freed.remove(&key);
        let at = wall_ms();
        let entry = Entry {
            owner_token: attempt.owner_token.expose().to_owned(),
            operation_id: attempt.operation_id.as_str().to_owned(),
            fencing_token,
            expires_at: now + ttl.duration(),
            ttl_ms: ttl.ms(),
            acquired_at: at,
            renewed_at: at,
            holder: holder.cloned(),
            changes,
        };
        let record = StoreLease {
            remaining_ms: ttl.ms(),
            ..entry.record(now)
        };
        state.leases.insert(key.clone(), entry);
        drop(state);
        self.waiters.changed(&key, Change::Acquired);
        Ok(StoreAcquire::Acquired(record))
    }

    pub(super) async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<StoreRenew, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        let stamp = state.changes + 1;
        let (answer, relabelled) = match Self::live(&mut state, &key, now) {
            None => (StoreRenew::Absent, false),
            Some(entry) if entry.held_by(attempt) != HeldBy::Caller => {
                (StoreRenew::NotOwner, false)
            }
            Some(entry) => {
                entry.expires_at = now + ttl.duration();
                entry.ttl_ms = ttl.ms();
                entry.renewed_at = wall_ms();
                let relabelled = holder.is_some_and(|h| entry.holder.as_ref() != Some(h));
                if relabelled {
                    entry.holder = holder.cloned();
                    entry.changes = stamp;
                }
                let record = StoreLease {
                    remaining_ms: ttl.ms(),
                    ..entry.record(now)
                };
                (StoreRenew::Renewed(record), relabelled)
            }
        };
        if relabelled {
            state.changes = stamp;
        }
        drop(state);
        if relabelled {
            self.waiters.changed(&key, Change::HolderChanged);
        }
        Ok(answer)
    }

    pub(super) async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<StoreRelease, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let outcome = {
            let mut state = self.lock();
            match Self::live(&mut state, &key, now) {
                None => StoreRelease::AlreadyAbsent,
                Some(entry) if entry.held_by(attempt) != HeldBy::Caller => StoreRelease::NotOwner,
                Some(_) => {
                    Self::forget(&mut state, &key);
                    StoreRelease::Released
                }
            }
        };
        if outcome == StoreRelease::Released {
            self.waiters.changed(&key, Change::Released);
        }
        Ok(outcome)
    }

    pub(super) async fn inspect(
        &self,
        resource: &ResourceId,
        probe: Probe<'_>,
        _watching: bool,
    ) -> Result<StoreInspect, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        Ok(match Self::live(&mut state, &key, now) {
            None => StoreInspect::Free {
                version: format!("{}.0", state.freed.get(&key).copied().unwrap_or(0)),
            },
            Some(entry) => StoreInspect::Held {
                lease: entry.record(now),
                held_by: entry.probed(probe),
                version: format!("{}.1", entry.changes),
            },
        })
    }

    /// A purpose's leases are the key range `<purpose>:…`, in digest order;
    /// the cursor is the last digest returned, so a lease held throughout a
    /// listing is on exactly one page. Expired entries not yet swept are
    /// skipped (not removed: a listing takes no write path).
    pub(super) async fn list(
        &self,
        purpose: &Purpose,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<StorePage, StoreError> {
        use std::ops::Bound;
        let prefix = format!("{purpose}:");
        let start = match cursor {
            Some(ListCursor::After(digest)) => Bound::Excluded(format!("{prefix}{digest}")),
            // `Store::accepts` keeps other cursors out; start over if one came.
            _ => Bound::Included(prefix.clone()),
        };
        let now = Instant::now();
        let state = self.lock();
        let mut live = state
            .leases
            .range::<String, _>((start, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(&prefix))
            .filter(|(_, entry)| entry.expires_at > now);
        let mut leases = Vec::with_capacity(limit.min(1000));
        for (key, entry) in live.by_ref().take(limit) {
            let digest = ResourceDigest::parse(&key[prefix.len()..])
                .map_err(|_| StoreError::Unavailable("embedded store key is not a digest"))?;
            leases.push((digest, entry.record(now)));
        }
        let more = live.next().is_some();
        let next = match leases.last() {
            Some((digest, _)) if more => Some(ListCursor::After(digest.clone())),
            _ => None,
        };
        Ok(StorePage { leases, next })
    }

    pub(super) async fn readiness(&self) -> Readiness {
        Readiness {
            topology: "memory",
            writable: true,
            detail: None,
        }
    }

    /// Number of entries currently in the map (live or not yet swept).
    pub fn len(&self) -> usize {
        self.lock().leases.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn start_background(self: &Arc<Self>, shutdown: CancellationToken) {
        tracing::warn!(
            "using the embedded in-memory store: leases are held by this process only; \
             run a single instance, or set LEASEHOLD_REDIS_URL to share leases between instances"
        );
        // Sweep expired entries so that resources never touched again do not
        // accumulate. Expiry itself is exact without it (checked on access).
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let Some(store) = weak.upgrade() else { break };
                let now = Instant::now();
                let mut state = store.lock();
                let expired: Vec<String> = state
                    .leases
                    .iter()
                    .filter(|(_, e)| e.expires_at <= now)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in expired {
                    Self::forget(&mut state, &k);
                }
            }
        });
    }
}
