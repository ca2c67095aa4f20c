//! What a purpose group is ([`Group`]: its ring of events and live map,
//! its watchers, its wake-ups) and how it ends, shared by the hub
//! (`purpose.rs`) and the group's task (`purpose_run.rs`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::purpose_event::PurposeEvent;
use super::watch::{Read, Snapshot};
use crate::domain::{Failure, Purpose, ResourceDigest, Revocation};

/// Events a group keeps for `Last-Event-ID` resumption.
pub const RING: usize = 4096;

/// Reads at once while a group loads or re-lists.
pub(super) const READS_AT_ONCE: usize = 16;

/// A group outlives its last watcher by this much, so a watcher that comes
/// back (`Last-Event-ID`) within it resumes.
pub const LINGER: Duration = Duration::from_secs(30);

/// After a failed read or listing, a group tries again this much later.
pub(super) const RETRY: Duration = Duration::from_secs(1);

/// At most one full re-read of a purpose (a listing and a read of every
/// live lease) asked for by opening streams or missed events per this
/// gap: streams that open within it share the pass at its end, so N opens
/// in a burst cost one re-read, and a steady stream of opens at most one
/// per gap (their snapshots are at most this much later).
pub const RELIST_GAP: Duration = Duration::from_millis(250);

/// At most one `renewed` event per lease this often: a renewal sooner is
/// sent at the gap's end, from a fresh read.
pub const RENEWAL_GAP: Duration = Duration::from_secs(1);

/// At most this many `renewed` events per purpose per [`RENEWAL_GAP`]
/// (and as many reads of renewals held back): a purpose with many
/// renewing leases cannot flood its streams. A renewal past the budget is
/// owed at the window's end, the longest owed first.
pub const RENEWALS_PER_GAP: usize = 128;

/// A boxed future of the store calls a group makes.
pub(super) type Call<T> = Pin<Box<dyn Future<Output = Result<T, Failure>> + Send>>;

/// How a purpose group talks to the store.
#[derive(Clone)]
pub struct PurposeIo {
    /// Reads one resource (the watcher read).
    pub read: Read,
    /// The digests of the purpose's live leases (every page of a listing).
    pub live: Arc<dyn Fn(Purpose) -> Call<Vec<ResourceDigest>> + Send + Sync>,
    /// Marks the purpose watched in the store and answers how long to wait
    /// before every instance announces its changes (0: at once).
    pub mark: Arc<dyn Fn(Purpose) -> Call<Duration> + Send + Sync>,
}

/// What a group shows to new watchers, under one lock with the sequence.
pub(super) struct Ring {
    /// Picked at random when the group starts: ids of another group (an
    /// earlier one, another instance's) never resume here.
    pub(super) epoch: u32,
    /// The sequence number of the latest event (0: none yet).
    pub(super) head: u64,
    /// The latest events, oldest first.
    pub(super) events: VecDeque<Arc<PurposeEvent>>,
    /// The live leases as last read, by digest.
    pub(super) live: BTreeMap<ResourceDigest, Arc<Snapshot>>,
    /// When each live lease's last `renewed` went out.
    pub(super) renewals: HashMap<ResourceDigest, Instant>,
    /// Renewals held back by [`RENEWAL_GAP`] or [`RENEWALS_PER_GAP`]:
    /// when each is due, and since when it is owed (the longest owed go
    /// first when more are due than a window sends).
    pub(super) owed: HashMap<ResourceDigest, (Instant, Instant)>,
    /// The purpose's current window of `renewed` events: when it started
    /// and how many went out in it (at most [`RENEWALS_PER_GAP`]).
    pub(super) window: (Instant, usize),
}

/// Where a group's load stands.
#[derive(Debug, Clone)]
pub(super) enum Loaded {
    /// Not loaded yet.
    Pending,
    Ready,
    Failed(Failure),
}

/// One watched purpose on this instance.
pub(super) struct Group {
    pub(super) ring: Mutex<Ring>,
    pub(super) tx: broadcast::Sender<Arc<PurposeEvent>>,
    pub(super) loaded: watch::Receiver<Loaded>,
    /// Digests with events since the last read, with their hint bits.
    pub(super) pending: Mutex<HashMap<String, u8>>,
    /// Who broke which digest, since the last read of it.
    pub(super) revocations: Mutex<HashMap<String, Revocation>>,
    /// Set when events may have been missed, or a watcher wants a fresh
    /// snapshot: list again.
    pub(super) relist: AtomicBool,
    /// Fresh snapshots asked for by starting watchers (a counter) …
    pub(super) asked: AtomicU64,
    /// … and the last one served: every live lease read since it was asked.
    pub(super) refreshed: watch::Sender<u64>,
    pub(super) wake: Notify,
    pub(super) watchers: AtomicUsize,
    pub(super) stop: CancellationToken,
}

impl Group {
    pub(super) fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The groups of an instance, by purpose.
pub(super) type Groups = Mutex<HashMap<String, Arc<Group>>>;

/// The groups, locked.
pub(super) fn lock(groups: &Groups) -> MutexGuard<'_, HashMap<String, Arc<Group>>> {
    groups.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ends `group` when it has had no watcher since `idle_since` for
/// [`LINGER`]: true when it ended.
pub(super) fn end_if_idle(
    groups: &Groups,
    purpose: &Purpose,
    group: &Arc<Group>,
    idle_since: Instant,
) -> bool {
    idle_since.elapsed() >= LINGER && end_if_unwatched(groups, purpose, group)
}

/// Ends `group` when it has no watcher: true when it ended.
pub(super) fn end_if_unwatched(groups: &Groups, purpose: &Purpose, group: &Arc<Group>) -> bool {
    let mut map = lock(groups);
    if group.watchers.load(Ordering::Relaxed) > 0 {
        return false;
    }
    if map
        .get(purpose.as_str())
        .is_some_and(|g| Arc::ptr_eq(g, group))
    {
        map.remove(purpose.as_str());
    }
    group.stop.cancel();
    true
}
