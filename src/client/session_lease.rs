//! Leases on a [`Session`](super::Session):
//! [`Session::acquire`](super::Session::acquire) → [`Attach`], and a
//! [`SessionLease`] per held lease, with the task that ends its
//! [`Registration`] once, when the lease stops protecting the work.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::acquire::AcquireOptions;
use super::api::millis;
use super::error::Error;
use super::handle::LeaseHandle;
use super::machine::{LeaseState, Refused, ReleaseReply};
use super::session_core::{Entry, SessionEnd, SessionShared};
use super::session_wire::{SessionGone, SessionWire};
use super::watchdog::{EndReason, Registration};
use crate::domain::{
    Attempt, ContendedReason, EndedReason, Mode, OperationId, ReleaseOutcome, ResourceId,
};

/// A lease held on a session: its handle (own fencing token; validity the
/// session's) and its registration (a token cancelled once, when it stops
/// protecting the work: the session ended or was lost, the lease was
/// released, broken or reached its hold bound).
///
/// Dropping it does not release the lease: it stays attached until the
/// session ends.
pub struct SessionLease {
    handle: LeaseHandle,
    registration: Registration,
    session: Weak<SessionShared>,
}

/// `<base>/sessions/{id}/leases/{purpose}/{digest}`.
fn session_lease_url(session: &SessionShared, resource: &ResourceId) -> String {
    session.client.url(&format!(
        "/sessions/{}/leases/{}/{}",
        session.id, resource.purpose, resource.digest
    ))
}

fn not_applied_or_unknown(e: &Error) -> ReleaseReply {
    if e.may_have_applied() {
        ReleaseReply::Indeterminate
    } else {
        ReleaseReply::NotApplied
    }
}

impl std::fmt::Debug for SessionLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLease")
            .field("handle", &self.handle)
            .field("registration", &self.registration)
            .finish()
    }
}

impl SessionLease {
    /// The lease handle: fencing token, state, local validity.
    pub fn handle(&self) -> &LeaseHandle {
        &self.handle
    }

    /// The fencing token to present at the effect point.
    pub fn fencing_token(&self) -> u64 {
        self.handle.fencing_token()
    }

    /// Cancelled once, when this lease stops protecting the work.
    pub fn token(&self) -> CancellationToken {
        self.registration.token()
    }

    /// Why it stopped, once it has.
    pub fn end_reason(&self) -> Option<EndReason> {
        self.registration.end_reason()
    }

    /// Waits until it stops (its reason recorded, its token cancelled) and
    /// says why.
    pub async fn ended(&mut self) -> EndReason {
        let reason = self.registration.ended().await;
        // The reason is recorded just before the token is cancelled.
        self.registration.token().cancelled().await;
        reason
    }

    /// `DELETE /sessions/{id}/leases/{purpose}/{digest}` (with the
    /// session's secret): this lease alone is released and taken off the
    /// session; its registration ends [`EndReason::Released`]. The handle
    /// moves as for [`LeaseHandle::release`] (`not_owner` → LOST, no
    /// certain reply → UNKNOWN; refused locally once RELEASED).
    pub async fn release(&self) -> Result<ReleaseOutcome, Error> {
        let Some(session) = self.session.upgrade() else {
            // The session object is gone: the plain release route.
            return self.handle.release().await;
        };
        let shared = self.handle.shared();
        if shared.observe() == LeaseState::Released {
            return Err(Error::Refused(Refused {
                state: LeaseState::Released,
            }));
        }
        let resource = self.handle.resource();
        let attempt = shared.attempt();
        let op = &attempt.operation_id;
        let client = &session.client;
        let result = client
            .call(
                Method::DELETE,
                session_lease_url(&session, resource),
                Some(attempt),
                None,
                client.settings().request_timeout,
                op,
            )
            .await;
        let (reply, result) = match result {
            Ok(r) => match r.outcome() {
                "released" => (ReleaseReply::Released, Ok(ReleaseOutcome::Released)),
                "already_absent" => (
                    ReleaseReply::AlreadyAbsent,
                    Ok(ReleaseOutcome::AlreadyAbsent {
                        reason: match r.wire().reason.as_deref() {
                            Some("revoked") => Some(EndedReason::Revoked),
                            Some("max_hold") => Some(EndedReason::MaxHold),
                            _ => None,
                        },
                    }),
                ),
                "not_owner" => (ReleaseReply::NotOwner, Ok(ReleaseOutcome::NotOwner)),
                _ => {
                    let e = r.failure(op);
                    (not_applied_or_unknown(&e), Err(e))
                }
            },
            Err(e) => (not_applied_or_unknown(&e), Err(e)),
        };
        shared.settle_release(reply);
        result
    }
}

/// The answer to [`Session::acquire`](super::Session::acquire), other than the shared failures.
#[derive(Debug)]
pub enum Attach {
    /// Held, attached to the session.
    Acquired {
        /// The lease.
        lease: SessionLease,
        /// How long the service waited, when it waited.
        waited_ms: Option<u64>,
    },
    /// This operation already held it on this session.
    ReplayedSameOperation {
        /// The lease.
        lease: SessionLease,
    },
    /// The session's secret holds it for another operation.
    OwnerOperationConflict {
        /// The holder's remaining time to live.
        retry_after_ms: u64,
    },
    /// Someone else holds it.
    Contended {
        /// The holder's remaining time to live, or the service's fallback.
        retry_after_ms: u64,
        /// How long the service waited, when it waited.
        waited_ms: Option<u64>,
        /// Why, when it is not simply held.
        reason: Option<ContendedReason>,
    },
    /// Live holders agreed on another limit.
    LimitMismatch {
        /// Theirs.
        limit: u32,
    },
    /// The session holds its maximum number of leases.
    SessionFull,
    /// The session is gone (the session ends [`SessionEnd::Lost`]).
    SessionLost(SessionGone),
}

impl Attach {
    /// The lease, when it is held.
    pub fn into_lease(self) -> Option<SessionLease> {
        match self {
            Self::Acquired { lease, .. } | Self::ReplayedSameOperation { lease } => Some(lease),
            _ => None,
        }
    }

    /// The snake_case outcome name.
    pub fn outcome_name(&self) -> &'static str {
        match self {
            Self::Acquired { .. } => "acquired",
            Self::ReplayedSameOperation { .. } => "replayed_same_operation",
            Self::OwnerOperationConflict { .. } => "owner_operation_conflict",
            Self::Contended { .. } => "contended",
            Self::LimitMismatch { .. } => "limit_mismatch",
            Self::SessionFull => "session_full",
            Self::SessionLost(_) => "lost",
        }
    }
}

impl SessionShared {
    /// [`Session::acquire`](super::Session::acquire).
    pub(super) async fn acquire(
        self: &Arc<Self>,
        resource: &ResourceId,
        operation_id: &OperationId,
        options: &AcquireOptions,
    ) -> Result<Attach, Error> {
        let shared = self;
        let begun = shared.core().begin_renew(Instant::now());
        if let Err(Refused { state }) = begun {
            return Err(Error::Refused(Refused { state }));
        }
        let mut body = json!({});
        let wait_ms = millis(options.wait);
        if wait_ms > 0 {
            body["waitMs"] = json!(wait_ms);
        }
        if let Some(holder) = &options.holder {
            body["holder"] = json!(holder.as_str());
        }
        let shape = options.shape;
        if shape.limit != 1 {
            body["limit"] = json!(shape.limit);
        }
        if shape.mode == Mode::Shared {
            body["mode"] = json!("shared");
        }
        if shape.lock_delay_ms > 0 {
            body["lockDelayMs"] = json!(shape.lock_delay_ms);
        }
        if let Some(bound) = options.max_hold {
            body["maxHoldMs"] = json!(millis(bound));
        }
        let attempt = Attempt {
            owner_token: shared.attempt.owner_token.clone(),
            operation_id: operation_id.clone(),
        };
        let client = &shared.client;
        let timeout = client
            .settings()
            .request_timeout
            .saturating_add(options.wait);
        let sent = Instant::now();
        let reply = client
            .call(
                Method::PUT,
                session_lease_url(shared, resource),
                Some(&attempt),
                Some(body),
                timeout,
                operation_id,
            )
            .await?;
        let op = operation_id;
        let held = |from: Instant| -> Result<SessionLease, Error> {
            let lease = reply.lease(resource, op)?;
            let handle = LeaseHandle::new(
                client.clone(),
                resource.clone(),
                attempt.clone(),
                lease,
                from,
                shared.ttl,
            );
            Ok(watch_lease(
                shared,
                handle,
                options.max_hold.map(|m| sent + m),
            ))
        };
        match reply.outcome() {
            "acquired" => {
                let waited_ms = reply.wire().waited_ms;
                let from = sent + Duration::from_millis(waited_ms.unwrap_or(0));
                Ok(Attach::Acquired {
                    lease: held(from)?,
                    waited_ms,
                })
            }
            "replayed_same_operation" => Ok(Attach::ReplayedSameOperation { lease: held(sent)? }),
            "owner_operation_conflict" => Ok(Attach::OwnerOperationConflict {
                retry_after_ms: reply.retry_after_ms(op)?,
            }),
            "contended" => Ok(Attach::Contended {
                retry_after_ms: reply.retry_after_ms(op)?,
                waited_ms: reply.wire().waited_ms,
                reason: match reply.wire().reason.as_deref() {
                    None => None,
                    Some("lock_delay") => Some(ContendedReason::LockDelay),
                    Some("queued") => Some(ContendedReason::Queued),
                    Some(_) => return Err(reply.unexpected(op)),
                },
            }),
            "limit_mismatch" => Ok(Attach::LimitMismatch {
                limit: reply.wire().limit.ok_or_else(|| reply.unexpected(op))?,
            }),
            "session_full" => Ok(Attach::SessionFull),
            "lost" => {
                let wire = SessionWire::read(&reply.body).unwrap_or_default();
                match wire.reason.as_deref().and_then(SessionGone::parse) {
                    Some(gone) => {
                        shared.finish(SessionEnd::Lost(gone));
                        Ok(Attach::SessionLost(gone))
                    }
                    None => Err(reply.unexpected(op)),
                }
            }
            _ => Err(reply.failure(op)),
        }
    }
}

/// Attaches `handle` to the session and starts the task that ends its
/// registration.
pub(super) fn watch_lease(
    shared: &Arc<SessionShared>,
    handle: LeaseHandle,
    hold_until: Option<Instant>,
) -> SessionLease {
    let entry = shared.attach(&handle, hold_until);
    let token = CancellationToken::new();
    let (end_tx, end_rx) = watch::channel(None);
    let task = LeaseTask {
        entry: Arc::clone(&entry),
        tag: handle.resource().tag(),
        state_rx: handle.shared().subscribe(),
        session: Arc::downgrade(shared),
        session_end: shared.end_rx(),
        lost: shared.lost.clone(),
        token: token.clone(),
        end_tx,
    };
    tokio::spawn(task.run());
    SessionLease {
        handle,
        registration: Registration::new(entry.id, token, end_rx),
        session: Arc::downgrade(shared),
    }
}

/// Ends one attached lease's registration, once.
struct LeaseTask {
    entry: Arc<Entry>,
    tag: String,
    state_rx: watch::Receiver<LeaseState>,
    session: Weak<SessionShared>,
    session_end: watch::Receiver<Option<SessionEnd>>,
    lost: CancellationToken,
    token: CancellationToken,
    end_tx: watch::Sender<Option<EndReason>>,
}

impl LeaseTask {
    async fn run(mut self) {
        let reason = self.watch().await;
        if let Some(session) = self.session.upgrade() {
            session.detach(&self.tag, self.entry.id);
        }
        self.end_tx.send_replace(Some(reason));
        self.token.cancel();
        tracing::debug!(registration = self.entry.id, ?reason, "session lease ended");
    }

    async fn watch(&mut self) -> EndReason {
        loop {
            let Some(handle) = self.entry.handle.upgrade() else {
                return EndReason::Stopped;
            };
            let state = handle.observe();
            let stop_at = handle.stop_at();
            drop(handle);
            let by_state = match state {
                LeaseState::Active => None,
                LeaseState::Lost => Some(EndReason::Lost),
                LeaseState::Released => Some(EndReason::Released),
                LeaseState::Unknown => Some(EndReason::Unknown),
            };
            if let Some(reason) = by_state {
                return self.entry.reason().unwrap_or(reason);
            }
            tokio::select! {
                biased;
                _ = self.token.cancelled() => return EndReason::CancelledByCaller,
                _ = self.lost.cancelled() => {
                    let end = (*self.session_end.borrow()).unwrap_or(SessionEnd::Dropped);
                    return self.entry.reason().unwrap_or(match end {
                        SessionEnd::Lost(_) => EndReason::Lost,
                        SessionEnd::Expired => EndReason::Expired,
                        SessionEnd::Unknown => EndReason::Unknown,
                        SessionEnd::Ended => EndReason::Released,
                        SessionEnd::Dropped => EndReason::Stopped,
                    });
                }
                changed = self.state_rx.changed() => {
                    if changed.is_err() {
                        return EndReason::Stopped;
                    }
                }
                _ = sleep_until(stop_at) => {
                    // A renewal may have moved it meanwhile.
                    let moved = self.entry.handle.upgrade().map(|h| h.stop_at());
                    if moved.is_none_or(|at| Instant::now() >= at) {
                        return if self.entry.held_out.load(Ordering::Relaxed) {
                            EndReason::MaxHold
                        } else {
                            EndReason::Expired
                        };
                    }
                }
            }
        }
    }
}
