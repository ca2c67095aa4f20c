//! [`Session`]: one liveness for many leases (docs/design.md §18, §19).
//!
//! A session is made with an attempt (its owner token is the session's
//! secret, its id is derived from it), so a lost reply is retried with the
//! same attempt and finds the same session. Leases acquired on it
//! ([`Session::acquire`]) have no TTL of their own: each comes back as a
//! [`SessionLease`], a [`LeaseHandle`] (its own fencing token) whose local
//! validity is the session's, and a [`Registration`] whose token is
//! cancelled once, when that lease stops protecting the work. The session's
//! own [`Session::lost`] token is cancelled once, when the session does.
//!
//! Validity follows §5: a renewal extends the session and every attached
//! lease to `min(ttl, remainingMs) - drift` from the instant the renewal was
//! *sent* (for a keep-alive stream's renewal, which the service times
//! itself: from when the previous event arrived, see
//! [`KeepAlive::Stream`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::api::{millis, Client};
use super::error::Error;
use super::handle::{LeaseHandle, Shared as HandleShared};
use super::machine::{HandleCore, LeaseState, ReleaseReply, RenewReply};
use super::session_wire::{session_id_of, LostLease, SessionGone, SessionInfo, SessionWire};
use super::watchdog::EndReason;
use crate::domain::{Attempt, HolderLabel, OperationId};

pub use super::session_lease::{Attach, SessionLease};

/// How a session is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeepAlive {
    /// `GET /sessions/{id}/keepalive`: the serving instance renews the
    /// session and says so per renewal; if this process dies, the
    /// connection closes and the service ends the session at once. When
    /// the stream cannot be opened, or drops, the session is renewed by
    /// `PATCH` every third of its validity (and the stream tried again
    /// after each renewal); when no event comes for half the validity left,
    /// one `PATCH` is sent while the stream stays open. A stream renewal is
    /// timed by the service, so its validity counts from when the previous
    /// event (or the request opening the stream) arrived, an instant before
    /// the renewal.
    Stream,
    /// `PATCH /sessions/{id}` every third of the validity left (jittered),
    /// sooner after a failure; the session ends at its TTL if this process
    /// dies.
    Renew,
    /// Nothing renews it: call [`Session::renew`] yourself.
    Manual,
}

/// What to make a session with.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The session's time to live (1 s to 1 h).
    pub ttl: Duration,
    /// The public holder label.
    pub holder: Option<HolderLabel>,
    /// How it is kept alive. Default [`KeepAlive::Stream`].
    pub keep_alive: KeepAlive,
    /// How many times a create that got no certain reply is sent again
    /// with the same attempt (which finds the same session). Default 3.
    pub create_retries: u32,
}

impl SessionOptions {
    /// A session of `ttl`, kept alive by its stream.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            holder: None,
            keep_alive: KeepAlive::Stream,
            create_retries: 3,
        }
    }
}

/// Why a session ended; its [`Session::lost`] token was cancelled then.
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
    /// [`Session::end`] ended it.
    Ended,
    /// The [`Session`] was dropped: nothing renews it any more.
    Dropped,
}

impl SessionEnd {
    /// What it means for each attached lease's registration.
    fn lease_reason(self) -> EndReason {
        match self {
            Self::Lost(_) => EndReason::Lost,
            Self::Expired => EndReason::Expired,
            Self::Unknown => EndReason::Unknown,
            Self::Ended => EndReason::Released,
            Self::Dropped => EndReason::Stopped,
        }
    }
}

/// The answer to [`Session::renew`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRenewal {
    /// Renewed, with every attached lease it still holds; `lost` lists
    /// those it no longer holds (each one's registration ended).
    Renewed {
        /// The session now.
        session: SessionInfo,
        /// Attached leases it no longer holds.
        lost: Vec<LostLease>,
    },
    /// The session is gone.
    Lost(SessionGone),
}

/// The answer to [`Session::end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnded {
    /// Ended; `released` attached leases were released.
    Ended {
        /// How many.
        released: u64,
    },
    /// It was gone already.
    AlreadyAbsent,
}

/// A live session. Not `Clone`: dropping it stops its keep-alive (with
/// [`KeepAlive::Stream`] the stream closes and the service ends the
/// session at once; otherwise it ends at its TTL) and ends every
/// registration with [`EndReason::Stopped`].
pub struct Session {
    shared: Arc<SessionShared>,
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
    info: Mutex<SessionInfo>,
    end_tx: watch::Sender<Option<SessionEnd>>,
    pub(super) lost: CancellationToken,
    /// Stops the keep-alive task.
    pub(super) stop: CancellationToken,
    /// Set while [`Session::end`] is in flight: a `lost` the keep-alive
    /// hears then is our own end.
    pub(super) ending: AtomicBool,
    leases: Mutex<HashMap<String, Vec<Arc<Entry>>>>,
    next_entry: AtomicU64,
}

impl Session {
    /// Makes a session: a fresh attempt for `operation_id`, then
    /// [`Session::create_with`].
    pub async fn create(
        client: &Client,
        operation_id: &OperationId,
        options: SessionOptions,
    ) -> Result<Self, Error> {
        let attempt = client.create_attempt(operation_id).await?;
        Self::create_with(client, attempt, options).await
    }

    /// `POST /sessions` with `attempt` (its owner token becomes the
    /// session's secret). A create that got no certain reply is sent again
    /// with the same attempt, up to `options.create_retries` times: the
    /// service answers `replayed_same_operation` with the same session.
    /// Must be called within a Tokio runtime (the keep-alive is a task).
    pub async fn create_with(
        client: &Client,
        attempt: Attempt,
        options: SessionOptions,
    ) -> Result<Self, Error> {
        let mut tries = 0;
        loop {
            match Self::post(client, &attempt, &options).await {
                Err(e) if e.may_have_applied() && tries < options.create_retries => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50 << tries.min(4))).await;
                }
                Err(e) => return Err(e),
                Ok((info, sent)) => {
                    let session = Self::start(client, attempt, &options, info, sent);
                    super::session_keeper::spawn(&session.shared, options.keep_alive);
                    return Ok(session);
                }
            }
        }
    }

    async fn post(
        client: &Client,
        attempt: &Attempt,
        options: &SessionOptions,
    ) -> Result<(SessionInfo, Instant), Error> {
        let op = &attempt.operation_id;
        let mut body = json!({ "ttlMs": millis(options.ttl) });
        if let Some(holder) = &options.holder {
            body["holder"] = json!(holder.as_str());
        }
        let sent = Instant::now();
        let timeout = client.settings().request_timeout;
        let reply = client
            .call(
                Method::POST,
                client.url("/sessions"),
                Some(attempt),
                Some(body),
                timeout,
                op,
            )
            .await?;
        match reply.outcome() {
            "session_created" | "replayed_same_operation" => {
                let wire = SessionWire::read(&reply.body).unwrap_or_default();
                match wire.session {
                    Some(info) if info.id == session_id_of(&attempt.owner_token) => {
                        Ok((info, sent))
                    }
                    _ => Err(reply.unexpected(op)),
                }
            }
            _ => Err(reply.failure(op)),
        }
    }

    fn start(
        client: &Client,
        attempt: Attempt,
        options: &SessionOptions,
        info: SessionInfo,
        sent: Instant,
    ) -> Self {
        let drift = client.settings().drift_for(options.ttl);
        let remaining = Duration::from_millis(info.remaining_ms);
        let core = HandleCore::new(sent, options.ttl, remaining, drift);
        Self {
            shared: Arc::new(SessionShared {
                client: client.clone(),
                id: info.id.clone(),
                attempt,
                ttl: options.ttl,
                core: Mutex::new(core),
                info: Mutex::new(info),
                end_tx: watch::channel(None).0,
                lost: CancellationToken::new(),
                stop: CancellationToken::new(),
                ending: AtomicBool::new(false),
                leases: Mutex::new(HashMap::new()),
                next_entry: AtomicU64::new(1),
            }),
        }
    }

    pub(super) fn shared(&self) -> &Arc<SessionShared> {
        &self.shared
    }

    /// The public id (`s1.` and 32 hex digits).
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The operation id of the attempt that made it.
    pub fn operation_id(&self) -> &OperationId {
        &self.shared.attempt.operation_id
    }

    /// The TTL it is made and renewed with.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// The session as the last answer or event showed it.
    pub fn info(&self) -> SessionInfo {
        self.shared
            .info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// ACTIVE while locally valid; LOST (gone, or validity ran out),
    /// RELEASED (ended here) or UNKNOWN (an end without certain reply).
    pub fn state(&self) -> LeaseState {
        self.shared.observe()
    }

    /// Local validity left now; zero unless ACTIVE.
    pub fn valid_for(&self) -> Duration {
        let now = Instant::now();
        self.shared.core().valid_for(now)
    }

    /// Cancelled once, when the session stops protecting its leases' work
    /// ([`Session::end_reason`] says why). Every attached lease's own token
    /// is cancelled too.
    pub fn lost(&self) -> CancellationToken {
        self.shared.lost.clone()
    }

    /// Why the session ended, once it has.
    pub fn end_reason(&self) -> Option<SessionEnd> {
        *self.shared.end_tx.borrow()
    }

    /// Waits until the session ends and says why.
    pub async fn ended(&self) -> SessionEnd {
        let mut rx = self.shared.end_tx.subscribe();
        let seen = rx.wait_for(Option::is_some).await.ok().and_then(|r| *r);
        seen.unwrap_or(SessionEnd::Dropped)
    }

    /// `PATCH /sessions/{id}`: renews the session and, in the same call,
    /// every attached lease. `renewed` extends local validity from this
    /// call's send instant (the session's and each lease's); leases in
    /// `lost` end (their registrations with [`EndReason::Revoked`],
    /// [`EndReason::MaxHold`] or [`EndReason::Lost`]); a `lost` session
    /// ends with [`SessionEnd::Lost`]. A failure changes nothing, an
    /// uncertain one included: the session is not extended, and the next
    /// renew tells. Refused locally once the session ended.
    pub async fn renew(&self) -> Result<SessionRenewal, Error> {
        self.shared.renew().await
    }

    /// `DELETE /sessions/{id}`: ends the session; the service releases every
    /// attached lease (waiters woken, each lease's lock-delay). Each
    /// registration ends [`EndReason::Released`]; an uncertain answer ends
    /// the session [`SessionEnd::Unknown`]. Refused locally when already
    /// ended here; a lost session still sends it (clean-up).
    pub async fn end(&self) -> Result<SessionEnded, Error> {
        self.shared.end().await
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.shared.id)
            .field("operation_id", &self.shared.attempt.operation_id)
            .field("state", &self.state())
            .field("valid_for", &self.valid_for())
            .finish()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.stop.cancel();
        self.shared.finish(SessionEnd::Dropped);
    }
}

impl SessionShared {
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
        *self.info.lock().unwrap_or_else(PoisonError::into_inner) = info.clone();
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

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
