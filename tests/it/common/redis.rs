//! Real-Redis test harness: `redis-server` processes started and killed by
//! the tests themselves. Never a mock.
//!
//! * [`RedisServer`] — one standalone server (plain, TLS, ACL, or a sentinel)
//!   on a free loopback port, in its own temp dir, killed on drop.
//! * [`ReplyDropProxy`] — a TCP proxy that can swallow server replies, so a
//!   command executes but its reply never arrives (the "indeterminate" case).
//! * [`RedisCluster`] — a Redis Cluster with masters and replicas.
//! * [`RedisSentinelSet`] — a master, replicas and sentinels watching it.
//! * [`TlsMaterial`] — a CA, server and client certificates, and an unrelated CA.
//!
//! Ports are never fixed: each comes from binding `127.0.0.1:0`. A port
//! handed out is remembered for the life of its server so this process never
//! hands it out twice, and a start that loses a race for a port (another
//! process took it between our probe and redis binding it) retries on a
//! fresh one. Waits poll with short sleeps against a bounded deadline and
//! panic with the tail of the server's log when the deadline passes.
//!
//! Set `LEASEHOLD_KEEP_TEST_DIRS=1` to keep the temp dirs (logs, configs)
//! after the tests.

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a single server may take to answer PING after being spawned.
const START_DEADLINE: Duration = Duration::from_secs(15);
/// How long a cluster or sentinel set may take to settle.
const TOPOLOGY_DEADLINE: Duration = Duration::from_secs(30);
/// How long one `redis-cli` run may take before it is killed.
const CLI_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a start is retried on a fresh port after losing a port race.
const PORT_ATTEMPTS: usize = 5;

// ---------------------------------------------------------------------------
// binaries, temp dirs, ports, polling
// ---------------------------------------------------------------------------

/// The path of `name` on `PATH`; panics with an install hint when missing.
/// Tests never skip silently for lack of Redis.
pub fn require_binary(name: &str, apt_package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found: install it with `apt-get install {apt_package}`")
        })
}

fn redis_server_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| require_binary("redis-server", "redis-server"))
}

fn redis_cli_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| require_binary("redis-cli", "redis-tools"))
}

/// `(major, minor)` of the installed redis-server.
fn redis_version() -> (u32, u32) {
    static VERSION: OnceLock<(u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(redis_server_bin())
            .arg("--version")
            .output()
            .expect("run redis-server --version");
        let text = String::from_utf8_lossy(&out.stdout);
        // "Redis server v=7.0.15 sha=..."
        let v = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or_else(|| panic!("cannot parse redis-server --version: {text}"));
        let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    })
}

/// A fresh, empty dir: `temp_dir()/leasehold-test-<pid>-<counter>`.
fn fresh_temp_dir() -> PathBuf {
    sweep_orphans();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("leasehold-test-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create temp dir {}: {e}", dir.display()));
    dir
}

/// Once per test process: kill the redis-servers that test processes which
/// died without running `Drop` (SIGKILL, abort) left behind, and remove
/// their dirs. A server is killed only when its pidfile names a process
/// whose working dir is that very temp dir, so a recycled pid is never hit.
fn sweep_orphans() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(owner) = name
                .to_str()
                .and_then(|n| n.strip_prefix("leasehold-test-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if owner == std::process::id() || Path::new(&format!("/proc/{owner}")).exists() {
                continue; // a live test process owns it
            }
            let dir = entry.path();
            let pid = fs::read_to_string(dir.join("redis.pid"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            if let (Some(pid), Ok(canonical)) = (pid, fs::canonicalize(&dir)) {
                if fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == canonical) {
                    signal(pid, "KILL");
                }
            }
            remove_temp_dir(&dir);
        }
    });
}

fn remove_temp_dir(dir: &Path) {
    if std::env::var_os("LEASEHOLD_KEEP_TEST_DIRS").is_none() {
        let _ = fs::remove_dir_all(dir);
    }
}

fn reserved_ports() -> &'static Mutex<HashSet<u16>> {
    static RESERVED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    RESERVED.get_or_init(Default::default)
}

/// A loopback port that was free a moment ago and that this process has not
/// handed out before (until [`release_port`]).
fn reserve_free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        drop(listener);
        if reserved_ports()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port)
        {
            return port;
        }
    }
}

fn release_port(port: u16) {
    reserved_ports()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&port);
}

/// Calls `probe` until it returns `Some`, sleeping briefly in between, for at
/// most `within`. `None` when the deadline passed.
fn poll_until<T>(within: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Runs `cmd` with piped output, killing it after `timeout`.
fn output_with_timeout(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {cmd:?}: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(result) => result.map_err(|e| format!("wait for {cmd:?}: {e}")),
        Err(_) => {
            signal(pid, "KILL");
            let _ = rx.recv();
            Err(format!("{cmd:?} did not finish within {timeout:?}"))
        }
    }
}

fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The value of `key:` in INFO-style `key:value` lines.
fn info_field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(key)?.strip_prefix(':'))
}

fn tail_of(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(_) => String::new(),
    }
}

/// One request/one reply line over plain TCP (no TLS): enough to tell
/// "answering" from "not answering" without spawning redis-cli.
fn raw_ping(port: u16, timeout: Duration) -> Result<String, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        match s.read(&mut byte) {
            Ok(0) => return Err("connection closed before a reply".into()),
            Ok(_) => reply.push(byte[0]),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(String::from_utf8_lossy(&reply).trim_end().to_string())
}

// ---------------------------------------------------------------------------
// RedisServer
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct TlsFiles {
    ca_cert: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

#[derive(Clone, Debug)]
enum Kind {
    /// A data node. `cluster_bus` is the cluster bus port when cluster-enabled.
    Data { cluster_bus: Option<u16> },
    /// A sentinel reading (and rewriting) `conf`.
    Sentinel { conf: PathBuf },
}

/// One `redis-server` process on a free loopback port, with its own temp
/// dir (data dir, `redis.log`, `stdout.log`). Drop kills it (SIGKILL + wait)
/// and removes the dir.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    kind: Kind,
    /// Server-side TLS files (copied into `dir`); `Some` means TLS-only.
    tls_server: Option<TlsFiles>,
    /// What redis-cli presents to a TLS server.
    tls_client: Option<TlsFiles>,
    /// `(user, password)` the harness's own `cli()` authenticates with.
    auth: Option<(Option<String>, String)>,
    extra_args: Vec<String>,
    child: Option<Child>,
    frozen: AtomicBool,
}

impl RedisServer {
    /// A standalone server: no persistence, fresh temp dir.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A standalone server with extra `redis-server` arguments, e.g.
    /// `["--requirepass", "x"]` (later arguments override the defaults).
    /// A `--requirepass` given here is also used by [`RedisServer::cli`].
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        let auth = extra_args
            .windows(2)
            .rev()
            .find(|w| w[0] == "--requirepass")
            .map(|w| (None, w[1].to_string()));
        Self::launch_new(
            Kind::Data { cluster_bus: None },
            None,
            None,
            auth,
            extra_args,
        )
    }

    /// A TLS-only server (`--port 0 --tls-port P`) using `tls`'s server
    /// certificate and trusting its CA. With `require_client_cert`, clients
    /// must present a certificate signed by that CA (`--tls-auth-clients yes`).
    /// The harness's `cli()` presents `tls.client_cert`.
    pub fn start_tls(tls: &TlsMaterial, require_client_cert: bool) -> RedisServer {
        let dir = fresh_temp_dir();
        let copy = |src: &Path, name: &str| {
            let dst = dir.join(name);
            fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
            dst
        };
        let server = TlsFiles {
            ca_cert: copy(&tls.ca_cert, "ca.crt"),
            cert: copy(&tls.server_cert, "server.crt"),
            key: copy(&tls.server_key, "server.key"),
        };
        let client = TlsFiles {
            ca_cert: server.ca_cert.clone(),
            cert: copy(&tls.client_cert, "client.crt"),
            key: copy(&tls.client_key, "client.key"),
        };
        let auth_clients = if require_client_cert { "yes" } else { "no" };
        Self::launch_in(
            dir,
            Kind::Data { cluster_bus: None },
            Some(server),
            Some(client),
            None,
            &["--tls-auth-clients", auth_clients],
        )
    }

    /// A server with one ACL user allowed only what a lease service needs
    /// (EVAL/EVALSHA/SCRIPT LOAD, reads, writes, pub/sub, connection
    /// commands, TIME, INFO; no @admin, no @dangerous, no SCRIPT FLUSH/KILL,
    /// no FUNCTION), on all keys and channels. The `default`
    /// user keeps full rights but has a different, harness-only password:
    /// `cli()` uses it; [`RedisServer::cli_as`] runs as any user.
    pub fn start_acl(user: &str, password: &str) -> RedisServer {
        for (what, s) in [("user", user), ("password", password)] {
            assert!(
                !s.is_empty() && !s.chars().any(|c| c.is_whitespace()),
                "start_acl: {what} must be non-empty without whitespace"
            );
        }
        assert_ne!(
            user, "default",
            "start_acl: pick a user other than `default`"
        );
        static N: AtomicU64 = AtomicU64::new(0);
        let admin_password = format!(
            "harness-admin-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        // Order matters: -@admin -@dangerous remove e.g. FLUSHALL, KEYS,
        // CONFIG, CLIENT KILL, SHUTDOWN; @scripting also holds SCRIPT
        // FLUSH/KILL and FUNCTION, removed too; then the few single commands
        // a service needs are added back.
        let mut rules = format!(
            "--user default on resetpass >{admin_password} ~* &* +@all \
             --user {user} on resetpass >{password} resetkeys ~* resetchannels &* \
             -@all +@read +@write +@scripting +@pubsub +@connection -@admin -@dangerous \
             -script|flush -script|kill -function \
             +ping +time +info +hello +auth +client|setname +client|id"
        );
        if redis_version() >= (7, 2) {
            // CLIENT SETINFO only exists from 7.2 on; naming it on 7.0 is a
            // config error.
            rules.push_str(" +client|setinfo");
        }
        let args: Vec<&str> = rules.split_whitespace().collect();
        Self::launch_new(
            Kind::Data { cluster_bus: None },
            None,
            None,
            Some((Some("default".to_string()), admin_password)),
            &args,
        )
    }

    fn launch_new(
        kind: Kind,
        tls_server: Option<TlsFiles>,
        tls_client: Option<TlsFiles>,
        auth: Option<(Option<String>, String)>,
        extra_args: &[&str],
    ) -> RedisServer {
        Self::launch_in(
            fresh_temp_dir(),
            kind,
            tls_server,
            tls_client,
            auth,
            extra_args,
        )
    }

    fn launch_in(
        dir: PathBuf,
        kind: Kind,
        tls_server: Option<TlsFiles>,
        tls_client: Option<TlsFiles>,
        auth: Option<(Option<String>, String)>,
        extra_args: &[&str],
    ) -> RedisServer {
        let mut server = RedisServer {
            port: reserve_free_port(),
            dir,
            kind,
            tls_server,
            tls_client,
            auth,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            child: None,
            frozen: AtomicBool::new(false),
        };
        for attempt in 1..=PORT_ATTEMPTS {
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(e) if e.port_race && attempt < PORT_ATTEMPTS => {
                    // Someone took the port between our probe and the bind.
                    release_port(server.port);
                    server.port = reserve_free_port();
                    if let Kind::Data {
                        cluster_bus: Some(bus),
                    } = server.kind
                    {
                        release_port(bus);
                        server.kind = Kind::Data {
                            cluster_bus: Some(reserve_free_port()),
                        };
                    }
                }
                Err(e) => server.fail(&format!("redis-server did not start: {}", e.message)),
            }
        }
        unreachable!("the last attempt either returns or panics")
    }

    fn command_line(&self) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        let port = self.port.to_string();
        let mut opts: Vec<(&str, String)> = Vec::new();
        match &self.tls_server {
            None => opts.push(("port", port)),
            Some(tls) => opts.extend([
                ("port", "0".into()),
                ("tls-port", port),
                ("tls-cert-file", path(&tls.cert)),
                ("tls-key-file", path(&tls.key)),
                ("tls-ca-cert-file", path(&tls.ca_cert)),
            ]),
        }
        opts.extend([
            ("bind", "127.0.0.1".into()),
            ("dir", path(&self.dir)),
            ("logfile", path(&self.dir.join("redis.log"))),
            ("daemonize", "no".into()),
            // Lets a later test process find and kill an orphan.
            ("pidfile", path(&self.dir.join("redis.pid"))),
        ]);
        if let Kind::Data { cluster_bus } = &self.kind {
            opts.extend([
                ("save", String::new()),
                ("appendonly", "no".into()),
                // Replicas sync at once instead of after the 5 s default delay.
                ("repl-diskless-sync-delay", "0".into()),
            ]);
            if let Some(bus) = cluster_bus {
                opts.extend([
                    ("cluster-enabled", "yes".into()),
                    ("cluster-config-file", "nodes.conf".into()),
                    ("cluster-port", bus.to_string()),
                    ("cluster-node-timeout", "3000".into()),
                ]);
            }
        }
        let mut args: Vec<String> = match &self.kind {
            Kind::Sentinel { conf } => vec![path(conf), "--sentinel".into()],
            Kind::Data { .. } => Vec::new(),
        };
        for (name, value) in opts {
            args.push(format!("--{name}"));
            args.push(value);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }

    fn spawn_and_wait(&mut self) -> Result<(), SpawnError> {
        let stdout_log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("stdout.log"))
            .map_err(|e| SpawnError::other(format!("open stdout.log: {e}")))?;
        let stderr_log = stdout_log
            .try_clone()
            .map_err(|e| SpawnError::other(format!("clone stdout.log: {e}")))?;
        let child = Command::new(redis_server_bin())
            .args(self.command_line())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(stdout_log)
            .stderr(stderr_log)
            .spawn()
            .map_err(|e| SpawnError::other(format!("spawn redis-server: {e}")))?;
        self.child = Some(child);
        self.frozen.store(false, Ordering::SeqCst);

        let mut exited = None;
        let ready = poll_until(START_DEADLINE, || {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                exited = Some(status);
                return Some(false);
            }
            self.answers_ping().then_some(true)
        });
        match ready {
            Some(true) => Ok(()),
            Some(false) => {
                self.child = None;
                let log = self.log_tail();
                Err(SpawnError {
                    port_race: log.contains("Address already in use"),
                    message: match exited {
                        Some(status) => format!("it exited ({status})"),
                        None => "it exited".to_string(),
                    },
                })
            }
            None => {
                self.kill();
                Err(SpawnError::other(format!(
                    "no PING answer within {START_DEADLINE:?}"
                )))
            }
        }
    }

    /// Whether the server answers PING now (NOAUTH counts as answering;
    /// LOADING does not).
    fn answers_ping(&self) -> bool {
        let reply = if self.tls_server.is_some() {
            self.cli_result(&["PING"])
                .or_else(|e| if e.contains("NOAUTH") { Ok(e) } else { Err(e) })
        } else {
            raw_ping(self.port, Duration::from_millis(500))
        };
        matches!(reply, Ok(r) if !r.contains("LOADING"))
    }

    /// The loopback port clients connect to (the TLS port for a TLS server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (no credentials; see [`RedisServer::tls_url`]).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:PORT`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The server's temp dir (data, `redis.log`, `stdout.log`, configs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Running (possibly frozen), i.e. not killed.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Stopped with [`RedisServer::freeze`] and not yet thawed.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Running and not frozen: it can answer commands.
    fn is_live(&self) -> bool {
        self.is_running() && !self.is_frozen()
    }

    /// Runs `redis-cli -p PORT args...` (with TLS files and the harness's
    /// credentials when the server needs them) and returns its stdout,
    /// trimmed. Panics, naming the command and quoting stderr and the log
    /// tail, when redis-cli fails or the reply is an error.
    pub fn cli(&self, args: &[&str]) -> String {
        self.cli_result(args)
            .unwrap_or_else(|e| self.fail(&format!("redis-cli {args:?} failed: {e}")))
    }

    /// Loads the script `lua/<name>.lua` as the service runs it (its
    /// includes spliced in) so that no call meets NOSCRIPT, and returns its
    /// SHA1, as a proxy sees it in `EVALSHA`.
    pub fn script_sha(&self, name: &str) -> String {
        let script = leasehold::store::redis::lua::ALL
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no script lua/{name}.lua"));
        self.cli(&["SCRIPT", "LOAD", script.assembled])
            .trim()
            .to_owned()
    }

    /// [`RedisServer::cli`] without the panic: `Err` carries the error reply
    /// (e.g. `NOPERM ...`, `MOVED ...`) or redis-cli's failure.
    pub fn cli_result(&self, args: &[&str]) -> Result<String, String> {
        let auth = self.auth.as_ref().map(|(u, p)| (u.as_deref(), p.as_str()));
        self.run_cli(auth, args)
    }

    /// Runs redis-cli authenticated as `user`/`password` (ACL tests).
    pub fn cli_as(&self, user: &str, password: &str, args: &[&str]) -> Result<String, String> {
        self.run_cli(Some((Some(user), password)), args)
    }

    /// Runs redis-cli without any credentials.
    pub fn cli_unauthenticated(&self, args: &[&str]) -> Result<String, String> {
        self.run_cli(None, args)
    }

    fn run_cli(&self, auth: Option<(Option<&str>, &str)>, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(redis_cli_bin());
        // -e: exit non-zero on an error reply (and print it to stderr).
        cmd.args(["-e", "-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string());
        if let Some(tls) = &self.tls_client {
            cmd.arg("--tls")
                .arg("--cacert")
                .arg(&tls.ca_cert)
                .arg("--cert")
                .arg(&tls.cert)
                .arg("--key")
                .arg(&tls.key);
        }
        if let Some((user, password)) = auth {
            if let Some(user) = user {
                cmd.args(["--user", user]);
            }
            cmd.args(["-a", password, "--no-auth-warning"]);
        }
        cmd.args(args);
        let out = output_with_timeout(cmd, CLI_TIMEOUT)?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.success() && stderr.is_empty() {
            Ok(stdout)
        } else if stderr.is_empty() {
            Err(format!("{} {stdout}", out.status))
        } else {
            Err(stderr)
        }
    }

    /// SIGKILL and wait. The port stays reserved for [`RedisServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// Starts again on the same port (killing first if still running) and
    /// waits until PING answers. Data is empty (no persistence); a cluster
    /// node keeps its `nodes.conf` and a sentinel its rewritten config.
    pub fn restart(&mut self) {
        self.kill();
        // The port was free when we killed; a stray outgoing connection may
        // briefly hold it as its source port, so retry for a bounded time.
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(e) if e.port_race && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => self.fail(&format!("redis-server did not restart: {}", e.message)),
            }
        }
    }

    /// SIGSTOP: the process stays, its sockets stay open, nothing answers.
    pub fn freeze(&self) {
        let pid = self
            .pid()
            .unwrap_or_else(|| self.fail("freeze: server is not running"));
        if !signal(pid, "STOP") {
            self.fail("freeze: kill -STOP failed");
        }
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// SIGCONT after [`RedisServer::freeze`].
    pub fn thaw(&self) {
        let pid = self
            .pid()
            .unwrap_or_else(|| self.fail("thaw: server is not running"));
        if !signal(pid, "CONT") {
            self.fail("thaw: kill -CONT failed");
        }
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// The last lines of `redis.log` and of the captured stdout/stderr.
    pub fn log_tail(&self) -> String {
        let dir = self.dir.display();
        let log = tail_of(&self.dir.join("redis.log"), 30);
        let out = tail_of(&self.dir.join("stdout.log"), 10);
        let mut s = format!("--- {dir}/redis.log (tail) ---\n{log}");
        if !out.trim().is_empty() {
            s.push_str(&format!("\n--- {dir}/stdout.log (tail) ---\n{out}"));
        }
        s
    }

    fn fail(&self, what: &str) -> ! {
        panic!("redis on port {}: {what}\n{}", self.port, self.log_tail())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        release_port(self.port);
        if let Kind::Data {
            cluster_bus: Some(bus),
        } = self.kind
        {
            release_port(bus);
        }
        remove_temp_dir(&self.dir);
    }
}

struct SpawnError {
    port_race: bool,
    message: String,
}

impl SpawnError {
    fn other(message: String) -> SpawnError {
        SpawnError {
            port_race: false,
            message,
        }
    }
}

// ---------------------------------------------------------------------------
// ReplyDropProxy
// ---------------------------------------------------------------------------

struct ProxyState {
    drop_replies: AtomicBool,
    /// Total server->client bytes discarded; watchers wake on every change.
    dropped: tokio::sync::watch::Sender<u64>,
}

/// A TCP proxy on a free loopback port in front of `upstream`. While
/// [`ReplyDropProxy::drop_replies`] is on, client->server bytes are still
/// forwarded but server->client bytes are discarded: commands execute, their
/// replies never arrive. Drop aborts every task and closes every connection.
///
/// Replies dropped are gone for good: once replies flow again, a connection
/// that lost some is out of step (its next reply answers an old command), as
/// with a real lost reply. Clients must discard such connections.
pub struct ReplyDropProxy {
    addr: SocketAddr,
    state: Arc<ProxyState>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl ReplyDropProxy {
    /// Listens on `127.0.0.1:0`; each accepted connection opens its own
    /// upstream connection. Needs a running tokio runtime.
    pub async fn start(upstream: SocketAddr) -> ReplyDropProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy bind");
        let addr = listener.local_addr().expect("proxy local_addr");
        let state = Arc::new(ProxyState {
            drop_replies: AtomicBool::new(false),
            dropped: tokio::sync::watch::channel(0).0,
        });
        let accept_state = state.clone();
        let accept_task = tokio::spawn(async move {
            // Owned here so that aborting this task aborts every connection.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        connections.spawn(proxy_connection(client, upstream, accept_state.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        ReplyDropProxy {
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

    /// On: discard server->client bytes from now on, on every connection.
    pub fn drop_replies(&self, on: bool) {
        self.state.drop_replies.store(on, Ordering::SeqCst);
    }

    /// Server->client bytes discarded so far.
    pub fn bytes_dropped(&self) -> u64 {
        *self.state.dropped.borrow()
    }

    /// Waits (event-driven, no polling) until at least `at_least` bytes have
    /// been discarded in total; panics after `within`.
    pub async fn wait_for_dropped(&self, at_least: u64, within: Duration) {
        let mut rx = self.state.dropped.subscribe();
        let waited = tokio::time::timeout(within, rx.wait_for(|n| *n >= at_least)).await;
        if !matches!(waited, Ok(Ok(_))) {
            panic!(
                "proxy {}: only {} reply bytes dropped after {within:?}, wanted {at_least}",
                self.addr,
                self.bytes_dropped()
            );
        }
    }
}

impl Drop for ReplyDropProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

async fn proxy_connection(
    client: tokio::net::TcpStream,
    upstream: SocketAddr,
    state: Arc<ProxyState>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
        return; // dropping `client` closes it, as a refused upstream would
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();
    let requests = async {
        let _ = tokio::io::copy(&mut client_rd, &mut server_wr).await;
        let _ = server_wr.shutdown().await;
    };
    let replies = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if state.drop_replies.load(Ordering::SeqCst) {
                state.dropped.send_modify(|total| *total += n as u64);
            } else if client_wr.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_wr.shutdown().await;
    };
    // Either side closing ends the connection as a whole.
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
    }
}

// ---------------------------------------------------------------------------
// RedisCluster
// ---------------------------------------------------------------------------

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct ClusterNodeLine {
    port: u16,
    flags: Vec<String>,
    slots: Vec<(u16, u16)>,
}

impl ClusterNodeLine {
    fn is(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

fn parse_cluster_nodes(text: &str) -> Vec<ClusterNodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            // "127.0.0.1:30001@40001[,hostname]"
            let addr = fields[1].split(['@', ',']).next()?;
            let port = addr.rsplit(':').next()?.parse().ok()?;
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('[')) // migrating/importing markers
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(ClusterNodeLine {
                port,
                flags: fields[2].split(',').map(str::to_string).collect(),
                slots,
            })
        })
        .collect()
}

/// A Redis Cluster of cluster-enabled `redis-server`s created with
/// `redis-cli --cluster create`. Each node's bus port is a separately
/// reserved free port (`--cluster-port`), not port+10000.
pub struct RedisCluster {
    /// Every node, masters and replicas, in start order. Roles change with
    /// failovers: use [`RedisCluster::masters`]/[`RedisCluster::replicas`].
    pub nodes: Vec<RedisServer>,
    masters: usize,
    replicas_per_master: usize,
}

impl RedisCluster {
    /// `masters` (at least 3, as `redis-cli --cluster create` requires) with
    /// `replicas_per_master` replicas each. Returns once every node says
    /// `cluster_state:ok`, all 16384 slots are covered, every node knows every
    /// other, and every replica's link to its master is up.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "RedisCluster::start: redis-cli --cluster create needs at least 3 masters"
        );
        let total = masters * (1 + replicas_per_master);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::launch_new(
                    Kind::Data {
                        cluster_bus: Some(reserve_free_port()),
                    },
                    None,
                    None,
                    None,
                    &[],
                )
            })
            .collect();
        let cluster = RedisCluster {
            nodes,
            masters,
            replicas_per_master,
        };

        let mut cmd = Command::new(redis_cli_bin());
        cmd.arg("--cluster").arg("create");
        cmd.args(
            cluster
                .nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port)),
        );
        cmd.args([
            "--cluster-replicas",
            &replicas_per_master.to_string(),
            "--cluster-yes",
        ]);
        match output_with_timeout(cmd, TOPOLOGY_DEADLINE) {
            Ok(out) if out.status.success() => {}
            Ok(out) => cluster.fail(&format!(
                "redis-cli --cluster create failed: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => cluster.fail(&format!("redis-cli --cluster create: {e}")),
        }
        cluster.wait_settled("cluster did not settle after create");
        cluster
    }

    /// Waits until every live node reports a healthy, fully known cluster
    /// with the expected numbers of masters and replicas.
    fn wait_settled(&self, what: &str) {
        let total = self.nodes.len();
        let live: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.is_live()).collect();
        let expected_replicas = self.masters * self.replicas_per_master;
        let mut last = String::new();
        let settled = poll_until(TOPOLOGY_DEADLINE, || {
            for node in &live {
                let info = node.cli_result(&["CLUSTER", "INFO"]).ok()?;
                let ok = info_field(&info, "cluster_state") == Some("ok")
                    && info_field(&info, "cluster_slots_ok") == Some("16384")
                    && info_field(&info, "cluster_known_nodes") == Some(&total.to_string());
                if !ok {
                    last = format!("node {}: {info}", node.port);
                    return None;
                }
                let view = parse_cluster_nodes(&node.cli_result(&["CLUSTER", "NODES"]).ok()?);
                let masters = view
                    .iter()
                    .filter(|l| l.is("master") && !l.slots.is_empty())
                    .count();
                let replicas = view.iter().filter(|l| l.is("slave")).count();
                if masters != self.masters || replicas != expected_replicas {
                    last = format!(
                        "node {} sees {masters} masters with slots, {replicas} replicas",
                        node.port
                    );
                    return None;
                }
                let repl = node.cli_result(&["INFO", "replication"]).ok()?;
                if info_field(&repl, "role") == Some("slave")
                    && info_field(&repl, "master_link_status") != Some("up")
                {
                    last = format!("replica {}: link to master not up", node.port);
                    return None;
                }
            }
            Some(())
        });
        if settled.is_none() {
            self.fail(&format!(
                "{what} within {TOPOLOGY_DEADLINE:?}; last: {last}"
            ));
        }
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Live nodes whose ROLE is currently master, in start order.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.with_role("master")
    }

    /// Live nodes whose ROLE is currently replica, in start order.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.with_role("slave")
    }

    fn with_role(&self, role: &str) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| n.is_live())
            .filter(|n| {
                n.cli_result(&["ROLE"])
                    .is_ok_and(|r| r.lines().next() == Some(role))
            })
            .collect()
    }

    /// The hash slot of `key` (CLUSTER KEYSLOT).
    pub fn slot_for_key(&self, key: &str) -> u16 {
        let node = self.any_live();
        let out = node.cli(&["CLUSTER", "KEYSLOT", key]);
        out.parse()
            .unwrap_or_else(|_| self.fail(&format!("CLUSTER KEYSLOT {key}: {out}")))
    }

    /// The master currently serving `key`'s slot: the live node that claims
    /// the slot for itself (the `myself,master` line of its CLUSTER NODES).
    pub fn node_for_key(&self, key: &str) -> &RedisServer {
        let slot = self.slot_for_key(key);
        let claims = |n: &&RedisServer| {
            n.is_live()
                && n.cli_result(&["CLUSTER", "NODES"]).is_ok_and(|text| {
                    parse_cluster_nodes(&text)
                        .iter()
                        .any(|l| l.is("myself") && l.is("master") && l.owns(slot))
                })
        };
        self.nodes
            .iter()
            .find(claims)
            .unwrap_or_else(|| self.fail(&format!("no live node serves slot {slot} (key {key:?})")))
    }

    /// CLUSTER FAILOVER on `self.replicas()[replica_idx]` (a coordinated
    /// handover: its master must be live). Waits until it reports role
    /// master, every live node sees it as a master with slots, and the
    /// cluster is settled again.
    pub fn failover_replica(&self, replica_idx: usize) {
        let replicas = self.replicas();
        let replica = *replicas.get(replica_idx).unwrap_or_else(|| {
            self.fail(&format!(
                "failover_replica({replica_idx}): only {} replicas",
                replicas.len()
            ))
        });
        replica.cli(&["CLUSTER", "FAILOVER"]);
        let live: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.is_live()).collect();
        let promoted = poll_until(TOPOLOGY_DEADLINE, || {
            let role = replica.cli_result(&["ROLE"]).ok()?;
            if role.lines().next() != Some("master") {
                return None;
            }
            live.iter()
                .all(|n| {
                    n.cli_result(&["CLUSTER", "NODES"]).is_ok_and(|text| {
                        parse_cluster_nodes(&text).iter().any(|l| {
                            l.port == replica.port && l.is("master") && !l.slots.is_empty()
                        })
                    })
                })
                .then_some(())
        });
        if promoted.is_none() {
            replica.fail(&format!(
                "CLUSTER FAILOVER: not master everywhere within {TOPOLOGY_DEADLINE:?}"
            ));
        }
        if live.len() == self.nodes.len() {
            self.wait_settled("cluster did not settle after failover");
        }
    }

    /// Waits until a live master other than `old_port` serves `key`'s slot
    /// and every live node says `cluster_state:ok`; returns that master.
    /// Use after killing or freezing the key's master: its replica takes
    /// over after cluster-node-timeout (3 s) plus an election.
    pub fn wait_for_new_node_for_key(&self, key: &str, old_port: u16) -> &RedisServer {
        let slot = self.slot_for_key(key);
        let mut last = String::new();
        let owner = poll_until(TOPOLOGY_DEADLINE, || {
            let live: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.is_live()).collect();
            for n in &live {
                let info = n.cli_result(&["CLUSTER", "INFO"]).ok()?;
                if info_field(&info, "cluster_state") != Some("ok") {
                    last = format!("node {} not ok", n.port);
                    return None;
                }
            }
            let owner = live.into_iter().find(|n| {
                n.port != old_port
                    && n.cli_result(&["CLUSTER", "NODES"]).is_ok_and(|text| {
                        parse_cluster_nodes(&text)
                            .iter()
                            .any(|l| l.is("myself") && l.is("master") && l.owns(slot))
                    })
            });
            last = format!("no live node other than {old_port} claims slot {slot}");
            owner
        });
        owner.unwrap_or_else(|| {
            self.fail(&format!(
                "key {key:?} not served by a new master within {TOPOLOGY_DEADLINE:?}; last: {last}"
            ))
        })
    }

    fn any_live(&self) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.is_live())
            .unwrap_or_else(|| self.fail("no live node"))
    }

    fn fail(&self, what: &str) -> ! {
        let logs: Vec<String> = self.nodes.iter().map(RedisServer::log_tail).collect();
        panic!("redis cluster: {what}\n{}", logs.join("\n"))
    }
}

// ---------------------------------------------------------------------------
// RedisSentinelSet
// ---------------------------------------------------------------------------

const SENTINEL_MASTER_NAME: &str = "mymaster";

/// A master, replicas of it and sentinels monitoring it as `mymaster`
/// (quorum = majority of sentinels, down-after 1 s, failover-timeout 5 s).
/// Sentinels are [`RedisServer`]s too: `cli()` talks to them.
pub struct RedisSentinelSet {
    /// The master at start. After a failover it is a replica (or dead):
    /// ask [`RedisSentinelSet::current_master`].
    pub master: RedisServer,
    /// Replicas of the initial master (one may be the master after a failover).
    pub replicas: Vec<RedisServer>,
    /// The sentinels (`redis-server sentinel.conf --sentinel`, a writable copy).
    pub sentinels: Vec<RedisServer>,
}

impl RedisSentinelSet {
    /// Returns once every replica's link is up and every sentinel reports
    /// the master ok, all replicas known and usable, and all other sentinels
    /// discovered (so a failover can be authorised and a replica chosen).
    pub fn start(replicas: usize, sentinels: usize) -> RedisSentinelSet {
        assert!(
            sentinels >= 1,
            "RedisSentinelSet::start: need at least one sentinel"
        );
        let master = RedisServer::start();
        let replica_of = ["--replicaof", "127.0.0.1", &master.port.to_string()].map(str::to_string);
        let replica_of: Vec<&str> = replica_of.iter().map(String::as_str).collect();
        let replicas: Vec<RedisServer> = (0..replicas)
            .map(|_| RedisServer::start_with(&replica_of))
            .collect();
        let quorum = sentinels / 2 + 1;
        let sentinels: Vec<RedisServer> = (0..sentinels)
            .map(|_| {
                let dir = fresh_temp_dir();
                let conf = dir.join("sentinel.conf");
                let text = format!(
                    "sentinel monitor {SENTINEL_MASTER_NAME} 127.0.0.1 {port} {quorum}\n\
                     sentinel down-after-milliseconds {SENTINEL_MASTER_NAME} 1000\n\
                     sentinel failover-timeout {SENTINEL_MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {SENTINEL_MASTER_NAME} 1\n",
                    port = master.port
                );
                fs::write(&conf, text).unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
                RedisServer::launch_in(dir, Kind::Sentinel { conf }, None, None, None, &[])
            })
            .collect();
        let set = RedisSentinelSet {
            master,
            replicas,
            sentinels,
        };
        set.wait_settled();
        set
    }

    /// Waits until every replica is linked and every sentinel sees them all.
    pub fn wait_settled(&self) {
        let mut last = String::new();
        let n_replicas = self.replicas.len();
        let n_sentinels = self.sentinels.len();
        let settled = poll_until(TOPOLOGY_DEADLINE, || {
            for r in &self.replicas {
                let repl = r.cli_result(&["INFO", "replication"]).ok()?;
                if info_field(&repl, "master_link_status") != Some("up") {
                    last = format!("replica {}: link to master not up", r.port);
                    return None;
                }
            }
            for s in &self.sentinels {
                let info = s.cli_result(&["INFO", "sentinel"]).ok()?;
                // master0:name=mymaster,status=ok,address=...,slaves=2,sentinels=3
                let line = info_field(&info, "master0").unwrap_or_default();
                let want = [
                    "status=ok".to_string(),
                    format!("slaves={n_replicas}"),
                    format!("sentinels={n_sentinels}"),
                ];
                if !want.iter().all(|w| line.split(',').any(|f| f == w)) {
                    last = format!("sentinel {}: {line}", s.port);
                    return None;
                }
                let listed = s
                    .cli_result(&["SENTINEL", "REPLICAS", SENTINEL_MASTER_NAME])
                    .ok()?;
                let usable = parse_flat_maps(&listed)
                    .iter()
                    .filter(|m| {
                        field(m, "flags") == Some("slave")
                            && field(m, "master-link-status") == Some("ok")
                    })
                    .count();
                if usable != n_replicas {
                    last = format!("sentinel {}: {usable}/{n_replicas} replicas usable", s.port);
                    return None;
                }
            }
            Some(())
        });
        if settled.is_none() {
            self.fail(&format!(
                "sentinels did not settle within {TOPOLOGY_DEADLINE:?}; last: {last}"
            ));
        }
    }

    /// `"mymaster"`.
    pub fn master_name(&self) -> &str {
        SENTINEL_MASTER_NAME
    }

    /// `redis://127.0.0.1:PORT` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The master's port according to the first live sentinel
    /// (SENTINEL GET-MASTER-ADDR-BY-NAME).
    pub fn current_master_port(&self) -> u16 {
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_live())
            .unwrap_or_else(|| self.fail("no live sentinel"));
        master_port_from(sentinel)
            .unwrap_or_else(|e| sentinel.fail(&format!("GET-MASTER-ADDR-BY-NAME: {e}")))
    }

    /// The data node that is the master now.
    pub fn current_master(&self) -> &RedisServer {
        let port = self.current_master_port();
        self.data_nodes()
            .find(|n| n.port == port)
            .unwrap_or_else(|| self.fail(&format!("master port {port} is none of ours")))
    }

    fn data_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        std::iter::once(&self.master).chain(&self.replicas)
    }

    /// SENTINEL FAILOVER mymaster (retried while the sentinel has no usable
    /// replica yet or a failover is in progress), then waits until every
    /// live sentinel names the same new master and it reports role master.
    /// Returns the new master's port.
    pub fn failover(&self) -> u16 {
        let old = self.current_master_port();
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_live())
            .expect("a live sentinel");
        let mut last = String::new();
        let started = poll_until(TOPOLOGY_DEADLINE, || {
            match sentinel.cli_result(&["SENTINEL", "FAILOVER", SENTINEL_MASTER_NAME]) {
                Ok(_) => Some(()),
                Err(e) => {
                    last = e;
                    None
                }
            }
        });
        if started.is_none() {
            self.fail(&format!(
                "SENTINEL FAILOVER refused until the deadline: {last}"
            ));
        }
        self.wait_for_new_master(old)
    }

    /// Waits until every live sentinel names the same master other than
    /// `old_port` and that node reports role master; returns its port. Use
    /// after killing or freezing the master for an automatic failover
    /// (down-after is 1 s; a failed election is retried after 2 ×
    /// failover-timeout = 10 s, within the 30 s deadline).
    pub fn wait_for_new_master(&self, old_port: u16) -> u16 {
        let mut last = String::new();
        let new = poll_until(TOPOLOGY_DEADLINE, || {
            let ports: Vec<Result<u16, String>> = self
                .sentinels
                .iter()
                .filter(|s| s.is_live())
                .map(master_port_from)
                .collect();
            last = format!("sentinels say {ports:?}");
            let first = ports.first()?.clone().ok()?;
            if first == old_port || !ports.iter().all(|p| *p == Ok(first)) {
                return None;
            }
            let node = self.data_nodes().find(|n| n.port == first)?;
            let role = node.cli_result(&["ROLE"]).ok()?;
            (role.lines().next() == Some("master")).then_some(first)
        });
        new.unwrap_or_else(|| {
            self.fail(&format!(
                "sentinels did not agree on a master other than {old_port} \
                 within {TOPOLOGY_DEADLINE:?}; last: {last}"
            ))
        })
    }

    /// Waits until the first live sentinel lists every data node other than
    /// the master as a usable replica (flags exactly `slave`: not down, not
    /// disconnected). Right after a failover the old master may not be one
    /// yet, and a failover started before would be refused.
    pub fn until_replica_usable(&self) {
        let old = self.current_master_port();
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_live())
            .unwrap_or_else(|| self.fail("until_replica_usable: no live sentinel"));
        let ports: Vec<String> = self
            .data_nodes()
            .filter(|n| n.port != old && n.is_live())
            .map(|n| n.port.to_string())
            .collect();
        let usable = poll_until(TOPOLOGY_DEADLINE, || {
            let listed = sentinel
                .cli_result(&["SENTINEL", "REPLICAS", SENTINEL_MASTER_NAME])
                .ok()?;
            let maps = parse_flat_maps(&listed);
            ports
                .iter()
                .all(|port| {
                    maps.iter().any(|m| {
                        field(m, "port") == Some(port.as_str())
                            && field(m, "flags") == Some("slave")
                    })
                })
                .then_some(())
        });
        if usable.is_none() {
            self.fail(&format!(
                "the sentinel never listed replicas {ports:?} as usable within {TOPOLOGY_DEADLINE:?}"
            ));
        }
    }

    /// An aborted failover: the replica a failover would promote (the one
    /// data node that is not the master; use a set with one replica) is
    /// frozen, `SENTINEL FAILOVER` starts a failover that cannot complete,
    /// and once the sentinel has given up (failover-timeout, 5 s: the flag
    /// `failover_in_progress` clears) the replica is thawed. Returns the
    /// master's port, unchanged.
    pub fn aborted_failover(&self) -> u16 {
        let old = self.current_master_port();
        let replica = self
            .data_nodes()
            .find(|n| n.port != old && n.is_live())
            .unwrap_or_else(|| self.fail("aborted_failover: no replica"));
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_live())
            .unwrap_or_else(|| self.fail("aborted_failover: no live sentinel"));
        self.until_replica_usable();
        replica.freeze();
        if let Err(e) = sentinel.cli_result(&["SENTINEL", "FAILOVER", SENTINEL_MASTER_NAME]) {
            replica.thaw();
            self.fail(&format!(
                "aborted_failover: SENTINEL FAILOVER refused with the replica frozen: {e}"
            ));
        }
        let mut last = String::new();
        let given_up = poll_until(TOPOLOGY_DEADLINE, || {
            let out = sentinel
                .cli_result(&["SENTINEL", "MASTER", SENTINEL_MASTER_NAME])
                .ok()?;
            let mut lines = out.lines();
            let mut flags = None;
            while let Some(key) = lines.next() {
                let value = lines.next().unwrap_or("");
                if key == "flags" {
                    flags = Some(value.to_owned());
                }
            }
            last = flags.clone().unwrap_or_default();
            flags.filter(|f| !f.contains("failover_in_progress"))
        });
        replica.thaw();
        if given_up.is_none() {
            self.fail(&format!(
                "aborted_failover: the failover was still in progress after \
                 {TOPOLOGY_DEADLINE:?} (flags {last})"
            ));
        }
        let now = self.current_master_port();
        if now != old {
            self.fail(&format!(
                "aborted_failover: the master moved from {old} to {now}; the failover completed"
            ));
        }
        old
    }

    fn fail(&self, what: &str) -> ! {
        let logs: Vec<String> = self
            .data_nodes()
            .chain(&self.sentinels)
            .map(RedisServer::log_tail)
            .collect();
        panic!("redis sentinel set: {what}\n{}", logs.join("\n"))
    }
}

fn master_port_from(sentinel: &RedisServer) -> Result<u16, String> {
    let out =
        sentinel.cli_result(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER_NAME])?;
    let mut lines = out.lines();
    let (_ip, port) = (lines.next(), lines.next());
    port.and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| format!("unexpected reply {out:?}"))
}

/// redis-cli's flat rendering of an array of maps (SENTINEL REPLICAS):
/// alternating key/value lines, each map starting at `name`.
fn parse_flat_maps(text: &str) -> Vec<Vec<(String, String)>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut maps: Vec<Vec<(String, String)>> = Vec::new();
    for pair in lines.chunks(2) {
        let [k, v] = pair else { break };
        if *k == "name" || maps.is_empty() {
            maps.push(Vec::new());
        }
        if let Some(m) = maps.last_mut() {
            m.push((k.to_string(), v.to_string()));
        }
    }
    maps
}

fn field<'a>(map: &'a [(String, String)], key: &str) -> Option<&'a str> {
    map.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

// ---------------------------------------------------------------------------
// TlsMaterial
// ---------------------------------------------------------------------------

/// Certificates made with the openssl CLI (EC P-256 keys in PKCS#8, X.509
/// v3, valid 2 days) in a temp dir removed on drop:
/// a CA; a server certificate signed by it for `IP:127.0.0.1, DNS:localhost`
/// (serverAuth); a client certificate signed by it (clientAuth); and an
/// unrelated CA that signed nothing we serve.
pub struct TlsMaterial {
    /// The temp dir holding every file (keys, CSRs, configs too).
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA that signed nothing here: trusting only it must fail.
    pub other_ca_cert: PathBuf,
}

impl TlsMaterial {
    /// Runs the openssl CLI (a handful of ms per step); panics with its
    /// stderr on failure.
    pub fn generate() -> TlsMaterial {
        let openssl = require_binary("openssl", "openssl");
        let dir = fresh_temp_dir();
        let run = |args: &[&str]| {
            let out = Command::new(&openssl)
                .args(args)
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|e| panic!("spawn openssl: {e}"));
            if !out.status.success() {
                panic!(
                    "openssl {args:?} failed in {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        let write = |name: &str, text: &str| {
            fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("write {name}: {e}"));
        };
        let genkey = |name: &str| {
            run(&[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                name,
            ]);
        };
        // Own minimal configs: independent of the system openssl.cnf.
        for (name, cn) in [
            ("ca", "leasehold test CA"),
            ("other-ca", "leasehold unrelated CA"),
        ] {
            write(
                &format!("{name}.cnf"),
                &format!(
                    "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3_ca\n\
                     [dn]\nCN = {cn}\n\
                     [v3_ca]\nbasicConstraints = critical,CA:TRUE\n\
                     keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
                ),
            );
            genkey(&format!("{name}.key"));
            run(&[
                "req",
                "-x509",
                "-new",
                "-config",
                &format!("{name}.cnf"),
                "-key",
                &format!("{name}.key"),
                "-sha256",
                "-days",
                "2",
                "-out",
                &format!("{name}.crt"),
            ]);
        }
        for (name, cn, ext) in [
            (
                "server",
                "127.0.0.1",
                "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1,DNS:localhost\n",
            ),
            (
                "client",
                "leasehold test client",
                "extendedKeyUsage = clientAuth\n",
            ),
        ] {
            write(
                &format!("{name}.ext"),
                &format!(
                    "basicConstraints = critical,CA:FALSE\n\
                     keyUsage = critical,digitalSignature,keyEncipherment\n\
                     subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n{ext}"
                ),
            );
            genkey(&format!("{name}.key"));
            run(&[
                "req",
                "-new",
                "-key",
                &format!("{name}.key"),
                "-subj",
                &format!("/CN={cn}"),
                "-out",
                &format!("{name}.csr"),
            ]);
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-sha256",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ]);
        }
        TlsMaterial {
            ca_cert: dir.join("ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
            other_ca_cert: dir.join("other-ca.crt"),
            dir,
        }
    }
}

impl TlsMaterial {
    /// Issues one more certificate from the CA for `IP:127.0.0.1,
    /// DNS:localhost` (e.g. the next one of a rotation) and returns its
    /// `(cert, key)` paths in [`TlsMaterial::dir`]. `client_auth_too`: with
    /// the clientAuth usage as well as serverAuth (a serving certificate
    /// that can also present itself as a client).
    pub fn issue_server_cert(&self, name: &str, client_auth_too: bool) -> (PathBuf, PathBuf) {
        let openssl = require_binary("openssl", "openssl");
        let run = |args: &[&str]| {
            let out = Command::new(&openssl)
                .args(args)
                .current_dir(&self.dir)
                .output()
                .unwrap_or_else(|e| panic!("spawn openssl: {e}"));
            if !out.status.success() {
                panic!(
                    "openssl {args:?} failed in {}: {}",
                    self.dir.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        let usage = if client_auth_too {
            "serverAuth,clientAuth"
        } else {
            "serverAuth"
        };
        let (key, csr, ext, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}.crt"),
        );
        fs::write(
            self.dir.join(&ext),
            format!(
                "basicConstraints = critical,CA:FALSE\n\
                 keyUsage = critical,digitalSignature,keyEncipherment\n\
                 subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n\
                 extendedKeyUsage = {usage}\nsubjectAltName = IP:127.0.0.1,DNS:localhost\n"
            ),
        )
        .unwrap_or_else(|e| panic!("write {ext}: {e}"));
        run(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &key,
        ]);
        run(&[
            "req",
            "-new",
            "-key",
            &key,
            "-subj",
            "/CN=127.0.0.1",
            "-out",
            &csr,
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-sha256",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ]);
        (self.dir.join(crt), self.dir.join(key))
    }
}

impl Drop for TlsMaterial {
    fn drop(&mut self) {
        remove_temp_dir(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// Refusals: a server made to refuse commands on purpose
// ---------------------------------------------------------------------------

/// How long a server may take to reach a refusing (or normal) state.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(15);

impl RedisServer {
    /// An integer field of `INFO section`, e.g. `("stats",
    /// "total_connections_received")`. Panics when it is missing.
    pub fn info_u64(&self, section: &str, key: &str) -> u64 {
        let info = self.cli(&["INFO", section]);
        info_field(&info, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| self.fail(&format!("INFO {section} has no integer {key}")))
    }

    /// `total_connections_received`: connections accepted since start. The
    /// `redis-cli` that asks is itself one of them.
    pub fn connections_received(&self) -> u64 {
        self.info_u64("stats", "total_connections_received")
    }

    /// Makes writes fail with MISCONF: a save point is configured and the
    /// RDB target (`dump.rdb` in the server's dir) is made a directory, so
    /// a BGSAVE fails at its final rename (whoever runs the tests, root
    /// included) and `stop-writes-on-bgsave-error` (on by default) refuses
    /// every write. Returns once INFO says the last BGSAVE failed.
    pub fn break_persistence(&self) {
        self.wait_no_bgsave();
        let target = self.dir.join("dump.rdb");
        let _ = fs::remove_file(&target);
        fs::create_dir_all(&target)
            .unwrap_or_else(|e| self.fail(&format!("mkdir {}: {e}", target.display())));
        self.cli(&["CONFIG", "SET", "stop-writes-on-bgsave-error", "yes"]);
        self.cli(&["CONFIG", "SET", "save", "3600 1"]);
        self.cli(&["BGSAVE"]);
        self.wait_bgsave_status("err");
    }

    /// Undoes [`RedisServer::break_persistence`]: the directory goes, a
    /// BGSAVE succeeds (which is what lifts MISCONF), then the save point is
    /// removed again. Returns once INFO says the last BGSAVE succeeded.
    pub fn repair_persistence(&self) {
        self.wait_no_bgsave();
        let target = self.dir.join("dump.rdb");
        fs::remove_dir_all(&target)
            .unwrap_or_else(|e| self.fail(&format!("rmdir {}: {e}", target.display())));
        self.cli(&["BGSAVE"]);
        self.wait_bgsave_status("ok");
        self.cli(&["CONFIG", "SET", "save", ""]);
    }

    fn wait_no_bgsave(&self) {
        poll_until(REFUSAL_DEADLINE, || {
            (self.info_u64("persistence", "rdb_bgsave_in_progress") == 0).then_some(())
        })
        .unwrap_or_else(|| self.fail("a BGSAVE is still in progress"));
    }

    fn wait_bgsave_status(&self, want: &str) {
        poll_until(REFUSAL_DEADLINE, || {
            let info = self.cli(&["INFO", "persistence"]);
            let done = info_field(&info, "rdb_bgsave_in_progress") == Some("0");
            (done && info_field(&info, "rdb_last_bgsave_status") == Some(want)).then_some(())
        })
        .unwrap_or_else(|| self.fail(&format!("rdb_last_bgsave_status never became {want}")));
    }

    /// Starts a Lua script that loops forever on a connection of its own
    /// (`redis-cli EVAL "while true do end" 0`) and returns once another
    /// client is answered BUSY. Set `busy-reply-threshold` low first (e.g.
    /// `--busy-reply-threshold 100` at start): until it passes, other
    /// clients are not answered at all. [`BusyScript::end`] (or drop) ends
    /// it with SCRIPT KILL.
    pub fn start_busy_script(&self) -> BusyScript<'_> {
        let mut cmd = Command::new(redis_cli_bin());
        cmd.args(["-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string());
        if let Some((user, password)) = &self.auth {
            if let Some(user) = user {
                cmd.args(["--user", user]);
            }
            cmd.args(["-a", password, "--no-auth-warning"]);
        }
        let child = cmd
            .args(["EVAL", "while true do end", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| self.fail(&format!("spawn redis-cli EVAL: {e}")));
        let mut busy = BusyScript {
            server: self,
            child: Some(child),
            connections: 1,
        };
        let seen = poll_until(REFUSAL_DEADLINE, || {
            busy.connections += 1;
            match self.cli_result(&["GET", "leasehold-test-busy-probe"]) {
                Err(e) if e.contains("BUSY") => Some(()),
                _ => None,
            }
        });
        if seen.is_none() {
            self.fail("no client was answered BUSY while a script looped");
        }
        busy
    }
}

/// A Lua script looping forever on its own connection (see
/// [`RedisServer::start_busy_script`]). Ended with SCRIPT KILL on
/// [`BusyScript::end`] or drop.
pub struct BusyScript<'a> {
    server: &'a RedisServer,
    child: Option<Child>,
    connections: u64,
}

impl BusyScript<'_> {
    /// Connections the harness opened to start, watch and (once ended) kill
    /// the script, for tests that count `total_connections_received`.
    pub fn connections(&self) -> u64 {
        self.connections
    }

    /// SCRIPT KILL, then waits until the looping client got its error and
    /// exited and the server answers other clients again. Returns every
    /// connection the harness opened for the script (see
    /// [`BusyScript::connections`]).
    pub fn end(mut self) -> u64 {
        self.stop();
        let server = self.server;
        let mut pings = 0;
        poll_until(REFUSAL_DEADLINE, || {
            pings += 1;
            server.cli_result(&["PING"]).ok().filter(|r| r == "PONG")
        })
        .unwrap_or_else(|| server.fail("still BUSY after SCRIPT KILL"));
        self.connections + pings
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        self.connections += 1;
        if let Err(e) = self.server.cli_result(&["SCRIPT", "KILL"]) {
            let _ = child.kill();
            let _ = child.wait();
            self.server.fail(&format!("SCRIPT KILL failed: {e}"));
        }
        let _ = child.wait();
    }
}

impl Drop for BusyScript<'_> {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = self.server.cli_result(&["SCRIPT", "KILL"]);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
