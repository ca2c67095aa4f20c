//! The fan-out half of `watch` (issues 14, 25), for either server:
//! `--watchers` streams of one resource (leasehold: SSE of one lease;
//! etcd: a v3 watch of one key over its HTTP gateway) opened and read by a
//! separate process (`watch_reader.rs`); the server's RSS before and with
//! every stream idle; then `--watch-changes` times a change that every
//! watcher sees (leasehold: acquire; etcd: put) followed by the one that is
//! timed (leasehold: release; etcd: delete): from its reply to the first
//! and to the last watcher's event. Also the changes that make the events,
//! and the per-change latency record both halves of `watch` use.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::Method;

use crate::etcd::{b64, post_within};
use crate::http_client::{body_json, Client, Http};
use crate::procs::{clock_ticks_per_second, cpu_ticks, status_kb};
use crate::raw_sse::RawSse;
use crate::sse::Target;
use crate::stats::percentile;
use crate::watch_reader::Reader;

/// How long etcd may take to answer a change: with 10 000 watches its put
/// answer can wait behind the previous change's events (they share the
/// gateway's one gRPC connection).
const ETCD_CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

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
/// The change itself happened in between (inside the store).
#[derive(Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) sent: Instant,
    pub(crate) replied: Instant,
}

/// Latencies (ns) of one kind of event, from the change's reply and from
/// its send: the truth lies between the two.
#[derive(Default)]
pub(crate) struct Lat {
    pub(crate) from_reply: Vec<u64>,
    pub(crate) from_send: Vec<u64>,
    /// The event was read before the change's reply (counted as 0 from the reply).
    pub(crate) early: u64,
}

impl Lat {
    pub(crate) fn push(&mut self, change: Sent, offset: Duration, event: Instant) {
        self.early += u64::from(event < change.replied + offset);
        self.from_reply
            .push(ms_between(change.replied + offset, event));
        self.from_send.push(ms_between(change.sent + offset, event));
    }

    /// A table row (sorts the samples).
    pub(crate) fn row(&mut self, what: &str) -> String {
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

    /// p50 and p99 from the reply, ms (sorts the samples); `None` if empty.
    pub(crate) fn p50_p99(&mut self) -> Option<(f64, f64)> {
        self.from_reply.sort_unstable();
        (!self.from_reply.is_empty()).then(|| {
            (
                percentile(&self.from_reply, 50.0),
                percentile(&self.from_reply, 99.0),
            )
        })
    }
}

/// A leasehold lease holder that acquires and releases over its own connection.
pub(crate) struct Holder {
    http: Http,
    me: Client,
    path: String,
    /// The operation id of the latest acquire (the release names it).
    op: String,
}

impl Holder {
    pub(crate) async fn new(addr: SocketAddr, path: &str) -> Result<Self, String> {
        Ok(Self {
            http: Http::connect(addr).await?,
            me: Client::new(7)?,
            path: path.to_owned(),
            op: String::new(),
        })
    }

    /// Acquires (a fresh operation) with `ttl_ms`; when the request was
    /// sent and when its reply was read.
    pub(crate) async fn acquire(&mut self, ttl_ms: u64) -> Result<Sent, String> {
        self.op = self.me.next_op();
        let sent = Instant::now();
        let headers = [
            ("lease-owner-token", self.me.token.as_str()),
            ("lease-operation-id", self.op.as_str()),
        ];
        let body = body_json(ttl_ms, 0);
        match self
            .http
            .call(Method::PUT, &self.path, &headers, Some(&body))
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
    pub(crate) async fn release(&mut self) -> Result<Sent, String> {
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

/// What makes the events a fan-out times.
pub(crate) enum Changer {
    /// leasehold: acquire (30 s TTL), then release.
    Lease(Holder),
    /// etcd: put the key, then delete it (over the HTTP gateway).
    Etcd { http: Http, key: String },
    /// The raw floor (`raw_sse.rs`): `set`, then `clear`.
    Raw(RawSse),
}

impl Changer {
    pub(crate) async fn etcd(addr: SocketAddr, key: &str) -> Result<Self, String> {
        Ok(Changer::Etcd {
            http: Http::connect(addr).await?,
            key: b64(key),
        })
    }

    /// The change every watcher sees before the timed one.
    async fn set(&mut self) -> Result<Sent, String> {
        match self {
            Changer::Lease(h) => h.acquire(30_000).await,
            Changer::Raw(r) => r.change("set").await,
            Changer::Etcd { http, key } => {
                let sent = Instant::now();
                let body = format!(r#"{{"key":"{key}","value":"eA=="}}"#);
                post_within(http, ETCD_CHANGE_TIMEOUT, "/v3/kv/put", body).await?;
                Ok(Sent {
                    sent,
                    replied: Instant::now(),
                })
            }
        }
    }

    /// The timed change.
    async fn clear(&mut self) -> Result<Sent, String> {
        match self {
            Changer::Lease(h) => h.release().await,
            Changer::Raw(r) => r.change("clear").await,
            Changer::Etcd { http, key } => {
                let sent = Instant::now();
                let body = format!(r#"{{"key":"{key}"}}"#);
                post_within(http, ETCD_CHANGE_TIMEOUT, "/v3/kv/deleterange", body).await?;
                Ok(Sent {
                    sent,
                    replied: Instant::now(),
                })
            }
        }
    }
}

/// What one fan-out measured.
pub(crate) struct FanOut {
    /// Streams open and idle, refused or failed; seconds to open them.
    pub(crate) ready: usize,
    pub(crate) failed: usize,
    pub(crate) open_s: f64,
    /// The server's VmRSS (kB) before the streams, with them idle, after the changes.
    pub(crate) rss: [Option<u64>; 3],
    pub(crate) per_kib: Option<f64>,
    pub(crate) to_first: Lat,
    pub(crate) to_last: Lat,
    /// CPU ms per change sent to all watchers: the server, the reader.
    pub(crate) cpu_ms: [Option<f64>; 2],
    pub(crate) fan_outs: usize,
    /// A note when the open-file limit lowered the watcher count.
    pub(crate) limit_note: Option<String>,
    pub(crate) errors: Vec<String>,
}

/// Opens `want` watchers of `target` on `addr` (served by process `pid`)
/// in a reader process, reads the RSS, then times `reps` changes.
pub(crate) async fn measure(
    pid: &str,
    addr: SocketAddr,
    target: &Target,
    want: usize,
    reps: usize,
    mut changer: Changer,
) -> Result<FanOut, String> {
    let mut n = want;
    let mut reader = Reader::start(addr, target)?;
    // One socket per watcher on each side, plus some slack; the server
    // needs it as much as the reader.
    let reader_pid = reader.pid().map(|p| p.to_string()).unwrap_or_default();
    let limits = [
        raise_open_files(&reader_pid, n + 256),
        raise_open_files(pid, n + 256),
    ];
    let mut limit_note = None;
    if let Some(limit) = limits.into_iter().flatten().min() {
        if limit < n + 256 {
            limit_note = Some(format!("open-file limit {limit} is below {n} watchers: watching with {} (raise it with `ulimit -n {}` before `cargo bench`)", limit.saturating_sub(256), n + 256));
            n = limit.saturating_sub(256).max(1);
        }
    }
    let rss_before = status_kb(pid, "VmRSS");
    let opened = Instant::now();
    let (ready, failed) = reader.open(n).await?;
    let open_s = opened.elapsed().as_secs_f64();
    // Let the server settle (allocator caches, a Go GC cycle) before reading RSS.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = status_kb(pid, "VmRSS");
    let per_kib = match (rss_before, rss_after) {
        (Some(a), Some(b)) if ready > 0 => Some(b.saturating_sub(a) as f64 / ready as f64),
        _ => None,
    };
    let (mut to_first, mut to_last) = (Lat::default(), Lat::default());
    let mut errors = Vec::new();
    // CPU of the server and of the reader over the fan-outs (two changes
    // each): the steadiest figure on shared cores.
    let cpu_before = [cpu_ticks(pid), cpu_ticks(&reader_pid)];
    for _ in 0..reps {
        reader.arm(0).await?;
        changer.set().await?;
        if let Err(e) = reader.wait(ready).await {
            errors.push(e);
            break;
        }
        reader.arm(1).await?;
        let change = changer.clear().await?;
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
    let rss_end = status_kb(pid, "VmRSS");
    let cpu_after = [cpu_ticks(pid), cpu_ticks(&reader_pid)];
    let fan_outs = 2 * to_last.from_reply.len();
    let ticks = clock_ticks_per_second();
    let cpu_ms = |i: usize| match (cpu_before[i], cpu_after[i]) {
        (Some(a), Some(b)) if fan_outs > 0 => {
            Some(b.saturating_sub(a) as f64 / ticks * 1e3 / fan_outs as f64)
        }
        _ => None,
    };
    Ok(FanOut {
        ready,
        failed,
        open_s,
        rss: [rss_before, rss_after, rss_end],
        per_kib,
        to_first,
        to_last,
        cpu_ms: [cpu_ms(0), cpu_ms(1)],
        fan_outs,
        limit_note,
        errors,
    })
}
