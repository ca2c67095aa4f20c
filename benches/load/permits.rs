//! `permits` (issue 15): C contenders on one resource, each acquiring with
//! `waitMs` (queued server-side, fairly) and releasing as soon as it holds;
//! `limit` N against `limit` 1 (the single-holder cycle), the same
//! contenders, alternating in one run. One op = one acquire + release.

use std::fmt::Write as _;

use crate::env::Env;
use crate::opts::Opts;
use crate::phases::run_phase;
use crate::scenario::{Kind, Phase, Side};
use crate::stats::{median, per_10k, percentile, spread};

/// Runs the rounds and returns the section of the summary.
pub(crate) async fn run(opts: &Opts, env: &Env) -> Result<String, String> {
    let limits = [1, opts.permits_limit];
    let mut phases: Vec<Phase> = Vec::new();
    for round in 1..=opts.rounds {
        let mut order = limits;
        if round.is_multiple_of(2) {
            order.reverse();
        }
        for limit in order {
            let p = run_phase(Kind::Permits(limit), Side::Service, opts, env, None).await?;
            println!(
                "| {round} | permits limit {limit} | leasehold | {:.0} cycles/s | p50 {:.3} ms | p99 {:.3} ms | waits ran out {} | errors {} |",
                p.ops_per_s(),
                percentile(&p.stats.lat_ns, 50.0),
                percentile(&p.stats.lat_ns, 99.0),
                p.stats.contended,
                p.stats.errors() + p.stats.typed(),
            );
            phases.push(p);
        }
    }
    let mut out = format!(
        "\n## Permits: {} contenders on one resource, acquire (waitMs {}) + release per cycle\n\n| limit | cycles/s (median [min..max]) | ratio to limit 1 (median, min..max) | cycle p50 ms | cycle p99 ms | leasehold CPU s/10k cycles | redis CPU s/10k cycles | EVALSHA per request | waits ran out | errors |\n|---|---|---|---|---|---|---|---|---|---|\n",
        opts.concurrency,
        crate::consts::PERMITS_WAIT_MS,
    );
    let of = |limit: u32| {
        phases
            .iter()
            .filter(|p| p.kind == Kind::Permits(limit))
            .collect::<Vec<_>>()
    };
    let single = of(1);
    for limit in limits {
        let v = of(limit);
        let rates: Vec<f64> = v.iter().map(|p| p.ops_per_s()).collect();
        // Per round: this limit's phase against the limit-1 phase of the
        // same round (run back to back).
        let ratios: Vec<f64> = v
            .iter()
            .zip(&single)
            .map(|(p, s)| p.ops_per_s() / s.ops_per_s())
            .collect();
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pct = |q: f64| median(v.iter().map(|p| percentile(&p.stats.lat_ns, q)).collect());
        let cpu = |f: fn(&crate::procs::Cpu) -> f64| {
            median(v.iter().map(|p| per_10k(f(&p.cpu), p.stats.ops)).collect())
        };
        let _ = writeln!(
            out,
            "| {limit} | {:.0} [{}] | {:.2} ({lo:.2}..{hi:.2}) | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {} | {} |",
            median(rates.clone()),
            spread(&rates),
            median(ratios.clone()),
            pct(50.0),
            pct(99.0),
            cpu(|c| c.leasehold),
            cpu(|c| c.redis),
            median(v.iter().map(|p| p.commands.0).collect()),
            v.iter().map(|p| p.stats.contended).sum::<u64>(),
            v.iter()
                .map(|p| p.stats.errors() + p.stats.typed())
                .sum::<u64>(),
        );
        for p in &v {
            for (k, n) in p.stats.untyped.iter().chain(&p.stats.typed_5xx) {
                let _ = writeln!(out, "  permits limit {limit} error: {n} × {k}");
            }
        }
    }
    Ok(out)
}
