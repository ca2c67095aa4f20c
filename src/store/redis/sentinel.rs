//! Redis Sentinel: the master is whatever the sentinels say, and writes stop
//! going to a master the moment a failover of it begins.
//!
//! Sentinel promotes a replica first and tells the old master to become a
//! replica only seconds later; a lease written on the old master in between
//! is lost when it resyncs. So waiting for READONLY or a dropped connection
//! is not enough. This backend subscribes to every sentinel's events:
//!
//! - `+try-failover`, `+selected-slave`, `+promoted-slave`, ... for our
//!   master: the current master is *retired* (its pool is dropped, a call
//!   that already checked out one of its connections sees the flag and does
//!   not send) and calls answer `unavailable` until the new master is known;
//! - `+switch-master`: the new master, at once;
//! - `-failover-abort-*`: look again.
//!
//! A re-check every second asks every sentinel `SENTINEL MASTER <name>` and
//! follows the report with the highest config epoch (never an epoch older
//! than one already followed), pausing while that report says
//! `failover_in_progress`: a fallback for missed events. A new connection is
//! kept only if the node says `role:master`, and a READONLY reply retires the
//! master as well.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Client, Value};
use tokio::sync::{watch, Notify};
use tokio::time::{timeout_at, Instant};
use tokio_util::sync::CancellationToken;

use super::call::{Call, Executed};
use super::exec::{self, send, RunError};
use super::node::NodeTemplate;
use super::pool::NodePool;
use super::sentinel_logic::*;
use crate::store::{Readiness, StoreError};

/// How often the sentinels are asked even without an event.
const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// At most one re-check per this interval.
const RECHECK_GAP: Duration = Duration::from_millis(50);

/// Sentinel events that mean "a failover of this master has begun".
const FAILOVER_STARTED: &[&str] = &[
    "+try-failover",
    "+elected-leader",
    "+failover-state-select-slave",
    "+selected-slave",
    "+failover-state-send-slaveof-noone",
    "+failover-state-wait-promotion",
    "+promoted-slave",
    "+failover-state-reconf-slaves",
];
const SWITCH_MASTER: &str = "+switch-master";
const ABORTED: &str = "-failover-abort-*";

/// One resolved master and its connections.
pub struct Target {
    /// `host:port`.
    pub addr: String,
    pool: NodePool,
    retired: AtomicBool,
}

/// What this instance believes about the master.
#[derive(Clone)]
pub enum Master {
    /// Not resolved yet (start, or after READONLY).
    Unknown,
    /// A failover is under way: no writes anywhere.
    Failover,
    /// Writes go here.
    Known(Arc<Target>),
}

struct SentinelNode {
    client: Client,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

/// Sentinel-managed master.
pub struct SentinelBackend {
    sentinels: Vec<SentinelNode>,
    master_name: String,
    template: NodeTemplate,
    pubsub_template: NodeTemplate,
    pool_size: u32,
    timeout: Duration,
    state: watch::Sender<Master>,
    epochs: Mutex<Epochs>,
    recheck: Notify,
}

impl SentinelBackend {
    /// Follows `master_name` through `sentinels`; nothing is opened yet.
    pub fn new(
        sentinels: Vec<Client>,
        master_name: String,
        template: NodeTemplate,
        pool_size: u32,
        timeout: Duration,
    ) -> Self {
        Self {
            sentinels: sentinels
                .into_iter()
                .map(|client| SentinelNode {
                    client,
                    conn: tokio::sync::Mutex::new(None),
                })
                .collect(),
            master_name,
            pubsub_template: template.clone(),
            template: template.resp3(),
            pool_size,
            timeout,
            state: watch::Sender::new(Master::Unknown),
            epochs: Mutex::new(Epochs::default()),
            recheck: Notify::new(),
        }
    }

    /// Changes of the master, for the wake-up subscription.
    pub fn watch(&self) -> watch::Receiver<Master> {
        self.state.subscribe()
    }

    /// A pub/sub client for the current master.
    pub fn pubsub_client(&self, master: &Master) -> Option<Client> {
        match master {
            Master::Known(t) => self.pubsub_template.client_for(&t.addr).ok(),
            _ => None,
        }
    }

    /// (connections open, idle) of the current master's pool.
    pub fn pool_state(&self) -> (u32, u32) {
        match &*self.state.borrow() {
            Master::Known(t) => t.pool.state(),
            _ => (0, 0),
        }
    }

    /// Replaces the belief; a master no longer believed in is retired.
    fn set(&self, new: Master, why: &'static str) {
        let changed = self.state.send_if_modified(|current| {
            let same = match (&*current, &new) {
                (Master::Known(a), Master::Known(b)) => a.addr == b.addr,
                (Master::Failover, Master::Failover) | (Master::Unknown, Master::Unknown) => true,
                _ => false,
            };
            if same {
                return false;
            }
            if let Master::Known(old) = &*current {
                old.retired.store(true, Ordering::Release);
            }
            *current = new.clone();
            true
        });
        if changed {
            match &new {
                Master::Known(t) => {
                    tracing::info!(master = %t.addr, why, "redis master (sentinel)")
                }
                Master::Failover => {
                    tracing::warn!(why, "redis sentinel failover under way; writes paused")
                }
                Master::Unknown => {
                    tracing::warn!(why, "redis master unknown; asking the sentinels")
                }
            }
        }
    }

    fn switch_to(&self, addr: &str, why: &'static str) {
        if matches!(&*self.state.borrow(), Master::Known(t) if t.addr == addr) {
            return;
        }
        match self.template.client_for(addr) {
            Ok(client) => {
                let pool = NodePool::new(
                    client,
                    self.pool_size,
                    self.pool_size.clamp(1, 4),
                    self.timeout,
                    true,
                );
                self.set(
                    Master::Known(Arc::new(Target {
                        addr: addr.to_owned(),
                        pool,
                        retired: AtomicBool::new(false),
                    })),
                    why,
                );
            }
            Err(_) => tracing::warn!("sentinel named a master address that cannot be used"),
        }
    }

    /// A call failed in a way that says the master may have moved.
    fn suspect(&self, target: &Arc<Target>, err: &StoreError) {
        if exec::is_not_master(err) {
            let current =
                matches!(&*self.state.borrow(), Master::Known(t) if Arc::ptr_eq(t, target));
            if current {
                self.set(Master::Unknown, "the master answered as a replica");
            }
        }
        self.recheck.notify_one();
    }

    /// Runs `call` on the current master.
    pub async fn execute(
        &self,
        call: &Call<'_>,
        deadline: Instant,
    ) -> Result<Executed, StoreError> {
        loop {
            let target = self.current(deadline).await?;
            let mut conn = match target.pool.checkout_as(call.acks.is_some(), deadline).await {
                Ok(conn) => conn,
                Err(err) => {
                    self.suspect(&target, &err);
                    return Err(err);
                }
            };
            if target.retired.load(Ordering::Acquire) {
                // The master changed while we waited for a connection; nothing
                // was sent. Try the new one within the same deadline.
                continue;
            }
            return match call.run_on(&mut conn, false, deadline).await {
                Ok(done) => Ok(done),
                Err(RunError::Failed(err)) => {
                    if exec::suggests_topology_change(&err) {
                        self.suspect(&target, &err);
                    }
                    Err(err)
                }
                Err(RunError::Redirect(_)) => Err(StoreError::Unavailable(
                    "a Sentinel-managed node answered with a cluster redirect",
                )),
            };
        }
    }

    /// A shared connection to the current master, for read-only commands
    /// (listing); waits like [`SentinelBackend::execute`] while no master
    /// is known.
    pub async fn master_conn(&self, deadline: Instant) -> Result<super::pool::Conn, StoreError> {
        let target = self.current(deadline).await?;
        target.pool.checkout(deadline).await.inspect_err(|err| {
            self.suspect(&target, err);
        })
    }

    /// The master to write to, waiting (until `deadline`) while it is unknown
    /// or a failover is under way.
    async fn current(&self, deadline: Instant) -> Result<Arc<Target>, StoreError> {
        let mut rx = self.state.subscribe();
        loop {
            let failover = match &*rx.borrow_and_update() {
                Master::Known(t) => return Ok(Arc::clone(t)),
                Master::Failover => true,
                Master::Unknown => false,
            };
            if !failover {
                self.recheck.notify_one();
            }
            if !matches!(timeout_at(deadline, rx.changed()).await, Ok(Ok(()))) {
                return Err(StoreError::Unavailable(if failover {
                    "a Redis Sentinel failover is under way"
                } else {
                    "no Redis master known (sentinels unreachable?)"
                }));
            }
        }
    }

    /// Ready when the master the sentinels name answers `role:master`.
    pub async fn readiness(&self, deadline: Instant) -> Readiness {
        let result = async {
            let target = self.current(deadline).await?;
            let mut conn = target.pool.checkout(deadline).await?;
            let mut info = redis::cmd("INFO");
            info.arg("replication");
            let reply = send(&mut conn, &info, deadline)
                .await
                .map_err(|e| exec::classify(&conn, e))?;
            let text: String = redis::from_redis_value(reply)
                .map_err(|_| StoreError::Unavailable("unexpected INFO reply"))?;
            if super::pool::is_master(&text) {
                Ok(())
            } else {
                Err(StoreError::Unavailable(
                    "the resolved master is a replica now",
                ))
            }
        }
        .await;
        match result {
            Ok(()) => Readiness {
                topology: "sentinel",
                writable: true,
                detail: None,
            },
            Err(err) => Readiness {
                topology: "sentinel",
                writable: false,
                detail: Some(err.to_string()),
            },
        }
    }

    /// Starts the event subscriptions and the periodic re-check.
    pub fn start(self: &Arc<Self>, shutdown: &CancellationToken) {
        for index in 0..self.sentinels.len() {
            tokio::spawn(Arc::clone(self).follow_events(index, shutdown.clone()));
        }
        tokio::spawn(Arc::clone(self).recheck_task(shutdown.clone()));
    }

    async fn recheck_task(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            self.resolve().await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.recheck.notified() => {}
                _ = tokio::time::sleep(RECHECK_EVERY) => {}
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RECHECK_GAP) => {}
            }
        }
    }

    /// Asks every sentinel and follows the newest configuration.
    async fn resolve(&self) {
        let deadline = Instant::now() + self.timeout;
        let generation = self
            .epochs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generation;
        let reports =
            futures_util::future::join_all(self.sentinels.iter().map(|s| self.report(s, deadline)))
                .await;
        // Decide and act under the lock, so an event cannot slip in between.
        let mut epochs = self.epochs.lock().unwrap_or_else(|e| e.into_inner());
        if epochs.generation != generation {
            return; // an event arrived meanwhile: it is newer than these answers
        }
        let answered: Vec<Report> = reports.into_iter().flatten().collect();
        match epochs.decide(answered, self.sentinels.len()) {
            Decision::Keep => {}
            Decision::Pause => self.set(
                Master::Failover,
                "a sentinel reports a failover in progress",
            ),
            Decision::Follow(addr) => self.switch_to(&addr, "sentinels name this master"),
        }
        drop(epochs);
    }

    async fn report(&self, sentinel: &SentinelNode, deadline: Instant) -> Option<Report> {
        let mut slot = sentinel.conn.lock().await;
        if slot.is_none() {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.timeout))
                .set_response_timeout(Some(self.timeout));
            let connected = timeout_at(
                deadline,
                sentinel
                    .client
                    .get_multiplexed_async_connection_with_config(&config),
            )
            .await;
            *slot = connected.ok().and_then(Result::ok);
        }
        let conn = slot.as_mut()?;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(&self.master_name);
        let reply = match timeout_at(deadline, cmd.query_async::<Value>(conn)).await {
            Ok(Ok(reply)) => reply,
            _ => {
                *slot = None;
                return None;
            }
        };
        let fields = field_map(&reply)?;
        let host = fields.get("ip")?;
        let port: u16 = fields.get("port")?.parse().ok()?;
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Some(Report {
            addr,
            epoch: fields
                .get("config-epoch")
                .and_then(|e| e.parse().ok())
                .unwrap_or(0),
            failover: fields
                .get("flags")
                .is_some_and(|f| f.split(',').any(|f| f == "failover_in_progress")),
        })
    }

    /// Follows one sentinel's events until `shutdown`, reconnecting with backoff.
    async fn follow_events(self: Arc<Self>, index: usize, shutdown: CancellationToken) {
        use futures_util::StreamExt as _;
        let Some(sentinel) = self.sentinels.get(index) else {
            return;
        };
        let mut backoff = Duration::from_millis(50);
        loop {
            let connected = async {
                let mut pubsub = tokio::time::timeout(
                    self.timeout.max(Duration::from_secs(1)),
                    sentinel.client.get_async_pubsub(),
                )
                .await
                .map_err(|_| {
                    redis::RedisError::from((redis::ErrorKind::Io, "connect timed out"))
                })??;
                pubsub.subscribe(SWITCH_MASTER).await?;
                pubsub.subscribe(FAILOVER_STARTED).await?;
                pubsub.psubscribe(ABORTED).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let pubsub = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = connected => r,
            };
            match pubsub {
                Ok(mut pubsub) => {
                    backoff = Duration::from_millis(50);
                    // Events may have been missed while not subscribed.
                    self.recheck.notify_one();
                    let mut messages = pubsub.on_message();
                    loop {
                        let message = tokio::select! {
                            _ = shutdown.cancelled() => return,
                            m = messages.next() => m,
                        };
                        let Some(message) = message else { break };
                        let payload: String = message.get_payload().unwrap_or_default();
                        self.on_event(message.get_channel_name(), &payload);
                    }
                    tracing::warn!(
                        sentinel = index,
                        "sentinel event subscription lost; reconnecting"
                    );
                }
                Err(err) => {
                    tracing::debug!(sentinel = index, kind = ?err.kind(), "sentinel event subscription failed; retrying")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    fn on_event(&self, channel: &str, payload: &str) {
        let words: Vec<&str> = payload.split_whitespace().collect();
        if channel == SWITCH_MASTER {
            // <name> <old ip> <old port> <new ip> <new port>
            if let [name, _, _, host, port, ..] = words[..] {
                if name == self.master_name {
                    let addr = if host.contains(':') {
                        format!("[{host}]:{port}")
                    } else {
                        format!("{host}:{port}")
                    };
                    // The switch means a newer config epoch than any seen,
                    // unless a re-check already saw it (every sentinel
                    // announces the same switch: only the first raises it).
                    let mut epochs = self.epochs.lock().unwrap_or_else(|e| e.into_inner());
                    epochs.switched(&addr);
                    self.switch_to(&addr, "sentinel announced +switch-master");
                }
            }
            return;
        }
        // Instance details: `master <name> <ip> <port> ...` or
        // `<type> <name> <ip> <port> @ <master name> <master ip> <master port>`.
        let master = match words.first() {
            Some(&"master") => words.get(1).copied(),
            _ => words
                .iter()
                .position(|w| *w == "@")
                .and_then(|at| words.get(at + 1).copied()),
        };
        if master != Some(self.master_name.as_str()) {
            return;
        }
        if FAILOVER_STARTED.contains(&channel) {
            let mut epochs = self.epochs.lock().unwrap_or_else(|e| e.into_inner());
            epochs.generation += 1;
            self.set(Master::Failover, "sentinel announced a failover");
        } else {
            // An abort: the old master may stay; ask.
            self.recheck.notify_one();
        }
    }
}

#[cfg(test)]
#[path = "sentinel_tests.rs"]
mod tests;
