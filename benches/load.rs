//! `cargo bench --bench load`: leasehold over HTTP side by side with raw
//! Redis running the very same Lua scripts, in one run, on one machine.
//!
//! The run starts its own `redis-server` and a release build of the
//! `leasehold` binary on free loopback ports, then, for `--rounds` rounds
//! (raw and service alternating, the order flipped every other round so a
//! noisy neighbour does not always hit the same side):
//!
//! * `acquire`    — distinct digests, one acquire each (raw: EVALSHA of
//!   `lua/acquire.lua`; service: `PUT /leases/...`);
//! * `cycle`      — acquire then release (raw: EVALSHA acquire + release;
//!   service: PUT then DELETE), one op = one cycle;
//! * `contended`  — C clients on `--resources` resources: acquire, release
//!   when acquired, retry at once when contended; one op = one request;
//! * `paced`      — acquire at a fixed offered rate below saturation, so the
//!   latency of both sides is compared at the same load.
//!
//! Then the hand-off latency of issue 3: a waiter blocked server-side
//! (`waitMs`) against a client polling every 50 ms; the scenarios only the
//! service has; and `anchor`, the lease cycle against etcd (issue 25, with
//! an `etcd` the run starts for it, as it does for `watch`'s comparison).
//!
//! Every closed-loop phase runs C workers for a warm-up and then the
//! measured window; only operations started and finished inside the window
//! count. See `benches/README.md` for the method and the flags.
//!
//! This file is the run: it starts the processes and runs the parts in
//! order, each from its own file under `benches/load/`, then prints the
//! report and the goal lines.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use http::Method;

// The parts of the run, one file each (a crate root looks for its modules
// beside itself, hence the paths).
#[path = "load/anchor.rs"]
mod anchor;
#[path = "load/consts.rs"]
mod consts;
#[path = "load/env.rs"]
mod env;
#[path = "load/etcd.rs"]
mod etcd;
#[path = "load/goals.rs"]
mod goals;
#[path = "load/goals25.rs"]
mod goals25;
#[path = "load/handoff.rs"]
mod handoff;
#[path = "load/http_client.rs"]
mod http_client;
#[path = "load/opts.rs"]
mod opts;
#[path = "load/phases.rs"]
mod phases;
#[path = "load/procs.rs"]
mod procs;
#[path = "load/raw.rs"]
mod raw;
#[path = "load/scenario.rs"]
mod scenario;
#[path = "load/sse.rs"]
mod sse;
#[path = "load/stats.rs"]
mod stats;
#[path = "load/summary.rs"]
mod summary;
#[path = "load/workers.rs"]
mod workers;

// The scenarios that only the service has, one file each.
#[path = "load/fair.rs"]
mod fair;
// `fair`'s script runs by kind and the looks that found nothing (issue 41).
#[path = "load/list.rs"]
mod list;
#[path = "load/looks.rs"]
mod looks;
#[path = "load/permits.rs"]
mod permits;
// `permits-many` (issue 21): renew cost with 100 against 10 000 holders.
#[path = "load/permits_many.rs"]
mod permits_many;
#[path = "load/watch.rs"]
mod watch;
// The fan-out of `watch`, for leasehold and for etcd.
#[path = "load/fanout.rs"]
mod fanout;
// The fan-out's watchers, read by this binary started again (issue 25).
#[path = "load/watch_reader.rs"]
mod watch_reader;
// The fan-out's floor: a server that only writes (issue 25).
#[path = "load/raw_sse.rs"]
mod raw_sse;
// What a lease costs Redis against the minimal lock (issue 41, §20).
#[path = "load/redis_cost.rs"]
mod redis_cost;
// Sessions: one renew for many leases, and keep-alive streams (issue 42).
#[path = "load/session_cost.rs"]
mod session_cost;

use env::Env;
use http_client::Http;
use opts::Opts;
use procs::{status_kb, RedisProc, Service};

/// Reads `/metrics` every `every`, as a Prometheus server would (the
/// exporter drains its histogram buffers when it renders).
async fn scrape(addr: SocketAddr, every: Duration) {
    let mut conn: Option<Http> = None;
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if conn.is_none() {
            conn = Http::connect(addr).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            if c.call(Method::GET, "/metrics", &[], None).await.is_err() {
                conn = None;
            }
        }
    }
}

async fn run(opts: Opts) -> Result<bool, String> {
    // anchor and watch compare against an etcd the run starts.
    if opts.wants("anchor") || opts.wants("watch") {
        etcd::require()?;
    }
    let redis = RedisProc::start()?;
    let mut service =
        Service::start(&opts, &redis.url(), &Service::new_build(), "leasehold").await?;
    let lh_pid = service.pid().to_string();
    let idle_rss = status_kb(&lh_pid, "VmRSS");
    // LOAD_BASELINE_BIN: a second instance of another build on the same
    // Redis, measured in the same rounds (its keys are its own; every phase
    // starts on an empty keyspace anyway).
    let baseline_bin = std::env::var_os("LOAD_BASELINE_BIN")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    let mut baseline = match &baseline_bin {
        Some(bin) => Some(Service::start(&opts, &redis.url(), bin, "baseline").await?),
        None => None,
    };
    let version = RedisProc::version();
    let env = Env::connect(&opts, &redis, &service, baseline.as_ref()).await?;

    let scraper = opts
        .scrape_every
        .map(|every| tokio::spawn(scrape(env.addr, every)));
    let mut out = summary::header(&opts, &version, baseline_bin.as_deref());

    // ---- phases ----
    let (kinds, phases, paced_rate) = phases::rounds(&opts, &env, &mut out).await?;
    let peak_rss = status_kb(&lh_pid, "VmHWM");
    let after_rss = status_kb(&lh_pid, "VmRSS");

    // ---- summary ----
    let mut summary = String::new();
    let figures = summary::tables(&opts, &phases, &kinds, &mut summary);
    let rss = (idle_rss, peak_rss, after_rss);
    summary::memory_cpu(&mut summary, &phases, &kinds, rss);

    // ---- hand-off ----
    let handoff_goal = if opts.wants("handoff") {
        handoff::section(&opts, &env, &mut summary).await?
    } else {
        None
    };

    // ---- the scenarios of issues 14, 15 and 16 ----
    if opts.wants("permits") {
        summary.push_str(&permits::run(&opts, &env).await?);
    }
    if opts.wants("permits-many") {
        summary.push_str(&permits_many::run(&opts, &env).await?);
    }
    let mut fair = None;
    if opts.wants("fair") {
        let (text, figures) = fair::run(&opts, &env, baseline_bin.as_deref()).await?;
        summary.push_str(&text);
        fair = Some(figures);
    }
    // Watches and listing: a build without them answers 404; that is
    // reported, and the rest of the run stands.
    let mut watch = None;
    if opts.wants("watch") {
        match watch::run(&opts, &env).await {
            Ok((text, figures)) => {
                summary.push_str(&text);
                watch = Some(Ok(figures));
            }
            Err(e) => {
                let _ = writeln!(summary, "\n## Watch\n\nnot measured: {e}");
                watch = Some(Err(()));
            }
        }
    }
    if opts.wants("list") {
        match list::run(&opts, &env).await {
            Ok(text) => summary.push_str(&text),
            Err(e) => {
                let _ = writeln!(summary, "\n## List\n\nnot measured: {e}");
            }
        }
    }

    // ---- anchor: the lease cycle against etcd (issue 25) ----
    let mut anchor = None;
    if opts.wants("anchor") {
        let (text, ratio) = anchor::run(&opts, &env).await?;
        summary.push_str(&text);
        anchor = Some(ratio);
    }

    // ---- redis-cost: Redis work and memory per lease (issue 41) ----
    let mut cost_ok = true;
    if opts.wants("redis-cost") {
        let (text, ok) = redis_cost::run(&opts).await?;
        summary.push_str(&text);
        cost_ok = ok;
    }

    // ---- sessions: session-renew and keepalive-streams (issue 42) ----
    for (part, which) in [("session-renew", 0), ("keepalive-streams", 1)] {
        if opts.wants(part) {
            let (text, ok) = if which == 0 {
                session_cost::session_renew(&opts).await?
            } else {
                session_cost::keepalive_streams(&opts).await?
            };
            summary.push_str(&text);
            cost_ok &= ok;
        }
    }

    let _ = writeln!(
        summary,
        "\nmachine load average after the phases: {}",
        summary::loadavg()
    );

    // ---- errors ----
    let non_typed = summary::errors(&mut summary, &phases);

    // ---- goals ----
    let goals_ok = goals::write(
        &mut summary,
        goals::Inputs {
            opts: &opts,
            figures: figures.clone(),
            paced_rate,
            peak_rss,
            non_typed,
            baseline: env.baseline.is_some(),
            fair_p50: fair.as_ref().and_then(|f| f.p50),
            handoff_goal,
        },
    );
    let goals25_ok = goals25::write(
        &mut summary,
        goals25::Inputs {
            opts: &opts,
            figures: &figures,
            phases: &phases,
            paced_rate,
            baseline: env.baseline.is_some(),
            fair: fair.as_ref(),
            watch: watch.as_ref().map(|w| w.as_ref().map_err(|_| ())),
            anchor,
        },
    );
    let goals_ok = goals_ok && goals25_ok && cost_ok;
    println!("{summary}");
    out.push_str(&summary);
    if let Ok(path) = std::env::var("LOAD_REPORT") {
        std::fs::write(&path, &out).map_err(|e| format!("write {path}: {e}"))?;
        println!("report written to {path}");
    }
    if let Some(scraper) = scraper {
        scraper.abort();
    }
    service.stop();
    if let Some(b) = baseline.as_mut() {
        b.stop();
    }
    drop(redis);
    Ok(goals_ok)
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(watch_reader::FLAG) {
        return watch_reader::main();
    }
    if std::env::args().nth(1).as_deref() == Some(raw_sse::FLAG) {
        return raw_sse::main();
    }
    let opts = match Opts::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.client_threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        // Goals are reported, not enforced: a missed goal is a figure, not a failure.
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load: {e}");
            ExitCode::FAILURE
        }
    }
}
