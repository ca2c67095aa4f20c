//! A raw HTTP/1.1 client for the differential suite and the front-door
//! tests: the bytes on the wire are the test's, and what comes back is
//! read as it is (one answer at a time, a stream's head and first event,
//! the connection's end), each read bounded.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::common::app::TestApp;

/// A request hyper serves (another route): after it, hyper has the
/// connection.
pub const LIVEZ: &str = "GET /livez HTTP/1.1\r\nhost: x\r\n\r\n";

/// One answer, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `HTTP/1.1` or `HTTP/1.0`.
    pub version: String,
    pub status: u16,
    /// Header lines, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body; for an event stream, its first chunk.
    pub body: Vec<u8>,
    /// An event stream (`text/event-stream`), read up to its first chunk.
    pub stream: bool,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What came next on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Answer(Answer),
    /// The server closed (EOF or reset) before an answer began.
    Closed,
    /// Nothing within the bound.
    Silent,
    /// Bytes that are not an HTTP answer, or an answer cut short.
    Garbled(String),
}

/// A client connection.
pub struct Conn {
    pub stream: TcpStream,
    rest: Vec<u8>,
    /// The next answer is to a `HEAD`: it has no body.
    pub head_next: bool,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Conn {
            stream,
            rest: Vec::new(),
            head_next: false,
        }
    }

    /// A connection opened by the caller (with its own socket options).
    pub fn wrap(stream: TcpStream) -> Conn {
        stream.set_nodelay(true).expect("nodelay");
        Conn {
            stream,
            rest: Vec::new(),
            head_next: false,
        }
    }

    /// Opens a connection hyper has taken: [`LIVEZ`] sent and answered.
    pub async fn hyper(addr: SocketAddr) -> Conn {
        let mut conn = Conn::open(addr).await;
        conn.send(LIVEZ.as_bytes()).await;
        match conn.next(Duration::from_secs(10)).await {
            Next::Answer(a) if a.status == 200 => conn,
            other => panic!("/livez not answered: {other:?}"),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Sends, ignoring a connection the server closed already.
    pub async fn try_send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// Reads more onto `rest`: `Some(0)` at the end, `None` at the bound.
    async fn more(&mut self, until: tokio::time::Instant) -> Option<usize> {
        let mut buf = [0u8; 8192];
        match tokio::time::timeout_at(until, self.stream.read(&mut buf)).await {
            Err(_) => None,
            Ok(Ok(n)) => {
                self.rest.extend_from_slice(&buf[..n]);
                Some(n)
            }
            // A reset: the server closed with bytes unread.
            Ok(Err(_)) => Some(0),
        }
    }

    /// The next answer (a `100 Continue` skipped), within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Next {
        let until = tokio::time::Instant::now() + wait;
        loop {
            let next = self.next_one(until).await;
            match &next {
                Next::Answer(a) if a.status == 100 => continue,
                _ => return next,
            }
        }
    }

    async fn next_one(&mut self, until: tokio::time::Instant) -> Next {
        let head_end = loop {
            if let Some(at) = self.rest.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match self.more(until).await {
                None if self.rest.is_empty() => return Next::Silent,
                None => return Next::Garbled(self.lossy()),
                Some(0) if self.rest.is_empty() => return Next::Closed,
                Some(0) => return Next::Garbled(self.lossy()),
                Some(_) => {}
            }
        };
        let head = String::from_utf8_lossy(&self.rest[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let version = status_line.get(..8).unwrap_or_default().to_owned();
        let Some(status) = (version == "HTTP/1.1" || version == "HTTP/1.0")
            .then(|| status_line.get(9..12))
            .flatten()
            .and_then(|s| s.parse::<u16>().ok())
        else {
            return Next::Garbled(self.lossy());
        };
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_owned()))
            .collect();
        self.rest.drain(..head_end);
        let mut answer = Answer {
            version,
            status,
            headers,
            body: Vec::new(),
            stream: false,
        };
        let chunked = answer
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let length = answer
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok());
        answer.stream = answer
            .header("content-type")
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if status != 100 && std::mem::take(&mut self.head_next) {
            return Next::Answer(answer);
        }
        if status == 100 || status == 204 || status == 304 {
            return Next::Answer(answer);
        }
        if chunked {
            loop {
                let Some(line_end) = self.rest.windows(2).position(|w| w == b"\r\n") else {
                    if !matches!(self.more(until).await, Some(n) if n > 0) {
                        return Next::Garbled(format!("chunked body cut: {}", self.lossy()));
                    }
                    continue;
                };
                let size = String::from_utf8_lossy(&self.rest[..line_end]).into_owned();
                let Ok(size) =
                    usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                else {
                    return Next::Garbled(self.lossy());
                };
                while self.rest.len() < line_end + 2 + size + 2 {
                    if !matches!(self.more(until).await, Some(n) if n > 0) {
                        return Next::Garbled(format!("chunk cut: {}", self.lossy()));
                    }
                }
                let data = self.rest[line_end + 2..line_end + 2 + size].to_vec();
                self.rest.drain(..line_end + 2 + size + 2);
                if size == 0 {
                    return Next::Answer(answer);
                }
                answer.body.extend_from_slice(&data);
                if answer.stream {
                    // A stream: its first chunk is enough.
                    return Next::Answer(answer);
                }
            }
        }
        match length {
            Some(length) => {
                while self.rest.len() < length {
                    if !matches!(self.more(until).await, Some(n) if n > 0) {
                        return Next::Garbled(format!("body cut: {}", self.lossy()));
                    }
                }
                answer.body = self.rest.drain(..length).collect();
            }
            None => {
                // Delimited by the connection's end.
                while matches!(self.more(until).await, Some(n) if n > 0) {}
                answer.body = std::mem::take(&mut self.rest);
            }
        }
        Next::Answer(answer)
    }

    fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.rest).into_owned()
    }

    /// Whether the server closes the connection within `wait` (reading
    /// and dropping anything it still sends).
    pub async fn closes_within(&mut self, wait: Duration) -> bool {
        let until = tokio::time::Instant::now() + wait;
        loop {
            match self.more(until).await {
                Some(0) => return true,
                Some(_) => self.rest.clear(),
                None => return false,
            }
        }
    }
}

/// `/readyz`'s count of open watches.
pub async fn watchers(app: &TestApp) -> u64 {
    let ready = app.get("/readyz").await;
    ready.body["watchers"]
        .as_u64()
        .expect("watchers in /readyz")
}

/// Waits (at most 10 s, polling) until `/readyz` counts `n` watchers.
pub async fn until_watchers(app: &TestApp, n: u64) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = watchers(app).await;
        if now == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "watchers stayed at {now}, not {n}, for 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sockets of this process's listener on `port` in CLOSE-WAIT (the client
/// closed, the service has not): read off /proc/net/tcp{,6}.
pub fn close_wait(port: u16) -> usize {
    let port = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| table.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local address, then remote, then the state (08: CLOSE_WAIT).
            fields.len() > 3 && fields[1].ends_with(&port) && fields[3] == "08"
        })
        .count()
}

/// Waits (at most 10 s, polling) until no socket of `port` is in CLOSE-WAIT.
pub async fn until_no_close_wait(port: u16) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = close_wait(port);
        if left == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{left} sockets of port {port} still in CLOSE-WAIT after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
