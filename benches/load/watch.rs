//! `watch` (issue 14): server-sent events of one resource.
//!
//! * fan-out: `--watchers` streams (`GET /leases/{p}/{d}/events`) of one
//!   resource on one instance; the holder, on the same instance, acquires
//!   (and the bench waits until every watcher saw `acquired`), then releases:
//!   time from the release reply to the first and to the last watcher's
//!   `released` event, over `--watch-changes` releases;
//! * memory: the instance's RSS before the streams are opened and once every
//!   one has its first `state` event, divided by the number of streams;
//! * event latency: one watcher on instance A, a second instance B making
//!   the change: acquire reply → `acquired` event, release reply →
//!   `released` event, and for expiry the lease's end (acquire reply + TTL)
//!   → `expired` event (nothing publishes an expiry: instance A's timer).
//!
//! The SSE client is a raw TCP reader: the request head written by hand,
//! the answer head parsed with `httparse`, the chunked body decoded here and
//! split into events at blank lines (only the `event:` line is read).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf as _, BytesMut};
use http::Method;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::env::Env;
use crate::http_client::{body_json, digest, lease_path, Client, Http};
use crate::opts::Opts;
use crate::procs::{status_kb, Service};
use crate::raw::redis_cmd;
use crate::stats::{mb, percentile};

/// How long the bench waits for every watcher to see one change.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(20);
/// TTL of the lease whose expiry is timed.
const EXPIRY_TTL_MS: u64 = 200;

/// One open event stream.
struct Sse {
    stream: TcpStream,
    raw: BytesMut,
    body: Vec<u8>,
    /// Bytes left in the current chunk, and whether its CRLF is still to come.
    left: usize,
    crlf: bool,
}

impl Sse {
    /// Opens the stream; `Err` names the status of a refusal (e.g. the watch cap).
    async fn open(addr: SocketAddr, path: &str) -> Result<Self, String> {
        let mut stream = timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect: {}", e.kind()))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let head = format!(
            "GET {path}/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n"
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| format!("send: {}", e.kind()))?;
        let mut raw = BytesMut::with_capacity(1024);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut res = httparse::Response::new(&mut headers);
            match res.parse(&raw) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = res.code.unwrap_or(0);
                    let chunked = res.headers.iter().any(|h| {
                        h.name.eq_ignore_ascii_case("transfer-encoding")
                            && h.value.eq_ignore_ascii_case(b"chunked")
                    });
                    if status != 200 || !chunked {
                        return Err(format!("events answered HTTP {status}"));
                    }
                    raw.advance(n);
                    break;
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(format!("bad answer: {e}")),
            }
            if stream.read_buf(&mut raw).await.map_err(|e| e.to_string())? == 0 {
                return Err("closed before the answer head".into());
            }
        }
        Ok(Self {
            stream,
            raw,
            body: Vec::new(),
            left: 0,
            crlf: false,
        })
    }

    /// The next event's name (comments such as `: keepalive` are skipped).
    async fn next_event(&mut self) -> Result<String, String> {
        loop {
            self.dechunk()?;
            while let Some(end) = self.body.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.body.drain(..end + 2).collect();
                let name = block
                    .split(|&b| b == b'\n')
                    .find_map(|line| line.strip_prefix(b"event: "))
                    .map(|n| String::from_utf8_lossy(n).into_owned());
                if let Some(name) = name {
                    return Ok(name);
                }
            }
            if self
                .stream
                .read_buf(&mut self.raw)
                .await
                .map_err(|e| e.to_string())?
                == 0
            {
                return Err("stream closed".into());
            }
        }
    }

    /// Moves what `raw` holds of the chunked body into `body`.
    fn dechunk(&mut self) -> Result<(), String> {
        loop {
            if self.left > 0 {
                let n = self.left.min(self.raw.len());
                if n == 0 {
                    return Ok(());
                }
                self.body.extend_from_slice(&self.raw[..n]);
                self.raw.advance(n);
                self.left -= n;
                self.crlf = self.left == 0;
            } else if self.crlf {
                if self.raw.len() < 2 {
                    return Ok(());
                }
                self.raw.advance(2);
                self.crlf = false;
            } else {
                let Some(eol) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                    return Ok(());
                };
                let line = String::from_utf8_lossy(&self.raw[..eol]).into_owned();
                let size = line.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(size, 16)
                    .map_err(|_| format!("bad chunk size {line:?}"))?;
                self.raw.advance(eol + 2);
                if size == 0 {
                    return Err("stream ended".into());
                }
                self.left = size;
            }
        }
    }
}

/// What every watcher reports to the driver.
struct Shared {
    base: Instant,
    /// The event name the driver waits for now (index into `KINDS`, 255: none).
    expect: AtomicU8,
    seen: AtomicUsize,
    /// ns since `base` of the first and of the last matching event.
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    ready: AtomicUsize,
    failed: AtomicUsize,
}

const KINDS: [&str; 3] = ["acquired", "released", "expired"];

impl Shared {
    fn arm(&self, kind: usize) {
        self.seen.store(0, Ordering::SeqCst);
        self.first_ns.store(u64::MAX, Ordering::SeqCst);
        self.last_ns.store(0, Ordering::SeqCst);
        self.expect.store(kind as u8, Ordering::SeqCst);
    }

    fn saw(&self, name: &str) {
        let expect = self.expect.load(Ordering::SeqCst) as usize;
        if KINDS.get(expect) == Some(&name) {
            let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.first_ns.fetch_min(ns, Ordering::SeqCst);
            self.last_ns.fetch_max(ns, Ordering::SeqCst);
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Waits until `n` watchers saw the armed event; the (first, last) times.
    async fn wait_all(&self, n: usize) -> Result<(Instant, Instant), String> {
        let deadline = Instant::now() + CHANGE_TIMEOUT;
        while self.seen.load(Ordering::SeqCst) < n {
            if Instant::now() > deadline {
                return Err(format!(
                    "only {} of {n} watchers saw the change within {CHANGE_TIMEOUT:?}",
                    self.seen.load(Ordering::SeqCst)
                ));
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let at = |ns: u64| self.base + Duration::from_nanos(ns);
        Ok((
            at(self.first_ns.load(Ordering::SeqCst)),
            at(self.last_ns.load(Ordering::SeqCst)),
        ))
    }
}

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

/// Opens `n` watchers of `path` on `addr` (at most 256 connecting at once);
/// each reports its events to `shared` until the bench ends.
fn open_watchers(
    addr: SocketAddr,
    path: &str,
    n: usize,
    shared: &Arc<Shared>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let gate = Arc::new(tokio::sync::Semaphore::new(256));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (shared, gate, path) = (Arc::clone(shared), Arc::clone(&gate), path.to_owned());
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire_owned().await;
            let mut sse = match Sse::open(addr, &path).await {
                Ok(s) => s,
                Err(_) => {
                    shared.failed.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            };
            // The first event is the current state.
            if sse.next_event().await.is_err() {
                shared.failed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            drop(permit);
            shared.ready.fetch_add(1, Ordering::SeqCst);
            while let Ok(name) = sse.next_event().await {
                shared.saw(&name);
            }
        }));
    }
    tasks
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared {
        base: Instant::now(),
        expect: AtomicU8::new(255),
        seen: AtomicUsize::new(0),
        first_ns: AtomicU64::new(u64::MAX),
        last_ns: AtomicU64::new(0),
        ready: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
    })
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

    // ---- fan-out and memory: N watchers on A ----
    let mut n = opts.watchers;
    // One socket per watcher on each side, plus some slack; the service
    // needs it as much as the bench.
    let self_pid = std::process::id().to_string();
    let limits = [
        raise_open_files(&self_pid, n + 256),
        raise_open_files(&pid, n + 256),
    ];
    if let Some(limit) = limits.into_iter().flatten().min() {
        if limit < n + 256 {
            let _ = writeln!(out, "\nopen-file limit {limit} is below {} watchers: watching with {} (raise it with `ulimit -n {}` before `cargo bench`)", n, limit.saturating_sub(256), n + 256);
            n = limit.saturating_sub(256).max(1);
        }
    }
    redis_cmd(&mut env.admin.clone(), &["FLUSHALL", "SYNC"]).await?;
    let path = lease_path(&digest(0x3a7c, 2, 0));
    let many = shared();
    let rss_before = status_kb(&pid, "VmRSS");
    let opened = Instant::now();
    let tasks = open_watchers(env.addr, &path, n, &many);
    wait_ready(&many, n).await?;
    let open_s = opened.elapsed().as_secs_f64();
    // Let the service settle (allocator caches) before reading RSS.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = status_kb(&pid, "VmRSS");
    let ready = many.ready.load(Ordering::SeqCst);
    let per = match (rss_before, rss_after) {
        (Some(a), Some(b)) if ready > 0 => {
            format!("{:.2} KiB", (b.saturating_sub(a)) as f64 / ready as f64)
        }
        _ => "?".into(),
    };
    let mut holder = Holder::new(env.addr, &path).await?;
    let (mut to_first, mut to_last) = (Lat::default(), Lat::default());
    let mut errors = Vec::new();
    for _ in 0..reps {
        many.arm(0);
        holder.acquire(30_000).await?;
        if let Err(e) = many.wait_all(ready).await {
            errors.push(e);
            break;
        }
        many.arm(1);
        let change = holder.release().await?;
        match many.wait_all(ready).await {
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
    for t in tasks {
        t.abort();
    }
    let _ = writeln!(
        out,
        "\nFan-out: {ready} streams of one resource on one instance ({} refused or failed), opened in {open_s:.1} s; the holder on the same instance; {} releases, each after every watcher saw the acquire. The last watcher's time includes the load generator reading {ready} sockets on its {} threads (cores shared with the service).\n\n| release → | n | from the reply: p50 / p99 / max ms | from the send: p50 / p99 / max ms | read first |\n|---|---|---|---|---|\n{}\n{}\n\nMemory: leasehold RSS {} before the streams, {} with {ready} idle streams open: **{per} per idle watcher**; {} after the releases",
        many.failed.load(Ordering::SeqCst),
        to_last.from_reply.len(),
        opts.client_threads,
        to_first.row("the first watcher's `released`"),
        to_last.row("the last watcher's `released`"),
        mb(rss_before),
        mb(rss_after),
        mb(rss_end),
    );
    for e in errors {
        let _ = writeln!(out, "  watch error: {e}");
    }
    Ok(out)
}

/// Waits until `n` watchers have their first event, or all the others failed.
async fn wait_ready(shared: &Shared, n: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (ready, failed) = (
            shared.ready.load(Ordering::SeqCst),
            shared.failed.load(Ordering::SeqCst),
        );
        if ready + failed >= n {
            return if ready > 0 {
                Ok(())
            } else {
                Err(format!(
                    "no watcher could open its stream ({failed} failed)"
                ))
            };
        }
        if Instant::now() > deadline {
            return Err(format!("only {ready} of {n} watchers opened within 120 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
