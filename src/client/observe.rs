//! Following a lease: the inspect long-poll (`?changedSince=V&waitMs=N`),
//! the [`Leader`] it shows, and [`Observer`], which follows the leader
//! without campaigning; [`Election`](super::Election) candidates follow
//! with the same loop. (Proclaim is [`Client::renew_with`] and a `holder`.)

use std::time::Duration;

use reqwest::{Method, Url};
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;

use super::api::Client;
use super::error::{Cause, Error};
use super::reply::inspection;
use crate::domain::{Inspection, OperationId, ResourceId};

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

/// How an [`Election`](super::Election) (or [`Observer`](Observer)) campaigns and follows.
#[derive(Debug, Clone)]
pub struct ElectionSettings {
    /// The lease's TTL (client-go's `LeaseDuration`): how long the others
    /// wait for a leader that stops renewing without releasing. Must lie
    /// within the service's TTL bounds. Default 15 s.
    pub ttl: Duration,
    /// The server-side wait (`waitMs`) of each campaign round and of each
    /// observe long-poll. At most the service's `LEASEHOLD_MAX_WAIT_MS`
    /// (default 30 s), or the service rejects the request. Default 10 s.
    pub wait: Duration,
    /// The pause after a failure that came without a retry hint, and the
    /// longest pause after a `contended` answer that came back early
    /// (client-go's `RetryPeriod`). Default 1 s.
    pub retry_period: Duration,
    /// How long before the lease's local validity ends (its end already
    /// takes the client's drift budget off, see
    /// [`ClientSettings::drift_budget`](super::ClientSettings::drift_budget))
    /// the leadership token is cancelled when no renew extended it
    /// meanwhile: time for the leader's work to stop. Default TTL / 10;
    /// at most TTL / 2 is used. Zero: the token fires when the validity
    /// ends, not before.
    pub leading_margin: Duration,
    /// The lease's lock-delay (Consul's): when a leader's lease *expires*
    /// (its process died or was cut off, rather than resigning), nobody
    /// leads until this long after the expiry, time for the old leader's
    /// writes in flight to land or fail. Up to 60 s. Default zero.
    pub lock_delay: Duration,
    /// The bound of the event channel. Default 64.
    pub event_capacity: usize,
    /// Whether a candidate also follows the leader (one long-poll in
    /// flight) and sends [`ElectionEvent::NewLeader`](super::ElectionEvent::NewLeader). Default true; off
    /// halves a candidate's requests when only its own term matters.
    /// An [`Observer`](Observer) always follows.
    pub follow: bool,
}

impl ElectionSettings {
    /// The defaults for a lease of `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            wait: Duration::from_secs(10),
            retry_period: Duration::from_secs(1),
            leading_margin: ttl / 10,
            lock_delay: Duration::ZERO,
            event_capacity: 64,
            follow: true,
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
