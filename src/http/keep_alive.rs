//! The hand-written paths of a plain connection (issue 25,
//! docs/perf-log/2026-12-05.md "the lease verbs outside hyper"): a plain
//! connection's requests are read here while each is a complete, plain
//! HTTP/1.1 request of a hand-written lane ([`super::lanes`], the front
//! door, which parses the head and classifies the target). Each goes
//! through the same service stack as under hyper (the front: request ids,
//! timeouts, metrics, the handlers), and its answer is written with a
//! `content-length`, on the kept-alive connection; a lease's event stream,
//! once opened, is handed to [`super::direct`] with the socket, and the
//! connection carries nothing after it.
//!
//! The first request of any other lane hands the connection to hyper,
//! with every byte read so far, for the rest of its life: hyper answers it
//! as it would have from the start.
//!
//! What hyper did for these requests is done here too: one head deadline
//! per head, the connection's first counted from its accept, and carried
//! over to hyper when hyper takes the connection mid-head (the
//! connection's timer, [`ConnTimer::carry_head`]); a caller that closes its
//! connection while its request is being served, or while its answer's body
//! is collected, drops the request's future (docs/design.md §14, a caller
//! that leaves); at shutdown an idle connection is closed, one with a
//! request in flight is answered first; a write that makes no progress for
//! the idle timeout closes the connection.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::header::CONNECTION;
use axum::response::Response;
use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::Service;

use super::conn_timer::{ConnTimer, Slot};
use super::direct::{response_head, write};
use super::lanes::{collect, read_head, read_pipelined, Lane, Read, MAX_HEADERS};
use super::watch_stream::{DirectSlot, Opened};

/// How a connection served here ended.
pub enum Ended<S> {
    /// Closed (the peer went, a timeout, shutdown, an error).
    Closed,
    /// A request this loop does not serve: hyper takes the connection,
    /// reading `S` (the bytes read so far first).
    Hyper(S),
    /// An event stream, opened (a lease's or a session's keep-alive):
    /// [`super::direct::run`] or [`super::keepalive::run_direct`] writes
    /// `Vec<u8>` (the answer's head) and the stream, then ends the
    /// connection (what was pipelined after it is dropped).
    Events(TcpStream, Opened, Vec<u8>),
}

/// Serves `stream`'s requests of a hand-written lane with `service` (the
/// front for this connection, which uses `timer` too) until the connection
/// ends, or a request needs hyper or is an event stream. The first head
/// must be whole by `first_head_by` (the accept plus the idle timeout),
/// each later one within `idle` of the answer before it.
pub async fn serve<S>(
    stream: TcpStream,
    mut service: S,
    timer: &ConnTimer,
    first_head_by: Instant,
    idle: Duration,
    stop: &CancellationToken,
) -> Ended<Prefixed<TcpStream>>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let mut buf = BytesMut::with_capacity(4096);
    // The answers' heads, written here one after the other, and the
    // header lines of the request being read: kept from one request to
    // the next.
    let mut out = Vec::with_capacity(512);
    let mut lines = Vec::with_capacity(MAX_HEADERS);
    // Registered once: a new wait on the token per request costs its lock.
    let mut stopped = std::pin::pin!(stop.cancelled());
    let mut head_by = first_head_by;
    loop {
        // A complete request, or the reason there is none.
        let mut head_timer = timer.sleep_until(Slot::Head, head_by);
        let head = loop {
            if !buf.is_empty() {
                match read_head(&buf, &mut lines) {
                    Read::Request(head) => break head,
                    Read::Partial => {}
                    Read::Hyper => {
                        // hyper reads this head by the same deadline.
                        drop(head_timer);
                        timer.carry_head(head_by);
                        return Ended::Hyper(Prefixed::new(buf.freeze(), stream));
                    }
                }
            }
            // Shutting down: nothing is in flight on this connection.
            if stop.is_cancelled() {
                return Ended::Closed;
            }
            tokio::select! {
                biased;
                () = &mut stopped => return Ended::Closed,
                () = &mut head_timer => return Ended::Closed,
                readable = stream.readable() => {
                    if readable.is_err() || !read_pipelined(&stream, &mut buf) {
                        return Ended::Closed;
                    }
                }
            }
        };
        drop(head_timer);
        let lane = head.lane;
        let bytes = buf.split_to(head.len).freeze();
        let Some(mut request) = head.request(&bytes, &mut lines) else {
            // A value or target hyper would refuse too: let it answer.
            let mut all = BytesMut::from(&bytes[..]);
            all.extend_from_slice(&buf);
            timer.carry_head(head_by);
            return Ended::Hyper(Prefixed::new(all.freeze(), stream));
        };
        // An event stream the handler opens is left in the slot, for
        // `direct` to write; any other answer is written here.
        let slot = (lane == Lane::Events).then(|| {
            let slot = DirectSlot::default();
            request.extensions_mut().insert(slot.clone());
            slot
        });
        let response = {
            if std::future::poll_fn(|cx| service.poll_ready(cx))
                .await
                .is_err()
            {
                return Ended::Closed;
            }
            let mut answer = std::pin::pin!(service.call(request));
            loop {
                tokio::select! {
                    biased;
                    // The caller may leave while its request is served:
                    // its end of the connection drops the request. As
                    // hyper does: looked at first (a request whose caller
                    // has gone already is not served), and only while
                    // nothing pipelined is waiting (a half-closed
                    // connection's pipelined requests are answered).
                    readable = stream.readable(), if buf.is_empty() => {
                        if readable.is_err() || !read_pipelined(&stream, &mut buf) {
                            return Ended::Closed;
                        }
                    }
                    answered = &mut answer => match answered {
                        Ok(response) => break response,
                        Err(never) => match never {},
                    },
                }
            }
        };
        if let Some(events) = slot.and_then(|slot| slot.take()) {
            let mut head = Vec::with_capacity(256);
            response_head(&response, &mut head);
            head.extend_from_slice(b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
            return Ended::Events(stream, events, head);
        }
        let close = response.headers().contains_key(CONNECTION) || stop.is_cancelled();
        let (parts, body) = response.into_parts();
        // Bounded, and abandoned if the caller leaves meanwhile.
        let Some(body) = collect(body, &stream, &mut buf, idle).await else {
            return Ended::Closed;
        };
        out.clear();
        response_head(&Response::from_parts(parts, ()), &mut out);
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(if close {
            b"\r\nconnection: close\r\n\r\n"
        } else {
            b"\r\n\r\n"
        });
        if write(&stream, &[&out, &body], idle).await.is_err() || close {
            return Ended::Closed;
        }
        // From the system's clock, as hyper's own header timer does
        // (tokio's clock costs more where a test may pause it).
        head_by = Instant::from_std(std::time::Instant::now() + idle);
    }
}

/// A stream whose first reads return `pre` (bytes already read from it).
pub struct Prefixed<S> {
    pre: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(pre: Bytes, inner: S) -> Self {
        Self { pre, inner }
    }

    /// The stream, wrapped (the bytes read so far still come first).
    pub fn map<T>(self, f: impl FnOnce(S) -> T) -> Prefixed<T> {
        Prefixed {
            pre: self.pre,
            inner: f(self.inner),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre[..n]);
            self.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hyper_reads_the_bytes_read_so_far_first() {
        use tokio::io::AsyncReadExt as _;
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut prefixed = Prefixed::new(Bytes::from_static(b"head "), ours);
        tokio::io::AsyncWriteExt::write_all(&mut theirs, b"rest")
            .await
            .expect("write");
        drop(theirs);
        let mut all = Vec::new();
        prefixed.read_to_end(&mut all).await.expect("read");
        assert_eq!(all, b"head rest");
    }
}
