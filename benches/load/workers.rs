//! The load generator's clients, one task each, for the length of one
//! phase: the raw worker (EVALSHA on a shared multiplexed connection) and
//! the HTTP worker (its own keep-alive connection), each closed-loop or
//! paced to an offered rate.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use redis::aio::MultiplexedConnection;

use crate::consts::{LEASE_TTL_MS, PERMITS_WAIT_MS};
use crate::http_client::{body_json, digest, lease_path, Client, Http};
use crate::raw::Raw;
use crate::scenario::Kind;
use crate::stats::{Stats, Window, SENT};

/// Shared by the workers of one phase.
pub(crate) struct Ctx {
    pub(crate) kind: Kind,
    pub(crate) addr: SocketAddr,
    pub(crate) raw: Arc<Raw>,
    pub(crate) conns: Vec<MultiplexedConnection>,
    pub(crate) salt: u32,
    pub(crate) resources: usize,
    /// Paced phases: the interval between two sends of one worker.
    pub(crate) interval: Option<Duration>,
    pub(crate) concurrency: usize,
    pub(crate) first_start: Instant,
}

/// Paced phases: waits until this worker's next send time.
async fn pace(ctx: &Ctx, id: usize, n: u64, stats: &mut Stats, win: &Window) -> bool {
    let Some(interval) = ctx.interval else {
        return Instant::now() < win.end;
    };
    let offset = interval.mul_f64(id as f64 / ctx.concurrency as f64);
    let due = ctx.first_start + offset + interval.mul_f64(n as f64);
    if due >= win.end {
        return false;
    }
    let now = Instant::now();
    if due > now {
        tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
    } else if now - due > interval && due >= win.start {
        stats.late_sends += 1;
    }
    true
}

pub(crate) async fn raw_worker(id: usize, ctx: Arc<Ctx>, win: Window) -> Stats {
    let mut stats = Stats::default();
    let mut conn = ctx.conns[id % ctx.conns.len()].clone();
    let mut client = match Client::new(id) {
        Ok(c) => c,
        Err(e) => {
            stats.untyped(e);
            return stats;
        }
    };
    let mut n: u64 = 0;
    let contended_digest = digest(0, id % ctx.resources, 0);
    while pace(&ctx, id, n, &mut stats, &win).await {
        n += 1;
        let op = client.next_op();
        let t0 = Instant::now();
        match ctx.kind {
            Kind::Acquire | Kind::Paced => match ctx
                .raw
                .acquire(&mut conn, &digest(ctx.salt, id, n), &client.token, &op)
                .await
            {
                Ok(1) => stats.op(&win, t0),
                Ok(s) => stats.untyped(format!("raw acquire status {s}")),
                Err(e) => stats.untyped(e),
            },
            Kind::Cycle => {
                let d = digest(ctx.salt, id, n);
                match ctx.raw.acquire(&mut conn, &d, &client.token, &op).await {
                    Ok(1) => match ctx.raw.release(&mut conn, &d, &client.token, &op).await {
                        Ok(1) => stats.op(&win, t0),
                        Ok(s) => stats.untyped(format!("raw release status {s}")),
                        Err(e) => stats.untyped(e),
                    },
                    Ok(s) => stats.untyped(format!("raw acquire status {s}")),
                    Err(e) => stats.untyped(e),
                }
            }
            Kind::Permits(_) => {
                stats.untyped("permits has no raw side");
                break;
            }
            Kind::Contended => match ctx
                .raw
                .acquire(&mut conn, &contended_digest, &client.token, &op)
                .await
            {
                Ok(1) => {
                    stats.op(&win, t0);
                    if win.contains(t0, Instant::now()) {
                        stats.acquired += 1;
                    }
                    let t1 = Instant::now();
                    match ctx
                        .raw
                        .release(&mut conn, &contended_digest, &client.token, &op)
                        .await
                    {
                        Ok(1) => stats.op(&win, t1),
                        Ok(s) => stats.untyped(format!("raw release status {s}")),
                        Err(e) => stats.untyped(e),
                    }
                }
                Ok(0) => {
                    stats.op(&win, t0);
                    if win.contains(t0, Instant::now()) {
                        stats.contended += 1;
                    }
                }
                Ok(s) => stats.untyped(format!("raw acquire status {s}")),
                Err(e) => stats.untyped(e),
            },
        }
    }
    stats
}

pub(crate) async fn http_worker(id: usize, ctx: Arc<Ctx>, win: Window) -> Stats {
    let mut stats = Stats::default();
    let mut client = match Client::new(id) {
        Ok(c) => c,
        Err(e) => {
            stats.untyped(e);
            return stats;
        }
    };
    let mut conn: Option<Http> = None;
    let put = match ctx.kind {
        Kind::Permits(limit) => Bytes::from(format!(
            "{{\"ttlMs\":{LEASE_TTL_MS},\"waitMs\":{PERMITS_WAIT_MS},\"limit\":{limit}}}"
        )),
        _ => body_json(LEASE_TTL_MS, 0),
    };
    let contended_path = match ctx.kind {
        // All contenders on one resource.
        Kind::Permits(_) => lease_path(&digest(0xbe, 0, 0)),
        _ => lease_path(&digest(0, id % ctx.resources, 0)),
    };
    // Permits and cycles count one op per acquire + release, from the PUT.
    let whole_cycle = matches!(ctx.kind, Kind::Cycle | Kind::Permits(_));
    let mut n: u64 = 0;
    while pace(&ctx, id, n, &mut stats, &win).await {
        let http = match conn.as_mut() {
            Some(h) => h,
            None => match Http::connect(ctx.addr).await {
                Ok(h) => conn.insert(h),
                Err(e) => {
                    stats.untyped(format!("socket: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        n += 1;
        let op = client.next_op();
        let headers = [
            ("lease-owner-token", client.token.as_str()),
            ("lease-operation-id", op.as_str()),
        ];
        let path = if matches!(ctx.kind, Kind::Contended | Kind::Permits(_)) {
            contended_path.clone()
        } else {
            lease_path(&digest(ctx.salt, id, n))
        };
        let t0 = Instant::now();
        SENT.fetch_add(1, Ordering::Relaxed);
        let acquired = match http.call(Method::PUT, &path, &headers, Some(&put)).await {
            Ok((201, _)) => {
                if !whole_cycle {
                    stats.op(&win, t0);
                }
                if ctx.kind == Kind::Contended && win.contains(t0, Instant::now()) {
                    stats.acquired += 1;
                }
                true
            }
            Ok((409, body))
                if matches!(ctx.kind, Kind::Contended | Kind::Permits(_))
                    && body.windows(11).any(|w| w == b"\"contended\"") =>
            {
                // Permits: the wait ran out; counted apart, not as a cycle.
                if !whole_cycle {
                    stats.op(&win, t0);
                }
                if win.contains(t0, Instant::now()) {
                    stats.contended += 1;
                }
                false
            }
            Ok((status, body)) => {
                stats.bad_status(status, &body);
                false
            }
            Err(e) => {
                stats.untyped(format!("socket: {e}"));
                conn = None;
                false
            }
        };
        if !acquired || ctx.kind == Kind::Acquire || ctx.kind == Kind::Paced {
            continue;
        }
        let Some(http) = conn.as_mut() else { continue };
        let t1 = Instant::now();
        SENT.fetch_add(1, Ordering::Relaxed);
        match http.call(Method::DELETE, &path, &headers, None).await {
            Ok((200, _)) => stats.op(&win, if whole_cycle { t0 } else { t1 }),
            Ok((status, body)) => stats.bad_status(status, &body),
            Err(e) => {
                stats.untyped(format!("socket: {e}"));
                conn = None;
            }
        }
    }
    stats
}
