//! `list` (issue 14): listing pages per second over `--list-leases` held
//! leases of one purpose (default 100 000), `--list-page` per page (default
//! 100), each walker following `nextCursor` through the whole listing and
//! starting over, for the measured window; new build only. The leases are
//! created with raw EVALSHA of `lua/acquire.lua` (1 h TTL), exactly as the
//! service writes them, before the phases.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;

use crate::consts::PURPOSE;
use crate::env::Env;
use crate::http_client::{digest, Client, Http};
use crate::opts::Opts;
use crate::procs::{cpu_between, Cpu};
use crate::raw::redis_cmd;
use crate::stats::{median, percentile, spread, Stats, Window};

/// TTL of the listed leases: longer than any run.
const HELD_TTL_MS: u64 = 3_600_000;
/// Walkers of the two phases of each round.
const WALKERS: [usize; 2] = [1, 4];

/// Creates the leases: C tasks over the shared raw connections.
async fn fill(opts: &Opts, env: &Env) -> Result<f64, String> {
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let total = opts.list_leases;
    let mut tasks = Vec::new();
    for id in 0..opts.concurrency {
        let (next, raw) = (Arc::clone(&next), Arc::clone(&env.raw));
        let mut conn = env.raw_conns[id % env.raw_conns.len()].clone();
        tasks.push(tokio::spawn(async move {
            let me = Client::new(id)?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<(), String>(());
                }
                let d = digest(0x115, 0, i as u64);
                match raw
                    .acquire_for(&mut conn, &d, &me.token, &format!("l{i}"), HELD_TTL_MS)
                    .await?
                {
                    1 => {}
                    s => return Err(format!("raw acquire status {s} while filling")),
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// What the walkers of one phase saw.
#[derive(Default)]
struct Walks {
    pages: Stats,
    leases: u64,
    /// Leases seen by each complete walk.
    per_walk: Vec<u64>,
    walk_s: Vec<f64>,
}

/// CPU seconds per 1 000 pages.
fn per_1k(cpu_s: f64, pages: u64) -> f64 {
    if pages == 0 {
        f64::NAN
    } else {
        cpu_s / pages as f64 * 1_000.0
    }
}

/// Percent-encodes a cursor for the query string.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

async fn walker(env_addr: std::net::SocketAddr, page: usize, win: Window) -> Walks {
    let mut w = Walks::default();
    let mut http = match Http::connect(env_addr).await {
        Ok(h) => h,
        Err(e) => {
            w.pages.untyped(format!("socket: {e}"));
            return w;
        }
    };
    let mut cursor: Option<String> = None;
    let (mut seen, mut walk_started) = (0u64, Instant::now());
    while Instant::now() < win.end {
        let path = match &cursor {
            Some(c) => format!("/leases/{PURPOSE}?limit={page}&cursor={}", encode(c)),
            None => format!("/leases/{PURPOSE}?limit={page}"),
        };
        let t0 = Instant::now();
        let body = match http.call(Method::GET, &path, &[], None).await {
            Ok((200, body)) => body,
            Ok((s, body)) => {
                w.pages.bad_status(s, &body);
                if s != 503 {
                    // Not a listing service (a build without it): stop here.
                    return w;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(e) => {
                w.pages.untyped(format!("socket: {e}"));
                return w;
            }
        };
        w.pages.op(&win, t0);
        let parsed: serde_json::Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                w.pages.untyped(format!("listing is not JSON: {e}"));
                return w;
            }
        };
        let n = parsed["leases"].as_array().map_or(0, Vec::len) as u64;
        seen += n;
        if win.contains(t0, Instant::now()) {
            w.leases += n;
        }
        cursor = parsed["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            // A walk counts when it ends inside the window (it may have
            // begun during the warm-up: a whole walk can outlast a short window).
            if Instant::now() <= win.end {
                w.per_walk.push(seen);
                w.walk_s.push(walk_started.elapsed().as_secs_f64());
            }
            seen = 0;
            walk_started = Instant::now();
        }
    }
    w
}

/// Runs the list scenario and returns its section of the summary.
pub(crate) async fn run(opts: &Opts, env: &Env) -> Result<String, String> {
    let fill_s = fill(opts, env).await?;
    let mut out = format!(
        "\n## List: {} held leases of one purpose (created with raw EVALSHA in {fill_s:.1} s), {} per page, each walker following nextCursor to the end and starting over\n\n| walkers | pages/s (median [min..max]) | leases/s | page p50 ms | page p99 ms | complete walks | leases per walk min..max | walk s (median) | CPU s per 1 000 pages: leasehold, redis | errors |\n|---|---|---|---|---|---|---|---|---|---|\n",
        opts.list_leases, opts.list_page
    );
    let mut by_walkers: BTreeMap<usize, Vec<(f64, f64, Walks, Cpu)>> = BTreeMap::new();
    for round in 1..=opts.rounds {
        let mut order = WALKERS;
        if round.is_multiple_of(2) {
            order.reverse();
        }
        for walkers in order {
            let now = Instant::now();
            let win = Window {
                start: now + opts.warmup,
                end: now + opts.warmup + opts.duration,
            };
            let cpu = cpu_between(
                env.pids.clone(),
                tokio::time::Instant::from_std(win.start),
                tokio::time::Instant::from_std(win.end),
            );
            let tasks: Vec<_> = (0..walkers)
                .map(|_| tokio::spawn(walker(env.addr, opts.list_page, win)))
                .collect();
            let mut all = Walks::default();
            for t in tasks {
                let w = t.await.map_err(|e| e.to_string())?;
                all.pages.merge(w.pages);
                all.leases += w.leases;
                all.per_walk.extend(w.per_walk);
                all.walk_s.extend(w.walk_s);
            }
            all.pages.lat_ns.sort_unstable();
            let cpu = cpu.await.map_err(|e| e.to_string())?;
            let secs = opts.duration.as_secs_f64();
            let (pages, leases) = (all.pages.ops as f64 / secs, all.leases as f64 / secs);
            println!(
                "| {round} | list, {walkers} walkers | leasehold | {pages:.0} pages/s | p50 {:.3} ms | p99 {:.3} ms | {} complete walks | errors {} |",
                percentile(&all.pages.lat_ns, 50.0),
                percentile(&all.pages.lat_ns, 99.0),
                all.per_walk.len(),
                all.pages.errors() + all.pages.typed(),
            );
            by_walkers
                .entry(walkers)
                .or_default()
                .push((pages, leases, all, cpu));
        }
    }
    for (walkers, v) in &by_walkers {
        let rates: Vec<f64> = v.iter().map(|r| r.0).collect();
        let pct = |q: f64| median(v.iter().map(|r| percentile(&r.2.pages.lat_ns, q)).collect());
        let per_walk: Vec<u64> = v
            .iter()
            .flat_map(|r| r.2.per_walk.iter().copied())
            .collect();
        let _ = writeln!(
            out,
            "| {walkers} | {:.0} [{}] | {:.0} | {:.3} | {:.3} | {} | {}..{} | {:.2} | {:.3}, {:.3} | {} |",
            median(rates.clone()),
            spread(&rates),
            median(v.iter().map(|r| r.1).collect()),
            pct(50.0),
            pct(99.0),
            per_walk.len(),
            per_walk.iter().min().copied().unwrap_or(0),
            per_walk.iter().max().copied().unwrap_or(0),
            median(v.iter().flat_map(|r| r.2.walk_s.iter().copied()).collect()),
            median(v.iter().map(|r| per_1k(r.3.leasehold, r.2.pages.ops)).collect()),
            median(v.iter().map(|r| per_1k(r.3.redis, r.2.pages.ops)).collect()),
            v.iter()
                .map(|r| r.2.pages.errors() + r.2.pages.typed())
                .sum::<u64>(),
        );
        for r in v {
            for (k, n) in r.2.pages.untyped.iter().chain(&r.2.pages.typed_5xx) {
                let _ = writeln!(out, "  list error: {n} × {k}");
            }
        }
    }
    Ok(out)
}
