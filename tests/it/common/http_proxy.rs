//! [`HttpProxy`]: an HTTP/1.1-aware TCP proxy between a client and a
//! leasehold instance, the HTTP twin of `clients/python/tests/harness.py`'s
//! `Proxy` and `clients/typescript/test/helpers.ts`'s `startProxy`.
//!
//! Each client connection gets its own upstream connection; exchanges are
//! relayed one at a time (request head and `Content-Length` body; the
//! response with `Content-Length`, chunked, or to the close). Every request
//! is recorded ([`HttpProxy::seen`]). The fault: the reply to the next N
//! requests of a method ([`HttpProxy::drop_replies`]), or to every N-th
//! ([`HttpProxy::drop_every`]), is read from the service (so the request was
//! applied and answered) and then *not* relayed: the client's connection is
//! closed instead. Dropping the proxy closes every connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the proxy saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub owner_token: Option<String>,
    pub operation_id: Option<String>,
    /// Its reply was read from the service and not relayed.
    pub dropped: bool,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Replies still to drop, per method.
    drop_next: HashMap<String, u64>,
    /// Drop every n-th reply, per method.
    drop_every: HashMap<String, u64>,
    /// Requests so far, per method.
    count: HashMap<String, u64>,
}

/// See the module documentation.
pub struct HttpProxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept_task: tokio::task::JoinHandle<()>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HttpProxy {
    /// Listens on `127.0.0.1:0` in front of `upstream`. Needs a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> HttpProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("http proxy bind");
        let addr = listener.local_addr().expect("http proxy addr");
        let state = Arc::new(Mutex::new(State::default()));
        let accept_state = state.clone();
        let accept_task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        connections.spawn(serve(client, upstream, accept_state.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        HttpProxy {
            addr,
            state,
            accept_task,
        }
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Drop the replies to the next `n` requests of `method` (e.g. `PUT`).
    pub fn drop_replies(&self, method: &str, n: u64) {
        *lock(&self.state)
            .drop_next
            .entry(method.to_owned())
            .or_default() += n;
    }

    /// From now on, drop the reply to every `n`-th request of `method`.
    pub fn drop_every(&self, method: &str, n: u64) {
        lock(&self.state).drop_every.insert(method.to_owned(), n);
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.state).seen.clone()
    }

    /// Requests so far whose method is `method` and path starts with `prefix`.
    pub fn requests(&self, method: &str, prefix: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == method && s.path.starts_with(prefix))
            .collect()
    }

    /// Replies dropped so far.
    pub fn dropped(&self) -> usize {
        lock(&self.state).seen.iter().filter(|s| s.dropped).count()
    }
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts (and so
        // closes) every connection.
        self.accept_task.abort();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads until a head (`...\r\n\r\n`) is buffered; returns it. `None` when
/// the peer closed first.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(at) = find(buf, b"\r\n\r\n") {
            let head: Vec<u8> = buf.drain(..at + 4).collect();
            return Some(head);
        }
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads exactly `n` bytes (from `buf` first).
async fn read_exact(stream: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> Option<Vec<u8>> {
    while buf.len() < n {
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
    Some(buf.drain(..n).collect())
}

/// Reads one CRLF-terminated line (with its CRLF).
async fn read_line(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(at) = find(buf, b"\r\n") {
            return Some(buf.drain(..at + 2).collect());
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn header(head: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    text.split("\r\n").skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}

/// One client connection: relay exchanges until either side closes or a
/// reply is dropped.
async fn serve(mut client: TcpStream, upstream: SocketAddr, state: Arc<Mutex<State>>) {
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut cbuf, mut ubuf) = (Vec::new(), Vec::new());
    loop {
        let Some(head) = read_head(&mut client, &mut cbuf).await else {
            return;
        };
        let line = String::from_utf8_lossy(&head).into_owned();
        let mut parts = line.split(' ');
        let method = parts.next().unwrap_or("").to_owned();
        let path = parts.next().unwrap_or("").to_owned();
        let length: usize = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let Some(body) = read_exact(&mut client, &mut cbuf, length).await else {
            return;
        };
        let dropped = {
            let mut s = lock(&state);
            let count = {
                let c = s.count.entry(method.clone()).or_default();
                *c += 1;
                *c
            };
            let every = s.drop_every.get(&method).copied().unwrap_or(0);
            let next = s.drop_next.entry(method.clone()).or_default();
            let dropped = if *next > 0 {
                *next -= 1;
                true
            } else {
                every > 0 && count % every == 0
            };
            s.seen.push(Seen {
                method,
                path,
                owner_token: header(&head, "lease-owner-token"),
                operation_id: header(&head, "lease-operation-id"),
                dropped,
            });
            dropped
        };
        if up.write_all(&head).await.is_err() || up.write_all(&body).await.is_err() {
            return;
        }
        let relay = if dropped { None } else { Some(&mut client) };
        let keep = relay_response(&mut up, &mut ubuf, relay).await;
        if dropped || !keep {
            // The answer came and went nowhere: cut the client off.
            return;
        }
    }
}

/// Reads one response from `up`, writing it to `client` when given. False
/// when the connection must close afterwards.
async fn relay_response(
    up: &mut TcpStream,
    buf: &mut Vec<u8>,
    mut client: Option<&mut TcpStream>,
) -> bool {
    async fn send(client: &mut Option<&mut TcpStream>, data: &[u8]) -> bool {
        match client {
            Some(c) => c.write_all(data).await.is_ok(),
            None => true,
        }
    }
    let Some(head) = read_head(up, buf).await else {
        return false;
    };
    if !send(&mut client, &head).await {
        return false;
    }
    if let Some(length) = header(&head, "content-length").and_then(|v| v.parse().ok()) {
        let Some(body) = read_exact(up, buf, length).await else {
            return false;
        };
        if !send(&mut client, &body).await {
            return false;
        }
    } else if header(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let Some(size_line) = read_line(up, buf).await else {
                return false;
            };
            let size_text = String::from_utf8_lossy(&size_line);
            let size_text = size_text.trim().split(';').next().unwrap_or("0").to_owned();
            let Ok(size) = usize::from_str_radix(&size_text, 16) else {
                return false;
            };
            let Some(chunk) = read_exact(up, buf, size + 2).await else {
                return false;
            };
            if !send(&mut client, &size_line).await || !send(&mut client, &chunk).await {
                return false;
            }
            if size == 0 {
                break;
            }
        }
    } else if head.starts_with(b"HTTP/1.1 204") || head.starts_with(b"HTTP/1.1 304") {
        // No body.
    } else {
        // Neither: the body runs to the close.
        let mut rest = std::mem::take(buf);
        let _ = up.read_to_end(&mut rest).await;
        let _ = send(&mut client, &rest).await;
        return false;
    }
    !header(&head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
}
