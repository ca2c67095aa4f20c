//! Acquiring: [`AcquireOptions`] in, [`Acquire`] out, a [`LeaseHandle`]
//! for a held lease with its local validity counted from the send.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::time::Instant;

use super::api::{millis, Client};
use super::error::Error;
use super::handle::LeaseHandle;
use crate::domain::{Attempt, ContendedReason, HolderLabel, LeaseShape, Mode, ResourceId};

/// What to ask an acquire for.
#[derive(Debug, Clone)]
pub struct AcquireOptions {
    /// The lease's time to live.
    pub ttl: Duration,
    /// How long to wait server-side while someone else holds it
    /// (`Duration::ZERO`: try once).
    pub wait: Duration,
    /// The public holder label (shown to everyone who can inspect).
    pub holder: Option<HolderLabel>,
    /// Limit, mode and lock-delay (the default: a plain lease).
    pub shape: LeaseShape,
    /// Bounds the whole hold (`maxHoldMs`): no renewal reaches past the
    /// acquisition plus this, and the renew after it answers `lost` with
    /// [`LostReason::MaxHold`](crate::domain::LostReason::MaxHold) (a
    /// [`Watchdog`](super::Watchdog) ends with
    /// [`EndReason::MaxHold`](super::EndReason::MaxHold)). `None`: no bound.
    pub max_hold: Option<Duration>,
}

impl AcquireOptions {
    /// A plain lease for `ttl`: no wait, no label.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            wait: Duration::ZERO,
            holder: None,
            shape: LeaseShape::default(),
            max_hold: None,
        }
    }
}

/// The answer to an acquire, other than the shared failures.
#[derive(Debug)]
pub enum Acquire {
    /// The caller now holds the lease.
    Acquired {
        /// The lease, owned.
        handle: LeaseHandle,
        /// How long the service waited before granting it, when it waited.
        waited_ms: Option<u64>,
    },
    /// This attempt already held it; its TTL was not extended.
    ReplayedSameOperation {
        /// The lease, owned, valid for at most the server's PTTL.
        handle: LeaseHandle,
    },
    /// The same owner token holds it for another operation.
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
        /// Why, when it is not simply held (lock-delay, fair queue).
        reason: Option<ContendedReason>,
    },
    /// Live holders agreed on another limit.
    LimitMismatch {
        /// Theirs.
        limit: u32,
    },
}

impl Acquire {
    /// The handle, when the lease is held.
    pub fn into_handle(self) -> Option<LeaseHandle> {
        match self {
            Self::Acquired { handle, .. } | Self::ReplayedSameOperation { handle } => Some(handle),
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
        }
    }
}

impl Client {
    /// `PUT /leases/{purpose}/{digest}`: acquire for `ttl`, waiting up to
    /// `wait` server-side while someone else holds it (`Duration::ZERO`:
    /// try once). A held lease comes back as a [`LeaseHandle`] whose local
    /// validity is counted from the instant this request was sent (plus
    /// `waitedMs`, which the service measures from before the acquiring
    /// script ran).
    pub async fn acquire(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Acquire, Error> {
        let options = AcquireOptions {
            wait,
            ..AcquireOptions::new(ttl)
        };
        self.acquire_with(resource, attempt, &options).await
    }

    /// [`Client::acquire`] with every option, the public holder label
    /// included.
    pub async fn acquire_with(
        &self,
        resource: &ResourceId,
        attempt: &Attempt,
        options: &AcquireOptions,
    ) -> Result<Acquire, Error> {
        let (ttl, wait) = (options.ttl, options.wait);
        let (ttl_ms, wait_ms) = (millis(ttl), millis(wait));
        let mut body = json!({ "ttlMs": ttl_ms });
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
        let op = &attempt.operation_id;
        let timeout = self.settings().request_timeout.saturating_add(wait);
        let sent = Instant::now();
        let reply = self
            .call(
                Method::PUT,
                self.lease_url(resource),
                Some(attempt),
                Some(body),
                timeout,
                op,
            )
            .await?;
        let ttl = Duration::from_millis(ttl_ms);
        match reply.outcome() {
            "acquired" => {
                let lease = reply.lease(resource, op)?;
                let waited_ms = reply.wire().waited_ms;
                let from = sent + Duration::from_millis(waited_ms.unwrap_or(0));
                let handle = LeaseHandle::new(
                    self.clone(),
                    resource.clone(),
                    attempt.clone(),
                    lease,
                    from,
                    ttl,
                );
                Ok(Acquire::Acquired { handle, waited_ms })
            }
            "replayed_same_operation" => {
                let lease = reply.lease(resource, op)?;
                let handle = LeaseHandle::new(
                    self.clone(),
                    resource.clone(),
                    attempt.clone(),
                    lease,
                    sent,
                    ttl,
                );
                Ok(Acquire::ReplayedSameOperation { handle })
            }
            "owner_operation_conflict" => Ok(Acquire::OwnerOperationConflict {
                retry_after_ms: reply.retry_after_ms(op)?,
            }),
            "contended" => Ok(Acquire::Contended {
                retry_after_ms: reply.retry_after_ms(op)?,
                waited_ms: reply.wire().waited_ms,
                reason: match reply.wire().reason.as_deref() {
                    None => None,
                    Some("lock_delay") => Some(ContendedReason::LockDelay),
                    Some("queued") => Some(ContendedReason::Queued),
                    Some(_) => return Err(reply.unexpected(op)),
                },
            }),
            "limit_mismatch" => Ok(Acquire::LimitMismatch {
                limit: reply.wire().limit.ok_or_else(|| reply.unexpected(op))?,
            }),
            _ => Err(reply.failure(op)),
        }
    }
}
