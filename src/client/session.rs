//! [`Session`]: one liveness for many leases (docs/design.md §18, §19).
//!
//! A session is made with an attempt (its owner token is the session's
//! secret, its id is derived from it), so a lost reply is retried with the
//! same attempt and finds the same session. Leases acquired on it
//! ([`Session::acquire`]) have no TTL of their own: each comes back as a
//! [`SessionLease`](super::SessionLease), a [`LeaseHandle`](super::LeaseHandle) (its own fencing token) whose local
//! validity is the session's, and a [`Registration`](super::Registration) whose token is
//! cancelled once, when that lease stops protecting the work. The session's
//! own [`Session::lost`] token is cancelled once, when the session does.
//!
//! Validity follows §5: a renewal extends the session and every attached
//! lease to `min(ttl, remainingMs) - drift` from the instant the renewal was
//! *sent* (for a keep-alive stream's renewal, which the service times
//! itself: from when the previous event arrived, see
//! [`KeepAlive::Stream`]).
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::acquire::AcquireOptions;
use super::api::{millis, Client};
use super::error::Error;
use super::machine::LeaseState;
use super::session_core::{SessionEnd, SessionShared};
use super::session_keeper::KeepAlive;
use super::session_lease::Attach;
use super::session_verbs::{SessionEnded, SessionRenewal};
use super::session_wire::{session_id_of, SessionInfo, SessionWire};
use crate::domain::{Attempt, HolderLabel, OperationId, ResourceId};

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

/// A live session. Not `Clone`: dropping it stops its keep-alive (with
/// [`KeepAlive::Stream`] the stream closes and the service ends the
/// session at once; otherwise it ends at its TTL) and ends every
/// registration with [`EndReason::Stopped`](super::EndReason::Stopped).
pub struct Session {
    shared: Arc<SessionShared>,
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
        Self {
            shared: Arc::new(SessionShared::new(client, attempt, options.ttl, info, sent)),
        }
    }

    #[cfg(test)]
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
        self.shared.info()
    }

    /// Changes to the session's latest view each time a renewal (a `PATCH`
    /// answer or a keep-alive event) has been applied.
    pub fn renewals(&self) -> tokio::sync::watch::Receiver<SessionInfo> {
        self.shared.renewals()
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
        self.shared.end_reason()
    }

    /// Waits until the session ends (its [`Session::lost`] token cancelled,
    /// every lease settled) and says why.
    pub async fn ended(&self) -> SessionEnd {
        self.shared.lost.cancelled().await;
        self.shared.end_reason().unwrap_or(SessionEnd::Dropped)
    }

    /// `PATCH /sessions/{id}`: renews the session and, in the same call,
    /// every attached lease. `renewed` extends local validity from this
    /// call's send instant (the session's and each lease's); leases in
    /// `lost` end (their registrations with [`EndReason::Revoked`](super::EndReason::Revoked),
    /// [`EndReason::MaxHold`](super::EndReason::MaxHold) or [`EndReason::Lost`](super::EndReason::Lost)); a `lost` session
    /// ends with [`SessionEnd::Lost`]. A failure changes nothing, an
    /// uncertain one included: the session is not extended, and the next
    /// renew tells. Refused locally once the session ended.
    pub async fn renew(&self) -> Result<SessionRenewal, Error> {
        self.shared.renew().await
    }

    /// `DELETE /sessions/{id}`: ends the session; the service releases every
    /// attached lease (waiters woken, each lease's lock-delay). Each
    /// registration ends [`EndReason::Released`](super::EndReason::Released); an uncertain answer ends
    /// the session [`SessionEnd::Unknown`]. Refused locally when already
    /// ended here; a lost session still sends it (clean-up).
    pub async fn end(&self) -> Result<SessionEnded, Error> {
        self.shared.end().await
    }

    /// `PUT /sessions/{id}/leases/{purpose}/{digest}`, with the
    /// session's secret and `operation_id` (one per lease): the lease has
    /// no TTL of its own (`options.ttl` is not sent) and ends when the
    /// session does. Its local validity counts from this request's send
    /// (plus `waitedMs`) and is extended by every session renewal; a
    /// `maxHoldMs` caps it at the send plus that bound. Refused locally
    /// once the session ended.
    pub async fn acquire(
        &self,
        resource: &ResourceId,
        operation_id: &OperationId,
        options: &AcquireOptions,
    ) -> Result<Attach, Error> {
        self.shared.acquire(resource, operation_id, options).await
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

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
