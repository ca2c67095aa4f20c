//! The acquire, cycle, contended and paced phases (and the permits
//! scenario's, through `run_phase`): one phase's workers on an empty
//! keyspace with Redis' counters reset, the order of the sides in a round,
//! and the rounds with one table line per phase.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::env::Env;
use crate::opts::Opts;
use crate::procs::cpu_between;
use crate::raw::{command_calls, evalsha_usec, redis_cmd, stat};
use crate::scenario::{Kind, Phase, Side};
use crate::stats::{ms, per_10k, Stats, Window, SENT};
use crate::workers::{http_worker, raw_worker, Ctx};

static SALT: AtomicU64 = AtomicU64::new(1);

/// Top-level commands that are never run from inside a lease script; any of
/// them during a phase is an extra round trip.
const EXTRA_COMMANDS: [&str; 8] = [
    "ping", "script", "eval", "exists", "hello", "client", "select", "auth",
];

pub(crate) async fn run_phase(
    kind: Kind,
    side: Side,
    opts: &Opts,
    env: &Env,
    rate: Option<f64>,
) -> Result<Phase, String> {
    // Every phase starts on an empty keyspace (scripts stay loaded).
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    redis_cmd(&mut env.admin.clone(), &["CONFIG", "RESETSTAT"]).await?;
    SENT.store(0, Ordering::Relaxed);
    let c = opts.concurrency;
    let conns = if side == Side::Raw {
        env.raw_conns.clone()
    } else {
        Vec::new()
    };
    let (addr, pids) = env.side(side)?;
    let now = Instant::now();
    let win = Window {
        start: now + opts.warmup,
        end: now + opts.warmup + opts.duration,
    };
    let ctx = Arc::new(Ctx {
        kind,
        addr,
        raw: Arc::clone(&env.raw),
        conns,
        salt: SALT.fetch_add(1, Ordering::Relaxed) as u32,
        resources: opts.resources,
        interval: rate.map(|r| Duration::from_secs_f64(c as f64 / r.max(1.0))),
        concurrency: c,
        first_start: now,
    });
    let cpu = cpu_between(
        pids,
        tokio::time::Instant::from_std(win.start),
        tokio::time::Instant::from_std(win.end),
    );
    let mut handles = Vec::with_capacity(c);
    for id in 0..c {
        let ctx = Arc::clone(&ctx);
        handles.push(tokio::spawn(async move {
            match side {
                Side::Raw => raw_worker(id, ctx, win).await,
                Side::Service | Side::Baseline => http_worker(id, ctx, win).await,
            }
        }));
    }
    let mut stats = Stats::default();
    for h in handles {
        stats.merge(h.await.map_err(|e| format!("worker panicked: {e}"))?);
    }
    let cpu = cpu.await.map_err(|e| e.to_string())?;
    stats.lat_ns.sort_unstable();
    let reads = stat(&mut env.admin.clone(), "total_reads_processed").await?;
    let calls = command_calls(&mut env.admin.clone()).await?;
    let redis_us = evalsha_usec(&mut env.admin.clone()).await?;
    // EVALSHA only: commandstats also counts the commands scripts run.
    let per_read = calls.get("evalsha").copied().unwrap_or(0) as f64 / reads.max(1) as f64;
    let sent = SENT.load(Ordering::Relaxed).max(1) as f64;
    let commands = (
        calls.get("evalsha").copied().unwrap_or(0) as f64 / sent,
        EXTRA_COMMANDS
            .iter()
            .filter_map(|c| calls.get(*c))
            .sum::<u64>() as f64
            / sent,
    );
    Ok(Phase {
        commands,
        per_read,
        redis_us,
        kind,
        side,
        secs: opts.duration.as_secs_f64(),
        stats,
        cpu,
        rate,
    })
}

/// The sides of one round of `kind`, in order: raw and service, flipped
/// every other round. With a baseline (acquire, contended, paced): raw,
/// service and baseline rotated every two rounds and reversed in the second
/// of each two, so over every two rounds each side runs before each other
/// side once. (A plain rotation put the service before the baseline in two
/// rounds of three; on a machine that sped up during the run that alone
/// moved the new/baseline median by several per cent.)
pub(crate) fn sides_of(kind: Kind, round: usize, baseline: bool) -> Vec<Side> {
    if baseline && matches!(kind, Kind::Acquire | Kind::Contended | Kind::Paced) {
        let mut v = vec![Side::Raw, Side::Service, Side::Baseline];
        v.rotate_left((round - 1) / 2 % 3);
        if round.is_multiple_of(2) {
            v.reverse();
        }
        v
    } else if round % 2 == 1 {
        vec![Side::Raw, Side::Service]
    } else {
        vec![Side::Service, Side::Raw]
    }
}

/// The closed-loop and paced phases, `--rounds` times: prints the table's
/// header and one line per phase and appends them to `out`; returns the
/// kinds run, every phase, and the paced phases' offered rate.
pub(crate) async fn rounds(
    opts: &Opts,
    env: &Env,
    out: &mut String,
) -> Result<(Vec<Kind>, Vec<Phase>, Option<f64>), String> {
    let mut kinds = Vec::new();
    for (kind, part) in [
        (Kind::Acquire, "acquire"),
        (Kind::Cycle, "cycle"),
        (Kind::Contended, "contended"),
        (Kind::Paced, "paced"),
    ] {
        if opts.wants(part) {
            kinds.push(kind);
        }
    }
    let mut phases: Vec<Phase> = Vec::new();
    let mut paced_rate = opts.paced_rate;
    let header = "| round | scenario | side | ops/s | p50 ms | p99 ms | p999 ms | acquired/s | contended/s | CPU s/10k ops: leasehold, redis, client | errors |\n|---|---|---|---|---|---|---|---|---|---|---|";
    println!("{header}");
    let _ = writeln!(out, "{header}");
    for round in 1..=opts.rounds {
        for &kind in &kinds {
            let sides = sides_of(kind, round, env.baseline.is_some());
            let rate = if kind == Kind::Paced {
                if paced_rate.is_none() {
                    let first = phases
                        .iter()
                        .find(|p| p.kind == Kind::Acquire && p.side == Side::Service)
                        .map(Phase::ops_per_s);
                    // A quarter of saturation: well below it even when
                    // neighbours take a share of the cores later on.
                    paced_rate =
                        Some(first.map_or(2_000.0, |r| (r / 4.0 / 250.0).round().max(1.0) * 250.0));
                }
                paced_rate
            } else {
                None
            };
            for side in sides {
                let p = run_phase(kind, side, opts, env, rate).await?;
                let s = &p.stats;
                let cpu = if side == Side::Raw {
                    format!(
                        "-, {:.3}, {:.3}",
                        per_10k(p.cpu.redis, s.ops),
                        per_10k(p.cpu.client, s.ops)
                    )
                } else {
                    format!(
                        "{:.3}, {:.3}, {:.3}",
                        per_10k(p.cpu.leasehold, s.ops),
                        per_10k(p.cpu.redis, s.ops),
                        per_10k(p.cpu.client, s.ops)
                    )
                };
                let line = format!(
                    "| {round} | {}{} | {} | {:.0} | {} | {} | {} | {} | {} | {cpu} | {}{} |",
                    kind.name(),
                    p.rate.map(|r| format!(" @{r:.0}/s")).unwrap_or_default(),
                    side.name(),
                    p.ops_per_s(),
                    ms(&s.lat_ns, 50.0),
                    ms(&s.lat_ns, 99.0),
                    ms(&s.lat_ns, 99.9),
                    if kind == Kind::Contended {
                        format!("{:.0}", s.acquired as f64 / p.secs)
                    } else {
                        "-".into()
                    },
                    if kind == Kind::Contended {
                        format!("{:.0}", s.contended as f64 / p.secs)
                    } else {
                        "-".into()
                    },
                    s.errors() + s.typed(),
                    if s.late_sends > 0 {
                        format!(" ({} late sends)", s.late_sends)
                    } else {
                        String::new()
                    },
                );
                println!("{line}");
                let _ = writeln!(out, "{line}");
                phases.push(p);
            }
        }
    }
    Ok((kinds, phases, paced_rate))
}
