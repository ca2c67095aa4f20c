//! etcd for the comparisons of issue 25 (`anchor` and the second half of
//! `watch`): Debian's `etcd` (package `etcd-server`, 3.4) started on free
//! loopback ports with a temporary data dir (in `/dev/shm` when there is
//! one: Redis runs without persistence here, so etcd's fsyncs should not
//! wait for a disk either), only when a scenario that needs it runs, a
//! fresh one per scenario, and stopped by its pid; and the few
//! calls of its v3 HTTP/JSON gateway (grpc-gateway, `POST /v3/...`, keys and
//! values base64) the bench makes, over the bench's own lean HTTP client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use crate::consts::REQUEST_TIMEOUT;
use crate::http_client::Http;
use crate::procs::{find_on_path, free_port, stop_child, tail, temp_dir};

/// What the run says when `etcd` is missing.
const MISSING: &str = "etcd not found on PATH: the anchor and watch scenarios compare against etcd 3.4; install it with `apt-get install etcd-server`, or leave them out (`--only ...`)";

/// Fails, saying how to install it, when `etcd` is not on `PATH` (checked
/// before the run starts anything, so a run with `anchor` or `watch` does
/// not find out half way).
pub(crate) fn require() -> Result<(), String> {
    find_on_path("etcd")
        .map(drop)
        .ok_or_else(|| MISSING.to_owned())
}

/// One `etcd` process, a single-member cluster.
pub(crate) struct EtcdProc {
    child: Child,
    pub(crate) addr: SocketAddr,
    dir: PathBuf,
}

impl EtcdProc {
    /// Starts `etcd` on two free loopback ports (client and peer) with a
    /// data dir under the temp dir named by `tag`; waits for `/health`.
    pub(crate) async fn start(tag: &str) -> Result<Self, String> {
        let bin = find_on_path("etcd").ok_or(MISSING)?;
        let dir = data_parent(tag)?;
        let log = dir.join("etcd.log");
        let mut last = String::new();
        for _ in 0..5 {
            let (client, peer) = (free_port()?, free_port()?);
            if client == peer {
                continue;
            }
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log_file = std::fs::File::create(&log)
                .map_err(|e| format!("create {}: {e}", log.display()))?;
            let mut child = Command::new(&bin)
                .args(["--name", "bench", "--data-dir"])
                .arg(dir.join("data"))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("bench={peer_url}")])
                .args(["--logger", "zap", "--log-outputs", "stderr"])
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file)
                .spawn()
                .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
            let addr: SocketAddr = ([127, 0, 0, 1], client).into();
            if healthy(&mut child, addr).await {
                return Ok(Self { child, addr, dir });
            }
            last = tail(&log);
            stop_child(&mut child, Duration::from_secs(2));
        }
        Err(format!("etcd did not start:\n{last}"))
    }

    pub(crate) fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Where its data dir is (for the report: tmpfs or not).
    pub(crate) fn dir(&self) -> String {
        self.dir.display().to_string()
    }

    /// `etcd --version`'s first line's version (`3.4.23`).
    pub(crate) fn version() -> String {
        Command::new("etcd")
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("etcd Version: "))
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "?".into())
    }
}

impl Drop for EtcdProc {
    fn drop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(10));
        if std::env::var_os("LOAD_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A fresh directory for one etcd: under `/dev/shm` (tmpfs) when it
/// exists, else under the temp dir.
fn data_parent(tag: &str) -> Result<PathBuf, String> {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return temp_dir(&format!("etcd-{tag}"));
    }
    let dir = shm.join(format!("leasehold-bench-{}-etcd-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Waits (20 s at most) until `GET /health` says `true`; false if the
/// process exited or never did.
async fn healthy(child: &mut Child, addr: SocketAddr) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        if let Ok(mut conn) = Http::connect(addr).await {
            if let Ok((200, body)) = conn.call(Method::GET, "/health", &[], None).await {
                if body.windows(6).any(|w| w == b"\"true\"") {
                    return true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// base64 (standard, padded), as the gateway wants keys and values.
pub(crate) fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// One gateway call: `POST path` with a JSON body; the answer's body on
/// `200`, else an error naming the call and the status.
pub(crate) async fn post(http: &mut Http, path: &str, body: String) -> Result<Bytes, String> {
    post_within(http, REQUEST_TIMEOUT, path, body).await
}

/// [`post`] with its own time limit.
pub(crate) async fn post_within(
    http: &mut Http,
    within: Duration,
    path: &str,
    body: String,
) -> Result<Bytes, String> {
    match http
        .call_within(within, Method::POST, path, &[], Some(&Bytes::from(body)))
        .await
    {
        Ok((200, answer)) => Ok(answer),
        Ok((status, answer)) => Err(format!(
            "etcd {path}: HTTP {status}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(120)])
        )),
        Err(e) => Err(format!("socket: {e}")),
    }
}

/// The string value of `"name":"…"` in a gateway answer (the gateway
/// writes 64-bit numbers such as a lease ID as strings too).
pub(crate) fn field<'a>(body: &'a [u8], name: &str) -> Option<&'a str> {
    let key = format!("\"{name}\":\"");
    let at = body.windows(key.len()).position(|w| w == key.as_bytes())? + key.len();
    let len = body[at..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&body[at..at + len]).ok()
}
