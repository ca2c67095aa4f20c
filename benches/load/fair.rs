//! `fair` (issue 16): hand-off between waiters spread over TWO leasehold
//! instances of one Redis. `--fair-waiters` contenders (half on each
//! instance) loop on one resource: acquire with `waitMs` (queued
//! server-side), release at once, acquire again. Every acquisition is
//! recorded with its fencing token, so sorting by token gives the order in
//! which the lease passed from holder to holder, across instances:
//!
//! * hand-off latency = the previous holder's release reply → this holder's
//!   `acquired` reply (0 when the acquired reply was read first: "reply
//!   first");
//! * contended cycles/s = acquisitions inside the measured window;
//! * fairness = how the acquisitions spread over the contenders, and how
//!   often one contender got the lease twice in a row (a release followed by
//!   the releaser's own fresh request overtaking the queue).
//!
//! The new build (fair queue) and, with `LOAD_BASELINE_BIN`, the baseline
//! (unfair waits), each as two instances, alternate in one run.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use tokio::sync::Mutex;

use crate::env::Env;
use crate::http_client::{body_json, digest, lease_path, Client, Http};
use crate::looks::{script_runs, Grants, Looks, Requests, SharedRequests};
use crate::opts::Opts;
use crate::procs::Service;
use crate::raw::{command_calls, redis_cmd};
use crate::scenario::Side;
use crate::stats::{median, percentile, spread, Stats, Window};

/// `waitMs` of each contender's acquire (below the 5 s request timeout).
const WAIT_MS: u64 = 2_000;

/// One acquisition: fencing token, when its reply was read, when its
/// release reply was read, and who took it.
#[derive(Clone, Copy)]
struct Take {
    fence: u64,
    acquired: Instant,
    released: Option<Instant>,
    waiter: usize,
}

struct Round {
    side: Side,
    takes: Vec<Take>,
    /// Hand-off latencies of this round (ns, sorted).
    lat_ns: Vec<u64>,
    /// The same, split: hand-offs to a contender of the other instance,
    /// and to one of the same instance (ns, sorted).
    lat_other_ns: Vec<u64>,
    lat_same_ns: Vec<u64>,
    reply_first: u64,
    cycles_per_s: f64,
    same_twice: u64,
    /// Redis EVALSHA calls per acquisition over the whole phase (warm-up
    /// included): what queueing costs Redis per hand-off.
    evalsha_per_take: f64,
    /// Redis' own µs per EVALSHA over the phase (`usec_per_call`).
    redis_usec: f64,
    /// Script runs per acquisition by kind, and the looks that found
    /// nothing (issue 41), over the whole phase.
    looks: Looks,
    errors: Stats,
}

/// What the goals of issues 16 and 25 read from `fair` (the new build's).
#[derive(Default)]
pub(crate) struct FairFigures {
    /// Hand-off p50, ms, all rounds pooled.
    pub(crate) p50: Option<f64>,
    /// Cycles/s new ÷ baseline, median of the per-round ratios (with
    /// `LOAD_BASELINE_BIN`).
    pub(crate) ratio: Option<f64>,
    /// Redis EVALSHA per acquisition, median over rounds.
    pub(crate) evalsha_per_take: Option<f64>,
    /// Hand-off p50, ms, all rounds pooled: to a contender of the other
    /// instance, and to one of the same instance.
    pub(crate) p50_other: Option<f64>,
    pub(crate) p50_same: Option<f64>,
    /// Share of the hand-offs that went to the other instance, all rounds.
    pub(crate) other_share: Option<f64>,
    /// Looks that found nothing per acquisition, median over rounds
    /// (issue 41: none), and the round's split by kind.
    pub(crate) empty_looks_per_take: Option<f64>,
    pub(crate) looks: Option<String>,
}

/// Runs the rounds and returns the section of the summary and the new
/// build's figures (for the goals).
pub(crate) async fn run(
    opts: &Opts,
    env: &Env,
    baseline_bin: Option<&std::path::Path>,
) -> Result<(String, FairFigures), String> {
    // The second instance of each build, on the same Redis.
    let mut second = Service::start(opts, &env.redis_url, &Service::new_build(), "fair-b").await?;
    let new_pair = [env.addr, second.addr];
    let mut base_second = match (baseline_bin, &env.baseline) {
        (Some(bin), Some(_)) => {
            Some(Service::start(opts, &env.redis_url, bin, "fair-base-b").await?)
        }
        _ => None,
    };
    let base_pair = match (&env.baseline, &base_second) {
        (Some((a, _)), Some(b)) => Some([*a, b.addr]),
        _ => None,
    };
    let mut rounds = Vec::new();
    for round in 1..=opts.rounds {
        let mut sides = vec![Side::Service];
        if base_pair.is_some() {
            sides.push(Side::Baseline);
            if round.is_multiple_of(2) {
                sides.reverse();
            }
        }
        for side in sides {
            let pair = if side == Side::Baseline {
                base_pair.ok_or("no baseline pair")?
            } else {
                new_pair
            };
            let r = phase(opts, env, side, pair).await?;
            println!(
                "| {round} | fair, {} waiters on 2 instances | {} | {:.0} cycles/s | hand-off p50 {:.3} ms | p99 {:.3} ms | same waiter twice {} | errors {} |",
                opts.fair_waiters,
                side.name(),
                r.cycles_per_s,
                percentile(&r.lat_ns, 50.0),
                percentile(&r.lat_ns, 99.0),
                r.same_twice,
                r.errors.errors() + r.errors.typed(),
            );
            rounds.push(r);
        }
    }
    second.stop();
    if let Some(b) = base_second.as_mut() {
        b.stop();
    }

    let mut out = format!(
        "\n## Fair hand-off: {} contenders on one resource, half on each of two instances; acquire (waitMs {WAIT_MS}), release at once\n\n| build | cycles/s (median [min..max]) | ratio new/baseline (median, min..max) | hand-off p50 / p99 / max ms (all rounds) | per-round hand-off p50 ms | hand-off p50 ms: to the other instance / within one | reply first | acquisitions per contender min..max | same contender twice in a row | passed to the other instance (per round) | Redis EVALSHA per acquisition | Redis µs per EVALSHA · per acquisition | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        opts.fair_waiters
    );
    let mut figures = FairFigures::default();
    let of = |side: Side| rounds.iter().filter(|r| r.side == side).collect::<Vec<_>>();
    let (new, base) = (of(Side::Service), of(Side::Baseline));
    for (side, v) in [(Side::Service, &new), (Side::Baseline, &base)] {
        if v.is_empty() {
            continue;
        }
        let rates: Vec<f64> = v.iter().map(|r| r.cycles_per_s).collect();
        let ratio = if side == Side::Service && !base.is_empty() {
            let rs: Vec<f64> = new
                .iter()
                .zip(&base)
                .map(|(n, b)| n.cycles_per_s / b.cycles_per_s)
                .collect();
            let lo = rs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            figures.ratio = Some(median(rs.clone()));
            format!("{:.2} ({lo:.2}..{hi:.2})", median(rs.clone()))
        } else {
            "-".into()
        };
        let mut all: Vec<u64> = v.iter().flat_map(|r| r.lat_ns.iter().copied()).collect();
        all.sort_unstable();
        let pooled = |f: fn(&Round) -> &Vec<u64>| {
            let mut all: Vec<u64> = v.iter().flat_map(|r| f(r).iter().copied()).collect();
            all.sort_unstable();
            all
        };
        let (other, within) = (pooled(|r| &r.lat_other_ns), pooled(|r| &r.lat_same_ns));
        let share = other.len() as f64 / all.len().max(1) as f64;
        if side == Side::Service {
            figures.p50 = Some(percentile(&all, 50.0));
            figures.evalsha_per_take = Some(median(v.iter().map(|r| r.evalsha_per_take).collect()));
            figures.p50_other = Some(percentile(&other, 50.0));
            figures.p50_same = Some(percentile(&within, 50.0));
            figures.other_share = Some(share);
            figures.empty_looks_per_take =
                Some(median(v.iter().map(|r| r.looks.empty_per_take).collect()));
            figures.looks = v.last().map(|r| r.looks.text());
        }
        let per_round: Vec<String> = v
            .iter()
            .map(|r| format!("{:.3}", percentile(&r.lat_ns, 50.0)))
            .collect();
        // Acquisitions per contender, over all rounds of this build.
        let mut per_waiter = vec![0u64; opts.fair_waiters];
        for r in v {
            for t in &r.takes {
                per_waiter[t.waiter] += 1;
            }
        }
        let handoffs: u64 = v.iter().map(|r| r.lat_ns.len() as u64).sum();
        let pct = |n: u64| 100.0 * n as f64 / handoffs.max(1) as f64;
        let same: u64 = v.iter().map(|r| r.same_twice).sum();
        let per_round_share: Vec<String> = v
            .iter()
            .map(|r| {
                format!(
                    "{:.0}",
                    100.0 * r.lat_other_ns.len() as f64 / r.lat_ns.len().max(1) as f64
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {:.0} [{}] | {ratio} | {:.3} / {:.3} / {:.3} over {} | {} | {:.3} / {:.3} | {} | {}..{} | {:.1} % | {:.1} % ({} %) | {:.2} | {:.1} · {:.0} | {} |",
            if side == Side::Service { "new (fair queue)" } else { "baseline" },
            median(rates.clone()),
            spread(&rates),
            percentile(&all, 50.0),
            percentile(&all, 99.0),
            percentile(&all, 100.0),
            all.len(),
            per_round.join(", "),
            percentile(&other, 50.0),
            percentile(&within, 50.0),
            v.iter().map(|r| r.reply_first).sum::<u64>(),
            per_waiter.iter().min().copied().unwrap_or(0),
            per_waiter.iter().max().copied().unwrap_or(0),
            pct(same),
            100.0 * share,
            per_round_share.join(", "),
            median(v.iter().map(|r| r.evalsha_per_take).collect()),
            median(v.iter().map(|r| r.redis_usec).collect()),
            median(v.iter().map(|r| r.redis_usec * r.evalsha_per_take).collect()),
            v.iter().map(|r| r.errors.errors() + r.errors.typed()).sum::<u64>(),
        );
        // Script runs per acquisition by kind and the looks that found
        // nothing (issue 41), per round.
        for (i, r) in v.iter().enumerate() {
            let _ = writeln!(
                out,
                "  fair {} round {}, script runs per acquisition: {}",
                side.name(),
                i + 1,
                r.looks.text()
            );
        }
        for r in v {
            for (k, n) in r.errors.untyped.iter().chain(&r.errors.typed_5xx) {
                let _ = writeln!(out, "  fair {} error: {n} × {k}", side.name());
            }
        }
    }
    Ok((out, figures))
}

/// One measured phase of one build: the contenders loop until the window
/// ends; the takes inside the window are returned in token order.
async fn phase(opts: &Opts, env: &Env, side: Side, pair: [SocketAddr; 2]) -> Result<Round, String> {
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    redis_cmd(&mut env.admin.clone(), &["CONFIG", "RESETSTAT"]).await?;
    let now = Instant::now();
    let win = Window {
        start: now + opts.warmup,
        end: now + opts.warmup + opts.duration,
    };
    let path = Arc::new(lease_path(&digest(0xfa1, 0, 0)));
    let takes = Arc::new(Mutex::new(Vec::<Take>::new()));
    let requests: SharedRequests = Arc::new(Requests::default());
    let runs_before = script_runs(&pair).await?;
    let grants = Grants::start(&env.redis_url).await?;
    let mut handles = Vec::new();
    for waiter in 0..opts.fair_waiters {
        let (path, takes, requests) =
            (Arc::clone(&path), Arc::clone(&takes), Arc::clone(&requests));
        let addr = pair[waiter % 2];
        handles.push(tokio::spawn(async move {
            contender(waiter, addr, &path, win, &takes, &requests).await
        }));
    }
    let mut errors = Stats::default();
    for h in handles {
        errors.merge(h.await.map_err(|e| format!("contender panicked: {e}"))?);
    }
    let granted = grants.finish(&mut env.admin.clone()).await?;
    let runs_after = script_runs(&pair).await?;
    let mut takes = std::mem::take(&mut *takes.lock().await);
    takes.sort_by_key(|t| t.fence);
    let looks = Looks::new(&runs_before, &runs_after, &requests, granted, takes.len());
    let calls = command_calls(&mut env.admin.clone()).await?;
    let evalsha_per_take =
        calls.get("evalsha").copied().unwrap_or(0) as f64 / takes.len().max(1) as f64;
    let redis_usec = crate::raw::evalsha_usec(&mut env.admin.clone()).await?;
    let (mut lat_ns, mut lat_other_ns, mut lat_same_ns) = (Vec::new(), Vec::new(), Vec::new());
    let (mut reply_first, mut same_twice) = (0, 0);
    for w in takes.windows(2) {
        let (prev, cur) = (w[0], w[1]);
        if !(cur.acquired >= win.start && cur.acquired <= win.end) {
            continue;
        }
        let Some(released) = prev.released else {
            continue;
        };
        if cur.acquired < released {
            reply_first += 1;
        }
        let ns = u64::try_from(cur.acquired.saturating_duration_since(released).as_nanos())
            .unwrap_or(u64::MAX);
        lat_ns.push(ns);
        same_twice += u64::from(cur.waiter == prev.waiter);
        if cur.waiter % 2 != prev.waiter % 2 {
            lat_other_ns.push(ns);
        } else {
            lat_same_ns.push(ns);
        }
    }
    lat_ns.sort_unstable();
    lat_other_ns.sort_unstable();
    lat_same_ns.sort_unstable();
    takes.retain(|t| t.acquired >= win.start && t.acquired <= win.end);
    Ok(Round {
        side,
        cycles_per_s: takes.len() as f64 / opts.duration.as_secs_f64(),
        takes,
        lat_ns,
        lat_other_ns,
        lat_same_ns,
        reply_first,
        same_twice,
        evalsha_per_take,
        redis_usec,
        looks,
        errors,
    })
}

/// One contender: acquire with `waitMs`, release at once, until the window ends.
async fn contender(
    waiter: usize,
    addr: SocketAddr,
    path: &str,
    win: Window,
    takes: &Mutex<Vec<Take>>,
    requests: &Requests,
) -> Stats {
    let mut stats = Stats::default();
    let mut me = match Client::new(1000 + waiter) {
        Ok(c) => c,
        Err(e) => {
            stats.untyped(e);
            return stats;
        }
    };
    let mut conn = match Http::connect(addr).await {
        Ok(c) => c,
        Err(e) => {
            stats.untyped(format!("socket: {e}"));
            return stats;
        }
    };
    let body = body_json(10_000, WAIT_MS);
    while Instant::now() < win.end {
        let op = me.next_op();
        let headers = [
            ("lease-owner-token", me.token.as_str()),
            ("lease-operation-id", op.as_str()),
        ];
        requests.sent();
        let fence = match conn.call(Method::PUT, path, &headers, Some(&body)).await {
            Ok((201, body)) => match fencing_token(&body) {
                Some(f) => {
                    requests.acquired(&body);
                    f
                }
                None => {
                    stats.untyped("acquired without a fencingToken");
                    continue;
                }
            },
            Ok((409, body)) if body.windows(11).any(|w| w == b"\"contended\"") => {
                stats.contended += 1;
                continue;
            }
            Ok((status, body)) => {
                stats.bad_status(status, &body);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(e) => {
                stats.untyped(format!("socket: {e}"));
                return stats;
            }
        };
        let acquired = Instant::now();
        let released = match conn.call(Method::DELETE, path, &headers, None).await {
            Ok((200, _)) => Some(Instant::now()),
            Ok((status, body)) => {
                stats.bad_status(status, &body);
                None
            }
            Err(e) => {
                stats.untyped(format!("socket: {e}"));
                return stats;
            }
        };
        takes.lock().await.push(Take {
            fence,
            acquired,
            released,
            waiter,
        });
    }
    stats
}

/// `"fencingToken":N` of an acquire answer.
fn fencing_token(body: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"fencingToken\":";
    let at = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits: Vec<u8> = body[at..]
        .iter()
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}
