//! Acquiring, with a server-side wait: the first look, a place in the
//! fair queue, the FIFO turn, sleeps until a release, the holder's expiry,
//! the deadline or shutdown; uncertain store calls tried again with the
//! same attempt while the deadline leaves room (docs/design.md §14).

use super::core::*;
use super::place::*;
use std::time::{Duration, Instant};

use crate::domain::{
    AcquireOutcome, Attempt, ContendedReason, Failure, HolderLabel, LeaseShape, ResourceId,
    StoreTime, Ttl, WaitMs,
};
use crate::notify::Grant;
use crate::store::{AcquireSpec, Ask, Contention, QueueOp, StoreAcquire, StoreError, StoreLease};

/// What a store call looks like to the wait loop.
pub(super) type Tried = Result<AcquireOutcome, Failure>;

/// How often the instance that has waiters for a resource tells the store
/// they are alive (their entries lapse 2 s after the last beat).
pub(super) const QUEUE_BEAT: Duration = Duration::from_millis(500);

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
    /// `maxHoldMs`: no renewal reaches past the acquisition plus this; a
    /// TTL above it is granted it.
    pub max_hold_ms: Option<u64>,
}

impl AcquireRequest {
    /// A plain lease for `ttl`, no wait, no label.
    pub fn plain(ttl: Ttl) -> Self {
        Self {
            ttl,
            wait: WaitMs::default(),
            holder: None,
            shape: LeaseShape::default(),
            max_hold_ms: None,
        }
    }

    fn spec<'a>(&'a self, queued_as: Option<&'a str>) -> AcquireSpec<'a> {
        AcquireSpec {
            ttl: self.ttl.at_most(self.max_hold_ms),
            holder: self.holder.as_ref(),
            shape: self.shape,
            queued_as,
            max_hold_ms: self.max_hold_ms,
        }
    }
}

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
        member: Option<&str>,
    ) -> Result<crate::store::Replicated<StoreAcquire>, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (store, resource, attempt) = (self.store.clone(), resource.clone(), attempt.clone());
        let (request, member) = (request.clone(), member.map(str::to_owned));
        let clean_up = self.settings.release_abandoned;
        let task = async move {
            let result = store
                .acquire(&resource, &attempt, &request.spec(member.as_deref()))
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
        member: Option<&str>,
        waited: Option<u64>,
    ) -> Result<(AcquireOutcome, Option<Contention>), Failure> {
        let result = if waited.is_some() {
            self.admitted(self.acquire_for_waiter(resource, attempt, request, member))
                .await?
        } else {
            self.admitted(self.store.acquire(resource, attempt, &request.spec(member)))
                .await?
        };
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
        if request.wait.ms() > 0 {
            // Answered at the first look: no `waitedMs`, nothing waited.
            let waited = match &result {
                Ok(AcquireOutcome::Acquired { waited_ms, .. }) => Some(("acquired", waited_ms)),
                Ok(AcquireOutcome::Contended { waited_ms, .. }) => Some(("contended", waited_ms)),
                _ => None,
            };
            if let Some((outcome, waited_ms)) = waited {
                let secs = waited_ms.unwrap_or(0) as f64 / 1000.0;
                self.meters.waited(outcome, resource.purpose.as_str(), secs);
            }
        }
        result
    }

    pub(super) async fn acquire_inner(
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
        // The look a wait takes when it gives up (deadline, no turn, a store
        // that stays unreachable): its place goes whatever the answer.
        macro_rules! last_look {
            () => {
                self.last_look(
                    resource,
                    attempt,
                    request,
                    &mut place,
                    &mut retries,
                    waited(),
                )
                .await
            };
        }
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
                return last_look!();
            }
        };
        // What a release may grant this waiter in its own store call
        // (docs/design.md §12, "Hand-off").
        let ask = Ask {
            attempt,
            spec: request.spec(None),
        };
        let mut enter_retries = Retries::new();
        // Entered while a plain lease's record lives this long: no look
        // before a release, a grant or its expiry (the look could only say
        // contended). Any other shape looks at once, as before: its record
        // outlives its soonest expiry, and a lock-delay is seen by a look.
        let plain = request.shape.is_plain_undelayed();
        let skip = |held_ms: Option<u64>, retry_after_ms: u64| {
            held_ms.filter(|_| plain).map(|ms| ms.min(retry_after_ms))
        };
        let mut held_ms = loop {
            let failure = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    return Ok(contended(retry_after_ms, waited()));
                }
                entered = place.enter(self, false, Some(ask)) => match entered {
                    Ok(held_ms) => break skip(held_ms, retry_after_ms),
                    Err(failure) => failure,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    drop(entry);
                    return last_look!();
                }
            };
            if !self
                .pause(&mut enter_retries, &failure, deadline, false)
                .await
            {
                drop(entry);
                return last_look!();
            }
        };
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
                grant = place.granted() => {
                    place.taken();
                    return Ok(Self::granted(resource, request, grant, waited()));
                }
                turn = &mut turn => Some(turn),
                _ = tokio::time::sleep_until(deadline) => None,
            };
        }
        if held_turn.is_none() {
            // Never had the turn: one last look, then give up.
            return last_look!();
        }
        let mut holder_ttl;
        loop {
            // Register for the wake-up before looking, so a release between
            // the look and the sleep is not missed.
            let woken = queue.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let tried = match held_ms.take() {
                // Entered behind a live record: a release wakes or grants.
                Some(ms) => Ok((contended(ms, None), None)),
                None => {
                    self.try_acquire(resource, attempt, request, place.member(), waited())
                        .await
                }
            };
            match tried {
                Ok((AcquireOutcome::Contended { retry_after_ms, .. }, why)) => {
                    retries.uncertain = false;
                    holder_ttl = retry_after_ms;
                    if why == Some(Contention::Requeue) {
                        // This instance missed its heartbeats (frozen?):
                        // its place is gone; take a new one, ahead of this
                        // instance's other waiters (they wait for this turn).
                        match place.enter(self, true, Some(ask)).await {
                            Ok(ms) => held_ms = skip(ms, holder_ttl),
                            Err(failure) => {
                                if !self.pause(&mut retries, &failure, deadline, false).await {
                                    return last_look!();
                                }
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
            let mut expiry = tokio::time::Instant::now() + Duration::from_millis(holder_ttl + 1);
            loop {
                tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => {
                        return Ok(contended(holder_ttl, waited()));
                    }
                    grant = place.granted() => {
                        place.taken();
                        return Ok(Self::granted(resource, request, grant, waited()));
                    }
                    _ = &mut woken => break,
                    // An event said when a look is due at the latest (a new
                    // plain holder's TTL, the queue head's heartbeat lapse).
                    _ = queue.rebound.notified() => {
                        if let Some(bound) = queue.take_bound() {
                            expiry = expiry.min(bound);
                        }
                    }
                    _ = tokio::time::sleep_until(expiry.min(deadline)) => break,
                    // One heartbeat per instance and resource keeps all of
                    // this instance's waiters in the queue, QUEUE_BEAT after
                    // the last one or the last enter (which beats too): a
                    // new turn holder does not beat at once.
                    _ = tokio::time::sleep_until(queue.last_beat() + QUEUE_BEAT) => {
                        // Under the entry lock: no place of this instance
                        // enters between the roster and the beat, which
                        // would drop an entry it has not heard of.
                        let _entering = queue.entry.lock().await;
                        let roster = queue.roster();
                        queue.beaten();
                        let _ = self.store.queue(resource, QueueOp::Beat(&roster)).await;
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                // One last look at the deadline (it may have been freed just now).
                return last_look!();
            }
        }
    }

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
    /// whenever one of its acquires may have applied unseen.
    pub(super) fn settled_failure(
        &self,
        retries: &Retries,
        failure: Failure,
        attempt: &Attempt,
    ) -> Failure {
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
        let record = StoreLease::acquired(&request.spec(None), grant.fencing_token, at);
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
}
