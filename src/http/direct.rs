//! Event streams outside hyper (issue 25, docs/perf-log/2026-12-04.md
//! "Watchers outside hyper"). An idle watcher served by hyper costs about 22 KiB:
//! the connection's 8 KiB read and write buffers and its task, kept for
//! the stream's whole life. When the front door ([`super::lanes`]) puts a
//! plain connection's request in the events lane
//! (`GET /leases/{purpose}/{digest}/events`), [`super::keep_alive`] runs
//! the same service stack on it (so authentication, limits, metrics and
//! the handler are the same); an answer that is not an opened stream (a
//! refusal) it writes itself, as any other. An opened stream comes here
//! with the socket: its head and first event are written from a small
//! task of its own ([`run`]): the socket, the stream's state, no buffers.
//! The socket is then attached to its watcher, and the watch group writes
//! each change to it itself ([`crate::notify::Sink`]).
//!
//! Such a connection carries no request after the stream: its head says
//! `connection: close` (hyper would keep the connection once the stream
//! ends; the one difference the differential suite allows, announced to
//! the client).

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use axum::response::Response;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use super::watch_stream::{change_event, until, Stream, StreamParts, KEEPALIVE};
use crate::domain::Change;
use crate::notify::{Flush, Snapshot, Socket};

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
pub async fn run<K>(stream: TcpStream, events: Stream, head: Vec<u8>, limit: Duration, keep: K) {
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
pub(super) fn frame(bytes: &[u8]) -> Bytes {
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
pub(super) fn gone(stream: &TcpStream) -> bool {
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
}
