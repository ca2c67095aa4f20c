//! The embedded store: leases in a map inside this process.
//!
//! Same contract as Redis, fencing included: tokens come from one counter for
//! the whole process, `max(last + 1, wall clock in µs)`, so they are strictly
//! increasing per resource (and across resources) and stay above any token
//! handed out before a restart as long as the wall clock does not step back.
//! It serves one instance only: two processes each with their own map would
//! both grant the same lease. Startup logs a warning saying so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::{Readiness, StoreAcquire, StoreError, StoreInspect, StoreRelease, StoreRenew};
use crate::domain::{Attempt, HeldBy, ResourceId, Ttl};
use crate::wait::WaitRegistry;

struct Entry {
    owner_token: String,
    operation_id: String,
    fencing_token: u64,
    expires_at: Instant,
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
}

struct State {
    leases: HashMap<String, Entry>,
    last_fence: u64,
}

/// In-process lease store for a single instance.
pub struct MemoryStore {
    state: Mutex<State>,
    max_leases: usize,
    waiters: Arc<WaitRegistry>,
}

impl MemoryStore {
    /// A store holding at most `max_leases` live leases; releases wake `waiters`.
    pub fn new(max_leases: usize, waiters: Arc<WaitRegistry>) -> Self {
        Self {
            state: Mutex::new(State {
                leases: HashMap::new(),
                last_fence: 0,
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
            state.leases.remove(key);
        }
        state.leases.get_mut(key)
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
    ) -> Result<StoreAcquire, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        if let Some(entry) = Self::live(&mut state, &key, now) {
            let remaining_ms = entry.remaining_ms(now);
            return Ok(match entry.held_by(attempt) {
                HeldBy::Caller => StoreAcquire::Replayed {
                    fencing_token: entry.fencing_token,
                    remaining_ms,
                },
                HeldBy::CallerOtherOperation => StoreAcquire::OwnerOperationConflict {
                    remaining_ms: Some(remaining_ms),
                },
                HeldBy::Other => StoreAcquire::Contended {
                    remaining_ms: Some(remaining_ms),
                },
            });
        }
        if state.leases.len() >= self.max_leases {
            state.leases.retain(|_, e| e.expires_at > now);
            if state.leases.len() >= self.max_leases {
                return Err(StoreError::Unavailable("embedded store is full"));
            }
        }
        let fencing_token = Self::next_fence(&mut state);
        state.leases.insert(
            key,
            Entry {
                owner_token: attempt.owner_token.expose().to_owned(),
                operation_id: attempt.operation_id.as_str().to_owned(),
                fencing_token,
                expires_at: now + ttl.duration(),
            },
        );
        Ok(StoreAcquire::Acquired {
            fencing_token,
            remaining_ms: ttl.ms(),
        })
    }

    pub(super) async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
    ) -> Result<StoreRenew, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        Ok(match Self::live(&mut state, &key, now) {
            None => StoreRenew::Absent,
            Some(entry) if entry.held_by(attempt) != HeldBy::Caller => StoreRenew::NotOwner,
            Some(entry) => {
                entry.expires_at = now + ttl.duration();
                StoreRenew::Renewed {
                    fencing_token: entry.fencing_token,
                    remaining_ms: ttl.ms(),
                }
            }
        })
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
                    state.leases.remove(&key);
                    StoreRelease::Released
                }
            }
        };
        if outcome == StoreRelease::Released {
            self.waiters.wake(&key);
        }
        Ok(outcome)
    }

    pub(super) async fn inspect(
        &self,
        resource: &ResourceId,
        attempt: Option<&Attempt>,
    ) -> Result<StoreInspect, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        Ok(match Self::live(&mut state, &key, now) {
            None => StoreInspect::Free,
            Some(entry) => StoreInspect::Held {
                remaining_ms: entry.remaining_ms(now),
                fencing_token: entry.fencing_token,
                held_by: attempt.map(|a| entry.held_by(a)),
            },
        })
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
                store.lock().leases.retain(|_, e| e.expires_at > now);
            }
        });
    }
}
