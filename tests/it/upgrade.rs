//! The upgrade test (issue #21 §6): a rolling deploy from the previous
//! release to this one never yields two holders, and tokens keep
//! increasing.
//!
//! The previous release's binary (built from the commit before this
//! release's first storage change by `scripts/build-previous-release.sh`)
//! and this build's binary serve one real `redis-server` with one shared
//! namespace, as real processes on loopback ports the kernel picks. Clients
//! run lease cycles the whole time (acquire, some with `waitMs`, replays of
//! the same attempt, renew, release) on a plain lease, a counting lease of 3
//! permits and a read-write lease, each request sent to any instance then
//! serving, so one lease is routinely acquired through one release and
//! renewed or released through the other. Meanwhile the instances are
//! replaced one by one, old to new, the way the shipped Deployment rolls
//! (`maxSurge: 1`, `maxUnavailable: 0`, a preStop while endpoints drop):
//!
//! 1. two old instances serve alone for one phase;
//! 2. for each old instance: a new one starts and, once its `/readyz` says
//!    ready, takes requests; after a phase of old and new serving together
//!    the old one stops taking new requests, its requests in flight finish,
//!    it gets SIGTERM and the test waits for it to exit;
//! 3. the two new instances serve alone for one phase.
//!
//! The history is judged by the checker of the history test
//! (`tests/it/common/history.rs`): safety (never more believed holders than
//! the limit, never a shared with an exclusive one), fencing (tokens
//! strictly increasing per resource in real-time order), honesty, typed
//! answers, and recovery (an `acquired` within 5 s of each step's end).
//!
//! The run also counts what shows that the two releases worked on the same
//! records: replays, renews and releases answered by one release of an
//! acquisition the other wrote, and acquisitions handed from one release's
//! grantee to the other's (in token order); it fails if any is zero. A negative
//! control (ignored by default) runs the same deploy with the new instances
//! in another key space, as a key version bump without a read-both step
//! would, and must see two holders.
//!
//! A third test (ignored: it fails today) plays issue #21 §1's departed
//! waiter across releases: a caller whose wait's clean-up release runs on
//! one release after it was told `replayed_same_operation` by the other.
//!
//! Run it (`--nocapture` prints the figures):
//!
//! ```sh
//! LEASEHOLD_PREVIOUS_BIN=$(scripts/build-previous-release.sh) \
//!   cargo test --all-features --test it upgrade:: -- --nocapture
//! ```
//!
//! `LEASEHOLD_UPGRADE_PHASE_MS` sets the length of each phase (default
//! 5000: about 21 s in all). The test fails, never skips, when
//! `LEASEHOLD_PREVIOUS_BIN` is unset or names no file.

#[allow(unused_imports)]
use crate::common;
use crate::common::rng::Rng;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::app::{digest, unique};
use common::history::{beliefs, check_all, summary, Checks, Event, FaultWindow, Verb, Violation};
use common::redis::RedisServer;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

const P: &str = "upgrade";
const CLIENTS: usize = 10;
const RESOURCES: usize = 3;
/// The limit of resource 1, a counting lease.
const COUNTED: u64 = 3;
const COMMAND_TIMEOUT_MS: &str = "1000";
const DRIFT: Duration = Duration::from_millis(10);
const RECOVERY_BOUND: Duration = Duration::from_secs(5);
/// Our own HTTP client's bound: far above any answer the product should
/// take (a wait is at most 600 ms plus a command timeout).
const HTTP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an instance may take to listen and be ready, or to exit after
/// SIGTERM (a loaded 2-core machine running debug builds).
const PATIENCE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// The binaries and their processes
// ---------------------------------------------------------------------------

/// The previous release's binary, from `LEASEHOLD_PREVIOUS_BIN`.
fn previous_bin() -> PathBuf {
    const HOW: &str = "build it and point LEASEHOLD_PREVIOUS_BIN at it:\n\n    \
        LEASEHOLD_PREVIOUS_BIN=$(scripts/build-previous-release.sh) \
        cargo test --all-features --test it upgrade::\n\n\
        (scripts/test.sh does this for you)";
    let Some(path) = std::env::var_os("LEASEHOLD_PREVIOUS_BIN").filter(|p| !p.is_empty()) else {
        panic!("the upgrade test needs the previous release's leasehold binary; {HOW}");
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "LEASEHOLD_PREVIOUS_BIN={} is not a file; {HOW}",
        path.display()
    );
    path
}

/// Whether the previous release cleans up a departed waiter's acquisition
/// unconditionally (the releases before the clean-up setting, e.g.
/// `adc9ce5`), rather than leaving it to its TTL by default as this release
/// and the release-3 tip (`89886ae`) do: told by whether its `serve --help`
/// lists `--release-abandoned`.
fn previous_cleans_up_unconditionally() -> bool {
    let help = std::process::Command::new(previous_bin())
        .args(["serve", "--help"])
        .output()
        .expect("run the previous release's `serve --help`");
    assert!(
        help.status.success(),
        "the previous release's `serve --help` failed: {}",
        String::from_utf8_lossy(&help.stderr)
    );
    !String::from_utf8_lossy(&help.stdout).contains("--release-abandoned")
}

/// Which build an instance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Release {
    Previous,
    This,
}

impl Release {
    fn name(self) -> &'static str {
        match self {
            Release::Previous => "old",
            Release::This => "new",
        }
    }
}

/// A `leasehold serve` child process; killed on drop if still running.
struct Instance {
    name: String,
    release: Release,
    child: Child,
    log: PathBuf,
    base: String,
}

impl Instance {
    /// Starts `bin` on a port the kernel picks, and waits (bounded) until
    /// it listens and its `/readyz` answers 200.
    async fn start(
        bin: &Path,
        release: Release,
        name: String,
        redis_url: &str,
        namespace: &str,
        dir: &Path,
        http: &reqwest::Client,
    ) -> Instance {
        let log = dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).expect("log file");
        let child = Command::new(bin)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--redis-url",
                redis_url,
                "--namespace",
                namespace,
                "--command-timeout-ms",
                COMMAND_TIMEOUT_MS,
            ])
            // Nothing from the caller's environment (an API keys file, a
            // namespace) reaches the instance; the flags say it all.
            .env_clear()
            .env("RUST_LOG", "info")
            .env("LEASEHOLD_LOG_FORMAT", "text")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let mut instance = Instance {
            name,
            release,
            child,
            log,
            base: String::new(),
        };
        let deadline = Instant::now() + PATIENCE;
        // The listener's address is in the start-up line (text logs, as
        // asked below; see `listening_addr` for both releases' forms).
        let addr = loop {
            let text = instance.logs();
            if let Some(addr) = text
                .lines()
                .find(|l| l.contains("leasehold listening"))
                .and_then(listening_addr)
            {
                break addr;
            }
            instance.assert_running("before listening");
            assert!(
                Instant::now() < deadline,
                "{} did not listen within {PATIENCE:?}:\n{text}",
                instance.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        instance.base = format!("http://{addr}");
        loop {
            let ready = http
                .get(format!("{}/readyz", instance.base))
                .send()
                .await
                .ok()
                .map(|r| r.status().as_u16());
            if ready == Some(200) {
                break;
            }
            instance.assert_running("before it was ready");
            assert!(
                Instant::now() < deadline,
                "{} not ready within {PATIENCE:?} (last /readyz: {ready:?}):\n{}",
                instance.name,
                instance.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        instance
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_running(&mut self, when: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}) {when}:\n{}", self.name, self.logs());
        }
    }

    /// SIGTERM, then waits (bounded) for a clean exit.
    async fn stop(mut self) {
        self.assert_running("before it was stopped");
        let pid = self.child.id().expect("a running child has a pid");
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} did not exit within {PATIENCE:?} of SIGTERM:\n{}",
                    self.name,
                    self.logs()
                )
            })
            .expect("wait for the instance");
        assert!(
            status.success(),
            "{} exited with {status} after SIGTERM:\n{}",
            self.name,
            self.logs()
        );
    }
}

/// `127.0.0.1:4321` out of the text start-up line: the previous release
/// writes `addr=Some(127.0.0.1:4321)` (with ANSI colours even into a file),
/// this one `addr=127.0.0.1:4321`.
fn listening_addr(line: &str) -> Option<String> {
    // Without the colours' escape sequences (ESC '[' ... 'm').
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let rest = &plain[plain.find("addr=")? + 5..];
    let rest = rest.strip_prefix("Some(").unwrap_or(rest);
    let len = rest
        .find(|c: char| c == ')' || c.is_whitespace())
        .unwrap_or(rest.len());
    Some(rest[..len].to_owned()).filter(|a| !a.is_empty())
}

#[test]
fn listening_addr_reads_both_releases_start_up_lines() {
    for line in [
        "2026-12-04T03:21:50Z  INFO leasehold: leasehold listening addr=Some(127.0.0.1:4321) tls=false",
        "2026-12-04T03:21:50Z  INFO leasehold: leasehold listening addr=127.0.0.1:4321 tls=false",
        "\u{1b}[2m2026-12-04T03:22:35Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m leasehold listening \
         \u{1b}[3maddr\u{1b}[0m\u{1b}[2m=\u{1b}[0mSome(127.0.0.1:4321) \u{1b}[3mtls\u{1b}[0m",
    ] {
        assert_eq!(listening_addr(line).as_deref(), Some("127.0.0.1:4321"), "{line}");
    }
}

// ---------------------------------------------------------------------------
// Routing: which instances take requests
// ---------------------------------------------------------------------------

/// An instance as the clients see it (a Service endpoint).
struct Route {
    /// Index into [`Recorder::instances`] (the events' `app`).
    app: usize,
    base: String,
    /// Requests sent to it and not answered yet.
    in_flight: tokio::sync::watch::Sender<usize>,
}

/// Releases a request's place in its route's in-flight count.
struct InFlight(Arc<Route>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n -= 1);
    }
}

// ---------------------------------------------------------------------------
// The recorder
// ---------------------------------------------------------------------------

/// Where the clients send requests, and the history they write.
struct Recorder {
    t0: Instant,
    http: reqwest::Client,
    digests: Vec<String>,
    /// Every instance ever started: (name, release), by `app` index.
    instances: Mutex<Vec<(String, Release)>>,
    /// The instances taking requests now.
    routes: RwLock<Vec<Arc<Route>>>,
    events: Mutex<Vec<Event>>,
    stop: AtomicBool,
}

/// What a client needs of an answer.
struct Answer {
    outcome: String,
    retry_after_ms: u64,
    held_by: Option<String>,
    app: usize,
}

impl Recorder {
    fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            t0: Instant::now(),
            http: reqwest::Client::builder()
                .timeout(HTTP_TIMEOUT)
                .pool_max_idle_per_host(64)
                .build()
                .expect("http client"),
            digests: (0..RESOURCES).map(|_| digest()).collect(),
            instances: Mutex::new(Vec::new()),
            routes: RwLock::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        })
    }

    fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    fn release_of(&self, app: usize) -> Release {
        self.instances.lock().expect("instances")[app].1
    }

    /// Starts sending requests to `instance`; returns its `app` index.
    fn add_route(&self, instance: &Instance) -> usize {
        let mut instances = self.instances.lock().expect("instances");
        instances.push((instance.name.clone(), instance.release));
        let app = instances.len() - 1;
        self.routes.write().expect("routes").push(Arc::new(Route {
            app,
            base: instance.base.clone(),
            in_flight: tokio::sync::watch::channel(0).0,
        }));
        app
    }

    /// Stops sending new requests to `app` and waits (bounded) until the
    /// ones in flight are answered: the endpoint is gone before SIGTERM.
    async fn drain(&self, app: usize) {
        let route = {
            let mut routes = self.routes.write().expect("routes");
            let at = routes
                .iter()
                .position(|r| r.app == app)
                .expect("the route to drain");
            routes.remove(at)
        };
        let mut rx = route.in_flight.subscribe();
        tokio::time::timeout(PATIENCE, rx.wait_for(|n| *n == 0))
            .await
            .expect("requests in flight to a drained instance are answered in time")
            .expect("in-flight count");
    }

    /// A serving instance at random (not `other_than` if another serves),
    /// counted in flight until the guard drops.
    fn pick(&self, rng: &mut Rng, other_than: Option<usize>) -> InFlight {
        let routes = self.routes.read().expect("routes");
        assert!(!routes.is_empty(), "no instance serves");
        let candidates: Vec<&Arc<Route>> = routes
            .iter()
            .filter(|r| Some(r.app) != other_than)
            .collect();
        let route = if candidates.is_empty() {
            &routes[rng.below(routes.len() as u64) as usize]
        } else {
            candidates[rng.below(candidates.len() as u64) as usize]
        };
        // Counted under the read lock: a drain (write lock) sees it.
        route.in_flight.send_modify(|n| *n += 1);
        InFlight(Arc::clone(route))
    }

    /// Sends one request to a serving instance (not `other_than` if
    /// another serves), records it, returns what the client acts on.
    async fn call(
        &self,
        rng: &mut Rng,
        other_than: Option<usize>,
        mut event: Event,
        attempt_token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let verb = event.verb.expect("verb");
        let guard = self.pick(rng, other_than);
        let base = &guard.0.base;
        event.app = guard.0.app;
        let url = format!("{base}/leases/{P}/{}", self.digests[event.resource]);
        let mut rb = match verb {
            Verb::Attempt => self.http.post(format!("{base}/attempts")),
            Verb::Acquire => self.http.put(url),
            Verb::Renew => self.http.patch(url),
            Verb::Release => self.http.delete(url),
            Verb::Inspect => self.http.get(url),
            // The upgrade run sends no breaks (an older instance has none).
            Verb::Break => self.http.post(format!("{url}/break")),
        };
        if let Some(token) = attempt_token {
            rb = rb
                .header("Lease-Owner-Token", token)
                .header("Lease-Operation-Id", &event.attempt);
        }
        if let Some(body) = body {
            rb = rb.json(&body);
        }
        event.send = self.now();
        let result = async {
            let resp = rb.send().await?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let text = resp.text().await?;
            Ok::<_, reqwest::Error>((status, headers, text))
        }
        .await;
        event.reply = self.now();
        drop(guard);
        let mut answer = Answer {
            outcome: String::new(),
            retry_after_ms: 0,
            held_by: None,
            app: event.app,
        };
        match result {
            Err(e) => event.transport_error = Some(e.to_string()),
            Ok((status, headers, text)) => {
                event.status = status;
                event.problem_json = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("application/problem+json"));
                event.retry_after = headers.contains_key("retry-after");
                let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
                event.outcome = body["outcome"].as_str().unwrap_or("<none>").to_owned();
                let lease = if body["lease"].is_object() {
                    &body["lease"]
                } else {
                    &body
                };
                event.fencing_token = lease["fencingToken"].as_u64();
                event.remaining_ms = lease["remainingMs"].as_u64();
                event.held_by = body["heldBy"].as_str().map(str::to_owned);
                event.operation_id = body["operationId"].as_str().map(str::to_owned);
                answer.outcome = event.outcome.clone();
                answer.retry_after_ms = body["retryAfterMs"].as_u64().unwrap_or(0);
                answer.held_by = event.held_by.clone();
                if verb == Verb::Attempt && status == 201 {
                    answer.held_by = body["ownerToken"].as_str().map(str::to_owned);
                }
            }
        }
        if answer.outcome.is_empty() {
            answer.outcome = "transport_error".into();
        }
        self.events.lock().expect("events").push(event);
        answer
    }

    /// The history so far, ordered by send instant and numbered.
    fn history(&self) -> Vec<Event> {
        let mut events = self.events.lock().expect("events").clone();
        events.sort_by_key(|e| e.send);
        for (i, e) in events.iter_mut().enumerate() {
            e.id = i;
        }
        events
    }
}

/// One client's loop of lease cycles until the recorder stops. Every
/// request goes to any serving instance; a replay goes to another one
/// than the acquire it repeats, so it crosses releases while both serve.
async fn client(rec: Arc<Recorder>, id: usize) {
    let mut rng = Rng::new();
    while !rec.stop.load(Ordering::SeqCst) {
        let resource = rng.below(RESOURCES as u64) as usize;
        let op = unique("op-");
        let base = Event {
            client: id,
            resource,
            attempt: op.clone(),
            ..Event::default()
        };
        let on = |verb: Verb| Event {
            verb: Some(verb),
            ..base.clone()
        };
        let created = rec
            .call(
                &mut rng,
                None,
                on(Verb::Attempt),
                None,
                Some(json!({ "operationId": op })),
            )
            .await;
        let Some(token) = created.held_by else {
            pause(50).await;
            continue;
        };
        let ttl = 300 + rng.below(1200);
        let wait = rng.chance(33).then(|| rng.below(600));
        let mut body = json!({ "ttlMs": ttl });
        if let Some(w) = wait {
            body["waitMs"] = json!(w);
        }
        // Resource 0 is a plain lease, 1 a counting lease of COUNTED
        // permits, 2 a read-write lease (mostly shared holders).
        let (limit, shared) = match resource {
            1 => (Some(COUNTED), false),
            2 => (None, rng.chance(70)),
            _ => (None, false),
        };
        if let Some(l) = limit {
            body["limit"] = json!(l);
        }
        if shared {
            body["mode"] = json!("shared");
        }
        let acquire = || {
            let mut e = on(Verb::Acquire);
            e.ttl_ms = Some(ttl);
            e.wait_ms = wait;
            e.limit = limit;
            e.shared = shared;
            e
        };
        // Acquire; on an uncertain answer retry with the same attempt (on
        // any instance) or inspect.
        let mut held = None;
        for _ in 0..4 {
            let e = acquire();
            let a = rec
                .call(&mut rng, None, e, Some(&token), Some(body.clone()))
                .await;
            match a.outcome.as_str() {
                "acquired" | "replayed_same_operation" => {
                    held = Some(a.app);
                    break;
                }
                "indeterminate" | "transport_error" => {
                    if rng.chance(30) {
                        rec.call(&mut rng, None, on(Verb::Inspect), Some(&token), None)
                            .await;
                    }
                }
                "unavailable" | "overloaded" => {
                    // Honesty probes: "not applied" must mean we hold nothing.
                    let verb = if rng.chance(50) {
                        Verb::Release
                    } else {
                        Verb::Inspect
                    };
                    rec.call(&mut rng, None, on(verb), Some(&token), None).await;
                    pause(a.retry_after_ms.min(100)).await;
                    break;
                }
                _ => {
                    pause(a.retry_after_ms.min(50)).await;
                    break;
                }
            }
        }
        let Some(granted_by) = held else {
            continue;
        };
        // Sometimes the caller repeats its acquire (it never saw the
        // answer, say) through another instance: a replay, which this
        // release marks as claimed and the previous one does not.
        if rng.chance(25) {
            let e = acquire();
            rec.call(
                &mut rng,
                Some(granted_by),
                e,
                Some(&token),
                Some(body.clone()),
            )
            .await;
        }
        // Hold, maybe renew (once or twice), then release.
        let mut renews = rng.below(3);
        loop {
            pause(rng.below(ttl / 4)).await;
            if renews == 0 {
                break;
            }
            renews -= 1;
            let mut e = on(Verb::Renew);
            e.ttl_ms = Some(ttl);
            let r = rec
                .call(
                    &mut rng,
                    None,
                    e,
                    Some(&token),
                    Some(json!({ "ttlMs": ttl })),
                )
                .await;
            if r.outcome != "renewed" {
                break;
            }
        }
        for _ in 0..3 {
            let r = rec
                .call(&mut rng, None, on(Verb::Release), Some(&token), None)
                .await;
            if !matches!(
                r.outcome.as_str(),
                "indeterminate" | "unavailable" | "overloaded" | "transport_error"
            ) {
                break;
            }
            pause(20).await;
        }
    }
}

/// Workload pacing (think time and phase lengths), not synchronisation.
async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

fn phase() -> Duration {
    std::env::var("LEASEHOLD_UPGRADE_PHASE_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_millis(5000), Duration::from_millis)
}

// ---------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The most attempts that believed at one instant that they held
/// `resource` (in the given mode).
fn most_at_once(events: &[Event], resource: usize, shared: bool) -> usize {
    let mine: Vec<_> = beliefs(events, DRIFT)
        .into_iter()
        .filter(|b| b.event.resource == resource && b.event.shared == shared)
        .collect();
    mine.iter()
        .map(|b| {
            mine.iter()
                .filter(|a| a.start <= b.start && a.end > b.start)
                .map(|a| a.event.attempt.as_str())
                .collect::<HashSet<_>>()
                .len()
        })
        .max()
        .unwrap_or(0)
}

/// What shows that the two releases really worked on the same leases, not
/// side by side on separate ones.
struct Crossings {
    /// Answers per (release, outcome).
    by_release: BTreeMap<(Release, String), usize>,
    /// Attempts some of whose requests were answered by each release.
    attempts_across: usize,
    /// Replays and renews answered by one release of an acquisition the
    /// other release wrote.
    grants_across: usize,
    /// Releases (`released`) by one release of an acquisition the other
    /// wrote.
    releases_across: usize,
    /// `contended` answers to acquires without `waitMs` on the plain lease
    /// by one release while its believed holder had been granted (or
    /// renewed) by the other. Only a hint: a queue of waiters also answers
    /// `contended`.
    contended_across: usize,
    /// Acquisitions of one resource whose token followed, in real time, a
    /// token issued by the other release.
    handovers_across: usize,
}

fn crossings(events: &[Event], release_of: &dyn Fn(usize) -> Release) -> Crossings {
    let mut by_release: BTreeMap<(Release, String), usize> = BTreeMap::new();
    for e in events {
        let outcome = if e.transport_error.is_some() {
            "transport_error".to_owned()
        } else {
            e.outcome.clone()
        };
        *by_release.entry((release_of(e.app), outcome)).or_default() += 1;
    }
    let mut releases_of: HashMap<&str, HashSet<Release>> = HashMap::new();
    for e in events.iter().filter(|e| e.verb != Some(Verb::Attempt)) {
        releases_of
            .entry(e.attempt.as_str())
            .or_default()
            .insert(release_of(e.app));
    }
    let attempts_across = releases_of.values().filter(|s| s.len() == 2).count();
    // Per acquisition, which release wrote it (the latest `acquired`), and
    // the renews, replays and releases of it the other release answered:
    // only a release that reads the other's records can answer them so.
    let (mut grants_across, mut releases_across) = (0, 0);
    let mut granter: HashMap<(&str, usize), Release> = HashMap::new();
    for e in events {
        let key = (e.attempt.as_str(), e.resource);
        let r = release_of(e.app);
        match (e.verb, e.outcome.as_str()) {
            (Some(Verb::Acquire), "acquired") => {
                granter.insert(key, r);
            }
            (Some(Verb::Acquire), "replayed_same_operation") | (Some(Verb::Renew), "renewed")
                if granter.get(&key).is_some_and(|g| *g != r) =>
            {
                grants_across += 1
            }
            (Some(Verb::Release), "released") if granter.get(&key).is_some_and(|g| *g != r) => {
                releases_across += 1
            }
            _ => {}
        }
    }
    // Resource 0 only: a renew's event does not say whether its attempt
    // holds a shared permit.
    let plain: Vec<_> = beliefs(events, DRIFT)
        .into_iter()
        .filter(|b| b.event.resource == 0)
        .collect();
    let contended_across = events
        .iter()
        .filter(|e| e.outcome == "contended" && e.resource == 0 && e.wait_ms.is_none())
        .filter(|e| {
            let holders: Vec<_> = plain
                .iter()
                .filter(|b| b.start <= e.send && b.end >= e.reply)
                .collect();
            !holders.is_empty()
                && holders
                    .iter()
                    .all(|b| release_of(b.event.app) != release_of(e.app))
        })
        .count();
    let mut handovers_across = 0;
    for resource in 0..RESOURCES {
        let mut acquired: Vec<&Event> = events
            .iter()
            .filter(|e| e.resource == resource && e.outcome == "acquired")
            .collect();
        acquired.sort_by_key(|e| e.fencing_token);
        handovers_across += acquired
            .windows(2)
            .filter(|w| release_of(w[0].app) != release_of(w[1].app) && w[1].send > w[0].reply)
            .count();
    }
    Crossings {
        by_release,
        attempts_across,
        grants_across,
        releases_across,
        contended_across,
        handovers_across,
    }
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

/// A finished rolling deploy: its history and what judged it.
struct Rolled {
    events: Vec<Event>,
    steps: Vec<FaultWindow>,
    rec: Arc<Recorder>,
    dir: PathBuf,
    crossings: Crossings,
}

/// Runs the workload through a rolling deploy from two old instances to
/// two new ones and prints its figures. `split`: the new instances use
/// another namespace than the old ones (the negative control: two key
/// spaces, as in the v1 -> v2 upgrade).
async fn rolling_deploy(split: bool) -> Rolled {
    let old_bin = previous_bin();
    let new_bin = PathBuf::from(env!("CARGO_BIN_EXE_leasehold"));
    assert_ne!(
        std::fs::canonicalize(&old_bin).ok(),
        std::fs::canonicalize(&new_bin).ok(),
        "LEASEHOLD_PREVIOUS_BIN is this build's own binary: the test would prove nothing"
    );
    let server = RedisServer::start();
    let namespace = unique("up");
    let new_namespace = if split {
        unique("split")
    } else {
        namespace.clone()
    };
    let dir = std::env::temp_dir().join(unique("leasehold-upgrade-"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let rec = Recorder::new();
    let phase = phase();
    let started = Instant::now();

    let spawn = |bin: &Path, release: Release, name: String| {
        let ns = match release {
            Release::Previous => namespace.clone(),
            Release::This => new_namespace.clone(),
        };
        let (url, dir, http) = (server.url(), dir.clone(), rec.http.clone());
        let bin = bin.to_owned();
        async move { Instance::start(&bin, release, name, &url, &ns, &dir, &http).await }
    };

    // Two old instances, then the clients.
    let mut old = Vec::new();
    for i in 1..=2 {
        let instance = spawn(&old_bin, Release::Previous, format!("old-{i}")).await;
        let app = rec.add_route(&instance);
        old.push((app, instance));
    }
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(rec.clone(), id)))
        .collect();
    tokio::time::sleep(phase).await;

    // The rolling update: surge one new instance, then retire one old one.
    let mut steps = Vec::new();
    let mut new = Vec::new();
    let mut first_new_serving = None;
    let mut last_old_exited = Duration::ZERO;
    for (i, (old_app, old_instance)) in old.into_iter().enumerate() {
        let start = rec.now();
        let instance = spawn(&new_bin, Release::This, format!("new-{}", i + 1)).await;
        rec.add_route(&instance);
        let serving = rec.now();
        first_new_serving.get_or_insert(serving);
        println!(
            "upgrade: {:>7.0} ms new-{} ready and serving ({:.0} ms to start)",
            ms(serving),
            i + 1,
            ms(serving - start)
        );
        new.push(instance);
        tokio::time::sleep(phase).await;
        let retire = rec.now();
        rec.drain(old_app).await;
        let drained = rec.now();
        let name = old_instance.name.clone();
        old_instance.stop().await;
        last_old_exited = rec.now();
        println!(
            "upgrade: {:>7.0} ms {name} drained in {:.0} ms, exited {:.0} ms after SIGTERM",
            ms(last_old_exited),
            ms(drained - retire),
            ms(last_old_exited - drained)
        );
        steps.push(FaultWindow {
            name: format!("{name} -> new-{}", i + 1),
            start,
            end: last_old_exited,
            data_loss: false,
            definite_refusal: false,
            on_one_master: false,
        });
    }
    tokio::time::sleep(phase).await;
    rec.stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("client task");
    }
    let events = rec.history();
    for instance in new {
        instance.stop().await;
    }
    let took = started.elapsed();
    let overlap = last_old_exited - first_new_serving.expect("a new instance served");

    // Figures.
    let release_of = |app: usize| rec.release_of(app);
    let x = crossings(&events, &release_of);
    println!("upgrade: {}", summary(&events, &steps).trim_end());
    println!(
        "upgrade: {:.1} s in all; old and new served together for {:.1} s",
        took.as_secs_f64(),
        overlap.as_secs_f64()
    );
    for ((release, outcome), n) in &x.by_release {
        println!("upgrade:   {:<3} {outcome:<24} {n}", release.name());
    }
    println!(
        "upgrade: across releases: {} attempts answered by both; of acquisitions one \
         release wrote, {} replays or renews and {} releases answered by the other; \
         {} handovers (token order) between releases; {} contended answers (no waitMs) \
         while only the other release's grantee held",
        x.attempts_across,
        x.grants_across,
        x.releases_across,
        x.handovers_across,
        x.contended_across
    );
    drop(server);
    Rolled {
        events,
        steps,
        rec,
        dir,
        crossings: x,
    }
}

fn violations(run: &Rolled) -> Vec<Violation> {
    check_all(
        &run.events,
        &run.steps,
        DRIFT,
        RECOVERY_BOUND,
        Checks {
            safety: true,
            honesty: true,
            // Waits run, but no liveness bound is claimed across a rolling
            // restart (instances stop with waiters queued).
            liveness: None,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_deploy_from_the_previous_release_keeps_one_holder_and_rising_tokens() {
    let run = rolling_deploy(false).await;
    let events = &run.events;
    let (counted, shared) = (
        most_at_once(events, 1, false),
        most_at_once(events, 2, true),
    );
    println!("upgrade: most attempts holding at once: counting lease {counted}, shared {shared}");

    // The run must have exercised what it claims.
    assert!(
        counted >= 2 && shared >= 2,
        "the workload never had several holders at once (counting lease {counted}, \
         shared {shared}): the run proves nothing about limits"
    );
    let x = &run.crossings;
    assert!(
        x.grants_across > 0 && x.releases_across > 0 && x.handovers_across > 0,
        "the releases never worked on one lease (replays or renews across {}, releases \
         across {}, handovers across {}): the run proves nothing about the upgrade",
        x.grants_across,
        x.releases_across,
        x.handovers_across
    );

    let violations = violations(&run);
    if violations.is_empty() {
        let _ = std::fs::remove_dir_all(&run.dir);
        return;
    }
    let name_of = |app: usize| {
        let instances = run.rec.instances.lock().expect("instances");
        instances[app].0.clone()
    };
    let mut per_check: BTreeMap<&str, usize> = BTreeMap::new();
    let mut text = String::new();
    for v in &violations {
        let n = per_check.entry(v.check).or_default();
        *n += 1;
        if *n <= 12 {
            text.push_str(&v.to_string());
            let apps: Vec<String> = v.events.iter().map(|e| name_of(e.app)).collect();
            text.push_str(&format!("    (apps: {})\n", apps.join(", ")));
        }
    }
    let mut all = String::new();
    let instances = run.rec.instances.lock().expect("instances").clone();
    for (app, (name, _)) in instances.iter().enumerate() {
        all.push_str(&format!("app{app} = {name}\n"));
    }
    for v in &violations {
        all.push_str(&v.to_string());
    }
    all.push_str("\n--- history ---\n");
    for e in events {
        all.push_str(&format!("{e}\n"));
    }
    std::fs::write(run.dir.join("history.txt"), all).expect("write the history");
    panic!(
        "upgrade: {} violations {per_check:?}; every violation, the history and each \
         instance's log are in {}\nthe first 12 of each check:\n{text}",
        violations.len(),
        run.dir.display()
    );
}

/// The negative control: the same deploy with the new instances in another
/// key space (what a key version bump without a read-both step does, as in
/// the v1 -> v2 upgrade) must show two holders, or the test above could not
/// see them either. About as long as the test above; run it with
/// `-- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "negative control of the upgrade test; run with -- --ignored"]
async fn control_a_rolling_deploy_into_another_key_space_yields_two_holders() {
    let run = rolling_deploy(true).await;
    let violations = violations(&run);
    let two_holders = violations.iter().filter(|v| v.check == "safety").count();
    let fencing = violations.iter().filter(|v| v.check == "fencing").count();
    println!(
        "upgrade (control, two key spaces): {two_holders} safety violations (two holders), \
         {fencing} fencing violations"
    );
    if let Some(v) = violations.iter().find(|v| v.check == "safety") {
        println!("upgrade (control): the first: {v}");
    }
    let _ = std::fs::remove_dir_all(&run.dir);
    assert!(
        two_holders > 0,
        "two key spaces served side by side, yet the checker saw no two holders"
    );
}

// ---------------------------------------------------------------------------
// A departed waiter's clean-up across releases (docs/design.md §14)
// ---------------------------------------------------------------------------

/// Plain calls to one instance, for the scripted scenario below.
struct Api {
    base: String,
    http: reqwest::Client,
}

/// An attempt: (owner token, operation id).
type Attempt = (String, String);

impl Api {
    async fn call(&self, rb: reqwest::RequestBuilder, who: Option<&Attempt>) -> (u16, Value) {
        let rb = match who {
            Some((token, op)) => rb
                .header("Lease-Owner-Token", token)
                .header("Lease-Operation-Id", op),
            None => rb,
        };
        let resp = rb.send().await.expect("send");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
    fn url(&self, d: &str) -> String {
        format!("{}/leases/{P}/{d}", self.base)
    }
    async fn attempt(&self) -> Attempt {
        let op = unique("op-");
        let (status, body) = self
            .call(
                self.http
                    .post(format!("{}/attempts", self.base))
                    .json(&json!({ "operationId": op })),
                None,
            )
            .await;
        assert_eq!(status, 201, "{body}");
        (body["ownerToken"].as_str().expect("token").to_owned(), op)
    }
    async fn acquire(&self, d: &str, who: &Attempt) -> (u16, Value) {
        let rb = self.http.put(self.url(d)).json(&json!({ "ttlMs": 30_000 }));
        self.call(rb, Some(who)).await
    }
    async fn release(&self, d: &str, who: &Attempt) -> (u16, Value) {
        self.call(self.http.delete(self.url(d)), Some(who)).await
    }
    async fn inspect(&self, d: &str, who: &Attempt) -> Value {
        self.call(self.http.get(self.url(d)), Some(who)).await.1
    }
    async fn waiters(&self) -> u64 {
        let (_, body) = self
            .call(self.http.get(format!("{}/readyz", self.base)), None)
            .await;
        body["waiters"].as_u64().unwrap_or(0)
    }
}

/// `release`'s Lua scripts as Redis runs them, by file name
/// (`release.lua`): this release's assembled (their includes spliced in),
/// the previous release's from the `lua/` beside its binary (as
/// scripts/build-previous-release.sh leaves them: assembled by the
/// binary's `scripts --dump` where it has one).
fn lua_scripts(release: Release) -> Vec<(String, String)> {
    match release {
        Release::This => leasehold::store::redis::lua::ALL
            .iter()
            .map(|s| (format!("{}.lua", s.name), s.assembled.to_owned()))
            .collect(),
        Release::Previous => {
            let dir = previous_bin()
                .parent()
                .expect("the binary's directory")
                .join("lua");
            assert!(
                dir.join("release.lua").is_file(),
                "no lua/ beside LEASEHOLD_PREVIOUS_BIN: rerun scripts/build-previous-release.sh"
            );
            let mut scripts = Vec::new();
            for entry in std::fs::read_dir(&dir).expect("lua dir") {
                let path = entry.expect("lua dir entry").path();
                let name = path
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned();
                if name.ends_with(".lua") && path.is_file() {
                    let source = std::fs::read_to_string(&path).expect("script source");
                    scripts.push((name, source));
                }
            }
            scripts
        }
    }
}

fn bin(release: Release) -> PathBuf {
    match release {
        Release::This => PathBuf::from(env!("CARGO_BIN_EXE_leasehold")),
        Release::Previous => previous_bin(),
    }
}

/// The scenario of issue #21 §1 across releases: a caller waits on
/// instance A (of `waiter_on`), which reaches Redis through a proxy that
/// delays its replies; the holder releases through B (of `retry_on`,
/// direct); the waiter's acquire runs in Redis but A hears of it 400 ms
/// later; the caller has gone by then and retries its attempt through B,
/// which answers `replayed_same_operation`. A's clean-up release of the
/// departed waiter then runs. This release's clean-up spares a permit
/// that a replay claimed, and its replay writes the claim; the previous
/// release does neither. Returns what a third attempt is told afterwards
/// (`contended`: the caller kept its lease) and the caller's inspect.
async fn departed_waiter(waiter_on: Release, retry_on: Release) -> (String, Value) {
    use common::fault_proxy::FaultProxy;
    let server = RedisServer::start();
    // A's scripts as the proxy sees them (by their SHA1): its clean-up
    // release, and its acquire. Every script of A is loaded now: a
    // NOSCRIPT once the replies are delayed costs three delayed round
    // trips (1.2 s) under one command timeout (1 s), and the wait that
    // made that call answers `unavailable` (a fresh-clone CI on a loaded
    // machine saw the previous release's waiter fail so on its first
    // queue entry).
    let scripts = lua_scripts(waiter_on);
    let sha = |script: &str| {
        let (_, source) = scripts
            .iter()
            .find(|(name, _)| name == script)
            .unwrap_or_else(|| panic!("no {script}"));
        server.cli(&["SCRIPT", "LOAD", source]).trim().to_owned()
    };
    for (name, _) in &scripts {
        sha(name);
    }
    let (release_sha, acquire_sha) = (sha("release.lua"), sha("acquire.lua"));
    let proxy = FaultProxy::start(server.addr()).await;
    let namespace = unique("cl");
    let dir = std::env::temp_dir().join(unique("leasehold-upgrade-"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let http = reqwest::Client::new();
    let a_name = format!("{}-a", waiter_on.name());
    let a_instance = Instance::start(
        &bin(waiter_on),
        waiter_on,
        a_name,
        &proxy.url(),
        &namespace,
        &dir,
        &http,
    )
    .await;
    let b_name = format!("{}-b", retry_on.name());
    let b_instance = Instance::start(
        &bin(retry_on),
        retry_on,
        b_name,
        &server.url(),
        &namespace,
        &dir,
        &http,
    )
    .await;
    let a = Api {
        base: a_instance.base.clone(),
        http: http.clone(),
    };
    let b = Api {
        base: b_instance.base.clone(),
        http: http.clone(),
    };
    let d = digest();
    let holder = b.attempt().await;
    assert_eq!(b.acquire(&d, &holder).await.0, 201);
    // The waiter, on a client of its own that the test drops.
    let waiter = a.attempt().await;
    let own = reqwest::Client::new();
    let request = own
        .put(a.url(&d))
        .header("Lease-Owner-Token", &waiter.0)
        .header("Lease-Operation-Id", &waiter.1)
        .json(&json!({ "ttlMs": 30_000, "waitMs": 20_000 }));
    let pending = tokio::spawn(async move {
        let sent = request.send().await;
        drop(own);
        sent
    });
    let deadline = Instant::now() + PATIENCE;
    while a.waiters().await != 1 {
        assert!(Instant::now() < deadline, "the waiter never waited on A");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // ... and its first (contended) attempt has been answered before the
    // delay starts (A counts the waiter before that reply is back).
    assert!(
        proxy.until_answered(&acquire_sha, 1, PATIENCE).await,
        "the waiter's first attempt was never answered"
    );
    proxy.set_reply_delay(Duration::from_millis(400));
    assert_eq!(b.release(&d, &holder).await.1["outcome"], "released");
    // The waiter's acquire has run in Redis once B sees it hold the lease.
    while b.inspect(&d, &waiter).await["heldBy"] != "caller" {
        assert!(Instant::now() < deadline, "the waiter's acquire never ran");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The caller gives up while A still waits for the reply ...
    pending.abort();
    let _ = pending.await;
    // ... and retries its attempt through the old instance.
    let (status, retry) = b.acquire(&d, &waiter).await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["outcome"], "replayed_same_operation");
    match waiter_on {
        // A previous release before the clean-up setting cleans up
        // unconditionally: wait for it.
        Release::Previous if previous_cleans_up_unconditionally() => assert!(
            proxy.until_answered(&release_sha, 1, PATIENCE).await,
            "the departed waiter's clean-up release never ran on A"
        ),
        // This release and the release-3 tip (by default) leave the lease
        // to its TTL: once A's wait is over and a later call through A has
        // been answered, no clean-up was sent.
        Release::This | Release::Previous => {
            while a.waiters().await != 0 {
                assert!(Instant::now() < deadline, "the wait never ended on A");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            proxy.set_reply_delay(Duration::ZERO);
            let _ = a.inspect(&d, &waiter).await;
            assert_eq!(proxy.answered(&release_sha), 0, "A sent a clean-up release");
        }
    }
    let still = b.inspect(&d, &waiter).await;
    let third = b.attempt().await;
    let (_, other) = b.acquire(&d, &third).await;
    a_instance.stop().await;
    b_instance.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    (
        other["outcome"].as_str().unwrap_or("<none>").to_owned(),
        still,
    )
}

/// A caller told `replayed_same_operation` keeps its lease when it waited on
/// an instance of this release, whichever release answers its retry (a
/// rolling deploy makes both pairs). See migrations-none.md, "v2 -> this
/// release": the previous release's replay writes no claim, which is why
/// this release's clean-up is off by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn departed_waiter_on_this_release_keeps_its_lease_whoever_answers_the_retry() {
    // This release leaves a departed waiter's lease to its TTL by default
    // (LEASEHOLD_RELEASE_ABANDONED=false): whichever release answers the
    // retry, nothing takes the lease from the caller it told.
    for retry_on in [Release::This, Release::Previous] {
        let (third, still) = departed_waiter(Release::This, retry_on).await;
        println!(
            "upgrade (departed waiter): waited on new, retried through {}: the caller then \
             sees {still}; a third attempt is told {third}",
            retry_on.name()
        );
        assert_eq!(
            third,
            "contended",
            "waited on new, retried through {}: a caller told `replayed_same_operation` \
             lost its lease",
            retry_on.name()
        );
    }
    // A waiter on a previous release before the clean-up setting meets
    // that release's own flaw (its clean-up releases unconditionally, issue
    // 21 §1) until its last instance is gone: printed, not asserted
    // (nothing this release does can change an old instance's clean-up).
    // The release-3 tip leaves the lease to its TTL by default, as this
    // release does: asserted as above.
    let flawed = previous_cleans_up_unconditionally();
    for retry_on in [Release::This, Release::Previous] {
        let (third, _) = departed_waiter(Release::Previous, retry_on).await;
        println!(
            "upgrade (departed waiter): waited on old, retried through {}: a third attempt is \
             told {third}{}",
            retry_on.name(),
            if flawed {
                " (the previous release's own clean-up)"
            } else {
                ""
            }
        );
        if !flawed {
            assert_eq!(
                third,
                "contended",
                "waited on old, retried through {}: a caller told `replayed_same_operation` \
                 lost its lease",
                retry_on.name()
            );
        }
    }
}

/// Issue 39, item 12: a bounded permit (`maxHoldMs`, acquired through this
/// release) renewed through a previous-release pod, which knows no bound:
/// that pod extends its `expiresAt` past the bound (and answers `504`: its
/// decoder rejects the marked label). Every script of this release still
/// ends the permit at its bound: inspect shows it ending there, and once
/// the bound has passed another caller acquires through this release,
/// long before the extended expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_permit_renewed_through_the_previous_release_ends_at_its_bound() {
    const BOUND_MS: u64 = 1_500;
    let server = RedisServer::start();
    let namespace = unique("ub");
    let dir = std::env::temp_dir().join(unique("leasehold-upgrade-"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let http = reqwest::Client::new();
    let (old_bin, new_bin) = (bin(Release::Previous), bin(Release::This));
    let old = Instance::start(
        &old_bin,
        Release::Previous,
        "old".to_owned(),
        &server.url(),
        &namespace,
        &dir,
        &http,
    )
    .await;
    let new = Instance::start(
        &new_bin,
        Release::This,
        "new".to_owned(),
        &server.url(),
        &namespace,
        &dir,
        &http,
    )
    .await;
    let (old, new) = (
        Api {
            base: old.base.clone(),
            http: http.clone(),
        },
        Api {
            base: new.base.clone(),
            http: http.clone(),
        },
    );
    let d = digest();
    let holder = new.attempt().await;
    let (status, got) = new
        .call(
            new.http
                .put(new.url(&d))
                .json(&json!({ "ttlMs": 1_000, "maxHoldMs": BOUND_MS })),
            Some(&holder),
        )
        .await;
    assert_eq!(status, 201, "{got}");
    let acquired_at = got["lease"]["acquiredAt"].clone();
    // Through the previous release: a renew far past the bound.
    let (status, body) = old
        .call(
            old.http
                .patch(old.url(&d))
                .json(&json!({ "ttlMs": 60_000 })),
            Some(&holder),
        )
        .await;
    println!("upgrade (bounded hold): a renew through old answered {status}: {body}");
    let seen = new.inspect(&d, &holder).await;
    // (Not held: the bound passed already, on a slow machine.)
    if seen["held"] == true {
        assert_eq!(seen["acquiredAt"], acquired_at, "{seen}");
        let remaining = seen["remainingMs"].as_u64().unwrap_or(u64::MAX);
        assert!(
            remaining <= BOUND_MS,
            "this release ends the permit at its bound: {seen}"
        );
    }
    // After the bound, another caller acquires through this release.
    let other = new.attempt().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = new.acquire(&d, &other).await;
        if status == 201 {
            break;
        }
        assert_eq!(body["outcome"], "contended", "{body}");
        assert!(
            Instant::now() < deadline,
            "the bounded permit still held 10 s later: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
