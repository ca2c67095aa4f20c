//! What the embedded store keeps per resource: each holder's [`Permit`]
//! and the resource's [`Entry`] (limit, mode, permits, change stamp), the fair
//! queue's places kept to be read ([`Queues`]), with the reads every verb
//! makes of them, and the [`Tomb`] of a permit that ended early.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::{Attempt, HeldBy, HolderLabel, Mode, QueueEntry, StoreTime};
use crate::store::{EndedEarly, Probe, StoreLease};

/// One holder's permit.
pub(super) struct Permit {
    pub(super) owner_token: String,
    pub(super) operation_id: String,
    pub(super) fencing_token: u64,
    pub(super) expires_at: Instant,
    pub(super) lock_delay: Duration,
    pub(super) ttl_ms: u64,
    pub(super) acquired_at: StoreTime,
    pub(super) renewed_at: StoreTime,
    pub(super) holder: Option<HolderLabel>,
    /// `maxHoldMs`: no renewal reaches past `acquired_at` plus it (counted
    /// on the wall clock that dates the permit, as Redis counts on its own).
    pub(super) max_hold_ms: Option<u64>,
    /// Someone was told since the acquisition that this permit is held (a
    /// replay answered, or a renew): a clean-up after a waiter left must
    /// leave it alone (docs/design.md §14).
    pub(super) claimed: bool,
    /// Its expiry is in the history already (written once).
    pub(super) noted: bool,
    /// The session it is on.
    pub(super) session: Option<crate::domain::SessionId>,
}

/// Equal, in time independent of where two owner tokens differ (the token
/// is a secret; Redis compares inside its own process).
pub(super) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Permit {
    pub(super) fn live(&self, now: Instant) -> bool {
        self.expires_at > now
    }

    /// Live, or expired with its lock-delay still running.
    pub(super) fn lingers(&self, now: Instant) -> bool {
        self.expires_at + self.lock_delay > now
    }

    pub(super) fn remaining_ms(&self, now: Instant) -> u64 {
        // Round up like Redis' PTTL would never report 0 for a live key.
        let left = self.expires_at.saturating_duration_since(now);
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    /// The operation id (not a secret) first: every acquire, renew and
    /// release looks at each permit, and the constant-time token compare
    /// was most of a fill's time with 2 000 holders (debug build, perf).
    pub(super) fn is(&self, attempt: &Attempt) -> bool {
        self.operation_id == attempt.operation_id.as_str()
            && same_secret(&self.owner_token, attempt.owner_token.expose())
    }

    pub(super) fn owned_by(&self, owner: &str) -> bool {
        same_secret(&self.owner_token, owner)
    }

    pub(super) fn record(&self, now: Instant) -> StoreLease {
        StoreLease {
            fencing_token: self.fencing_token,
            remaining_ms: self.remaining_ms(now),
            ttl_ms: self.ttl_ms,
            acquired_at: self.acquired_at,
            renewed_at: self.renewed_at,
            holder: self.holder.clone(),
            max_hold_ms: self.max_hold_ms,
            lock_delay_ms: Some(u64::try_from(self.lock_delay.as_millis()).unwrap_or(u64::MAX)),
            session: self.session.clone(),
        }
    }
}

/// A resource with at least one live permit or running lock-delay.
pub(super) struct Entry {
    pub(super) limit: u32,
    pub(super) mode: Mode,
    pub(super) permits: Vec<Permit>,
    /// The change stamp of the last acquisition or holder change.
    pub(super) changes: u64,
}

impl Entry {
    /// Drops what is over (expired, and its lock-delay too).
    pub(super) fn prune(&mut self, now: Instant) {
        self.permits.retain(|p| p.lingers(now));
    }

    pub(super) fn live(&self, now: Instant) -> impl Iterator<Item = &Permit> {
        self.permits.iter().filter(move |p| p.live(now))
    }

    pub(super) fn live_count(&self, now: Instant) -> usize {
        self.live(now).count()
    }

    pub(super) fn soonest_ms(&self, now: Instant) -> Option<u64> {
        self.live(now).map(|p| p.remaining_ms(now)).min()
    }

    /// The end of the lock-delay that runs for everyone but `spared` (the
    /// owner token of a permit whose expiry started it may come back).
    pub(super) fn delay(&self, now: Instant, spared: Option<&str>) -> Option<Instant> {
        self.permits
            .iter()
            .filter(|p| !p.live(now) && p.lingers(now))
            .filter(|p| spared != Some(p.owner_token.as_str()))
            .map(|p| p.expires_at + p.lock_delay)
            .max()
    }

    /// Whether `owner` let a permit expire whose lock-delay still runs.
    pub(super) fn returning(&self, owner: &str, now: Instant) -> bool {
        self.permits
            .iter()
            .any(|p| !p.live(now) && p.lingers(now) && p.owned_by(owner))
    }

    pub(super) fn probed(&self, probe: Probe<'_>, now: Instant) -> Option<HeldBy> {
        let mut live = self.live(now);
        match probe {
            Probe::Anyone => None,
            Probe::Owner(token) => Some(if live.any(|p| p.owned_by(token.expose())) {
                HeldBy::CallerOtherOperation
            } else {
                HeldBy::Other
            }),
            Probe::Attempt(a) => {
                let permits: Vec<&Permit> = live.collect();
                Some(if permits.iter().any(|p| p.is(a)) {
                    HeldBy::Caller
                } else if permits.iter().any(|p| p.owned_by(a.owner_token.expose())) {
                    HeldBy::CallerOtherOperation
                } else {
                    HeldBy::Other
                })
            }
        }
    }
}

/// The tombstone of a permit that ended early: whose it was, why, and
/// until when its holder may still ask (a broken permit: when it would
/// have expired; a held-out one: one TTL past its bound). Forgotten then.
pub(super) struct Tomb {
    pub(super) owner_token: String,
    pub(super) operation_id: String,
    pub(super) until: Instant,
    pub(super) why: EndedEarly,
}

impl Tomb {
    /// `permit` ended at its hold bound: its holder hears `max_hold` until
    /// `until`.
    pub(super) fn held_out(permit: &Permit, until: Instant) -> Self {
        Self {
            owner_token: permit.owner_token.clone(),
            operation_id: permit.operation_id.clone(),
            until,
            why: EndedEarly::MaxHold,
        }
    }
}

/// The instance name of the embedded store's waiters.
pub(super) const LOCAL: &str = "local";

/// Every resource's places, in queue order.
#[derive(Default)]
pub(super) struct Queues {
    pub(super) members: AtomicU64,
    places: Mutex<HashMap<String, Vec<(String, QueueEntry)>>>,
}

impl Queues {
    pub(super) fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, Vec<(String, QueueEntry)>>> {
        self.places.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops `tag`'s places for which `gone` holds (and the resource when
    /// none is left).
    pub(super) fn drop_where(&self, tag: &str, gone: impl Fn(&str) -> bool) {
        let mut places = self.lock();
        if let Some(list) = places.get_mut(tag) {
            list.retain(|(member, _)| !gone(member));
            if list.is_empty() {
                places.remove(tag);
            }
        }
    }
}
