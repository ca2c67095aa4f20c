//! [`Store`]: the store the service talks to, an enum over the two
//! implementations, each verb dispatched to the configured one.

use std::sync::Arc;
use std::time::Duration;

use super::queueing::{QueueOp, Queued};
use super::{memory, redis};
use super::{
    AcquireSpec, Probe, Readiness, Replicated, StoreAcquire, StoreBreak, StoreError, StoreInspect,
    StorePage, StoreRelease, StoreRenew,
};
use crate::domain::{Attempt, HolderLabel, ListCursor, Mode, Purpose, ResourceId, Ttl};

/// The store the service was configured with.
#[derive(Clone)]
pub enum Store {
    /// In-process, single instance.
    Memory(Arc<memory::MemoryStore>),
    /// Redis.
    Redis(Arc<redis::RedisStore>),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Memory($s) => $e,
            Store::Redis($s) => $e,
        }
    };
}

impl Store {
    /// Acquires `resource` for `attempt` if it is free. With replica acks
    /// configured (Redis), a write is followed by `WAIT` and the answer
    /// says how many replicas have it; otherwise `replication` is `None`.
    pub async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        spec: &AcquireSpec<'_>,
    ) -> Result<Replicated<StoreAcquire>, StoreError> {
        match self {
            Store::Memory(s) => s.acquire(resource, attempt, spec).await.map(|v| {
                s.settle_place(resource, spec, &v);
                Replicated::unreplicated(v).with_ended(s.take_ended(&resource.tag()))
            }),
            Store::Redis(s) => s.acquire(resource, attempt, spec).await,
        }
    }

    /// Resets the TTL of the caller's lease; `holder` replaces its label.
    /// Replication as for [`Store::acquire`].
    pub async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<Replicated<StoreRenew>, StoreError> {
        match self {
            Store::Memory(s) => s
                .renew(resource, attempt, ttl, holder)
                .await
                .map(Replicated::unreplicated),
            Store::Redis(s) => s.renew(resource, attempt, ttl, holder).await,
        }
    }

    /// Deletes the caller's lease and wakes the resource's waiters.
    /// Replication as for [`Store::acquire`].
    pub async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<Replicated<StoreRelease>, StoreError> {
        self.release_for(resource, attempt, false).await
    }

    /// [`Store::release`]; `session_ended`: because the lease's session
    /// ended (its history entry says so, docs/design.md §18).
    pub async fn release_for(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        session_ended: bool,
    ) -> Result<Replicated<StoreRelease>, StoreError> {
        use crate::domain::HistoryEvent::{Released, SessionEnded};
        let event = if session_ended {
            SessionEnded
        } else {
            Released
        };
        match self {
            Store::Memory(s) => s
                .release_as(resource, attempt, false, event)
                .await
                .map(|v| Replicated::unreplicated(v).with_ended(s.take_ended(&resource.tag()))),
            Store::Redis(s) => s.release(resource, attempt, session_ended).await,
        }
    }

    /// Removes every live permit of `resource`, or only the one with
    /// `fencing_token`; wakes waiters, starts no lock-delay, leaves a
    /// tombstone per permit (until it would have expired) and publishes
    /// `revoked` with `revocation`. Replication as for [`Store::acquire`].
    pub async fn break_lease(
        &self,
        resource: &ResourceId,
        fencing_token: Option<u64>,
        revocation: &crate::domain::Revocation,
    ) -> Result<Replicated<StoreBreak>, StoreError> {
        match self {
            Store::Memory(s) => s
                .break_lease(resource, fencing_token, revocation)
                .await
                .map(|v| Replicated::unreplicated(v).with_ended(s.take_ended(&resource.tag()))),
            Store::Redis(s) => s.break_lease(resource, fencing_token, revocation).await,
        }
    }

    /// The clean-up release of what a waiting acquire got after its caller
    /// had gone (docs/design.md §14): the permit goes only if nobody has been told
    /// since that it is held (no replay claimed it, never renewed). True
    /// when it went.
    pub async fn release_abandoned(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.release_abandoned(resource, attempt).await)
    }

    /// Reads the lease without changing it. `watching`: this instance
    /// follows the resource, so its acquires and holder changes must
    /// publish events (Redis: renews the sequence's "watched until").
    pub async fn inspect(
        &self,
        resource: &ResourceId,
        probe: Probe<'_>,
        watching: bool,
    ) -> Result<StoreInspect, StoreError> {
        dispatch!(self, s => s.inspect(resource, probe, watching).await)
    }

    /// One page of the live leases of `purpose`, from `cursor` (the start
    /// when `None`), at most `limit` of them; bounded work per page (a page
    /// may hold fewer, and still a next cursor). The cursor must be one
    /// [`Store::accepts`].
    pub async fn list(
        &self,
        purpose: &Purpose,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<StorePage, StoreError> {
        dispatch!(self, s => s.list(purpose, cursor, limit).await)
    }

    /// The newest `limit` entries of `resource`'s history, newest first,
    /// within the age bound (docs/decisions/storage-v2.md, "History").
    pub async fn history(
        &self,
        resource: &ResourceId,
        limit: usize,
    ) -> Result<Vec<crate::domain::HistoryEntry>, StoreError> {
        dispatch!(self, s => s.history(resource, limit).await)
    }

    /// What this store keeps of each resource's history.
    pub fn history_bound(&self) -> crate::domain::HistoryBound {
        match self {
            Store::Memory(s) => s.history_bound(),
            Store::Redis(s) => s.history,
        }
    }

    /// Marks `purpose` watched (docs/watching.md, "Watching a purpose") and
    /// answers how long until every instance announces its changes.
    pub async fn mark_purpose(&self, purpose: &Purpose) -> Result<Duration, StoreError> {
        match self {
            // One process: every change reaches the hub at once.
            Store::Memory(_) => Ok(Duration::ZERO),
            Store::Redis(s) => s.mark_purpose(purpose).await,
        }
    }

    /// Whether `cursor` is of the kind this store issues (a cursor of the
    /// embedded store means nothing to Redis, and back).
    pub fn accepts(&self, cursor: &ListCursor) -> bool {
        match self {
            Store::Memory(_) => matches!(cursor, ListCursor::After(_)),
            Store::Redis(s) => s.accepts(cursor),
        }
    }

    /// A new entry name for the fair queue of this instance's waiters.
    pub fn queue_member(&self, mode: Mode) -> String {
        dispatch!(self, s => s.queue_member(mode))
    }

    /// Whether an acquire takes its [`InQueue::Entering`](super::InQueue::Entering) place in the
    /// same call when it finds no permit: Redis without replica acks (a
    /// place is left with an ask, which a release may grant).
    pub fn enters_when_held(&self) -> bool {
        matches!(self, Store::Redis(s) if s.enters_when_held())
    }

    /// Enters, keeps or leaves `resource`'s fair queue.
    pub async fn queue(
        &self,
        resource: &ResourceId,
        op: QueueOp<'_>,
    ) -> Result<Queued, StoreError> {
        dispatch!(self, s => s.queue(resource, op).await)
    }

    /// Pool occupancy (connections open, idle), for stores that pool.
    pub fn pool_state(&self) -> Option<(u32, u32)> {
        match self {
            Store::Memory(_) => None,
            Store::Redis(s) => Some(s.pool_state()),
        }
    }

    /// Whether the store answers within the command timeout.
    pub async fn readiness(&self) -> Readiness {
        dispatch!(self, s => s.readiness().await)
    }

    /// Starts whatever background work the store needs (Redis: the wake-up
    /// subscription; memory: the expiry sweeper), until `shutdown`.
    pub fn start_background(&self, shutdown: tokio_util::sync::CancellationToken) {
        dispatch!(self, s => s.start_background(shutdown))
    }
}
