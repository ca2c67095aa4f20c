//! A purpose group's task ([`run_group`]): mark, settle, load, then
//! follow events, expiries, renewals and re-lists; and how it turns a read
//! into an event ([`apply`]): a new version is a change, the same version
//! with a later renewal is `renewed`, coalesced to one per lease per
//! [`RENEWAL_GAP`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::sync::watch;
use tokio::time::Instant;

use super::purpose_event::{PurposeChange, PurposeEvent};
use super::purpose_group::{
    end_if_idle, end_if_unwatched, Group, Groups, Loaded, PurposeIo, Ring, LINGER, READS_AT_ONCE,
    RELIST_GAP, RENEWALS_PER_GAP, RENEWAL_GAP, RETRY, RING,
};
use super::watch::{classify, Snapshot, REFRESH};
use crate::domain::{Change, Failure, Inspection, Purpose, ResourceDigest, ResourceId, Revocation};
use crate::telemetry::WATCH_READS;

/// Reads `digests` of `purpose`, [`READS_AT_ONCE`] at a time; a failed
/// read leaves its digest out (and is counted).
async fn read_all(
    io: &PurposeIo,
    purpose: &Purpose,
    digests: Vec<ResourceDigest>,
) -> Vec<(ResourceDigest, Result<Snapshot, Failure>)> {
    futures_util::stream::iter(digests)
        .map(|digest| {
            let read = Arc::clone(&io.read);
            let resource = ResourceId {
                purpose: purpose.clone(),
                digest: digest.clone(),
            };
            async move {
                let result = read(resource).await.map(Snapshot::new);
                metrics::counter!(WATCH_READS, "result" => if result.is_ok() { "ok" } else { "error" })
                    .increment(1);
                (digest, result)
            }
        })
        .buffer_unordered(READS_AT_ONCE)
        .collect()
        .await
}

/// The group's task: mark, settle, load, then follow events, expiries and
/// re-lists until the last watcher leaves or shutdown.
pub(super) async fn run_group(
    groups: Arc<Groups>,
    group: Arc<Group>,
    loaded: watch::Sender<Loaded>,
    purpose: Purpose,
    io: PurposeIo,
) {
    let stop = group.stop.clone();
    let body = async {
        let mut marked_at = Instant::now();
        let settle = loop {
            match (io.mark)(purpose.clone()).await {
                Ok(settle) => break settle,
                Err(failure) => {
                    let _ = loaded.send(Loaded::Failed(failure));
                    // Its watchers were answered with the failure and left.
                    if end_if_unwatched(&groups, &purpose, &group) {
                        return;
                    }
                    tokio::time::sleep(RETRY).await;
                }
            }
        };
        // Every instance announces the purpose's changes from here on.
        tokio::time::sleep(settle).await;
        let mut relist = true;
        // When the last listing asked for (by opening streams, or missed
        // events) started: the next waits out `RELIST_GAP` after it.
        let mut listed_at: Option<Instant> = None;
        let mut idle_since: Option<Instant> = None;
        loop {
            if group.watchers.load(Ordering::Relaxed) == 0 {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if end_if_idle(&groups, &purpose, &group, since) {
                    return;
                }
            } else {
                idle_since = None;
            }
            let mut digests: Vec<ResourceDigest> = Vec::new();
            // The fresh snapshots this pass serves: those asked before it
            // decided to list (a watcher asks, then sets `relist`).
            let mut serves = None;
            let gap_end = listed_at.map(|at| at + RELIST_GAP);
            let held_off = gap_end.filter(|end| *end > Instant::now());
            let asked_for =
                !relist && held_off.is_none() && group.relist.swap(false, Ordering::AcqRel);
            if asked_for {
                listed_at = Some(Instant::now());
            }
            if relist || asked_for {
                serves = Some(group.asked.load(Ordering::Acquire));
                match (io.live)(purpose.clone()).await {
                    Ok(found) => {
                        digests = found;
                        relist = false;
                    }
                    Err(failure) => {
                        relist = true;
                        if matches!(*loaded.borrow(), Loaded::Pending | Loaded::Failed(_)) {
                            let _ = loaded.send(Loaded::Failed(failure));
                            if end_if_unwatched(&groups, &purpose, &group) {
                                return;
                            }
                        }
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                }
                let ring = group.ring();
                digests.extend(ring.live.keys().cloned());
            }
            let hints: HashMap<String, u8> =
                std::mem::take(&mut *group.pending.lock().unwrap_or_else(|p| p.into_inner()));
            let mut revocations: HashMap<String, Revocation> =
                std::mem::take(&mut *group.revocations.lock().unwrap_or_else(|p| p.into_inner()));
            for digest in hints.keys() {
                if let Ok(digest) = ResourceDigest::parse(digest) {
                    digests.push(digest);
                }
            }
            let now = Instant::now();
            let mut owed: Vec<ResourceDigest> = Vec::new();
            let mut more_owed = false;
            {
                let ring = group.ring();
                digests.extend(
                    ring.live
                        .iter()
                        .filter(|(_, s)| s.expires_at().is_some_and(|at| at <= now))
                        .map(|(d, _)| d.clone()),
                );
                // The longest owed first, at most a window's budget a pass.
                let mut due: Vec<(Instant, &ResourceDigest)> = ring
                    .owed
                    .iter()
                    .filter(|(_, (due, _))| *due <= now)
                    .map(|(d, (_, since))| (*since, d))
                    .collect();
                if due.len() > RENEWALS_PER_GAP {
                    due.select_nth_unstable(RENEWALS_PER_GAP - 1);
                    due.truncate(RENEWALS_PER_GAP);
                    more_owed = true;
                }
                owed.extend(due.into_iter().map(|(_, d)| d.clone()));
            }
            digests.extend(owed.iter().cloned());
            digests.sort();
            digests.dedup();
            let mut failed = false;
            // The first load fills the live map: what was live before the
            // first watcher came is the snapshot, not a change.
            let announce = matches!(*loaded.borrow(), Loaded::Ready);
            for (digest, result) in read_all(&io, &purpose, digests).await {
                let hint = hints.get(digest.as_str()).copied().unwrap_or(0);
                match result {
                    Ok(mut snapshot) => {
                        snapshot.revocation = revocations.remove(digest.as_str());
                        let owed = owed.contains(&digest);
                        apply(&group, digest, snapshot, hint, announce, owed);
                    }
                    Err(_) => {
                        // Read again at the retry, with the hints it had.
                        failed = true;
                        let mut pending = group.pending.lock().unwrap_or_else(|p| p.into_inner());
                        *pending.entry(digest.as_str().to_owned()).or_default() |= hint;
                    }
                }
            }
            if !announce {
                let _ = loaded.send(Loaded::Ready);
            }
            if let Some(asked) = serves {
                group.refreshed.send_if_modified(|done| {
                    let newer = asked > *done;
                    *done = (*done).max(asked);
                    newer
                });
            }
            if marked_at.elapsed() >= REFRESH && (io.mark)(purpose.clone()).await.is_ok() {
                marked_at = Instant::now();
            }
            let soonest = {
                let ring = group.ring();
                let ends = ring.live.values().filter_map(|s| s.expires_at());
                // A renewal owed and past due failed its read: `RETRY`.
                let owed = ring
                    .owed
                    .values()
                    .map(|(due, _)| *due)
                    .filter(|due| *due > now);
                ends.chain(owed).min()
            };
            let mut wake_at = marked_at + REFRESH;
            if let Some(since) = idle_since {
                wake_at = wake_at.min(since + LINGER);
            }
            if failed {
                wake_at = wake_at.min(Instant::now() + RETRY);
            }
            if more_owed {
                // Renewals owed past the pass's budget: at the next window.
                let window_end = group.ring().window.0 + RENEWAL_GAP;
                wake_at = wake_at.min(window_end.max(Instant::now() + Duration::from_millis(10)));
            }
            if let (Some(end), true) = (held_off, group.relist.load(Ordering::Acquire)) {
                // A listing asked for within the gap: at its end.
                wake_at = wake_at.min(end);
            }
            if let Some(at) = soonest {
                // +1 ms: the remaining time is truncated to whole milliseconds.
                wake_at = wake_at.min(at + Duration::from_millis(1));
            }
            tokio::select! {
                () = group.wake.notified() => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    };
    tokio::select! {
        biased;
        () = stop.cancelled() => {}
        () = body => {}
    }
}

/// Whether `new` was renewed since `old` (same version): a later
/// `renewedAt`, or a permit renewed.
fn renewed(old: &Inspection, new: &Inspection) -> bool {
    let marks = |i: &Inspection| {
        i.permits
            .iter()
            .map(|p| (p.fencing_token, p.renewed_at))
            .collect::<Vec<_>>()
    };
    old.renewed_at != new.renewed_at || marks(old) != marks(new)
}

/// A read of `digest`: an event when its version differs from the live
/// map's (a resource the map does not know and nobody holds is no event),
/// or `renewed` when only its renewal moved (`owed`: a renewal held back
/// by the gap is due now, send it whatever the read shows); without
/// `announce` (the first load) only the live map is filled.
fn apply(
    group: &Group,
    digest: ResourceDigest,
    snapshot: Snapshot,
    hint: u8,
    announce: bool,
    owed: bool,
) {
    let snapshot = Arc::new(snapshot);
    let mut ring = group.ring();
    if !announce {
        if snapshot.inspection.held {
            ring.live.insert(digest, snapshot);
        }
        return;
    }
    let change = match ring.live.get(&digest) {
        Some(old) if old.version() == snapshot.version() => {
            let moved = owed || renewed(&old.inspection, &snapshot.inspection);
            // The fresher countdown, for new watchers' snapshots.
            ring.live.insert(digest.clone(), Arc::clone(&snapshot));
            if !moved || held_back(&mut ring, &digest) {
                return;
            }
            PurposeChange::Renewed
        }
        Some(old) => PurposeChange::Changed(classify(old, &snapshot, hint)),
        None if snapshot.inspection.held => PurposeChange::Changed(Change::Acquired),
        None => return,
    };
    if let PurposeChange::Changed(_) = change {
        // The change's event carries the renewal too.
        ring.owed.remove(&digest);
    }
    if snapshot.inspection.held {
        ring.live.insert(digest.clone(), Arc::clone(&snapshot));
    } else {
        ring.live.remove(&digest);
        ring.renewals.remove(&digest);
    }
    ring.head += 1;
    let event = Arc::new(PurposeEvent {
        epoch: ring.epoch,
        seq: ring.head,
        change,
        digest,
        snapshot,
        encoded: std::sync::OnceLock::new(),
    });
    if ring.events.len() >= RING {
        ring.events.pop_front();
    }
    ring.events.push_back(Arc::clone(&event));
    // Under the ring's lock: a watcher that starts takes the ring and
    // subscribes in one step, so it misses nothing and sees nothing twice.
    let _ = group.tx.send(event);
}

/// A renewal of `digest` now: true when its last `renewed` went out less
/// than [`RENEWAL_GAP`] ago, or the purpose's window has sent
/// [`RENEWALS_PER_GAP`] already (then it is owed at the gap's or the
/// window's end, and the group reads the lease again then), else false
/// and the time is noted.
fn held_back(ring: &mut Ring, digest: &ResourceDigest) -> bool {
    let now = Instant::now();
    if let Some(last) = ring.renewals.get(digest) {
        let due = *last + RENEWAL_GAP;
        if now < due {
            owe(ring, digest, due, now);
            return true;
        }
    }
    if now >= ring.window.0 + RENEWAL_GAP {
        ring.window = (now, 0);
    }
    if ring.window.1 >= RENEWALS_PER_GAP {
        let due = ring.window.0 + RENEWAL_GAP;
        owe(ring, digest, due, now);
        return true;
    }
    ring.window.1 += 1;
    ring.renewals.insert(digest.clone(), now);
    ring.owed.remove(digest);
    false
}

/// Owes `digest` a `renewed` at `due`, owed since `now` unless it was
/// owed already (then since then: the longest owed go first).
fn owe(ring: &mut Ring, digest: &ResourceDigest, due: Instant, now: Instant) {
    let since = ring.owed.get(digest).map_or(now, |(_, since)| *since);
    ring.owed.insert(digest.clone(), (due, since));
}
