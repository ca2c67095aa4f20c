//! Operator control in the embedded store: break, and the tombstones a
//! broken permit leaves so its holder's next renew or release hears why
//! (as `lua/break.lua` does on Redis).

use std::time::Instant;

use super::super::history::of;
use super::super::records::same_secret;
use super::{wall_ms, MemoryStore, State};
use crate::domain::{Attempt, HistoryEntry, HistoryEvent, ResourceId, Revocation};
use crate::store::{StoreBreak, StoreError};

/// A broken permit's tombstone: whose it was and when it would have
/// expired (it is forgotten then).
pub(super) struct Tomb {
    owner_token: String,
    operation_id: String,
    until: Instant,
}

/// Past this many resources with tombstones, a break sweeps the expired
/// ones of every resource (amortised; each break adds at most its own).
const SWEEP_AT: usize = 1024;

impl State {
    /// Whether `attempt`'s permit of `key` was broken and would still be
    /// live: read only when a renew or release did not find it.
    pub(super) fn broken(&mut self, key: &str, attempt: &Attempt, now: Instant) -> bool {
        let Some(tombs) = self.tombs.get_mut(key) else {
            return false;
        };
        tombs.retain(|t| t.until > now);
        if tombs.is_empty() {
            self.tombs.remove(key);
            return false;
        }
        tombs.iter().any(|t| {
            same_secret(&t.owner_token, attempt.owner_token.expose())
                && t.operation_id == attempt.operation_id.as_str()
        })
    }
}

impl MemoryStore {
    /// Removes every live permit of `resource`, or the one with
    /// `fencing_token`: tombstones, a change (the version moves), no
    /// lock-delay, waiters and watchers told `revoked`.
    pub(in crate::store) async fn break_lease(
        &self,
        resource: &ResourceId,
        fencing_token: Option<u64>,
        revocation: &Revocation,
    ) -> Result<StoreBreak, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let broken = {
            let mut state = self.lock();
            let stamp = state.changes + 1;
            let Some(entry) = Self::entry(&mut state, &key, now) else {
                return Ok(StoreBreak::NothingToBreak);
            };
            let mut gone = Vec::new();
            let mut revoked = Vec::new();
            let event = HistoryEvent::Revoked {
                reason: revocation.reason.as_ref().map(|r| r.as_str().to_owned()),
                key_name: revocation.key_name.clone(),
            };
            let at = wall_ms();
            entry.permits.retain(|p| {
                let goes = p.live(now) && fencing_token.is_none_or(|t| t == p.fencing_token);
                if goes {
                    revoked.push(of(p, event.clone(), at, ""));
                    gone.push(Tomb {
                        owner_token: p.owner_token.clone(),
                        operation_id: p.operation_id.clone(),
                        until: p.expires_at,
                    });
                }
                !goes
            });
            if gone.is_empty() {
                return Ok(StoreBreak::NothingToBreak);
            }
            entry.changes = stamp;
            let version = format!("{stamp}.{}", entry.live_count(now));
            let empty = entry.permits.is_empty();
            state.changes = stamp;
            for e in revoked {
                let version = version.clone();
                state.history.push(&key, HistoryEntry { version, ..e });
            }
            if empty {
                Self::forget(&mut state, &key);
            }
            if state.tombs.len() >= SWEEP_AT {
                state.tombs.retain(|_, tombs| {
                    tombs.retain(|t| t.until > now);
                    !tombs.is_empty()
                });
            }
            let n = gone.len();
            state.tombs.entry(key.clone()).or_default().extend(gone);
            u32::try_from(n).unwrap_or(u32::MAX)
        };
        self.waiters.revoked(&key, revocation.clone());
        Ok(StoreBreak::Broken(broken))
    }
}
