//! The lease verbs outside hyper (issue 25, docs/perf-log/2026-12-05.md
//! "the lease verbs outside hyper"): a plain connection's requests are read
//! here as long as each is a complete, plain HTTP/1.1 request of a lease
//! verb (`PUT`, `PATCH`, `DELETE` or `GET` of `/leases/{purpose}/{digest}`,
//! its body, if any, all there with a `content-length`). Each goes through
//! the same service stack as under hyper (the front: request ids,
//! timeouts, metrics, the handlers), and its answer is written with a
//! `content-length`, on the kept-alive connection.
//!
//! The first request that is anything else (another route, a chunked or
//! `Expect`ing body, a body not all there with its head, `Connection` or
//! `Upgrade` headers, HTTP/1.0, a head that does not parse or is too
//! large) hands the connection to hyper, with
//! every byte read so far, for the rest of its life: hyper answers it as
//! it would have from the start.
//!
//! What hyper did for these requests is done here too: a head must come
//! within the idle timeout (the connection's timer, [`ConnTimer`]); a
//! caller that closes its connection while its request is being served
//! drops the request's future (docs/design.md §14, a caller that leaves);
//! at shutdown an idle connection is closed, one with a request in flight
//! is answered first; a write that makes no progress for the idle timeout
//! closes the connection.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{Method, Uri, Version};
use axum::response::Response;
use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::Service;

use super::conn_timer::{ConnTimer, Slot};
use super::direct::{response_head, write};

/// Most bytes of one request (head and body) served here; a larger one
/// goes to hyper.
const MAX_REQUEST: usize = 64 * 1024;

/// Most header lines of a request served here.
const MAX_HEADERS: usize = 32;

/// How a connection served here ended.
pub enum Ended<S> {
    /// Closed (the peer went, a timeout, shutdown, an error).
    Closed,
    /// A request this loop does not serve: hyper takes the connection,
    /// reading `S` (the bytes read so far first).
    Hyper(S),
}

/// Serves `stream`'s lease-verb requests with `service` (the front for
/// this connection, which uses `timer` too) until the connection ends or
/// a request needs hyper.
pub async fn serve<S>(
    stream: TcpStream,
    mut service: S,
    timer: &ConnTimer,
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
    loop {
        // A complete request, or the reason there is none.
        // From the system's clock, as hyper's own header timer did (tokio's
        // clock costs more where a test may pause it).
        let head_by = tokio::time::Instant::from_std(std::time::Instant::now() + idle);
        let mut head_timer = timer.sleep_until(Slot::Head, head_by);
        let head = loop {
            if !buf.is_empty() {
                match parse(&buf, &mut lines) {
                    Parsed::Request(head) => break head,
                    Parsed::Partial => {}
                    Parsed::Other => return Ended::Hyper(Prefixed::new(buf.freeze(), stream)),
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
                    if !read_some(&stream, &mut buf, readable) {
                        return Ended::Closed;
                    }
                }
            }
        };
        drop(head_timer);
        let bytes = buf.split_to(head.len).freeze();
        let Some(request) = head.request(&bytes, &mut lines) else {
            // A value or target hyper would refuse too: let it answer.
            let mut all = BytesMut::from(&bytes[..]);
            all.extend_from_slice(&buf);
            return Ended::Hyper(Prefixed::new(all.freeze(), stream));
        };
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
                    answered = &mut answer => match answered {
                        Ok(response) => break response,
                        Err(never) => match never {},
                    },
                    // The caller may leave while its request is served:
                    // its end of the connection drops the request.
                    readable = stream.readable(), if buf.len() < MAX_REQUEST => {
                        if !read_some(&stream, &mut buf, readable) {
                            return Ended::Closed;
                        }
                    }
                }
            }
        };
        let close = response.headers().contains_key(CONNECTION) || stop.is_cancelled();
        let (parts, body) = response.into_parts();
        let Some(body) = whole(body).await else {
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
    }
}

/// After the socket said it is `readable`: reads what it holds onto
/// `buf`; false when the connection ended (the peer closed, an error).
fn read_some(stream: &TcpStream, buf: &mut BytesMut, readable: io::Result<()>) -> bool {
    if readable.is_err() {
        return false;
    }
    match stream.try_read_buf(buf) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    }
}

/// What the buffer's first bytes are.
enum Parsed {
    /// A complete lease-verb request.
    Request(Head),
    /// Not all there yet.
    Partial,
    /// Anything else: hyper's.
    Other,
}

/// A request read from the buffer: where its parts are in it.
struct Head {
    method: Method,
    target: (usize, usize),
    head_len: usize,
    len: usize,
}

impl Head {
    /// The request, from `bytes` (this request's `len` bytes, taken out
    /// of the buffer): the target, header values and body are slices of
    /// them, not copies.
    fn request(
        self,
        bytes: &Bytes,
        lines: &mut Vec<(HeaderName, (usize, usize))>,
    ) -> Option<Request> {
        let slice = |(from, to): (usize, usize)| bytes.slice(from..to);
        let uri = Uri::from_maybe_shared(slice(self.target)).ok()?;
        let mut map = axum::http::HeaderMap::with_capacity(lines.len());
        for (name, value) in lines.drain(..) {
            map.append(name, HeaderValue::from_maybe_shared(slice(value)).ok()?);
        }
        let body = if self.len == self.head_len {
            Body::empty()
        } else {
            Body::from(bytes.slice(self.head_len..self.len))
        };
        let mut request = Request::new(body);
        *request.method_mut() = self.method;
        *request.version_mut() = Version::HTTP_11;
        *request.uri_mut() = uri;
        *request.headers_mut() = map;
        Some(request)
    }
}

/// Reads a request served here from the start of `buf`.
/// Its header lines are left in `lines` (names, and where their values are).
fn parse(buf: &[u8], lines: &mut Vec<(HeaderName, (usize, usize))>) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let head_len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST => return Parsed::Partial,
        _ => return Parsed::Other,
    };
    let method = match head.method {
        Some("PUT") => Method::PUT,
        Some("PATCH") => Method::PATCH,
        Some("DELETE") => Method::DELETE,
        Some("GET") => Method::GET,
        _ => return Parsed::Other,
    };
    let Some(target) = head.path else {
        return Parsed::Other;
    };
    let path = memchr::memchr(b'?', target.as_bytes()).map_or(target, |end| &target[..end]);
    if head.version != Some(1)
        || super::route_label(path, false) != super::leases::ROUTE
        || memchr::memchr(b'%', path.as_bytes()).is_some()
        || (method != Method::GET && target.len() != path.len())
    {
        return Parsed::Other;
    }
    // Where a slice of `buf` lies in it.
    let base = buf.as_ptr() as usize;
    let at = |part: &[u8]| {
        let from = part.as_ptr() as usize - base;
        (from, from + part.len())
    };
    let mut content_length: Option<usize> = None;
    lines.clear();
    for line in head.headers.iter() {
        let Some(name) = header_name(line.name) else {
            return Parsed::Other;
        };
        if name == TRANSFER_ENCODING || name == EXPECT || name == UPGRADE || name == CONNECTION {
            return Parsed::Other;
        }
        if name == CONTENT_LENGTH {
            let length = std::str::from_utf8(line.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok());
            match (content_length, length) {
                (None, Some(length)) => content_length = Some(length),
                _ => return Parsed::Other,
            }
        }
        lines.push((name, at(line.value)));
    }
    let Some(len) = head_len
        .checked_add(content_length.unwrap_or(0))
        .filter(|&l| l <= MAX_REQUEST)
    else {
        return Parsed::Other;
    };
    if buf.len() < len {
        // A body still coming: hyper reads it, under the request's own
        // deadline (a body slower than the request timeout is a 408).
        return Parsed::Other;
    }
    Parsed::Request(Head {
        method,
        target: at(target.as_bytes()),
        head_len,
        len,
    })
}

/// A header line's name: the attempt headers as the constants they are
/// (`HeaderName::from_bytes` copies a name it does not know into a new
/// allocation, twice per lease request), any other parsed.
fn header_name(name: &str) -> Option<HeaderName> {
    use super::extract::{
        OPERATION_ID_HEADER, OPERATION_ID_NAME, OWNER_TOKEN_HEADER, OWNER_TOKEN_NAME,
    };
    if name.eq_ignore_ascii_case(OWNER_TOKEN_HEADER) {
        Some(OWNER_TOKEN_NAME)
    } else if name.eq_ignore_ascii_case(OPERATION_ID_HEADER) {
        Some(OPERATION_ID_NAME)
    } else {
        HeaderName::from_bytes(name.as_bytes()).ok()
    }
}

/// A body's bytes: the one frame of a full body as it is, more frames
/// joined. `None` when the body fails.
async fn whole(mut body: Body) -> Option<Bytes> {
    use http_body_util::BodyExt as _;
    let mut first: Option<Bytes> = None;
    let mut more: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        match (&mut first, &mut more) {
            (None, _) => first = Some(data),
            (Some(head), None) => {
                let mut joined = BytesMut::from(&head[..]);
                joined.extend_from_slice(&data);
                more = Some(joined);
            }
            (Some(_), Some(joined)) => joined.extend_from_slice(&data),
        }
    }
    Some(match more {
        Some(joined) => joined.freeze(),
        None => first.unwrap_or_default(),
    })
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

    fn parsed(bytes: &[u8]) -> Parsed {
        parse(bytes, &mut Vec::new())
    }

    #[test]
    fn complete_lease_verbs_are_served_here() {
        let put = b"PUT /leases/p/v1.d HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{\"ttlMs\":1000}GET /next";
        let mut lines = Vec::new();
        let Parsed::Request(head) = parse(put, &mut lines) else {
            panic!("not served here");
        };
        let len = head.len;
        assert_eq!(len, put.len() - b"GET /next".len());
        let bytes = Bytes::copy_from_slice(&put[..len]);
        let request = head.request(&bytes, &mut lines).expect("a request");
        assert_eq!(request.method(), Method::PUT);
        assert_eq!(request.uri().path(), "/leases/p/v1.d");
        assert_eq!(request.headers()["content-type"], "application/json");
        assert_eq!(request.headers()["content-length"], "14");
        let attempt = b"DELETE /leases/p/v1.d HTTP/1.1\r\nLease-Owner-Token: t\r\nlease-operation-id: o\r\n\r\n";
        let Parsed::Request(head) = parse(attempt, &mut lines) else {
            panic!("not served here");
        };
        let bytes = Bytes::copy_from_slice(attempt);
        let request = head.request(&bytes, &mut lines).expect("a request");
        assert_eq!(request.headers()["lease-owner-token"], "t");
        assert_eq!(request.headers()["lease-operation-id"], "o");
        let inspect = b"GET /leases/p/v1.d?x=1 HTTP/1.1\r\nhost: x\r\n\r\n";
        assert!(matches!(parsed(inspect), Parsed::Request(..)));
        let release = b"DELETE /leases/p/v1.d HTTP/1.1\r\n\r\n";
        assert!(matches!(parsed(release), Parsed::Request(..)));
    }

    #[test]
    fn incomplete_heads_wait_for_more() {
        for partial in [
            &b"PUT /leases/p/v1.d HTTP/1.1\r\nhost: x\r\n"[..],
            b"PUT /leases/p/v1.d HT",
        ] {
            assert!(
                matches!(parsed(partial), Parsed::Partial),
                "{}",
                String::from_utf8_lossy(partial)
            );
        }
    }

    #[test]
    fn anything_else_is_hypers() {
        for other in [
            &b"PUT /leases/p/v1.d HTTP/1.0\r\n\r\n"[..],
            b"HEAD /leases/p/v1.d HTTP/1.1\r\n\r\n",
            b"POST /attempts HTTP/1.1\r\n\r\n",
            b"GET /leases/p/v1.d/events HTTP/1.1\r\n\r\n",
            b"GET /leases/p HTTP/1.1\r\n\r\n",
            b"PUT /leases/p/v1%2Ed HTTP/1.1\r\n\r\n",
            b"PUT /leases/p/v1.d?x=1 HTTP/1.1\r\n\r\n",
            b"PUT /leases/p/v1.d HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            b"PUT /leases/p/v1.d HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
            b"PUT /leases/p/v1.d HTTP/1.1\r\nconnection: close\r\n\r\n",
            b"GET /leases/p/v1.d HTTP/1.1\r\nupgrade: websocket\r\n\r\n",
            b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}",
            b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: +2\r\n\r\n{}",
            b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: 99999999\r\n\r\n",
            b"PUT http://x/leases/p/v1.d HTTP/1.1\r\n\r\n",
            b"NOT HTTP\r\n\r\n",
            b"PUT /leases/p/v1.d HTTP/1.1\r\ncontent-length: 14\r\n\r\n{\"ttlMs\"",
        ] {
            assert!(
                matches!(parsed(other), Parsed::Other),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

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
