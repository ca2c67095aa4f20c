//! An acquire on a session (docs/design.md §18): the lease is taken as
//! any lease, then attached to the session and given its expiry.

use crate::domain::{
    member, AcquireOutcome, AttachedRenew, Attempt, Failure, OutcomeName, RenewOutcome, ResourceId,
    SessionGone, SessionId, SessionOutcome, SessionRecord,
};
use crate::store::{keep_ms, SessionCall, SessionFound, Store};

use super::place::release_abandoned;
use super::sessions::{count, gone};
use super::{AcquireRequest, LeaseService};

/// How an acquire on a session ended.
#[derive(Debug)]
pub enum SessionAcquire {
    /// As any acquire (the lease, when it was taken, is attached).
    Lease(AcquireOutcome),
    /// The session refused it (gone, full, not the token's).
    Session(SessionOutcome),
}

impl OutcomeName for SessionAcquire {
    fn outcome_name(&self) -> &'static str {
        match self {
            Self::Lease(outcome) => outcome.outcome_name(),
            Self::Session(outcome) => outcome.outcome_name(),
        }
    }
}

impl LeaseService {
    /// Acquires `resource` for `attempt` on session `id`: the lease ends
    /// when the session does. The attempt's owner token must be the
    /// session's secret.
    pub async fn acquire_on_session(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        id: &SessionId,
        request: &AcquireRequest,
    ) -> Result<SessionAcquire, Failure> {
        let result = self
            .acquire_on_session_inner(resource, attempt, id, request)
            .await;
        count("acquire", &result);
        result
    }

    async fn acquire_on_session_inner(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        id: &SessionId,
        request: &AcquireRequest,
    ) -> Result<SessionAcquire, Failure> {
        if !id.is_secret(&attempt.owner_token) {
            return Ok(SessionAcquire::Session(SessionOutcome::NotOwner));
        }
        let record = match self.session_call(id, SessionCall::Get, 0).await? {
            SessionFound::Live(r) => r,
            other => return Ok(refused(&other)),
        };
        let left = record.remaining_ms();
        if left == 0 {
            return Ok(refused(&SessionFound::Expired));
        }
        let ttl = self.bounds().max_ttl().at_most(Some(left));
        let asked = AcquireRequest {
            ttl,
            wait: request.wait,
            holder: request.holder.clone(),
            shape: request.shape,
            max_hold_ms: request.max_hold_ms,
            session: Some(id.clone()),
        };
        let outcome = self.acquire(resource, attempt, &asked).await?;
        if !matches!(
            outcome,
            AcquireOutcome::Acquired { .. } | AcquireOutcome::ReplayedSameOperation { .. }
        ) {
            return Ok(SessionAcquire::Lease(outcome));
        }
        // Taken: a failure from here on leaves it taken, so `indeterminate`
        // naming the attempt (never `unavailable`: nothing applied); retried
        // with it, the acquire replays and attaches it. A caller that leaves
        // before the attach is done leaves it neither attached nor at its
        // session's expiry: then it is released (`Unattached`).
        let mut unattached = Unattached {
            store: &self.store,
            resource,
            attempt,
            armed: true,
        };
        let attached = self
            .attach_taken(resource, attempt, id, request, &record, outcome)
            .await;
        unattached.armed = false;
        attached.map_err(|_| Failure::Indeterminate {
            operation_id: attempt.operation_id.clone(),
        })
    }

    /// Attaches a lease just taken (or replayed) to session `id`.
    async fn attach_taken(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        id: &SessionId,
        request: &AcquireRequest,
        record: &SessionRecord,
        outcome: AcquireOutcome,
    ) -> Result<SessionAcquire, Failure> {
        // Attached after it was taken: an end that ran meanwhile either
        // found it in the set (and released it) or makes this attach fail
        // (and it is released here).
        let m = member(
            resource.purpose.as_str(),
            resource.digest.as_str(),
            attempt.operation_id.as_str(),
        );
        let max = self.settings.session_max_leases;
        let attach = SessionCall::Attach { member: &m, max };
        let found = self
            .session_call(id, attach, keep_ms(record.ttl_ms))
            .await?;
        let now_record = match found {
            SessionFound::Live(r) => r,
            SessionFound::Full(_) => {
                self.release(resource, attempt).await?;
                return Ok(SessionAcquire::Session(SessionOutcome::SessionFull {
                    limit: max,
                }));
            }
            other => {
                self.release(resource, attempt).await?;
                return Ok(refused(&other));
            }
        };
        let replay = matches!(outcome, AcquireOutcome::ReplayedSameOperation { .. });
        if request.wait.ms() > 0 || replay || now_record.expires_at != record.expires_at {
            // Renewed meanwhile, granted after a wait (a grant counts the
            // TTL asked from when it is granted), or a replay (of such a
            // grant, or of a lease renewed on its own): the lease takes the
            // session's expiry, and the answer says so. Its `remainingMs`
            // is the session's from now, never the grant's: a lease
            // granted long ago (a wait answered late, a replay) lives only
            // as long as its session, and a holder told the grant's time
            // would believe past it.
            let pair = [(resource.clone(), attempt.operation_id.clone())];
            let token = &attempt.owner_token;
            let fared = self
                .store
                .renew_attached(token, &pair, now_record.expires_at, now_record.now)
                .await
                .map_err(|err| self.session_failure(err))?;
            let left = now_record.remaining_ms().max(1);
            if fared.first() == Some(&AttachedRenew::Unsure) {
                let ttl = self.bounds().max_ttl().at_most(Some(left));
                if let RenewOutcome::Renewed { lease } =
                    self.renew(resource, attempt, ttl, None).await?
                {
                    return Ok(SessionAcquire::Lease(at_most(outcome, lease.remaining_ms)));
                }
            }
            return Ok(SessionAcquire::Lease(at_most(outcome, left)));
        }
        Ok(SessionAcquire::Lease(outcome))
    }
}

/// A lease taken on a session whose attach a departed caller cut short:
/// dropped while `armed`, it releases the lease unless a retry claimed it
/// (the clean-up of a departed waiter's grant).
struct Unattached<'a> {
    store: &'a Store,
    resource: &'a ResourceId,
    attempt: &'a Attempt,
    armed: bool,
}

impl Drop for Unattached<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, resource, attempt) = (
            self.store.clone(),
            self.resource.clone(),
            self.attempt.clone(),
        );
        runtime.spawn(async move { release_abandoned(&store, &resource, &attempt).await });
    }
}

/// `outcome` with its lease's `remainingMs` at most `ms`.
fn at_most(outcome: AcquireOutcome, ms: u64) -> AcquireOutcome {
    match outcome {
        AcquireOutcome::Acquired {
            mut lease,
            waited_ms,
        } => {
            lease.remaining_ms = lease.remaining_ms.min(ms);
            AcquireOutcome::Acquired { lease, waited_ms }
        }
        AcquireOutcome::ReplayedSameOperation { mut lease } => {
            lease.remaining_ms = lease.remaining_ms.min(ms);
            AcquireOutcome::ReplayedSameOperation { lease }
        }
        other => other,
    }
}

/// An acquire on a session the session call found not live.
fn refused(found: &SessionFound) -> SessionAcquire {
    SessionAcquire::Session(SessionOutcome::Lost {
        reason: gone(found).unwrap_or(SessionGone::Absent),
    })
}
