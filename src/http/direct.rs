//! Event streams outside hyper (issue 25, docs/perf-log/2026-12-04.md
//! "Watchers outside hyper"). An idle watcher served by hyper costs about 22 KiB:
//! the connection's 8 KiB read and write buffers and its task, kept for
//! the stream's whole life. Here the accept loop looks at a plain
//! connection's first bytes; when they are a complete
//! `GET /leases/{purpose}/{digest}/events` head it parses the head itself,
//! runs the same service stack on it (so authentication, limits, metrics
//! and the handler are the same), and for an opened stream writes the head
//! and the first event from a small task of its own: the socket, the
//! stream's state, no buffers. The socket is then attached to its watcher,
//! and the watch group writes each change to it itself
//! ([`crate::notify::Sink`]). Anything else (another request, a head not
//! complete in the first read, TLS) is served by hyper as before.
//!
//! Such a connection carries one request: its answer says
//! `connection: close`, an error answer as much as the stream.

use std::cell::RefCell;
use std::convert::Infallible;
use std::io::{self, IoSlice};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, DATE, EXPECT, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{Method, Version};
use axum::response::Response;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt as _};

use super::watch_stream::{change_event, until, DirectSlot, Stream, StreamParts, KEEPALIVE};
use crate::domain::Change;
use crate::notify::{Flush, Snapshot, Socket};

/// Bytes of the first read looked at: a watch request's head is a few
/// hundred bytes; a longer one goes to hyper.
const PEEK_BYTES: usize = 4096;

/// Most header lines a head taken here may have (more: hyper's).
const MAX_HEADERS: usize = 48;

/// Largest error answer written here (problem+json bodies are small).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What the first bytes of a connection are.
pub enum Sniffed {
    /// Nothing came within the idle timeout, the peer closed, or the
    /// service is shutting down: close the connection.
    Close,
    /// Anything but a complete event-stream request: hyper serves it.
    Hyper,
    /// An event-stream request, parsed; its head is still in the socket.
    Watch(Box<Direct>),
}

/// An event-stream request parsed from a connection's first bytes.
pub struct Direct {
    request: Request,
    head_len: usize,
    slot: DirectSlot,
}

/// Waits for the connection's first bytes (at most `wait`, or until
/// `stop`) and looks at them without taking them out of the socket.
pub async fn sniff(stream: &TcpStream, wait: Duration, stop: &CancellationToken) -> Sniffed {
    let mut buf = vec![0u8; PEEK_BYTES];
    let peeked = tokio::select! {
        biased;
        () = stop.cancelled() => return Sniffed::Close,
        peeked = tokio::time::timeout(wait, stream.peek(&mut buf)) => peeked,
    };
    let n = match peeked {
        Ok(Ok(n)) if n > 0 => n,
        _ => return Sniffed::Close,
    };
    match parse(&buf[..n]) {
        Some((mut request, head_len)) => {
            let slot = DirectSlot::default();
            request.extensions_mut().insert(slot.clone());
            Sniffed::Watch(Box::new(Direct {
                request,
                head_len,
                slot,
            }))
        }
        None => Sniffed::Hyper,
    }
}

/// The request when `bytes` start with a complete head of a body-less
/// HTTP/1.1 `GET` of a lease's event stream, with the head's length.
fn parse(bytes: &[u8]) -> Option<(Request, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(len) = head.parse(bytes).ok()? else {
        return None;
    };
    if head.method != Some("GET") || head.version != Some(1) {
        return None;
    }
    let target = head.path?;
    if !is_events_path(target.split('?').next().unwrap_or(target)) {
        return None;
    }
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.version_mut() = Version::HTTP_11;
    *request.uri_mut() = target.parse().ok()?;
    let map = request.headers_mut();
    for line in head.headers.iter() {
        let name = HeaderName::from_bytes(line.name.as_bytes()).ok()?;
        let body_or_switch = name == TRANSFER_ENCODING
            || name == EXPECT
            || name == UPGRADE
            || (name == CONTENT_LENGTH && line.value != b"0");
        if body_or_switch {
            return None;
        }
        map.append(name, HeaderValue::from_bytes(line.value).ok()?);
    }
    Some((request, len))
}

/// `/leases/{purpose}/{digest}/events`, by shape (the router judges the
/// parts).
fn is_events_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/leases/") else {
        return false;
    };
    let mut parts = rest.split('/');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(p), Some(d), Some("events"), None) if !p.is_empty() && !d.is_empty()
    )
}

/// Answers `direct` with `service`: an opened stream is handed to a task of
/// its own (holding `keep`, the connection's permit, until it ends); any
/// other answer is written whole and the connection closed. `limit`: how
/// long a write may make no progress before the connection is closed.
pub async fn serve<S, K>(
    mut stream: TcpStream,
    direct: Box<Direct>,
    service: S,
    limit: Duration,
    keep: K,
) where
    S: Service<Request, Response = Response, Error = Infallible>,
    K: Send + 'static,
{
    let Direct {
        request,
        head_len,
        slot,
    } = *direct;
    let response = match service.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    // The head is still in the socket (it was only peeked): take it out.
    let mut head = vec![0u8; head_len];
    if stream.read_exact(&mut head).await.is_err() {
        return;
    }
    drop(head);
    if let Some(events) = slot.take() {
        let mut head = Vec::with_capacity(256);
        response_head(&response, &mut head);
        head.extend_from_slice(b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
        drop(response);
        tokio::spawn(run(stream, events, head, limit, keep));
        return;
    }
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_ERROR_BODY)
        .await
        .unwrap_or_default();
    let mut head = Vec::with_capacity(256);
    response_head(&Response::from_parts(parts, ()), &mut head);
    head.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    if write(&stream, &[&head, &body], limit).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

/// Writes the status line and headers of `response` and a `date` to
/// `out`, leaving out its framing headers (`connection`,
/// `transfer-encoding`, `content-length`): the caller adds its own, then
/// the blank line. Shared with [`super::keep_alive`].
pub(super) fn response_head<B>(response: &Response<B>, out: &mut Vec<u8>) {
    let status = response.status();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in response.headers() {
        if name == CONNECTION || name == TRANSFER_ENCODING || name == CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !response.headers().contains_key(DATE) {
        out.extend_from_slice(b"date: ");
        date(|text| out.extend_from_slice(text));
        out.extend_from_slice(b"\r\n");
    }
}

thread_local! {
    /// The `date` header's text and the second it was made for (formatted
    /// once a second, as hyper does).
    static DATE_TEXT: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
}

/// Calls `f` with this second's `date` text.
fn date(f: impl FnOnce(&[u8])) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE_TEXT.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            *cached = (second, httpdate::fmt_http_date(now).into_bytes());
        }
        f(&cached.1);
    });
}

/// Writes `head` and the stream's first event, then attaches the socket
/// to its watcher: the watch group writes each change to it itself
/// ([`crate::notify::Sink`]), and this task only wakes for what the group
/// leaves to it, a keep-alive, the stream's end (`maxMs`, `maxEvents`,
/// shutdown) or the client going. A write that makes no progress for
/// `limit` closes the connection.
async fn run<K>(stream: TcpStream, events: Stream, head: Vec<u8>, limit: Duration, keep: K) {
    let stream = Arc::new(stream);
    if write(&stream, &[&head], limit).await.is_err() {
        return;
    }
    drop(head);
    let StreamParts {
        mut watcher,
        first,
        mut keepalive,
        mut left,
        deadline,
    } = events.into_parts();
    if left != Some(0) {
        if let Some(first) = first {
            if write(&stream, &[&frame(&first)], limit).await.is_err() {
                return;
            }
            left = left.map(|l| l.saturating_sub(1));
        }
    }
    let socket: Arc<dyn Socket> = Arc::clone(&stream) as Arc<dyn Socket>;
    let sink = watcher.attach(socket, framed_change, left);
    loop {
        match watcher.flush() {
            Flush::CaughtUp => {}
            Flush::Full => match tokio::time::timeout(limit, stream.writable()).await {
                Ok(Ok(())) => continue,
                _ => return,
            },
            Flush::Done => break,
            Flush::Failed => return,
        }
        tokio::select! {
            biased;
            ready = stream.readable() => {
                if ready.is_err() || gone(&stream) {
                    return;
                }
            }
            () = sink.behind.notified() => {}
            () = until(deadline) => break,
            () = watcher.ended() => break,
            // The ticker ends only at shutdown.
            tick = keepalive.changed() => match tick {
                Ok(()) => {
                    let _ = watcher.push(KEEPALIVE_CHUNK.clone());
                }
                Err(_) => break,
            },
        }
    }
    // The end: what the socket has not taken of the last event, then the
    // last chunk.
    let rest = watcher.close().unwrap_or_default();
    let ended = write(&stream, &[&rest, b"0\r\n\r\n"], limit).await.is_ok();
    // The sink holds the socket too; the group lets go of it with the watcher.
    drop((sink, watcher));
    if ended {
        if let Ok(mut stream) = Arc::try_unwrap(stream) {
            let _ = stream.shutdown().await;
        }
    }
    drop(keep);
}

/// The keep-alive comment as a chunk, framed once.
static KEEPALIVE_CHUNK: LazyLock<Bytes> = LazyLock::new(|| frame(KEEPALIVE));

impl Socket for TcpStream {
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        TcpStream::try_write(self, bytes)
    }
}

/// A change's event as one chunk: what the watch group writes to every
/// attached socket (encoded once per change).
fn framed_change(change: Change, snapshot: &Snapshot) -> Bytes {
    frame(&change_event(change, snapshot))
}

/// `bytes` as one chunk of a chunked body.
fn frame(bytes: &[u8]) -> Bytes {
    let mut size = [0u8; 20];
    let size = chunk_size(bytes.len(), &mut size);
    let mut out = Vec::with_capacity(size.len() + bytes.len() + 2);
    out.extend_from_slice(size);
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

/// Whether a readable socket says its client went: end of stream or an
/// error. Anything it sent (it should send nothing) is read and dropped.
fn gone(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match stream.try_read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    }
}

/// A chunk's size line, `<hex>\r\n`, written into `buf`.
fn chunk_size(len: usize, buf: &mut [u8; 20]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut at = buf.len() - 2;
    buf[at..].copy_from_slice(b"\r\n");
    let mut n = len;
    loop {
        at -= 1;
        buf[at] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// Writes all of `parts` (at most 3) in order, vectored; fails when a
/// write makes no progress for `limit`.
pub(super) async fn write(stream: &TcpStream, parts: &[&[u8]], limit: Duration) -> io::Result<()> {
    let mut rest: [&[u8]; 3] = [&[], &[], &[]];
    for (slot, part) in rest.iter_mut().zip(parts) {
        *slot = part;
    }
    loop {
        if rest.iter().all(|p| p.is_empty()) {
            return Ok(());
        }
        let slices = [
            IoSlice::new(rest[0]),
            IoSlice::new(rest[1]),
            IoSlice::new(rest[2]),
        ];
        let mut n = match stream.try_write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::timeout(limit, stream.writable())
                    .await
                    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
                continue;
            }
            Err(e) => return Err(e),
        };
        for part in &mut rest {
            let k = n.min(part.len());
            *part = &part[k..];
            n -= k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_hex_lines() {
        let mut buf = [0u8; 20];
        assert_eq!(chunk_size(0, &mut buf), b"0\r\n");
        assert_eq!(chunk_size(255, &mut buf), b"ff\r\n");
        assert_eq!(chunk_size(4096, &mut buf), b"1000\r\n");
    }

    #[test]
    fn only_complete_bodiless_event_stream_gets_are_taken() {
        let ok = b"GET /leases/p/v1.d/events?maxEvents=2 HTTP/1.1\r\nhost: x\r\nlast-event-id: 3.1\r\n\r\n";
        let (request, len) = parse(ok).expect("taken");
        assert_eq!(len, ok.len());
        assert_eq!(request.uri().query(), Some("maxEvents=2"));
        assert_eq!(request.headers()["last-event-id"], "3.1");
        for other in [
            &b"GET /leases/p/v1.d/events HTTP/1.1\r\nhost: x\r\n"[..],
            b"GET /leases/p/v1.d/events HTTP/1.0\r\n\r\n",
            b"HEAD /leases/p/v1.d/events HTTP/1.1\r\n\r\n",
            b"GET /leases/p/v1.d HTTP/1.1\r\n\r\n",
            b"GET /leases/p/events HTTP/1.1\r\n\r\n",
            b"GET /leases/p/v1.d/events/x HTTP/1.1\r\n\r\n",
            b"GET /leases/p/v1.d/events HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc",
            b"GET /leases/p/v1.d/events HTTP/1.1\r\nupgrade: websocket\r\n\r\n",
            b"GET /leases/p/v1.d/events HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
        ] {
            assert!(parse(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
}
