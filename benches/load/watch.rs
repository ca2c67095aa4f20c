//! `watch` (issue 14): server-sent events of one resource.
//!
//! * fan-out: `--watchers` streams (`GET /leases/{p}/{d}/events`) of one
//!   resource on one instance, read by a separate process (`watch_reader.rs`,
//!   issue 25); the holder, on the same instance, acquires (and the bench
//!   waits until every watcher saw `acquired`), then releases: time from the
//!   release reply to the first and to the last watcher's `released` event,
//!   over `--watch-changes` releases;
//! * memory: the instance's RSS before the streams are opened and once every
//!   one has its first `state` event, divided by the number of streams;
//! * event latency: one watcher on instance A, a second instance B making
//!   the change: acquire reply → `acquired` event, release reply →
//!   `released` event, and for expiry the lease's end (acquire reply + TTL)
//!   → `expired` event (nothing publishes an expiry: instance A's timer).
//!
//! The SSE client is `sse.rs`'s raw TCP reader. The goals of issue 25 are
//! printed with the figures: RSS per idle watcher ≤ 6 KiB, release → last
//! watcher's event p99 ≤ 30 ms with 10 000 watchers.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::Method;

use crate::env::Env;
use crate::http_client::{body_json, digest, lease_path, Client, Http};
use crate::opts::Opts;
use crate::procs::{clock_ticks_per_second, cpu_ticks, status_kb, Service};
use crate::raw::redis_cmd;
use crate::sse::{open_watchers, shared, wait_ready, KINDS};
use crate::stats::{mb, percentile};
use crate::watch_reader::Reader;

/// Goals of issue 25: RSS per idle watcher, KiB.
const GOAL_KIB_PER_WATCHER: f64 = 6.0;
/// Goals of issue 25: release → last watcher's event, p99 ms (10 000 watchers).
const GOAL_LAST_P99_MS: f64 = 30.0;
/// TTL of the lease whose expiry is timed.
const EXPIRY_TTL_MS: u64 = 200;

/// The (soft, hard) limits on open files of process `pid` (`/proc/<pid>/limits`).
fn open_files_limits(pid: &str) -> Option<(usize, usize)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut v = line.split_whitespace().skip(3);
    Some((v.next()?.parse().ok()?, v.next()?.parse().ok()?))
}

/// Raises the soft open-file limit of `pid` towards `want` (at most its
/// hard limit) with util-linux `prlimit`, which needs neither `unsafe` nor a
/// crate; returns the soft limit in force afterwards.
fn raise_open_files(pid: &str, want: usize) -> Option<usize> {
    let (soft, hard) = open_files_limits(pid)?;
    if soft >= want {
        return Some(soft);
    }
    let _ = std::process::Command::new("prlimit")
        .args(["--pid", pid, &format!("--nofile={}:{hard}", want.min(hard))])
        .status();
    open_files_limits(pid).map(|(soft, _)| soft)
}

fn ms_between(from: Instant, to: Instant) -> u64 {
    u64::try_from(to.saturating_duration_since(from).as_nanos()).unwrap_or(u64::MAX)
}

/// A change made: when its request was sent and when its reply was read.
/// The change itself happened in between (inside Redis).
#[derive(Clone, Copy)]
struct Sent {
    sent: Instant,
    replied: Instant,
}

/// Latencies (ns) of one kind of event, from the change's reply and from
/// its send: the truth lies between the two.
#[derive(Default)]
struct Lat {
    from_reply: Vec<u64>,
    from_send: Vec<u64>,
    /// The event was read before the change's reply (counted as 0 from the reply).
    early: u64,
}

impl Lat {
    fn push(&mut self, change: Sent, offset: Duration, event: Instant) {
        self.early += u64::from(event < change.replied + offset);
        self.from_reply
            .push(ms_between(change.replied + offset, event));
        self.from_send.push(ms_between(change.sent + offset, event));
    }

    fn row(&mut self, what: &str) -> String {
        self.from_reply.sort_unstable();
        self.from_send.sort_unstable();
        let (r, s) = (&self.from_reply, &self.from_send);
        format!(
            "| {what} | {} | {:.3} / {:.3} / {:.3} | {:.3} / {:.3} / {:.3} | {} |",
            r.len(),
            percentile(r, 50.0),
            percentile(r, 99.0),
            percentile(r, 100.0),
            percentile(s, 50.0),
            percentile(s, 99.0),
            percentile(s, 100.0),
            self.early,
        )
    }
}

/// A holder that acquires and releases over its own connection.
struct Holder {
    http: Http,
    me: Client,
    path: String,
    /// The operation id of the latest acquire (the release names it).
    op: String,
}

impl Holder {
    async fn new(addr: SocketAddr, path: &str) -> Result<Self, String> {
        Ok(Self {
            http: Http::connect(addr).await?,
            me: Client::new(7)?,
            path: path.to_owned(),
            op: String::new(),
        })
    }

    /// Acquires (a fresh operation) with `ttl_ms`; when the request was
    /// sent and when its reply was read.
    async fn acquire(&mut self, ttl_ms: u64) -> Result<Sent, String> {
        self.op = self.me.next_op();
        let sent = Instant::now();
        let headers = [
            ("lease-owner-token", self.me.token.as_str()),
            ("lease-operation-id", self.op.as_str()),
        ];
        match self
            .http
            .call(
                Method::PUT,
                &self.path,
                &headers,
                Some(&body_json(ttl_ms, 0)),
            )
            .await?
        {
            (201, _) => Ok(Sent {
                sent,
                replied: Instant::now(),
            }),
            (s, b) => Err(format!(
                "holder acquire got HTTP {s}: {}",
                String::from_utf8_lossy(&b)
            )),
        }
    }

    /// Releases the current operation's lease.
    async fn release(&mut self) -> Result<Sent, String> {
        let sent = Instant::now();
        let headers = [
            ("lease-owner-token", self.me.token.as_str()),
            ("lease-operation-id", self.op.as_str()),
        ];
        match self
            .http
            .call(Method::DELETE, &self.path, &headers, None)
            .await?
        {
            (200, _) => Ok(Sent {
                sent,
                replied: Instant::now(),
            }),
            (s, b) => Err(format!(
                "holder release got HTTP {s}: {}",
                String::from_utf8_lossy(&b)
            )),
        }
    }
}

/// Runs the watch scenario and returns its section of the summary.
pub(crate) async fn run(opts: &Opts, env: &Env) -> Result<String, String> {
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    let mut out = String::from("\n## Watch: server-sent events of one resource\n\n");
    let pid = env.pids.leasehold.clone();

    // ---- event latency: one watcher on A, the changes made on B ----
    let mut b = Service::start(opts, &env.redis_url, &Service::new_build(), "watch-b").await?;
    let path = lease_path(&digest(0x3a7c, 1, 0));
    let one = shared();
    let tasks = open_watchers(env.addr, &path, 1, &one);
    wait_ready(&one, 1).await?;
    let mut holder = Holder::new(b.addr, &path).await?;
    let mut lat: [Lat; 3] = Default::default();
    let reps = opts.watch_changes;
    for i in 0..reps {
        one.arm(0);
        let change = holder.acquire(30_000).await?;
        let (first, _) = one.wait_all(1).await?;
        lat[0].push(change, Duration::ZERO, first);
        one.arm(1);
        let change = holder.release().await?;
        let (first, _) = one.wait_all(1).await?;
        lat[1].push(change, Duration::ZERO, first);
        // Expiry costs its TTL each time: at most 20 of them.
        if i < 20 {
            one.arm(2);
            let change = holder.acquire(EXPIRY_TTL_MS).await?;
            let (first, _) = one.wait_all(1).await?;
            lat[2].push(change, Duration::from_millis(EXPIRY_TTL_MS), first);
        }
    }
    for t in tasks {
        t.abort();
    }
    b.stop();
    let _ = writeln!(out, "Event latency, one watcher on instance A, the change made through instance B ({reps} acquires and releases, {} expiries of a {EXPIRY_TTL_MS} ms lease). The change happens inside Redis between its request's send and its reply, so the latency lies between the two columns (expiry: the lease ends TTL after the acquire, so both are offset by the TTL); \"read first\": the event was read before the change's own reply (0 from the reply).\n\n| event | n | from the reply: p50 / p99 / max ms | from the send: p50 / p99 / max ms | read first |\n|---|---|---|---|---|", lat[2].from_reply.len());
    for (kind, l) in KINDS.iter().zip(lat.iter_mut()) {
        let _ = writeln!(out, "{}", l.row(kind));
    }

    // ---- fan-out and memory: N watchers on A, read by another process ----
    let mut n = opts.watchers;
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    let path = lease_path(&digest(0x3a7c, 2, 0));
    let mut reader = Reader::start(env.addr, &path)?;
    // One socket per watcher on each side, plus some slack; the service
    // needs it as much as the reader.
    let reader_pid = reader.pid().map(|p| p.to_string()).unwrap_or_default();
    let limits = [
        raise_open_files(&reader_pid, n + 256),
        raise_open_files(&pid, n + 256),
    ];
    if let Some(limit) = limits.into_iter().flatten().min() {
        if limit < n + 256 {
            let _ = writeln!(out, "\nopen-file limit {limit} is below {} watchers: watching with {} (raise it with `ulimit -n {}` before `cargo bench`)", n, limit.saturating_sub(256), n + 256);
            n = limit.saturating_sub(256).max(1);
        }
    }
    let rss_before = status_kb(&pid, "VmRSS");
    let opened = Instant::now();
    let (ready, failed) = reader.open(n).await?;
    let open_s = opened.elapsed().as_secs_f64();
    // Let the service settle (allocator caches) before reading RSS.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = status_kb(&pid, "VmRSS");
    let per_kib = match (rss_before, rss_after) {
        (Some(a), Some(b)) if ready > 0 => Some(b.saturating_sub(a) as f64 / ready as f64),
        _ => None,
    };
    let per = per_kib.map_or("?".into(), |k| format!("{k:.2} KiB"));
    let mut holder = Holder::new(env.addr, &path).await?;
    let (mut to_first, mut to_last) = (Lat::default(), Lat::default());
    let mut errors = Vec::new();
    // CPU of the service and of the reader over the fan-outs (an acquire
    // and a release each): the steadiest figure on shared cores.
    let cpu_before = [cpu_ticks(&pid), cpu_ticks(&reader_pid)];
    for _ in 0..reps {
        reader.arm(0).await?;
        holder.acquire(30_000).await?;
        if let Err(e) = reader.wait(ready).await {
            errors.push(e);
            break;
        }
        reader.arm(1).await?;
        let change = holder.release().await?;
        match reader.wait(ready).await {
            Ok((first, last)) => {
                to_first.push(change, Duration::ZERO, first);
                to_last.push(change, Duration::ZERO, last);
            }
            Err(e) => {
                errors.push(e);
                break;
            }
        }
    }
    let rss_end = status_kb(&pid, "VmRSS");
    let cpu_after = [cpu_ticks(&pid), cpu_ticks(&reader_pid)];
    let fan_outs = 2 * to_last.from_reply.len();
    let ticks = clock_ticks_per_second();
    let cpu_ms = |i: usize| match (cpu_before[i], cpu_after[i]) {
        (Some(a), Some(b)) if fan_outs > 0 => {
            format!(
                "{:.1}",
                b.saturating_sub(a) as f64 / ticks * 1e3 / fan_outs as f64
            )
        }
        _ => "?".into(),
    };
    let cpu = format!(
        "CPU per change sent to all {ready} watchers ({fan_outs} changes): leasehold {} ms, reader {} ms",
        cpu_ms(0),
        cpu_ms(1)
    );
    drop(reader);
    let first_row = to_first.row("the first watcher's `released`");
    let last_row = to_last.row("the last watcher's `released`");
    let last_p99 = (!to_last.from_reply.is_empty()).then(|| percentile(&to_last.from_reply, 99.0));
    let _ = writeln!(
        out,
        "\nFan-out: {ready} streams of one resource on one instance ({failed} refused or failed), opened in {open_s:.1} s, read by a separate process (the bench binary again, one thread); the holder on the same instance; {} releases, each after every watcher saw the acquire.\n\n| release → | n | from the reply: p50 / p99 / max ms | from the send: p50 / p99 / max ms | read first |\n|---|---|---|---|---|\n{first_row}\n{last_row}\n\nMemory: leasehold RSS {} before the streams, {} with {ready} idle streams open: **{per} per idle watcher**; {} after the releases\n\n{cpu}",
        to_last.from_reply.len(),
        mb(rss_before),
        mb(rss_after),
        mb(rss_end),
    );
    for e in errors {
        let _ = writeln!(out, "  watch error: {e}");
    }
    let mark = |ok: Option<bool>| match ok {
        Some(true) => "met    ",
        Some(false) => "MISSED ",
        None => "n/a    ",
    };
    let _ = writeln!(
        out,
        "\nGoals (issue 25, watchers):\n\n- {} RSS per idle SSE watcher ≤ {GOAL_KIB_PER_WATCHER} KiB: {per}\n- {} release → last watcher's event p99 ≤ {GOAL_LAST_P99_MS} ms with {ready} watchers (10 000 asked for the goal) read by a separate process: {}",
        mark(per_kib.map(|k| k <= GOAL_KIB_PER_WATCHER)),
        mark(last_p99.map(|p| p <= GOAL_LAST_P99_MS && ready >= 10_000)),
        last_p99.map_or("?".into(), |p| format!("{p:.1} ms")),
    );
    let _ = writeln!(
        out,
        "- n/a     the same against etcd 3.4's v3 watch over its HTTP gateway: not built (issue 25 asks for it side by side)"
    );
    Ok(out)
}
