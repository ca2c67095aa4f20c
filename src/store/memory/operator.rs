//! Operator control in the embedded store: break, and the tombstones a
//! broken permit leaves so its holder's next renew or release hears why
//! (as `lua/break.lua` does on Redis).

use std::time::Instant;

use super::super::history::of;
use super::super::records::{same_secret, Tomb};
use super::{wall_ms, MemoryStore, State};
use crate::domain::{Attempt, HistoryEntry, HistoryEvent, ResourceId, Revocation};
use crate::store::{EndedEarly, HoldEnd, StoreBreak, StoreError};

/// Past this many resources with tombstones, a break sweeps the expired
/// ones of every resource (amortised; each break adds at most its own).
const SWEEP_AT: usize = 1024;

impl State {
    /// Why `attempt`'s permit of `key` ended early, while its tombstone
    /// lasts: read only when a renew or release did not find it.
    pub(super) fn ended(
        &mut self,
        key: &str,
        attempt: &Attempt,
        now: Instant,
    ) -> Option<EndedEarly> {
        let tombs = self.tombs.get_mut(key)?;
        tombs.retain(|t| t.until > now);
        if tombs.is_empty() {
            self.tombs.remove(key);
            return None;
        }
        tombs
            .iter()
            .rev()
            .find(|t| {
                same_secret(&t.owner_token, attempt.owner_token.expose())
                    && t.operation_id == attempt.operation_id.as_str()
            })
            .map(|t| t.why)
    }

    /// Keeps `tomb` for its permit, in place of an older one of the same
    /// permit (a capped renew writes it again each time).
    pub(super) fn entomb(&mut self, key: &str, tomb: Tomb, now: Instant) {
        self.sweep_tombs(now);
        let tombs = self.tombs.entry(key.to_owned()).or_default();
        // Those that have ended go too, so that a resource broken or capped
        // again and again keeps only its live tombstones (issue 39, item 7).
        tombs.retain(|t| {
            t.until > now
                && !(same_secret(&t.owner_token, &tomb.owner_token)
                    && t.operation_id == tomb.operation_id)
        });
        tombs.push(tomb);
    }

    /// Past [`SWEEP_AT`] resources with tombstones, the expired ones of
    /// every resource go (amortised: each write adds at most a few).
    fn sweep_tombs(&mut self, now: Instant) {
        if self.tombs.len() >= SWEEP_AT {
            self.tombs.retain(|_, tombs| {
                tombs.retain(|t| t.until > now);
                !tombs.is_empty()
            });
        }
    }
}

impl MemoryStore {
    /// The permits of `key` seen to end since its last acquire, release or
    /// break took them (expiries noted, breaks), for the hold-time
    /// histogram.
    pub(in crate::store) fn take_ended(&self, key: &str) -> Vec<crate::store::EndedHold> {
        self.lock().history.take_ended(key)
    }

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
            let mut held = Vec::new();
            let event = HistoryEvent::Revoked {
                reason: revocation.reason.as_ref().map(|r| r.as_str().to_owned()),
                key_name: revocation.key_name.clone(),
            };
            let at = wall_ms();
            entry.permits.retain(|p| {
                let goes = p.live(now) && fencing_token.is_none_or(|t| t == p.fencing_token);
                if goes {
                    revoked.push(of(p, event.clone(), at, ""));
                    held.push(at.0.saturating_sub(p.acquired_at.0));
                    gone.push(Tomb {
                        owner_token: p.owner_token.clone(),
                        operation_id: p.operation_id.clone(),
                        until: p.expires_at,
                        why: EndedEarly::Revoked,
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
            state.sweep_tombs(now);
            for ms in held {
                state.history.ended(&key, HoldEnd::Broken, ms);
            }
            let n = gone.len();
            let tombs = state.tombs.entry(key.clone()).or_default();
            // Those of this resource that have ended go (as in `entomb`).
            tombs.retain(|t| t.until > now);
            tombs.extend(gone);
            u32::try_from(n).unwrap_or(u32::MAX)
        };
        self.waiters.revoked(&key, revocation.clone());
        Ok(StoreBreak::Broken(broken))
    }
}
