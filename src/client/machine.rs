//! The lease handle's state machine, without I/O: what a handle may do in
//! each state and where each reply takes it.
//!
//! [`LeaseHandle`](super::LeaseHandle) runs exactly this machine around its
//! HTTP calls; it is public so the machine can be tested exhaustively and
//! reused over another transport.
//!
//! | state ↓ / input → | renew asked | `renewed` | `lost` | indeterminate | not applied¹ | release asked | `released` / `already_absent` | `not_owner` | indeterminate | not applied¹ | local validity runs out |
//! | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
//! | ACTIVE | sent | ACTIVE, validity from the renew's send instant | LOST | UNKNOWN, validity not extended | ACTIVE | sent | RELEASED | LOST | UNKNOWN | ACTIVE | LOST |
//! | LOST | refused | LOST | LOST | LOST | LOST | sent² | LOST | LOST | LOST | LOST | – |
//! | UNKNOWN | refused | UNKNOWN | UNKNOWN | UNKNOWN | UNKNOWN | sent² | UNKNOWN | UNKNOWN | UNKNOWN | UNKNOWN | – |
//! | RELEASED | refused | RELEASED | RELEASED | RELEASED | RELEASED | refused | RELEASED | RELEASED | RELEASED | RELEASED | – |
//!
//! ¹ `unavailable`, `overloaded`, or a request the service rejected: nothing
//! was applied, and validity is not extended.
//! ² Releasing a LOST or UNKNOWN handle is allowed as clean-up (the lease may
//! still exist on the server, e.g. after an indeterminate renew that did
//! apply); the answer is returned but the handle stays terminal.
//!
//! Every input first *observes* the clock: an ACTIVE handle whose local
//! validity has run out is stored as LOST before the input is applied, so a
//! `renewed` reply that arrives after the deadline does not revive it.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// Where a lease handle stands. LOST, RELEASED and UNKNOWN are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// Held, and locally valid until [`HandleCore::valid_until`].
    Active,
    /// Not held any more: the server said so (`lost`, `not_owner`) or the
    /// local validity ran out.
    Lost,
    /// Released by this handle (`released` or `already_absent`).
    Released,
    /// A renew or release was sent and no certain reply came: the lease
    /// may or may not still be held. Treat it as not yours.
    Unknown,
}

impl LeaseState {
    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Active)
    }

    /// The upper-case name used in the design documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "ACTIVE",
            Self::Lost => "LOST",
            Self::Released => "RELEASED",
            Self::Unknown => "UNKNOWN",
        }
    }
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a renew reply means for the handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewReply {
    /// `renewed`, with the server's new `remainingMs`.
    Renewed {
        /// The server's remaining time to live after the renew.
        remaining: Duration,
    },
    /// `lost` (absent or not owner).
    Lost,
    /// Sent, no certain reply.
    Indeterminate,
    /// Definitely not applied (`unavailable`, `overloaded`, rejected).
    NotApplied,
}

/// What a release reply means for the handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReply {
    /// `released`.
    Released,
    /// `already_absent`.
    AlreadyAbsent,
    /// `not_owner`.
    NotOwner,
    /// Sent, no certain reply.
    Indeterminate,
    /// Definitely not applied (`unavailable`, `overloaded`, rejected).
    NotApplied,
}

/// A verb refused locally, without a request, because of the handle's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The (terminal) state that refused it.
    pub state: LeaseState,
}

/// The state machine of one lease handle, driven by explicit instants.
#[derive(Debug, Clone)]
pub struct HandleCore {
    state: LeaseState,
    valid_until: Instant,
    ttl: Duration,
    drift_budget: Duration,
    expired_locally: bool,
}

impl HandleCore {
    /// A handle for a lease granted by a request sent at `sent` with TTL
    /// `ttl`, the server reporting `remaining`: locally valid until
    /// `sent + min(ttl, remaining) - drift_budget`.
    pub fn new(sent: Instant, ttl: Duration, remaining: Duration, drift_budget: Duration) -> Self {
        Self {
            state: LeaseState::Active,
            valid_until: Self::validity_end(sent, ttl, remaining, drift_budget),
            ttl,
            drift_budget,
            expired_locally: false,
        }
    }

    /// `sent + min(ttl, remaining) - drift_budget`, never before `sent`.
    pub fn validity_end(
        sent: Instant,
        ttl: Duration,
        remaining: Duration,
        drift_budget: Duration,
    ) -> Instant {
        sent + ttl.min(remaining).saturating_sub(drift_budget)
    }

    /// The TTL this handle asks for on renew.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The end of local validity (meaningful while ACTIVE).
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The drift budget this handle's validity allows for.
    pub fn drift_budget(&self) -> Duration {
        self.drift_budget
    }

    /// Whether the handle became LOST because its local validity ran out
    /// (rather than because the server said so).
    pub fn expired_locally(&self) -> bool {
        self.expired_locally
    }

    /// The stored state at `now`: an ACTIVE handle past its validity is
    /// moved to LOST here, and stays there.
    pub fn observe(&mut self, now: Instant) -> LeaseState {
        if self.state == LeaseState::Active && now >= self.valid_until {
            self.state = LeaseState::Lost;
            self.expired_locally = true;
        }
        self.state
    }

    /// Local validity left at `now`; zero unless ACTIVE.
    pub fn valid_for(&mut self, now: Instant) -> Duration {
        match self.observe(now) {
            LeaseState::Active => self.valid_until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// May a renew be sent at `now`? Only from ACTIVE.
    pub fn begin_renew(&mut self, now: Instant) -> Result<(), Refused> {
        match self.observe(now) {
            LeaseState::Active => Ok(()),
            state => Err(Refused { state }),
        }
    }

    /// Applies the reply, received at `now`, to a renew sent at `sent`.
    pub fn finish_renew(&mut self, now: Instant, sent: Instant, reply: RenewReply) -> LeaseState {
        if self.observe(now) != LeaseState::Active {
            return self.state;
        }
        match reply {
            RenewReply::Renewed { remaining } => {
                let end = Self::validity_end(sent, self.ttl, remaining, self.drift_budget);
                self.valid_until = self.valid_until.max(end);
            }
            RenewReply::Lost => self.state = LeaseState::Lost,
            RenewReply::Indeterminate => self.state = LeaseState::Unknown,
            RenewReply::NotApplied => {}
        }
        self.observe(now)
    }

    /// May a release be sent at `now`? From anything but RELEASED.
    pub fn begin_release(&mut self, now: Instant) -> Result<(), Refused> {
        match self.observe(now) {
            LeaseState::Released => Err(Refused {
                state: LeaseState::Released,
            }),
            _ => Ok(()),
        }
    }

    /// Applies a release reply received at `now`.
    pub fn finish_release(&mut self, now: Instant, reply: ReleaseReply) -> LeaseState {
        if self.observe(now) != LeaseState::Active {
            return self.state;
        }
        match reply {
            ReleaseReply::Released | ReleaseReply::AlreadyAbsent => {
                self.state = LeaseState::Released
            }
            ReleaseReply::NotOwner => self.state = LeaseState::Lost,
            ReleaseReply::Indeterminate => self.state = LeaseState::Unknown,
            ReleaseReply::NotApplied => {}
        }
        self.state
    }
}
