//! `anchor` (issue 25): the lease cycle against etcd 3.4, the system the
//! figures are anchored to. leasehold's side is exactly the `cycle`
//! scenario's service side (`PUT` then `DELETE` of a new lease each time);
//! etcd's is what a client of its v3 HTTP/JSON gateway does for the same:
//! `POST /v3/lease/grant` (TTL 30 s, leasehold's), `POST /v3/lock/lock` of a
//! new name with that lease, `POST /v3/lock/unlock` of the key it returns
//! (the lease is left to expire, as nothing in the cycle revokes it, 30 s
//! later: outside any window shorter than that). Same concurrency, same
//! warm-up and window, each worker on its own keep-alive connection; the
//! two sides alternate within each of `--rounds` rounds (order flipped every
//! other round), against a fresh etcd started for the scenario.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::env::Env;
use crate::etcd::{b64, field, post, EtcdProc};
use crate::http_client::Http;
use crate::opts::Opts;
use crate::phases::run_phase;
use crate::procs::{cpu_between, Pids};
use crate::scenario::{Kind, Side};
use crate::stats::{median, per_10k, percentile, spread, Stats, Window};

/// The goal of issue 25: leasehold's cycles/s at least this many times etcd's.
pub(crate) const GOAL_RATIO: f64 = 5.0;
/// etcd lease TTL, seconds (leasehold's cycle acquires with 30 s too).
const TTL_S: u64 = 30;

static SALT: AtomicU32 = AtomicU32::new(1);

/// One measured etcd phase.
struct EtcdPhase {
    stats: Stats,
    /// CPU seconds of etcd over the window.
    cpu: f64,
    client_cpu: f64,
}

/// Runs the rounds; the section of the summary and the median of the
/// per-round ratios leasehold ÷ etcd.
pub(crate) async fn run(opts: &Opts, env: &Env) -> Result<(String, Option<f64>), String> {
    let etcd = EtcdProc::start("anchor").await?;
    let version = EtcdProc::version();
    let secs = opts.duration.as_secs_f64();
    let (mut lh, mut et) = (Vec::new(), Vec::new());
    for round in 1..=opts.rounds {
        // Odd rounds leasehold first, even rounds etcd first.
        let etcd_first = round.is_multiple_of(2);
        for on_etcd in [etcd_first, !etcd_first] {
            if !on_etcd {
                let p = run_phase(Kind::Cycle, Side::Service, opts, env, None).await?;
                println!(
                    "| {round} | anchor | leasehold (PUT + DELETE) | {:.0} cycles/s | p50 {:.3} ms | p99 {:.3} ms | errors {} |",
                    p.ops_per_s(),
                    percentile(&p.stats.lat_ns, 50.0),
                    percentile(&p.stats.lat_ns, 99.0),
                    p.stats.errors() + p.stats.typed()
                );
                lh.push(p);
            } else {
                let p = etcd_phase(opts, env, &etcd).await?;
                println!(
                    "| {round} | anchor | etcd (grant + lock + unlock) | {:.0} cycles/s | p50 {:.3} ms | p99 {:.3} ms | errors {} |",
                    p.stats.ops as f64 / secs,
                    percentile(&p.stats.lat_ns, 50.0),
                    percentile(&p.stats.lat_ns, 99.0),
                    p.stats.errors()
                );
                et.push(p);
            }
        }
    }
    let data_dir = etcd.dir();
    drop(etcd);
    let lh_rates: Vec<f64> = lh.iter().map(|p| p.ops_per_s()).collect();
    let et_rates: Vec<f64> = et.iter().map(|p| p.stats.ops as f64 / secs).collect();
    let ratios: Vec<f64> = lh_rates.iter().zip(&et_rates).map(|(l, e)| l / e).collect();
    let ratio = median(ratios.clone());
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pct = |v: Vec<f64>| median(v);
    let mut out = format!(
        "\n## Anchor: the lease cycle against etcd {version} over its HTTP gateway, C={}, median over {} rounds\n\nleasehold: `PUT` + `DELETE` of a new lease (the `cycle` scenario's service side); etcd: `POST /v3/lease/grant` (TTL {TTL_S} s) + `/v3/lock/lock` of a new name with that lease + `/v3/lock/unlock`, on a fresh single-member etcd (data dir {}). One op = one whole cycle.\n\n| side | cycles/s (median [min..max]) | p50 ms | p99 ms | server CPU s per 10k cycles | client CPU s per 10k cycles | errors |\n|---|---|---|---|---|---|---|\n",
        opts.concurrency, opts.rounds, data_dir
    );
    let _ = writeln!(
        out,
        "| leasehold | {:.0} [{}] | {:.3} | {:.3} | {:.3} (leasehold) + {:.3} (redis) | {:.3} | {} |",
        median(lh_rates.clone()),
        spread(&lh_rates),
        pct(lh.iter().map(|p| percentile(&p.stats.lat_ns, 50.0)).collect()),
        pct(lh.iter().map(|p| percentile(&p.stats.lat_ns, 99.0)).collect()),
        median(lh.iter().map(|p| per_10k(p.cpu.leasehold, p.stats.ops)).collect()),
        median(lh.iter().map(|p| per_10k(p.cpu.redis, p.stats.ops)).collect()),
        median(lh.iter().map(|p| per_10k(p.cpu.client, p.stats.ops)).collect()),
        lh.iter().map(|p| p.stats.errors() + p.stats.typed()).sum::<u64>(),
    );
    let _ = writeln!(
        out,
        "| etcd | {:.0} [{}] | {:.3} | {:.3} | {:.3} (etcd) | {:.3} | {} |",
        median(et_rates.clone()),
        spread(&et_rates),
        pct(et
            .iter()
            .map(|p| percentile(&p.stats.lat_ns, 50.0))
            .collect()),
        pct(et
            .iter()
            .map(|p| percentile(&p.stats.lat_ns, 99.0))
            .collect()),
        median(et.iter().map(|p| per_10k(p.cpu, p.stats.ops)).collect()),
        median(
            et.iter()
                .map(|p| per_10k(p.client_cpu, p.stats.ops))
                .collect()
        ),
        et.iter().map(|p| p.stats.errors()).sum::<u64>(),
    );
    let _ = writeln!(
        out,
        "\nleasehold ÷ etcd cycles/s: **{ratio:.2}** (median of the per-round ratios, rounds {lo:.2}..{hi:.2})"
    );
    for p in &et {
        for (k, n) in &p.stats.untyped {
            let _ = writeln!(out, "  etcd error: {n} × {k}");
        }
    }
    Ok((out, ratio.is_finite().then_some(ratio)))
}

/// C etcd workers for the warm-up and the window, on an etcd phase's own
/// name prefix.
async fn etcd_phase(opts: &Opts, env: &Env, etcd: &EtcdProc) -> Result<EtcdPhase, String> {
    let now = Instant::now();
    let win = Window {
        start: now + opts.warmup,
        end: now + opts.warmup + opts.duration,
    };
    let pids = Pids {
        leasehold: etcd.pid(),
        redis: env.pids.redis.clone(),
        ticks: env.pids.ticks,
    };
    let cpu = cpu_between(
        pids,
        tokio::time::Instant::from_std(win.start),
        tokio::time::Instant::from_std(win.end),
    );
    let salt = SALT.fetch_add(1, Ordering::Relaxed);
    let handles: Vec<_> = (0..opts.concurrency)
        .map(|id| tokio::spawn(etcd_worker(id, etcd.addr, salt, win)))
        .collect();
    let mut stats = Stats::default();
    for h in handles {
        stats.merge(h.await.map_err(|e| format!("etcd worker panicked: {e}"))?);
    }
    stats.lat_ns.sort_unstable();
    let cpu = cpu.await.map_err(|e| e.to_string())?;
    Ok(EtcdPhase {
        stats,
        cpu: cpu.leasehold,
        client_cpu: cpu.client,
    })
}

/// One worker: grant, lock a new name with the lease, unlock, until the
/// window ends; one op per whole cycle, timed from the grant's send.
async fn etcd_worker(id: usize, addr: SocketAddr, salt: u32, win: Window) -> Stats {
    let mut stats = Stats::default();
    let mut conn: Option<Http> = None;
    let grant = format!(r#"{{"TTL":{TTL_S}}}"#);
    let mut n: u64 = 0;
    while Instant::now() < win.end {
        let http = match conn.as_mut() {
            Some(h) => h,
            None => match Http::connect(addr).await {
                Ok(h) => conn.insert(h),
                Err(e) => {
                    stats.untyped(format!("socket: {e}"));
                    return stats;
                }
            },
        };
        n += 1;
        let name = b64(&format!("bench/{salt:x}/{id}/{n}"));
        let t0 = Instant::now();
        match cycle(http, &grant, &name).await {
            Ok(()) => stats.op(&win, t0),
            Err(e) => {
                if e.starts_with("socket") {
                    conn = None;
                }
                stats.untyped(e);
            }
        }
    }
    stats
}

/// grant + lock + unlock.
async fn cycle(http: &mut Http, grant: &str, name: &str) -> Result<(), String> {
    let answer = post(http, "/v3/lease/grant", grant.to_owned()).await?;
    let lease = field(&answer, "ID").ok_or("etcd grant: no ID")?.to_owned();
    let answer = post(
        http,
        "/v3/lock/lock",
        format!(r#"{{"name":"{name}","lease":"{lease}"}}"#),
    )
    .await?;
    let key = field(&answer, "key").ok_or("etcd lock: no key")?.to_owned();
    post(http, "/v3/lock/unlock", format!(r#"{{"key":"{key}"}}"#)).await?;
    Ok(())
}
