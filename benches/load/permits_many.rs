//! `permits-many` (issue 21): one resource at limit 10 000 held by N
//! holders that all keep renewing, N = 100 then `--permits-many` (default
//! 10 000), alternating per round. A renew must cost Redis the same
//! whatever N: the goal line compares Redis' time per renew (`usec_per_call`
//! of `EVALSHA`, reset before each phase) at the two sizes, within 2×.
//!
//! The holders are written straight into the record (one hash, one field a
//! permit, in the layout `lua/acquire.lua` writes: see its header, and its
//! expiry index), so the fill does not depend on what an acquire costs; the
//! phase then renews them through the service, round robin, C clients at
//! once. A second phase per size fills N − C holders and has C clients
//! acquire and release a permit of their own in a loop: an acquire and a
//! release must cost Redis the same whatever N too.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::Method;

use crate::env::Env;
use crate::http_client::{digest, Client, Http};
use crate::opts::Opts;
use crate::procs::{cpu_between, Cpu};
use crate::raw::{redis_cmd, Raw};
use crate::stats::{median, percentile, spread, Stats, Window};

/// The lease's limit: the largest a counting lease may have.
const LIMIT: u32 = 10_000;
/// The TTL of every permit, written and renewed: longer than a phase.
const TTL_MS: u64 = 90_000;
/// Fields per HSET while filling.
const BATCH: usize = 500;

/// One holder: its attempt.
struct Holder {
    token: String,
    op: String,
}

/// Writes `n` live permits of one resource, as the acquire script would.
async fn fill(env: &Env, d: &str, n: usize) -> Result<Vec<Holder>, String> {
    let mut admin = env.admin.clone();
    redis_cmd(&mut admin, &["FLUSHALL", "SYNC"]).await?;
    let time: Vec<String> = redis::from_redis_value(redis_cmd(&mut admin, &["TIME"]).await?)
        .map_err(|e| e.to_string())?;
    let secs: u64 = time[0].parse().map_err(|_| "TIME")?;
    let micros: u64 = time[1].parse().map_err(|_| "TIME")?;
    let now_ms = secs * 1000 + micros / 1000;
    let [lease, _] = Raw::keys(d);
    let index = lease.replacen(":lease:v2:", ":exp:v2:", 1);
    let expires = (now_ms + TTL_MS).to_string();
    let mut holders = Vec::with_capacity(n);
    let mut me = Client::new(0)?;
    for chunk in 0..n.div_ceil(BATCH) {
        let mut args: Vec<String> = vec!["HSET".into(), lease.clone()];
        if chunk == 0 {
            args.extend(["l".into(), LIMIT.to_string(), "m".into(), "x".into()]);
        }
        for i in chunk * BATCH..((chunk + 1) * BATCH).min(n) {
            if i % 64 == 0 {
                me = Client::new(i)?;
            }
            let op = me.next_op();
            let fence = secs * 1_000_000 + micros + i as u64;
            args.push(format!("p:{}:{op}", me.token));
            args.push(format!(
                "{fence}|{}|{now_ms}|{now_ms}|{TTL_MS}|0|",
                now_ms + TTL_MS
            ));
            holders.push(Holder {
                token: me.token.clone(),
                op,
            });
        }
        let mut zadd: Vec<&str> = vec!["ZADD", &index];
        for field in args
            .iter()
            .skip(2)
            .step_by(2)
            .filter(|f| f.starts_with("p:"))
        {
            zadd.push(&expires);
            zadd.push(field);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        redis_cmd(&mut admin, &refs).await?;
        if zadd.len() > 2 {
            redis_cmd(&mut admin, &zadd).await?;
        }
    }
    redis_cmd(&mut admin, &["PEXPIRE", &lease, &TTL_MS.to_string()]).await?;
    redis_cmd(&mut admin, &["PEXPIRE", &index, &TTL_MS.to_string()]).await?;
    Ok(holders)
}

/// What one size's phase measured.
struct Phase {
    /// Renewing every holder, or acquire-release cycles beside them.
    cycles: bool,
    holders: usize,
    stats: Stats,
    secs: f64,
    /// Redis' own µs per EVALSHA during the phase.
    redis_usec: f64,
    cpu: Cpu,
}

async fn renewer(
    addr: std::net::SocketAddr,
    d: String,
    holders: Arc<Vec<Holder>>,
    id: usize,
    step: usize,
    win: Window,
) -> Stats {
    let mut stats = Stats::default();
    let mut http = match Http::connect(addr).await {
        Ok(h) => h,
        Err(e) => {
            stats.untyped(format!("socket: {e}"));
            return stats;
        }
    };
    let path = crate::http_client::lease_path(&d);
    let body = Bytes::from(format!("{{\"ttlMs\":{TTL_MS}}}"));
    let mut i = id;
    while Instant::now() < win.end {
        let h = &holders[i % holders.len()];
        i += step;
        let t0 = Instant::now();
        let answer = http
            .call(
                Method::PATCH,
                &path,
                &[
                    ("lease-owner-token", &h.token),
                    ("lease-operation-id", &h.op),
                ],
                Some(&body),
            )
            .await;
        match answer {
            Ok((200, _)) => stats.op(&win, t0),
            Ok((s, body)) => stats.bad_status(s, &body),
            Err(e) => {
                stats.untyped(e);
                return stats;
            }
        }
    }
    stats
}

/// Acquires a permit of its own beside the holders and releases it, in a
/// loop: each acquire and each release counts as one operation.
async fn cycler(addr: std::net::SocketAddr, d: String, id: usize, win: Window) -> Stats {
    let mut stats = Stats::default();
    let (mut http, mut me) = match (Http::connect(addr).await, Client::new(1_000_000 + id)) {
        (Ok(h), Ok(c)) => (h, c),
        (Err(e), _) | (_, Err(e)) => {
            stats.untyped(format!("set-up: {e}"));
            return stats;
        }
    };
    let path = crate::http_client::lease_path(&d);
    let body = Bytes::from(format!("{{\"ttlMs\":{TTL_MS},\"limit\":{LIMIT}}}"));
    while Instant::now() < win.end {
        let op = me.next_op();
        let headers = [
            ("lease-owner-token", me.token.as_str()),
            ("lease-operation-id", op.as_str()),
        ];
        for (method, want, body) in [(Method::PUT, 201, Some(&body)), (Method::DELETE, 200, None)] {
            let t0 = Instant::now();
            match http.call(method, &path, &headers, body).await {
                Ok((s, _)) if s == want => stats.op(&win, t0),
                Ok((s, body)) => stats.bad_status(s, &body),
                Err(e) => {
                    stats.untyped(e);
                    return stats;
                }
            }
        }
    }
    stats
}

async fn phase(
    opts: &Opts,
    env: &Env,
    n: usize,
    round: usize,
    cycles: bool,
) -> Result<Phase, String> {
    let d = digest(if cycles { 0x22 } else { 0x21 }, round, n as u64);
    let filled = if cycles {
        n.saturating_sub(opts.concurrency)
    } else {
        n
    };
    let holders = Arc::new(fill(env, &d, filled).await?);
    let mut admin = env.admin.clone();
    let start = tokio::time::Instant::now() + opts.warmup;
    let end = start + opts.duration;
    let win = Window {
        start: start.into_std(),
        end: end.into_std(),
    };
    let cpu = cpu_between(env.pids.clone(), start, end);
    let reset = tokio::spawn({
        let mut admin = admin.clone();
        async move {
            tokio::time::sleep_until(start).await;
            redis_cmd(&mut admin, &["CONFIG", "RESETSTAT"]).await
        }
    });
    let mut tasks = Vec::new();
    for id in 0..opts.concurrency {
        if cycles {
            tasks.push(tokio::spawn(cycler(env.addr, d.clone(), id, win)));
        } else {
            tasks.push(tokio::spawn(renewer(
                env.addr,
                d.clone(),
                Arc::clone(&holders),
                id,
                opts.concurrency,
                win,
            )));
        }
    }
    let mut stats = Stats::default();
    for t in tasks {
        stats.merge(t.await.map_err(|e| e.to_string())?);
    }
    reset.await.map_err(|e| e.to_string())??;
    let redis_usec = crate::raw::evalsha_usec(&mut admin).await?;
    let cpu = cpu.await.map_err(|e| e.to_string())?;
    stats.lat_ns.sort_unstable();
    Ok(Phase {
        cycles,
        holders: n,
        stats,
        secs: opts.duration.as_secs_f64(),
        redis_usec,
        cpu,
    })
}

/// Runs the rounds and returns the section of the summary.
pub(crate) async fn run(opts: &Opts, env: &Env) -> Result<String, String> {
    let sizes = [100usize, opts.permits_many];
    let mut phases: Vec<Phase> = Vec::new();
    for round in 1..=opts.rounds {
        let mut order = sizes;
        if round.is_multiple_of(2) {
            order.reverse();
        }
        for cycles in [false, true] {
            for n in order {
                let p = phase(opts, env, n, round, cycles).await?;
                println!(
                    "| {round} | permits-many {n} holders | {:.0} {}/s | redis {:.1} µs/call | p50 {:.3} ms | p99 {:.3} ms | errors {} |",
                    p.stats.ops as f64 / p.secs,
                    if cycles { "acquires+releases" } else { "renews" },
                    p.redis_usec,
                    percentile(&p.stats.lat_ns, 50.0),
                    percentile(&p.stats.lat_ns, 99.0),
                    p.stats.errors() + p.stats.typed(),
                );
                phases.push(p);
            }
        }
    }
    let mut out = String::new();
    for cycles in [false, true] {
        let (title, what) = if cycles {
            (
                "N − C holders, C clients acquiring and releasing a permit of their own",
                "acquire or release",
            )
        } else {
            ("every holder renewing", "renew")
        };
        let _ = write!(
            out,
            "\n## Permits-many: one resource at limit {LIMIT}, {title} (C = {})\n\n| holders | calls/s (median [min..max]) | Redis µs per {what} (median [min..max]) | Redis CPU s/10k calls | p50 ms | p99 ms | errors |\n|---|---|---|---|---|---|---|\n",
            opts.concurrency,
        );
        let of_kind = |n: usize| -> Vec<&Phase> {
            phases
                .iter()
                .filter(|p| p.holders == n && p.cycles == cycles)
                .collect()
        };
        let usec_of = |n: usize| median(of_kind(n).iter().map(|p| p.redis_usec).collect());
        for n in sizes {
            let v = of_kind(n);
            let rates: Vec<f64> = v.iter().map(|p| p.stats.ops as f64 / p.secs).collect();
            let usecs: Vec<f64> = v.iter().map(|p| p.redis_usec).collect();
            let pct = |q: f64| median(v.iter().map(|p| percentile(&p.stats.lat_ns, q)).collect());
            let _ = writeln!(
                out,
                "| {n} | {:.0} [{}] | {:.1} [{}] | {:.3} | {:.3} | {:.3} | {} |",
                median(rates.clone()),
                spread(&rates),
                median(usecs.clone()),
                spread(&usecs),
                median(
                    v.iter()
                        .map(|p| crate::stats::per_10k(p.cpu.redis, p.stats.ops))
                        .collect()
                ),
                pct(50.0),
                pct(99.0),
                v.iter()
                    .map(|p| p.stats.errors() + p.stats.typed())
                    .sum::<u64>(),
            );
            for p in &v {
                for (k, c) in p.stats.untyped.iter().chain(&p.stats.typed_5xx) {
                    let _ = writeln!(out, "  permits-many {n} error: {c} × {k}");
                }
            }
        }
        let ratio = usec_of(opts.permits_many) / usec_of(100);
        let _ = writeln!(
            out,
            "\ngoal: Redis time per {what} at {} holders within 2× of 100 holders: {ratio:.2}× → {}",
            opts.permits_many,
            if ratio <= 2.0 { "met" } else { "missed" }
        );
    }
    Ok(out)
}
