//! Redis Cluster: a slot map, one [`NodePool`] per master, scripts sent
//! straight to the master of the resource's slot.
//!
//! Why not redis-rs' `ClusterConnection` (pooled by bb8 or shared): it
//! retries inside itself (I/O errors at once, CLUSTERDOWN/TRYAGAIN after a
//! sleep, READONLY after a slot refresh) and returns only the last attempt's
//! error. A script whose connection dropped after it was written and whose
//! retry then met CLUSTERDOWN would come back as a clean refusal, and a
//! refusal still being retried at our deadline as a timeout: neither
//! `unavailable` nor `indeterminate` could be told apart. Routing here keeps
//! the standalone hot path (one pooled connection, one EVALSHA, no PING) and
//! follows only what is certain not to have run: MOVED and ASK.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::Value;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::call::{Call, Executed};
use super::exec::{self, send, Redirect, RunError};
use super::node::NodeTemplate;
use super::pool::NodePool;
use super::reply;
use crate::store::{Readiness, StoreError};

/// Number of hash slots.
const SLOTS: usize = 16384;
/// MOVED/ASK hops followed for one call (a resharding moves a slot once).
const MAX_REDIRECTS: usize = 3;
/// TRYAGAIN answers retried for one call. Redis answers TRYAGAIN, before
/// the script runs, when a slot is half-migrated and the resource's keys
/// are split between its two nodes; the migration moves the rest within
/// milliseconds, or (on a loaded machine) in a second or so. Nothing was
/// applied, so the call is sent again (from the slot's owner, whose ASK
/// leads on) after [`TRY_AGAIN_FIRST`], doubling up to [`TRY_AGAIN_MOST`]:
/// 10, 20, 40, 80, then every 100 ms for the first half of the call's
/// time (the command timeout), at most this many times.
const MAX_TRY_AGAIN: u32 = 100;
/// The first pause before a TRYAGAIN retry.
const TRY_AGAIN_FIRST: Duration = Duration::from_millis(10);
/// The longest pause between TRYAGAIN retries.
const TRY_AGAIN_MOST: Duration = Duration::from_millis(100);
/// Slot map re-read this often even without a hint that it changed.
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// At most one slot map refresh per this interval.
const REFRESH_GAP: Duration = Duration::from_millis(100);
/// No owner.
const NONE: u16 = u16::MAX;

/// The slot → master map, as `CLUSTER SLOTS` last said (patched by MOVED).
#[derive(Default)]
struct SlotMap {
    /// Index into `nodes` per slot, or [`NONE`]; empty before the first read.
    owners: Vec<u16>,
    /// `host:port` of each master.
    nodes: Vec<String>,
}

impl SlotMap {
    fn owner(&self, slot: u16) -> Option<&str> {
        let i = *self.owners.get(usize::from(slot))?;
        self.nodes.get(usize::from(i)).map(String::as_str)
    }

    fn set_owner(&mut self, slot: u16, addr: &str) {
        if self.owners.len() != SLOTS {
            return;
        }
        let i = match self.nodes.iter().position(|n| n == addr) {
            Some(i) => i,
            None => {
                self.nodes.push(addr.to_owned());
                self.nodes.len() - 1
            }
        };
        if let (Some(owner), Ok(i)) = (self.owners.get_mut(usize::from(slot)), u16::try_from(i)) {
            *owner = i;
        }
    }
}

/// Cluster routing state.
pub struct ClusterBackend {
    template: NodeTemplate,
    seeds: Vec<String>,
    pool_size: u32,
    timeout: Duration,
    map: RwLock<SlotMap>,
    pools: RwLock<HashMap<String, Arc<NodePool>>>,
    refreshing: tokio::sync::Mutex<Option<Instant>>,
    refresh_wanted: Notify,
}

impl ClusterBackend {
    /// A cluster reached through `seeds` (`host:port`); nothing is opened yet.
    pub fn new(
        template: NodeTemplate,
        seeds: Vec<String>,
        pool_size: u32,
        timeout: Duration,
    ) -> Self {
        Self {
            template: template.resp3(),
            seeds,
            pool_size,
            timeout,
            map: RwLock::new(SlotMap::default()),
            pools: RwLock::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(None),
            refresh_wanted: Notify::new(),
        }
    }

    fn owner(&self, slot: u16) -> Option<String> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .owner(slot)
            .map(str::to_owned)
    }

    /// The masters of the current map, in map order.
    pub fn masters(&self) -> Vec<String> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .nodes
            .clone()
    }

    /// The pool of `addr`, created on first use.
    fn pool(&self, addr: &str) -> Result<Arc<NodePool>, StoreError> {
        if let Some(pool) = self
            .pools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(addr)
        {
            return Ok(Arc::clone(pool));
        }
        let client = self
            .template
            .client_for(addr)
            .map_err(|_| StoreError::Unavailable("bad Redis Cluster node address"))?;
        let mut pools = self.pools.write().unwrap_or_else(|e| e.into_inner());
        let pool = pools.entry(addr.to_owned()).or_insert_with(|| {
            Arc::new(NodePool::new(
                client,
                self.pool_size,
                1,
                self.timeout,
                false,
            ))
        });
        Ok(Arc::clone(pool))
    }

    /// A client for `addr` with the data-node settings (for the wake-up subscription).
    pub fn pubsub_client(&self, addr: &str) -> Option<redis::Client> {
        self.template.client_for(addr).ok()
    }

    /// Seeds then known masters, for the wake-up subscription.
    pub fn subscription_candidates(&self) -> Vec<String> {
        let mut all = self.masters();
        for seed in &self.seeds {
            if !all.contains(seed) {
                all.push(seed.clone());
            }
        }
        all
    }

    /// (connections open, idle) over every node.
    pub fn pool_state(&self) -> (u32, u32) {
        let pools = self.pools.read().unwrap_or_else(|e| e.into_inner());
        pools
            .values()
            .map(|p| p.state())
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    }

    /// Asks the background task to re-read the slot map soon.
    fn want_refresh(&self) {
        self.refresh_wanted.notify_one();
    }

    /// Re-reads the slot map from the first node that answers (known masters
    /// first, then the seeds); at most once per [`REFRESH_GAP`].
    async fn refresh(&self, deadline: Instant) -> Result<(), StoreError> {
        let mut last = self.refreshing.lock().await;
        if last.is_some_and(|at| at.elapsed() < REFRESH_GAP)
            && !self
                .map
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .owners
                .is_empty()
        {
            return Ok(());
        }
        *last = Some(Instant::now());
        let mut error = StoreError::Unavailable("no Redis Cluster node reachable");
        // Each node gets part of the budget, so one frozen node cannot
        // starve the refresh (a stopped process still accepts TCP).
        let share = (self.timeout / 2).max(Duration::from_millis(20));
        for addr in self.subscription_candidates() {
            if Instant::now() >= deadline {
                break;
            }
            match self
                .read_slots(&addr, deadline.min(Instant::now() + share))
                .await
            {
                Ok(map) => {
                    let keep: Vec<String> = map.nodes.iter().chain(&self.seeds).cloned().collect();
                    *self.map.write().unwrap_or_else(|e| e.into_inner()) = map;
                    // Pools of nodes that left the cluster go with their connections.
                    self.pools
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .retain(|addr, _| keep.contains(addr));
                    return Ok(());
                }
                Err(e) => error = e,
            }
        }
        tracing::warn!(reason = %error, "cannot read the Redis Cluster slot map");
        Err(error)
    }

    async fn read_slots(&self, addr: &str, deadline: Instant) -> Result<SlotMap, StoreError> {
        let pool = self.pool(addr)?;
        let mut conn = pool.checkout(deadline).await?;
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply = send(&mut conn, &cmd, deadline)
            .await
            .map_err(|e| exec::classify(&conn, e))?;
        let host = super::node::split_addr(addr).map_or("", |(h, _)| h);
        parse_slots(&reply, host).ok_or(StoreError::Unavailable("unexpected CLUSTER SLOTS reply"))
    }

    /// Runs `call` on the master of its slot, following MOVED/ASK and
    /// retrying TRYAGAIN for the first half of the time to the deadline
    /// ([`MAX_TRY_AGAIN`] times at most).
    pub async fn execute(
        &self,
        call: &Call<'_>,
        deadline: Instant,
    ) -> Result<Executed, StoreError> {
        let slot = key_slot(call.tag);
        let mut redirect: Option<(String, bool)> = None;
        let (mut hops, mut tries, mut pause) = (0, 0, TRY_AGAIN_FIRST);
        // TRYAGAIN is retried in the first half of the call's time only:
        // the last try then has the rest to answer, so a slot that stays
        // split is answered `unavailable` (nothing applied), never a
        // timeout's `indeterminate`.
        let retry_until = {
            let now = Instant::now();
            now + deadline.saturating_duration_since(now) / 2
        };
        loop {
            if hops > MAX_REDIRECTS {
                return Err(StoreError::Unavailable("too many Redis Cluster redirects"));
            }
            hops += 1;
            let (addr, asking) = match redirect.take() {
                Some(target) => target,
                None => match self.owner(slot) {
                    Some(addr) => (addr, false),
                    None => {
                        self.refresh(deadline).await?;
                        let addr = self.owner(slot).ok_or(StoreError::Unavailable(
                            "no Redis Cluster node serves the slot",
                        ))?;
                        (addr, false)
                    }
                },
            };
            let pool = self.pool(&addr)?;
            let mut conn = match pool.checkout_as(call.acks.is_some(), deadline).await {
                Ok(conn) => conn,
                Err(err) => {
                    // The node went away (or never was): nothing was sent.
                    self.want_refresh();
                    return Err(err);
                }
            };
            match call.run_on(&mut conn, asking, deadline).await {
                Ok(done) => return Ok(done),
                Err(RunError::Redirect(Redirect::Moved { slot: moved, addr })) => {
                    tracing::debug!(slot = moved, "MOVED; following");
                    self.map
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .set_owner(moved, &addr);
                    self.want_refresh();
                    redirect = Some((addr, false));
                }
                Err(RunError::Redirect(Redirect::Ask { addr })) => {
                    tracing::debug!(slot, "ASK; following once");
                    redirect = Some((addr, true));
                }
                Err(RunError::Failed(StoreError::Unavailable(why)))
                    if why == reply::TRY_AGAIN
                        && tries < MAX_TRY_AGAIN
                        && Instant::now() + pause < retry_until =>
                {
                    tracing::debug!(slot, tries, "TRYAGAIN; retrying");
                    tries += 1;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(TRY_AGAIN_MOST);
                    // From the owner again, with a fresh redirect budget.
                    (redirect, hops) = (None, 0);
                }
                Err(RunError::Failed(err)) => {
                    if exec::suggests_topology_change(&err) {
                        self.want_refresh();
                    }
                    return Err(err);
                }
            }
        }
    }

    /// The lowest slot of every master in the slot map, ascending: the
    /// order (stable across failovers, which keep a master's slots) in which
    /// a listing visits the masters. Reads the map first if none is known.
    pub async fn shards(&self, deadline: Instant) -> Result<Vec<u16>, StoreError> {
        if self.masters().is_empty() {
            self.refresh(deadline).await?;
        }
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut lowest: Vec<Option<u16>> = vec![None; map.nodes.len()];
        for (slot, owner) in map.owners.iter().enumerate() {
            if let (Some(first @ None), Ok(slot)) =
                (lowest.get_mut(usize::from(*owner)), u16::try_from(slot))
            {
                *first = Some(slot);
            }
        }
        let mut shards: Vec<u16> = lowest.into_iter().flatten().collect();
        shards.sort_unstable();
        Ok(shards)
    }

    /// A shared connection to the master serving `slot`, for read-only
    /// commands (listing).
    pub async fn slot_conn(
        &self,
        slot: u16,
        deadline: Instant,
    ) -> Result<super::pool::Conn, StoreError> {
        let addr = match self.owner(slot) {
            Some(addr) => addr,
            None => {
                self.refresh(deadline).await?;
                self.owner(slot).ok_or(StoreError::Unavailable(
                    "no Redis Cluster node serves the slot",
                ))?
            }
        };
        self.pool(&addr)?
            .checkout(deadline)
            .await
            .inspect_err(|_| self.want_refresh())
    }

    /// Asks for a slot map refresh (a listing met a node that failed).
    pub fn suspect_map(&self) {
        self.want_refresh();
    }

    /// Ready when a master of the map answers and says `cluster_state:ok`.
    pub async fn readiness(&self, deadline: Instant) -> Readiness {
        let not_ready = |detail: String| Readiness {
            topology: "cluster",
            writable: false,
            detail: Some(detail),
        };
        if self.masters().is_empty() {
            if let Err(err) = self.refresh(deadline).await {
                return not_ready(err.to_string());
            }
        }
        let masters = self.masters();
        let mut detail = String::from("no Redis Cluster master answered");
        for addr in &masters {
            match self.cluster_ok(addr, deadline).await {
                Ok(true) => {
                    return Readiness {
                        topology: "cluster",
                        writable: true,
                        detail: None,
                    }
                }
                Ok(false) => {
                    detail =
                        "Redis Cluster state is not ok (slots uncovered or a failover under way)"
                            .into()
                }
                Err(err) => {
                    self.want_refresh();
                    detail = err.to_string();
                }
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        not_ready(format!("{detail} ({} masters known)", masters.len()))
    }

    async fn cluster_ok(&self, addr: &str, deadline: Instant) -> Result<bool, StoreError> {
        let pool = self.pool(addr)?;
        let mut conn = pool.checkout(deadline).await?;
        let mut info = redis::cmd("INFO");
        info.arg("replication");
        let reply = send(&mut conn, &info, deadline)
            .await
            .map_err(|e| exec::classify(&conn, e))?;
        let text: String = redis::from_redis_value(reply)
            .map_err(|_| StoreError::Unavailable("unexpected INFO reply"))?;
        if !super::pool::is_master(&text) {
            return Err(StoreError::Unavailable(
                "a node of the slot map is no longer a master",
            ));
        }
        let mut cluster = redis::cmd("CLUSTER");
        cluster.arg("INFO");
        let reply = send(&mut conn, &cluster, deadline)
            .await
            .map_err(|e| exec::classify(&conn, e))?;
        let text: String = redis::from_redis_value(reply)
            .map_err(|_| StoreError::Unavailable("unexpected CLUSTER INFO reply"))?;
        Ok(text.lines().any(|l| l.trim() == "cluster_state:ok"))
    }

    /// Re-reads the slot map when asked (a MOVED, a node gone, CLUSTERDOWN)
    /// and every [`REFRESH_EVERY`], until `shutdown`.
    pub async fn refresh_task(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.refresh_wanted.notified() => {}
                _ = tokio::time::sleep(REFRESH_EVERY) => {}
            }
            let _ = self.refresh(Instant::now() + self.timeout).await;
        }
    }
}

/// Parses `CLUSTER SLOTS`: `[[start, end, [host, port, ...], replicas...], ...]`.
/// An empty host means "the node you asked" (`asked_host`).
fn parse_slots(reply: &Value, asked_host: &str) -> Option<SlotMap> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut map = SlotMap {
        owners: vec![NONE; SLOTS],
        nodes: Vec::new(),
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return None;
        };
        let host = if host.is_empty() || host == "?" {
            asked_host.to_owned()
        } else {
            host
        };
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let index = match map.nodes.iter().position(|n| *n == addr) {
            Some(i) => i,
            None => {
                map.nodes.push(addr);
                map.nodes.len() - 1
            }
        };
        let index = u16::try_from(index).ok()?;
        let (start, end) = (usize::try_from(*start).ok()?, usize::try_from(*end).ok()?);
        if start > end || end >= SLOTS {
            return None;
        }
        map.owners[start..=end].fill(index);
    }
    Some(map)
}

/// The cluster slot of a hash tag: CRC16/XMODEM modulo 16384.
pub fn key_slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &byte in tag.as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 0x3FFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on a real server.
        assert_eq!(key_slot("123456789"), 0x31C3 & 0x3FFF);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot(""), 0);
    }

    #[test]
    fn slot_map_parses_and_patches() {
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                node("10.0.0.1", 7000),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![Value::Int(8192), Value::Int(16383), node("", 7002)]),
        ]);
        let mut map = parse_slots(&reply, "10.0.0.9").expect("parses");
        assert_eq!(map.owner(0), Some("10.0.0.1:7000"));
        assert_eq!(map.owner(8191), Some("10.0.0.1:7000"));
        assert_eq!(map.owner(16383), Some("10.0.0.9:7002"));
        map.set_owner(5, "10.0.0.3:7003");
        assert_eq!(map.owner(5), Some("10.0.0.3:7003"));
        assert_eq!(map.owner(6), Some("10.0.0.1:7000"));
        assert!(parse_slots(&Value::Int(1), "x").is_none());
    }
}
