//! A small OTLP/HTTP receiver: a loopback listener that reads each POST
//! (headers, `Content-Length` body), keeps it, and answers `200 {}`.
//! Everything it got is complete once the service that sent it has exited:
//! the exporter waits for the answer, which is sent after the request is
//! kept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// One export request as received.
#[derive(Debug, Clone)]
pub struct Export {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Export {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Seen {
    /// A collector that hangs: reads, never answers.
    silent: bool,
    connections: AtomicUsize,
    exports: Mutex<Vec<Export>>,
}

/// The running receiver; stops accepting when dropped.
pub struct Receiver {
    pub addr: std::net::SocketAddr,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on `addr` (`127.0.0.1:0` for any free port).
    pub async fn start(addr: &str) -> Receiver {
        Self::listen(addr, false).await
    }

    /// A collector that accepts and reads but never answers.
    pub async fn start_silent() -> Receiver {
        Self::listen("127.0.0.1:0", true).await
    }

    async fn listen(addr: &str, silent: bool) -> Receiver {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("the OTLP receiver cannot listen on {addr}: {e}"));
        let addr = listener.local_addr().expect("receiver addr");
        let seen = Arc::new(Seen {
            silent,
            ..Seen::default()
        });
        let task = tokio::spawn({
            let seen = Arc::clone(&seen);
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    seen.connections.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(stream, Arc::clone(&seen)));
                }
            }
        });
        Receiver { addr, seen, task }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.seen.connections.load(Ordering::SeqCst)
    }

    /// Export requests received so far.
    pub fn exports(&self) -> Vec<Export> {
        self.seen.exports.lock().expect("lock").clone()
    }

    /// Every span of every export, each with its resource's attributes.
    pub fn spans(&self) -> Vec<(Value, Value)> {
        let mut out = Vec::new();
        for export in self.exports() {
            let body: Value = serde_json::from_slice(&export.body).expect("export body is JSON");
            for resource in body["resourceSpans"].as_array().expect("resourceSpans") {
                for scope in resource["scopeSpans"].as_array().expect("scopeSpans") {
                    for span in scope["spans"].as_array().expect("spans") {
                        out.push((resource["resource"].clone(), span.clone()));
                    }
                }
            }
        }
        out
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads requests off one connection until it closes.
async fn serve(mut stream: TcpStream, seen: Arc<Seen>) {
    let mut buf = Vec::new();
    loop {
        let (head_len, export, body_len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut request = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(len)) = request.parse(&buf) {
                let headers: Vec<(String, String)> = request
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_owned(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                let body_len = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse::<usize>().ok())
                    .expect("the exporter sends Content-Length");
                let export = Export {
                    method: request.method.unwrap_or("").to_owned(),
                    path: request.path.unwrap_or("").to_owned(),
                    headers,
                    body: Vec::new(),
                };
                break (len, export, body_len);
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        while buf.len() < head_len + body_len {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        if seen.silent {
            // Hold the connection: keep reading, never answer.
            let mut chunk = [0u8; 8192];
            while let Ok(n) = stream.read(&mut chunk).await {
                if n == 0 {
                    return;
                }
            }
            return;
        }
        let mut export = export;
        export.body = buf[head_len..head_len + body_len].to_vec();
        buf.drain(..head_len + body_len);
        // Kept before answering: the exporter's success means "received".
        seen.exports.lock().expect("lock").push(export);
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}
