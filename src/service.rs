//! The lease service: admission control, server-side waits, store results
//! turned into typed outcomes, and per-operation metrics. The HTTP layer
//! calls only this.

mod list;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::domain::{
    AcquireOutcome, Attempt, Bounds, ContendedReason, Failure, Guarantee, HolderLabel, Inspection,
    Lease, LeaseShape, LostReason, Mode, OutcomeName, OwnerToken, PermitView, ReleaseOutcome,
    RenewOutcome, Replication, ResourceId, Ttl, WaitMs,
};
use crate::notify::{ResourceWaiters, WaitRegistry};
use crate::store::{
    AcquireSpec, Contention, Probe, QueueOp, Store, StoreAcquire, StoreError, StoreInspect,
    StoreLease, StoreRelease, StoreRenew,
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

/// How often the instance that has waiters for a resource tells the store
/// they are alive (their entries lapse 2 s after the last beat).
const QUEUE_BEAT: Duration = Duration::from_millis(500);

/// What an acquire asks for.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The TTL.
    pub ttl: Ttl,
    /// How long to wait server-side while contended.
    pub wait: WaitMs,
    /// The public holder label.
    pub holder: Option<HolderLabel>,
    /// Limit, mode and lock-delay.
    pub shape: LeaseShape,
}

impl AcquireRequest {
    /// A plain lease for `ttl`, no wait, no label.
    pub fn plain(ttl: Ttl) -> Self {
        Self {
            ttl,
            wait: WaitMs::default(),
            holder: None,
            shape: LeaseShape::default(),
        }
    }

    fn spec<'a>(&'a self, queued_as: Option<&'a str>) -> AcquireSpec<'a> {
        AcquireSpec {
            ttl: self.ttl,
            holder: self.holder.as_ref(),
            shape: self.shape,
            queued_as,
        }
    }
}

/// A waiter's place in the resource's fair queue. Dropped without being
/// taken (deadline, disconnect, shutdown), it leaves the queue in the
/// background, retried until the store confirms it (docs/design.md §14).
struct Place {
    store: Store,
    resource: ResourceId,
    mode: Mode,
    member: Option<String>,
    waiters: Arc<WaitRegistry>,
    shutdown: CancellationToken,
    /// This instance's waiters of the resource: the roster its heartbeats
    /// send lists this place's member while it lives.
    queue: Arc<ResourceWaiters>,
}

/// First pause between two tries of a store call that failed inside a wait
/// (or of a queue leave); it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(25);
/// Longest pause between two such tries.
const RETRY_MAX: Duration = Duration::from_millis(400);

impl Place {
    fn new(
        service: &LeaseService,
        resource: ResourceId,
        mode: Mode,
        queue: Arc<ResourceWaiters>,
    ) -> Self {
        Self {
            store: service.store.clone(),
            resource,
            mode,
            member: None,
            waiters: Arc::clone(&service.waiters),
            shutdown: service.shutdown.clone(),
            queue,
        }
    }

    fn member(&self) -> Option<&str> {
        self.member.as_deref()
    }

    /// Takes a (new) place: at the back of the queue, or (`front`, for a
    /// turn holder whose place lapsed) ahead of this instance's own
    /// entries, so that it never waits behind waiters waiting for its turn.
    async fn enter(&mut self, service: &LeaseService, front: bool) -> Result<(), Failure> {
        self.leave();
        // Known before the enter is sent: a cancel or an uncertain reply
        // during it still leaves on drop.
        let member = self.store.queue_member(self.mode);
        self.queue.join(&member);
        self.member = Some(member.clone());
        let op = if front {
            QueueOp::EnterFront(&member)
        } else {
            QueueOp::Enter(&member)
        };
        let entered = service
            .admitted(self.store.queue(&self.resource, op))
            .await?;
        entered.map_err(|err| service.failure(err, None))
    }

    /// The acquire script took the entry out with the permit.
    fn taken(&mut self) {
        if let Some(member) = self.member.take() {
            self.queue.part(&member);
        }
    }

    fn leave(&mut self) {
        let Some(member) = self.member.take() else {
            return;
        };
        // Off the roster at once: the next heartbeat of any waiter of this
        // instance drops the entry, should the leave below not get through.
        self.queue.part(&member);
        let (store, resource) = (self.store.clone(), self.resource.clone());
        let (waiters, shutdown) = (Arc::clone(&self.waiters), self.shutdown.clone());
        tokio::spawn(async move {
            let mut pause = RETRY_FIRST;
            loop {
                if store
                    .queue(&resource, QueueOp::Leave(&member))
                    .await
                    .is_ok()
                {
                    return;
                }
                // With no waiter of this instance left there, nobody beats
                // for the entry: it lapses within the heartbeat horizon.
                if !waiters.is_waited_for(&resource.tag()) {
                    return;
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(RETRY_MAX);
            }
        });
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.leave();
    }
}

/// How a wait retries store calls that failed (docs/design.md §14).
struct Retries {
    pause: Duration,
    /// An acquire of this wait may have applied and no later answer said
    /// whether it did.
    uncertain: bool,
}

impl Retries {
    fn new() -> Self {
        Self {
            pause: RETRY_FIRST,
            uncertain: false,
        }
    }
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
        request: &AcquireRequest,
        member: Option<&str>,
    ) -> Result<crate::store::Replicated<StoreAcquire>, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (store, resource, attempt) = (self.store.clone(), resource.clone(), attempt.clone());
        let (request, member) = (request.clone(), member.map(str::to_owned));
        let clean_up = self.settings.release_abandoned;
        tokio::spawn(async move {
            let result = store
                .acquire_replicated(&resource, &attempt, &request.spec(member.as_deref()))
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
        });
        rx.await.unwrap_or(Err(StoreError::Indeterminate(
            "acquire task ended without a reply",
        )))
    }

    async fn try_acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        member: Option<&str>,
        waited: Option<u64>,
    ) -> Result<(AcquireOutcome, Option<Contention>), Failure> {
        let result = if waited.is_some() {
            self.admitted(self.acquire_for_waiter(resource, attempt, request, member))
                .await?
        } else {
            self.admitted(
                self.store
                    .acquire_replicated(resource, attempt, &request.spec(member)),
            )
            .await?
        };
        let fallback = self.settings.retry_after_ms;
        let replication = result.as_ref().ok().and_then(|r| r.replication);
        match result.map(|r| r.value) {
            Ok(StoreAcquire::Acquired(record)) => Ok((
                AcquireOutcome::Acquired {
                    lease: Self::lease(resource, record, replication),
                    waited_ms: waited,
                },
                None,
            )),
            Ok(StoreAcquire::Replayed(record)) => Ok((
                AcquireOutcome::ReplayedSameOperation {
                    lease: Self::lease(resource, record, None),
                },
                None,
            )),
            Ok(StoreAcquire::OwnerOperationConflict { remaining_ms }) => Ok((
                AcquireOutcome::OwnerOperationConflict {
                    retry_after_ms: remaining_ms.filter(|ms| *ms > 0).unwrap_or(fallback),
                },
                None,
            )),
            // Refused for the queue without a place in it: nobody's expiry
            // says when to come back (the store's hint, when the head's
            // heartbeat lapses, is for waiters), so the fallback.
            Ok(StoreAcquire::Contended {
                why: Contention::Queued,
                ..
            }) if member.is_none() => Ok((
                AcquireOutcome::Contended {
                    retry_after_ms: fallback,
                    waited_ms: waited,
                    reason: Some(ContendedReason::Queued),
                },
                Some(Contention::Queued),
            )),
            Ok(StoreAcquire::Contended { remaining_ms, why }) => Ok((
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
            )),
            Ok(StoreAcquire::LimitMismatch { limit }) => {
                Ok((AcquireOutcome::LimitMismatch { limit }, None))
            }
            Err(err) => Err(self.failure(err, Some(attempt))),
        }
    }

    /// Acquires `resource` for `attempt`, waiting server-side up to
    /// `request.wait`.
    pub async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
    ) -> Tried {
        let started = Instant::now();
        let result = self
            .acquire_inner(resource, attempt, request, started)
            .await;
        self.record("acquire", resource, started, &result);
        if let Ok(AcquireOutcome::Contended { reason, .. }) = &result {
            self.meters.contended(match reason {
                None => "held",
                Some(ContendedReason::LockDelay) => "lock_delay",
                Some(ContendedReason::Queued) => "queued",
            });
        }
        result
    }

    async fn acquire_inner(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        started: Instant,
    ) -> Tried {
        let first = self
            .try_acquire(resource, attempt, request, None, None)
            .await;
        if request.wait.ms() == 0 {
            return first.map(|(outcome, _)| outcome);
        }
        let deadline =
            tokio::time::Instant::from_std(started) + Duration::from_millis(request.wait.ms());
        let waited = || Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        let contended = |retry_after_ms, waited_ms| AcquireOutcome::Contended {
            retry_after_ms,
            waited_ms,
            reason: None,
        };
        let mut retries = Retries::new();
        // An uncertain first look is tried again with the same attempt while
        // the deadline leaves room: a replay tells whether it applied.
        let mut first = first;
        let retry_after_ms = loop {
            match first {
                Ok((AcquireOutcome::Contended { retry_after_ms, .. }, _)) => {
                    retries.uncertain = false;
                    break retry_after_ms;
                }
                Ok((outcome, _)) => return Ok(self.settled_outcome(&retries, outcome, waited())),
                Err(failure) => {
                    if !self.pause(&mut retries, &failure, deadline, true).await {
                        return Err(self.settled_failure(&retries, failure, attempt));
                    }
                }
            }
            first = self
                .try_acquire(resource, attempt, request, None, waited())
                .await;
        };
        let Some(guard) = self.waiters.enter(&resource.tag()) else {
            return Err(self.settled_failure(&retries, self.overloaded(), attempt));
        };
        let queue = guard.resource();
        let mut place = Place::new(
            self,
            resource.clone(),
            request.shape.mode,
            guard.resource_shared(),
        );
        // Take a place in the fair queue, in the same order as this
        // instance's own FIFO turn, so both agree on who is next; neither
        // the lock nor the enter outlasts the deadline or shutdown.
        let entry = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => {
                return Ok(contended(retry_after_ms, waited()));
            }
            entry = queue.entry.lock() => entry,
            _ = tokio::time::sleep_until(deadline) => {
                return self
                    .last_look(resource, attempt, request, &mut place, &mut retries, waited())
                    .await;
            }
        };
        let mut enter_retries = Retries::new();
        loop {
            let failure = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    return Ok(contended(retry_after_ms, waited()));
                }
                entered = place.enter(self, false) => match entered {
                    Ok(()) => break,
                    Err(failure) => failure,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    drop(entry);
                    return self
                        .last_look(resource, attempt, request, &mut place, &mut retries, waited())
                        .await;
                }
            };
            if !self
                .pause(&mut enter_retries, &failure, deadline, false)
                .await
            {
                drop(entry);
                return self
                    .last_look(
                        resource,
                        attempt,
                        request,
                        &mut place,
                        &mut retries,
                        waited(),
                    )
                    .await;
            }
        }
        let mut turn = std::pin::pin!(queue.turn.lock());
        let mut held_turn = tokio::select! {
            biased;
            turn = &mut turn => Some(turn),
            () = std::future::ready(()) => None,
        };
        drop(entry);
        if held_turn.is_none() {
            held_turn = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    return Ok(contended(retry_after_ms, waited()));
                }
                turn = &mut turn => Some(turn),
                _ = tokio::time::sleep_until(deadline) => None,
            };
        }
        if held_turn.is_none() {
            // Never had the turn: one last look, then give up.
            return self
                .last_look(
                    resource,
                    attempt,
                    request,
                    &mut place,
                    &mut retries,
                    waited(),
                )
                .await;
        }
        let mut holder_ttl;
        let mut beat = tokio::time::interval(QUEUE_BEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Register for the wake-up before looking, so a release between
            // the look and the sleep is not missed.
            let woken = queue.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self
                .try_acquire(resource, attempt, request, place.member(), waited())
                .await
            {
                Ok((AcquireOutcome::Contended { retry_after_ms, .. }, why)) => {
                    retries.uncertain = false;
                    holder_ttl = retry_after_ms;
                    if why == Some(Contention::Requeue) {
                        // This instance missed its heartbeats (frozen?):
                        // its place is gone; take a new one, ahead of this
                        // instance's other waiters (they wait for this turn).
                        if let Err(failure) = place.enter(self, true).await {
                            if !self.pause(&mut retries, &failure, deadline, false).await {
                                return self
                                    .last_look(
                                        resource,
                                        attempt,
                                        request,
                                        &mut place,
                                        &mut retries,
                                        waited(),
                                    )
                                    .await;
                            }
                        }
                        continue;
                    }
                }
                Ok((outcome, _)) => {
                    if matches!(
                        outcome,
                        AcquireOutcome::Acquired { .. }
                            | AcquireOutcome::ReplayedSameOperation { .. }
                    ) {
                        place.taken();
                    }
                    return Ok(self.settled_outcome(&retries, outcome, waited()));
                }
                Err(failure) => {
                    // Uncertain or refused: the same attempt again, while
                    // the deadline leaves room to find out.
                    if self.pause(&mut retries, &failure, deadline, true).await {
                        continue;
                    }
                    return Err(self.settled_failure(&retries, failure, attempt));
                }
            }
            // +1 ms: PTTL is truncated to whole milliseconds.
            let expiry = tokio::time::Instant::now() + Duration::from_millis(holder_ttl + 1);
            loop {
                tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => {
                        return Ok(contended(holder_ttl, waited()));
                    }
                    _ = &mut woken => break,
                    _ = tokio::time::sleep_until(expiry.min(deadline)) => break,
                    _ = beat.tick() => {
                        // One heartbeat per instance and resource keeps all
                        // of this instance's waiters in the queue.
                        let roster = queue.roster();
                        let _ = self.store.queue(resource, QueueOp::Beat(&roster)).await;
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                // One last look at the deadline (it may have been freed just now).
                return self
                    .last_look(
                        resource,
                        attempt,
                        request,
                        &mut place,
                        &mut retries,
                        waited(),
                    )
                    .await;
            }
        }
    }

    /// Waits before trying a failed store call of a wait again; false when
    /// the failure is not worth a retry (shed by admission) or the deadline
    /// or shutdown leaves no room. `acquiring`: the call was an acquire,
    /// which may have applied when its reply was uncertain.
    async fn pause(
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
    /// whenever one of its acquires may have applied unseen.
    fn settled_failure(&self, retries: &Retries, failure: Failure, attempt: &Attempt) -> Failure {
        if retries.uncertain {
            Failure::Indeterminate {
                operation_id: attempt.operation_id.clone(),
            }
        } else {
            failure
        }
    }

    /// A replay after an uncertain try of the same wait is that try's
    /// acquisition: the caller sent one request and it acquired.
    fn settled_outcome(
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

    /// The look a waiter takes at its deadline; its place in the queue
    /// goes whatever the answer.
    async fn last_look(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        place: &mut Place,
        retries: &mut Retries,
        waited: Option<u64>,
    ) -> Tried {
        let result = self
            .try_acquire(resource, attempt, request, place.member(), waited)
            .await
            .map(|(outcome, _)| outcome);
        match result {
            Ok(outcome) => {
                if matches!(
                    outcome,
                    AcquireOutcome::Acquired { .. } | AcquireOutcome::ReplayedSameOperation { .. }
                ) {
                    place.taken();
                }
                if !matches!(outcome, AcquireOutcome::Contended { .. }) {
                    return Ok(self.settled_outcome(retries, outcome, waited));
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

/// Takes back what a waiting acquire got after its caller had gone, unless
/// someone has been told since that it is held (a replay of the same
/// attempt claimed it, or it was renewed): docs/design.md §14. Tried a few times; a
/// permit left behind ends with its TTL.
async fn release_abandoned(store: &Store, resource: &ResourceId, attempt: &Attempt) {
    let mut pause = RETRY_FIRST;
    for _ in 0..4 {
        match store.release_abandoned(resource, attempt).await {
            Ok(true) => {
                tracing::info!(
                    operation_id = %attempt.operation_id,
                    "waiter left while its acquire was in flight; released the lease it got"
                );
                return;
            }
            Ok(false) => {
                tracing::info!(
                    operation_id = %attempt.operation_id,
                    "waiter left while its acquire was in flight; kept the lease, a retry claimed it"
                );
                return;
            }
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
    }
    tracing::warn!(
        operation_id = %attempt.operation_id,
        "could not release what a departed waiter acquired; it ends with its TTL"
    );
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
                holders: u32::try_from(permits.len()).unwrap_or(u32::MAX),
                permits: permits.into_iter().map(PermitView::from).collect(),
                lock_delay_ms,
            }
        }
    }
}

impl From<StoreLease> for PermitView {
    fn from(p: StoreLease) -> Self {
        PermitView {
            holder: p.holder,
            fencing_token: p.fencing_token,
            remaining_ms: p.remaining_ms,
            ttl_ms: p.ttl_ms,
            acquired_at: p.acquired_at,
            renewed_at: p.renewed_at,
        }
    }
}
