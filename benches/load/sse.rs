//! The SSE client of `watch`: a raw TCP reader of event streams (the
//! request head written by hand, the answer head parsed with `httparse`,
//! the chunked body decoded here and split into events at blank lines; only
//! the `event:` line is read), and the counters every watcher reports to.
//! Used in the bench process (one watcher) and in the reader process
//! (`watch_reader.rs`, the fan-out's 10 000). The same reader opens etcd's
//! v3 watch over its HTTP gateway (issue 25: `POST /v3/watch`, one JSON
//! message a line in the chunked body), named as the lease events are: the
//! `created` message is the stream's first (`state`), a put `acquired`, a
//! delete `released`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::etcd::b64;

/// How long a watcher waits for every watcher to see one change.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// What a watcher watches.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// leasehold: `GET {path}/events`, server-sent events.
    Leasehold(String),
    /// etcd: `POST /v3/watch` of this key (plain text; sent base64).
    Etcd(String),
}

impl Target {
    /// The two words that name it on the reader's command line.
    pub(crate) fn args(&self) -> [&str; 2] {
        match self {
            Target::Leasehold(path) => ["leasehold", path],
            Target::Etcd(key) => ["etcd", key],
        }
    }

    pub(crate) fn from_args(kind: &str, what: &str) -> Option<Self> {
        match kind {
            "leasehold" => Some(Target::Leasehold(what.to_owned())),
            "etcd" => Some(Target::Etcd(what.to_owned())),
            _ => None,
        }
    }

    fn request(&self, addr: SocketAddr) -> String {
        match self {
            Target::Leasehold(path) => format!(
                "GET {path}/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n"
            ),
            Target::Etcd(key) => {
                let body = format!("{{\"create_request\":{{\"key\":\"{}\"}}}}", b64(key));
                format!(
                    "POST /v3/watch HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
        }
    }
}

/// The name of one etcd watch message, as the lease events are named.
fn etcd_event(line: &[u8]) -> &'static str {
    let has = |s: &[u8]| line.windows(s.len()).any(|w| w == s);
    if has(b"\"created\":true") {
        "state"
    } else if has(b"\"type\":\"DELETE\"") {
        "released"
    } else if has(b"\"events\"") {
        "acquired"
    } else {
        "other"
    }
}

/// One open event stream.
pub(crate) struct Sse {
    etcd: bool,
    stream: TcpStream,
    raw: BytesMut,
    body: Vec<u8>,
    /// Bytes left in the current chunk, and whether its CRLF is still to come.
    left: usize,
    crlf: bool,
}

impl Sse {
    /// Opens the stream; `Err` names the status of a refusal (e.g. the watch cap).
    pub(crate) async fn open(addr: SocketAddr, target: &Target) -> Result<Self, String> {
        let mut stream = timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect: {}", e.kind()))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let head = target.request(addr);
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
            etcd: matches!(target, Target::Etcd(_)),
            stream,
            raw,
            body: Vec::new(),
            left: 0,
            crlf: false,
        })
    }

    /// The next event's name (comments such as `: keepalive` are skipped).
    pub(crate) async fn next_event(&mut self) -> Result<String, String> {
        loop {
            self.dechunk()?;
            // etcd: one JSON message a line.
            while self.etcd {
                let Some(end) = self.body.iter().position(|&b| b == b'\n') else {
                    break;
                };
                let name = etcd_event(&self.body[..end]);
                self.body.drain(..=end);
                if end > 0 {
                    return Ok(name.to_owned());
                }
            }
            while let Some(end) = self.body.windows(2).position(|w| w == b"\n\n") {
                // Read in place: 10 000 watchers parse every event.
                let name = self.body[..end]
                    .split(|&b| b == b'\n')
                    .find_map(|line| line.strip_prefix(b"event: "))
                    .map(|n| String::from_utf8_lossy(n).into_owned());
                self.body.drain(..end + 2);
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
                let line = &self.raw[..eol];
                let digits = line.split(|&b| b == b';').next().unwrap_or(b"");
                let size = std::str::from_utf8(digits)
                    .ok()
                    .and_then(|d| usize::from_str_radix(d.trim(), 16).ok())
                    .ok_or_else(|| format!("bad chunk size {:?}", String::from_utf8_lossy(line)))?;
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
pub(crate) struct Shared {
    pub(crate) base: Instant,
    /// The event name the driver waits for now (index into `KINDS`, 255: none).
    expect: AtomicU8,
    seen: AtomicUsize,
    /// ns since `base` of the first and of the last matching event.
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    pub(crate) ready: AtomicUsize,
    pub(crate) failed: AtomicUsize,
}

pub(crate) const KINDS: [&str; 3] = ["acquired", "released", "expired"];

impl Shared {
    pub(crate) fn arm(&self, kind: usize) {
        self.seen.store(0, Ordering::SeqCst);
        self.first_ns.store(u64::MAX, Ordering::SeqCst);
        self.last_ns.store(0, Ordering::SeqCst);
        self.expect.store(kind as u8, Ordering::SeqCst);
    }

    pub(crate) fn saw(&self, name: &str) {
        let expect = self.expect.load(Ordering::SeqCst) as usize;
        if KINDS.get(expect) == Some(&name) {
            let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.first_ns.fetch_min(ns, Ordering::SeqCst);
            self.last_ns.fetch_max(ns, Ordering::SeqCst);
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Waits until `n` watchers saw the armed event; the (first, last) times.
    pub(crate) async fn wait_all(&self, n: usize) -> Result<(Instant, Instant), String> {
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

/// Opens `n` watchers of `target` on `addr` (at most 256 connecting at once);
/// each reports its events to `shared` until the bench ends.
pub(crate) fn open_watchers(
    addr: SocketAddr,
    target: &Target,
    n: usize,
    shared: &Arc<Shared>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let gate = Arc::new(tokio::sync::Semaphore::new(256));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (shared, gate, target) = (Arc::clone(shared), Arc::clone(&gate), target.clone());
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire_owned().await;
            let mut sse = match Sse::open(addr, &target).await {
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

pub(crate) fn shared() -> Arc<Shared> {
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

/// Waits until `n` watchers have their first event, or all the others failed.
pub(crate) async fn wait_ready(shared: &Shared, n: usize) -> Result<(), String> {
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
