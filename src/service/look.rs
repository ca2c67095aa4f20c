//! A look: one acquire store call of a waiting (or not) acquire, run so
//! that a caller who leaves meanwhile takes nothing with it, and its
//! answer read as an outcome, why it was contended, and what it did to the
//! caller's queue entry (docs/design.md §12, §14).

use super::acquire::{AcquireRequest, Looked};
use super::core::*;
use super::place::*;

use crate::domain::{AcquireOutcome, Attempt, ContendedReason, Failure, ResourceId};
use crate::store::{Contention, InQueue, Moved, StoreAcquire, StoreError};

impl LeaseService {
    /// The store call of a waiting acquire, run so that it cannot take the
    /// lease for a caller that has gone: it runs to completion in its own
    /// task, and when the waiter was dropped meanwhile (client disconnect)
    /// and the call acquired, the lease is released again at once.
    pub(super) async fn acquire_for_waiter(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        queue: InQueue<&str>,
    ) -> Result<crate::store::Replicated<StoreAcquire>, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (store, resource, attempt) = (self.store.clone(), resource.clone(), attempt.clone());
        let (request, queue) = (request.clone(), queue.to_owned());
        // A session's lease whose caller left is released whatever the
        // setting: nobody would attach it, and it would outlive its session
        // (and no previous-release pod, whose replays do not claim, serves
        // a session acquire: the setting's reason to stay off is not here).
        let clean_up = self.settings.release_abandoned || request.session.is_some();
        let task = async move {
            let result = store
                .acquire(&resource, &attempt, &request.spec(queue.as_str()))
                .await;
            if let Err(Ok(abandoned)) = tx.send(result) {
                if !matches!(abandoned.value, StoreAcquire::Acquired(_)) {
                    return;
                }
                if clean_up {
                    release_abandoned(&store, &resource, &attempt).await;
                } else {
                    tracing::info!(
                        operation_id = %attempt.operation_id,
                        "waiter left while its acquire was in flight; the lease it got ends with its TTL"
                    );
                }
            }
        };
        // Traces (feature `otel`): the store call stays under the request's span.
        #[cfg(feature = "otel")]
        let task = crate::telemetry::trace::propagate(task);
        tokio::spawn(task);
        rx.await.unwrap_or(Err(StoreError::Indeterminate(
            "acquire task ended without a reply",
        )))
    }

    pub(super) async fn try_acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        queue: InQueue<&str>,
        waited: Option<u64>,
    ) -> Result<Looked, Failure> {
        let result = if waited.is_some() {
            self.admitted(self.acquire_for_waiter(resource, attempt, request, queue))
                .await?
        } else {
            self.admitted(self.store.acquire(resource, attempt, &request.spec(queue)))
                .await?
        };
        let queued = queue.queued_as().is_some();
        if let Ok(r) = &result {
            self.ended(resource, &r.ended_holds);
        }
        let fallback = self.settings.retry_after_ms;
        let replication = result.as_ref().ok().and_then(|r| r.replication);
        match result.map(|r| r.value) {
            Ok(StoreAcquire::Acquired(record)) => Ok((
                AcquireOutcome::Acquired {
                    lease: Self::lease(resource, record, replication),
                    waited_ms: waited,
                },
                None,
                Moved::Stayed,
            )),
            Ok(StoreAcquire::Replayed(record)) => Ok((
                AcquireOutcome::ReplayedSameOperation {
                    lease: Self::lease(resource, record, None),
                },
                None,
                Moved::Stayed,
            )),
            Ok(StoreAcquire::OwnerOperationConflict { remaining_ms }) => Ok((
                AcquireOutcome::OwnerOperationConflict {
                    retry_after_ms: remaining_ms.filter(|ms| *ms > 0).unwrap_or(fallback),
                },
                None,
                Moved::Stayed,
            )),
            // Refused for the queue without a place in it: nobody's expiry
            // says when to come back (the store's hint, when the head's
            // heartbeat lapses, is for waiters), so the fallback.
            Ok(StoreAcquire::Contended {
                why: Contention::Queued,
                moved: Moved::Stayed,
                ..
            }) if !queued => Ok((
                AcquireOutcome::Contended {
                    retry_after_ms: fallback,
                    waited_ms: waited,
                    reason: Some(ContendedReason::Queued),
                },
                Some(Contention::Queued),
                Moved::Stayed,
            )),
            Ok(StoreAcquire::Contended {
                remaining_ms,
                why,
                moved,
            }) => Ok((
                AcquireOutcome::Contended {
                    retry_after_ms: remaining_ms.filter(|ms| *ms > 0).unwrap_or(fallback),
                    waited_ms: waited,
                    reason: match why {
                        Contention::Held => None,
                        Contention::LockDelay => Some(ContendedReason::LockDelay),
                        Contention::Queued | Contention::Requeue => Some(ContendedReason::Queued),
                    },
                },
                Some(why),
                moved,
            )),
            Ok(StoreAcquire::LimitMismatch { limit }) => {
                Ok((AcquireOutcome::LimitMismatch { limit }, None, Moved::Stayed))
            }
            Err(err) => Err(self.failure(err, Some(attempt))),
        }
    }
}
