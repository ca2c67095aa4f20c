//! [`FaultProxy`]: a RESP-aware TCP proxy in front of one Redis node that
//! injects the faults of a network path, one switch each:
//!
//! * **lost script replies** ([`FaultProxy::lose_script_replies`]): exactly N
//!   whole replies to `EVALSHA`/`EVAL` are swallowed while the connection
//!   stays open and everything after them is forwarded, so a pipelined
//!   client is one reply short (a *desynchronised* connection). Requests and
//!   replies are framed (RESP2 and RESP3), so the reply swallowed is the one
//!   answering a script; push frames (`>`) are forwarded and never counted.
//! * **reset with a script in flight** ([`FaultProxy::reset_next_script`]):
//!   the next connection to carry an `EVALSHA`/`EVAL` forwards it to Redis
//!   and is then closed on both sides (RST) before the reply can come back.
//! * **latency** ([`FaultProxy::set_reply_delay`]): every reply is held back
//!   this long (order kept; requests are not delayed).
//! * **stall** ([`FaultProxy::set_stalled`]): every open connection is closed
//!   and new ones are accepted but never connected upstream, so a pool can
//!   neither keep nor replace a connection (pool exhaustion).
//!
//! [`crate::common::redis::ReplyDropProxy`] drops *bytes* while on; this one
//! drops whole replies. Drop of the proxy closes every connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

struct State {
    /// Script replies still to swallow.
    to_lose: AtomicU64,
    /// Script replies swallowed so far.
    lost: watch::Sender<u64>,
    /// Reset the next connection that carries a script request.
    reset_next: AtomicBool,
    /// Connections reset so far.
    resets: watch::Sender<u64>,
    /// Milliseconds every reply is held back.
    delay_ms: AtomicU64,
    /// SHA1 of every `EVALSHA` whose reply Redis sent back (so it ran), in
    /// order.
    answered: watch::Sender<Vec<String>>,
    /// True while stalled; bumping closes every open connection.
    stalled: watch::Sender<bool>,
}

/// See the module documentation.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` in front of `upstream`. Needs a running
    /// tokio runtime.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        Self::start_on(upstream, "127.0.0.1:0".parse().expect("addr")).await
    }

    /// Listens on `listen` (e.g. a port reserved by the caller).
    pub async fn start_on(upstream: SocketAddr, listen: SocketAddr) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .expect("fault proxy bind");
        let addr = listener.local_addr().expect("fault proxy local_addr");
        let state = Arc::new(State {
            to_lose: AtomicU64::new(0),
            lost: watch::channel(0).0,
            reset_next: AtomicBool::new(false),
            resets: watch::channel(0).0,
            delay_ms: AtomicU64::new(0),
            answered: watch::channel(Vec::new()).0,
            stalled: watch::channel(false).0,
        });
        let accept_state = state.clone();
        let accept_task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        connections.spawn(connection(client, upstream, accept_state.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        FaultProxy {
            addr,
            state,
            accept_task,
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The proxy's listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Swallow the next `n` script replies (whichever connections carry them).
    pub fn lose_script_replies(&self, n: u64) {
        self.state.to_lose.fetch_add(n, Ordering::SeqCst);
    }

    /// Script replies swallowed so far.
    pub fn lost_replies(&self) -> u64 {
        *self.state.lost.borrow()
    }

    /// Waits (event-driven) until `total` script replies have been swallowed
    /// since the start; false after `within`.
    pub async fn until_lost(&self, total: u64, within: Duration) -> bool {
        let mut rx = self.state.lost.subscribe();
        let waited = tokio::time::timeout(within, rx.wait_for(|n| *n >= total)).await;
        matches!(waited, Ok(Ok(_)))
    }

    /// Reset the next connection that carries a script, after forwarding it.
    pub fn reset_next_script(&self) {
        self.state.reset_next.store(true, Ordering::SeqCst);
    }

    /// Connections reset with a script in flight so far.
    pub fn resets(&self) -> u64 {
        *self.state.resets.borrow()
    }

    /// Waits until `total` resets happened; false after `within`.
    pub async fn until_resets(&self, total: u64, within: Duration) -> bool {
        let mut rx = self.state.resets.subscribe();
        let waited = tokio::time::timeout(within, rx.wait_for(|n| *n >= total)).await;
        matches!(waited, Ok(Ok(_)))
    }

    /// Hold every reply back by `delay` from now on (zero: no delay).
    pub fn set_reply_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.state.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// How many `EVALSHA <sha>` calls Redis has answered through this proxy
    /// (whether or not the reply was then delayed, lost or delivered).
    pub fn answered(&self, sha: &str) -> usize {
        self.state
            .answered
            .borrow()
            .iter()
            .filter(|s| *s == sha)
            .count()
    }

    /// Waits (event-driven) until Redis has answered `n` calls of the script
    /// `sha` through this proxy; false after `within`.
    pub async fn until_answered(&self, sha: &str, n: usize, within: Duration) -> bool {
        let mut rx = self.state.answered.subscribe();
        let waited = tokio::time::timeout(
            within,
            rx.wait_for(|all| all.iter().filter(|s| *s == sha).count() >= n),
        )
        .await;
        matches!(waited, Ok(Ok(_)))
    }

    /// On: close every open connection and hold new ones unconnected.
    pub fn set_stalled(&self, on: bool) {
        self.state.stalled.send_replace(on);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

/// The command name of a request frame (`*n` of bulk strings), upper case.
fn command_name(frame: &[u8]) -> Option<String> {
    // *<n>\r\n$<len>\r\n<name>\r\n
    let first = frame.windows(2).position(|w| w == b"\r\n")? + 2;
    let rest = &frame[first..];
    if rest.first() != Some(&b'$') {
        return None;
    }
    let len_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[1..len_end]).ok()?.parse().ok()?;
    let name = rest.get(len_end + 2..len_end + 2 + len)?;
    Some(String::from_utf8_lossy(name).to_ascii_uppercase())
}

/// The second element of a request frame (an `EVALSHA`'s SHA1), if any.
fn second_word(frame: &[u8]) -> Option<String> {
    let mut at = frame.windows(2).position(|w| w == b"\r\n")? + 2;
    for i in 0..2 {
        let rest = &frame[at..];
        if rest.first() != Some(&b'$') {
            return None;
        }
        let len_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let len: usize = std::str::from_utf8(&rest[1..len_end]).ok()?.parse().ok()?;
        if i == 1 {
            let word = rest.get(len_end + 2..len_end + 2 + len)?;
            return Some(String::from_utf8_lossy(word).into_owned());
        }
        at += len_end + 2 + len + 2;
    }
    None
}

fn is_script(name: &str) -> bool {
    let verb = name.split(' ').next().unwrap_or("");
    matches!(verb, "EVALSHA" | "EVAL" | "EVALSHA_RO" | "EVAL_RO")
}

/// The end of the RESP frame starting at `pos`: `Ok(None)` while incomplete.
pub fn frame_end(buf: &[u8], pos: usize) -> Result<Option<usize>, String> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let Some(line) = buf[pos..].windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let header = &buf[pos + 1..pos + line];
    let next = pos + line + 2;
    let number = || -> Result<i64, String> {
        std::str::from_utf8(header)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad RESP length {:?}", String::from_utf8_lossy(header)))
    };
    match kind {
        b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => Ok(Some(next)),
        b'$' | b'!' | b'=' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some(next));
            }
            let end = next + usize::try_from(n).map_err(|e| e.to_string())? + 2;
            Ok((end <= buf.len()).then_some(end))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some(next));
            }
            let per = if matches!(kind, b'%' | b'|') { 2 } else { 1 };
            let mut at = next;
            for _ in 0..n * per {
                match frame_end(buf, at)? {
                    Some(end) => at = end,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute map precedes the value it annotates.
                return frame_end(buf, at);
            }
            Ok(Some(at))
        }
        other => Err(format!("unknown RESP type byte {other:#04x}")),
    }
}

async fn connection(client: tokio::net::TcpStream, upstream: SocketAddr, state: Arc<State>) {
    let mut stalled = state.stalled.subscribe();
    if *stalled.borrow_and_update() {
        // Accepted, never connected: the client's handshake hangs.
        let _ = stalled.wait_for(|on| !*on).await;
        return;
    }
    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();
    // Command names of requests not yet answered, in order.
    let (names_tx, mut names_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (out_tx, mut out_rx) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let requests = async {
        let mut pending = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            let mut scripts = false;
            let mut used = 0;
            while let Ok(Some(end)) = frame_end(&pending, used) {
                let frame = &pending[used..end];
                let mut name = command_name(frame).unwrap_or_default();
                if name == "EVALSHA" {
                    if let Some(sha) = second_word(frame) {
                        name = format!("EVALSHA {sha}");
                    }
                }
                scripts |= is_script(&name);
                let _ = names_tx.send(name);
                used = end;
            }
            if server_wr.write_all(&pending[..used]).await.is_err() {
                return;
            }
            pending.drain(..used);
            if scripts && state.reset_next.swap(false, Ordering::SeqCst) {
                let _ = server_wr.flush().await;
                state.resets.send_modify(|n| *n += 1);
                return; // closes both sides
            }
        }
    };
    let replies = async {
        let mut pending = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            let mut used = 0;
            loop {
                let end = match frame_end(&pending, used) {
                    Ok(Some(end)) => end,
                    Ok(None) => break,
                    Err(_) => return,
                };
                let frame = &pending[used..end];
                let push = frame.first() == Some(&b'>');
                let mut swallow = false;
                if !push {
                    let name = names_rx.try_recv().unwrap_or_default();
                    if let Some(sha) = name.strip_prefix("EVALSHA ") {
                        let sha = sha.to_owned();
                        state.answered.send_modify(|all| all.push(sha));
                    }
                    if is_script(&name)
                        && state
                            .to_lose
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok()
                    {
                        swallow = true;
                        state.lost.send_modify(|n| *n += 1);
                    }
                }
                if !swallow {
                    let delay = Duration::from_millis(state.delay_ms.load(Ordering::SeqCst));
                    let _ = out_tx.send((tokio::time::Instant::now() + delay, frame.to_vec()));
                }
                used = end;
            }
            pending.drain(..used);
        }
    };
    let writer = async {
        while let Some((at, bytes)) = out_rx.recv().await {
            tokio::time::sleep_until(at).await;
            if client_wr.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    let stall = async {
        let _ = stalled.wait_for(|on| *on).await;
    };
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
        _ = writer => {}
        _ = stall => {}
    }
}
