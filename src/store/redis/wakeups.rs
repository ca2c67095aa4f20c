//! The wake-up subscription: every release, watched acquire and label
//! change anywhere publishes on `<ns>:wake:v2`; each instance follows it
//! and wakes its waiters and watchers (a lost message costs one look).

use std::sync::Arc;
use std::time::Duration;

use redis::{Client, RedisError};
use tokio_util::sync::CancellationToken;

use super::cluster::ClusterBackend;
use super::sentinel::{Master, SentinelBackend};
use crate::domain::{BreakReason, Change, Revocation};
use crate::notify::{Grant, WaitRegistry};

/// Where the wake-up subscription connects.
pub(super) enum WakeSource {
    /// Always this server.
    Fixed(Box<Client>),
    /// Any node: a classic PUBLISH reaches every node of a cluster.
    Cluster(Arc<ClusterBackend>),
    /// The current master; re-subscribed when it changes.
    Sentinel(Arc<SentinelBackend>),
}

impl WakeSource {
    /// The client to subscribe with on attempt `n`, and a receiver that
    /// fires when the subscription should move elsewhere.
    fn pick(&self, n: usize) -> (Option<Client>, Option<tokio::sync::watch::Receiver<Master>>) {
        match self {
            WakeSource::Fixed(client) => (Some(Client::clone(client)), None),
            WakeSource::Cluster(c) => {
                let candidates = c.subscription_candidates();
                let client =
                    (!candidates.is_empty()).then(|| candidates[n % candidates.len()].clone());
                (client.and_then(|addr| c.pubsub_client(&addr)), None)
            }
            WakeSource::Sentinel(s) => {
                let mut rx = s.watch();
                let client = s.pubsub_client(&rx.borrow_and_update());
                (client, Some(rx))
            }
        }
    }
}

/// Follows the wake-up channel: every release on any instance publishes the
/// resource there. After a (re)connect every local waiter re-checks once, so
/// a message missed while disconnected costs one round trip, never a stuck
/// waiter.
pub(super) async fn subscribe_wakeups(
    source: WakeSource,
    channel: String,
    instance: String,
    waiters: Arc<WaitRegistry>,
    timeout: Duration,
    shutdown: CancellationToken,
) {
    use futures_util::StreamExt as _;
    let mut backoff = Duration::from_millis(50);
    let connect_timeout = timeout.max(Duration::from_secs(1));
    for attempt in 0usize.. {
        let (client, mut moved) = source.pick(attempt);
        let moved_fut = async {
            match moved.as_mut() {
                Some(rx) => {
                    let _ = rx.changed().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(moved_fut);
        if let Some(client) = client {
            let connected = async {
                let mut pubsub = tokio::time::timeout(connect_timeout, client.get_async_pubsub())
                    .await
                    .map_err(|_| RedisError::from((redis::ErrorKind::Io, "connect timed out")))??;
                pubsub.subscribe(&channel).await?;
                Ok::<_, RedisError>(pubsub)
            };
            let pubsub = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = connected => r,
            };
            match pubsub {
                Ok(mut pubsub) => {
                    backoff = Duration::from_millis(50);
                    tracing::debug!("wake-up subscription established");
                    waiters.wake_all();
                    let mut messages = pubsub.on_message();
                    let mut master_moved = false;
                    loop {
                        let message = tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = &mut moved_fut => {
                                master_moved = true;
                                break;
                            }
                            m = messages.next() => m,
                        };
                        let Some(message) = message else {
                            tracing::warn!("wake-up subscription lost; reconnecting");
                            break;
                        };
                        match message.get_payload::<String>() {
                            Ok(payload) => on_event(&waiters, &instance, &payload),
                            Err(_) => waiters.wake_all(),
                        }
                    }
                    waiters.wake_all();
                    if master_moved {
                        continue; // the master moved: follow it at once
                    }
                }
                Err(err) => {
                    tracing::debug!(kind = ?err.kind(), "wake-up subscription failed; retrying");
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = &mut moved_fut => {}
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// One wake-up channel message: `<tag>\t<version>\t<kind>` (a bare
/// `<tag>` is read as "something changed"); `revoked` (break.lua) adds
/// `\t<key name>\t<reason>`, either of them empty when there is none;
/// `granted` (release.lua's hand-off) adds `\t<member>\t<fence>\t<at ms>`;
/// `released` may add `\t<instance>\t<ms>` (the queue's head waits there,
/// and its heartbeat lapses in ms), and `queue` `\t<ms>` (a plain holder's
/// TTL: nobody else goes before it ends). `instance` is this one's id.
pub(super) fn on_event(waiters: &WaitRegistry, instance: &str, payload: &str) {
    let mut parts = payload.split('\t');
    let tag = parts.next().unwrap_or_default();
    match parts.nth(1) {
        Some("released") => {
            let head = parts.next();
            let lapse_ms = parts.next().and_then(|ms| ms.parse().ok());
            match head.zip(lapse_ms) {
                Some((head, lapse_ms)) if head != instance => {
                    waiters.released_elsewhere(tag, lapse_ms);
                }
                _ => waiters.changed(tag, Change::Released),
            }
        }
        Some("granted") => {
            let member = parts.next().unwrap_or_default();
            let fence = parts.next().and_then(|f| f.parse().ok());
            let at = parts.next().and_then(|a| a.parse().ok());
            match fence.zip(at) {
                Some((fencing_token, acquired_at)) => {
                    let grant = Grant {
                        fencing_token,
                        acquired_at,
                    };
                    // Not handed: no live place of this instance has the
                    // member (another instance's, or one that left and
                    // releases it).
                    waiters.granted(tag, member, grant);
                }
                None => waiters.changed_somehow(tag),
            }
        }
        Some("revoked") => {
            let key_name = parts.next().filter(|n| !n.is_empty()).map(str::to_owned);
            let reason = parts.next().and_then(|r| BreakReason::parse(r).ok());
            waiters.revoked(tag, Revocation { reason, key_name });
        }
        // The fair queue moved (a waiter left, or a permit is free for the
        // next one): only waiters look; the resource itself did not change.
        Some("queue") => match parts.next().and_then(|ms| ms.parse().ok()) {
            Some(ttl_ms) => waiters.bound(tag, ttl_ms),
            None => waiters.wake(tag),
        },
        kind => match kind.and_then(Change::parse) {
            Some(change) => waiters.changed(tag, change),
            None => waiters.changed_somehow(tag),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;

    /// A registry with one waiter of `t` whose place is `x:me:0`.
    fn one_waiter() -> (
        Arc<WaitRegistry>,
        crate::notify::WaitGuard,
        tokio::sync::oneshot::Receiver<Grant>,
    ) {
        let registry = Arc::new(WaitRegistry::new(10));
        let guard = registry.enter("t").expect("admitted");
        let grant = guard.resource().join("x:me:0");
        (registry, guard, grant)
    }

    fn woken(guard: &crate::notify::WaitGuard) -> bool {
        guard.resource().wake.notified().now_or_never().is_some()
    }

    #[test]
    fn a_grant_reaches_its_place_and_wakes_nobody() {
        let (registry, guard, mut grant) = one_waiter();
        on_event(&registry, "me", "t\t3.1\tgranted\tx:me:0\t17\t100");
        assert_eq!(
            grant.try_recv(),
            Ok(Grant {
                fencing_token: 17,
                acquired_at: 100
            })
        );
        assert!(!woken(&guard));
        // Another instance's member: nothing here.
        let (registry, guard, mut grant) = one_waiter();
        on_event(&registry, "me", "t\t3.1\tgranted\tx:other:0\t17\t100");
        assert!(grant.try_recv().is_err());
        assert!(!woken(&guard));
    }

    #[test]
    fn a_release_wakes_only_the_heads_instance_and_bounds_the_others() {
        let (registry, guard, _grant) = one_waiter();
        on_event(&registry, "me", "t\t3.0\treleased\tother\t1500");
        assert!(!woken(&guard));
        assert!(guard.resource().take_bound().is_some());
        on_event(&registry, "me", "t\t3.0\treleased\tme\t1500");
        assert!(woken(&guard));
        // No head named (an older instance, or no queue): everyone looks.
        on_event(&registry, "me", "t\t3.0\treleased");
        assert!(woken(&guard));
    }

    #[test]
    fn a_queue_event_with_a_ttl_bounds_the_sleep_without_a_look() {
        let (registry, guard, _grant) = one_waiter();
        on_event(&registry, "me", "t\t\tqueue\t300");
        assert!(!woken(&guard));
        let bound = guard.resource().take_bound().expect("a bound");
        assert!(bound <= tokio::time::Instant::now() + std::time::Duration::from_millis(301));
        on_event(&registry, "me", "t\t\tqueue");
        assert!(woken(&guard));
    }
}
