//! Listing a purpose's leases on Redis: `SCAN MATCH` over the lease keys,
//! each key found read with the inspect script.
//!
//! A page:
//!
//! 1. takes the resources the previous page found beyond its limit (carried
//!    in the cursor, at most [`ScanPosition::MAX_PENDING`]);
//! 2. SCANs on (standalone, Sentinel: the master; Cluster: each master in
//!    the order of its lowest slot) `<ns>:lease:v2:{<purpose>:*` with
//!    `COUNT` about the room left, at most [`SCAN_CALLS_PER_PAGE`] calls,
//!    until it has `limit` keys or the SCAN is done (no `KEYS`: the work per
//!    page is bounded, so a page may hold fewer leases than `limit` and
//!    still carry a cursor);
//! 3. reads every key with the inspect script, in batches of
//!    [`READS_IN_FLIGHT`] on the shared multiplexed connection (so
//!    pipelined), each call with its own nonce:
//!    remaining time and expiry come from the server's clock exactly as
//!    `GET /leases/{purpose}/{digest}` reports them; keys that turn out
//!    free are skipped.
//!
//! What it guarantees. SCAN returns every key present for the whole
//! iteration at least once; it may return a key twice when the keyspace
//! *shrinks* (Redis rehashes to a smaller table) between two calls. A page
//! drops duplicates within itself; across pages nothing cheap can (the
//! cursor would have to carry every key returned so far; the way out, a
//! per-purpose index, needs a key outside the resource's Cluster slot). So
//! on Redis a lease held throughout a listing appears **at least once**,
//! and twice only when the keyspace shrank during the listing; a lease gone
//! before the listing began never appears (every key is read at page time).
//!
//! A SCAN cursor means something only to the process that issued it (its
//! hash table, seeded at random per process), so the cursor names the node
//! by its `run_id`: after a failover or restart the new node's SCAN starts
//! over (at least once still holds; more repeats). On a Cluster the masters
//! are visited in the order of their lowest slot, which a failover keeps;
//! a resharding during a listing may miss or repeat leases of the slots
//! that moved.
//!
//! The SCAN replies carry no nonce, so each SCAN goes out in one pipeline
//! with `PING <nonce>`: the PING's echo proves the replies before it are
//! this call's (as `exec::in_step` does for error replies).

use futures_util::future::join_all;
use redis::Value;
use tokio::time::{timeout_at, Instant};

use super::exec::{self, SendError};
use super::pool::Conn;
use super::reply;
use super::store::{Backend, RedisStore};
use crate::domain::{ListCursor, Purpose, ResourceDigest, ResourceId, ScanPosition, NODE_ID_LEN};
use crate::store::{Probe, StoreError, StoreInspect, StoreListed, StorePage};

/// SCAN calls one page may make (its work budget).
const SCAN_CALLS_PER_PAGE: usize = 10;
/// Smallest `COUNT` sent: a small page still examines a useful number of
/// buckets per round trip.
const MIN_SCAN_COUNT: usize = 32;
/// Reads of one page sent together (a batch, then the next): pipelined on
/// the shared connection, but never a thousand commands queued ahead of
/// other requests' scripts.
const READS_IN_FLIGHT: usize = 64;

/// Why a listing read failed. A listing only reads, so an uncertain reply
/// is as good as none: every failure is `Unavailable`.
fn unavailable(err: StoreError) -> StoreError {
    match err {
        StoreError::Indeterminate(reason) | StoreError::Unavailable(reason) => {
            StoreError::Unavailable(reason)
        }
    }
}

/// One SCAN call's findings.
struct Scanned {
    /// The node's `run_id` fingerprint, when asked for.
    node: Option<String>,
    /// The cursor to send next (0: this node is done).
    next: u64,
    /// Keys matched.
    keys: Vec<Vec<u8>>,
}

impl RedisStore {
    /// Whether `cursor` is one this store issues (a SCAN position; on a
    /// standalone or Sentinel Redis, of the one shard there is).
    pub(in crate::store) fn accepts(&self, cursor: &ListCursor) -> bool {
        match cursor {
            ListCursor::After(_) => false,
            ListCursor::Scan(p) => {
                matches!(self.backend, Backend::Cluster(_))
                    || p.shard == 0
                    || p.shard == ScanPosition::DONE
            }
        }
    }

    pub(in crate::store) async fn list(
        &self,
        purpose: &Purpose,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<StorePage, StoreError> {
        let mut position = match cursor {
            Some(ListCursor::Scan(p)) => p.clone(),
            // `Store::accepts` keeps other cursors out; start over if one came.
            _ => ScanPosition {
                shard: self.first_shard().await?,
                node: "0".into(),
                scan: 0,
                pending: Vec::new(),
            },
        };
        let prefix = format!("{}:lease:v2:{{{purpose}:", self.namespace);
        let pattern = format!("{}*", glob_escape(&prefix));
        let mut found: Vec<ResourceDigest> = std::mem::take(&mut position.pending);
        let mut seen: std::collections::HashSet<ResourceDigest> = found.iter().cloned().collect();
        let mut calls = 0;
        while found.len() < limit
            && calls < SCAN_CALLS_PER_PAGE
            && position.shard != ScanPosition::DONE
        {
            let deadline = Instant::now() + self.command_timeout;
            let mut conn = self.shard_conn(position.shard, deadline).await?;
            let mut asked_node = false;
            while found.len() < limit && calls < SCAN_CALLS_PER_PAGE {
                let count = (limit - found.len()).clamp(MIN_SCAN_COUNT, 1000);
                let deadline = Instant::now() + self.command_timeout;
                let scanned = scan(
                    &mut conn,
                    !asked_node,
                    position.scan,
                    &pattern,
                    count,
                    deadline,
                )
                .await;
                let scanned = match scanned {
                    Ok(s) => s,
                    Err(err) => {
                        if let Backend::Cluster(c) = &self.backend {
                            c.suspect_map();
                        }
                        return Err(err);
                    }
                };
                calls += 1;
                if let Some(node) = scanned.node {
                    asked_node = true;
                    if position.scan != 0 && node != position.node {
                        // Another process than the one the cursor's SCAN
                        // ran on (failover, restart): its cursor means
                        // nothing here; start this node's SCAN over.
                        tracing::info!(
                            "listing resumed on another Redis process; its SCAN starts over"
                        );
                        position.node = node;
                        position.scan = 0;
                        continue;
                    }
                    position.node = node;
                }
                for key in &scanned.keys {
                    let digest = std::str::from_utf8(key)
                        .ok()
                        .and_then(|k| k.strip_prefix(prefix.as_str()))
                        .and_then(|rest| rest.strip_suffix('}'))
                        .and_then(|d| ResourceDigest::parse(d).ok());
                    if let Some(digest) = digest {
                        if seen.insert(digest.clone()) {
                            found.push(digest);
                        }
                    }
                }
                position.scan = scanned.next;
                if scanned.next == 0 {
                    position.shard = self.shard_after(position.shard).await?;
                    position.node = "0".into();
                    break;
                }
            }
        }
        // One SCAN call returns whole hash buckets, so the last may bring
        // more than the room left: those wait in the cursor. (Over 64 more
        // takes a rehash of a shrinking table, whose every step visits many
        // buckets, or a very long bucket chain; then the page is longer
        // than `limit` rather than lose a lease.)
        if found.len() > limit + ScanPosition::MAX_PENDING {
            tracing::debug!(
                found = found.len(),
                limit,
                "one SCAN call found more than a cursor carries; the page holds them all"
            );
        } else if found.len() > limit {
            position.pending = found.split_off(limit);
        }
        let leases = self.read_all(purpose, &found).await?;
        let next = (position.shard != ScanPosition::DONE || !position.pending.is_empty())
            .then_some(ListCursor::Scan(position));
        Ok(StorePage { leases, next })
    }

    /// The shard a fresh listing starts on.
    async fn first_shard(&self) -> Result<u16, StoreError> {
        match &self.backend {
            Backend::Cluster(c) => {
                let deadline = Instant::now() + self.command_timeout;
                Ok(c.shards(deadline)
                    .await
                    .map_err(unavailable)?
                    .first()
                    .copied()
                    .unwrap_or(ScanPosition::DONE))
            }
            _ => Ok(0),
        }
    }

    /// The shard after `shard` ([`ScanPosition::DONE`] after the last).
    async fn shard_after(&self, shard: u16) -> Result<u16, StoreError> {
        match &self.backend {
            Backend::Cluster(c) => {
                let deadline = Instant::now() + self.command_timeout;
                Ok(c.shards(deadline)
                    .await
                    .map_err(unavailable)?
                    .into_iter()
                    .find(|s| *s > shard)
                    .unwrap_or(ScanPosition::DONE))
            }
            _ => Ok(ScanPosition::DONE),
        }
    }

    /// A connection to the node that holds `shard`. On a Cluster, a shard
    /// whose lowest slot no longer starts a master's range (a resharding)
    /// is scanned wherever that slot lives now.
    async fn shard_conn(&self, shard: u16, deadline: Instant) -> Result<Conn, StoreError> {
        match &self.backend {
            Backend::Standalone { pool, .. } => pool.checkout(deadline).await,
            Backend::Sentinel(s) => s.master_conn(deadline).await,
            Backend::Cluster(c) => c.slot_conn(shard, deadline).await,
        }
        .map_err(unavailable)
    }

    /// Reads each resource with the inspect script, in order, keeping
    /// those held. The first read goes alone so that a server without the
    /// script loads it once, not once per key.
    async fn read_all(
        &self,
        purpose: &Purpose,
        digests: &[ResourceDigest],
    ) -> Result<Vec<StoreListed>, StoreError> {
        let Some((first, rest)) = digests.split_first() else {
            return Ok(Vec::new());
        };
        let mut read = vec![self.read_one(purpose, first).await];
        for batch in rest.chunks(READS_IN_FLIGHT) {
            read.extend(join_all(batch.iter().map(|d| self.read_one(purpose, d))).await);
        }
        let mut leases = Vec::with_capacity(digests.len());
        for listed in read {
            leases.extend(listed.map_err(unavailable)?);
        }
        Ok(leases)
    }

    /// One resource read exactly as `GET /leases/{purpose}/{digest}` reads
    /// it (the inspect script, no prober, no watch mark): `None` when free.
    async fn read_one(
        &self,
        purpose: &Purpose,
        digest: &ResourceDigest,
    ) -> Result<Option<StoreListed>, StoreError> {
        let resource = ResourceId {
            purpose: purpose.clone(),
            digest: digest.clone(),
        };
        Ok(match self.inspect(&resource, Probe::Anyone, false).await? {
            StoreInspect::Free { .. } => None,
            StoreInspect::Held {
                holders,
                permits,
                limit,
                mode,
                ..
            } => Some(StoreListed {
                digest: resource.digest,
                holders,
                permits,
                limit,
                mode,
            }),
        })
    }
}

/// One `SCAN <cursor> MATCH <pattern> COUNT <count>` on `conn`, preceded by
/// `INFO server` when `with_node` (for the node's `run_id`) and followed by
/// `PING <nonce>` in the same pipeline.
async fn scan(
    conn: &mut Conn,
    with_node: bool,
    cursor: u64,
    pattern: &str,
    count: usize,
    deadline: Instant,
) -> Result<Scanned, StoreError> {
    let nonce = reply::next_nonce();
    let mut pipe = redis::pipe();
    if with_node {
        pipe.cmd("INFO").arg("server");
    }
    pipe.cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count);
    pipe.cmd("PING").arg(nonce.as_str());
    let expected = if with_node { 3 } else { 2 };
    let replies = match timeout_at(
        deadline,
        conn.inner.send_packed_commands(&pipe, 0, expected),
    )
    .await
    {
        Err(_) => {
            conn.mark_dead();
            return Err(StoreError::Unavailable(
                "no reply to SCAN within the command timeout",
            ));
        }
        Ok(Err(err)) => return Err(unavailable(exec::classify(conn, SendError::Redis(err)))),
        Ok(Ok(replies)) => replies,
    };
    let mut replies = replies.into_iter();
    let (info, scanned, ping) = match (with_node, replies.next(), replies.next(), replies.next()) {
        (true, Some(info), Some(scanned), Some(ping)) => (Some(info), scanned, ping),
        (false, Some(scanned), Some(ping), None) => (None, scanned, ping),
        _ => return Err(desync(conn)),
    };
    let echoed = match &ping {
        Value::BulkString(b) => b.as_slice() == nonce.as_str().as_bytes(),
        Value::SimpleString(s) => s == nonce.as_str(),
        _ => false,
    };
    if !echoed {
        return Err(desync(conn));
    }
    for reply in info.iter().chain([&scanned]) {
        if let Value::ServerError(err) = reply {
            let code = err.code();
            tracing::warn!(code, "redis refused a listing command");
            return Err(StoreError::Unavailable(reply::refusal_reason(code)));
        }
    }
    let node = match info {
        Some(info) => Some(run_id(&info).ok_or(StoreError::Unavailable(
            "INFO server did not name the Redis run_id",
        ))?),
        None => None,
    };
    let (next, keys) =
        scan_reply(scanned).ok_or(StoreError::Unavailable("unexpected SCAN reply from Redis"))?;
    Ok(Scanned { node, next, keys })
}

fn desync(conn: &Conn) -> StoreError {
    conn.mark_dead();
    tracing::warn!("a SCAN reply could not be matched to its request; connection dropped");
    StoreError::Unavailable(reply::DESYNC)
}

/// The `run_id` fingerprint (its first hex digits) from `INFO server` text.
fn run_id(info: &Value) -> Option<String> {
    let text = match info {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?,
        Value::VerbatimString { text, .. } => text.as_str(),
        Value::SimpleString(s) => s.as_str(),
        _ => return None,
    };
    let id = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))?
        .trim();
    let valid = !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| {
        id.chars()
            .take(NODE_ID_LEN)
            .collect::<String>()
            .to_ascii_lowercase()
    })
}

/// `[cursor, [key, ...]]`.
fn scan_reply(reply: Value) -> Option<(u64, Vec<Vec<u8>>)> {
    let Value::Array(mut parts) = reply else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let keys = parts.pop()?;
    let cursor = match parts.pop()? {
        Value::BulkString(b) => std::str::from_utf8(&b).ok()?.parse().ok()?,
        Value::SimpleString(s) => s.parse().ok()?,
        Value::Int(i) => u64::try_from(i).ok()?,
        _ => return None,
    };
    let Value::Array(keys) = keys else {
        return None;
    };
    let keys = keys
        .into_iter()
        .map(|k| match k {
            Value::BulkString(b) => Some(b),
            Value::SimpleString(s) => Some(s.into_bytes()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((cursor, keys))
}

/// `text` as a SCAN MATCH pattern that matches only itself.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn glob_metacharacters_are_escaped() {
        assert_eq!(glob_escape("ns:lease:v2:{p:"), "ns:lease:v2:{p:");
        assert_eq!(glob_escape("a*b?c[d]e\\"), "a\\*b\\?c\\[d\\]e\\\\");
    }

    #[test]
    fn run_ids_and_scan_replies_parse() {
        let info = bulk("# Server\r\nredis_version:7.0.15\r\nrun_id:ABCDEF0123456789abcdef0123456789abcdef01\r\n");
        assert_eq!(run_id(&info).as_deref(), Some("abcdef0123456789"));
        assert_eq!(run_id(&bulk("# Server\r\n")), None);
        assert_eq!(run_id(&bulk("run_id:xyz\r\n")), None);
        let reply = Value::Array(vec![bulk("17"), Value::Array(vec![bulk("k1"), bulk("k2")])]);
        assert_eq!(
            scan_reply(reply),
            Some((17, vec![b"k1".to_vec(), b"k2".to_vec()]))
        );
        assert_eq!(
            scan_reply(Value::Array(vec![bulk("x"), Value::Array(vec![])])),
            None
        );
        assert_eq!(scan_reply(Value::Int(3)), None);
    }
}
