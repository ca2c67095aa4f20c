//! The state a [`Session`](super::Session) shares with its keep-alive task
//! and its leases' tasks: its validity ([`HandleCore`]), its end (once),
//! and the attached leases it settles on every renewal and at its end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::api::Client;
use super::handle::{LeaseHandle, Shared as HandleShared};
use super::machine::{HandleCore, LeaseState, ReleaseReply, RenewReply};
use super::session_wire::{LostLease, SessionGone, SessionInfo};
use super::watchdog::EndReason;
use crate::domain::Attempt;

/// Why a session ended; its [`Session::lost`](super::Session::lost) token was cancelled then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionEnd {
    /// The service said it is gone (`lost` `session_expired` or
    /// `session_ended`: a `DELETE` from elsewhere, its stream closed).
    Lost(SessionGone),
    /// Local validity was about to run out (within one drift budget)
    /// before a renewal succeeded.
    Expired,
    /// An end was sent and no certain reply came: treat it as gone.
    Unknown,
    /// [`Session::end`](super::Session::end) ended it.
    Ended,
    /// The [`Session`](super::Session) was dropped: nothing renews it any more.
    Dropped,
}

impl SessionEnd {
    /// What it means for each attached lease's registration.
    pub(super) fn lease_reason(self) -> EndReason {
        match self {
            Self::Lost(_) => EndReason::Lost,
            Self::Expired => EndReason::Expired,
            Self::Unknown => EndReason::Unknown,
            Self::Ended => EndReason::Released,
            Self::Dropped => EndReason::Stopped,
        }
    }
}

/// One attached lease, as the session tracks it.
pub(super) struct Entry {
    pub(super) id: u64,
    pub(super) handle: Weak<HandleShared>,
    /// Why it ended, when the session learnt it first.
    pub(super) reason: Mutex<Option<EndReason>>,
    /// `acquire sent + maxHoldMs`: no renewal extends it past this.
    pub(super) hold_until: Option<Instant>,
    /// The last renewal was capped at the hold bound.
    pub(super) held_out: AtomicBool,
}

impl Entry {
    pub(super) fn reason(&self) -> Option<EndReason> {
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_reason(&self, reason: EndReason) {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(reason);
    }
}

pub(super) struct SessionShared {
    pub(super) client: Client,
    pub(super) attempt: Attempt,
    pub(super) id: String,
    pub(super) ttl: Duration,
    core: Mutex<HandleCore>,
    /// The last answer's view; every applied renewal is published.
    info: watch::Sender<SessionInfo>,
    end_tx: watch::Sender<Option<SessionEnd>>,
    pub(super) lost: CancellationToken,
    /// Stops the keep-alive task.
    pub(super) stop: CancellationToken,
    /// Set while [`Session::end`](super::Session::end) is in flight: a `lost` the keep-alive
    /// hears then is our own end.
    pub(super) ending: AtomicBool,
    leases: Mutex<HashMap<String, Vec<Arc<Entry>>>>,
    next_entry: AtomicU64,
}

impl SessionShared {
    /// A session made by a request sent at `sent` that answered `info`.
    pub(super) fn new(
        client: &Client,
        attempt: Attempt,
        ttl: Duration,
        info: SessionInfo,
        sent: Instant,
    ) -> Self {
        let drift = client.settings().drift_for(ttl);
        let remaining = Duration::from_millis(info.remaining_ms);
        let core = HandleCore::new(sent, ttl, remaining, drift);
        Self {
            client: client.clone(),
            id: info.id.clone(),
            attempt,
            ttl,
            core: Mutex::new(core),
            info: watch::channel(info).0,
            end_tx: watch::channel(None).0,
            lost: CancellationToken::new(),
            stop: CancellationToken::new(),
            ending: AtomicBool::new(false),
            leases: Mutex::new(HashMap::new()),
            next_entry: AtomicU64::new(1),
        }
    }

    /// Every renewal applied from now on.
    pub(super) fn renewals(&self) -> watch::Receiver<SessionInfo> {
        self.info.subscribe()
    }

    /// The session as the last answer or event showed it.
    pub(super) fn info(&self) -> SessionInfo {
        self.info.borrow().clone()
    }

    pub(super) fn core(&self) -> MutexGuard<'_, HandleCore> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn leases(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Entry>>>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn end_reason(&self) -> Option<SessionEnd> {
        *self.end_tx.borrow()
    }

    pub(super) fn end_rx(&self) -> watch::Receiver<Option<SessionEnd>> {
        self.end_tx.subscribe()
    }

    /// The state now; a session whose validity ran out ends here.
    pub(super) fn observe(&self) -> LeaseState {
        let state = self.core().observe(Instant::now());
        if state == LeaseState::Lost && self.end_reason().is_none() {
            self.finish(SessionEnd::Expired);
        }
        state
    }

    /// When the work must stop: one drift budget before validity ends.
    pub(super) fn stop_at(&self) -> Instant {
        let core = self.core();
        core.valid_until()
            .checked_sub(core.drift_budget())
            .unwrap_or_else(|| core.valid_until())
    }

    pub(super) fn valid_until(&self) -> Instant {
        self.core().valid_until()
    }

    /// The session's end: recorded once, every attached lease settled with
    /// its reason, then the `lost` token cancelled.
    pub(super) fn finish(&self, end: SessionEnd) {
        let first = self.end_tx.send_if_modified(|last| {
            if last.is_some() {
                return false;
            }
            *last = Some(end);
            true
        });
        if !first {
            return;
        }
        {
            let mut core = self.core();
            let now = Instant::now();
            match end {
                SessionEnd::Ended => {
                    core.finish_release(now, ReleaseReply::Released);
                }
                SessionEnd::Unknown => {
                    core.finish_release(now, ReleaseReply::Indeterminate);
                }
                SessionEnd::Lost(_) | SessionEnd::Expired => {
                    core.finish_renew(now, now, RenewReply::Lost);
                }
                SessionEnd::Dropped => {}
            }
        }
        let entries: Vec<Arc<Entry>> = self.leases().values().flatten().cloned().collect();
        for entry in entries {
            settle_end(&entry, end);
        }
        self.stop.cancel();
        self.lost.cancel();
    }

    /// Starts tracking a lease acquired on this session: settled at once
    /// when the session already ended.
    pub(super) fn attach(&self, handle: &LeaseHandle, hold_until: Option<Instant>) -> Arc<Entry> {
        let entry = Arc::new(Entry {
            id: self.next_entry.fetch_add(1, Ordering::Relaxed),
            handle: Arc::downgrade(handle.shared()),
            reason: Mutex::new(None),
            hold_until,
            held_out: AtomicBool::new(false),
        });
        let ended = {
            let mut leases = self.leases();
            let ended = self.end_reason();
            if ended.is_none() {
                leases
                    .entry(handle.resource().tag())
                    .or_default()
                    .push(Arc::clone(&entry));
            }
            ended
        };
        if let Some(end) = ended {
            settle_end(&entry, end);
        }
        entry
    }

    /// Stops tracking a lease whose registration ended.
    pub(super) fn detach(&self, tag: &str, id: u64) {
        let mut leases = self.leases();
        if let Some(list) = leases.get_mut(tag) {
            list.retain(|e| e.id != id);
            if list.is_empty() {
                leases.remove(tag);
            }
        }
    }

    /// A renewal the service made or answered, for a request sent (or an
    /// event preceded) at `sent`: extends the session and every attached
    /// lease; ends those in `lost`.
    pub(super) fn apply_renewed(&self, sent: Instant, info: &SessionInfo, lost: &[LostLease]) {
        let remaining = Duration::from_millis(info.remaining_ms);
        let state =
            self.core()
                .finish_renew(Instant::now(), sent, RenewReply::Renewed { remaining });
        self.info.send_replace(info.clone());
        if state != LeaseState::Active {
            // Too late: validity ran out before the answer came.
            self.observe();
            return;
        }
        let entries: Vec<(String, Arc<Entry>)> = self
            .leases()
            .iter()
            .flat_map(|(tag, list)| list.iter().map(move |e| (tag.clone(), Arc::clone(e))))
            .collect();
        for (tag, entry) in entries {
            let Some(handle) = entry.handle.upgrade() else {
                continue;
            };
            let gone = lost.iter().find(|l| {
                tag.strip_prefix(l.purpose.as_str())
                    .and_then(|rest| rest.strip_prefix(':'))
                    == Some(l.digest.as_str())
            });
            let reply = match gone {
                Some(l) => {
                    entry.set_reason(match l.reason.as_str() {
                        "revoked" => EndReason::Revoked,
                        "max_hold" => EndReason::MaxHold,
                        _ => EndReason::Lost,
                    });
                    RenewReply::Lost
                }
                None => {
                    let capped = entry.hold_until.map_or(remaining, |h| {
                        remaining.min(h.saturating_duration_since(sent))
                    });
                    entry.held_out.store(capped < remaining, Ordering::Relaxed);
                    RenewReply::Renewed { remaining: capped }
                }
            };
            handle.settle_renew(sent, reply);
        }
    }
}

/// Settles one attached lease for the session's end.
fn settle_end(entry: &Entry, end: SessionEnd) {
    entry.set_reason(end.lease_reason());
    let Some(handle) = entry.handle.upgrade() else {
        return;
    };
    let now = Instant::now();
    match end {
        SessionEnd::Ended => {
            handle.settle_release(ReleaseReply::Released);
        }
        SessionEnd::Unknown => {
            handle.settle_release(ReleaseReply::Indeterminate);
        }
        SessionEnd::Lost(_) | SessionEnd::Expired => {
            handle.settle_renew(now, RenewReply::Lost);
        }
        // Nothing renews it any more; its own validity runs out.
        SessionEnd::Dropped => {}
    }
}
