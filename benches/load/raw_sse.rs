//! The fan-out's floor (issue 25): the least a server can do on this
//! machine to send one event to 10 000 watchers, read by the same reader
//! process as leasehold's and etcd's streams. It is to `watch` what raw
//! EVALSHA is to `acquire`: the bench binary started again with [`FLAG`],
//! an event-stream server with nothing in it but the writes.
//!
//! One thread accepts `GET …/events` requests and answers each with a
//! chunked `200` head and a `state` event, then leaves the socket
//! non-blocking in a list. On a line `set` or `clear` on its stdin it
//! answers `ok` and writes one pre-encoded event (`acquired`, `released`,
//! about the size of leasehold's) to every stream from its main thread:
//! one `write` per socket in one loop, no parsing, no tasks, no wake-ups.
//! What is left is the kernel's loopback TCP path (the send, the
//! receiver's queue and wake-up), which the goal's 30 ms has to hold too.

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::fanout::Sent;
use crate::watch_reader::Helper;

/// The first argument that makes the bench binary the raw server.
pub(crate) const FLAG: &str = "--raw-sse";

/// The answer's head: what leasehold's direct streams write.
const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";

/// An event's data: the shape and size of a lease's state.
const DATA: &str = r#"{"resource":{"purpose":"bench","digest":"sha256:3a7c000000000000000000000000000000000000000000000000000000000002"},"holders":[],"version":"2.0","limit":1,"mode":"exclusive","waiting":0}"#;

/// One event as a chunk: size line, `event:`, `id:`, `data:`, CRLF.
fn chunk(kind: &str, version: u64) -> Vec<u8> {
    let event = format!("event: {kind}\nid: {version}.0\ndata: {DATA}\n\n");
    format!("{:x}\r\n{event}\r\n", event.len()).into_bytes()
}

/// The raw server: `<bench> --raw-sse`. Prints `listening <addr>`, then
/// answers each stdin line `set`/`clear` with `ok` and a fan-out.
pub(crate) fn main() -> ExitCode {
    let listener = match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => {
            eprintln!("raw sse: bind: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("raw sse: {e}");
            return ExitCode::FAILURE;
        }
    };
    let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let accepted = Arc::clone(&streams);
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            if let Some(s) = open(conn) {
                if let Ok(mut list) = accepted.lock() {
                    list.push(s);
                }
            }
        }
    });
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening {addr}")
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    let mut version = 1;
    for line in std::io::stdin().lock().lines() {
        let kind = match line.as_deref().map(str::trim) {
            Ok("set") => "acquired",
            Ok("clear") => "released",
            _ => break,
        };
        version += 1;
        let bytes = chunk(kind, version);
        if writeln!(out, "ok").and_then(|()| out.flush()).is_err() {
            break;
        }
        if let Ok(list) = streams.lock() {
            send_all(&list, &bytes);
        }
    }
    ExitCode::SUCCESS
}

/// Reads a request head (up to its blank line) and answers it with the
/// head and a `state` event; the socket is then non-blocking.
fn open(mut conn: TcpStream) -> Option<TcpStream> {
    conn.set_nodelay(true).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 || head.len() > 8192 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    conn.write_all(HEAD).ok()?;
    conn.write_all(&chunk("state", 1)).ok()?;
    conn.set_nonblocking(true).ok()?;
    Some(conn)
}

/// One `write` per stream in one loop; a stream whose send buffer is
/// full (none, with idle watchers) is finished blocking afterwards.
fn send_all(streams: &[TcpStream], bytes: &[u8]) {
    let mut behind = Vec::new();
    for s in streams {
        match (&*s).write(bytes) {
            Ok(n) if n == bytes.len() => {}
            Ok(n) => behind.push((s, n)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => behind.push((s, 0)),
            Err(_) => {}
        }
    }
    for (s, n) in behind {
        if s.set_nonblocking(false).is_ok() {
            let _ = (&*s).write_all(&bytes[n..]);
            let _ = s.set_nonblocking(true);
        }
    }
}

/// How long the driver waits for the raw server's `listening` and `ok`.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The driver's handle on the raw server (killed when dropped).
pub(crate) struct RawSse {
    helper: Helper,
    pub(crate) addr: SocketAddr,
}

impl RawSse {
    pub(crate) async fn start() -> Result<Self, String> {
        let mut helper = Helper::start("raw SSE server", &[FLAG])?;
        let first = helper.answer(ANSWER_TIMEOUT).await?;
        let addr = first
            .strip_prefix("listening ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("raw SSE server said {first:?}"))?;
        Ok(Self { helper, addr })
    }

    pub(crate) fn pid(&self) -> String {
        self.helper.pid().map(|p| p.to_string()).unwrap_or_default()
    }

    /// Asks for a fan-out of `set` or `clear`: sent, and when it said `ok`
    /// (just before its first write).
    pub(crate) async fn change(&mut self, what: &str) -> Result<Sent, String> {
        let sent = Instant::now();
        self.helper.send(what).await?;
        match self.helper.answer(ANSWER_TIMEOUT).await? {
            ok if ok == "ok" => Ok(Sent {
                sent,
                replied: Instant::now(),
            }),
            other => Err(format!("raw SSE server answered {other:?}")),
        }
    }
}
