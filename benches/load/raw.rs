//! Raw Redis, the other side of the comparison: the service's own Lua
//! scripts run by EVALSHA on the same keys with the same arguments, the
//! connections that send them, and the counters Redis keeps (`INFO stats`,
//! `INFO commandstats`) read after each phase.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo as _, ProtocolVersion, Value};
use tokio::time::timeout;

use leasehold::store::redis::lua::{self, Source};

use crate::consts::{LEASE_TTL_MS, NAMESPACE, PURPOSE, REQUEST_TIMEOUT};
use crate::stats::SENT;

/// The scripts as the service runs them (their includes spliced in); their
/// entry files' headers name the arguments.
const ACQUIRE_LUA: Source = lua::ACQUIRE;
const RELEASE_LUA: Source = lua::RELEASE;
/// Raw releases publish here; nobody subscribes (the service's channel is
/// `<ns>:wake:v2`, and raw traffic must not wake the service).
const RAW_WAKE_CHANNEL: &str = "bench-raw:wake:v2";
/// The instance id a raw release names (lua/release.lua ARGV[8]): no queue
/// member has it, so no raw release grants anything.
const RAW_INSTANCE: &str = "bench-raw";
/// How many `ARGV` the raw calls below pass to each script.
const ACQUIRE_ARGS: usize = 9;
const RELEASE_ARGS: usize = 9;
/// The keys each script takes after the record and the sequence, in its
/// header's order (lua/acquire.lua and lua/release.lua `KEYS[3]` on).
const ACQUIRE_KEYS: &[&str] = &["hist", "exp", "queue", "ask", "claim", "granted"];
const RELEASE_KEYS: &[&str] = &["tomb", "hist", "exp", "queue", "ask", "claim", "granted"];

/// The highest `ARGV[n]` the header comment of `source` names: a script
/// that grew an argument fails the bench at once, rather than every raw
/// call failing as a Redis error counted among the phase's errors.
fn header_args(source: &str) -> usize {
    header_count(source, "ARGV[")
}

/// The highest `<open>n]` the header comment of `source` names.
fn header_count(source: &str, open: &str) -> usize {
    source
        .lines()
        .take_while(|l| l.starts_with("--"))
        .flat_map(|l| l.split(open).skip(1))
        .filter_map(|rest| rest.split(']').next()?.parse::<usize>().ok())
        .max()
        .unwrap_or(0)
}

pub(crate) struct Raw {
    pub(crate) acquire_sha: String,
    pub(crate) release_sha: String,
}

impl Raw {
    /// Loads the two scripts (they stay loaded across `FLUSHALL`).
    pub(crate) async fn load(admin: &mut MultiplexedConnection) -> Result<Self, String> {
        for (name, source, passed, keys) in [
            ("acquire", ACQUIRE_LUA, ACQUIRE_ARGS, ACQUIRE_KEYS),
            ("release", RELEASE_LUA, RELEASE_ARGS, RELEASE_KEYS),
        ] {
            let wanted = header_args(source.entry);
            if wanted != passed {
                return Err(format!(
                    "lua/{name}.lua takes {wanted} ARGV, benches/load/raw.rs passes {passed}: update the raw call"
                ));
            }
            let wanted = header_count(source.entry, "KEYS[");
            if wanted != 2 + keys.len() {
                return Err(format!(
                    "lua/{name}.lua takes {wanted} KEYS, benches/load/raw.rs passes {}: update the raw call",
                    2 + keys.len()
                ));
            }
        }
        let acquire_sha = redis_cmd(admin, &["SCRIPT", "LOAD", ACQUIRE_LUA.assembled]).await?;
        let release_sha = redis_cmd(admin, &["SCRIPT", "LOAD", RELEASE_LUA.assembled]).await?;
        let text = |v: Value| redis::from_redis_value::<String>(v).map_err(|e| e.to_string());
        Ok(Self {
            acquire_sha: text(acquire_sha)?,
            release_sha: text(release_sha)?,
        })
    }

    /// The record and sequence keys of a resource of `PURPOSE`.
    pub(crate) fn keys(digest: &str) -> [String; 2] {
        ["lease", "seq"].map(|k| format!("{NAMESPACE}:{k}:v2:{{{PURPOSE}:{digest}}}"))
    }

    /// Every key `lua/<script>.lua` touches after the record and the
    /// sequence (its header's `KEYS[3]` on), as the service passes them:
    /// `kinds` of the resource, the claim key of the attempt where the
    /// header names one, as `"claim"`.
    fn more_keys(digest: &str, kinds: &[&str], token: &str, op: &str) -> Vec<String> {
        kinds
            .iter()
            .map(|k| match *k {
                "claim" => format!("{NAMESPACE}:claim:v2:{{{PURPOSE}:{digest}}}:p:{token}:{op}"),
                k => format!("{NAMESPACE}:{k}:v2:{{{PURPOSE}:{digest}}}"),
            })
            .collect()
    }

    pub(crate) async fn acquire(
        &self,
        conn: &mut MultiplexedConnection,
        digest: &str,
        token: &str,
        op: &str,
    ) -> Result<i64, String> {
        self.acquire_for(conn, digest, token, op, LEASE_TTL_MS)
            .await
    }

    /// A plain exclusive acquire (no holder label, shape '': limit 1,
    /// exclusive, no lock-delay, not queued), with the arguments in
    /// `lua/acquire.lua`'s order, as the service sends them.
    pub(crate) async fn acquire_for(
        &self,
        conn: &mut MultiplexedConnection,
        digest: &str,
        token: &str,
        op: &str,
        ttl_ms: u64,
    ) -> Result<i64, String> {
        SENT.fetch_add(1, Ordering::Relaxed);
        let [lease, seq] = Self::keys(digest);
        let more = Self::more_keys(digest, ACQUIRE_KEYS, token, op);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.acquire_sha)
            .arg(2 + more.len())
            .arg(&lease)
            .arg(&seq)
            .arg(&more)
            .arg(token)
            .arg(op)
            .arg(ttl_ms)
            .arg("")
            .arg("")
            // History bounds (lua/acquire.lua ARGV[6], ARGV[7]): the defaults.
            .arg("100")
            .arg("604800000")
            // "purpose watched" (lua/acquire.lua ARGV[8]): nobody watches.
            .arg("")
            .arg(RAW_NONCE.fetch_add(1, Ordering::Relaxed));
        first_int(timeout(REQUEST_TIMEOUT, cmd.query_async::<Value>(conn)).await)
    }

    pub(crate) async fn release(
        &self,
        conn: &mut MultiplexedConnection,
        digest: &str,
        token: &str,
        op: &str,
    ) -> Result<i64, String> {
        SENT.fetch_add(1, Ordering::Relaxed);
        let [lease, seq] = Self::keys(digest);
        let more = Self::more_keys(digest, RELEASE_KEYS, token, op);
        let mut cmd = redis::cmd("EVALSHA");
        let tag = format!("{PURPOSE}:{digest}");
        cmd.arg(&self.release_sha)
            .arg(2 + more.len())
            .arg(&lease)
            .arg(&seq)
            .arg(&more)
            .arg(token)
            .arg(op)
            .arg(RAW_WAKE_CHANNEL)
            .arg(&tag)
            // The mode (lua/release.lua ARGV[5]): '' is the caller's release.
            .arg("")
            // History bounds (lua/release.lua ARGV[6], ARGV[7]): the defaults.
            .arg("100")
            .arg("604800000")
            .arg(RAW_INSTANCE)
            .arg(RAW_NONCE.fetch_add(1, Ordering::Relaxed));
        first_int(timeout(REQUEST_TIMEOUT, cmd.query_async::<Value>(conn)).await)
    }
}

/// The raw side passes a nonce as the scripts expect (the service does the
/// same per call); it does not check the echo, which costs it nothing.
static RAW_NONCE: AtomicU32 = AtomicU32::new(1);

fn first_int(
    reply: Result<redis::RedisResult<Value>, tokio::time::error::Elapsed>,
) -> Result<i64, String> {
    match reply {
        Err(_) => Err("redis: no reply within 5 s".into()),
        Ok(Err(e)) => Err(format!("redis: {:?}", e.kind())),
        // Every script leads with nonce * 16 + status + 9.
        Ok(Ok(Value::Array(items))) => match items.first() {
            Some(Value::Int(v)) => Ok((v & 15) - 9),
            _ => Err("redis: unexpected reply".into()),
        },
        // An answer of integers only comes packed, "<tag> <item> ..."
        // (the scripts' `answer`); the service reads it as the service does.
        Ok(Ok(Value::BulkString(packed))) => {
            let tag = packed.split(|b| *b == b' ').next().unwrap_or_default();
            match std::str::from_utf8(tag)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
            {
                Some(v) => Ok((v & 15) - 9),
                None => Err("redis: unexpected reply".into()),
            }
        }
        Ok(Ok(_)) => Err("redis: unexpected reply".into()),
    }
}

pub(crate) async fn redis_conns(url: &str, n: usize) -> Result<Vec<MultiplexedConnection>, String> {
    let info = url.into_connection_info().map_err(|e| e.to_string())?;
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client =
        redis::Client::open(info.set_redis_settings(settings)).map_err(|e| e.to_string())?;
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| format!("redis connect: {e}"))?,
        );
    }
    Ok(out)
}

pub(crate) async fn redis_cmd(
    conn: &mut MultiplexedConnection,
    args: &[&str],
) -> Result<Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async::<Value>(conn)
        .await
        .map_err(|e| format!("redis {}: {e}", args[0]))
}

// ---------------------------------------------------------------------------
// what Redis itself counted: INFO stats and commandstats
// ---------------------------------------------------------------------------

/// A counter of `INFO stats`.
pub(crate) async fn stat(conn: &mut MultiplexedConnection, name: &str) -> Result<u64, String> {
    let text: String = redis::from_redis_value(redis_cmd(conn, &["INFO", "stats"]).await?)
        .map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
        .ok_or_else(|| format!("INFO stats has no {name}"))
}

/// `INFO commandstats` as (command, calls).
pub(crate) async fn command_calls(
    conn: &mut MultiplexedConnection,
) -> Result<BTreeMap<String, u64>, String> {
    let text: String = redis::from_redis_value(redis_cmd(conn, &["INFO", "commandstats"]).await?)
        .map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect())
}

/// Redis' own time per EVALSHA in µs (`usec_per_call` of `INFO
/// commandstats`): how long the scripts ran inside Redis, whatever the
/// clients did (a neighbour that preempts Redis still inflates it).
pub(crate) async fn evalsha_usec(conn: &mut MultiplexedConnection) -> Result<f64, String> {
    let text: String = redis::from_redis_value(redis_cmd(conn, &["INFO", "commandstats"]).await?)
        .map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix("usec_per_call="))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(f64::NAN))
}
