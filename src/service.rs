//! The lease service: admission control, server-side waits, store results
//! turned into typed outcomes, and per-operation metrics. The HTTP layer
//! calls only this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::domain::{
    AcquireOutcome, Attempt, Bounds, Failure, Guarantee, HolderLabel, Inspection, Lease,
    LostReason, OutcomeName, OwnerToken, ReleaseOutcome, RenewOutcome, Replication, ResourceId,
    Ttl, WaitMs,
};
use crate::store::{
    Probe, Store, StoreAcquire, StoreError, StoreInspect, StoreLease, StoreRelease, StoreRenew,
};
use crate::telemetry::OperationMeters;
use crate::wait::WaitRegistry;

/// Tunables of the service layer.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    /// TTL and wait bounds.
    pub bounds: Bounds,
    /// `retryAfterMs` when the holder's PTTL is unknown, and for `overloaded`.
    pub retry_after_ms: u64,
    /// `retryAfterMs` for `unavailable`.
    pub unavailable_retry_after_ms: u64,
    /// Concurrent store calls admitted; the rest are `overloaded`.
    pub max_in_flight: usize,
    /// Distinct purposes admitted as metric label values.
    pub max_purpose_labels: usize,
}

/// Leases over a [`Store`].
pub struct LeaseService {
    store: Store,
    settings: ServiceSettings,
    admission: Semaphore,
    waiters: Arc<WaitRegistry>,
    shutdown: CancellationToken,
    meters: OperationMeters,
}

/// What a store call looks like to the wait loop.
type Tried = Result<AcquireOutcome, Failure>;

impl LeaseService {
    /// A service over `store`; `waiters` must be the registry the store wakes;
    /// `shutdown` ends every wait.
    pub fn new(
        store: Store,
        settings: ServiceSettings,
        waiters: Arc<WaitRegistry>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            admission: Semaphore::new(settings.max_in_flight.max(1)),
            meters: OperationMeters::new(settings.max_purpose_labels),
            store,
            settings,
            waiters,
            shutdown,
        }
    }

    /// The configured bounds.
    pub fn bounds(&self) -> Bounds {
        self.settings.bounds
    }

    /// The store, for readiness and pool metrics.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The wait registry.
    pub fn waiters(&self) -> &Arc<WaitRegistry> {
        &self.waiters
    }

    /// Cancelled when shutdown begins: waits and watches end.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    fn record<T: OutcomeName>(
        &self,
        verb: &'static str,
        resource: &ResourceId,
        started: Instant,
        result: &Result<T, Failure>,
    ) {
        self.meters.record(
            verb,
            result.outcome_name(),
            resource.purpose.as_str(),
            started.elapsed().as_secs_f64(),
        );
    }

    fn failure(&self, err: StoreError, attempt: Option<&Attempt>) -> Failure {
        match (err, attempt) {
            (StoreError::Indeterminate(reason), Some(attempt)) => {
                tracing::warn!(reason, operation_id = %attempt.operation_id, "store reply uncertain");
                Failure::Indeterminate {
                    operation_id: attempt.operation_id.clone(),
                }
            }
            (StoreError::Indeterminate(reason), None) | (StoreError::Unavailable(reason), _) => {
                tracing::warn!(reason, "store unavailable");
                Failure::Unavailable {
                    retry_after_ms: self.settings.unavailable_retry_after_ms,
                }
            }
        }
    }

    /// `overloaded`, with the configured retry hint.
    pub fn overloaded(&self) -> Failure {
        Failure::Overloaded {
            retry_after_ms: self.settings.retry_after_ms,
        }
    }

    /// One store call under the admission limit.
    async fn admitted<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<Result<T, StoreError>, Failure> {
        let Ok(_permit) = self.admission.try_acquire() else {
            return Err(self.overloaded());
        };
        Ok(call.await)
    }

    fn lease(
        resource: &ResourceId,
        record: StoreLease,
        replication: Option<crate::store::Replication>,
    ) -> Lease {
        Lease {
            replication: replication.map(|r| Replication {
                acknowledged: r.acknowledged,
                required: r.required,
            }),
            purpose: resource.purpose.clone(),
            digest: resource.digest.clone(),
            fencing_token: record.fencing_token,
            ttl_ms: record.ttl_ms,
            remaining_ms: record.remaining_ms,
            holder: record.holder,
            acquired_at: record.acquired_at,
            renewed_at: record.renewed_at,
            guarantee: Guarantee::Fenced,
        }
    }

    /// The store call of a waiting acquire, run so that it cannot take the
    /// lease for a caller that has gone: it runs to completion in its own
    /// task, and when the waiter was dropped meanwhile (client disconnect)
    /// and the call acquired, the lease is released again at once.
    async fn acquire_for_waiter(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<crate::store::Replicated<StoreAcquire>, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (store, resource, attempt) = (self.store.clone(), resource.clone(), attempt.clone());
        let holder = holder.cloned();
        tokio::spawn(async move {
            let result = store
                .acquire_replicated(&resource, &attempt, ttl, holder.as_ref())
                .await;
            if let Err(Ok(abandoned)) = tx.send(result) {
                if matches!(abandoned.value, StoreAcquire::Acquired(_)) {
                    tracing::info!(
                        operation_id = %attempt.operation_id,
                        "waiter left while its acquire was in flight; releasing the lease it got"
                    );
                    let _ = store.release(&resource, &attempt).await;
                }
            }
        });
        rx.await.unwrap_or(Err(StoreError::Indeterminate(
            "acquire task ended without a reply",
        )))
    }

    async fn try_acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
        waited: Option<u64>,
    ) -> Tried {
        let result = if waited.is_some() {
            self.admitted(self.acquire_for_waiter(resource, attempt, ttl, holder))
                .await?
        } else {
            self.admitted(
                self.store
                    .acquire_replicated(resource, attempt, ttl, holder),
            )
            .await?
        };
        let fallback = self.settings.retry_after_ms;
        let replication = result.as_ref().ok().and_then(|r| r.replication);
        match result.map(|r| r.value) {
            Ok(StoreAcquire::Acquired(record)) => Ok(AcquireOutcome::Acquired {
                lease: Self::lease(resource, record, replication),
                waited_ms: waited,
            }),
            Ok(StoreAcquire::Replayed(record)) => Ok(AcquireOutcome::ReplayedSameOperation {
                lease: Self::lease(resource, record, None),
            }),
            Ok(StoreAcquire::OwnerOperationConflict { remaining_ms }) => {
                Ok(AcquireOutcome::OwnerOperationConflict {
                    retry_after_ms: remaining_ms.filter(|ms| *ms > 0).unwrap_or(fallback),
                })
            }
            Ok(StoreAcquire::Contended { remaining_ms }) => Ok(AcquireOutcome::Contended {
                retry_after_ms: remaining_ms.filter(|ms| *ms > 0).unwrap_or(fallback),
                waited_ms: waited,
            }),
            Err(err) => Err(self.failure(err, Some(attempt))),
        }
    }

    /// Acquires `resource` for `attempt`, waiting server-side up to `wait`.
    pub async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        wait: WaitMs,
        holder: Option<&HolderLabel>,
    ) -> Tried {
        let started = Instant::now();
        let result = self
            .acquire_inner(resource, attempt, ttl, wait, holder, started)
            .await;
        self.record("acquire", resource, started, &result);
        result
    }

    async fn acquire_inner(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        wait: WaitMs,
        holder: Option<&HolderLabel>,
        started: Instant,
    ) -> Tried {
        let first = self.try_acquire(resource, attempt, ttl, holder, None).await;
        if wait.ms() == 0 {
            return first;
        }
        let Ok(AcquireOutcome::Contended { retry_after_ms, .. }) = first else {
            return first;
        };
        let deadline = tokio::time::Instant::from_std(started) + Duration::from_millis(wait.ms());
        let waited = || Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        let Some(guard) = self.waiters.enter(&resource.tag()) else {
            return Err(self.overloaded());
        };
        let queue = guard.resource();
        // Take the turn: the one waiter of this instance that talks to the store.
        let turn = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => {
                return Ok(AcquireOutcome::Contended { retry_after_ms, waited_ms: waited() });
            }
            turn = queue.turn.lock() => turn,
            _ = tokio::time::sleep_until(deadline) => {
                // Never had the turn: one last look, then give up.
                return self.try_acquire(resource, attempt, ttl, holder, waited()).await;
            }
        };
        let mut holder_ttl;
        loop {
            // Register for the wake-up before looking, so a release between
            // the look and the sleep is not missed.
            let woken = queue.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self
                .try_acquire(resource, attempt, ttl, holder, waited())
                .await
            {
                Ok(AcquireOutcome::Contended { retry_after_ms, .. }) => holder_ttl = retry_after_ms,
                other => return other,
            }
            // +1 ms: PTTL is truncated to whole milliseconds.
            let expiry = tokio::time::Instant::now() + Duration::from_millis(holder_ttl + 1);
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break,
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(expiry.min(deadline)) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                // One last look at the deadline (it may have been freed just now).
                return self
                    .try_acquire(resource, attempt, ttl, holder, waited())
                    .await;
            }
        }
        drop(turn);
        Ok(AcquireOutcome::Contended {
            retry_after_ms: holder_ttl,
            waited_ms: waited(),
        })
    }

    /// Resets the TTL of the caller's lease; `holder` replaces its label.
    pub async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<RenewOutcome, Failure> {
        let started = Instant::now();
        let answer = self
            .admitted(self.store.renew_replicated(resource, attempt, ttl, holder))
            .await
            .map(|r| r.map(|r| (r.value, r.replication)));
        let result = match answer {
            Err(failure) => Err(failure),
            Ok(Ok((StoreRenew::Renewed(record), replication))) => Ok(RenewOutcome::Renewed {
                lease: Self::lease(resource, record, replication),
            }),
            Ok(Ok((StoreRenew::Absent, _))) => Ok(RenewOutcome::Lost {
                reason: LostReason::Absent,
            }),
            Ok(Ok((StoreRenew::NotOwner, _))) => Ok(RenewOutcome::Lost {
                reason: LostReason::NotOwner,
            }),
            Ok(Err(err)) => Err(self.failure(err, Some(attempt))),
        };
        self.record("renew", resource, started, &result);
        result
    }

    /// Releases the caller's lease (idempotent).
    pub async fn release(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<ReleaseOutcome, Failure> {
        let started = Instant::now();
        let result = match self.admitted(self.store.release(resource, attempt)).await {
            Err(failure) => Err(failure),
            Ok(Ok(StoreRelease::Released)) => Ok(ReleaseOutcome::Released),
            Ok(Ok(StoreRelease::AlreadyAbsent)) => Ok(ReleaseOutcome::AlreadyAbsent),
            Ok(Ok(StoreRelease::NotOwner)) => Ok(ReleaseOutcome::NotOwner),
            Ok(Err(err)) => Err(self.failure(err, Some(attempt))),
        };
        self.record("release", resource, started, &result);
        result
    }

    /// Reads the lease; `attempt` (optional) fills `heldBy`.
    pub async fn inspect(
        &self,
        resource: &ResourceId,
        attempt: Option<&Attempt>,
    ) -> Result<Inspection, Failure> {
        let probe = attempt.map_or(Probe::Anyone, Probe::Attempt);
        self.inspect_as(resource, probe, attempt, false).await
    }

    /// Reads the lease as an owner token that named no operation: `heldBy`
    /// is `caller_other_operation` when this token holds the lease (for
    /// whatever operation) and `other` otherwise, never `caller`; an
    /// uncertain read is `unavailable`, as for an inspect without attempt
    /// headers (`indeterminate` would have to name an operation).
    pub async fn inspect_as_owner(
        &self,
        resource: &ResourceId,
        owner_token: &OwnerToken,
    ) -> Result<Inspection, Failure> {
        self.inspect_as(resource, Probe::Owner(owner_token), None, false)
            .await
    }

    /// The read a watch group makes for this instance's watchers: marks the
    /// resource watched in the store, so acquires and holder changes
    /// anywhere publish events.
    pub async fn inspect_for_watchers(&self, resource: &ResourceId) -> Result<Inspection, Failure> {
        self.inspect_as(resource, Probe::Anyone, None, true).await
    }

    /// Inspects as `probe`; an uncertain read names `named`'s operation
    /// (`indeterminate`) or, without one, is `unavailable`.
    async fn inspect_as(
        &self,
        resource: &ResourceId,
        probe: Probe<'_>,
        named: Option<&Attempt>,
        watching: bool,
    ) -> Result<Inspection, Failure> {
        let started = Instant::now();
        let result = match self
            .admitted(self.store.inspect(resource, probe, watching))
            .await
        {
            Err(failure) => Err(failure),
            Ok(Ok(found)) => Ok(inspection(found)),
            // Inspect changes nothing, but an uncertain read is still
            // reported as such when the caller named its operation.
            Ok(Err(err)) => Err(self.failure(err, named)),
        };
        self.record("inspect", resource, started, &result);
        result
    }
}

/// The API's view of what the store read.
pub fn inspection(found: StoreInspect) -> Inspection {
    match found {
        StoreInspect::Free { version } => Inspection {
            held: false,
            version,
            remaining_ms: None,
            fencing_token: None,
            held_by: None,
            holder: None,
            ttl_ms: None,
            acquired_at: None,
            renewed_at: None,
        },
        StoreInspect::Held {
            lease,
            held_by,
            version,
        } => Inspection {
            held: true,
            version,
            remaining_ms: Some(lease.remaining_ms),
            fencing_token: Some(lease.fencing_token),
            held_by,
            holder: lease.holder,
            ttl_ms: Some(lease.ttl_ms),
            acquired_at: Some(lease.acquired_at),
            renewed_at: Some(lease.renewed_at),
        },
    }
}
