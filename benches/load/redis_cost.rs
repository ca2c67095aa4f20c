//! `redis-cost` (issue 41, §20): what one uncontended lease costs Redis,
//! against the minimal correct Redis lock (`SET key token NX PX ttl`, then
//! a compare-and-delete script) measured in the same run.
//!
//! Each side runs on its own fresh `redis-server` on a free loopback port;
//! leasehold is driven over HTTP through a real service process pointed at
//! that Redis (so the figures are the service's real script calls, default
//! settings, history on), the minimal lock by a RESP client:
//!
//! * Redis instructions per cycle, by callgrind: `redis-server` runs under
//!   `valgrind --tool=callgrind --instr-atstart=no`; `callgrind_control`
//!   switches instrumentation on, zeroes the counters, the cycles run one
//!   after the other, then it dumps; the instructions Redis spends idle
//!   (its `serverCron`, the service's own periodic calls), measured the same
//!   way over an idle window right after, are taken off per second of the
//!   measured window. Two cycles: acquire + release, and acquire + renew ×3
//!   + release.
//! * Bytes per held plain lease (holder label `worker-7`): the
//!   `used_memory` delta over N acquires on distinct resources, / N.
//! * What a released resource leaves behind: the same N leases released,
//!   then the `used_memory` delta against the fresh server / N, and the
//!   longest PTTL among the keys left, by key kind.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use redis::aio::MultiplexedConnection;

use crate::consts::{LEASE_TTL_MS, NAMESPACE, PURPOSE};
use crate::http_client::{digest, lease_path, Client, Http};
use crate::opts::Opts;
use crate::procs::{find_on_path, free_port, poll_until, stop_child, temp_dir, RedisProc, Service};

/// The goals of §20 / issue 41.
const INSTRUCTIONS_RATIO: f64 = 3.0;
const HELD_BYTES_RATIO: f64 = 2.0;
const RESIDUE_LIFETIME_MS: i64 = 3_600_000;
/// Unmeasured cycles after instrumentation is switched on: the first runs
/// of every path are translated by valgrind (slow, not counted anyway).
const WARMUP_CYCLES: u64 = 20;
/// The idle window whose instruction rate is taken off the measured one.
const IDLE_WINDOW: Duration = Duration::from_secs(3);
/// The service's bound on a store call when Redis runs under callgrind.
const CG_COMMAND_TIMEOUT_MS: &str = "4000";
/// The holder label of every acquire, as in issue 41's figures.
const HOLDER: &str = "worker-7";
/// The minimal lock's release and renew: compare, then delete / expire.
const MIN_RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
const MIN_RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";

/// One side of the comparison, driving one lease at a time.
enum Driver {
    Min {
        conn: MultiplexedConnection,
        token: String,
        release: redis::Script,
        renew: redis::Script,
    },
    Lease {
        http: Http,
        client: Client,
    },
}

impl Driver {
    async fn min(url: &str) -> Result<Self, String> {
        Ok(Self::Min {
            conn: connect(url).await?,
            token: Client::new(0)?.token,
            release: redis::Script::new(MIN_RELEASE),
            renew: redis::Script::new(MIN_RENEW),
        })
    }

    async fn lease(service: &Service) -> Result<Self, String> {
        Ok(Self::Lease {
            http: Http::connect(service.addr).await?,
            client: Client::new(7)?,
        })
    }

    async fn acquire(&mut self, digest: &str) -> Result<(), String> {
        match self {
            Self::Min { conn, token, .. } => {
                let ok: Option<String> = redis::cmd("SET")
                    .arg(min_key(digest))
                    .arg(&*token)
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE_TTL_MS)
                    .query_async(conn)
                    .await
                    .map_err(|e| format!("SET NX PX: {e}"))?;
                ok.map(drop).ok_or_else(|| "SET NX PX: not set".into())
            }
            Self::Lease { http, client } => {
                let body = Bytes::from(format!(
                    "{{\"ttlMs\":{LEASE_TTL_MS},\"holder\":\"{HOLDER}\"}}"
                ));
                lease_call(http, client, Method::PUT, digest, Some(&body), 201).await
            }
        }
    }

    async fn renew(&mut self, digest: &str) -> Result<(), String> {
        match self {
            Self::Min {
                conn, token, renew, ..
            } => {
                let n: i64 = renew
                    .key(min_key(digest))
                    .arg(&*token)
                    .arg(LEASE_TTL_MS)
                    .invoke_async(conn)
                    .await
                    .map_err(|e| format!("renew script: {e}"))?;
                (n == 1)
                    .then_some(())
                    .ok_or_else(|| "renew: not held".into())
            }
            Self::Lease { http, client } => {
                let body = Bytes::from(format!("{{\"ttlMs\":{LEASE_TTL_MS}}}"));
                lease_call(http, client, Method::PATCH, digest, Some(&body), 200).await
            }
        }
    }

    async fn release(&mut self, digest: &str) -> Result<(), String> {
        match self {
            Self::Min {
                conn,
                token,
                release,
                ..
            } => {
                let n: i64 = release
                    .key(min_key(digest))
                    .arg(&*token)
                    .invoke_async(conn)
                    .await
                    .map_err(|e| format!("release script: {e}"))?;
                (n == 1)
                    .then_some(())
                    .ok_or_else(|| "release: not held".into())
            }
            Self::Lease { http, client } => {
                lease_call(http, client, Method::DELETE, digest, None, 200).await
            }
        }
    }

    /// One cycle on `digest`: acquire, `renews` renews, release.
    async fn cycle(&mut self, digest: &str, renews: usize) -> Result<(), String> {
        self.acquire(digest).await?;
        for _ in 0..renews {
            self.renew(digest).await?;
        }
        self.release(digest).await
    }
}

/// The operation id of the attempt on `digest` (see `digest()`'s layout:
/// salt and worker, then the low digits of the counter).
fn op_of(digest: &str) -> String {
    let n = digest.len();
    format!(
        "op-{}-{}",
        &digest[3..19.min(n)],
        &digest[n.saturating_sub(12)..]
    )
}

/// The minimal lock's key: the length and hash tag of leasehold's lease key.
fn min_key(digest: &str) -> String {
    format!("{NAMESPACE}:lease:v2:{{{PURPOSE}:{digest}}}")
}

async fn lease_call(
    http: &mut Http,
    client: &Client,
    method: Method,
    digest: &str,
    body: Option<&Bytes>,
    want: u16,
) -> Result<(), String> {
    // The attempt (owner token + operation id): one per resource, for its
    // acquire, renews and release.
    let op = op_of(digest);
    let headers = [
        ("lease-owner-token", client.token.as_str()),
        ("lease-operation-id", op.as_str()),
    ];
    let path = lease_path(digest);
    match http.call(method.clone(), &path, &headers, body).await? {
        (s, _) if s == want => Ok(()),
        (s, b) => Err(format!(
            "{method} {path}: {s} {}",
            String::from_utf8_lossy(&b[..b.len().min(300)])
        )),
    }
}

async fn connect(url: &str) -> Result<MultiplexedConnection, String> {
    // Redis under callgrind answers some 50 times slower than usual.
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(10)))
        .set_connection_timeout(Some(Duration::from_secs(10)));
    redis::Client::open(url)
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("connect {url}: {e}"))
}

async fn used_memory(conn: &mut MultiplexedConnection) -> Result<i64, String> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .map_err(|e| format!("INFO memory: {e}"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO memory without used_memory".into())
}

pub(crate) fn require_valgrind() -> Result<(), String> {
    for tool in ["valgrind", "callgrind_control"] {
        if find_on_path(tool).is_none() {
            return Err(format!(
                "redis-cost needs {tool} on PATH: apt-get install valgrind (benches/README.md, prerequisites)"
            ));
        }
    }
    Ok(())
}

/// A `redis-server` under callgrind, instrumentation off until asked.
pub(crate) struct CgRedis {
    child: Child,
    port: u16,
    dir: PathBuf,
    dumps: usize,
}

impl CgRedis {
    pub(crate) fn start(tag: &str) -> Result<Self, String> {
        let dir = temp_dir(&format!("cost-{tag}"))?;
        let port = free_port()?;
        let mut child = Command::new("valgrind")
            .args(["--tool=callgrind", "--instr-atstart=no"])
            .arg(format!("--callgrind-out-file={}/cg.out", dir.display()))
            .args(["redis-server", "--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn valgrind redis-server: {e}"))?;
        let url = format!("redis://127.0.0.1:{port}/");
        let ready = poll_until(Duration::from_secs(60), || {
            matches!(child.try_wait(), Ok(Some(_)))
                || redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok()
        });
        if !ready || !matches!(child.try_wait(), Ok(None)) {
            stop_child(&mut child, Duration::from_secs(5));
            return Err("redis-server under callgrind did not start".into());
        }
        Ok(Self {
            child,
            port,
            dir,
            dumps: 0,
        })
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub(crate) fn control(&self, args: &[&str]) -> Result<(), String> {
        let out = Command::new("callgrind_control")
            .args(args)
            .arg(self.child.id().to_string())
            .output()
            .map_err(|e| format!("callgrind_control: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "callgrind_control {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Dumps the counters (to `cg.out.<n>`) and returns their total.
    pub(crate) fn dump(&mut self) -> Result<u64, String> {
        self.control(&["-d"])?;
        self.dumps += 1;
        let path = self.dir.join(format!("cg.out.{}", self.dumps));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        text.lines()
            .find_map(|l| l.strip_prefix("totals:").or(l.strip_prefix("summary:")))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| format!("{}: no totals", path.display()))
    }
}

impl Drop for CgRedis {
    fn drop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(30));
        if std::env::var_os("LOAD_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Redis instructions per measured cycle, and the idle rate taken off.
struct Counted {
    per_cycle: f64,
    idle_per_s: f64,
}

/// Runs `cycles` cycles with `renews` renews each between zero and dump,
/// then the idle window; `salt` keeps the resources distinct.
async fn count(
    cg: &mut CgRedis,
    driver: &mut Driver,
    cycles: u64,
    renews: usize,
    salt: u32,
) -> Result<Counted, String> {
    cg.control(&["-i", "on"])?;
    for n in 0..WARMUP_CYCLES {
        driver.cycle(&digest(salt, 0, n), renews).await?;
    }
    cg.control(&["-z"])?;
    let t0 = Instant::now();
    for n in 0..cycles {
        driver.cycle(&digest(salt, 1, n), renews).await?;
    }
    let window = t0.elapsed();
    let total = cg.dump()?;
    cg.control(&["-z"])?;
    let i0 = Instant::now();
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle = cg.dump()?;
    let idle_per_s = idle as f64 / i0.elapsed().as_secs_f64();
    cg.control(&["-i", "off"])?;
    let busy = total as f64 - idle_per_s * window.as_secs_f64();
    Ok(Counted {
        per_cycle: busy / cycles as f64,
        idle_per_s,
    })
}

/// The instruction counts of one side: acquire + release, then with renews.
async fn instructions(opts: &Opts, leasehold: bool) -> Result<[Counted; 2], String> {
    let tag = if leasehold { "leasehold" } else { "min" };
    let mut cg = CgRedis::start(tag)?;
    let mut service = None;
    let mut driver = if leasehold {
        // Callgrind slows Redis some 50 times: the default 200 ms bound
        // on a store call would turn the first runs into `indeterminate`.
        let env = [("LEASEHOLD_COMMAND_TIMEOUT_MS", CG_COMMAND_TIMEOUT_MS)];
        let s =
            Service::start_with_env(opts, &cg.url(), &Service::new_build(), "cost-service", &env)
                .await?;
        let d = Driver::lease(&s).await?;
        service = Some(s);
        d
    } else {
        Driver::min(&cg.url()).await?
    };
    let plain = count(&mut cg, &mut driver, opts.cost_cycles, 0, 0xc0).await?;
    let renewed = count(&mut cg, &mut driver, opts.cost_cycles, 3, 0xc3).await?;
    drop(driver);
    if let Some(mut s) = service {
        s.stop();
    }
    if std::env::var_os("LOAD_KEEP_LOGS").is_some() {
        println!(
            "redis-cost: callgrind dumps of {tag} in {}",
            cg.dir.display()
        );
    }
    Ok([plain, renewed])
}

/// What is held and what is left, per lease.
struct Memory {
    held_bytes: f64,
    left_bytes: f64,
    /// Longest PTTL left, ms (`None`: nothing left; -1: a key without TTL).
    longest_ms: Option<i64>,
    /// Per key kind: (kind, keys, longest PTTL ms).
    kinds: Vec<(String, u64, i64)>,
}

async fn memory(opts: &Opts, leasehold: bool) -> Result<Memory, String> {
    let redis = RedisProc::start()?;
    let url = redis.url();
    let mut admin = connect(&url).await?;
    let mut service = None;
    let mut driver = if leasehold {
        let s = Service::start(opts, &url, &Service::new_build(), "cost-memory").await?;
        let d = Driver::lease(&s).await?;
        service = Some(s);
        d
    } else {
        Driver::min(&url).await?
    };
    // Scripts loaded and connections open before the baseline (its one
    // resource's residue counts in the baseline, not per lease).
    driver.cycle(&digest(0xa0, 9, 0), 0).await?;
    let n = opts.cost_leases;
    let before = used_memory(&mut admin).await?;
    for i in 0..n {
        driver.acquire(&digest(0xa1, 0, i)).await?;
    }
    let held = used_memory(&mut admin).await?;
    for i in 0..n {
        driver.release(&digest(0xa1, 0, i)).await?;
    }
    let left = used_memory(&mut admin).await?;
    let mut kinds: Vec<(String, u64, i64)> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut admin)
            .await
            .map_err(|e| format!("SCAN: {e}"))?;
        for key in keys {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut admin)
                .await
                .map_err(|e| format!("PTTL: {e}"))?;
            // `<namespace>:<kind>:v2:{...}`: the kind; any other name whole.
            let kind = key
                .split(':')
                .nth(1)
                .filter(|_| key.starts_with(NAMESPACE))
                .unwrap_or(&key)
                .to_owned();
            // No TTL (-1) outlives everything.
            let life = if pttl == -1 { i64::MAX } else { pttl };
            match kinds.iter_mut().find(|(k, ..)| *k == kind) {
                Some(e) => {
                    e.1 += 1;
                    e.2 = e.2.max(life);
                }
                None => kinds.push((kind, 1, life)),
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    drop(driver);
    if let Some(mut s) = service {
        s.stop();
    }
    kinds.sort();
    Ok(Memory {
        held_bytes: (held - before) as f64 / n as f64,
        left_bytes: (left - before) as f64 / n as f64,
        longest_ms: kinds.iter().map(|k| k.2).max(),
        kinds,
    })
}

fn life(ms: i64) -> String {
    match ms {
        i64::MAX => "no TTL".into(),
        ms if ms >= 86_400_000 => format!("{:.2} d", ms as f64 / 86_400_000.0),
        ms if ms >= 3_600_000 => format!("{:.2} h", ms as f64 / 3_600_000.0),
        ms => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

fn kinds_text(m: &Memory) -> String {
    if m.kinds.is_empty() {
        return "nothing".into();
    }
    m.kinds
        .iter()
        .map(|(k, n, ms)| format!("{n} × `{k}` ≤ {}", life(*ms)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the scenario; the summary's section and whether every goal was met.
pub(crate) async fn run(opts: &Opts) -> Result<(String, bool), String> {
    require_valgrind()?;
    println!("redis-cost: callgrind, minimal lock");
    let min_i = instructions(opts, false).await?;
    println!("redis-cost: callgrind, leasehold");
    let lh_i = instructions(opts, true).await?;
    println!("redis-cost: memory");
    let min_m = memory(opts, false).await?;
    let lh_m = memory(opts, true).await?;

    let mut out = format!(
        "\n## Redis cost per lease (issue 41): against the minimal lock, each on its own fresh redis-server\n\n\
         {} measured cycles per figure, one at a time; {} leases held then released for memory.\n\n\
         | per uncontended lease | minimal lock | leasehold | ratio |\n|---|---|---|---|\n",
        opts.cost_cycles, opts.cost_leases
    );
    let rows = [
        ("Redis instructions, acquire + release", 0),
        ("Redis instructions, acquire + renew ×3 + release", 1),
    ];
    for (text, i) in rows {
        let (m, l) = (min_i[i].per_cycle, lh_i[i].per_cycle);
        let _ = writeln!(
            out,
            "| {text} | {:.1} k | {:.1} k | {:.2} × |",
            m / 1000.0,
            l / 1000.0,
            l / m
        );
    }
    let _ = writeln!(
        out,
        "| bytes while held (plain lease, holder `{HOLDER}`) | {:.0} | {:.0} | {:.2} × |",
        min_m.held_bytes,
        lh_m.held_bytes,
        lh_m.held_bytes / min_m.held_bytes
    );
    let _ = writeln!(
        out,
        "| bytes left behind per released resource | {:.0} | {:.0} | |",
        min_m.left_bytes, lh_m.left_bytes
    );
    let _ = writeln!(
        out,
        "| keys left behind (per kind, longest PTTL) | {} | {} | |",
        kinds_text(&min_m),
        kinds_text(&lh_m)
    );
    let _ = writeln!(
        out,
        "\nidle Redis instructions taken off (per second of window): minimal lock {:.0}, {:.0}; leasehold {:.0}, {:.0}",
        min_i[0].idle_per_s, min_i[1].idle_per_s, lh_i[0].idle_per_s, lh_i[1].idle_per_s
    );

    let _ = writeln!(out, "\n### Goals of issue 41 (§20)\n");
    let mut ok = true;
    let mut goal = |met: bool, text: &str, figure: String| {
        ok &= met;
        let mark = if met { "met    " } else { "MISSED " };
        let _ = writeln!(out, "- {mark} {text}: {figure}");
    };
    for (text, i) in [
        ("acquire + release", 0),
        ("acquire + renew ×3 + release", 1),
    ] {
        let r = lh_i[i].per_cycle / min_i[i].per_cycle;
        goal(
            r <= INSTRUCTIONS_RATIO,
            &format!("Redis instructions, {text} ≤ {INSTRUCTIONS_RATIO} × the minimal lock"),
            format!("{r:.2} ×"),
        );
    }
    let r = lh_m.held_bytes / min_m.held_bytes;
    goal(
        r <= HELD_BYTES_RATIO,
        &format!("bytes per held plain lease ≤ {HELD_BYTES_RATIO} × the minimal lock"),
        format!("{r:.2} ×"),
    );
    let longest = lh_m.longest_ms.unwrap_or(0);
    goal(
        longest <= RESIDUE_LIFETIME_MS,
        "what a released resource leaves lives ≤ 1 h",
        match lh_m.longest_ms {
            None => "nothing left".into(),
            Some(ms) => format!("{} ({:.0} bytes per resource)", life(ms), lh_m.left_bytes),
        },
    );
    Ok((out, ok))
}
