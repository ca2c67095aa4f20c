//! Following a lease: the inspect long-poll (`?changedSince=V&waitMs=N`)
//! that [`Election`](super::Election) and [`Observer`](super::Observer)
//! follow the leader with. (Proclaim is [`Client::renew_with`] and a
//! `holder`.)

use std::time::Duration;

use reqwest::{Method, Url};

use super::reply::Reply;
use super::{Cause, Client, Error};
use crate::domain::{HeldBy, Inspection, OperationId, ResourceId};

/// Milliseconds of a duration, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Client {
    /// `GET /leases/{purpose}/{digest}?changedSince=V&waitMs=N`: the lease
    /// as soon as its `version` differs from `since` (at once if it already
    /// does), or after `wait` unchanged. `wait` must not exceed the
    /// service's `LEASEHOLD_MAX_WAIT_MS`. Without `since` it is a plain
    /// [`inspect`](Self::inspect) (nothing to compare with) and `wait` is
    /// not used. The request may take `request_timeout + wait`.
    pub async fn inspect_changed(
        &self,
        resource: &ResourceId,
        since: Option<&str>,
        wait: Duration,
    ) -> Result<Inspection, Error> {
        let Some(since) = since else {
            return self.inspect(resource, None).await;
        };
        let op = anonymous()?;
        let mut url = Url::parse(&self.lease_url(resource)).map_err(|_| Error::Unavailable {
            retry_after: None,
            cause: Cause::Connect,
        })?;
        url.query_pairs_mut()
            .append_pair("changedSince", since)
            .append_pair("waitMs", &millis(wait).to_string());
        let timeout = self.settings().request_timeout.saturating_add(wait);
        let reply = self
            .call(Method::GET, url.into(), None, None, timeout, &op)
            .await?;
        inspection(&reply, &op)
    }
}

/// The operation id an `Indeterminate` of an attempt-less inspect carries.
fn anonymous() -> Result<OperationId, Error> {
    OperationId::parse("inspect").map_err(|_| Error::Unavailable {
        retry_after: None,
        cause: Cause::Connect,
    })
}

/// An `inspected` answer, checked as [`Client::inspect`] checks it (a copy
/// of its tail: `inspect` builds its own URL; if it took one, this could go).
fn inspection(reply: &Reply, op: &OperationId) -> Result<Inspection, Error> {
    if reply.outcome() != "inspected" {
        return Err(reply.failure(op));
    }
    let w = reply.wire();
    let held_by = match w.held_by.as_deref() {
        None => None,
        Some("caller") => Some(HeldBy::Caller),
        Some("caller_other_operation") => Some(HeldBy::CallerOtherOperation),
        Some("other") => Some(HeldBy::Other),
        Some(_) => return Err(reply.unexpected(op)),
    };
    Ok(Inspection {
        held: w.held.ok_or_else(|| reply.unexpected(op))?,
        version: w.version.clone().ok_or_else(|| reply.unexpected(op))?,
        remaining_ms: w.remaining_ms,
        fencing_token: w.fencing_token,
        held_by,
        holder: w.holder.clone(),
        ttl_ms: w.ttl_ms,
        acquired_at: w.acquired_at,
        renewed_at: w.renewed_at,
        limit: w.limit,
        mode: w.mode,
        holders: w.holders.unwrap_or(0),
        permits: w.permits.clone().unwrap_or_default(),
        lock_delay_ms: w.lock_delay_remaining_ms,
    })
}
