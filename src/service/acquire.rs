//! Acquiring, with a server-side wait: the first look, a place in the
//! fair queue, the FIFO turn, sleeps until a release, the holder's expiry,
//! the deadline or shutdown; uncertain store calls tried again with the
//! same attempt while the deadline leaves room (docs/design.md §14).

use super::core::*;
use super::place::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::{
    AcquireOutcome, Attempt, ContendedReason, Failure, HolderLabel, LeaseShape, ResourceId, Ttl,
    WaitMs,
};
use crate::store::{AcquireSpec, Ask, Contention, InQueue, Moved};

/// What a store call looks like to the wait loop.
pub(super) type Tried = Result<AcquireOutcome, Failure>;

/// A look's outcome, why it was contended, and what it did to the entry.
pub(super) type Looked = (AcquireOutcome, Option<Contention>, Moved);

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
    /// The session the lease is taken on (docs/design.md §18): its permit
    /// carries the id, which inspect and list show.
    pub session: Option<crate::domain::SessionId>,
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
            session: None,
        }
    }

    pub(super) fn spec<'a>(&'a self, queue: InQueue<&'a str>) -> AcquireSpec<'a> {
        AcquireSpec {
            ttl: self.ttl.at_most(self.max_hold_ms),
            holder: self.holder.as_ref(),
            shape: self.shape,
            queue,
            max_hold_ms: self.max_hold_ms,
            session: self.session.as_ref(),
        }
    }
}

impl LeaseService {
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

    /// One look, or (with a wait) [`Self::acquire_waiting`] behind a box.
    ///
    /// The box keeps the common request's future small: a future is as big
    /// as its largest state, the wait's is several kilobytes, and every
    /// future is moved (copied whole) on its way into the HTTP stack's
    /// boxes; unboxed, that copy was an eighth of an uncontended acquire's
    /// instructions (docs/perf-log/2026-12-05.md, "the request path again").
    pub(super) async fn acquire_inner(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        started: Instant,
    ) -> Tried {
        if request.wait.ms() == 0 {
            return self
                .try_acquire(resource, attempt, request, InQueue::No, None)
                .await
                .map(|(outcome, ..)| outcome);
        }
        Box::pin(self.acquire_waiting(resource, attempt, request, started)).await
    }

    /// An acquire with a wait: its first look (entering the queue when it
    /// can), then the wait.
    async fn acquire_waiting(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        request: &AcquireRequest,
        started: Instant,
    ) -> Tried {
        // A waiter, on a store that can, takes its place in the fair queue
        // with its first look when that finds no permit for it: one store
        // call (docs/design.md §12). The place is made and the entry lock
        // taken before that look, as before any enter, when the lock is
        // free; else (another waiter of this instance is entering) it
        // looks first and enters after.
        let mut early = None;
        if self.store.enters_when_held() && self.waiters.has_room() {
            let guard = self.waiters.register(&resource.tag());
            if let Ok(entry) = Arc::clone(&guard.resource().entry).try_lock_owned() {
                let queue = guard.resource_shared();
                let mut place = Place::new(self, resource.clone(), request.shape.mode, queue);
                let ask = Ask {
                    attempt,
                    spec: request.spec(InQueue::No),
                };
                let member = place.prepare(self, Some(ask));
                early = Some((guard, place, entry, member));
            }
        }
        let queue = match &early {
            Some((.., member)) => InQueue::Entering(member.as_str()),
            None => InQueue::No,
        };
        let first = self
            .try_acquire(resource, attempt, request, queue, None)
            .await;
        let deadline =
            tokio::time::Instant::from_std(started) + Duration::from_millis(request.wait.ms());
        let waited = || Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        let contended = |retry_after_ms, waited_ms| AcquireOutcome::Contended {
            retry_after_ms,
            waited_ms,
            reason: None,
        };
        let mut retries = Retries::new();
        let plain = request.shape.is_plain_undelayed();
        // Whether an enter leaves an ask (a plain waiter, Redis without
        // replica acks): a release may grant it from then on.
        let asks = plain && self.store.enters_when_held();
        // A look that failed may have entered (or acquired) unseen.
        let mut unsure = false;
        // An uncertain first look is tried again with the same attempt while
        // the deadline leaves room: a replay tells whether it applied.
        let mut first = first;
        let (retry_after_ms, why, entered) = loop {
            match first {
                Ok((AcquireOutcome::Contended { retry_after_ms, .. }, why, moved)) => {
                    retries.uncertain = false;
                    break (retry_after_ms, why, moved == Moved::Entered);
                }
                Ok((outcome, ..)) => {
                    // Nothing to leave: never entered, or (an acquisition)
                    // no entry is left: one lapsed before this look, or a
                    // grant took it out.
                    let acquired = matches!(
                        outcome,
                        AcquireOutcome::Acquired { .. }
                            | AcquireOutcome::ReplayedSameOperation { .. }
                    );
                    if let (Some((_, place, ..)), true) = (early.as_mut(), acquired || !unsure) {
                        place.taken();
                    }
                    return Ok(self.settled_outcome(&retries, outcome, waited()));
                }
                Err(failure) => {
                    unsure = true;
                    // An entering look that may have applied may have left
                    // an ask, which a release may grant.
                    if matches!(failure, Failure::Indeterminate { .. }) && early.is_some() {
                        retries.asked |= asks;
                    }
                    if !self.pause(&mut retries, &failure, deadline, true).await {
                        return Err(self.settled_failure(&retries, failure, attempt));
                    }
                }
            }
            first = self
                .try_acquire(resource, attempt, request, queue, waited())
                .await;
        };
        let (mut guard, mut place, entry) = match early {
            Some((guard, mut place, entry, _)) => {
                if !entered && !unsure {
                    // Not entered (a refused write): the enter below.
                    place.taken();
                }
                (guard, place, Some(entry))
            }
            None => {
                let guard = self.waiters.register(&resource.tag());
                let queue = guard.resource_shared();
                let place = Place::new(self, resource.clone(), request.shape.mode, queue);
                (guard, place, None)
            }
        };
        if entered {
            // A plain waiter's entry came with an ask.
            retries.asked |= asks;
        }
        if !guard.admit() {
            return Err(self.settled_failure(&retries, self.overloaded(), attempt));
        }
        let queue = guard.resource();
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
        // Entered while a plain lease's record lives this long: no look
        // before a release, a grant or its expiry (the look could only say
        // contended). Any other shape looks at once, as before: its record
        // outlives its soonest expiry, and a lock-delay is seen by a look.
        let skip = |held_ms: Option<u64>, retry_after_ms: u64| {
            held_ms.filter(|_| plain).map(|ms| ms.min(retry_after_ms))
        };
        // What a release may grant this waiter in its own store call
        // (docs/design.md §12, "Hand-off").
        let ask = Ask {
            attempt,
            spec: request.spec(InQueue::No),
        };
        let mut held_ms;
        let entry = if entered {
            // The first look entered (and beat for this instance) in the
            // run that found no permit: nothing to look at before a
            // release, a grant, an event or the retry it named. (Behind
            // waiters, a counting or shared one looks at once, as after an
            // enter: a free permit may be its now.)
            queue.beaten();
            held_ms = Some(retry_after_ms).filter(|_| plain || why != Some(Contention::Queued));
            entry
        } else {
            // Take a place in the fair queue, in the same order as this
            // instance's own FIFO turn, so both agree on who is next;
            // neither the lock nor the enter outlasts the deadline or
            // shutdown.
            let entry = match entry {
                Some(entry) => entry,
                None => tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => {
                        return Ok(contended(retry_after_ms, waited()));
                    }
                    entry = Arc::clone(&queue.entry).lock_owned() => entry,
                    _ = tokio::time::sleep_until(deadline) => {
                        return last_look!();
                    }
                },
            };
            let mut enter_retries = Retries::new();
            loop {
                let failure = tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => {
                        return Ok(contended(retry_after_ms, waited()));
                    }
                    entered = place.enter(self, false, Some(ask)) => match entered {
                        Ok(ms) => {
                            retries.asked |= asks;
                            held_ms = skip(ms, retry_after_ms);
                            break;
                        }
                        Err(failure) => {
                            if matches!(failure, Failure::Indeterminate { .. }) {
                                retries.asked |= asks;
                            }
                            failure
                        }
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
            }
            Some(entry)
        };
        let mut turn = std::pin::pin!(queue.turn.lock());
        let mut held_turn = tokio::select! {
            biased;
            turn = &mut turn => Some(turn),
            () = std::future::ready(()) => None,
        };
        drop(entry);
        while held_turn.is_none() {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    return Ok(contended(retry_after_ms, waited()));
                }
                handed = place.granted() => match handed {
                    Handed::Grant(grant) => {
                        place.taken();
                        return Ok(Self::granted(resource, request, grant, waited()));
                    }
                    Handed::Look => {
                        let looked = self
                            .sibling_look(resource, attempt, request, &mut place, &mut retries, waited())
                            .await;
                        if let Some(answer) = looked {
                            return answer;
                        }
                    }
                },
                turn = &mut turn => held_turn = Some(turn),
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        if held_turn.is_none() {
            // Never had the turn: one last look, then give up.
            return last_look!();
        }
        let mut holder_ttl;
        let mut beat_retry = tokio::time::Instant::now();
        loop {
            // Register for the wake-up before looking, so a release between
            // the look and the sleep is not missed.
            let woken = queue.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let tried = match held_ms.take() {
                // Entered behind a live record: a release wakes or grants.
                Some(ms) => Ok((contended(ms, None), None, Moved::Stayed)),
                None => {
                    let queue = InQueue::member(place.member());
                    self.try_acquire(resource, attempt, request, queue, waited())
                        .await
                }
            };
            match tried {
                Ok((AcquireOutcome::Contended { retry_after_ms, .. }, why, _)) => {
                    retries.uncertain = false;
                    holder_ttl = retry_after_ms;
                    if why == Some(Contention::Requeue) {
                        // This instance missed its heartbeats (frozen?):
                        // its place is gone; take a new one, ahead of this
                        // instance's other waiters (they wait for this turn).
                        match place.enter(self, true, Some(ask)).await {
                            Ok(ms) => {
                                retries.asked |= asks;
                                held_ms = skip(ms, holder_ttl);
                            }
                            Err(failure) => {
                                if matches!(failure, Failure::Indeterminate { .. }) {
                                    retries.asked |= asks;
                                }
                                if !self.pause(&mut retries, &failure, deadline, false).await {
                                    return last_look!();
                                }
                            }
                        }
                        continue;
                    }
                }
                Ok((outcome, ..)) => {
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
                    handed = place.granted() => match handed {
                        Handed::Grant(grant) => {
                            place.taken();
                            return Ok(Self::granted(resource, request, grant, waited()));
                        }
                        // Another place of this attempt is gone (it may
                        // have acquired): the look below replays it.
                        Handed::Look => break,
                    },
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
                    // Sent beside the wait (a slow store holds up no wake,
                    // grant, deadline or shutdown); while an enter or the
                    // last beat is still out, tried again shortly.
                    _ = tokio::time::sleep_until((queue.last_beat() + QUEUE_BEAT).max(beat_retry)) => {
                        if !self.beat(resource, queue) {
                            beat_retry = tokio::time::Instant::now() + RETRY_FIRST;
                        }
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                // One last look at the deadline (it may have been freed just now).
                return last_look!();
            }
        }
    }
}
