//! The report around the phase lines: its first lines, the summary tables
//! (leasehold against raw Redis, CPU and Redis commands, the new build
//! against the baseline), memory and CPU of the service, and the errors.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::opts::Opts;
use crate::procs::Cpu;
use crate::scenario::{Kind, Phase, Side};
use crate::stats::{mb, median, per_10k, percentile, spread};

/// The report's first lines (date, settings, machine load), printed; the
/// report starts with them and a blank line.
pub(crate) fn header(opts: &Opts, version: &str, baseline_bin: Option<&Path>) -> String {
    let mut out = String::new();
    let date = utc_now();
    let _ = writeln!(out, "# leasehold load benchmark, {date}");
    let _ = writeln!(
        out,
        "C={} duration={}s warmup={}s rounds={} resources={} raw-conns={} pool-size={} client-threads={} service-threads={} scrape-every={} cores={} redis {version}{}",
        opts.concurrency,
        opts.duration.as_secs_f64(),
        opts.warmup.as_secs_f64(),
        opts.rounds,
        opts.resources,
        opts.raw_conns,
        opts.pool_size,
        opts.client_threads,
        opts.service_threads,
        opts.scrape_every.map_or("never".into(), |d| format!("{}s", d.as_secs_f64())),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        opts.wrap.as_ref().map(|w| format!(" wrapped in `{w}`")).unwrap_or_default(),
    );
    if let Some(bin) = baseline_bin {
        let _ = writeln!(out, "baseline: {}", bin.display());
    }
    let _ = writeln!(
        out,
        "machine load average at start (other work on these cores skews absolute figures): {}",
        loadavg()
    );
    println!("{out}");
    let _ = writeln!(out);
    let _ = writeln!(out);
    out
}

/// What the goal lines read from the summary tables.
#[derive(Clone)]
pub(crate) struct Figures {
    /// leasehold/raw acquire throughput, median over rounds.
    pub(crate) ratio_acquire: f64,
    /// Added latency (leasehold − raw) per scenario, median over rounds.
    pub(crate) added_p99: BTreeMap<Kind, f64>,
    pub(crate) added_p50: BTreeMap<Kind, f64>,
    /// New/baseline acquire ratio: median, min, max.
    pub(crate) base_acquire: Option<(f64, f64, f64)>,
}

/// Writes the summary tables of the phases into `summary`.
pub(crate) fn tables(
    opts: &Opts,
    phases: &[Phase],
    kinds: &[Kind],
    summary: &mut String,
) -> Figures {
    if !phases.is_empty() {
        let _ = writeln!(summary, "\n## Summary: median over {} rounds (spread = min..max ops/s); latency = median of the per-round percentiles; added = median of the per-round differences (leasehold − raw)\n", opts.rounds);
        let _ = writeln!(
            summary,
            "| scenario | raw ops/s | leasehold ops/s | ratio leasehold/raw (median, min..max) | p50 ms raw / lh | p99 ms raw / lh | p999 ms raw / lh | added p50 ms | added p99 ms |\n|---|---|---|---|---|---|---|---|---|"
        );
    }
    let mut ratio_acquire = f64::NAN;
    let mut cpu_table = String::from(
        "\nCPU seconds per 10 000 ops, and Redis top-level commands per request sent (EVALSHA; extra = PING, SCRIPT, EVAL, EXISTS, HELLO, CLIENT, SELECT, AUTH) and per socket read Redis made (how well its client batches), median over rounds\n\n| scenario | raw: redis | raw: client | leasehold | leasehold: redis | leasehold: client | Redis commands per request, raw: EVALSHA + extra | leasehold: EVALSHA + extra | Redis commands per read, raw / leasehold |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut added_p99 = BTreeMap::new();
    let mut added_p50 = BTreeMap::new();
    for &kind in kinds {
        let of = |side: Side| {
            phases
                .iter()
                .filter(|p| p.kind == kind && p.side == side)
                .collect::<Vec<_>>()
        };
        let (raw, svc) = (of(Side::Raw), of(Side::Service));
        let rates = |v: &[&Phase]| v.iter().map(|p| p.ops_per_s()).collect::<Vec<_>>();
        let ratios: Vec<f64> = raw
            .iter()
            .zip(&svc)
            .map(|(r, s)| s.ops_per_s() / r.ops_per_s())
            .collect();
        // Per-round percentiles, then the median over rounds: one round hit
        // by a neighbour's burst does not decide the figure.
        let pct = |v: &[&Phase], q: f64| {
            median(v.iter().map(|p| percentile(&p.stats.lat_ns, q)).collect())
        };
        let added_at = |q: f64| {
            median(
                raw.iter()
                    .zip(&svc)
                    .map(|(r, s)| percentile(&s.stats.lat_ns, q) - percentile(&r.stats.lat_ns, q))
                    .collect(),
            )
        };
        let ratio = median(ratios.clone());
        if kind == Kind::Acquire {
            ratio_acquire = ratio;
        }
        let added = added_at(99.0);
        let added50 = added_at(50.0);
        added_p99.insert(kind, added);
        added_p50.insert(kind, added50);
        let cpu = |v: &[&Phase], f: fn(&Cpu) -> f64| {
            median(v.iter().map(|p| per_10k(f(&p.cpu), p.stats.ops)).collect())
        };
        let _ = writeln!(
            cpu_table,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} + {:.4} | {:.3} + {:.4} | {:.2} / {:.2} |",
            kind.name(),
            cpu(&raw, |c| c.redis),
            cpu(&raw, |c| c.client),
            cpu(&svc, |c| c.leasehold),
            cpu(&svc, |c| c.redis),
            cpu(&svc, |c| c.client),
            median(raw.iter().map(|p| p.commands.0).collect()),
            median(raw.iter().map(|p| p.commands.1).collect()),
            median(svc.iter().map(|p| p.commands.0).collect()),
            median(svc.iter().map(|p| p.commands.1).collect()),
            median(raw.iter().map(|p| p.per_read).collect()),
            median(svc.iter().map(|p| p.per_read).collect()),
        );
        let rmin = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let rmax = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let _ = writeln!(
            summary,
            "| {}{} | {:.0} [{}] | {:.0} [{}] | {ratio:.2} ({rmin:.2}..{rmax:.2}) | {:.3} / {:.3} | {:.3} / {:.3} | {:.3} / {:.3} | {added50:.3} | {added:.3} |",
            kind.name(),
            raw.first().and_then(|p| p.rate).map(|r| format!(" @{r:.0}/s")).unwrap_or_default(),
            median(rates(&raw)),
            spread(&rates(&raw)),
            median(rates(&svc)),
            spread(&rates(&svc)),
            pct(&raw, 50.0),
            pct(&svc, 50.0),
            pct(&raw, 99.0),
            pct(&svc, 99.0),
            pct(&raw, 99.9),
            pct(&svc, 99.9),
        );
    }
    if !phases.is_empty() {
        summary.push_str(&cpu_table);
    }
    let (base_table, base_acquire) = baseline_summary(phases, kinds);
    if phases.iter().any(|p| p.side == Side::Baseline) {
        summary.push_str(&base_table);
    }
    Figures {
        ratio_acquire,
        added_p99,
        added_p50,
        base_acquire,
    }
}

/// The service's memory (idle, peak, after the load) and its CPU per
/// 10 000 operations over all its phases and per scenario.
pub(crate) fn memory_cpu(
    summary: &mut String,
    phases: &[Phase],
    kinds: &[Kind],
    (idle_rss, peak_rss, after_rss): (Option<u64>, Option<u64>, Option<u64>),
) {
    let svc_phases: Vec<&Phase> = phases.iter().filter(|p| p.side == Side::Service).collect();
    let svc_ops: u64 = svc_phases.iter().map(|p| p.stats.ops).sum();
    let svc_cpu: f64 = svc_phases.iter().map(|p| p.cpu.leasehold).sum();
    let _ = writeln!(
        summary,
        "\nleasehold RSS: idle {} at start, peak {} (VmHWM), {} after the load; CPU {:.3} s per 10 000 operations over all service phases ({} ops)",
        mb(idle_rss),
        mb(peak_rss),
        mb(after_rss),
        per_10k(svc_cpu, svc_ops),
        svc_ops
    );
    for kind in kinds {
        let v: Vec<&&Phase> = svc_phases.iter().filter(|p| p.kind == *kind).collect();
        let ops: u64 = v.iter().map(|p| p.stats.ops).sum();
        let cpu: f64 = v.iter().map(|p| p.cpu.leasehold).sum();
        let _ = writeln!(
            summary,
            "  leasehold CPU, {}: {:.3} s per 10 000 ops",
            kind.name(),
            per_10k(cpu, ops)
        );
    }
}

/// The errors section: non-typed errors and typed 5xx outcomes per side and
/// scenario; returns the number of non-typed errors.
pub(crate) fn errors(summary: &mut String, phases: &[Phase]) -> u64 {
    let mut untyped: BTreeMap<String, u64> = BTreeMap::new();
    let mut typed: BTreeMap<String, u64> = BTreeMap::new();
    for p in phases {
        for (k, v) in &p.stats.untyped {
            *untyped
                .entry(format!("{} {}: {k}", p.side.name(), p.kind.name()))
                .or_default() += v;
        }
        for (k, v) in &p.stats.typed_5xx {
            *typed
                .entry(format!("{} {}: {k}", p.side.name(), p.kind.name()))
                .or_default() += v;
        }
    }
    let _ = writeln!(summary, "\n## Errors\n");
    let _ = writeln!(
        summary,
        "non-typed errors (socket errors, undocumented 5xx, unexpected statuses, Redis errors): {}",
        untyped.values().sum::<u64>()
    );
    for (k, v) in &untyped {
        let _ = writeln!(summary, "  {v} × {k}");
    }
    let _ = writeln!(
        summary,
        "typed 5xx outcomes (unavailable / overloaded / indeterminate): {}",
        typed.values().sum::<u64>()
    );
    for (k, v) in &typed {
        let _ = writeln!(summary, "  {v} × {k}");
    }
    untyped.values().sum::<u64>()
}

fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// New build against `LOAD_BASELINE_BIN`, per scenario: the per-round ratio
/// of the two phases of one round, median and min..max. Returns the table
/// and the acquire ratio with its minimum.
fn baseline_summary(phases: &[Phase], kinds: &[Kind]) -> (String, Option<(f64, f64, f64)>) {
    let mut table = String::from("\n## New build against the baseline (LOAD_BASELINE_BIN), same run, same Redis\n\n| scenario | baseline ops/s | new ops/s | ratio new/baseline (median, min..max) | p50 ms base / new | p99 ms base / new | leasehold CPU s/10k ops base / new | redis CPU s/10k ops base / new | Redis µs per EVALSHA base / new |\n|---|---|---|---|---|---|---|---|---|\n");
    let mut acquire = None;
    for &kind in kinds {
        let of = |side: Side| {
            phases
                .iter()
                .filter(|p| p.kind == kind && p.side == side)
                .collect::<Vec<_>>()
        };
        let (base, new) = (of(Side::Baseline), of(Side::Service));
        if base.is_empty() {
            continue;
        }
        let rates = |v: &[&Phase]| v.iter().map(|p| p.ops_per_s()).collect::<Vec<_>>();
        let ratios: Vec<f64> = new
            .iter()
            .zip(&base)
            .map(|(n, b)| n.ops_per_s() / b.ops_per_s())
            .collect();
        let ratio = median(ratios.clone());
        let rmin = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let rmax = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if kind == Kind::Acquire {
            acquire = Some((ratio, rmin, rmax));
        }
        let pct = |v: &[&Phase], q: f64| {
            median(v.iter().map(|p| percentile(&p.stats.lat_ns, q)).collect())
        };
        let cpu = |v: &[&Phase], f: fn(&Cpu) -> f64| {
            median(v.iter().map(|p| per_10k(f(&p.cpu), p.stats.ops)).collect())
        };
        let _ = writeln!(
            table,
            "| {} | {:.0} [{}] | {:.0} [{}] | {ratio:.3} ({rmin:.3}..{rmax:.3}) | {:.3} / {:.3} | {:.3} / {:.3} | {:.3} / {:.3} | {:.3} / {:.3} | {:.2} / {:.2} |",
            kind.name(),
            median(rates(&base)),
            spread(&rates(&base)),
            median(rates(&new)),
            spread(&rates(&new)),
            pct(&base, 50.0),
            pct(&new, 50.0),
            pct(&base, 99.0),
            pct(&new, 99.0),
            cpu(&base, |c| c.leasehold),
            cpu(&new, |c| c.leasehold),
            cpu(&base, |c| c.redis),
            cpu(&new, |c| c.redis),
            median(base.iter().map(|p| p.redis_us).collect()),
            median(new.iter().map(|p| p.redis_us).collect()),
        );
    }
    (table, acquire)
}
