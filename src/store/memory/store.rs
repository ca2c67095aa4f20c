//! [`MemoryStore`]: the verbs over one map, under one lock; the expiry
//! sweeper in the background.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::domain::Change;
use crate::domain::{
    Attempt, HistoryBound, HistoryEntry, HistoryEvent, HolderLabel, ListCursor, Mode, Purpose,
    ResourceDigest, ResourceId, StoreTime, Ttl,
};
use crate::notify::WaitRegistry;
use crate::store::{
    AcquireSpec, Contention, Moved, Probe, Readiness, StoreAcquire, StoreError, StoreInspect,
    StoreLease, StoreListed, StorePage, StoreRelease, StoreRenew, PERMITS_SHOWN,
};

use super::history::{of, Histories};
use super::records::{Entry, Permit, Tomb};

#[path = "operator.rs"]
mod operator;
#[path = "queue.rs"]
mod queue;
#[path = "residue.rs"]
pub(super) mod residue;
/// Most shared holders at once (as on Redis).
const SHARED_CAP: usize = 10_000;

struct State {
    /// Ordered by `<purpose>:<digest>`, so a purpose's leases are a range.
    leases: BTreeMap<String, Entry>,
    last_fence: u64,
    /// One counter for every change in this process: a resource's version
    /// is `<stamp of its last change>.<live holders>`.
    changes: u64,
    /// The change stamps of resources that are free again, so their version
    /// stays put; bounded (cleared when it outgrows the lease cap, which at
    /// worst makes a free resource's version `0.0`, still different from
    /// any held version).
    freed: HashMap<String, u64>,
    /// Broken permits' tombstones by resource, until each would have
    /// expired (see [`operator`]).
    tombs: HashMap<String, Vec<Tomb>>,
    /// Each resource's history (docs/decisions/storage-v2.md, "History").
    history: Histories,
}

/// In-process lease store for a single instance.
pub struct MemoryStore {
    state: Mutex<State>,
    max_leases: usize,
    waiters: Arc<WaitRegistry>,
    /// The fair queue's places, kept to be read (see [`queue`]).
    queues: super::records::Queues,
    pub(in crate::store) sessions: crate::store::MemorySessions, // §18
}

fn wall_ms() -> StoreTime {
    StoreTime(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    )
}

impl MemoryStore {
    /// A store holding at most `max_leases` resources, each with a history
    /// within `history`; releases wake `waiters`.
    pub fn new(max_leases: usize, history: HistoryBound, waiters: Arc<WaitRegistry>) -> Self {
        Self {
            state: Mutex::new(State {
                leases: BTreeMap::new(),
                last_fence: 0,
                changes: 0,
                freed: HashMap::new(),
                tombs: HashMap::new(),
                history: Histories::new(history, max_leases),
            }),
            max_leases,
            waiters,
            queues: super::records::Queues::default(),
            sessions: crate::store::MemorySessions::new(max_leases),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-written
        // (every mutation completes before the guard drops), so poisoning is
        // ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks up a resource, writing the expiries it finds to the history,
    /// pruning what is over and dropping it when nothing is left.
    fn entry<'a>(state: &'a mut State, key: &str, now: Instant) -> Option<&'a mut Entry> {
        let empty = match state.leases.get_mut(key) {
            Some(e) => {
                state.history.note_expiries(key, e, now);
                e.prune(now);
                e.permits.is_empty()
            }
            None => false,
        };
        if empty {
            Self::forget(state, key);
        }
        state.leases.get_mut(key)
    }

    /// Removes a resource, keeping its change stamp for the version.
    fn forget(state: &mut State, key: &str) {
        if let Some(entry) = state.leases.remove(key) {
            if state.freed.len() >= state.leases.len().max(1024) * 2 {
                state.freed.clear();
            }
            state.freed.insert(key.to_owned(), entry.changes);
        }
    }

    fn next_fence(state: &mut State) -> u64 {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        state.last_fence = (state.last_fence + 1).max(now_us);
        state.last_fence
    }

    pub(in crate::store) async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        spec: &AcquireSpec<'_>,
    ) -> Result<StoreAcquire, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let shape = spec.shape;
        let owner = attempt.owner_token.expose();
        let mut state = self.lock();
        let mut returning = false;
        if let Some(entry) = Self::entry(&mut state, &key, now) {
            if let Some(p) = entry
                .permits
                .iter_mut()
                .find(|p| p.is(attempt) && p.live(now))
            {
                p.claimed = true;
                return Ok(StoreAcquire::Replayed(p.record(now)));
            }
            if let Some(end) = entry.delay(now, Some(owner)) {
                let left = end.saturating_duration_since(now);
                return Ok(StoreAcquire::Contended {
                    remaining_ms: Some(u64::try_from(left.as_millis()).unwrap_or(1).max(1)),
                    why: Contention::LockDelay,
                    moved: Moved::Stayed,
                });
            }
            returning = entry.returning(owner, now);
            let live = entry.live_count(now);
            if live > 0 {
                let held = |why| StoreAcquire::Contended {
                    remaining_ms: entry.soonest_ms(now),
                    why,
                    moved: Moved::Stayed,
                };
                let plain = shape.is_plain() && entry.limit == 1 && entry.mode == Mode::Exclusive;
                if plain
                    && entry
                        .live(now)
                        .any(|p| p.owned_by(attempt.owner_token.expose()))
                {
                    return Ok(StoreAcquire::OwnerOperationConflict {
                        remaining_ms: entry.soonest_ms(now),
                    });
                }
                if entry.mode != shape.mode {
                    return Ok(held(Contention::Held));
                }
                match shape.mode {
                    Mode::Exclusive if entry.limit != shape.limit => {
                        return Ok(StoreAcquire::LimitMismatch { limit: entry.limit });
                    }
                    Mode::Exclusive if live >= shape.limit as usize => {
                        return Ok(held(Contention::Held));
                    }
                    Mode::Shared if live >= SHARED_CAP => {
                        return Ok(held(Contention::Held));
                    }
                    _ => {}
                }
            }
        }
        // Fair: a caller that does not wait goes only when nobody waits
        // (an owner back within its own lock-delay goes at once).
        if spec.queue.queued_as().is_none() && !returning && self.waiters.is_waited_for(&key) {
            return Ok(StoreAcquire::Contended {
                remaining_ms: None,
                why: Contention::Queued,
                moved: Moved::Stayed,
            });
        }
        if !state.leases.contains_key(&key) && state.leases.len() >= self.max_leases {
            Self::sweep(&mut state, now);
            if state.leases.len() >= self.max_leases {
                return Err(StoreError::Unavailable("embedded store is full"));
            }
        }
        let fencing_token = Self::next_fence(&mut state);
        state.changes += 1;
        let changes = state.changes;
        state.freed.remove(&key);
        let at = wall_ms();
        let permit = Permit {
            owner_token: attempt.owner_token.expose().to_owned(),
            operation_id: attempt.operation_id.as_str().to_owned(),
            fencing_token,
            expires_at: now + spec.ttl.duration(),
            lock_delay: Duration::from_millis(shape.lock_delay_ms),
            ttl_ms: spec.ttl.ms(),
            acquired_at: at,
            renewed_at: at,
            holder: spec.holder.cloned(),
            max_hold_ms: spec.max_hold_ms,
            claimed: false,
            noted: false,
            session: spec.session.cloned(),
        };
        let record = StoreLease {
            remaining_ms: spec.ttl.ms(),
            ..permit.record(now)
        };
        let entry = state.leases.entry(key.clone()).or_insert_with(|| Entry {
            limit: shape.limit,
            mode: shape.mode,
            permits: Vec::new(),
            changes,
        });
        // The owner's expired permits go: coming back ends their delay.
        entry.permits.retain(|p| p.live(now) || !p.owned_by(owner));
        if entry.permits.iter().all(|p| !p.live(now)) {
            entry.limit = shape.limit;
            entry.mode = shape.mode;
        }
        let version = format!("{changes}.{}", entry.live_count(now) + 1);
        let acquired = of(&permit, HistoryEvent::Acquired, at, &version);
        entry.permits.push(permit);
        entry.changes = changes;
        state.history.push(&key, acquired);
        drop(state);
        self.waiters.changed(&key, Change::Acquired);
        Ok(StoreAcquire::Acquired(record))
    }

    pub(in crate::store) async fn renew(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Ttl,
        holder: Option<&HolderLabel>,
    ) -> Result<StoreRenew, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        let stamp = state.changes + 1;
        let mut held_out = None;
        let (answer, relabelled) = match Self::entry(&mut state, &key, now) {
            None => (StoreRenew::Absent, None),
            Some(entry) => {
                let others = entry.live(now).filter(|p| !p.is(attempt)).count();
                match entry
                    .permits
                    .iter_mut()
                    .find(|p| p.is(attempt) && p.live(now))
                {
                    None if others > 0 => (StoreRenew::NotOwner, None),
                    None => (StoreRenew::Absent, None),
                    Some(p) => {
                        // At its hold bound a renewal is granted the time
                        // left, and the tombstone says why it ends there.
                        let renewed_at = wall_ms();
                        let mut granted_ms = ttl.ms();
                        if let Some(bound) = p.max_hold_ms {
                            let end = p.acquired_at.0.saturating_add(bound);
                            if renewed_at.0.saturating_add(granted_ms) >= end {
                                granted_ms = end.saturating_sub(renewed_at.0).max(1);
                                let until =
                                    now + Duration::from_millis(granted_ms) + ttl.duration();
                                held_out = Some(Tomb::held_out(p, until));
                            }
                        }
                        p.expires_at = now + Duration::from_millis(granted_ms);
                        p.ttl_ms = granted_ms;
                        p.renewed_at = renewed_at;
                        p.claimed = true;
                        let relabelled = holder.is_some_and(|h| p.holder.as_ref() != Some(h));
                        if relabelled {
                            p.holder = holder.cloned();
                        }
                        let record = StoreLease {
                            remaining_ms: granted_ms,
                            ..p.record(now)
                        };
                        let relabel = relabelled
                            .then(|| of(p, HistoryEvent::HolderChanged, p.renewed_at, ""));
                        if relabelled {
                            entry.changes = stamp;
                        }
                        (
                            StoreRenew::Renewed(record),
                            relabel.map(|e| HistoryEntry {
                                version: format!("{stamp}.{}", others + 1),
                                ..e
                            }),
                        )
                    }
                }
            }
        };
        let relabelled = relabelled.is_some_and(|e| {
            state.changes = stamp;
            state.history.push(&key, e);
            true
        });
        if let Some(tomb) = held_out {
            state.entomb(&key, tomb, now);
        }
        let answer = match answer {
            StoreRenew::Absent | StoreRenew::NotOwner => state
                .ended(&key, attempt, now)
                .map_or(answer, StoreRenew::Ended),
            answer => answer,
        };
        drop(state);
        if relabelled {
            self.waiters.changed(&key, Change::HolderChanged);
        }
        Ok(answer)
    }

    /// The clean-up release of an acquisition whose waiter left: true when
    /// the permit went, false when it was claimed or renewed since.
    pub(in crate::store) async fn release_abandoned(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
    ) -> Result<bool, StoreError> {
        Ok(matches!(
            self.release_as(resource, attempt, true, HistoryEvent::Released)
                .await?,
            StoreRelease::Released { .. }
        ))
    }

    pub(in crate::store) async fn release_as(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        abandoned: bool,
        event: HistoryEvent,
    ) -> Result<StoreRelease, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let outcome = {
            let mut state = self.lock();
            let mut released = None;
            let (outcome, empty) = match Self::entry(&mut state, &key, now) {
                None => (StoreRelease::AlreadyAbsent, false),
                Some(entry) => {
                    // The released permit's acquiredAt, for its hold time.
                    let mut acquired_at = None;
                    let mut gone = None;
                    entry.permits.retain(|p| {
                        let goes = p.is(attempt) && p.live(now) && !(abandoned && p.claimed);
                        if goes {
                            acquired_at = Some(p.acquired_at);
                            gone = Some(of(p, event.clone(), wall_ms(), ""));
                        }
                        !goes
                    });
                    if let (Some(acquired_at), Some(gone)) = (acquired_at, gone) {
                        let version = format!("{}.{}", entry.changes, entry.live_count(now));
                        let held_ms = gone.at.0.saturating_sub(acquired_at.0);
                        released = Some(HistoryEntry { version, ..gone });
                        (StoreRelease::Released { held_ms }, entry.permits.is_empty())
                    } else if entry.live_count(now) > 0 {
                        (StoreRelease::NotOwner, false)
                    } else {
                        (StoreRelease::AlreadyAbsent, false)
                    }
                }
            };
            if let Some(released) = released {
                state.history.push(&key, released);
            }
            if empty {
                Self::forget(&mut state, &key);
            }
            match outcome {
                StoreRelease::AlreadyAbsent | StoreRelease::NotOwner => state
                    .ended(&key, attempt, now)
                    .map_or(outcome, StoreRelease::Ended),
                outcome => outcome,
            }
        };
        if matches!(outcome, StoreRelease::Released { .. }) {
            self.waiters.changed(&key, Change::Released);
        }
        Ok(outcome)
    }

    pub(in crate::store) async fn inspect(
        &self,
        resource: &ResourceId,
        probe: Probe<'_>,
        _watching: bool,
    ) -> Result<StoreInspect, StoreError> {
        let key = resource.tag();
        let now = Instant::now();
        let mut state = self.lock();
        // Prune first: an entry that just ran out leaves its stamp in `freed`.
        let _ = Self::entry(&mut state, &key, now);
        let freed = state.freed.get(&key).copied().unwrap_or(0);
        Ok(match state.leases.get_mut(&key) {
            None => StoreInspect::Free {
                version: format!("{freed}.0"),
                lock_delay_ms: None,
            },
            Some(entry) => {
                let (holders, permits) = shown(entry.live(now).map(|p| p.record(now)));
                let version = format!("{}.{}", entry.changes, holders);
                let lock_delay_ms = entry.delay(now, None).map(|end| {
                    let left = end.saturating_duration_since(now);
                    u64::try_from(left.as_millis()).unwrap_or(1).max(1)
                });
                if permits.is_empty() {
                    StoreInspect::Free {
                        version,
                        lock_delay_ms,
                    }
                } else {
                    StoreInspect::Held {
                        holders,
                        lock_delay_ms,
                        held_by: entry.probed(probe, now),
                        limit: entry.limit,
                        mode: entry.mode,
                        permits,
                        version,
                    }
                }
            }
        })
    }

    /// A purpose's leases are the key range `<purpose>:…`, in digest order;
    /// the cursor is the last digest returned, so a lease held throughout a
    /// listing is on exactly one page. Entries without a live permit (not
    /// yet swept, or only a lock-delay left) are skipped, not removed: a
    /// listing takes no write path.
    pub(in crate::store) async fn list(
        &self,
        purpose: &Purpose,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<StorePage, StoreError> {
        use std::ops::Bound;
        let prefix = format!("{purpose}:");
        let start = match cursor {
            Some(ListCursor::After(digest)) => Bound::Excluded(format!("{prefix}{digest}")),
            // `Store::accepts` keeps other cursors out; start over if one came.
            _ => Bound::Included(prefix.clone()),
        };
        let now = Instant::now();
        let state = self.lock();
        let mut held = state
            .leases
            .range::<String, _>((start, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(&prefix))
            .filter(|(_, entry)| entry.live_count(now) > 0);
        let mut leases = Vec::with_capacity(limit.min(1000));
        for (key, entry) in held.by_ref().take(limit) {
            let digest = ResourceDigest::parse(&key[prefix.len()..])
                .map_err(|_| StoreError::Unavailable("embedded store key is not a digest"))?;
            let (holders, permits) = shown(entry.live(now).map(|p| p.record(now)));
            leases.push(StoreListed {
                digest,
                holders,
                permits,
                limit: entry.limit,
                mode: entry.mode,
            });
        }
        let more = held.next().is_some();
        let next = match leases.last() {
            Some(last) if more => Some(ListCursor::After(last.digest.clone())),
            _ => None,
        };
        Ok(StorePage { leases, next })
    }

    pub(in crate::store) async fn readiness(&self) -> Readiness {
        Readiness {
            topology: "memory",
            writable: true,
            detail: None,
        }
    }

    /// Number of entries currently in the map (live or not yet swept).
    pub fn len(&self) -> usize {
        self.lock().leases.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(in crate::store) fn start_background(self: &Arc<Self>, shutdown: CancellationToken) {
        tracing::warn!(
            "using the embedded in-memory store: leases are held by this process only; \
             run a single instance, or set LEASEHOLD_REDIS_URL to share leases between instances"
        );
        // Sweep expired entries so that resources never touched again do not
        // accumulate. Expiry itself is exact without it (checked on access).
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let Some(store) = weak.upgrade() else { break };
                let now = Instant::now();
                let mut state = store.lock();
                Self::sweep(&mut state, now);
                state.drop_ended(now, wall_ms());
            }
        });
    }

    /// Drops every resource with nothing left, writing the expiries it
    /// finds to the history first.
    fn sweep(state: &mut State, now: Instant) {
        let State {
            leases, history, ..
        } = &mut *state;
        let over: Vec<String> = leases
            .iter_mut()
            .filter_map(|(k, e)| {
                history.note_expiries(k, e, now);
                e.prune(now);
                e.permits.is_empty().then(|| k.clone())
            })
            .collect();
        for k in over {
            Self::forget(state, &k);
        }
    }

    /// The newest `limit` entries of `resource`'s history, within the age
    /// bound; the expiries the store can see are written first.
    pub(in crate::store) async fn history(
        &self,
        resource: &ResourceId,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let key = resource.tag();
        let mut state = self.lock();
        let _ = Self::entry(&mut state, &key, Instant::now());
        Ok(state.history.read(&key, limit, wall_ms()))
    }

    /// What this store keeps of a history.
    pub(in crate::store) fn history_bound(&self) -> HistoryBound {
        self.lock().history.bound()
    }
}

/// How many permits are live, and the [`PERMITS_SHOWN`] oldest of them (by
/// fencing token), oldest first: what the inspect script answers.
fn shown(live: impl Iterator<Item = StoreLease>) -> (u32, Vec<StoreLease>) {
    let mut permits: Vec<StoreLease> = live.collect();
    let holders = u32::try_from(permits.len()).unwrap_or(u32::MAX);
    permits.sort_by_key(|p| p.fencing_token);
    permits.truncate(PERMITS_SHOWN);
    (holders, permits)
}
