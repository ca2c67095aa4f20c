//! [`Watchdog`]: keeps registered lease handles alive and says, through a
//! [`CancellationToken`], when a lease stops protecting the work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::error::Error;
use super::handle::LeaseHandle;
use super::handle::Shared;
use super::machine::LeaseState;
use crate::domain::{LostReason, RenewOutcome};

/// How many events a slow [`Watchdog::subscribe`] receiver may fall behind
/// before it skips (`RecvError::Lagged`).
const EVENT_CAPACITY: usize = 1024;
/// The shortest pause between two renew attempts of one lease.
const MIN_PAUSE: Duration = Duration::from_millis(5);

/// Why a registration ended; its token was cancelled at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The server said the lease is gone (renew `lost`, release `not_owner`).
    Lost,
    /// An operator broke the lease: a renew answered `lost` with `reason:
    /// revoked` (`POST …/break`).
    Revoked,
    /// The lease reached its hold bound (`maxHoldMs`): renewals were
    /// capped there and validity ran out at it, or a renew answered `lost`
    /// with `reason: max_hold`.
    MaxHold,
    /// A renew or release got no certain reply: the handle is UNKNOWN.
    Unknown,
    /// Local validity was about to run out (within one drift budget, so
    /// that the work stops before the store may hand the lease on) before a
    /// renew succeeded, or the handle was dropped and the validity it had
    /// was about to run out.
    Expired,
    /// The handle was released.
    Released,
    /// The caller cancelled the registration's token itself; renewing
    /// stopped, the handle is untouched.
    CancelledByCaller,
    /// The watchdog was shut down or dropped: nothing renews the lease any
    /// more.
    Stopped,
}

/// What happened to one registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A renew succeeded.
    Renewed {
        /// The server's remaining time to live after it.
        remaining_ms: u64,
        /// The local validity it gave.
        valid_for: Duration,
    },
    /// A renew failed without ending the lease (`unavailable`,
    /// `overloaded`, rejected); validity was not extended. An
    /// indeterminate renew ends the registration instead.
    RenewFailed {
        /// What went wrong.
        error: Error,
    },
    /// The registration ended and its token was cancelled. Sent exactly
    /// once per registration, always last.
    Ended {
        /// Why.
        reason: EndReason,
    },
}

/// One event, tagged with its registration's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchdogEvent {
    /// [`Registration::id`].
    pub registration: u64,
    /// What happened.
    pub kind: EventKind,
}

/// Why a handle could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchdogError {
    /// The watchdog already keeps its maximum number of leases.
    #[error("the watchdog is full ({max} registrations)")]
    Full {
        /// The bound.
        max: usize,
    },
    /// Only an ACTIVE handle can be kept alive.
    #[error("the lease handle is {state}, not ACTIVE")]
    NotActive {
        /// Its state.
        state: LeaseState,
    },
    /// A handle is registered at most once.
    #[error("the lease handle is already registered with a watchdog")]
    AlreadyRegistered,
    /// `register` was called outside a Tokio runtime.
    #[error("register must be called from within a Tokio runtime")]
    NoRuntime,
    /// The watchdog was shut down.
    #[error("the watchdog was shut down")]
    Stopped,
}

/// Renews registered handles at about a third of their remaining local
/// validity (jittered between 80 % and 100 % of that, so a fresh lease is
/// renewed every ~TTL/3 and a lease whose renews fail is retried ever more
/// often until its validity runs out).
///
/// Each registration gets a [`CancellationToken`], cancelled exactly once,
/// as soon as the lease stops protecting the work: the handle became LOST
/// or UNKNOWN, its local validity ran out before a renew succeeded, it was
/// released, or the watchdog stopped (see [`EndReason`]). After a release,
/// or once the handle is dropped, nothing is renewed any more.
///
/// The number of live registrations is bounded ([`WatchdogError::Full`]).
/// Clones share the registrations; dropping the last clone stops them all.
#[derive(Debug, Clone)]
pub struct Watchdog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    max: usize,
    slots: Arc<Semaphore>,
    events: broadcast::Sender<WatchdogEvent>,
    stop: CancellationToken,
    next_id: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Watchdog {
    /// A watchdog for at most `max_registrations` live leases (at least 1).
    pub fn new(max_registrations: usize) -> Self {
        let max = max_registrations.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            inner: Arc::new(Inner {
                max,
                slots: Arc::new(Semaphore::new(max)),
                events: broadcast::channel(EVENT_CAPACITY).0,
                stop: CancellationToken::new(),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// Starts keeping `handle` alive. Must be called within a Tokio runtime.
    pub fn register(&self, handle: &LeaseHandle) -> Result<Registration, WatchdogError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| WatchdogError::NoRuntime)?;
        if self.inner.stop.is_cancelled() {
            return Err(WatchdogError::Stopped);
        }
        let state = handle.state();
        if state != LeaseState::Active {
            return Err(WatchdogError::NotActive { state });
        }
        let permit = Arc::clone(&self.inner.slots)
            .try_acquire_owned()
            .map_err(|_| WatchdogError::Full {
                max: self.inner.max,
            })?;
        let shared = handle.shared();
        if shared.registered.swap(true, Ordering::SeqCst) {
            return Err(WatchdogError::AlreadyRegistered);
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        let (end_tx, end_rx) = watch::channel(None);
        let task = Task {
            id,
            shared: Arc::downgrade(shared),
            state_rx: shared.subscribe(),
            purpose: shared.resource().purpose.to_string(),
            token: token.clone(),
            stop: self.inner.stop.clone(),
            events: self.inner.events.clone(),
            end_tx,
            jitter: Jitter::seeded(id),
            valid_until: shared.stop_at(),
            permit: Some(permit),
            held_out: shared.acquired_held_out(),
        };
        runtime.spawn(task.run());
        Ok(Registration {
            id,
            token,
            end: end_rx,
        })
    }

    /// Every registration's events, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<WatchdogEvent> {
        self.inner.events.subscribe()
    }

    /// Live registrations.
    pub fn len(&self) -> usize {
        self.inner.max - self.inner.slots.available_permits()
    }

    /// Whether no registration is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on live registrations.
    pub fn capacity(&self) -> usize {
        self.inner.max
    }

    /// Stops every registration (each ends [`EndReason::Stopped`], its token
    /// cancelled) and refuses new ones. Handles are not released.
    pub fn shutdown(&self) {
        self.inner.stop.cancel();
    }
}

/// One handle kept alive by a [`Watchdog`].
#[derive(Debug)]
pub struct Registration {
    id: u64,
    token: CancellationToken,
    end: watch::Receiver<Option<EndReason>>,
}

impl Registration {
    /// A registration ended by someone else than a [`Watchdog`] (a
    /// [`Session`](super::Session) for its leases): `end` is set, then
    /// `token` cancelled, once.
    pub(super) fn new(
        id: u64,
        token: CancellationToken,
        end: watch::Receiver<Option<EndReason>>,
    ) -> Self {
        Self { id, token, end }
    }

    /// This registration's id, as in [`WatchdogEvent::registration`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The token cancelled when the lease stops protecting the work. Stop
    /// the work (and stop presenting the fencing token) when it fires.
    /// Cancelling it yourself stops the renewing.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Why the registration ended, once it has.
    pub fn end_reason(&self) -> Option<EndReason> {
        *self.end.borrow()
    }

    /// Waits until the registration ends and says why.
    pub async fn ended(&mut self) -> EndReason {
        let seen = match self.end.wait_for(Option::is_some).await {
            Ok(reason) => *reason,
            // The task was dropped without ending (its runtime shut down).
            Err(_) => None,
        };
        seen.or(*self.end.borrow()).unwrap_or(EndReason::Stopped)
    }
}

/// The per-registration task.
struct Task {
    id: u64,
    shared: Weak<Shared>,
    state_rx: watch::Receiver<LeaseState>,
    purpose: String,
    token: CancellationToken,
    stop: CancellationToken,
    events: broadcast::Sender<WatchdogEvent>,
    end_tx: watch::Sender<Option<EndReason>>,
    jitter: Jitter,
    /// The stop deadline last seen (one drift budget before validity
    /// ends), for when the handle is gone.
    valid_until: Instant,
    /// The registration slot, freed before the end is announced.
    permit: Option<OwnedSemaphorePermit>,
    /// The last answer was capped at the lease's hold bound: when validity
    /// runs out now, the bound is why ([`EndReason::MaxHold`]).
    held_out: bool,
}

impl Task {
    async fn run(mut self) {
        let reason = self.keep_alive().await;
        // The one place a registration ends: free the slot, record why,
        // cancel, announce. Whoever sees the end can register again.
        drop(self.permit.take());
        if let Some(shared) = self.shared.upgrade() {
            // A handle still ACTIVE (caller cancelled, watchdog stopped) may
            // be registered again.
            shared.registered.store(false, Ordering::SeqCst);
        }
        self.end_tx.send_replace(Some(reason));
        self.token.cancel();
        tracing::debug!(purpose = %self.purpose, registration = self.id, ?reason, "watchdog registration ended");
        self.emit(EventKind::Ended { reason });
    }

    fn emit(&self, kind: EventKind) {
        // No subscriber is fine.
        let _ = self.events.send(WatchdogEvent {
            registration: self.id,
            kind,
        });
    }

    /// When to renew next: about a third of the validity left.
    fn next_renew(&mut self, now: Instant, valid_until: Instant) -> Instant {
        let left = valid_until.saturating_duration_since(now);
        now + (left / 3).mul_f64(self.jitter.fraction()).max(MIN_PAUSE)
    }

    async fn keep_alive(&mut self) -> EndReason {
        let mut next_renew: Option<Instant> = None;
        loop {
            let Some(shared) = self.shared.upgrade() else {
                return self.outlive(self.valid_until).await;
            };
            let (state, _) = shared.snapshot();
            let valid_until = shared.valid_until();
            let stop_at = shared.stop_at();
            self.valid_until = stop_at;
            let expired = shared.expired_locally();
            drop(shared);
            match state {
                LeaseState::Active => {}
                LeaseState::Lost if expired => return self.expired(),
                LeaseState::Lost => return EndReason::Lost,
                LeaseState::Unknown => return EndReason::Unknown,
                LeaseState::Released => return EndReason::Released,
            }
            let renew_at = match next_renew {
                Some(at) => at,
                None => *next_renew.insert(self.next_renew(Instant::now(), valid_until)),
            };
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return EndReason::Stopped,
                _ = self.token.cancelled() => return EndReason::CancelledByCaller,
                changed = self.state_rx.changed() => {
                    if changed.is_err() {
                        // The handle was dropped: renew no more, and end when
                        // the validity it had runs out.
                        return self.outlive(stop_at).await;
                    }
                }
                // Stop the work one drift budget before validity ends.
                _ = sleep_until(stop_at) => return self.expired(),
                _ = sleep_until(renew_at) => {
                    next_renew = None;
                    let Some(shared) = self.shared.upgrade() else { continue };
                    let result = tokio::select! {
                        biased;
                        _ = self.stop.cancelled() => return EndReason::Stopped,
                        _ = self.token.cancelled() => return EndReason::CancelledByCaller,
                        // Validity is about to run out with the renew in
                        // flight: the work stops; the request is abandoned.
                        _ = sleep_until(stop_at) => return self.expired(),
                        // The user released it (or it ended otherwise)
                        // meanwhile: stop waiting for this renew.
                        _ = self.state_rx.changed() => continue,
                        result = shared.renew() => result,
                    };
                    match result {
                        Ok(RenewOutcome::Renewed { lease }) => {
                            self.held_out = shared.held_out(&lease);
                            let (_, valid_for) = shared.snapshot();
                            tracing::debug!(purpose = %self.purpose, registration = self.id, remaining_ms = lease.remaining_ms, "watchdog renewed");
                            self.emit(EventKind::Renewed { remaining_ms: lease.remaining_ms, valid_for });
                        }
                        Ok(RenewOutcome::Lost { reason: LostReason::Revoked }) => {
                            return EndReason::Revoked;
                        }
                        Ok(RenewOutcome::Lost { reason: LostReason::MaxHold }) => {
                            return EndReason::MaxHold;
                        }
                        // The handle's state says what happened; the next look ends it.
                        Ok(RenewOutcome::Lost { .. }) | Err(Error::Refused(_)) => {}
                        Err(error) if error.may_have_applied() => {}
                        Err(error) => {
                            tracing::debug!(purpose = %self.purpose, registration = self.id, outcome = error.outcome_name(), "watchdog renew failed");
                            self.emit(EventKind::RenewFailed { error });
                        }
                    }
                }
            }
        }
    }

    /// Local validity ran out: at the lease's hold bound when the last
    /// answer was capped there, else before a renew succeeded.
    fn expired(&self) -> EndReason {
        if self.held_out {
            EndReason::MaxHold
        } else {
            EndReason::Expired
        }
    }

    /// After the handle is gone: wait out the validity it had.
    async fn outlive(&self, valid_until: Instant) -> EndReason {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => EndReason::Stopped,
            _ = self.token.cancelled() => EndReason::CancelledByCaller,
            _ = sleep_until(valid_until) => EndReason::Expired,
        }
    }
}

/// xorshift64*: renew jitter only, not for secrets.
struct Jitter(u64);

impl Jitter {
    fn seeded(salt: u64) -> Self {
        let mut bytes = [0u8; 8];
        let seed = match getrandom::fill(&mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            Err(_) => salt.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        };
        Self(seed | 1)
    }

    /// A number in [0.8, 1.0].
    fn fraction(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        let unit = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        0.8 + 0.2 * unit
    }
}
