//! Server-side waits: who is waiting for which resource, and how a release
//! or an expiry reaches them.
//!
//! Per resource, the waiters of this instance queue on a fair (FIFO) async
//! mutex, the *turn*. Only the holder of the turn talks to the store: it tries
//! to acquire, and when the lease is still held it sleeps until whichever
//! comes first of a wake-up (a release anywhere: the store publishes one), the
//! holder's PTTL (expiry, with no fixed poll interval), its own deadline, or
//! shutdown. A release therefore costs one store call per instance that has
//! waiters, not one per waiter: no thundering herd. When the turn holder
//! leaves (acquired, deadline, disconnect) the next waiter takes the turn.
//!
//! A wake-up that finds nobody waiting is kept as a permit, so a release that
//! lands between "still held" and "start sleeping" is never lost; a lost
//! message (subscription reconnect) costs at most one re-check at the PTTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Notify};

use super::purpose::PurposeHub;
use super::watch::WatchHub;
use crate::domain::{Attempt, Change};

/// The waiters of one resource on this instance.
pub struct ResourceWaiters {
    /// Held while a waiter takes its place in the store's fair queue and
    /// joins `turn`, so both orders agree.
    pub entry: Arc<tokio::sync::Mutex<()>>,
    /// Held by the one waiter allowed to talk to the store.
    pub turn: tokio::sync::Mutex<()>,
    /// Signalled on a release of the resource.
    pub wake: Notify,
    /// Signalled when the sleep bound was lowered
    /// ([`ResourceWaiters::take_bound`]): the turn holder sleeps until then
    /// at most, without a store call.
    pub rebound: Notify,
    /// The latest a waiter need sleep, learned from an event (a new holder's
    /// expiry, the queue head's heartbeat lapse); taken by the turn holder.
    bound: Mutex<Option<tokio::time::Instant>>,
    /// When this instance last told the store its waiters of the resource
    /// are alive (a heartbeat, or an enter, which beats too).
    beat_at: Mutex<tokio::time::Instant>,
    /// Registered waits; changed only under the registry's map lock, so
    /// the last one to leave always sees itself as the last.
    guards: AtomicUsize,
    /// The fair-queue members of this instance's live places: each
    /// heartbeat sends them, and the store drops this instance's entries
    /// that are not among them (per-waiter liveness, docs/design.md §14);
    /// with each, where a grant to it goes.
    members: Mutex<Vec<Member>>,
}

/// Most places of the same attempt one place's end tells to look (the
/// oldest): each look is a store call, and a caller that sent the same
/// wait N times and drops them one by one would otherwise cost N²/2 of
/// them. A told place that then acquires, or is answered, tells the next
/// ones in turn; one beyond them looks at its own wake-up or deadline.
pub const SIBLINGS_TOLD: usize = 8;

/// One live place of this instance in a resource's fair queue.
struct Member {
    /// The queue member (the store's name for the entry).
    id: String,
    /// Where a grant to it goes (taken when one came).
    grant: Option<oneshot::Sender<Grant>>,
    /// The attempt the place waits for, when its entry carries an ask.
    attempt: Option<Attempt>,
    /// Told to look when another place of the same attempt is gone.
    look: Arc<Notify>,
}

/// What a place of this instance hears while it waits.
#[derive(Debug)]
pub struct Seat {
    /// A release's grant to this place's own entry.
    pub grant: oneshot::Receiver<Grant>,
    /// Notified when another place of the same attempt (the same request
    /// sent twice) is gone, having acquired or not: this one looks (a
    /// replay, when its twin acquired), which nothing else would make it
    /// do before its deadline.
    pub look: Arc<Notify>,
}

/// A release handed the lease to a queue entry of this instance in the
/// same store call (docs/design.md §12, "Hand-off"): the permit the store
/// wrote for the entry's attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The new fencing token.
    pub fencing_token: u64,
    /// When it was written (store clock, ms): acquiredAt and renewedAt.
    pub acquired_at: u64,
}

impl ResourceWaiters {
    /// A place took `member` (before its enter is sent); a grant to it
    /// arrives on the receiver.
    pub fn join(&self, member: &str) -> oneshot::Receiver<Grant> {
        self.join_as(member, None).grant
    }

    /// A place took `member` (before its enter is sent), waiting for
    /// `attempt` when its entry carries an ask; a grant to it, and word of
    /// a grant to another place of the same attempt, arrive on the seat.
    pub fn join_as(&self, member: &str, attempt: Option<&Attempt>) -> Seat {
        let (tx, rx) = oneshot::channel();
        let look = Arc::new(Notify::new());
        self.lock_members().push(Member {
            id: member.to_owned(),
            grant: Some(tx),
            attempt: attempt.cloned(),
            look: Arc::clone(&look),
        });
        Seat { grant: rx, look }
    }

    /// The place of `member` is gone (taken with the permit, or left).
    ///
    /// Every other place of the same attempt (the oldest
    /// `SIBLINGS_TOLD`) is told to look: when this
    /// one acquired (its own look, or a grant), that attempt holds the
    /// lease from now on, and no wake-up comes for a resource that is held
    /// again, so the other would answer (a replay) only at its deadline
    /// (issue 39, item 13: a caller that timed out and sent its wait
    /// again). Its look is a replay, which also claims the permit, so a
    /// departed first place's clean-up keeps it. When this one left
    /// without acquiring, the look only costs the other one store call;
    /// with no duplicate, nothing happens.
    pub fn part(&self, member: &str) {
        let siblings: Vec<Arc<Notify>> = {
            let mut members = self.lock_members();
            let Some(i) = members.iter().position(|m| m.id == member) else {
                return;
            };
            let gone = members.remove(i);
            match gone.attempt {
                Some(attempt) => members
                    .iter()
                    .filter(|m| m.attempt.as_ref() == Some(&attempt))
                    .take(SIBLINGS_TOLD)
                    .map(|m| Arc::clone(&m.look))
                    .collect(),
                None => Vec::new(),
            }
        };
        for look in siblings {
            // A permit is kept when the place is not listening yet.
            look.notify_one();
        }
    }

    /// This instance's live members, comma-separated (members hold none).
    pub fn roster(&self) -> String {
        let members = self.lock_members();
        let mut roster = String::new();
        for (i, m) in members.iter().enumerate() {
            if i > 0 {
                roster.push(',');
            }
            roster.push_str(&m.id);
        }
        roster
    }

    /// When the last heartbeat (or enter) of this resource was sent.
    pub fn last_beat(&self) -> tokio::time::Instant {
        *self
            .beat_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A heartbeat or an enter is being sent now.
    pub fn beaten(&self) {
        *self
            .beat_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tokio::time::Instant::now();
    }

    /// The sleep bound an event left, if any (taken: each bound is used
    /// once).
    pub fn take_bound(&self) -> Option<tokio::time::Instant> {
        self.bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn lower_bound(&self, at: tokio::time::Instant) {
        {
            let mut bound = self
                .bound
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *bound = Some(bound.map_or(at, |b| b.min(at)));
        }
        self.rebound.notify_one();
    }

    /// Hands `grant` to the place of `member`. When no live place takes it,
    /// that place's leave finds its entry granted and releases what it was
    /// granted, unless someone claimed it.
    fn grant(&self, member: &str, grant: Grant) {
        let sender = self
            .lock_members()
            .iter_mut()
            .find(|m| m.id == member)
            .and_then(|m| m.grant.take());
        if let Some(tx) = sender {
            let _ = tx.send(grant);
        }
    }

    fn lock_members(&self) -> std::sync::MutexGuard<'_, Vec<Member>> {
        self.members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Every resource that has waiters on this instance, and the watch hub that
/// follows changes for watchers.
pub struct WaitRegistry {
    resources: Mutex<HashMap<String, Arc<ResourceWaiters>>>,
    waiting: AtomicUsize,
    max_waiters: usize,
    watch: WatchHub,
    purposes: PurposeHub,
}

impl WaitRegistry {
    /// A registry admitting at most `max_waiters` concurrent waits.
    pub fn new(max_waiters: usize) -> Self {
        Self {
            resources: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
            max_waiters,
            watch: WatchHub::default(),
            purposes: PurposeHub::default(),
        }
    }

    /// The watch hub fed by the same events as the waiters.
    pub fn watch(&self) -> &WatchHub {
        &self.watch
    }

    /// The purpose watchers, fed by the same events.
    pub fn purposes(&self) -> &PurposeHub {
        &self.purposes
    }

    /// `change` happened to `tag` (on any instance): waiters look again when
    /// it freed the resource, watchers always.
    pub fn changed(&self, tag: &str, change: Change) {
        if matches!(change, Change::Released | Change::Expired | Change::Revoked) {
            self.wake(tag);
        }
        self.watch.changed(tag, Some(change));
        self.purposes.changed(tag, Some(change));
    }

    /// A release of `tag` granted the lease to `member` (an entry of some
    /// instance's waiter): that waiter hears of it here when it is this
    /// instance's; watchers hear a release and an acquire. Other waiters
    /// are not woken: the resource is held again.
    pub fn granted(&self, tag: &str, member: &str, grant: Grant) {
        let resource = self.map().get(tag).cloned();
        if let Some(resource) = resource {
            resource.grant(member, grant);
        }
        for change in [Change::Released, Change::Acquired] {
            self.watch.changed(tag, Some(change));
            self.purposes.changed(tag, Some(change));
        }
    }

    /// An operator broke `tag` (or permits of it): waiters look again, as
    /// after a release; watchers hear `revoked` with who and why.
    pub fn revoked(&self, tag: &str, revocation: crate::domain::Revocation) {
        self.wake(tag);
        self.purposes.revoked(tag, revocation.clone());
        self.watch.revoked(tag, revocation);
    }

    /// A store message for `tag` that named no change this build knows: both
    /// waiters and watchers look again.
    pub fn changed_somehow(&self, tag: &str) {
        self.wake(tag);
        self.watch.changed(tag, None);
        self.purposes.changed(tag, None);
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ResourceWaiters>>> {
        self.resources.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this instance has a waiter for `tag` (a hint: another
    /// instance's waiters are not known here).
    pub fn waits_on(&self, tag: &str) -> bool {
        self.map().contains_key(tag)
    }

    /// Registers a waiter for `tag`, or `None` when the cap is reached.
    pub fn enter(self: &Arc<Self>, tag: &str) -> Option<WaitGuard> {
        let mut guard = self.register(tag);
        guard.admit().then_some(guard)
    }

    /// Registers a wait for `tag` that is not counted yet (nor capped):
    /// its place may take grants and wake-ups, and [`WaitGuard::admit`]
    /// counts it once it waits (a waiter whose first look enters the
    /// queue registers before that look).
    pub fn register(self: &Arc<Self>, tag: &str) -> WaitGuard {
        let mut map = self.map();
        let resource = Arc::clone(map.entry(tag.to_owned()).or_insert_with(|| {
            Arc::new(ResourceWaiters {
                entry: Arc::new(tokio::sync::Mutex::new(())),
                turn: tokio::sync::Mutex::new(()),
                wake: Notify::new(),
                rebound: Notify::new(),
                bound: Mutex::new(None),
                beat_at: Mutex::new(tokio::time::Instant::now()),
                guards: AtomicUsize::new(0),
                members: Mutex::new(Vec::new()),
            })
        }));
        resource.guards.fetch_add(1, Ordering::Relaxed);
        drop(map);
        WaitGuard {
            registry: Arc::clone(self),
            tag: tag.to_owned(),
            resource,
            admitted: false,
        }
    }

    /// An event says `tag`'s waiters need not look for `ms` (a plain
    /// holder's TTL, a queue head's heartbeat): the turn holder sleeps
    /// until then at most, and makes no store call for it.
    pub fn bound(&self, tag: &str, ms: u64) {
        let resource = self.map().get(tag).cloned();
        if let Some(resource) = resource {
            // +1 ms: the store counts whole milliseconds.
            let at = tokio::time::Instant::now() + std::time::Duration::from_millis(ms + 1);
            resource.lower_bound(at);
        }
    }

    /// `tag` was released while the queue's head waits on another
    /// instance: watchers hear of it; this instance's waiters only sleep
    /// until `lapse_ms` at most (when the head's heartbeat lapses, should its
    /// instance have died), since the head goes first.
    pub fn released_elsewhere(&self, tag: &str, lapse_ms: u64) {
        self.bound(tag, lapse_ms);
        self.watch.changed(tag, Some(Change::Released));
        self.purposes.changed(tag, Some(Change::Released));
    }

    /// A release of `tag` happened (on any instance).
    pub fn wake(&self, tag: &str) {
        if let Some(resource) = self.map().get(tag) {
            resource.wake.notify_one();
        }
    }

    /// Wake-ups may have been missed: every resource re-checks once, and so
    /// does every watch group.
    pub fn wake_all(&self) {
        for resource in self.map().values() {
            resource.wake.notify_one();
        }
        self.watch.changed_all();
        self.purposes.changed_all();
    }

    /// Whether any wait for `tag` is registered on this instance.
    pub fn is_waited_for(&self, tag: &str) -> bool {
        self.map().contains_key(tag)
    }

    /// Whether another wait would be admitted now (a hint: it may not be
    /// by the time it asks).
    pub fn has_room(&self) -> bool {
        self.waiting() < self.max_waiters
    }

    /// Waits currently registered.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Resources with at least one waiter.
    pub fn resources(&self) -> usize {
        self.map().len()
    }
}

/// One registered wait; leaving (drop) unregisters it, whatever the reason.
pub struct WaitGuard {
    registry: Arc<WaitRegistry>,
    tag: String,
    resource: Arc<ResourceWaiters>,
    /// Counted among the waits (and in the gauge).
    admitted: bool,
}

impl WaitGuard {
    /// Counts this wait, unless the cap is reached (false); once.
    pub fn admit(&mut self) -> bool {
        if self.admitted {
            return true;
        }
        let registry = &self.registry;
        self.admitted = registry
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < registry.max_waiters).then_some(n + 1)
            })
            .is_ok();
        if self.admitted {
            metrics::gauge!(crate::telemetry::WAITERS).increment(1.0);
        }
        self.admitted
    }

    /// The resource's queue.
    pub fn resource(&self) -> &ResourceWaiters {
        &self.resource
    }

    /// The resource's queue, shared.
    pub fn resource_shared(&self) -> Arc<ResourceWaiters> {
        Arc::clone(&self.resource)
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let mut map = self.registry.map();
        // The last waiter of the resource removes its entry. Counted under
        // the lock: two waiters leaving at once each see the other.
        if self.resource.guards.fetch_sub(1, Ordering::Relaxed) == 1 {
            map.remove(&self.tag);
        }
        drop(map);
        if self.admitted {
            self.registry.waiting.fetch_sub(1, Ordering::AcqRel);
            metrics::gauge!(crate::telemetry::WAITERS).decrement(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_of_many_leaving_waiters_removes_the_entry() {
        let registry = Arc::new(WaitRegistry::new(100));
        for _ in 0..200 {
            let guards: Vec<WaitGuard> = (0..4)
                .map(|_| registry.enter("p:d").expect("admitted"))
                .collect();
            assert_eq!(registry.resources(), 1);
            // Leave from several threads at once.
            std::thread::scope(|s| {
                for g in guards {
                    s.spawn(move || drop(g));
                }
            });
            assert_eq!(registry.resources(), 0, "entry left behind");
            assert_eq!(registry.waiting(), 0);
        }
    }

    /// Review of issue 39's item 13 fix: a place's end tells the other
    /// places of its attempt to look, each look a store call. 100 places
    /// of one attempt leaving one by one told 99 + 98 + … = 4 950 looks;
    /// now each end tells at most [`SIBLINGS_TOLD`], the oldest first.
    #[test]
    fn a_place_that_ends_tells_a_bounded_number_of_its_twins() {
        use futures_util::FutureExt as _;
        const PLACES: usize = 100;
        let registry = Arc::new(WaitRegistry::new(1000));
        let guard = registry.enter("p:d").expect("admitted");
        let queue = guard.resource();
        let attempt = Attempt {
            owner_token: crate::domain::OwnerToken::parse(&"t".repeat(32)).expect("token"),
            operation_id: crate::domain::OperationId::parse("op").expect("op"),
        };
        let seats: Vec<Seat> = (0..PLACES)
            .map(|i| queue.join_as(&format!("x:i:{i}"), Some(&attempt)))
            .collect();
        let mut told = 0;
        for gone in 0..PLACES {
            queue.part(&format!("x:i:{gone}"));
            // Each place told takes its word (it looks, then waits again).
            for seat in &seats[gone + 1..] {
                if seat.look.notified().now_or_never().is_some() {
                    told += 1;
                }
            }
        }
        assert!(
            told <= SIBLINGS_TOLD * PLACES,
            "{told} looks for {PLACES} places ending"
        );
        assert_eq!(
            told,
            (0..PLACES)
                .map(|i| (PLACES - 1 - i).min(SIBLINGS_TOLD))
                .sum::<usize>(),
            "each end tells the oldest {SIBLINGS_TOLD} still there"
        );
        assert_eq!(queue.roster(), "", "every place left");
    }
}
