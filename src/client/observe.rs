//! Following a lease: the inspect long-poll (`?changedSince=V&waitMs=N`),
//! the [`Leader`] it shows, and [`Observer`], which follows the leader
//! without campaigning; [`Election`](super::Election) candidates follow
//! with the same loop. (Proclaim is [`Client::renew_with`] and a `holder`.)

use std::time::Duration;

use reqwest::{Method, Url};
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;

use super::reply::Reply;
use super::{Cause, Client, ElectionSettings, Error};
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

/// An `inspected` answer, checked against the contract (both
/// [`Client::inspect`] and the long-poll read it).
pub(super) fn inspection(reply: &Reply, op: &OperationId) -> Result<Inspection, Error> {
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

/// Who leads, as an inspect answer shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Leader {
    /// The leader's holder label; `None` when nobody leads, or when the
    /// lease was taken without a label.
    pub holder: Option<String>,
    /// The leader's fencing token; `None` when nobody leads.
    pub fencing_token: Option<u64>,
}

impl Leader {
    /// Nobody leads.
    pub const NONE: Leader = Leader {
        holder: None,
        fencing_token: None,
    };

    /// The leader an inspect answer shows.
    pub fn of(inspection: &Inspection) -> Self {
        if !inspection.held {
            return Self::NONE;
        }
        Self {
            holder: inspection.holder.as_ref().map(|h| h.as_str().to_owned()),
            fencing_token: inspection.fencing_token,
        }
    }

    /// Whether someone leads.
    pub fn is_held(&self) -> bool {
        self.fencing_token.is_some()
    }
}

/// How a wait ended.
pub(super) enum Waited {
    Elapsed,
    Stopped,
}

/// Waits `d` unless `stop` fires first.
pub(super) async fn pause(d: Duration, stop: &CancellationToken) -> Waited {
    tokio::select! {
        biased;
        _ = stop.cancelled() => Waited::Stopped,
        _ = sleep(d) => Waited::Elapsed,
    }
}

/// A follower that never campaigns: tells of every change of leader.
#[derive(Debug, Clone)]
pub struct Observer {
    client: Client,
    resource: ResourceId,
    settings: ElectionSettings,
    events: mpsc::Sender<Leader>,
}

impl Observer {
    /// An observer of `resource` (only `wait`, `retry_period` and
    /// `event_capacity` of the settings matter), and the receiver of the
    /// leaders it sees.
    pub fn new(
        client: Client,
        resource: ResourceId,
        settings: ElectionSettings,
    ) -> (Self, mpsc::Receiver<Leader>) {
        let (events, rx) = mpsc::channel(settings.event_capacity.max(1));
        (
            Self {
                client,
                resource,
                settings,
                events,
            },
            rx,
        )
    }

    /// Follows the leader with the inspect long-poll until `cancel` fires
    /// (or the receiver is dropped): sends the leader found first, then
    /// every change (another holder label, another term, nobody).
    pub async fn observe(&self, cancel: CancellationToken) {
        follow(
            &self.client,
            &self.resource,
            &self.settings,
            &cancel,
            &self.events,
            |leader| leader,
        )
        .await;
    }
}

/// The observe loop shared by candidates and observers.
pub(super) async fn follow<T>(
    client: &Client,
    resource: &ResourceId,
    settings: &ElectionSettings,
    stop: &CancellationToken,
    events: &mpsc::Sender<T>,
    wrap: fn(Leader) -> T,
) {
    let mut version: Option<String> = None;
    let mut last: Option<Leader> = None;
    loop {
        let asked = Instant::now();
        let answer = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            answer = client.inspect_changed(resource, version.as_deref(), settings.wait) => answer,
        };
        match answer {
            Ok(inspection) => {
                // Unchanged, and well before the wait was over: a service
                // that does not hold long-polls (an older one). Poll at the
                // retry period rather than in a tight loop.
                if version.as_deref() == Some(inspection.version.as_str())
                    && asked.elapsed() < settings.wait / 2
                {
                    if let Waited::Stopped = pause(settings.retry_period, stop).await {
                        return;
                    }
                }
                let leader = Leader::of(&inspection);
                version = Some(inspection.version);
                if last.as_ref() != Some(&leader) {
                    last = Some(leader.clone());
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        sent = events.send(wrap(leader)) => if sent.is_err() { return },
                    }
                }
            }
            Err(e) => {
                tracing::debug!(purpose = %resource.purpose, outcome = e.outcome_name(), "observe long-poll failed");
                let wait = e.retry_after().unwrap_or(settings.retry_period);
                if let Waited::Stopped = pause(wait, stop).await {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::HolderLabel;

    fn inspection(held: bool, holder: Option<&str>, fencing_token: Option<u64>) -> Inspection {
        Inspection {
            held,
            version: "3.1".into(),
            remaining_ms: fencing_token.map(|_| 400),
            fencing_token,
            held_by: None,
            holder: holder.map(|h| HolderLabel::parse(h).expect("label")),
            ttl_ms: None,
            acquired_at: None,
            renewed_at: None,
            limit: None,
            mode: None,
            holders: u32::from(held),
            permits: Vec::new(),
            lock_delay_ms: None,
        }
    }

    #[test]
    fn the_leader_is_the_inspected_holder_and_term() {
        assert_eq!(
            Leader::of(&inspection(true, Some("pod-a"), Some(7))),
            Leader {
                holder: Some("pod-a".into()),
                fencing_token: Some(7),
            }
        );
        let unlabelled = Leader::of(&inspection(true, None, Some(8)));
        assert!(unlabelled.is_held());
        assert_eq!(unlabelled.holder, None);
        // Whatever else an answer carries, not held is nobody.
        assert_eq!(
            Leader::of(&inspection(false, Some("pod-a"), Some(7))),
            Leader::NONE
        );
        assert!(!Leader::NONE.is_held());
    }
}
