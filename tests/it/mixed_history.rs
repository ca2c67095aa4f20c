//! A mixed checked history (issue 23): Rust, Python and TypeScript workers
//! contend for the same resources through two leasehold instances (real
//! processes of the `leasehold` binary) on one real `redis-server`, while
//! faults are injected, and one checker judges every worker's beliefs
//! together.
//!
//! * **Workers.** Python: `clients/python/tests/mixed_worker.py` on the
//!   venv `clients/python/check.sh` makes
//!   (`${LEASEHOLD_TOOLS_DIR:-$HOME/.cache/leasehold-tools}/python-client-venv`),
//!   with this checkout's `clients/python/src` first on `PYTHONPATH`.
//!   TypeScript: `clients/typescript/test/fixtures/mixed_worker.ts`, as
//!   compiled by `clients/typescript/check.sh` into `dist-test/`, on `node`.
//!   Java: `clients/java/src/test/java/io/leasehold/client/MixedWorker.java`,
//!   as compiled by `clients/java/check.sh` (its `build.sh`) into
//!   `clients/java/build/`, on `java` with the classpath in `build/classpath`.
//!   Go: `clients/go/internal/cmd/mixed-worker`, as built by
//!   `clients/go/check.sh` into `clients/go/dist/mixed-worker`.
//!   Rust: tasks in this test, with [`Client`], [`LeaseHandle`] and
//!   [`Watchdog`]; an `indeterminate` acquire is retried with the same
//!   attempt (the caller's job in Rust, as `Error::Indeterminate` says).
//!   Each takes turns on two resources through both instances, works for
//!   up to 1.5 TTL, stops when its loss signal fires, and records each
//!   belief: when it called acquire, when it began to believe (the answer),
//!   when it stopped (the loss signal, or before it sent the release), the
//!   fencing token. The clock is the wall clock of this one machine in
//!   milliseconds (`SystemTime`, `time.time()`, `Date.now()`).
//! * **Faults.** Instance A is reached through an [`HttpProxy`] that drops
//!   the reply to every 5th acquire and every 7th renew (applied, never
//!   answered); Redis is frozen (SIGSTOP) for 1.5 TTL, twice; instance B is
//!   killed (SIGKILL) and restarted on its port. Each fault waits for the
//!   workers to have made progress since the last one (beliefs recorded),
//!   not for a fixed time.
//! * **Checks.** Per resource, ordered by the start of belief: each belief
//!   ends before the next begins (compared in whole milliseconds, the
//!   coarsest of the three clocks), and fencing tokens strictly grow.
//!   Every language recorded beliefs, every worker process exited cleanly
//!   with its summary, and the faults did happen (replies dropped, beliefs
//!   ended by a loss signal).
//!
//! Ignored in the plain `cargo test`: it needs the Python venv and the
//! TypeScript build, which `scripts/test.sh` makes after the Rust tests
//! (`clients/*/check.sh`); it then runs this with
//! `cargo test --all-features --test it mixed_history:: -- --ignored`. Missing
//! either, it fails saying what to run; it never skips.

#[allow(unused_imports)]
use crate::common;
use crate::common::rng::Rng;

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::app::unique;
use common::http_proxy::HttpProxy;
use common::redis::RedisServer;
use leasehold::client::{Acquire, Client, ClientSettings, EndReason, Error, LeaseHandle, Watchdog};
use leasehold::domain::{Attempt, OperationId, Purpose, ResourceDigest, ResourceId};
use serde::{Deserialize, Serialize};
use tokio::time::{sleep, timeout, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PURPOSE: &str = "mixed";
const TTL_MS: u64 = 800;
/// How long the workers start new rounds: long enough for every language
/// to hold once (ten workers share two resources, and a JVM starts slowly)
/// and for the three faults, each waiting for progress. At 14 s, with Go and
/// Java workers, the faults sometimes outlasted the run, and one language's
/// two workers held twice only (the judge wants 3 each); at 20 s the fewest
/// in five runs was 4 (TypeScript), so 25 s keeps a margin.
const RUN_MS: u64 = 25_000;
/// Worker tasks per language.
const TASKS: usize = 2;
/// Redis stays frozen this long: past the TTL.
const FREEZE_MS: u64 = TTL_MS * 3 / 2;
/// The bound on any one wait for progress; reaching it fails the test.
const PATIENCE: Duration = Duration::from_secs(30);
/// A pause before trying again after a refusal (back-off, not a wait for
/// an event).
const BACKOFF: Duration = Duration::from_millis(50);
/// How long a Rust worker retries an acquire whose answer is unknown.
const RETRY_BUDGET: Duration = Duration::from_secs(2);

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
        * 1000.0
}

/// One belief, as every worker writes it (one JSON line).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Belief {
    lang: String,
    worker: String,
    resource: String,
    url: String,
    token: u64,
    sent_ms: f64,
    start_ms: f64,
    end_ms: f64,
    how: String,
    ended: String,
}

/// A worker's last line.
#[derive(Clone, Debug, Deserialize)]
struct Summary {
    lang: String,
    worker: String,
    rounds: u64,
    beliefs: u64,
    counts: BTreeMap<String, u64>,
}

// ------------------------------------------------------------ prerequisites --

fn python() -> PathBuf {
    let tools = std::env::var_os("LEASEHOLD_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/leasehold-tools")
        });
    let python = tools.join("python-client-venv/bin/python");
    assert!(
        python.is_file(),
        "the Python client's venv is missing ({}): run `bash clients/python/check.sh` first \
         (it creates the venv; scripts/test.sh runs it before this test)",
        python.display()
    );
    python
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn typescript_worker() -> PathBuf {
    let package = Path::new(ROOT).join("clients/typescript");
    let compiled = package.join("dist-test/test/fixtures/mixed_worker.js");
    let source = package.join("test/fixtures/mixed_worker.ts");
    assert!(
        compiled.is_file() && package.join("dist-test/src/index.js").is_file(),
        "the TypeScript client's test build is missing ({}): run `bash clients/typescript/check.sh` \
         first (or `npm ci && npm run build:test` in clients/typescript); scripts/test.sh runs it \
         before this test",
        compiled.display()
    );
    assert!(
        modified(&compiled) >= modified(&source),
        "{} is older than {}: rebuild with `npm run build:test` in clients/typescript \
         (or `bash clients/typescript/check.sh`)",
        compiled.display(),
        source.display()
    );
    compiled
}

/// The Go worker `clients/go/check.sh` builds, no older than the client's
/// sources.
fn go_worker() -> PathBuf {
    let module = Path::new(ROOT).join("clients/go");
    let built = module.join("dist/mixed-worker");
    assert!(
        built.is_file(),
        "the Go client's mixed worker is missing ({}): run `bash clients/go/check.sh` first \
         (or `go build -o dist/mixed-worker ./internal/cmd/mixed-worker` in clients/go); \
         scripts/test.sh runs it before this test",
        built.display()
    );
    let main = module.join("internal/cmd/mixed-worker/main.go");
    let sources = std::fs::read_dir(&module)
        .expect("clients/go")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.ends_with(".go") && !name.ends_with("_test.go")
        })
        .chain(std::iter::once(main));
    for source in sources {
        assert!(
            modified(&built) >= modified(&source),
            "{} is older than {}: rebuild with `bash clients/go/check.sh`",
            built.display(),
            source.display()
        );
    }
    built
}

fn node() -> PathBuf {
    common::redis::require_binary("node", "nodejs")
}

/// The Java worker: `java` and the arguments that run `MixedWorker` on
/// the build `clients/java/check.sh` makes.
fn java_worker() -> Command {
    let package = Path::new(ROOT).join("clients/java");
    let compiled = package.join("build/test-classes/io/leasehold/client/MixedWorker.class");
    let source = package.join("src/test/java/io/leasehold/client/MixedWorker.java");
    let classpath = package.join("build/classpath");
    assert!(
        compiled.is_file() && classpath.is_file(),
        "the Java client's build is missing ({}): run `bash clients/java/check.sh` first (or \
         `bash clients/java/build.sh`); scripts/test.sh runs it before this test",
        compiled.display()
    );
    assert!(
        modified(&compiled) >= modified(&source),
        "{} is older than {}: rebuild with `bash clients/java/build.sh`",
        compiled.display(),
        source.display()
    );
    let classpath = std::fs::read_to_string(&classpath).expect("clients/java/build/classpath");
    let mut java = Command::new(common::redis::require_binary(
        "java",
        "default-jdk-headless",
    ));
    java.args([
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-cp",
        classpath.trim(),
    ])
    .arg("io.leasehold.client.MixedWorker");
    java
}

// ---------------------------------------------------------------- instances --

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One `leasehold serve` process on a fixed port, restartable there.
struct Instance {
    port: u16,
    redis_url: String,
    namespace: String,
    log: PathBuf,
    child: Option<Child>,
}

impl Instance {
    async fn start(redis_url: &str, namespace: &str, dir: &Path, name: &str) -> Instance {
        let mut instance = Instance {
            port: free_port(),
            redis_url: redis_url.to_owned(),
            namespace: namespace.to_owned(),
            log: dir.join(format!("{name}.log")),
            child: None,
        };
        instance.spawn().await;
        instance
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    async fn spawn(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        let http = reqwest::Client::new();
        loop {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .expect("instance log");
            let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
                .args(["serve", "--listen", &format!("127.0.0.1:{}", self.port)])
                .args(["--redis-url", &self.redis_url])
                .args(["--namespace", &self.namespace])
                .args(["--worker-threads", "2"])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("spawn leasehold serve");
            // Until it answers /readyz, or exits (a port still held: retry).
            let ready = loop {
                if child.try_wait().expect("try_wait").is_some() {
                    break false;
                }
                let answer = http.get(format!("{}/readyz", self.url())).send().await;
                if answer.is_ok_and(|r| r.status().is_success()) {
                    break true;
                }
                assert!(
                    Instant::now() < deadline,
                    "leasehold on port {} not ready: {}",
                    self.port,
                    self.log_tail()
                );
                sleep(Duration::from_millis(20)).await;
            };
            if ready {
                self.child = Some(child);
                return;
            }
            assert!(
                Instant::now() < deadline,
                "leasehold on port {} keeps exiting: {}",
                self.port,
                self.log_tail()
            );
            sleep(Duration::from_millis(100)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

// -------------------------------------------------------------- Rust worker --

#[derive(Default)]
struct Sink {
    beliefs: Vec<Belief>,
    summaries: Vec<Summary>,
}

/// Acquires with `attempt`, retrying with the same attempt (never a new
/// one) while the answer may have been applied or was refused for now,
/// within [`RETRY_BUDGET`]. If it gives up after an answer that may have
/// applied, it releases with the attempt (what an acquire may have taken).
async fn acquire(
    client: &Client,
    resource: &ResourceId,
    attempt: &Attempt,
    ttl: Duration,
    count: &mut impl FnMut(String),
) -> Result<Acquire, Error> {
    let deadline = Instant::now() + RETRY_BUDGET + ttl / 2;
    let mut may_hold = false;
    loop {
        let answer = client.acquire(resource, attempt, ttl, ttl / 2).await;
        match &answer {
            Err(e @ Error::Indeterminate { .. }) => {
                count(format!("acquire {} (same attempt again)", e.outcome_name()));
                may_hold = true;
            }
            Err(e @ (Error::Unavailable { .. } | Error::Overloaded { .. })) => {
                count(format!("acquire {}", e.outcome_name()));
            }
            Ok(a) => {
                if may_hold {
                    count(format!("after an indeterminate: {}", a.outcome_name()));
                }
                return answer;
            }
            Err(_) => return answer,
        }
        if Instant::now() >= deadline {
            if may_hold {
                let _ = client.release(resource, attempt).await;
            }
            return answer;
        }
        sleep(BACKOFF).await;
    }
}

async fn rust_worker(
    index: usize,
    urls: Vec<String>,
    ids: Vec<String>,
    stop_at: f64,
    counter: Arc<Mutex<usize>>,
) -> Sink {
    let worker = format!("rust-{index}");
    let ttl = Duration::from_millis(TTL_MS);
    let clients: Vec<Client> = urls
        .iter()
        .map(|u| {
            Client::new(ClientSettings {
                request_timeout: Duration::from_secs(2),
                ..ClientSettings::new(u.clone())
            })
            .expect("client")
        })
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1));
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut count = |k: String| *counts.entry(k).or_default() += 1;
    let mut sink = Sink::default();
    let mut rounds = 0u64;
    while now_ms() < stop_at {
        rounds += 1;
        let url_index = (index + rounds as usize) % urls.len();
        let raw_id = &ids[(index + rounds as usize / 3) % ids.len()];
        let client = &clients[url_index];
        let resource = ResourceId {
            purpose: Purpose::parse(PURPOSE).expect("purpose"),
            digest: ResourceDigest::of_raw_id(raw_id),
        };
        let sent = now_ms();
        let op = OperationId::parse(&format!("{worker}-{rounds}")).expect("operation id");
        let attempt = match client.create_attempt(&op).await {
            Ok(a) => a,
            Err(e) => {
                count(format!("attempt failed: {}", e.outcome_name()));
                sleep(BACKOFF).await;
                continue;
            }
        };
        let (handle, how): (LeaseHandle, &str) =
            match acquire(client, &resource, &attempt, ttl, &mut count).await {
                Ok(answer) => {
                    let how = answer.outcome_name();
                    match answer.into_handle() {
                        Some(h) => (h, how),
                        None => {
                            count(format!("not acquired: {how}"));
                            continue;
                        }
                    }
                }
                Err(e) => {
                    count(format!("lock failed: {}", e.outcome_name()));
                    sleep(BACKOFF).await;
                    continue;
                }
            };
        let watchdog = Watchdog::new(1);
        let Ok(mut registration) = watchdog.register(&handle) else {
            // Its validity ran out before it could be kept: no belief.
            count("expired before the watchdog took it".to_owned());
            let _ = handle.release().await;
            continue;
        };
        let token = registration.token();
        let start = now_ms();
        let work = Duration::from_millis(50 + rng.below(TTL_MS * 3 / 2));
        let (end, ended) = tokio::select! {
            _ = token.cancelled() => {
                let end = now_ms();
                let reason = match registration.ended().await {
                    EndReason::Lost => "lost".to_owned(),
                    EndReason::Unknown => "unknown".to_owned(),
                    EndReason::Expired => "expiring".to_owned(),
                    other => format!("{other:?}"),
                };
                (end, reason)
            }
            _ = sleep(work) => (now_ms(), "released".to_owned()),
        };
        sink.beliefs.push(Belief {
            lang: "rust".into(),
            worker: worker.clone(),
            resource: raw_id.clone(),
            url: urls[url_index].clone(),
            token: handle.fencing_token(),
            sent_ms: sent,
            start_ms: start,
            end_ms: end,
            how: how.to_owned(),
            ended: ended.clone(),
        });
        // For the fault schedule.
        *counter.lock().expect("counter") += 1;
        count(format!("held via {how}"));
        count(format!("ended {ended}"));
        if let Err(e) = handle.release().await {
            count(format!("release failed: {}", e.outcome_name()));
        }
    }
    let beliefs = sink.beliefs.len() as u64;
    sink.summaries.push(Summary {
        lang: "rust".into(),
        worker,
        rounds,
        beliefs,
        counts,
    });
    sink
}

// ------------------------------------------------------- worker processes --

/// A Python or TypeScript worker process writing its beliefs to `out`.
struct WorkerProcess {
    lang: &'static str,
    out: PathBuf,
    stderr: PathBuf,
    child: Child,
}

impl WorkerProcess {
    fn spawn(lang: &'static str, mut command: Command, dir: &Path, args: &[String]) -> Self {
        let out = dir.join(format!("{lang}.jsonl"));
        let stderr = dir.join(format!("{lang}.stderr"));
        let child = command
            .arg(&out)
            .args(args)
            .current_dir(ROOT)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn the {lang} worker: {e}"));
        WorkerProcess {
            lang,
            out,
            stderr,
            child,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Fails, with its stderr, if it exited before its time.
    fn alive(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!(
                "the {} worker exited early ({status}):\n{}",
                self.lang,
                self.stderr()
            );
        }
    }

    /// Waits (bounded) for it to exit 0, then reads its lines.
    async fn finish(mut self) -> (Vec<Belief>, Vec<Summary>) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "the {} worker did not finish:\n{}",
                    self.lang,
                    self.stderr()
                );
            }
            sleep(Duration::from_millis(20)).await;
        };
        assert!(
            status.success(),
            "the {} worker failed ({status}):\n{}",
            self.lang,
            self.stderr()
        );
        let (beliefs, summaries) = read_lines(&self.out);
        (beliefs, summaries)
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The complete lines of a worker's file.
fn read_lines(path: &Path) -> (Vec<Belief>, Vec<Summary>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut beliefs = Vec::new();
    let mut summaries = Vec::new();
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    for line in complete.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}: {e}: {line}", path.display()));
        match value["kind"].as_str() {
            Some("belief") => beliefs.push(
                serde_json::from_value(value.clone())
                    .unwrap_or_else(|e| panic!("{}: belief {e}: {line}", path.display())),
            ),
            Some("summary") => summaries.push(
                serde_json::from_value(value.clone())
                    .unwrap_or_else(|e| panic!("{}: summary {e}: {line}", path.display())),
            ),
            _ => panic!("{}: unknown line {line}", path.display()),
        }
    }
    (beliefs, summaries)
}

/// Beliefs recorded so far, per language.
struct Progress<'a> {
    files: Vec<(&'static str, PathBuf)>,
    rust: &'a Mutex<usize>,
}

impl Progress<'_> {
    fn now(&self) -> BTreeMap<&'static str, usize> {
        let mut seen: BTreeMap<&'static str, usize> = self
            .files
            .iter()
            .map(|(lang, path)| (*lang, read_lines(path).0.len()))
            .collect();
        seen.insert("rust", *self.rust.lock().expect("progress"));
        seen
    }

    fn total(&self) -> usize {
        self.now().values().sum()
    }

    /// Waits until `pred` holds of the counts; fails after [`PATIENCE`],
    /// or when a worker process died.
    async fn until(
        &self,
        what: &str,
        workers: &mut [WorkerProcess],
        pred: impl Fn(&BTreeMap<&'static str, usize>) -> bool,
    ) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let now = self.now();
            if pred(&now) {
                return;
            }
            for w in workers.iter_mut() {
                w.alive();
            }
            assert!(Instant::now() < deadline, "{what}: stuck at {now:?}");
            sleep(Duration::from_millis(20)).await;
        }
    }
}

// ------------------------------------------------------------------ checker --

/// Every way the beliefs break the lease's promise.
fn violations(beliefs: &[Belief]) -> Vec<String> {
    let mut found = Vec::new();
    let mut by_resource: HashMap<&str, Vec<&Belief>> = HashMap::new();
    for b in beliefs {
        if !(b.sent_ms <= b.start_ms + 1.0 && b.start_ms <= b.end_ms + 1.0) {
            found.push(format!("times out of order in {b:?}"));
        }
        by_resource.entry(&b.resource).or_default().push(b);
    }
    // Whole milliseconds: `Date.now()` has no finer grain, and flooring
    // keeps the order of instants.
    let whole = |t: f64| t.floor() as i64;
    for (resource, mut mine) in by_resource {
        mine.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        for pair in mine.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            if whole(before.end_ms) > whole(after.start_ms) {
                found.push(format!(
                    "overlap on {resource}: {} {} (token {}) believed until {:.1}, {} {} (token {}) from {:.1}: {:.1} ms together",
                    before.lang, before.worker, before.token, before.end_ms,
                    after.lang, after.worker, after.token, after.start_ms,
                    before.end_ms - after.start_ms
                ));
            }
            if after.token <= before.token {
                found.push(format!(
                    "fencing token did not grow on {resource}: {} {} had {}, then {} {} had {}",
                    before.lang, before.worker, before.token, after.lang, after.worker, after.token
                ));
            }
        }
    }
    found
}

#[test]
fn the_checker_sees_an_overlap_and_a_token_going_back() {
    let belief = |lang: &str, token: u64, start: f64, end: f64| Belief {
        lang: lang.into(),
        worker: format!("{lang}-0"),
        resource: "r".into(),
        url: String::new(),
        token,
        sent_ms: start - 5.0,
        start_ms: start,
        end_ms: end,
        how: "acquired".into(),
        ended: "released".into(),
    };
    let fine = [
        belief("rust", 1, 100.0, 200.4),
        belief("python", 2, 200.6, 300.0),
        belief("typescript", 3, 300.0, 400.0),
    ];
    assert!(violations(&fine).is_empty(), "{:?}", violations(&fine));
    let overlap = [
        belief("rust", 1, 100.0, 250.0),
        belief("python", 2, 200.0, 300.0),
    ];
    assert_eq!(violations(&overlap).len(), 1, "{:?}", violations(&overlap));
    let back = [
        belief("rust", 5, 100.0, 150.0),
        belief("typescript", 4, 160.0, 300.0),
    ];
    assert_eq!(violations(&back).len(), 1, "{:?}", violations(&back));
}

// --------------------------------------------------------------------- test --

fn redis_freeze(redis: &RedisServer) -> (f64, f64) {
    let from = now_ms();
    redis.freeze();
    std::thread::sleep(Duration::from_millis(FREEZE_MS)); // the fault's own length
    redis.thaw();
    (from, now_ms())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test.sh after the client checks (needs the Python venv and the TypeScript build)"]
async fn workers_of_five_languages_never_believe_at_once() {
    let python = python();
    let ts_worker = typescript_worker();
    let go_worker = go_worker();
    let node = node();
    let java = java_worker();
    let dir = std::env::temp_dir().join(unique("leasehold-mixed-"));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let redis = RedisServer::start();
    let namespace = unique("mixed");
    let a = Instance::start(&redis.url(), &namespace, &dir, "instance-a").await;
    let mut b = Instance::start(&redis.url(), &namespace, &dir, "instance-b").await;
    let proxy = HttpProxy::start(a.addr()).await;
    proxy.drop_every("PUT", 5);
    proxy.drop_every("PATCH", 7);
    let urls = vec![proxy.url(), b.url()];
    let ids = vec![unique("mixed-a-"), unique("mixed-b-")];
    let stop_at = now_ms() + RUN_MS as f64;
    let args = |name: &str| -> Vec<String> {
        vec![
            RUN_MS.to_string(),
            TTL_MS.to_string(),
            name.to_owned(),
            urls.join(","),
            ids.join(","),
            TASKS.to_string(),
        ]
    };

    let mut py = Command::new(&python);
    py.arg(Path::new(ROOT).join("clients/python/tests/mixed_worker.py"))
        .env("PYTHONPATH", Path::new(ROOT).join("clients/python/src"));
    let mut ts = Command::new(&node);
    ts.arg(&ts_worker);
    let mut workers = vec![
        WorkerProcess::spawn("python", py, &dir, &args("python")),
        WorkerProcess::spawn("typescript", ts, &dir, &args("typescript")),
        WorkerProcess::spawn("go", Command::new(&go_worker), &dir, &args("go")),
    ];
    workers.push(WorkerProcess::spawn("java", java, &dir, &args("java")));
    // Rust's tasks run in this process; every other language is a worker process.
    let languages: Vec<&str> = std::iter::once("rust")
        .chain(workers.iter().map(|w| w.lang))
        .collect();
    let rust_count = Arc::new(Mutex::new(0usize));
    let rust_tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (urls, ids, counter) = (urls.clone(), ids.clone(), rust_count.clone());
            tokio::spawn(rust_worker(i, urls, ids, stop_at, counter))
        })
        .collect();
    let progress = Progress {
        files: workers.iter().map(|w| (w.lang, w.out.clone())).collect(),
        rust: &rust_count,
    };

    // Faults, each once the workers have made progress since the last.
    let mut faults: Vec<String> = Vec::new();
    progress
        .until("every language holds once", &mut workers, |n| {
            n.values().all(|&c| c >= 1) && n.len() == languages.len()
        })
        .await;
    let (from, to) = tokio::task::block_in_place(|| redis_freeze(&redis));
    faults.push(format!("redis frozen {:.0} ms", to - from));
    let seen = progress.total();
    progress
        .until("progress after the first freeze", &mut workers, |n| {
            n.values().sum::<usize>() >= seen + 3
        })
        .await;
    let from = now_ms();
    tokio::task::block_in_place(|| b.kill());
    b.spawn().await;
    faults.push(format!(
        "instance B killed (SIGKILL) and restarted on its port, {:.0} ms down",
        now_ms() - from
    ));
    let seen = progress.total();
    progress
        .until("progress after the restart", &mut workers, |n| {
            n.values().sum::<usize>() >= seen + 3
        })
        .await;
    let (from, to) = tokio::task::block_in_place(|| redis_freeze(&redis));
    faults.push(format!("redis frozen {:.0} ms", to - from));
    let seen = progress.total();
    progress
        .until("progress after the second freeze", &mut workers, |n| {
            n.values().sum::<usize>() >= seen + 3
        })
        .await;
    let last_fault_end = now_ms();
    assert!(
        last_fault_end < stop_at,
        "the faults took longer than the workers run ({RUN_MS} ms): nothing ran after them"
    );

    // Collect and judge.
    let mut beliefs: Vec<Belief> = Vec::new();
    let mut summaries: Vec<Summary> = Vec::new();
    for task in rust_tasks {
        let sink = timeout(PATIENCE, task)
            .await
            .expect("a Rust worker finishes")
            .expect("Rust worker task");
        beliefs.extend(sink.beliefs);
        summaries.extend(sink.summaries);
    }
    for w in workers {
        let (mut b, s) = w.finish().await;
        beliefs.append(&mut b);
        summaries.extend(s);
    }
    let mut per_lang: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ended: BTreeMap<&str, usize> = BTreeMap::new();
    let mut how: BTreeMap<&str, usize> = BTreeMap::new();
    for b in &beliefs {
        *per_lang.entry(&b.lang).or_default() += 1;
        *ended.entry(&b.ended).or_default() += 1;
        *how.entry(&b.how).or_default() += 1;
    }
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for s in &summaries {
        for (k, v) in &s.counts {
            *counts.entry(format!("{}: {k}", s.lang)).or_default() += v;
        }
    }
    let rounds: u64 = summaries.iter().map(|s| s.rounds).sum();
    eprintln!(
        "mixed history: {} beliefs in {rounds} rounds by {} workers; per language {per_lang:?}; \
         held via {how:?}; ended {ended:?}; {} replies dropped by the proxy; faults: {faults:?}\n\
         worker counts: {counts:#?}",
        beliefs.len(),
        summaries.len(),
        proxy.dropped()
    );
    assert_eq!(
        summaries.len(),
        languages.len() * TASKS,
        "every worker wrote its summary: {:?}",
        summaries.iter().map(|s| &s.worker).collect::<Vec<_>>()
    );
    for s in &summaries {
        let written = beliefs.iter().filter(|b| b.worker == s.worker).count() as u64;
        assert_eq!(
            written, s.beliefs,
            "{}: beliefs written vs counted",
            s.worker
        );
    }
    for lang in languages.iter().copied() {
        assert!(
            per_lang.get(lang).copied().unwrap_or(0) >= 3,
            "{lang} workers held too rarely to be judged: {per_lang:?}"
        );
    }
    let found = violations(&beliefs);
    assert!(
        found.is_empty(),
        "{} violations:\n{}",
        found.len(),
        found.join("\n")
    );
    assert!(proxy.dropped() >= 1, "no reply was dropped");
    assert!(
        beliefs.iter().any(|b| b.ended != "released"),
        "no belief was ended by a loss signal: the freezes did not reach a holder"
    );
    assert!(
        beliefs.iter().any(|b| b.start_ms > last_fault_end),
        "nothing held after the last fault"
    );
    drop(proxy);
    drop(a);
    drop(b);
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
}
