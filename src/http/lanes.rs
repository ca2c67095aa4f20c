//! The front door (issue 39): the one head parser ([`read_head`]) and the
//! one classifier of a request target ([`classify`]) that decide which
//! path serves a request. The accept loop's plain connections
//! ([`super::keep_alive`]) and the front ([`super::Front`]) both ask here;
//! nothing else decides.
//!
//! | lane | requests | served by |
//! | --- | --- | --- |
//! | [`Lane::Events`] | `GET /leases/{purpose}/{digest}/events` and `GET /sessions/{id}/keepalive` (a query allowed) | on a plain connection: [`super::direct`] (or [`super::keepalive::run_direct`]) writes the stream from a small task of its own, then closes the connection (`connection: close`); under hyper: the router |
//! | [`Lane::Verb`] | `PUT`, `PATCH`, `DELETE` of `/leases/{purpose}/{digest}`, `GET` of it (a query allowed) | on a plain connection: [`super::keep_alive`] reads it and writes its answer; in the front: `leases::serve`, the handlers without the router |
//! | [`Lane::Hyper`] | anything else | hyper and the router, with every byte read so far |
//!
//! A request stays off hyper only when the hand-written path answers it as
//! hyper does (`tests/it/http_diff.rs` compares the two, byte for byte
//! where it can). So these go to hyper, whatever their route: a target that
//! is not origin form (absolute form, `*`), one with a `#` (the `Uri`
//! hyper builds drops the fragment: routed here on the raw target, the
//! request served would not be the one classified, issue 39 item 1), a
//! `%` (the router percent-decodes), a `.` or `..` segment, a query on a
//! mutating verb; any version but HTTP/1.1; `Transfer-Encoding`,
//! `Expect`, `Upgrade` or `Connection` headers; a `Content-Length` that is
//! not one run of digits, or given twice; a body not all read with its
//! head; a head (and body) over [`MAX_REQUEST`] bytes or with more than
//! [`MAX_HEADERS`] lines; a head that does not parse (hyper answers it,
//! with hyper's words).
//!
//! `LEASEHOLD_HTTP_FAST_PATHS=false` puts every request in
//! [`Lane::Hyper`]: one HTTP implementation (hyper's) and the router for
//! everything.
//!
//! A body collected here to write with a `content-length`
//! ([`collect`]) is bounded ([`MAX_ANSWER`]), and abandoned, closing the
//! connection, when the client leaves or the body is not whole one idle
//! timeout after it first had to be waited for (one deadline for the
//! whole body, not one per frame): a stream (which never ends) can never
//! wedge a connection here.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{Method, Uri, Version};
use bytes::BytesMut;
use hyper::body::Body as _;
use tokio::net::TcpStream;

use super::verb::Verb;
use super::{attempts, console, docs, health, history, instances, leases, list, openapi, waiters};
use super::{keepalive, operator, problem, problems, purpose_watch, sessions, watch};

/// Most bytes of one request (head and body) read outside hyper; a larger
/// one goes to hyper.
pub const MAX_REQUEST: usize = 64 * 1024;

/// Most header lines of a request read outside hyper (more: hyper's).
pub const MAX_HEADERS: usize = 48;

/// Largest answer body written outside hyper: the lease answers and
/// problem+json bodies are a few hundred bytes.
pub const MAX_ANSWER: usize = 64 * 1024;

/// Which path serves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A lease's event stream.
    Events,
    /// A lease verb.
    Verb(Verb),
    /// hyper and the router.
    Hyper,
}

/// The lane of `method` and `target` (the request target as on the wire,
/// or the front's path and query). See the module's table.
pub fn classify(method: &str, target: &str) -> Lane {
    let bytes = target.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Lane::Hyper;
    }
    // One search for the three bytes that matter: a `#` or `%` anywhere
    // sends the request to hyper, a `?` starts the query.
    let (path, has_query) = match memchr::memchr3(b'#', b'%', b'?', bytes) {
        None => (target, false),
        Some(at) if bytes[at] == b'?' => {
            if memchr::memchr2(b'#', b'%', &bytes[at + 1..]).is_some() {
                return Lane::Hyper;
            }
            (&target[..at], true)
        }
        Some(_) => return Lane::Hyper,
    };
    if has_dot_segment(path) {
        return Lane::Hyper;
    }
    match route_label(path, false) {
        route if route == leases::ROUTE => match Verb::of_token(method) {
            Some(verb) if verb.takes_query() || !has_query => Lane::Verb(verb),
            _ => Lane::Hyper,
        },
        route if (route == watch::ROUTE || route == keepalive::ROUTE) && method == "GET" => {
            Lane::Events
        }
        _ => Lane::Hyper,
    }
}

/// Whether a segment of `path` is `.` or `..`: only a `.` right after a
/// `/` can start one, and a lease path has one `.`, inside its digest.
fn has_dot_segment(path: &str) -> bool {
    let bytes = path.as_bytes();
    memchr::memchr_iter(b'.', bytes).any(|at| {
        let rest = &bytes[at + 1..];
        let rest = rest.strip_prefix(b".").unwrap_or(rest);
        at > 0 && bytes[at - 1] == b'/' && (rest.is_empty() || rest[0] == b'/')
    })
}

/// The route template `path` is served by, or `unmatched`: the router's own
/// matching, restated for the front (which runs before routing;
/// tests/it/metrics.rs holds the two together). Percent-decoding never adds
/// or removes a `/`, so counting segments on the raw path is what the router
/// does. The labels are the modules' route templates.
pub fn route_label(path: &str, serves_metrics: bool) -> &'static str {
    if let Some(rest) = path.strip_prefix("/leases/") {
        // The segments' ends, by a vectorised search for `/` (a lease
        // verb's path is mostly its 67-character digest; `str::split` cost
        // about 250 instructions a segment here).
        let mut slashes = memchr::memchr_iter(b'/', rest.as_bytes());
        let (first, second) = (slashes.next(), slashes.next());
        if slashes.next().is_some() {
            return "unmatched";
        }
        return match (first, second) {
            // As the router (matchit) does: an empty purpose matches (the
            // handler answers 400), an empty last segment does not.
            // A static segment wins over a parameter, as in the router.
            (None, _) if !rest.is_empty() => list::ROUTE,
            (Some(end), None) => match &rest[end + 1..] {
                "events" => purpose_watch::ROUTE,
                "" => "unmatched",
                _digest => leases::ROUTE,
            },
            (Some(_), Some(end)) => match &rest[end + 1..] {
                "events" => watch::ROUTE,
                "history" => history::ROUTE,
                "waiters" => waiters::ROUTE,
                "break" => operator::ROUTE,
                _ => "unmatched",
            },
            (None, _) => "unmatched",
        };
    }
    if let Some(rest) = path.strip_prefix("/sessions/") {
        let segments = rest.split('/').collect::<Vec<_>>();
        return match segments.as_slice() {
            [id] if !id.is_empty() => sessions::ONE,
            [id, "keepalive"] if !id.is_empty() => keepalive::ROUTE,
            [id, "leases", p, d] if !id.is_empty() && !d.is_empty() => {
                let _ = p;
                sessions::LEASE
            }
            _ => "unmatched",
        };
    }
    if let Some(rest) = path.strip_prefix(problem::PREFIX) {
        return if !rest.is_empty() && !rest.contains('/') {
            problems::ROUTE
        } else {
            "unmatched"
        };
    }
    // The routes without parameters: matched as they are.
    [
        attempts::ROUTE,
        health::LIVEZ,
        health::READYZ,
        instances::ROUTE,
        sessions::ROUTE,
        openapi::ROUTE,
        docs::ROUTE,
    ]
    .into_iter()
    .chain(console::ROUTES)
    .chain(serves_metrics.then_some(health::METRICS))
    .find(|route| *route == path)
    .unwrap_or("unmatched")
}

/// What a buffer's first bytes are, read by [`read_head`].
pub enum Read {
    /// A complete request of a hand-written lane.
    Request(Head),
    /// Not all there yet.
    Partial,
    /// Anything else: hyper's.
    Hyper,
}

/// A request read from a buffer: its lane and where its parts are.
pub struct Head {
    /// [`Lane::Events`] or [`Lane::Verb`].
    pub lane: Lane,
    method: Method,
    target: (usize, usize),
    head_len: usize,
    /// Head and body.
    pub len: usize,
}

/// Reads a request of a hand-written lane from the start of `buf`: the one
/// head parser outside hyper (httparse, as hyper's own). Its header lines
/// are left in `lines` (names, and where their values are).
pub fn read_head(buf: &[u8], lines: &mut Vec<(HeaderName, (usize, usize))>) -> Read {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let head_len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST => return Read::Partial,
        _ => return Read::Hyper,
    };
    let (Some(method), Some(target), Some(1)) = (head.method, head.path, head.version) else {
        return Read::Hyper;
    };
    let lane = classify(method, target);
    let method = match lane {
        Lane::Verb(verb) => verb.method(),
        Lane::Events => Method::GET,
        Lane::Hyper => return Read::Hyper,
    };
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
            return Read::Hyper;
        };
        if name == TRANSFER_ENCODING || name == EXPECT || name == UPGRADE || name == CONNECTION {
            return Read::Hyper;
        }
        if name == CONTENT_LENGTH {
            let length = std::str::from_utf8(line.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok());
            match (content_length, length) {
                (None, Some(length)) => content_length = Some(length),
                _ => return Read::Hyper,
            }
        }
        lines.push((name, at(line.value)));
    }
    let body = content_length.unwrap_or(0);
    if lane == Lane::Events && body != 0 {
        return Read::Hyper;
    }
    let Some(len) = head_len.checked_add(body).filter(|&l| l <= MAX_REQUEST) else {
        return Read::Hyper;
    };
    if buf.len() < len {
        // A body still coming: hyper reads it, under the request's own
        // deadline (a body slower than the request timeout is a 408).
        return Read::Hyper;
    }
    Read::Request(Head {
        lane,
        method,
        target: at(target.as_bytes()),
        head_len,
        len,
    })
}

impl Head {
    /// The request, from `bytes` (this request's `len` bytes, taken out
    /// of the buffer): the target, header values and body are slices of
    /// them, not copies. `None` for a target or value the `http` types
    /// refuse (hyper answers those).
    pub fn request(
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

/// An answer's body, whole, to write with a `content-length`: the one
/// frame of a full body as it is, more frames joined. `None`, and the
/// connection is to be closed, when the body fails, grows past
/// [`MAX_ANSWER`], is not whole within `idle`, or the client leaves
/// meanwhile (its end of the connection read as EOF or an error). What
/// the client sends meanwhile (a pipelined request) is read onto `spill`;
/// as hyper does, the socket is watched only while `spill` is empty (a
/// half-closed connection's pipelined requests are still answered).
pub async fn collect(
    mut body: Body,
    stream: &TcpStream,
    spill: &mut BytesMut,
    idle: Duration,
) -> Option<Bytes> {
    let mut first: Option<Bytes> = None;
    let mut more: Option<BytesMut> = None;
    let mut stalled: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        // The body first: a full body is ready at once, and no timer is
        // set for it.
        let frame = std::future::poll_fn(|cx| {
            if let Poll::Ready(frame) = Pin::new(&mut body).poll_frame(cx) {
                return Poll::Ready(Some(frame));
            }
            if spill.is_empty() {
                if let Poll::Ready(ready) = stream.poll_read_ready(cx) {
                    if ready.is_err() || !read_pipelined(stream, spill) {
                        return Poll::Ready(None);
                    }
                    // Read what was there; wait again (the waker is set
                    // by the next poll).
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
            let sleep = stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
            match sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await?;
        let Some(frame) = frame else { break };
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        let collected = first.as_ref().map_or(0, Bytes::len)
            + more.as_ref().map_or(0, BytesMut::len)
            + data.len();
        if collected > MAX_ANSWER {
            return None;
        }
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

/// After the socket said it is readable: reads what it holds onto `buf`;
/// false when the connection ended (the peer closed, an error).
pub fn read_pipelined(stream: &TcpStream, buf: &mut BytesMut) -> bool {
    match stream.try_read_buf(buf) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    }
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;
