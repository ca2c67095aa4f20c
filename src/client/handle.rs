//! [`LeaseHandle`]: one held lease, its fencing token, its local validity
//! and the closed state machine of [`HandleCore`] around the HTTP calls.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::api::Client;
use super::error::Error;
use super::machine::{HandleCore, LeaseState, ReleaseReply, RenewReply};
use crate::domain::{Attempt, Lease, OperationId, ReleaseOutcome, RenewOutcome, ResourceId};

/// A lease this process holds, from `acquired` or `replayed_same_operation`.
///
/// * [`fencing_token`](Self::fencing_token): present it at the effect point.
/// * Local validity: `min(requested TTL, remainingMs) - drift budget`,
///   counted from the monotonic instant the request was *sent*; a
///   successful renew restarts it from the renew's send instant. When it
///   runs out the stored state becomes LOST.
/// * States ACTIVE, LOST, RELEASED, UNKNOWN (see [`HandleCore`]); a
///   terminal handle refuses [`renew`](Self::renew) locally.
///
/// Dropping an ACTIVE handle neither blocks nor releases: the lease stays
/// on the server until it expires (a [`Watchdog`](super::Watchdog) stops
/// renewing it). Call [`release`](Self::release) to free it early.
pub struct LeaseHandle {
    shared: Arc<Shared>,
}

/// The part a watchdog shares (weakly) with the handle.
pub(super) struct Shared {
    client: Client,
    resource: ResourceId,
    attempt: Attempt,
    lease: Lease,
    core: Mutex<HandleCore>,
    /// Every stored transition is published here; the sender drops with
    /// the handle, which tells a watchdog the handle is gone.
    state_tx: watch::Sender<LeaseState>,
    /// Set once a watchdog has taken this handle.
    pub(super) registered: AtomicBool,
}

impl LeaseHandle {
    pub(super) fn new(
        client: Client,
        resource: ResourceId,
        attempt: Attempt,
        lease: Lease,
        sent: Instant,
        ttl: Duration,
    ) -> Self {
        // Proportional to the TTL the store granted (a replay reports the
        // replayed acquisition's, which may be shorter than the one asked).
        let granted = Duration::from_millis(lease.ttl_ms);
        let drift = client.settings().drift_for(if granted.is_zero() {
            ttl
        } else {
            granted.min(ttl)
        });
        let core = HandleCore::new(sent, ttl, Duration::from_millis(lease.remaining_ms), drift);
        let (state_tx, _) = watch::channel(LeaseState::Active);
        Self {
            shared: Arc::new(Shared {
                client,
                resource,
                attempt,
                lease,
                core: Mutex::new(core),
                state_tx,
                registered: AtomicBool::new(false),
            }),
        }
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The fencing token to present at the effect point: the protected
    /// resource must reject tokens lower than one it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.shared.lease.fencing_token
    }

    /// The lease as the acquire answered it.
    pub fn lease(&self) -> &Lease {
        &self.shared.lease
    }

    /// The leased resource.
    pub fn resource(&self) -> &ResourceId {
        &self.shared.resource
    }

    /// The operation this lease belongs to.
    pub fn operation_id(&self) -> &OperationId {
        &self.shared.attempt.operation_id
    }

    /// The TTL asked for on acquire and on every renew.
    pub fn ttl(&self) -> Duration {
        self.shared.core().ttl()
    }

    /// The stored state now (an expired ACTIVE handle becomes LOST here).
    pub fn state(&self) -> LeaseState {
        self.shared.observe()
    }

    /// Whether the lease is ACTIVE and locally valid now.
    pub fn is_valid(&self) -> bool {
        self.state() == LeaseState::Active
    }

    /// Local validity left now; zero unless ACTIVE.
    pub fn valid_for(&self) -> Duration {
        self.shared.snapshot().1
    }

    /// Renews with the handle's TTL. Refused locally
    /// ([`Error::Refused`]) on a terminal handle. `renewed` restarts local
    /// validity from this call's send instant; `lost` makes the handle
    /// LOST; an indeterminate renew makes it UNKNOWN without extending
    /// validity; `unavailable`/`overloaded` change nothing.
    pub async fn renew(&self) -> Result<RenewOutcome, Error> {
        self.shared.renew().await
    }

    /// Releases. `released`/`already_absent` → RELEASED, `not_owner` →
    /// LOST, indeterminate → UNKNOWN; the answer is returned either way.
    /// Refused locally when already RELEASED; a LOST or UNKNOWN handle
    /// still sends it (clean-up) and stays as it is. Dropping the future
    /// with the request in flight makes the handle UNKNOWN.
    pub async fn release(&self) -> Result<ReleaseOutcome, Error> {
        self.shared.release().await
    }
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (state, valid_for) = self.shared.snapshot();
        f.debug_struct("LeaseHandle")
            .field("resource", &self.shared.resource.tag())
            .field("operation_id", &self.shared.attempt.operation_id)
            .field("fencing_token", &self.shared.lease.fencing_token)
            .field("state", &state)
            .field("valid_for", &valid_for)
            .finish()
    }
}

impl Drop for LeaseHandle {
    fn drop(&mut self) {
        if self.shared.observe() == LeaseState::Active {
            tracing::debug!(
                purpose = %self.shared.resource.purpose,
                fencing_token = self.shared.lease.fencing_token,
                "lease handle dropped while ACTIVE: not released; it stays held until it expires"
            );
        }
    }
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, HandleCore> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the acquisition was granted less than the TTL asked because
    /// of its hold bound (`maxHoldMs` below the TTL).
    pub(super) fn acquired_held_out(&self) -> bool {
        self.held_out(&self.lease)
    }

    /// Whether `lease`, an answer for this handle, was granted less than
    /// the TTL asked because it reached its hold bound (`maxHoldMs`).
    pub(super) fn held_out(&self, lease: &Lease) -> bool {
        lease.hold_ends_at.is_some() && Duration::from_millis(lease.ttl_ms) < self.core().ttl()
    }

    /// Publishes `state` if it differs from the last published one.
    fn publish(&self, state: LeaseState) {
        self.state_tx.send_if_modified(|last| {
            let changed = *last != state;
            *last = state;
            changed
        });
    }

    /// The stored state now, with expiry applied and published.
    pub(super) fn observe(&self) -> LeaseState {
        let state = self.core().observe(Instant::now());
        self.publish(state);
        state
    }

    /// State, local validity left, and the validity deadline, at one instant.
    pub(super) fn snapshot(&self) -> (LeaseState, Duration) {
        let (state, left) = {
            let mut core = self.core();
            let now = Instant::now();
            (core.observe(now), core.valid_for(now))
        };
        self.publish(state);
        (state, left)
    }

    pub(super) fn valid_until(&self) -> Instant {
        self.core().valid_until()
    }

    /// When protected work must stop: one drift budget before local
    /// validity ends, so that it has stopped before the store may hand the
    /// lease on (docs/design.md §14).
    pub(super) fn stop_at(&self) -> Instant {
        let core = self.core();
        core.valid_until()
            .checked_sub(core.drift_budget())
            .unwrap_or_else(|| core.valid_until())
    }

    /// Applies a renewal made on this lease's behalf (by its session),
    /// sent at `sent`: the same transitions as [`Shared::renew`]'s reply.
    pub(super) fn settle_renew(&self, sent: Instant, reply: RenewReply) -> LeaseState {
        let state = self.core().finish_renew(Instant::now(), sent, reply);
        self.publish(state);
        state
    }

    /// Applies the end of this lease's session as a release reply.
    pub(super) fn settle_release(&self, reply: ReleaseReply) -> LeaseState {
        let state = self.core().finish_release(Instant::now(), reply);
        self.publish(state);
        state
    }

    pub(super) fn expired_locally(&self) -> bool {
        self.core().expired_locally()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state_tx.subscribe()
    }

    pub(super) fn resource(&self) -> &ResourceId {
        &self.resource
    }

    pub(super) fn attempt(&self) -> &Attempt {
        &self.attempt
    }

    pub(super) async fn renew(&self) -> Result<RenewOutcome, Error> {
        let ttl = {
            let mut core = self.core();
            let refused = core.begin_renew(Instant::now());
            let ttl = core.ttl();
            drop(core);
            if let Err(refused) = refused {
                self.publish(refused.state);
                return Err(Error::Refused(refused));
            }
            ttl
        };
        let sent = Instant::now();
        let result = self.client.renew(&self.resource, &self.attempt, ttl).await;
        let reply = match &result {
            Ok(RenewOutcome::Renewed { lease }) => RenewReply::Renewed {
                remaining: Duration::from_millis(lease.remaining_ms),
            },
            Ok(RenewOutcome::Lost { .. }) => RenewReply::Lost,
            Err(e) if e.may_have_applied() => RenewReply::Indeterminate,
            Err(_) => RenewReply::NotApplied,
        };
        let state = self.core().finish_renew(Instant::now(), sent, reply);
        self.publish(state);
        result
    }

    pub(super) async fn release(&self) -> Result<ReleaseOutcome, Error> {
        let begun = self.core().begin_release(Instant::now());
        if let Err(refused) = begun {
            return Err(Error::Refused(refused));
        }
        // If this future is dropped with the request in flight, the lease
        // may be gone: the handle becomes UNKNOWN, never stays ACTIVE.
        let mut abandoned = AbandonedRelease(Some(self));
        let result = self.client.release(&self.resource, &self.attempt).await;
        abandoned.0 = None;
        let reply = match &result {
            Ok(ReleaseOutcome::Released) => ReleaseReply::Released,
            Ok(ReleaseOutcome::AlreadyAbsent { .. }) => ReleaseReply::AlreadyAbsent,
            Ok(ReleaseOutcome::NotOwner) => ReleaseReply::NotOwner,
            Err(e) if e.may_have_applied() => ReleaseReply::Indeterminate,
            Err(_) => ReleaseReply::NotApplied,
        };
        let state = self.core().finish_release(Instant::now(), reply);
        self.publish(state);
        result
    }
}

/// Marks a handle UNKNOWN when a release is abandoned mid-flight.
struct AbandonedRelease<'a>(Option<&'a Shared>);

impl Drop for AbandonedRelease<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            let state = shared
                .core()
                .finish_release(Instant::now(), ReleaseReply::Indeterminate);
            shared.publish(state);
        }
    }
}
