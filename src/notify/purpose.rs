//! Purpose-wide watches (docs/watching.md, "Watching a purpose"): every
//! change of every lease of a purpose, for any number of watchers on this
//! instance, from one *purpose group* per purpose.
//!
//! A group
//!
//! - marks the purpose watched in the store (`mark`), so every instance
//!   announces acquires and holder changes of the purpose's resources, and
//!   waits the store's settle time before it looks;
//! - lists the live leases (`live`) and reads each: its *live map*;
//! - reads a resource again on every event for it ([`PurposeHub::changed`],
//!   fed by the same wake-up channel as waits and watches), at its holders'
//!   expiry (a timer), and every live resource when events may have been
//!   missed ([`PurposeHub::changed_all`]: it lists again);
//! - turns each read whose version differs from the live map's into one
//!   event (the kind as [`super::watch`] classifies it), numbered in a
//!   per-group sequence, kept in a ring of the last [`RING`] events for
//!   resumption and sent on a bounded broadcast channel to its watchers.
//!
//! A watcher starts from the live map (a snapshot) or, resuming with an
//! event id still in the ring, from the events after it. A watcher that
//! falls [`WATCHER_BUFFER`] events behind is told so ([`Next::Lagged`]) and
//! starts again from a snapshot: a slow watcher never holds up the group or
//! the others. The group ends with its last watcher, or at shutdown.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};
use tokio_util::sync::CancellationToken;

use super::purpose_event::{event_id, parse_id, PurposeEvent};
use super::purpose_group::{lock, Group, Groups, Loaded, Ring};
pub use super::purpose_group::{PurposeIo, RING};
use super::purpose_run::run_group;
use super::watch::{hint_bit, Admitted, Snapshot};
use crate::domain::{Change, Failure, Purpose, ResourceDigest, ResourceId, Revocation};
use crate::telemetry::WATCH_EVENTS;

/// Events a watcher may fall behind before it starts over from a snapshot.
pub const WATCHER_BUFFER: usize = 1024;

/// How long a new watcher waits for the group to read every live lease
/// afresh before its snapshot (§17: the snapshot is true when the stream
/// opens); past it (the store is slow or failing) it gets the live map as
/// last read.
const FRESH_WAIT: Duration = Duration::from_secs(5);

/// Purposes [`PurposeHub::seen`] remembers, at most.
pub const SEEN_PURPOSES: usize = 256;

/// The purpose watchers of this instance (cheap to clone), and the
/// purposes it has served.
#[derive(Clone, Default)]
pub struct PurposeHub {
    groups: Arc<Groups>,
    /// The last `SEEN_PURPOSES` purposes a lease was acquired in.
    seen: Arc<std::sync::RwLock<Seen>>,
}

/// Purposes in the order they were first seen, the oldest forgotten first.
#[derive(Default)]
struct Seen {
    set: std::collections::BTreeSet<String>,
    order: VecDeque<String>,
}

impl PurposeHub {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Group>>> {
        lock(&self.groups)
    }

    /// A lease was acquired in `purpose`: remembered, the oldest of
    /// `SEEN_PURPOSES` forgotten to make room (so junk purposes cannot
    /// freeze the list; a purpose seen again keeps its place).
    pub fn seen(&self, purpose: &Purpose) {
        let name = purpose.as_str();
        if self
            .seen
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .set
            .contains(name)
        {
            return;
        }
        let mut seen = self.seen.write().unwrap_or_else(|p| p.into_inner());
        if seen.set.contains(name) {
            return;
        }
        while seen.order.len() >= SEEN_PURPOSES {
            let Some(oldest) = seen.order.pop_front() else {
                break;
            };
            seen.set.remove(&oldest);
        }
        seen.set.insert(name.to_owned());
        seen.order.push_back(name.to_owned());
    }

    /// The purposes this instance has seen a lease acquired in (the last
    /// `SEEN_PURPOSES`), sorted.
    pub fn seen_purposes(&self) -> Vec<String> {
        let seen = self.seen.read().unwrap_or_else(|p| p.into_inner());
        seen.set.iter().cloned().collect()
    }

    /// `change` (when known) happened to `tag` (`<purpose>:<digest>`).
    pub fn changed(&self, tag: &str, change: Option<Change>) {
        let Some((purpose, digest)) = tag.split_once(':') else {
            return;
        };
        if let Some(group) = self.map().get(purpose) {
            let mut pending = group.pending.lock().unwrap_or_else(|p| p.into_inner());
            *pending.entry(digest.to_owned()).or_default() |= hint_bit(change);
            drop(pending);
            group.wake.notify_one();
        }
    }

    /// This instance renewed `resource`: a watched purpose's group reads
    /// it again and sends `renewed` (renewals through other instances are
    /// not announced: the group sees them when it reads the lease, at the
    /// latest at the end it last read).
    pub fn renewed(&self, resource: &ResourceId) {
        let map = self.map();
        if let Some(group) = map.get(resource.purpose.as_str()) {
            let mut pending = group.pending.lock().unwrap_or_else(|p| p.into_inner());
            *pending
                .entry(resource.digest.as_str().to_owned())
                .or_default() |= hint_bit(None);
            drop(pending);
            group.wake.notify_one();
        }
    }

    /// An operator broke `tag` (or permits of it): its next event is
    /// `revoked`, carrying `revocation`.
    pub fn revoked(&self, tag: &str, revocation: Revocation) {
        let Some((purpose, digest)) = tag.split_once(':') else {
            return;
        };
        if let Some(group) = self.map().get(purpose) {
            group
                .revocations
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(digest.to_owned(), revocation);
        }
        self.changed(tag, Some(Change::Revoked));
    }

    /// Events may have been missed: every group lists its purpose again.
    pub fn changed_all(&self) {
        for group in self.map().values() {
            group.relist.store(true, Ordering::Release);
            group.wake.notify_one();
        }
    }

    /// Purposes watched on this instance.
    pub fn groups(&self) -> usize {
        self.map().len()
    }

    /// Registers a watcher of `purpose` (the caller has counted it against
    /// the watch cap, `admitted`). The first starts the purpose's group.
    pub fn join(
        &self,
        purpose: &Purpose,
        io: impl FnOnce() -> PurposeIo,
        shutdown: &CancellationToken,
        admitted: Admitted,
    ) -> PurposeWatcher {
        let mut map = self.map();
        let group = match map.get(purpose.as_str()) {
            Some(group) => Arc::clone(group),
            None => {
                let (loaded_tx, loaded) = watch::channel(Loaded::Pending);
                let (tx, _) = broadcast::channel(WATCHER_BUFFER);
                let group = Arc::new(Group {
                    ring: Mutex::new(Ring {
                        epoch: epoch(),
                        head: 0,
                        events: VecDeque::new(),
                        live: BTreeMap::new(),
                        renewals: HashMap::new(),
                        owed: HashMap::new(),
                        window: (tokio::time::Instant::now(), 0),
                    }),
                    tx,
                    loaded,
                    pending: Mutex::new(HashMap::new()),
                    revocations: Mutex::new(HashMap::new()),
                    relist: AtomicBool::new(false),
                    asked: AtomicU64::new(0),
                    refreshed: watch::Sender::new(0),
                    wake: Notify::new(),
                    watchers: AtomicUsize::new(0),
                    stop: shutdown.child_token(),
                });
                map.insert(purpose.as_str().to_owned(), Arc::clone(&group));
                tokio::spawn(run_group(
                    Arc::clone(&self.groups),
                    Arc::clone(&group),
                    loaded_tx,
                    purpose.clone(),
                    io(),
                ));
                group
            }
        };
        group.watchers.fetch_add(1, Ordering::Relaxed);
        drop(map);
        PurposeWatcher {
            hub: self.clone(),
            group,
            rx: None,
            _admitted: admitted,
        }
    }
}

/// A random epoch (0 when the system has no randomness to give: ids then
/// still resume only within this group's sequence, as the ring is checked).
fn epoch() -> u32 {
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    u32::from_le_bytes(bytes)
}

/// How a watcher starts.
#[derive(Debug)]
pub enum Start {
    /// Resumed: the events after the id it named (possibly none).
    Resumed(Vec<Arc<PurposeEvent>>),
    /// A snapshot of the live leases (digest, state as of now) and the id
    /// the changes after it follow; `reset` when the watcher named an id
    /// this group cannot resume from.
    Snapshot {
        reset: bool,
        leases: Vec<(ResourceDigest, Arc<Snapshot>)>,
        id: String,
    },
}

/// The next thing a watcher hears.
#[derive(Debug)]
pub enum Next {
    /// A change.
    Event(Arc<PurposeEvent>),
    /// It fell behind by more than [`WATCHER_BUFFER`] events: start over.
    Lagged,
}

/// One purpose watcher; dropping it unregisters it, and the last one ends
/// the group.
pub struct PurposeWatcher {
    hub: PurposeHub,
    group: Arc<Group>,
    rx: Option<broadcast::Receiver<Arc<PurposeEvent>>>,
    _admitted: Admitted,
}

impl PurposeWatcher {
    /// Waits for the group's first load, then starts: from `last_event_id`
    /// when the ring still holds every event after it, else from a snapshot.
    /// From here on [`PurposeWatcher::next`] reports the changes after it.
    pub async fn start(&mut self, last_event_id: Option<&str>) -> Result<Start, Failure> {
        let mut loaded = self.group.loaded.clone();
        loop {
            let state = loaded.borrow_and_update().clone();
            match state {
                Loaded::Ready => break,
                Loaded::Failed(failure) => return Err(failure),
                Loaded::Pending => {
                    if loaded.changed().await.is_err() {
                        return Err(Failure::Unavailable {
                            retry_after_ms: 1000,
                        });
                    }
                }
            }
        }
        let asked = last_event_id.map(|id| (id, parse_id(id)));
        let resumable = |ring: &Ring| match asked {
            Some((_, Some((epoch, seq)))) => {
                let oldest = ring.events.front().map_or(ring.head + 1, |e| e.seq);
                epoch == ring.epoch && seq <= ring.head && seq + 1 >= oldest
            }
            _ => false,
        };
        if !resumable(&self.group.ring()) {
            self.fresh().await;
        }
        let ring = self.group.ring();
        self.rx = Some(self.group.tx.subscribe());
        if let (true, Some((_, Some((_, seq))))) = (resumable(&ring), asked) {
            let after = ring.events.iter().filter(|e| e.seq > seq).cloned();
            return Ok(Start::Resumed(after.collect()));
        }
        Ok(Start::Snapshot {
            reset: asked.is_some(),
            leases: ring
                .live
                .iter()
                .map(|(d, s)| (d.clone(), Arc::clone(s)))
                .collect(),
            id: event_id(ring.epoch, ring.head),
        })
    }

    /// Has the group read every live lease afresh (a renewal sends an
    /// event, but one through another instance is seen only when the
    /// group reads the lease), waiting at most [`FRESH_WAIT`]. Watchers
    /// starting together share one pass.
    async fn fresh(&self) {
        let group = &self.group;
        let ask = group.asked.fetch_add(1, Ordering::AcqRel) + 1;
        let mut served = group.refreshed.subscribe();
        group.relist.store(true, Ordering::Release);
        group.wake.notify_one();
        let _ = tokio::time::timeout(FRESH_WAIT, served.wait_for(|done| *done >= ask)).await;
    }

    /// The next change; `None` when the group ended (shutdown). Cancel-safe.
    pub async fn next(&mut self) -> Option<Next> {
        let rx = self.rx.as_mut()?;
        match rx.recv().await {
            Ok(event) => {
                metrics::counter!(WATCH_EVENTS, "kind" => event.change.as_str()).increment(1);
                Some(Next::Event(event))
            }
            Err(broadcast::error::RecvError::Lagged(_)) => Some(Next::Lagged),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

impl Drop for PurposeWatcher {
    fn drop(&mut self) {
        // The group lingers: its task ends it [`LINGER`] after this, unless
        // a watcher joins (both under the hub's map lock).
        let map = self.hub.map();
        if self.group.watchers.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.group.wake.notify_one();
        }
        drop(map);
    }
}

#[cfg(test)]
#[path = "purpose_tests.rs"]
mod tests;
