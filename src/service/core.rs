//! [`LeaseService`]: its settings, admission (a bounded number of store
//! calls in flight; the rest `overloaded`), store failures turned into
//! typed failures, per-operation metrics, and the verbs that do not wait:
//! renew, release, inspect.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::domain::{
    Attempt, Bounds, EndedReason, Failure, Guarantee, HolderLabel, Inspection, Lease, LostReason,
    OutcomeName, OwnerToken, PermitView, ReleaseOutcome, RenewOutcome, Replication, ResourceId,
    StoreTime, Ttl,
};
use crate::notify::WaitRegistry;
use crate::store::{
    EndedEarly, Probe, Store, StoreError, StoreInspect, StoreLease, StoreRelease, StoreRenew,
};
use crate::telemetry::OperationMeters;

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
    /// With API keys: the purposes a key names, the only ones labelled.
    pub labelled_purposes: Option<std::collections::HashSet<String>>,
    /// Release what a waiting acquire got after its caller had gone,
    /// unless claimed since; off: it expires with its TTL.
    pub release_abandoned: bool,
    /// The most leases one session holds.
    pub session_max_leases: u64,
}

/// Leases over a [`Store`].
pub struct LeaseService {
    pub(super) store: Store,
    pub(super) settings: ServiceSettings,
    pub(super) admission: Semaphore,
    pub(super) waiters: Arc<WaitRegistry>,
    pub(super) shutdown: CancellationToken,
    pub(super) meters: OperationMeters,
    /// The keep-alive streams of this instance, woken when their session
    /// ends here.
    pub(super) kept: super::kept::KeptAlive,
}

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
            meters: OperationMeters::new(
                settings.max_purpose_labels,
                settings.labelled_purposes.clone(),
            ),
            store,
            settings,
            waiters,
            shutdown,
            kept: super::kept::KeptAlive::default(),
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

    pub(super) fn record<T: OutcomeName>(
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
        // For the console's overview (`GET /purposes`, `seen`): only where a
        // lease was taken, so inspecting made-up purposes fills nothing.
        if result.outcome_name() == "acquired" {
            self.waiters.purposes().seen(&resource.purpose);
        }
    }

    pub(super) fn failure(&self, err: StoreError, attempt: Option<&Attempt>) -> Failure {
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

    /// One store call under the admission limit (the permit is taken now,
    /// and held until the call's future ends).
    ///
    /// Not an `async fn`: its future would keep `call` twice, as the
    /// argument and as the future it awaits (rustc does not overlap the
    /// two), and every future above it in a request is moved, so copied
    /// whole, several times (docs/perf-log/2026-12-05.md, "the request
    /// path, a third pass").
    pub(super) fn admitted<'a, T, F>(
        &'a self,
        call: F,
    ) -> impl std::future::Future<Output = Result<Result<T, StoreError>, Failure>> + 'a
    where
        T: 'a,
        F: std::future::Future<Output = Result<T, StoreError>> + 'a,
    {
        use futures_util::future::{ready, Either, FutureExt as _};
        match self.admission.try_acquire() {
            Ok(permit) => Either::Left(call.map(move |result| {
                drop(permit);
                Ok(result)
            })),
            Err(_) => Either::Right(ready(Err(self.overloaded()))),
        }
    }

    pub(super) fn lease(
        resource: &ResourceId,
        record: StoreLease,
        replication: Option<crate::store::Replication>,
    ) -> Lease {
        let hold_ends_at = hold_end(&record);
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
            hold_ends_at,
            max_hold_ms: record.max_hold_ms,
            guarantee: Guarantee::Fenced,
        }
    }

    /// Records the hold time of permits a store call saw end other than by
    /// a release (expired, broken).
    pub(super) fn ended(&self, resource: &ResourceId, holds: &[crate::store::EndedHold]) {
        for hold in holds {
            self.meters.held(
                hold.end.label(),
                resource.purpose.as_str(),
                hold.held_ms as f64 / 1000.0,
            );
        }
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
            .admitted(self.store.renew(resource, attempt, ttl, holder))
            .await
            .map(|r| r.map(|r| (r.value, r.replication)));
        let result = match answer {
            Err(failure) => Err(failure),
            Ok(Ok((StoreRenew::Renewed(record), replication))) => {
                // A renewal changes no version: tell this instance's
                // purpose stream (docs/watching.md, `renewed`).
                self.waiters.purposes().renewed(resource);
                Ok(RenewOutcome::Renewed {
                    lease: Self::lease(resource, record, replication),
                })
            }
            Ok(Ok((StoreRenew::Absent, _))) => Ok(RenewOutcome::Lost {
                reason: LostReason::Absent,
            }),
            Ok(Ok((StoreRenew::NotOwner, _))) => Ok(RenewOutcome::Lost {
                reason: LostReason::NotOwner,
            }),
            Ok(Ok((StoreRenew::Ended(why), _))) => Ok(RenewOutcome::Lost {
                reason: match why {
                    EndedEarly::Revoked => LostReason::Revoked,
                    EndedEarly::MaxHold => LostReason::MaxHold,
                },
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
        self.release_for(resource, attempt, false).await
    }

    /// [`LeaseService::release`]; `session_ended`: its session ended (the
    /// history entry says so).
    pub(super) async fn release_for(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        session_ended: bool,
    ) -> Result<ReleaseOutcome, Failure> {
        let started = Instant::now();
        // A release's answer carries no replication (its WAIT still runs).
        let answer = self
            .admitted(self.store.release_for(resource, attempt, session_ended))
            .await
            .map(|r| {
                r.map(|r| {
                    self.ended(resource, &r.ended_holds);
                    r.value
                })
            });
        let result = match answer {
            Err(failure) => Err(failure),
            Ok(Ok(StoreRelease::Released { held_ms })) => {
                self.meters.held(
                    "released",
                    resource.purpose.as_str(),
                    held_ms as f64 / 1000.0,
                );
                Ok(ReleaseOutcome::Released)
            }
            Ok(Ok(StoreRelease::AlreadyAbsent)) => {
                Ok(ReleaseOutcome::AlreadyAbsent { reason: None })
            }
            Ok(Ok(StoreRelease::Ended(why))) => Ok(ReleaseOutcome::AlreadyAbsent {
                reason: Some(match why {
                    EndedEarly::Revoked => EndedReason::Revoked,
                    EndedEarly::MaxHold => EndedReason::MaxHold,
                }),
            }),
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
        StoreInspect::Free {
            version,
            lock_delay_ms,
        } => Inspection {
            held: false,
            version,
            remaining_ms: None,
            fencing_token: None,
            held_by: None,
            holder: None,
            ttl_ms: None,
            acquired_at: None,
            renewed_at: None,
            limit: None,
            mode: None,
            holders: 0,
            permits: Vec::new(),
            lock_delay_ms,
        },
        StoreInspect::Held {
            holders,
            permits,
            limit,
            mode,
            held_by,
            version,
            lock_delay_ms,
        } => {
            let first = permits.first().cloned();
            Inspection {
                held: true,
                version,
                remaining_ms: first.as_ref().map(|p| p.remaining_ms),
                fencing_token: first.as_ref().map(|p| p.fencing_token),
                held_by,
                holder: first.as_ref().and_then(|p| p.holder.clone()),
                ttl_ms: first.as_ref().map(|p| p.ttl_ms),
                acquired_at: first.as_ref().map(|p| p.acquired_at),
                renewed_at: first.as_ref().map(|p| p.renewed_at),
                limit: Some(limit),
                mode: Some(mode),
                holders,
                permits: permits.into_iter().map(PermitView::from).collect(),
                lock_delay_ms,
            }
        }
    }
}

/// `acquiredAt + maxHoldMs`, when the hold is bounded.
fn hold_end(p: &StoreLease) -> Option<StoreTime> {
    p.max_hold_ms
        .map(|ms| StoreTime(p.acquired_at.0.saturating_add(ms)))
}

impl From<StoreLease> for PermitView {
    fn from(p: StoreLease) -> Self {
        PermitView {
            hold_ends_at: hold_end(&p),
            max_hold_ms: p.max_hold_ms,
            lock_delay_ms: p.lock_delay_ms.filter(|ms| *ms > 0),
            holder: p.holder,
            fencing_token: p.fencing_token,
            remaining_ms: p.remaining_ms,
            ttl_ms: p.ttl_ms,
            acquired_at: p.acquired_at,
            renewed_at: p.renewed_at,
            session: p.session,
        }
    }
}
