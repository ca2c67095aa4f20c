//! Soak (issues #13 and 39): steady mixed load on two real `leasehold
//! serve` processes over one Redis behind a fault proxy, with caller faults
//! and store faults throughout, and the drift of what the service holds
//! measured against stated bounds.
//!
//! In the suite it runs for 2 minutes with a fault every 10 s. The
//! documented long run (docs/testing.md "Longer runs"):
//!
//! ```sh
//! LEASEHOLD_SOAK_SECS=1800 LEASEHOLD_SOAK_FAULT_EVERY_SECS=60 \
//!   cargo test --all-features --test it soak:: -- --nocapture
//! ```
//!
//! **Load** (8 callers, paced to a few hundred requests a second in all):
//! every verb: plain cycles (attempt, acquire, renew, release), a counting
//! lease of 3 permits, waits on a held resource (answered by its release),
//! inspect, list and history reads, long-polls, lease event streams read
//! and closed, and an operator's break about every 2 s.
//!
//! **Caller faults**: a waiting acquire whose caller closes its connection
//! mid-wait, a stream closed mid-stream, a request whose body is cut short.
//! **Store faults**, one every `LEASEHOLD_SOAK_FAULT_EVERY_SECS`, in turn:
//! Redis frozen (SIGSTOP) for 1 s, Redis refusing writes (`maxmemory` 1,
//! `noeviction`) for 1 s, a lost script reply, a connection reset mid-script.
//!
//! **Drift**, sampled every `duration / 24`: the service processes' resident
//! memory and descriptors (`/proc/<pid>`), Redis's `used_memory`, and the
//! p99 latency of the uncontended verbs (acquire, renew, release, inspect)
//! sent outside fault windows (and 2 s after each). The first quarter is
//! warm-up; the second quarter is compared with the last:
//!
//! * RSS: the last quarter's highest within 20 % + 16 MiB of the second
//!   quarter's highest (about 30 MiB over the two processes' 70 MiB).
//!   Allocator arenas and metric buffers settle in the warm-up; at about
//!   200 requests/s, a leak of 3 KiB per request crosses it within the
//!   two-minute run, of 200 bytes within the 30-minute one.
//! * Descriptors: at most 8 more. Each process holds a pool of 4 Redis
//!   connections, remade after a fault, and its callers' sockets; a socket
//!   kept per departed caller (about 5 a second leave) crosses it within
//!   seconds, one per fault within the 30-minute run.
//! * Redis `used_memory`: at most 25 % + 4 MiB more. The load uses a fixed
//!   set of resources, so the keys' total is flat; a structure that grows
//!   per request (tombstones, a history without trim, queue leftovers)
//!   crosses it. Client buffers of the pool's connections are within it.
//! * p99 latency: the p99 of every timed answer of the last quarter at
//!   most 2× that of the second quarter + 50 ms. Debug builds on a shared
//!   2-core machine make it noisy (single 5 s windows ranged 36-170 ms in
//!   one run, hence a quarter's answers pooled and the margin); work that
//!   grows with time (a scan of a growing structure per request) more
//!   than doubles it over a long run.
//!
//! Every answer must be typed (a documented status with an outcome, never
//! a 500, no transport error), and the services still answer at the end.

#[allow(unused_imports)]
use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::app::{digest, unique};
use common::fault_proxy::FaultProxy;
use common::redis::RedisServer;
use common::residue::ServiceProcess;
use serde_json::{json, Value};

const P: &str = "soak";
const CALLERS: usize = 8;

fn secs(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

#[derive(Clone, Debug)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: u64,
    redis_used: u64,
    /// p99 of the window since the previous sample (ms), and its size.
    p99_ms: f64,
    n: usize,
    /// That window's timed answers (µs).
    window: Arc<Vec<u64>>,
}

/// What the callers share: where to send, what they were told, latencies.
struct Load {
    bases: Vec<String>,
    http: reqwest::Client,
    stop: AtomicBool,
    /// Set during a fault window and 2 s after it: latencies are not
    /// recorded and refusals are expected.
    faulty: AtomicBool,
    tally: Mutex<BTreeMap<String, u64>>,
    /// Refusals (503/504) answered outside fault windows.
    refused_outside: Mutex<Vec<String>>,
    latencies_us: Mutex<Vec<u64>>,
    left: AtomicU64,
    /// Resources: 0-2 plain, 3 the counting lease, 4 held for waits.
    digests: Vec<String>,
}

impl Load {
    fn url(&self, n: usize, resource: usize) -> String {
        format!(
            "{}/leases/{P}/{}",
            self.bases[n % self.bases.len()],
            self.digests[resource]
        )
    }

    /// Sends `req`, tallies the answer; records its latency when `timed`
    /// and outside faults. Returns the status and the body.
    async fn send(&self, what: &str, req: reqwest::RequestBuilder, timed: bool) -> (u16, Value) {
        let clean = !self.faulty.load(Ordering::SeqCst);
        let sent = Instant::now();
        let (status, body) = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body = resp.json::<Value>().await.unwrap_or(Value::Null);
                (status, body)
            }
            Err(e) => {
                self.count(format!("{what} transport error: {e}"));
                return (0, Value::Null);
            }
        };
        let elapsed = sent.elapsed();
        let outcome = body["outcome"].as_str().unwrap_or("<none>").to_owned();
        self.count(format!("{what} {status} {outcome}"));
        let clean = clean && !self.faulty.load(Ordering::SeqCst);
        if clean && matches!(status, 503 | 504) {
            let mut r = self.refused_outside.lock().expect("refused");
            if r.len() < 20 {
                r.push(format!("{what} {status} {outcome}"));
            }
        }
        if timed && clean {
            let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
            self.latencies_us.lock().expect("latencies").push(us);
        }
        (status, body)
    }

    fn count(&self, key: String) {
        *self.tally.lock().expect("tally").entry(key).or_default() += 1;
    }

    async fn attempt(&self, n: usize) -> Option<(String, String)> {
        let op = unique("op-");
        let base = &self.bases[n % self.bases.len()];
        let req = self
            .http
            .post(format!("{base}/attempts"))
            .json(&json!({ "operationId": op }));
        let (status, body) = self.send("attempt", req, false).await;
        (status == 201).then(|| (body["ownerToken"].as_str().unwrap_or("").to_owned(), op))
    }
}

fn with(req: reqwest::RequestBuilder, who: &(String, String)) -> reqwest::RequestBuilder {
    req.header("Lease-Owner-Token", &who.0)
        .header("Lease-Operation-Id", &who.1)
}

/// One caller's loop: a different kind of call each turn.
async fn caller(load: Arc<Load>, id: usize) {
    let mut n = id;
    while !load.stop.load(Ordering::Relaxed) {
        n += 1;
        match n % 8 {
            // A plain cycle, timed.
            0..=2 => {
                let Some(who) = load.attempt(n).await else {
                    continue;
                };
                let url = load.url(n, n % 3);
                let req = with(load.http.put(&url), &who).json(&json!({ "ttlMs": 2_000 }));
                let (status, _) = load.send("acquire", req, true).await;
                if status == 201 {
                    let req = with(load.http.patch(&url), &who).json(&json!({ "ttlMs": 2_000 }));
                    load.send("renew", req, true).await;
                    let req = with(load.http.delete(&url), &who);
                    load.send("release", req, true).await;
                }
            }
            // The counting lease, held a moment.
            3 => {
                let Some(who) = load.attempt(n).await else {
                    continue;
                };
                let url = load.url(n, 3);
                let req =
                    with(load.http.put(&url), &who).json(&json!({ "ttlMs": 2_000, "limit": 3 }));
                if load.send("acquire counting", req, false).await.0 == 201 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let req = with(load.http.delete(&url), &who);
                    load.send("release counting", req, false).await;
                }
            }
            // Hold the wait resource briefly while others wait for it.
            4 => {
                let Some(who) = load.attempt(n).await else {
                    continue;
                };
                let url = load.url(n, 4);
                let req =
                    with(load.http.put(&url), &who).json(&json!({ "ttlMs": 1_000, "waitMs": 400 }));
                if load.send("wait", req, false).await.0 == 201 {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    let req = with(load.http.delete(&url), &who);
                    load.send("release waited", req, false).await;
                }
            }
            // A caller that leaves mid-wait (its own connection, closed
            // after 100 ms of a 2 s wait), or mid-stream.
            5 => {
                let Some(who) = load.attempt(n).await else {
                    continue;
                };
                let own = reqwest::Client::new();
                if n % 16 < 8 {
                    let req = with(own.put(load.url(n, 4)), &who)
                        .json(&json!({ "ttlMs": 1_000, "waitMs": 2_000 }))
                        .timeout(Duration::from_millis(100));
                    let _ = req.send().await;
                } else {
                    let url = format!("{}/events", load.url(n, n % 3));
                    if let Ok(mut resp) = own.get(url).send().await {
                        let _ =
                            tokio::time::timeout(Duration::from_millis(200), resp.chunk()).await;
                    }
                }
                drop(own);
                load.left.fetch_add(1, Ordering::Relaxed);
            }
            // Reads: inspect (timed), list, history, a short long-poll.
            6 => {
                let url = load.url(n, n % 3);
                load.send("inspect", load.http.get(&url), true).await;
                let base = &load.bases[n % load.bases.len()];
                let list = load.http.get(format!("{base}/leases/{P}?limit=10"));
                load.send("list", list, false).await;
                let history = load.http.get(format!("{url}/history?limit=5"));
                load.send("history", history, false).await;
                let poll = load.http.get(format!("{url}?changedSince=0.0&waitMs=100"));
                load.send("long-poll", poll, false).await;
            }
            // An operator breaks the counting lease now and then.
            _ => {
                if n % 24 == 7 {
                    let req = load
                        .http
                        .post(format!("{}/break", load.url(n, 3)))
                        .json(&json!({ "reason": "soak" }));
                    load.send("break", req, false).await;
                }
            }
        }
        // Pacing (think time), not synchronisation.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn p99(mut v: Vec<u64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64) * 0.99).ceil() as usize;
    v[i.saturating_sub(1).min(v.len() - 1)] as f64 / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_do_not_grow_under_load_and_faults() {
    let duration = secs("LEASEHOLD_SOAK_SECS", 120);
    let fault_every = secs("LEASEHOLD_SOAK_FAULT_EVERY_SECS", 10);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let ns = unique("soak");
    let url = proxy.url();
    let env = [
        ("LEASEHOLD_REDIS_URL", url.as_str()),
        ("LEASEHOLD_NAMESPACE", ns.as_str()),
        ("LEASEHOLD_COMMAND_TIMEOUT_MS", "500"),
        ("LEASEHOLD_POOL_SIZE", "4"),
        ("LEASEHOLD_RELEASE_ABANDONED", "true"),
    ];
    let services =
        tokio::task::block_in_place(|| [ServiceProcess::start(&env), ServiceProcess::start(&env)]);
    let load = Arc::new(Load {
        bases: services.iter().map(|s| s.base.clone()).collect(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client"),
        stop: AtomicBool::new(false),
        faulty: AtomicBool::new(false),
        tally: Mutex::default(),
        refused_outside: Mutex::default(),
        latencies_us: Mutex::default(),
        left: AtomicU64::new(0),
        digests: (0..5).map(|_| digest()).collect(),
    });
    let callers: Vec<_> = (0..CALLERS)
        .map(|id| tokio::spawn(caller(Arc::clone(&load), id)))
        .collect();

    let started = Instant::now();
    let every = duration / 24;
    let mut samples = Vec::new();
    let mut next_sample = started + every;
    let mut next_fault = started + fault_every;
    let mut faults = 0usize;
    // After a fault, latencies and refusals count again 2 s later.
    let mut clean_at: Option<Instant> = None;
    while started.elapsed() < duration {
        let now = Instant::now();
        if clean_at.is_some_and(|t| now >= t) {
            load.faulty.store(false, Ordering::SeqCst);
            clean_at = None;
        }
        if now >= next_sample {
            let redis_used =
                tokio::task::block_in_place(|| server.info_u64("memory", "used_memory"));
            let window = std::mem::take(&mut *load.latencies_us.lock().expect("latencies"));
            samples.push(Sample {
                at: started.elapsed(),
                rss_kib: services.iter().map(ServiceProcess::rss_kib).sum(),
                fds: services.iter().map(ServiceProcess::fds).sum(),
                redis_used,
                n: window.len(),
                p99_ms: p99(window.clone()),
                window: Arc::new(window),
            });
            next_sample += every;
        }
        if now >= next_fault {
            load.faulty.store(true, Ordering::SeqCst);
            match faults % 4 {
                0 => {
                    tokio::task::block_in_place(|| server.freeze());
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    tokio::task::block_in_place(|| server.thaw());
                }
                1 => {
                    tokio::task::block_in_place(|| {
                        server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
                        server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
                    });
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    tokio::task::block_in_place(|| {
                        server.cli(&["CONFIG", "SET", "maxmemory", "0"])
                    });
                }
                2 => {
                    let before = proxy.lost_replies();
                    proxy.lose_script_replies(1);
                    assert!(
                        proxy.until_lost(before + 1, Duration::from_secs(10)).await,
                        "no script reply crossed the proxy within 10 s"
                    );
                }
                _ => {
                    let before = proxy.resets();
                    proxy.reset_next_script();
                    assert!(
                        proxy
                            .until_resets(before + 1, Duration::from_secs(10))
                            .await,
                        "no script crossed the proxy within 10 s"
                    );
                }
            }
            clean_at = Some(Instant::now() + Duration::from_secs(2));
            faults += 1;
            next_fault += fault_every;
        }
        let mut wake = next_sample.min(next_fault).min(started + duration);
        if let Some(t) = clean_at {
            wake = wake.min(t);
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
    }
    load.stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await.expect("caller task");
    }

    let tally = load.tally.lock().expect("tally").clone();
    let total: u64 = tally.values().sum();
    println!(
        "soak: {:?}, {faults} faults, {total} answers, {} callers left mid-call; answers: {tally:#?}",
        started.elapsed(),
        load.left.load(Ordering::Relaxed)
    );
    println!("  at s | RSS MiB | fds | Redis used MiB | p99 ms (n)");
    for s in &samples {
        println!(
            "  {:>4.0} | {:>7.1} | {:>3} | {:>14.2} | {:>6.1} ({})",
            s.at.as_secs_f64(),
            s.rss_kib as f64 / 1024.0,
            s.fds,
            s.redis_used as f64 / 1_048_576.0,
            s.p99_ms,
            s.n
        );
    }
    // Every answer typed: a documented status with an outcome; no
    // transport error (the callers that leave do so on connections of
    // their own, not counted here).
    for key in tally.keys() {
        let fields: Vec<&str> = key.split(' ').collect();
        assert!(
            !key.contains("transport error") && !key.ends_with("<none>") && !key.contains(" 500 "),
            "untyped answer or transport error: {key} ({fields:?})"
        );
    }
    for verb in [
        "acquire 201 acquired",
        "renew 200 renewed",
        "release 200 released",
    ] {
        assert!(
            tally.get(verb).copied().unwrap_or(0) > 0,
            "no {verb}: {tally:#?}"
        );
    }
    // Shown, not judged: a lost reply can leave a connection out of step
    // for a moment after its window, and a loaded machine turns slowness
    // into timeouts (the checked histories judge honesty and recovery).
    let refused = load.refused_outside.lock().expect("refused").clone();
    println!("soak: refused outside fault windows (first 20): {refused:?}");
    assert!(samples.len() >= 16, "too few samples: {}", samples.len());
    let q = samples.len() / 4;
    let (early, late) = (&samples[q..2 * q], &samples[3 * q..]);
    let max = |part: &[Sample], f: fn(&Sample) -> u64| part.iter().map(f).max().unwrap_or(0);
    let rss = (max(early, |s| s.rss_kib), max(late, |s| s.rss_kib));
    let fds = (max(early, |s| s.fds), max(late, |s| s.fds));
    let used = (max(early, |s| s.redis_used), max(late, |s| s.redis_used));
    let pooled =
        |part: &[Sample]| p99(part.iter().flat_map(|s| s.window.iter().copied()).collect());
    let lat = (pooled(early), pooled(late));
    println!(
        "soak drift (second quarter → last): RSS {} → {} KiB, descriptors {} → {}, \
         Redis used_memory {} → {} B, p99 {:.1} → {:.1} ms",
        rss.0, rss.1, fds.0, fds.1, used.0, used.1, lat.0, lat.1
    );
    assert!(
        rss.1 <= rss.0 + rss.0 / 5 + 16 * 1024,
        "RSS grew: {} → {} KiB (bound: +20 % + 16 MiB)",
        rss.0,
        rss.1
    );
    assert!(
        fds.1 <= fds.0 + 8,
        "file descriptors grew: {fds:?} (bound: +8)"
    );
    assert!(
        used.1 <= used.0 + used.0 / 4 + 4 * 1_048_576,
        "Redis used_memory grew: {} → {} B (bound: +25 % + 4 MiB)",
        used.0,
        used.1
    );
    assert!(
        lat.1 <= 2.0 * lat.0 + 50.0,
        "p99 latency grew: {:.1} → {:.1} ms (bound: 2× + 50 ms)",
        lat.0,
        lat.1
    );
    // The services still answer after the run.
    for s in &services {
        let live = load
            .http
            .get(format!("{}/livez", s.base))
            .send()
            .await
            .expect("livez");
        assert_eq!(live.status().as_u16(), 200);
    }
}
