//! How a server-side wait ends: a failed store call paused before the
//! next try, the failure or outcome it settles on, a release's grant
//! answered, and the last look at its deadline (docs/design.md §12, §14).

use super::acquire::{AcquireRequest, Tried};
use super::core::*;
use super::place::*;

use crate::domain::{AcquireOutcome, Attempt, Failure, ResourceId, StoreTime};
use crate::notify::Grant;
use crate::store::{Contention, InQueue, Moved, StoreLease};

impl LeaseService {
    /// Waits before trying a failed store call of a wait again; false when
    /// the failure is not worth a retry (shed by admission) or the deadline
    /// or shutdown leaves no room. `acquiring`: the call was an acquire,
    /// which may have applied when its reply was uncertain.
    pub(super) async fn pause(
        &self,
        retries: &mut Retries,
        failure: &Failure,
        deadline: tokio::time::Instant,
        acquiring: bool,
    ) -> bool {
        match failure {
            Failure::Indeterminate { .. } if acquiring => retries.uncertain = true,
            Failure::Indeterminate { .. } | Failure::Unavailable { .. } => {}
            Failure::Overloaded { .. } => return false,
        }
        let wake = tokio::time::Instant::now() + retries.pause;
        if wake >= deadline {
            return false;
        }
        retries.pause = (retries.pause * 2).min(RETRY_MAX);
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => false,
            _ = tokio::time::sleep_until(wake) => true,
        }
    }

    /// The failure a wait answers once it stops retrying: `indeterminate`
    /// whenever one of its acquires may have applied unseen, or a release
    /// may have granted its entry's ask.
    pub(super) fn settled_failure(
        &self,
        retries: &Retries,
        failure: Failure,
        attempt: &Attempt,
    ) -> Failure {
        if retries.uncertain || retries.asked {
            Failure::Indeterminate {
                operation_id: attempt.operation_id.clone(),
            }
        } else {
            failure
        }
    }

    /// A replay after an uncertain try of the same wait is that try's
    /// acquisition: the caller sent one request and it acquired.
    pub(super) fn settled_outcome(
        &self,
        retries: &Retries,
        outcome: AcquireOutcome,
        waited_ms: Option<u64>,
    ) -> AcquireOutcome {
        match outcome {
            AcquireOutcome::ReplayedSameOperation { lease } if retries.uncertain => {
                AcquireOutcome::Acquired { lease, waited_ms }
            }
            other => other,
        }
    }

    /// What a release granted this waiter (docs/design.md §12, "Hand-off"):
    /// the permit the store wrote for its attempt, as an acquire script
    /// answers it.
    pub(super) fn granted(
        resource: &ResourceId,
        request: &AcquireRequest,
        grant: Grant,
        waited_ms: Option<u64>,
    ) -> AcquireOutcome {
        let at = StoreTime(grant.acquired_at);
        let record = StoreLease::acquired(&request.spec(InQueue::No), grant.fencing_token, at);
        AcquireOutcome::Acquired {
            lease: Self::lease(resource, record, None),
            waited_ms,
        }
    }

    /// The look a waiter takes at its deadline; its place in the queue
    /// goes whatever the answer.
    pub(super) async fn last_look(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        place: &mut Place,
        retries: &mut Retries,
        waited: Option<u64>,
    ) -> Tried {
        // Refused, the entry leaves the queue in the same store call: no
        // release grants the attempt after it was told `contended`.
        let queue = match place.member() {
            Some(member) => InQueue::Leaving(member),
            None => InQueue::No,
        };
        let result = self
            .try_acquire(resource, attempt, request, queue, waited)
            .await;
        match result {
            Ok((outcome, why, moved)) => {
                if matches!(
                    outcome,
                    AcquireOutcome::Acquired { .. } | AcquireOutcome::ReplayedSameOperation { .. }
                ) {
                    place.taken();
                }
                if !matches!(outcome, AcquireOutcome::Contended { .. }) {
                    return Ok(self.settled_outcome(retries, outcome, waited));
                }
                if moved == Moved::Left || why == Some(Contention::Requeue) {
                    // The entry is gone already: nothing to leave.
                    place.taken();
                } else if retries.asked {
                    // Still queued with its ask (the leave was refused): a
                    // release may yet grant it.
                    return Err(Failure::Indeterminate {
                        operation_id: attempt.operation_id.clone(),
                    });
                }
                Ok(outcome)
            }
            Err(failure) => {
                if matches!(failure, Failure::Indeterminate { .. }) {
                    retries.uncertain = true;
                }
                Err(self.settled_failure(retries, failure, attempt))
            }
        }
    }

    /// The look of a place told that another place of the same attempt
    /// (the same request sent twice) is gone: when that one acquired, a
    /// replay of its permit (which claims it) answers this wait now, not
    /// at its deadline. `None`: not held by the attempt (the other left
    /// without it, or the look failed); the wait goes on.
    pub(super) async fn sibling_look(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        place: &mut Place,
        retries: &mut Retries,
        waited: Option<u64>,
    ) -> Option<Tried> {
        let queue = InQueue::member(place.member());
        match self
            .try_acquire(resource, attempt, request, queue, waited)
            .await
        {
            Ok((outcome, ..)) => match outcome {
                AcquireOutcome::Acquired { .. } | AcquireOutcome::ReplayedSameOperation { .. } => {
                    place.taken();
                    Some(Ok(self.settled_outcome(retries, outcome, waited)))
                }
                AcquireOutcome::Contended { .. } => None,
                other => Some(Ok(other)),
            },
            Err(failure) => {
                if matches!(failure, Failure::Indeterminate { .. }) {
                    retries.uncertain = true;
                }
                None
            }
        }
    }
}
