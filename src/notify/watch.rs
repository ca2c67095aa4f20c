//! Watches: who on this instance follows which resource, and how a change
//! reaches them (docs/design.md §9).
//!
//! Per watched resource this instance runs one *group*: a task that reads
//! the store once per change and hands the new state to every watcher of
//! the resource through a `tokio::sync::watch` channel, so a change costs
//! one store read per instance, not one per watcher. A group reads
//!
//! - when it starts (the read marks the resource watched in the store, so
//!   acquires and holder changes anywhere publish events);
//! - on every event for its resource ([`WatchHub::changed`], fed by the
//!   same wake-up channel as waits) and when events may have been missed
//!   ([`WatchHub::changed_all`]);
//! - at the holder's expiry (nothing publishes an expiry: a timer at
//!   `remainingMs + 1`);
//! - every [`REFRESH`] while it has watchers, which keeps the store's watch
//!   mark alive (it lasts 30 s) and the countdown of `remainingMs` honest.
//!
//! It ends when its last watcher leaves (the map entry goes with it) or at
//! shutdown. The kind of a change (`acquired`, `released`, `expired`,
//! `holder_changed`) is derived from the old and new state, with the event
//! names as hints, so a missed message never produces a wrong event: a new
//! fencing token is an acquisition, a lease gone is a release or (when its
//! time was up) an expiry, the same token with a new version is a holder
//! change. A watcher that fell behind sees the latest state and the change
//! from what it saw last (changes faster than a read coalesce).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::keepalive::Ticker;
pub use super::snapshot::Snapshot;
use super::snapshot::{kind_index, KINDS};
use crate::domain::{Change, Revocation};
use crate::domain::{Failure, Inspection, ResourceId};
use crate::telemetry::{WATCHERS, WATCH_EVENTS, WATCH_GROUPS, WATCH_READS};

/// How often a group re-reads while it has watchers (the store's watch
/// mark lasts 30 s and is renewed when less than half is left).
pub const REFRESH: Duration = Duration::from_secs(10);

/// After a failed read, a group tries again this much later.
const RETRY: Duration = Duration::from_secs(1);

/// A lease whose countdown is this close to zero when it is found gone
/// expired rather than being released (the countdown runs from the end of
/// the read that saw it, a little after the store measured it).
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

/// How a group reads its resource (the service's watcher read).
pub type Read = Arc<
    dyn Fn(ResourceId) -> Pin<Box<dyn Future<Output = Result<Inspection, Failure>> + Send>>
        + Send
        + Sync,
>;

/// What a group publishes to its watchers.
#[derive(Debug, Clone)]
enum Published {
    /// No read has completed yet.
    Pending,
    /// The group's first read failed (later failures keep the last state).
    Failed(Failure),
    /// The latest state, the change that led to it (`None` for the first
    /// read), and the version it replaced.
    State {
        snapshot: Arc<Snapshot>,
        change: Option<Change>,
        previous: Option<Arc<Snapshot>>,
    },
}

/// One watched resource on this instance.
struct Group {
    /// The resource's tag (its key in the hub's map).
    tag: String,
    /// Signalled on an event for the resource; a signal with no one
    /// waiting is kept, so an event during a read triggers another read.
    wake: Notify,
    /// The event names seen since the last read (bits of [`hint_bit`]).
    hints: AtomicU8,
    /// The latest break's who and why, heard since the last read.
    revocation: Mutex<Option<Revocation>>,
    /// Watchers; changed only under the hub's map lock.
    watchers: AtomicUsize,
    /// Ends the group's task.
    stop: CancellationToken,
    /// A receiver to clone for each new watcher (the task owns the sender).
    rx: watch::Receiver<Published>,
    /// `leasehold_watch_events_total` per kind ([`kind_index`]), looked up
    /// once per group rather than once per watcher and event.
    events: [metrics::Counter; KINDS],
    /// Watchers whose socket the group writes itself ([`sink`]), by id.
    sinks: Mutex<HashMap<u64, Arc<Sink>>>,
    next_sink: AtomicU64,
}

impl Group {
    fn sinks(&self) -> MutexGuard<'_, HashMap<u64, Arc<Sink>>> {
        self.sinks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(super) fn hint_bit(change: Option<Change>) -> u8 {
    match change {
        Some(Change::Acquired) => 1,
        Some(Change::Released) => 2,
        Some(Change::Expired) => 4,
        Some(Change::HolderChanged) => 8,
        None => 16,
        Some(Change::Revoked) => 32,
    }
}

/// The watchers of this instance (cheap to clone: one shared map).
#[derive(Clone, Default)]
pub struct WatchHub {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    groups: Mutex<HashMap<String, Arc<Group>>>,
    watchers: AtomicUsize,
    /// The keep-alive tick shared by every stream.
    ticker: Arc<Ticker>,
}

impl WatchHub {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Group>>> {
        self.inner.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `change` (when known) happened to `tag` on some instance.
    pub fn changed(&self, tag: &str, change: Option<Change>) {
        if let Some(group) = self.map().get(tag) {
            group.hints.fetch_or(hint_bit(change), Ordering::AcqRel);
            group.wake.notify_one();
        }
    }

    /// An operator broke `tag` on some instance: its watchers' next change
    /// is `revoked`, carrying `revocation`.
    pub fn revoked(&self, tag: &str, revocation: Revocation) {
        if let Some(group) = self.map().get(tag) {
            *group.revocation.lock().unwrap_or_else(|p| p.into_inner()) = Some(revocation);
            group
                .hints
                .fetch_or(hint_bit(Some(Change::Revoked)), Ordering::AcqRel);
            group.wake.notify_one();
        }
    }

    /// Events may have been missed (the subscription reconnected): every
    /// watched resource is read again.
    pub fn changed_all(&self) {
        for group in self.map().values() {
            group.hints.fetch_or(hint_bit(None), Ordering::AcqRel);
            group.wake.notify_one();
        }
    }

    /// Takes a place under the watch cap `max_watchers` for a watcher that
    /// is not a resource's (a purpose watcher), or `None` when all are taken.
    pub fn admit(&self, max_watchers: usize) -> Option<Admitted> {
        self.inner
            .watchers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max_watchers).then_some(n + 1)
            })
            .ok()?;
        metrics::gauge!(WATCHERS).increment(1.0);
        Some(Admitted { hub: self.clone() })
    }

    /// A tick shared by every stream of this instance (`Ticker`).
    pub fn keepalive(
        &self,
        period: Duration,
        shutdown: &CancellationToken,
    ) -> watch::Receiver<u64> {
        self.inner.ticker.subscribe(period, shutdown)
    }

    /// Watchers on this instance.
    pub fn watchers(&self) -> usize {
        self.inner.watchers.load(Ordering::Acquire)
    }

    /// Resources with at least one watcher on this instance.
    pub fn groups(&self) -> usize {
        self.map().len()
    }

    /// Registers a watcher of `resource`, or `None` when `max_watchers` are
    /// watching already. The first watcher of a resource starts its group,
    /// which reads with `read()` and ends at `shutdown` at the latest.
    pub fn join(
        &self,
        resource: &ResourceId,
        max_watchers: usize,
        read: impl FnOnce() -> Read,
        shutdown: &CancellationToken,
    ) -> Option<Watcher> {
        let admitted = self
            .inner
            .watchers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max_watchers).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            return None;
        }
        metrics::gauge!(WATCHERS).increment(1.0);
        let tag = resource.tag();
        let mut map = self.map();
        let group = match map.get(&tag) {
            Some(group) => Arc::clone(group),
            None => {
                let (tx, rx) = watch::channel(Published::Pending);
                let group = Arc::new(Group {
                    tag: tag.clone(),
                    wake: Notify::new(),
                    hints: AtomicU8::new(0),
                    revocation: Mutex::new(None),
                    watchers: AtomicUsize::new(0),
                    stop: shutdown.child_token(),
                    rx,
                    events: [
                        Change::Acquired,
                        Change::Released,
                        Change::Expired,
                        Change::HolderChanged,
                        Change::Revoked,
                    ]
                    .map(|c| metrics::counter!(WATCH_EVENTS, "kind" => c.as_str())),
                    sinks: Mutex::new(HashMap::new()),
                    next_sink: AtomicU64::new(0),
                });
                map.insert(tag.clone(), Arc::clone(&group));
                metrics::gauge!(WATCH_GROUPS).increment(1.0);
                tokio::spawn(run_group(Arc::clone(&group), tx, resource.clone(), read()));
                group
            }
        };
        group.watchers.fetch_add(1, Ordering::Relaxed);
        drop(map);
        Some(Watcher {
            hub: self.clone(),
            rx: group.rx.clone(),
            group,
            last: None,
            sink: None,
        })
    }
}

/// A place under the watch cap ([`WatchHub::admit`]), given back on drop.
pub struct Admitted {
    hub: WatchHub,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.hub.inner.watchers.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!(WATCHERS).decrement(1.0);
    }
}

/// One watcher; leaving (drop) unregisters it, and the last one of a
/// resource ends its group.
pub struct Watcher {
    hub: WatchHub,
    group: Arc<Group>,
    rx: watch::Receiver<Published>,
    /// The state this watcher saw last (until it is attached: then its
    /// sink's).
    last: Option<Arc<Snapshot>>,
    /// Its socket, once the group writes to it ([`Watcher::attach`]).
    sink: Option<(u64, Arc<Sink>)>,
}

impl Watcher {
    /// The group's latest state (waiting for its first read); from here on
    /// [`Watcher::next`] reports changes from it.
    pub async fn current(&mut self) -> Result<Arc<Snapshot>, Failure> {
        loop {
            let published = self.rx.borrow_and_update().clone();
            match published {
                Published::State { snapshot, .. } => {
                    self.last = Some(Arc::clone(&snapshot));
                    return Ok(snapshot);
                }
                Published::Failed(failure) => return Err(failure),
                Published::Pending => {
                    if self.rx.changed().await.is_err() {
                        // The group ended before its first read: shutdown.
                        return Err(Failure::Unavailable {
                            retry_after_ms: 1000,
                        });
                    }
                }
            }
        }
    }

    /// Until the group ends (shutdown).
    pub async fn ended(&self) {
        self.group.stop.cancelled().await;
    }

    /// The next change from the state this watcher saw last, and the new
    /// state; `None` when the group ended (shutdown). Cancel-safe.
    pub async fn next(&mut self) -> Option<(Change, Arc<Snapshot>)> {
        loop {
            self.rx.changed().await.ok()?;
            let Published::State {
                snapshot,
                change,
                previous,
            } = self.rx.borrow_and_update().clone()
            else {
                continue;
            };
            let Some(change) = change_from(self.last.as_deref(), &snapshot, change, previous)
            else {
                continue;
            };
            self.last = Some(Arc::clone(&snapshot));
            self.group.events[kind_index(change)].increment(1);
            return Some((change, snapshot));
        }
    }
}

/// The change a watcher that saw `last` sees in `snapshot`, published as
/// `change` from `previous`; `None` when it saw this state already.
fn change_from(
    last: Option<&Snapshot>,
    snapshot: &Snapshot,
    change: Option<Change>,
    previous: Option<Arc<Snapshot>>,
) -> Option<Change> {
    Some(match last {
        Some(last) if last.version() == snapshot.version() => return None,
        // It saw the state the group's change started from.
        Some(last)
            if previous
                .as_ref()
                .is_some_and(|p| p.version() == last.version()) =>
        {
            change.unwrap_or_else(|| classify(last, snapshot, 0))
        }
        Some(last) => classify(last, snapshot, 0),
        None => change.unwrap_or(Change::Acquired),
    })
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.close();
        if let Some((id, _)) = self.sink.take() {
            self.group.sinks().remove(&id);
        }
        let mut map = self.hub.map();
        // The last watcher removes the group (if the map still holds this
        // one). Counted under the lock: two leaving at once see each other.
        if self.group.watchers.fetch_sub(1, Ordering::Relaxed) == 1 {
            if map
                .get(&self.group.tag)
                .is_some_and(|g| Arc::ptr_eq(g, &self.group))
            {
                map.remove(&self.group.tag);
                metrics::gauge!(WATCH_GROUPS).decrement(1.0);
            }
            self.group.stop.cancel();
        }
        drop(map);
        self.hub.inner.watchers.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!(WATCHERS).decrement(1.0);
    }
}

/// `<changes>.<live permits>` as numbers, when a version has that shape.
fn parts(version: &str) -> Option<(u64, u64)> {
    let (changes, live) = version.split_once('.')?;
    Some((changes.parse().ok()?, live.parse().ok()?))
}

/// Whether `version` comes after `than`: more changes, or as many with fewer
/// live permits (for one change count the live count only falls). Versions
/// of another shape are merely compared for difference.
pub fn newer(version: &str, than: &str) -> bool {
    match (parts(version), parts(than)) {
        (Some((c, n)), Some((tc, tn))) => c > tc || (c == tc && n < tn),
        _ => version != than,
    }
}

/// The change from `old` to `new` (whose versions differ); `hints` are the
/// event names seen in between (bits of [`hint_bit`]). By the holders'
/// fencing tokens: a new one is an acquisition; one gone is a release, or an
/// expiry when its time was up (and no release was heard, and the store
/// counted no change: an expiry is not one); the same ones under a new
/// version are a holder change.
pub(super) fn classify(old: &Snapshot, new: &Snapshot, hints: u8) -> Change {
    let (was, is) = (old.fences(), new.fences());
    if is.iter().any(|(f, _)| !was.iter().any(|(g, _)| g == f)) {
        return Change::Acquired;
    }
    let gone: Vec<Instant> = was
        .iter()
        .filter(|(f, _)| !is.iter().any(|(g, _)| g == f))
        .map(|(_, end)| *end)
        .collect();
    if !gone.is_empty() && hints & hint_bit(Some(Change::Revoked)) != 0 {
        return Change::Revoked;
    }
    if gone.is_empty() {
        return if was.is_empty() {
            // Acquired and let go between two reads: the latest change.
            Change::Released
        } else {
            Change::HolderChanged
        };
    }
    let released = hints & hint_bit(Some(Change::Released)) != 0
        || matches!(
            (parts(old.version()), parts(new.version())),
            (Some((a, _)), Some((b, _))) if b > a
        );
    let time_was_up = gone.iter().any(|end| new.read_at + EXPIRY_SLACK >= *end);
    if !released && time_was_up {
        Change::Expired
    } else {
        Change::Released
    }
}

/// A group: read, publish, sleep until an event, the expiry, the refresh or
/// the end.
async fn run_group(
    group: Arc<Group>,
    tx: watch::Sender<Published>,
    resource: ResourceId,
    read: Read,
) {
    let mut current: Option<Arc<Snapshot>> = None;
    loop {
        // Taken before the read: an event during the read is a new hint and
        // (through the Notify permit) another read.
        let hints = group.hints.swap(0, Ordering::AcqRel);
        let revocation = group
            .revocation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let result = tokio::select! {
            biased;
            () = group.stop.cancelled() => return,
            result = read(resource.clone()) => result,
        };
        metrics::counter!(WATCH_READS, "result" => if result.is_ok() { "ok" } else { "error" })
            .increment(1);
        let retry = result.is_err();
        match result {
            Ok(inspection) => {
                let mut snapshot = Snapshot::new(inspection);
                snapshot.revocation = revocation;
                let snapshot = Arc::new(snapshot);
                match current.take() {
                    None => {
                        let _ = tx.send(Published::State {
                            snapshot: Arc::clone(&snapshot),
                            change: None,
                            previous: None,
                        });
                    }
                    Some(old) if old.version() != snapshot.version() => {
                        let change = classify(&old, &snapshot, hints);
                        tracing::debug!(tag = %resource.tag(), change = change.as_str(), version = snapshot.version(), "watched resource changed");
                        let _ = tx.send(Published::State {
                            snapshot: Arc::clone(&snapshot),
                            change: Some(change),
                            previous: Some(Arc::clone(&old)),
                        });
                        group.fan_out(&old, &snapshot, change).await;
                    }
                    // Same version (a renewal, a refresh): the fresher
                    // countdown is kept, nobody is woken.
                    Some(_) => {
                        tx.send_if_modified(|published| {
                            if let Published::State { snapshot: s, .. } = published {
                                *s = Arc::clone(&snapshot);
                            }
                            false
                        });
                    }
                }
                current = Some(snapshot);
            }
            Err(failure) => {
                tracing::debug!(tag = %resource.tag(), ?failure, "watch read failed; retrying");
                if current.is_none() {
                    let _ = tx.send(Published::Failed(failure));
                }
            }
        }
        let now = Instant::now();
        let mut wake_at = now + if retry { RETRY } else { REFRESH };
        if let Some(expiry) = current.as_ref().and_then(|s| s.expires_at()) {
            // +1 ms: the remaining time is truncated to whole milliseconds.
            wake_at = wake_at.min(expiry + Duration::from_millis(1));
        }
        tokio::select! {
            biased;
            () = group.stop.cancelled() => return,
            () = group.wake.notified() => {}
            () = tokio::time::sleep_until(wake_at) => {}
        }
    }
}

#[path = "sink.rs"]
mod sink;

pub use self::sink::{Encode, Flush, Sink, Socket};

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
