//! What an [`Election`](super::Election) tells its candidate: why a
//! leadership ended ([`StopReason`]), the [`Leadership`] token, the
//! [`ElectionEvent`]s on its channel and the [`ElectionError`]s of campaign.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::Error;
use super::handle::LeaseHandle;
use super::observe::Leader;
use super::watchdog::EndReason;

/// Why a leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The campaign was cancelled or [`Election::resign`](super::Election::resign) was called: the
    /// lease was released (the event says after the release was tried).
    Resigned,
    /// The service said the lease is gone (expired, or taken over).
    Lost,
    /// A renew got no certain reply: the lease may or may not still be
    /// held, so it is no longer ours to use.
    Unknown,
    /// The lease's local validity was about to run out (within
    /// [`ElectionSettings::leading_margin`](super::ElectionSettings::leading_margin)) and no renew had succeeded.
    Expiring,
}

impl StopReason {
    pub(super) fn of(end: EndReason) -> Self {
        match end {
            EndReason::Unknown => Self::Unknown,
            EndReason::Expired => Self::Expiring,
            // Released, cancelled or stopped by someone else than this
            // election: nothing keeps the lease any more.
            EndReason::Lost
            | EndReason::Revoked
            | EndReason::MaxHold
            | EndReason::Released
            | EndReason::CancelledByCaller
            | EndReason::Stopped => Self::Lost,
        }
    }
}

/// One term of leadership, handed out with [`ElectionEvent::StartedLeading`].
#[derive(Debug, Clone)]
pub struct Leadership {
    pub(super) token: CancellationToken,
    pub(super) fencing_token: u64,
    pub(super) holder: String,
    pub(super) started_at: Instant,
    pub(super) handle: Arc<LeaseHandle>,
}

impl Leadership {
    /// Cancelled when this term ends, and always before the lease's local
    /// validity runs out. Stop the leader's work when it fires.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// The lease's fencing token: present it with every effect.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The label this term was won with.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// When the acquire's answer arrived (monotonic).
    pub fn started_at(&self) -> Instant {
        self.started_at
    }

    /// The end of the lease's local validity as last extended by a renew
    /// (`send instant + min(ttl, remainingMs) - drift budget`); kept after
    /// the term ends. The token is cancelled before this instant.
    pub fn valid_until(&self) -> Instant {
        self.handle.shared().valid_until()
    }

    /// Whether this term is still on.
    pub fn is_leading(&self) -> bool {
        !self.token.is_cancelled()
    }
}

/// What an [`Election`](super::Election) tells its owner.
#[derive(Debug, Clone)]
pub enum ElectionEvent {
    /// This candidate leads, until [`Leadership::token`] is cancelled.
    StartedLeading(Leadership),
    /// This candidate's term ended; sent after the term's token was
    /// cancelled and (on resign) after the release was tried.
    StoppedLeading {
        /// The ended term's fencing token.
        fencing_token: u64,
        /// Why it ended.
        reason: StopReason,
    },
    /// The leader changed (another holder, another term, or nobody), as
    /// the candidate's long-poll saw it; the first one is the leader found
    /// when the campaign started. Changes closer together than one
    /// long-poll round trip may arrive as one.
    NewLeader(Leader),
}

/// Why an election call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElectionError {
    /// [`Election::campaign`](super::Election::campaign) is already running on this election.
    #[error("a campaign is already running on this election")]
    AlreadyCampaigning,
    /// [`Election::proclaim`](super::Election::proclaim) when not leading (or the lease turned out to
    /// be gone).
    #[error("not the leader")]
    NotLeader,
    /// No owner token could be made: the OS random source failed.
    #[error("the OS random source failed")]
    Random,
    /// The service refused a request as sent (a TTL or wait out of its
    /// bounds, an unknown API key, ...), or a proclaim failed.
    #[error(transparent)]
    Client(#[from] Error),
}
