//! A waiter's [`Place`] in the fair queue (on the roster its instance's
//! heartbeats send; left, retried, when dropped), how a wait retries
//! ([`Retries`]), and the clean-up of what a departed waiter acquired.

use super::core::*;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::domain::{Attempt, Failure, Mode, ResourceId};
use crate::notify::{Grant, ResourceWaiters, Seat, WaitRegistry};
use crate::store::{Ask, QueueOp, Queued, Store};

/// A waiter's place in the resource's fair queue. Dropped without being
/// taken (deadline, disconnect, shutdown), it leaves the queue in the
/// background, retried until the store confirms it (docs/design.md §14).
pub(super) struct Place {
    pub(super) store: Store,
    pub(super) resource: ResourceId,
    pub(super) mode: Mode,
    pub(super) member: Option<String>,
    pub(super) waiters: Arc<WaitRegistry>,
    pub(super) shutdown: CancellationToken,
    /// This instance's waiters of the resource: the roster its heartbeats
    /// send lists this place's member while it lives.
    pub(super) queue: Arc<ResourceWaiters>,
    /// Where a release's grant to this place's entry arrives.
    grant: Option<oneshot::Receiver<Grant>>,
    /// Notified when another place of the same attempt is gone.
    look: Option<Arc<Notify>>,
    /// The waiter's attempt, once an ask went with its entry and
    /// `--release-abandoned` is on or the acquire is on a session: a leave
    /// that finds the entry granted releases what it may have been granted
    /// (otherwise a grant ends with its TTL).
    asked: Option<Attempt>,
}

/// First pause between two tries of a store call that failed inside a wait
/// (or of a queue leave); it doubles up to [`RETRY_MAX`].
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(25);
/// Longest pause between two such tries.
pub(super) const RETRY_MAX: Duration = Duration::from_millis(400);
/// How long a leave is retried: after the queue's heartbeat horizon (2 s)
/// and some room, an entry left behind can no longer be granted.
const GRANTABLE: Duration = Duration::from_millis(3_000);

impl Place {
    pub(super) fn new(
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
            grant: None,
            look: None,
            asked: None,
        }
    }

    pub(super) fn member(&self) -> Option<&str> {
        self.member.as_deref()
    }

    /// Takes a (new) place: at the back of the queue, or (`front`, for a
    /// turn holder whose place lapsed) ahead of this instance's own
    /// entries, so that it never waits behind waiters waiting for its turn.
    /// `ask`: what a release may grant the entry (docs/design.md §12). `Some(ms)`:
    /// the resource's record lives that long, so the waiter need not look
    /// before a release, a grant or then.
    pub(super) async fn enter(
        &mut self,
        service: &LeaseService,
        front: bool,
        ask: Option<Ask<'_>>,
    ) -> Result<Option<u64>, Failure> {
        let member = self.prepare(service, ask);
        let op = if front {
            QueueOp::EnterFront(&member, ask)
        } else {
            QueueOp::Enter(&member, ask)
        };
        // The enter renews the instance's heartbeat too.
        self.queue.beaten();
        let entered = service
            .admitted(self.store.queue(&self.resource, op))
            .await?;
        match entered.map_err(|err| service.failure(err, None))? {
            Queued::Entered(held_ms) => Ok(held_ms),
            _ => Ok(None),
        }
    }

    /// A new member for this place (the old one leaves), on the roster
    /// and ready for a grant, before any store call that may enter it: a
    /// cancel or an uncertain reply during that call still leaves on drop.
    /// `ask`: as for [`Place::enter`].
    pub(super) fn prepare(&mut self, service: &LeaseService, ask: Option<Ask<'_>>) -> String {
        self.leave();
        let member = self.store.queue_member(self.mode);
        let Seat { grant, look } = self.queue.join_as(&member, ask.map(|a| a.attempt));
        (self.grant, self.look) = (Some(grant), Some(look));
        self.member = Some(member.clone());
        // A session's lease is released when its waiter leaves, whatever
        // the setting (as in `look`).
        self.asked = ask
            .filter(|a| service.settings.release_abandoned || a.spec.session.is_some())
            .map(|a| a.attempt.clone());
        member
    }

    /// A release's grant to this place's entry, or word that another place
    /// of the same attempt is gone (never resolves otherwise).
    pub(super) async fn granted(&mut self) -> Handed {
        let Some(look) = self.look.clone() else {
            return std::future::pending().await;
        };
        if let Some(rx) = self.grant.as_mut() {
            tokio::select! {
                biased;
                grant = rx => match grant {
                    Ok(grant) => return Handed::Grant(grant),
                    // No grant can come any more (a receiver is not
                    // polled twice); a look still may.
                    Err(_) => self.grant = None,
                },
                () = look.notified() => return Handed::Look,
            }
        }
        look.notified().await;
        Handed::Look
    }

    /// The acquire script took the entry out with the permit, or the
    /// member never reached the store: off the roster, no leave.
    pub(super) fn taken(&mut self) {
        self.grant = None;
        self.look = None;
        self.asked = None;
        if let Some(member) = self.member.take() {
            self.queue.part(&member);
        }
    }

    pub(super) fn leave(&mut self) {
        self.grant = None;
        self.look = None;
        let asked = self.asked.take();
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
            let started = tokio::time::Instant::now();
            loop {
                match store
                    .queue(&resource, QueueOp::Leave(&member, asked.as_ref()))
                    .await
                {
                    Ok(Queued::Left { granted: true }) => {
                        // Granted before the leave: the grant goes, unless
                        // claimed (a replay of the attempt).
                        if let Some(attempt) = asked {
                            release_abandoned(&store, &resource, &attempt).await;
                        }
                        return;
                    }
                    Ok(_) => return,
                    Err(_) => {}
                }
                // With no waiter of this instance left there, nobody beats
                // for the entry: it lapses within the heartbeat horizon.
                // An entry that left an ask may be granted until then, and
                // only its leave can tell: that is tried a while longer (a
                // grant it never hears of ends with its TTL).
                if asked.is_none() && !waiters.is_waited_for(&resource.tag()) {
                    return;
                }
                if asked.is_some() && started.elapsed() > GRANTABLE {
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

/// What [`Place::granted`] heard.
pub(super) enum Handed {
    /// A release granted this place's entry the lease.
    Grant(Grant),
    /// Another place of this attempt is gone (it may have acquired): a
    /// look now replays what it got (docs/design.md §12).
    Look,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.leave();
    }
}

impl LeaseService {
    /// Sends this instance's heartbeat for `resource`'s waiters in a task
    /// of its own, under the entry lock (no place of this instance enters
    /// between the roster and the beat, which would drop an entry it has
    /// not heard of); false, sending nothing, while that lock is held (an
    /// enter, which beats too, or the last beat is still out).
    pub(super) fn beat(&self, resource: &ResourceId, queue: &ResourceWaiters) -> bool {
        let Ok(entering) = Arc::clone(&queue.entry).try_lock_owned() else {
            return false;
        };
        let roster = queue.roster();
        queue.beaten();
        let (store, resource) = (self.store.clone(), resource.clone());
        let task = async move {
            let _ = store.queue(&resource, QueueOp::Beat(&roster)).await;
            drop(entering);
        };
        // Traces (feature `otel`): the beat stays under the wait's span.
        #[cfg(feature = "otel")]
        let task = crate::telemetry::trace::propagate(task);
        tokio::spawn(task);
        true
    }
}

/// How a wait retries store calls that failed (docs/design.md §14).
pub(super) struct Retries {
    pub(super) pause: Duration,
    /// An acquire of this wait may have applied and no later answer said
    /// whether it did.
    pub(super) uncertain: bool,
    /// The wait's entry left an ask (docs/design.md §12), or may have: a
    /// release may grant the attempt a permit until the entry is gone, so
    /// no failure of the wait is "not applied".
    pub(super) asked: bool,
}

impl Retries {
    pub(super) fn new() -> Self {
        Self {
            pause: RETRY_FIRST,
            uncertain: false,
            asked: false,
        }
    }
}

/// Takes back what a waiting acquire got after its caller had gone, unless
/// someone has been told since that it is held (a replay of the same
/// attempt claimed it, or it was renewed): docs/design.md §14. Tried a few times; a
/// permit left behind ends with its TTL.
pub(super) async fn release_abandoned(store: &Store, resource: &ResourceId, attempt: &Attempt) {
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
                    "waiter left while its acquire was in flight; kept the lease (a retry claimed it, or Redis refused the clean-up's write)"
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
