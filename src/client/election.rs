//! [`Election`] and [`Observer`](super::Observer): leader election on one lease, after
//! client-go's `leaderelection` and etcd's `concurrency.Election`.
//!
//! The recipe (docs/design.md §10) in leasehold's own verbs:
//!
//! | election | lease verb |
//! | --- | --- |
//! | campaign | acquire with `waitMs` and `holder` = the candidate's label, again and again |
//! | leader | inspect's `holder` (and `fencingToken`) |
//! | observe | inspect long-poll, `?changedSince=<version>&waitMs=N` |
//! | proclaim | renew with a new `holder` (the fencing token stays) |
//! | resign | release |
//!
//! Events reach the caller in order on one bounded [`mpsc`] channel,
//! handed out with the [`Election`] (or [`Observer`](super::Observer)). A full channel makes
//! the campaign wait for the reader: read it promptly, or leadership starts
//! (and its work) are delayed. Renewal never waits for the reader: a
//! [`Watchdog`] renews in its own task.
//!
//! Safety comes from the lease, not from the events: the
//! [`Leadership::token`] is cancelled before the lease's local validity
//! ends, and every effect the leader has should present
//! [`Leadership::fencing_token`] to a target that rejects older tokens.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;

use super::acquire::{Acquire, AcquireOptions};
use super::api::Client;
use super::error::Error;
use super::handle::LeaseHandle;
use super::leadership::{ElectionError, ElectionEvent, Leadership, StopReason};
use super::observe::{follow, pause, Waited};
use super::observe::{ElectionSettings, Leader};
use super::watchdog::Watchdog;
use crate::domain::{
    Attempt, HolderLabel, LeaseShape, OperationId, OwnerToken, RenewOutcome, ResourceId,
};

/// The pause before retrying an acquire whose answer was lost, with the
/// same attempt (so a replay answers `replayed_same_operation`).
const SAME_ATTEMPT_PAUSE: Duration = Duration::from_millis(50);

/// Milliseconds of a duration, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A candidate for leadership of one resource.
///
/// [`campaign`](Self::campaign) runs the election until cancelled; events
/// arrive on the receiver [`new`](Self::new) hands out. Clones share the
/// candidate (so [`resign`](Self::resign) and [`proclaim`](Self::proclaim)
/// can be called while a clone campaigns).
#[derive(Debug, Clone)]
pub struct Election {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    resource: ResourceId,
    settings: ElectionSettings,
    holder: Mutex<HolderLabel>,
    events: mpsc::Sender<ElectionEvent>,
    /// The current term, while leading.
    term: Mutex<Option<Term>>,
    /// The running campaign, if any: its number and the token that stops
    /// it (`resign` cancels it). Set and cleared inside the watch's own lock.
    running: watch::Sender<Option<(u64, CancellationToken)>>,
    /// Numbers campaigns.
    campaigns: AtomicU64,
    /// Counts attempts, for their operation ids.
    rounds: AtomicU64,
}

#[derive(Debug, Clone)]
struct Term {
    attempt: Attempt,
    token: CancellationToken,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the campaign loop does after an acquire answer that did not make
/// it leader. Pure, so every case is unit-tested.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Next {
    /// Ask again after this pause, with the same attempt.
    Retry(Duration),
    /// Ask again after this pause, with a fresh attempt.
    FreshAttempt(Duration),
    /// Ask again after this pause, with the same attempt; the previous one
    /// may have taken the lease.
    SameAttempt(Duration),
    /// Give up: the service refuses the request as sent.
    Fail,
}

fn after_acquire(settings: &ElectionSettings, answer: &Result<Acquire, Error>) -> Next {
    match answer {
        // Still held by someone else: when the service waited (most of)
        // our wait, ask again at once; when it answered early (no wait
        // asked, or a shorter one granted), pause for the holder's hint.
        Ok(Acquire::Contended {
            retry_after_ms,
            waited_ms,
            ..
        }) => {
            let waited = Duration::from_millis(waited_ms.unwrap_or(0));
            if !settings.wait.is_zero() && waited >= settings.wait / 2 {
                Next::Retry(Duration::ZERO)
            } else {
                Next::Retry(Duration::from_millis(*retry_after_ms).min(settings.retry_period))
            }
        }
        // Our owner token holds it for another operation: cannot happen
        // with a fresh token per term, but a new attempt gets out of it.
        Ok(Acquire::OwnerOperationConflict { .. }) => Next::FreshAttempt(settings.retry_period),
        // Someone holds the resource as a counting lease: no term until
        // those holders are gone. Ask again now and then.
        Ok(Acquire::LimitMismatch { .. }) => Next::Retry(settings.retry_period),
        // A held lease is handled by the caller; here for completeness.
        Ok(Acquire::Acquired { .. } | Acquire::ReplayedSameOperation { .. }) => {
            Next::Retry(Duration::ZERO)
        }
        Err(e @ (Error::Unavailable { .. } | Error::Overloaded { .. })) => {
            Next::Retry(e.retry_after().unwrap_or(settings.retry_period))
        }
        Err(Error::Indeterminate { .. }) => {
            Next::SameAttempt(SAME_ATTEMPT_PAUSE.min(settings.retry_period))
        }
        Err(Error::Rejected(_) | Error::Refused(_)) => Next::Fail,
    }
}

/// Clears `running` however the campaign ends (abort included).
struct Running<'a>(&'a Inner);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        *lock(&self.0.term) = None;
        self.0.running.send_replace(None);
    }
}

impl Election {
    /// A candidate named `holder` for `resource`, and the receiver of its
    /// events. Nothing is sent until [`campaign`](Self::campaign).
    pub fn new(
        client: Client,
        resource: ResourceId,
        holder: HolderLabel,
        settings: ElectionSettings,
    ) -> (Self, mpsc::Receiver<ElectionEvent>) {
        let (events, rx) = mpsc::channel(settings.event_capacity.max(1));
        let election = Self {
            inner: Arc::new(Inner {
                client,
                resource,
                settings,
                holder: Mutex::new(holder),
                events,
                term: Mutex::new(None),
                running: watch::channel(None).0,
                campaigns: AtomicU64::new(0),
                rounds: AtomicU64::new(0),
            }),
        };
        (election, rx)
    }

    /// The label this candidate campaigns with now.
    pub fn holder(&self) -> HolderLabel {
        lock(&self.inner.holder).clone()
    }

    /// Whether this candidate leads now.
    pub fn is_leader(&self) -> bool {
        lock(&self.inner.term)
            .as_ref()
            .is_some_and(|t| !t.token.is_cancelled())
    }

    /// Who leads now, by one plain inspect.
    pub async fn leader(&self) -> Result<Leader, Error> {
        let inspection = self
            .inner
            .client
            .inspect(&self.inner.resource, None)
            .await?;
        Ok(Leader::of(&inspection))
    }

    /// Runs the election until `cancel` fires (or [`resign`](Self::resign)
    /// is called): campaigns with acquire + `waitMs` + `holder`; when it
    /// wins, sends [`ElectionEvent::StartedLeading`], keeps the lease with
    /// a [`Watchdog`], and when the term ends sends
    /// [`ElectionEvent::StoppedLeading`]. A term that ends by itself (lost,
    /// renew failed, validity running out) is followed by a new campaign.
    /// Meanwhile every change of leader is sent as
    /// [`ElectionEvent::NewLeader`].
    ///
    /// On cancel it releases the lease (also one whose acquire was in
    /// flight) and returns `Ok(())`. It returns an error only when the
    /// service rejects the requests as sent (bad TTL or wait for its
    /// bounds, authentication), or when already campaigning.
    ///
    /// Dropping (aborting) the future stops renewing at once and releases
    /// nothing: the others take over when the lease expires.
    pub async fn campaign(&self, cancel: CancellationToken) -> Result<(), ElectionError> {
        let inner = &*self.inner;
        // Fired by `cancel`, by `resign`, or when the lead loop ends (which
        // stops the follower).
        let stop = cancel.child_token();
        let number = inner.campaigns.fetch_add(1, Ordering::Relaxed);
        let started = inner.running.send_if_modified(|running| {
            if running.is_some() {
                return false;
            }
            *running = Some((number, stop.clone()));
            true
        });
        if !started {
            return Err(ElectionError::AlreadyCampaigning);
        }
        let _running = Running(inner);
        let lead = async {
            let result = self.lead_loop(&stop).await;
            stop.cancel();
            result
        };
        let follow = async {
            if inner.settings.follow {
                follow(
                    &inner.client,
                    &inner.resource,
                    &inner.settings,
                    &stop,
                    &inner.events,
                    ElectionEvent::NewLeader,
                )
                .await;
            }
        };
        let (result, ()) = tokio::join!(lead, follow);
        result
    }

    /// Ends a running campaign as cancelling it would: the term's token is
    /// cancelled, the lease released, `StoppedLeading` sent, and
    /// [`campaign`](Self::campaign) returns. Waits until it has. Without a
    /// running campaign, returns at once. A later `campaign` starts afresh.
    pub async fn resign(&self) {
        let mut running = self.inner.running.subscribe();
        let Some((number, stop)) = running.borrow_and_update().clone() else {
            return;
        };
        stop.cancel();
        // Until that campaign is over (a later one may have started). An
        // error means the election is gone, and so is its campaign.
        let _ = running
            .wait_for(|running| running.as_ref().is_none_or(|(n, _)| *n != number))
            .await;
    }

    /// Changes the label: renews the lease with `holder` = `new_label` (the
    /// fencing token stays; observers see a new leader label). Later
    /// campaigns use it too. [`ElectionError::NotLeader`] when not leading
    /// or when the service says the lease is gone; a failure of the renew
    /// itself comes back as [`ElectionError::Client`] (the label is then
    /// not known to have changed).
    pub async fn proclaim(&self, new_label: HolderLabel) -> Result<(), ElectionError> {
        let term = lock(&self.inner.term).clone();
        let Some(term) = term.filter(|t| !t.token.is_cancelled()) else {
            return Err(ElectionError::NotLeader);
        };
        let outcome = self
            .inner
            .client
            .renew_with(
                &self.inner.resource,
                &term.attempt,
                self.inner.settings.ttl,
                Some(&new_label),
            )
            .await?;
        match outcome {
            RenewOutcome::Renewed { .. } => {
                *lock(&self.inner.holder) = new_label;
                Ok(())
            }
            RenewOutcome::Lost { .. } => Err(ElectionError::NotLeader),
        }
    }

    fn new_attempt(&self) -> Result<Attempt, ElectionError> {
        let n = self.inner.rounds.fetch_add(1, Ordering::Relaxed);
        let owner_token = OwnerToken::generate().map_err(|_| ElectionError::Random)?;
        let operation_id =
            OperationId::parse(&format!("campaign-{n}")).map_err(|_| ElectionError::Random)?;
        Ok(Attempt {
            owner_token,
            operation_id,
        })
    }

    async fn emit(&self, event: ElectionEvent) {
        // Nobody listening is fine: the campaign goes on.
        let _ = self.inner.events.send(event).await;
    }

    /// Campaign, lead, and campaign again, until `stop`.
    async fn lead_loop(&self, stop: &CancellationToken) -> Result<(), ElectionError> {
        loop {
            let Some((attempt, handle)) = self.win(stop).await? else {
                return Ok(());
            };
            if self.lead(stop, attempt, handle).await == StopReason::Resigned {
                return Ok(());
            }
        }
    }

    /// Acquires until it holds the lease (`Some`) or `stop` fires (`None`,
    /// after releasing whatever an acquire in flight may have taken).
    async fn win(
        &self,
        stop: &CancellationToken,
    ) -> Result<Option<(Attempt, LeaseHandle)>, ElectionError> {
        let inner = &*self.inner;
        let mut attempt = self.new_attempt()?;
        // Whether an acquire with `attempt` may have taken the lease
        // without our knowing it.
        let mut may_hold = false;
        loop {
            let options = AcquireOptions {
                ttl: inner.settings.ttl,
                wait: inner.settings.wait,
                holder: Some(self.holder()),
                shape: LeaseShape {
                    lock_delay_ms: millis(inner.settings.lock_delay),
                    ..LeaseShape::default()
                },
                max_hold: None,
            };
            let answer = tokio::select! {
                biased;
                _ = stop.cancelled() => {
                    // The acquire in flight is dropped; it may have
                    // acquired just before. Release with its attempt.
                    self.clean_up(&attempt).await;
                    return Ok(None);
                }
                answer = inner.client.acquire_with(&inner.resource, &attempt, &options) => answer,
            };
            let next = after_acquire(&inner.settings, &answer);
            match answer {
                Ok(
                    Acquire::Acquired { handle, .. } | Acquire::ReplayedSameOperation { handle },
                ) => {
                    return Ok(Some((attempt, handle)));
                }
                // Someone else holds it: not us.
                Ok(Acquire::Contended { .. } | Acquire::LimitMismatch { .. }) => may_hold = false,
                Ok(Acquire::OwnerOperationConflict { .. }) => {}
                Err(Error::Indeterminate { .. }) => may_hold = true,
                Err(ref e) => {
                    tracing::debug!(purpose = %inner.resource.purpose, outcome = e.outcome_name(), "campaign acquire failed");
                }
            }
            let wait = match next {
                Next::Retry(d) | Next::SameAttempt(d) => d,
                Next::FreshAttempt(d) => {
                    attempt = self.new_attempt()?;
                    may_hold = false;
                    d
                }
                Next::Fail => {
                    if may_hold {
                        self.clean_up(&attempt).await;
                    }
                    // `after_acquire` fails only on these two.
                    return Err(match answer {
                        Err(e) => ElectionError::Client(e),
                        Ok(_) => ElectionError::NotLeader,
                    });
                }
            };
            if let Waited::Stopped = pause(wait, stop).await {
                if may_hold {
                    self.clean_up(&attempt).await;
                }
                return Ok(None);
            }
        }
    }

    /// Releases with `attempt` in case an acquire took the lease unseen.
    async fn clean_up(&self, attempt: &Attempt) {
        let inner = &*self.inner;
        if let Err(e) = inner.client.release(&inner.resource, attempt).await {
            tracing::debug!(purpose = %inner.resource.purpose, outcome = e.outcome_name(), "campaign clean-up release failed");
        }
    }

    /// One term: announce it, keep the lease until it ends, release it
    /// when resigning (or when it may still be ours), announce the end.
    async fn lead(
        &self,
        stop: &CancellationToken,
        attempt: Attempt,
        handle: LeaseHandle,
    ) -> StopReason {
        let inner = &*self.inner;
        let handle = Arc::new(handle);
        let fencing_token = handle.fencing_token();
        // One watchdog per term, owned by this future: if the campaign is
        // dropped, renewing stops with it.
        let watchdog = Watchdog::new(1);
        let mut registration = match watchdog.register(&handle) {
            Ok(registration) => registration,
            Err(_) => {
                // Its validity ran out before it could be kept (a very
                // slow answer): not a term at all. Give it back.
                let _ = handle.release().await;
                return if stop.is_cancelled() {
                    StopReason::Resigned
                } else {
                    StopReason::Expiring
                };
            }
        };
        // A child of the renewing: it fires whenever the watchdog gives up
        // the lease, even should this future be dropped without a word; and
        // dropping this future fires it at once.
        let renewing = registration.token();
        let token = renewing.child_token();
        let _dropped = token.clone().drop_guard();
        *lock(&inner.term) = Some(Term {
            attempt,
            token: token.clone(),
        });
        let leadership = Leadership {
            token: token.clone(),
            fencing_token,
            holder: handle.lease().holder.as_ref().map_or_else(
                || self.holder().as_str().to_owned(),
                |h| h.as_str().to_owned(),
            ),
            started_at: Instant::now(),
            handle: Arc::clone(&handle),
        };
        // Never more than half the TTL: a margin that swallowed the whole
        // validity would end every term as it began.
        let margin = inner.settings.leading_margin.min(inner.settings.ttl / 2);
        let announce = self.emit(ElectionEvent::StartedLeading(leadership));
        tokio::pin!(announce);
        let mut announced = false;
        let reason = loop {
            let left = handle.valid_for();
            if renewing.is_cancelled() {
                break StopReason::of(registration.ended().await);
            }
            if left <= margin {
                break StopReason::Expiring;
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => break StopReason::Resigned,
                _ = renewing.cancelled() => {}
                // Wake when the margin is reached; a renew meanwhile
                // moves the deadline, seen on the next look.
                _ = sleep(left - margin) => {}
                _ = &mut announce, if !announced => announced = true,
            }
        };
        // The term is over before anything else happens.
        token.cancel();
        renewing.cancel();
        // Resigning gives the lease back; a term that ended with the lease
        // possibly still ours (validity running out, unknown renew) gives it
        // back too, so the next leader need not wait for the expiry.
        if reason != StopReason::Lost {
            if let Err(e) = handle.release().await {
                tracing::debug!(purpose = %inner.resource.purpose, outcome = e.outcome_name(), "leadership release failed");
            }
        }
        *lock(&inner.term) = None;
        if !announced {
            announce.await;
        }
        self.emit(ElectionEvent::StoppedLeading {
            fencing_token,
            reason,
        })
        .await;
        reason
    }
}

#[cfg(test)]
#[path = "election_tests.rs"]
mod tests;
