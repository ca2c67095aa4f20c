//! The lean HTTP/1.1 keep-alive client of the load generator, and the
//! identity and paths of the leases it asks for.
//!
//! One connection per worker, requests written as bytes and answers parsed
//! with httparse, as wrk does. hyper's client cost about 0.23 CPU-s per
//! 10 000 requests here (2.5 times the Redis client's); on 2 shared cores
//! every CPU-second the load generator spends is taken from the service it
//! measures.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use http::Method;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::consts::{PURPOSE, REQUEST_TIMEOUT};

/// Largest answer the benchmark accepts (a `/metrics` scrape included).
const MAX_ANSWER: usize = 4 << 20;

pub(crate) struct Http {
    stream: TcpStream,
    host: String,
    out: Vec<u8>,
    buf: BytesMut,
}

impl Http {
    pub(crate) async fn connect(addr: SocketAddr) -> Result<Self, String> {
        let stream = timeout(REQUEST_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect: {}", e.kind()))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self {
            stream,
            host: addr.to_string(),
            out: Vec::with_capacity(512),
            buf: BytesMut::with_capacity(4096),
        })
    }

    /// One request; `(status, body)` or a socket-level error.
    pub(crate) async fn call(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Bytes>,
    ) -> Result<(u16, Bytes), String> {
        self.call_within(REQUEST_TIMEOUT, method, path, headers, body)
            .await
    }

    /// [`Http::call`] with its own time limit instead of `REQUEST_TIMEOUT`
    /// (etcd answers a put slowly while it sends the last one to 10 000 watches).
    pub(crate) async fn call_within(
        &mut self,
        within: Duration,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Bytes>,
    ) -> Result<(u16, Bytes), String> {
        self.out.clear();
        let out = &mut self.out;
        for part in [
            method.as_str(),
            " ",
            path,
            " HTTP/1.1\r\nhost: ",
            &self.host,
            "\r\n",
        ] {
            out.extend_from_slice(part.as_bytes());
        }
        for (k, v) in headers {
            for part in [*k, ": ", *v, "\r\n"] {
                out.extend_from_slice(part.as_bytes());
            }
        }
        if let Some(body) = body {
            let _ = write!(
                Lossless(out),
                "content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            out.extend_from_slice(body);
        } else {
            out.extend_from_slice(b"\r\n");
        }
        timeout(within, self.exchange())
            .await
            .map_err(|_| format!("no reply within {} s", within.as_secs_f64()))?
    }

    async fn exchange(&mut self) -> Result<(u16, Bytes), String> {
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| format!("send: {}", e.kind()))?;
        loop {
            if let Some((status, head, len)) = parse_head(&self.buf)? {
                while self.buf.len() < head + len {
                    self.read_more().await?;
                }
                self.buf.advance(head);
                return Ok((status, self.buf.split_to(len).freeze()));
            }
            self.read_more().await?;
        }
    }

    async fn read_more(&mut self) -> Result<(), String> {
        if self.buf.len() > MAX_ANSWER {
            return Err(format!("answer larger than {MAX_ANSWER} bytes"));
        }
        self.buf.reserve(4096);
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Err("connection closed by the server".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("receive: {}", e.kind())),
        }
    }
}

/// `(status, header length, body length)` once the header block is complete.
/// Answers must carry `content-length` (the service always sends it).
fn parse_head(buf: &[u8]) -> Result<Option<(u16, usize, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut res = httparse::Response::new(&mut headers);
    let head = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("bad answer: {e}")),
    };
    let status = res.code.ok_or("answer without a status")?;
    let len = res
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
        .ok_or("answer without content-length")?;
    Ok(Some((status, head, len)))
}

/// `fmt::Write` into a byte vector.
struct Lossless<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Lossless<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// One client's identity: an attempt (owner token + a counter for operation ids).
pub(crate) struct Client {
    pub(crate) token: String,
    op: u64,
    id: usize,
}

impl Client {
    pub(crate) fn new(id: usize) -> Result<Self, String> {
        use base64::Engine as _;
        let mut bytes = [0u8; 24];
        getrandom::fill(&mut bytes).map_err(|e| format!("getrandom: {e}"))?;
        Ok(Self {
            token: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
            op: 0,
            id,
        })
    }

    pub(crate) fn next_op(&mut self) -> String {
        self.op += 1;
        format!("w{}-{}", self.id, self.op)
    }
}

pub(crate) fn digest(salt: u32, worker: usize, n: u64) -> String {
    format!("v1.{salt:08x}{:08x}{n:048x}", worker as u32)
}

pub(crate) fn lease_path(digest: &str) -> String {
    format!("/leases/{PURPOSE}/{digest}")
}

pub(crate) fn body_json(ttl_ms: u64, wait_ms: u64) -> Bytes {
    Bytes::from(if wait_ms == 0 {
        format!("{{\"ttlMs\":{ttl_ms}}}")
    } else {
        format!("{{\"ttlMs\":{ttl_ms},\"waitMs\":{wait_ms}}}")
    })
}
