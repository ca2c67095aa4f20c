//! The sessions' scenarios (issue 42, docs/design.md §18-§19).
//!
//! * `session-renew`: one session renew of [`LEASES`] attached leases
//!   against [`LEASES`] separate lease renews, in the same run on the same
//!   `redis-server` under callgrind (as `redis-cost` counts: instrumentation
//!   switched on, counters zeroed, the calls one after the other, dumped,
//!   an idle window's rate taken off): HTTP calls and Redis instructions.
//!   The goal: the session renew's Redis work at most half the separate
//!   renews' (the renews after the first: the renewing instance then
//!   remembers each lease's record). Printed beside it: the first session
//!   renew on a second instance, which remembers none.
//! * `keepalive-streams`: [`STREAMS`] keep-alive streams open at once on
//!   one instance (each on its own session, no leases): the service's RSS
//!   delta per stream (goal ≤ 4 KiB), and the Redis work of keeping them
//!   alive per session and renewal (calls and Redis's own `usec` from
//!   `INFO commandstats`) at 100 and at [`STREAMS`] sessions: flat.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use http::Method;
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::consts::PURPOSE;
use crate::http_client::{digest, lease_path, Client, Http};
use crate::opts::Opts;
use crate::procs::status_kb;
use crate::procs::{RedisProc, Service};

/// Leases on the session (and renewed one by one against it).
const LEASES: u64 = 1000;
/// The TTL of the session and of every lease.
const TTL_MS: u64 = 600_000;
/// Session renews counted (their mean is the figure).
const SESSION_RENEWS: u64 = 5;
/// The goal: a session renew's Redis work against N separate renews.
const RENEW_RATIO: f64 = 0.5;
/// The idle window whose instruction rate is taken off the measured one.
const IDLE_WINDOW: Duration = Duration::from_secs(3);
/// Streams open at once (and the small count the work is compared with).
const STREAMS: usize = 10_000;
const FEW_STREAMS: usize = 100;
/// The keep-alive sessions' TTL: renewed every third of it.
const KEEPALIVE_TTL_MS: u64 = 6_000;
/// The window the Redis work is counted over: three renewals.
const WORK_WINDOW: Duration = Duration::from_millis(KEEPALIVE_TTL_MS);
/// The goal of §19: the service's memory per open stream.
const BYTES_PER_STREAM: f64 = 4096.0;

fn headers<'a>(token: &'a str, op: &'a str) -> [(&'a str, &'a str); 2] {
    [("lease-owner-token", token), ("lease-operation-id", op)]
}

async fn expect(
    http: &mut Http,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Bytes>,
    want: u16,
) -> Result<Bytes, String> {
    match http.call(method.clone(), path, headers, body).await? {
        (s, b) if s == want => Ok(b),
        (s, b) => Err(format!(
            "{method} {path}: {s} {}",
            String::from_utf8_lossy(&b[..b.len().min(300)])
        )),
    }
}

/// Makes a session of `ttl_ms` for `client`; its id.
async fn create_session(
    http: &mut Http,
    client: &mut Client,
    ttl_ms: u64,
) -> Result<String, String> {
    let op = client.next_op();
    let body = Bytes::from(format!("{{\"ttlMs\":{ttl_ms}}}"));
    let h = headers(&client.token, &op);
    let b = expect(http, Method::POST, "/sessions", &h, Some(&body), 201).await?;
    let v: serde_json::Value =
        serde_json::from_slice(&b).map_err(|e| format!("POST /sessions: {e}"))?;
    v["session"]["id"]
        .as_str()
        .map(ToOwned::to_owned)
        .ok_or_else(|| format!("POST /sessions without an id: {v}"))
}

// ---------------------------------------------------------------------------
// session-renew
// ---------------------------------------------------------------------------

/// Instructions (total, window) while `work` runs, counters zeroed first.
async fn counted<F: std::future::Future<Output = Result<(), String>>>(
    cg: &mut crate::redis_cost::CgRedis,
    work: F,
) -> Result<(u64, Duration), String> {
    cg.control(&["-z"])?;
    let t0 = std::time::Instant::now();
    work.await?;
    let window = t0.elapsed();
    Ok((cg.dump()?, window))
}

async fn renew_session(http: &mut Http, client: &Client, id: &str) -> Result<(), String> {
    let body = Bytes::from(format!("{{\"ttlMs\":{TTL_MS}}}"));
    let h = [("lease-owner-token", client.token.as_str())];
    let path = format!("/sessions/{id}");
    let b = expect(http, Method::PATCH, &path, &h, Some(&body), 200).await?;
    let v: serde_json::Value =
        serde_json::from_slice(&b).map_err(|e| format!("PATCH {path}: {e}"))?;
    match v["lost"].as_array() {
        Some(lost) if lost.is_empty() => Ok(()),
        _ => Err(format!("a session renew lost leases: {v}")),
    }
}

async fn renew_leases(http: &mut Http, client: &Client, ops: &[String]) -> Result<(), String> {
    let body = Bytes::from(format!("{{\"ttlMs\":{TTL_MS}}}"));
    for (n, op) in ops.iter().enumerate() {
        let path = lease_path(&digest(0x5e, 2, n as u64));
        expect(
            http,
            Method::PATCH,
            &path,
            &headers(&client.token, op),
            Some(&body),
            200,
        )
        .await?;
    }
    Ok(())
}

/// `session-renew`: the summary's section and whether the goal was met.
pub(crate) async fn session_renew(opts: &Opts) -> Result<(String, bool), String> {
    println!("session-renew: callgrind, {LEASES} leases on a session and {LEASES} without");
    crate::redis_cost::require_valgrind()?;
    let mut cg = crate::redis_cost::CgRedis::start("session-renew")?;
    // Callgrind slows Redis down: a store call may take seconds.
    let env = [("LEASEHOLD_COMMAND_TIMEOUT_MS", "4000")];
    let mut service = Service::start_with_env(
        opts,
        &cg.url(),
        &Service::new_build(),
        "session-renew",
        &env,
    )
    .await?;
    let mut http = Http::connect(service.addr).await?;
    let mut owner = Client::new(1)?;
    let id = create_session(&mut http, &mut owner, TTL_MS).await?;
    let empty = Bytes::from_static(b"{}");
    for n in 0..LEASES {
        let op = owner.next_op();
        let path = format!("/sessions/{id}/leases/{PURPOSE}/{}", digest(0x5e, 1, n));
        expect(
            &mut http,
            Method::PUT,
            &path,
            &headers(&owner.token, &op),
            Some(&empty),
            201,
        )
        .await?;
    }
    let mut plain = Client::new(2)?;
    let mut ops = Vec::with_capacity(LEASES as usize);
    let acquire = Bytes::from(format!("{{\"ttlMs\":{TTL_MS}}}"));
    for n in 0..LEASES {
        let op = plain.next_op();
        let path = lease_path(&digest(0x5e, 2, n));
        expect(
            &mut http,
            Method::PUT,
            &path,
            &headers(&plain.token, &op),
            Some(&acquire),
            201,
        )
        .await?;
        ops.push(op);
    }

    cg.control(&["-i", "on"])?;
    // Warm-up (valgrind translates each path the first time it runs).
    renew_session(&mut http, &owner, &id).await?;
    renew_leases(&mut http, &plain, &ops[..50]).await?;
    let (session_total, session_window) = counted(&mut cg, async {
        for _ in 0..SESSION_RENEWS {
            renew_session(&mut http, &owner, &id).await?;
        }
        Ok(())
    })
    .await?;
    let (leases_total, leases_window) =
        counted(&mut cg, renew_leases(&mut http, &plain, &ops)).await?;
    // A second instance remembers none of the leases' records: its first
    // session renew reads every one (src/store/redis/remembered.rs).
    let mut other = Service::start_with_env(
        opts,
        &cg.url(),
        &Service::new_build(),
        "session-renew-cold",
        &env,
    )
    .await?;
    let mut other_http = Http::connect(other.addr).await?;
    let (cold_total, cold_window) =
        counted(&mut cg, renew_session(&mut other_http, &owner, &id)).await?;
    let (idle, idle_window) = counted(&mut cg, async {
        tokio::time::sleep(IDLE_WINDOW).await;
        Ok(())
    })
    .await?;
    cg.control(&["-i", "off"])?;
    drop((http, other_http));
    service.stop();
    other.stop();

    let idle_per_s = idle as f64 / idle_window.as_secs_f64();
    let busy = |total: u64, window: Duration| total as f64 - idle_per_s * window.as_secs_f64();
    let session = busy(session_total, session_window) / SESSION_RENEWS as f64;
    let leases = busy(leases_total, leases_window);
    let cold = busy(cold_total, cold_window);
    let ratio = session / leases;
    let mut out = format!(
        "\n## Session renew (issue 42): one session renew of {LEASES} attached leases against {LEASES} lease renews\n\n\
         Same run, same redis-server under callgrind; calls one after the other; {SESSION_RENEWS} session renews averaged \
         (after a first one: the instance then remembers each lease's record).\n\n\
         | renewing {LEASES} leases | HTTP calls | Redis instructions | wall time under callgrind |\n|---|---|---|---|\n"
    );
    let _ = writeln!(
        out,
        "| one session renew | 1 | {:.1} M | {:.0} ms |",
        session / 1e6,
        session_window.as_secs_f64() * 1000.0 / SESSION_RENEWS as f64
    );
    let _ = writeln!(
        out,
        "| the first session renew on an instance that remembers none of the records | 1 | {:.1} M ({:.3} ×) | {:.0} ms |",
        cold / 1e6,
        cold / leases,
        cold_window.as_secs_f64() * 1000.0
    );
    let _ = writeln!(
        out,
        "| {LEASES} lease renews | {LEASES} | {:.1} M | {:.0} ms |",
        leases / 1e6,
        leases_window.as_secs_f64() * 1000.0
    );
    let _ = writeln!(
        out,
        "\nidle Redis instructions taken off: {idle_per_s:.0} per second of window"
    );
    let met = ratio <= RENEW_RATIO;
    let _ = writeln!(out, "\n### Goal of issue 42 (§18)");
    let _ = writeln!(
        out,
        "\n- {} session renew's Redis instructions ≤ {RENEW_RATIO} × {LEASES} separate renews': {ratio:.3} ×",
        if met { "met    " } else { "MISSED " }
    );
    Ok((out, met))
}

// ---------------------------------------------------------------------------
// keepalive-streams
// ---------------------------------------------------------------------------

/// Opens the keep-alive stream of session `id` and reads up to its first
/// `renewed` event; the connection, held open.
async fn open_stream(addr: SocketAddr, id: &str, token: &str) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {}", e.kind()))?;
    let req = format!(
        "GET /sessions/{id}/keepalive HTTP/1.1\r\nhost: {addr}\r\nlease-owner-token: {token}\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("send: {}", e.kind()))?;
    let mut seen = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let n = s.read(&mut buf).await.map_err(|e| e.kind().to_string())?;
            if n == 0 {
                return Err(format!(
                    "stream closed: {}",
                    String::from_utf8_lossy(&seen[..seen.len().min(300)])
                ));
            }
            seen.extend_from_slice(&buf[..n]);
            if seen.windows(14).any(|w| w == b"event: renewed") {
                return Ok(());
            }
        }
    })
    .await;
    match found {
        Ok(Ok(())) => Ok(s),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("no `renewed` event within 60 s".into()),
    }
}

/// Redis's CPU time so far (user + system), µs.
async fn redis_cpu_us(conn: &mut MultiplexedConnection) -> Result<f64, String> {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await
        .map_err(|e| format!("INFO cpu: {e}"))?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((field("used_cpu_user:") + field("used_cpu_sys:")) * 1e6)
}

/// Reads stream `s` until it closes, counting its `renewed` events.
async fn count_renewed(mut s: TcpStream, renewed: Arc<AtomicU64>) {
    let mut buf = vec![0u8; 2048];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 {
            return;
        }
        let seen = buf[..n]
            .windows(14)
            .filter(|w| *w == b"event: renewed")
            .count();
        renewed.fetch_add(seen as u64, Ordering::Relaxed);
    }
}

/// Redis's own count of script calls and their microseconds (a script's
/// time includes the commands it runs; the service sends nothing else).
async fn redis_work(conn: &mut MultiplexedConnection) -> Result<(u64, u64), String> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .map_err(|e| format!("INFO commandstats: {e}"))?;
    let (mut calls, mut usec) = (0, 0);
    let scripts = [
        "cmdstat_evalsha:",
        "cmdstat_eval:",
        "cmdstat_evalsha_ro:",
        "cmdstat_eval_ro:",
    ];
    for line in info
        .lines()
        .filter(|l| scripts.iter().any(|s| l.starts_with(s)))
    {
        for field in line.split([':', ',']) {
            if let Some(v) = field.strip_prefix("calls=") {
                calls += v.parse::<u64>().unwrap_or(0);
            } else if let Some(v) = field.strip_prefix("usec=") {
                usec += v.parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok((calls, usec))
}

/// What `n` open streams cost: (RSS delta KiB, calls and µs per session
/// and renewal).
struct Held {
    rss_kib: Option<f64>,
    calls: f64,
    usec: f64,
    cpu: f64,
}

async fn hold_streams(
    service: &Service,
    admin: &mut MultiplexedConnection,
    n: usize,
    salt: usize,
) -> Result<Held, String> {
    // The sessions first (over 16 connections), then the streams.
    let mut makers = Vec::new();
    for w in 0..16 {
        let addr = service.addr;
        makers.push(tokio::spawn(async move {
            let mut http = Http::connect(addr).await?;
            let mut made = Vec::new();
            for _ in (w..n).step_by(16) {
                let mut client = Client::new(salt * 100 + w)?;
                let id = create_session(&mut http, &mut client, KEEPALIVE_TTL_MS).await?;
                made.push((id, client.token));
            }
            Ok::<_, String>(made)
        }));
    }
    let mut sessions = Vec::with_capacity(n);
    for m in makers {
        sessions.extend(m.await.map_err(|e| e.to_string())??);
    }
    let pid = service.pid().to_string();
    let before = status_kb(&pid, "VmRSS");
    let renewed = Arc::new(AtomicU64::new(0));
    let mut readers = tokio::task::JoinSet::new();
    let mut opening = futures_util::stream::iter(sessions.iter())
        .map(|(id, token)| open_stream(service.addr, id, token))
        .buffer_unordered(64);
    while let Some(s) = opening.next().await {
        readers.spawn(count_renewed(s?, Arc::clone(&renewed)));
    }
    drop(opening);
    let after = status_kb(&pid, "VmRSS");
    let (c0, u0) = redis_work(admin).await?;
    let cpu0 = redis_cpu_us(admin).await?;
    let r0 = renewed.load(Ordering::Relaxed);
    tokio::time::sleep(WORK_WINDOW).await;
    let (c1, u1) = redis_work(admin).await?;
    let cpu1 = redis_cpu_us(admin).await?;
    let per = renewed.load(Ordering::Relaxed).saturating_sub(r0).max(1) as f64;
    // Closing the connections ends the sessions.
    readers.abort_all();
    while readers.join_next().await.is_some() {}
    Ok(Held {
        rss_kib: before
            .zip(after)
            .map(|(b, a)| (a as f64 - b as f64) / n as f64),
        calls: (c1 - c0) as f64 / per,
        usec: (u1 - u0) as f64 / per,
        cpu: (cpu1 - cpu0) / per,
    })
}

/// `keepalive-streams`: the summary's section and whether the goals were met.
pub(crate) async fn keepalive_streams(opts: &Opts) -> Result<(String, bool), String> {
    println!("keepalive-streams: {FEW_STREAMS}, then {STREAMS} keep-alive streams on one instance");
    let redis = RedisProc::start()?;
    let mut service =
        Service::start(opts, &redis.url(), &Service::new_build(), "keepalive").await?;
    let client = redis::Client::open(redis.url()).map_err(|e| e.to_string())?;
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let few = hold_streams(&service, &mut admin, FEW_STREAMS, 1).await?;
    // The few streams' sessions end as their connections close: let the
    // ends finish before the many are counted.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let many = hold_streams(&service, &mut admin, STREAMS, 2).await?;
    service.stop();
    drop(redis);

    let mut out = format!(
        "\n## Keep-alive streams (issue 42, §19): {FEW_STREAMS} then {STREAMS} streams open at once on one instance\n\n\
         Each stream on its own session (TTL {KEEPALIVE_TTL_MS} ms, renewed every third), no leases; Redis work from \
         `INFO commandstats` (script calls and their µs) over {} s, per `renewed` event the streams received.\n\n\
         | streams | service RSS per stream | Redis script calls per renewal | Redis script µs per renewal | Redis CPU µs per renewal |\n|---|---|---|---|---|\n",
        WORK_WINDOW.as_secs()
    );
    for (n, h) in [(FEW_STREAMS, &few), (STREAMS, &many)] {
        let rss = h
            .rss_kib
            .map_or("n/a".to_owned(), |k| format!("{:.2} KiB", k));
        let _ = writeln!(
            out,
            "| {n} | {rss} | {:.2} | {:.1} | {:.1} |",
            h.calls, h.usec, h.cpu
        );
    }
    let _ = writeln!(out, "\n### Goals of issue 42 (§19)\n");
    let mut ok = true;
    let mut goal = |met: bool, text: &str, figure: String| {
        ok &= met;
        let mark = if met { "met    " } else { "MISSED " };
        let _ = writeln!(out, "- {mark} {text}: {figure}");
    };
    match many.rss_kib {
        Some(kib) => goal(
            kib * 1024.0 <= BYTES_PER_STREAM,
            &format!("service memory per open stream at {STREAMS} ≤ 4 KiB"),
            format!("{kib:.2} KiB"),
        ),
        None => goal(false, "service memory per open stream", "no /proc".into()),
    }
    let calls = many.calls / few.calls;
    goal(
        calls <= 1.25,
        &format!("Redis calls per session renewal flat from {FEW_STREAMS} to {STREAMS} (≤ 1.25 ×)"),
        format!("{calls:.2} ×"),
    );
    let usec = many.usec / few.usec;
    goal(
        usec <= 1.5,
        &format!(
            "Redis script µs per session renewal flat from {FEW_STREAMS} to {STREAMS} (≤ 1.5 ×)"
        ),
        format!(
            "{usec:.2} × (Redis CPU µs per renewal: {:.2} ×)",
            many.cpu / few.cpu
        ),
    );
    Ok((out, ok))
}
