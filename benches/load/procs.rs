//! The processes a run measures: `redis-server` and `leasehold` (this build,
//! `LOAD_LEASEHOLD_BIN` or `LOAD_BASELINE_BIN`) started on free loopback
//! ports and stopped by their pid, and their memory and CPU read from
//! `/proc`. (`etcd`, for the comparisons of issue 25, is in `etcd.rs`, with
//! the helpers here.)

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http::Method;

use crate::http_client::Http;
use crate::opts::Opts;

// ---------------------------------------------------------------------------
// processes: redis-server and leasehold, on free loopback ports
// ---------------------------------------------------------------------------

pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub(crate) fn free_port() -> Result<u16, String> {
    let l = StdListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// Polls `probe` with short sleeps until it is true or `within` has passed.
pub(crate) fn poll_until(within: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if probe() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    probe()
}

pub(crate) fn temp_dir(tag: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("leasehold-bench-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

pub(crate) fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Sends SIGTERM to one process we started (by its pid), waits, then kills.
pub(crate) fn stop_child(child: &mut Child, grace: Duration) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let exited = poll_until(grace, || matches!(child.try_wait(), Ok(Some(_))));
    if !exited {
        let _ = child.kill();
    }
    let _ = child.wait();
}

pub(crate) struct RedisProc {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisProc {
    pub(crate) fn start() -> Result<Self, String> {
        let bin = find_on_path("redis-server").ok_or(
            "redis-server not found on PATH: install redis-server (apt-get install redis-server)",
        )?;
        let dir = temp_dir("redis")?;
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            let log = dir.join("redis.log");
            let mut child = Command::new(&bin)
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args([
                    "--protected-mode",
                    "no",
                    "--maxmemory-policy",
                    "noeviction",
                    "--logfile",
                ])
                .arg(&log)
                .arg("--dir")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("spawn redis-server: {e}"))?;
            let ready = poll_until(Duration::from_secs(10), || {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return true;
                }
                redis_ping(port)
            });
            if ready && matches!(child.try_wait(), Ok(None)) {
                return Ok(Self { child, port, dir });
            }
            last = tail(&log);
            stop_child(&mut child, Duration::from_secs(1));
        }
        Err(format!("redis-server did not start:\n{last}"))
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `v=x.y.z` of `redis-server --version`, for the report's first line.
    pub(crate) fn version() -> String {
        Command::new("redis-server")
            .arg("--version")
            .output()
            .ok()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .find(|w| w.starts_with("v="))
                    .unwrap_or("v=?")
                    .to_owned()
            })
            .unwrap_or_default()
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn redis_ping(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = StdStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

pub(crate) struct Service {
    child: Child,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
    dir: PathBuf,
}

impl Service {
    /// This build's binary, or `LOAD_LEASEHOLD_BIN` (another build, e.g. to
    /// compare a change against a saved binary).
    pub(crate) fn new_build() -> PathBuf {
        std::env::var_os("LOAD_LEASEHOLD_BIN").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_leasehold")),
            PathBuf::from,
        )
    }

    /// Starts `bin` against `redis_url` with the benchmark's settings; `tag`
    /// names its log directory (several instances run side by side).
    pub(crate) async fn start(
        opts: &Opts,
        redis_url: &str,
        bin: &Path,
        tag: &str,
    ) -> Result<Self, String> {
        Self::start_with_env(opts, redis_url, bin, tag, &[]).await
    }

    /// [`Service::start`] with more environment variables (`redis-cost`'s
    /// service waits longer for a Redis slowed down by callgrind).
    pub(crate) async fn start_with_env(
        opts: &Opts,
        redis_url: &str,
        bin: &Path,
        tag: &str,
        extra_env: &[(&str, &str)],
    ) -> Result<Self, String> {
        if !bin.is_file() {
            return Err(format!(
                "{} is missing: run `cargo build --release --bin leasehold`",
                bin.display()
            ));
        }
        let dir = temp_dir(tag)?;
        let log = dir.join("leasehold.log");
        let port = free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut cmd = match &opts.wrap {
            Some(wrap) => {
                let mut parts = wrap.split_whitespace();
                let mut cmd = Command::new(parts.next().unwrap_or("env"));
                cmd.args(parts).arg(bin);
                cmd
            }
            None => Command::new(bin),
        };
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let max_in_flight = (opts.concurrency * 4).max(1024);
        let child = cmd
            .env("LEASEHOLD_REDIS_URL", redis_url)
            .env("LEASEHOLD_LISTEN", addr.to_string())
            .env("LEASEHOLD_POOL_SIZE", opts.pool_size.to_string())
            .env("LEASEHOLD_WORKER_THREADS", opts.service_threads.to_string())
            .env("LEASEHOLD_MAX_IN_FLIGHT", max_in_flight.to_string())
            .env("LEASEHOLD_MAX_WAITERS", "10000")
            // The watch scenario holds 10 000 streams open on one instance.
            .env("LEASEHOLD_MAX_CONNECTIONS", "16384")
            .env("LEASEHOLD_MAX_WATCHERS", "16384")
            .env(
                "RUST_LOG",
                std::env::var("LOAD_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let mut service = Self {
            child,
            addr,
            log,
            dir,
        };
        let deadline =
            Instant::now() + Duration::from_secs(if opts.wrap.is_some() { 120 } else { 20 });
        loop {
            if let Ok(Some(status)) = service.child.try_wait() {
                return Err(format!(
                    "leasehold exited at start ({status}):\n{}",
                    tail(&service.log)
                ));
            }
            if let Ok(mut conn) = Http::connect(addr).await {
                if let Ok((200, _)) = conn.call(Method::GET, "/readyz", &[], None).await {
                    return Ok(service);
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "leasehold not ready on {addr}:\n{}",
                    tail(&service.log)
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(60));
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
        if std::env::var_os("LOAD_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------
// /proc: memory and CPU of a process
// ---------------------------------------------------------------------------

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in kB.
pub(crate) fn status_kb(pid: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// utime + stime of `/proc/<pid>/stat`, in clock ticks.
pub(crate) fn cpu_ticks(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

pub(crate) fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cpu {
    pub(crate) leasehold: f64,
    pub(crate) redis: f64,
    pub(crate) client: f64,
}

#[derive(Clone)]
pub(crate) struct Pids {
    pub(crate) leasehold: String,
    pub(crate) redis: String,
    pub(crate) ticks: f64,
}

impl Pids {
    fn sample(&self) -> [Option<u64>; 3] {
        [
            cpu_ticks(&self.leasehold),
            cpu_ticks(&self.redis),
            cpu_ticks("self"),
        ]
    }
}

/// CPU seconds each process spent between `start` and `end`.
pub(crate) fn cpu_between(
    pids: Pids,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
) -> tokio::task::JoinHandle<Cpu> {
    tokio::spawn(async move {
        tokio::time::sleep_until(start).await;
        let a = pids.sample();
        tokio::time::sleep_until(end).await;
        let b = pids.sample();
        let d = |i: usize| match (a[i], b[i]) {
            (Some(x), Some(y)) => y.saturating_sub(x) as f64 / pids.ticks,
            _ => f64::NAN,
        };
        Cpu {
            leasehold: d(0),
            redis: d(1),
            client: d(2),
        }
    })
}
