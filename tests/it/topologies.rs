//! Past one Redis: the contract on Redis Cluster, Sentinel, TLS and ACL, and
//! what failovers do to answers, all against real `redis-server` processes.
//!
//! - cluster (3 masters): contract basics, keys of many resources on every
//!   master, a waiter on instance B woken by a release on instance A for
//!   resources on every shard;
//! - cluster (3 masters + 3 replicas): contract basics, CLUSTER FAILOVER and
//!   then a killed master under acquire/release load: every answer typed,
//!   the service recovers on every shard;
//! - sentinel (master + replica + 3 sentinels): contract basics, SENTINEL
//!   FAILOVER under load: answers typed, no `acquired` written to the demoted
//!   master, fencing tokens keep increasing, recovery time printed;
//! - TLS (own CA, client certificate) and a CA that did not sign the server:
//!   refused as `unavailable`, failing `/readyz`, never a 500;
//! - ACL user with only what leasehold needs; a wrong password: `unavailable`
//!   and failing `/readyz`, the password nowhere in answers or metrics;
//! - replica acknowledgements (`WAIT`) reported by the store;
//! - start-up errors for conflicting topology settings.

#[allow(unused_imports)]
use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::app::{args, digest, unique, Backend, Reply, TestApp};
use common::redis::{RedisCluster, RedisSentinelSet, RedisServer, TlsMaterial};
use reqwest::StatusCode;

const P: &str = "invoice-export";

/// Settings for an instance on the embedded-store defaults plus `extra`
/// (the topology flags).
fn topology_args(extra: &[&str]) -> leasehold::config::ServeArgs {
    args(&Backend::Memory, extra)
}

async fn spawn(extra: &[&str]) -> TestApp {
    spawn_with(topology_args(extra)).await
}

async fn spawn_with(args: leasehold::config::ServeArgs) -> TestApp {
    capture_logs();
    TestApp::spawn_with(args).await
}

/// The contract's outcome table, verb by verb, on whatever store `app` has.
async fn contract_basics(app: &TestApp, topology: &str) {
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{:?}", ready.body);
    assert_eq!(ready.body["topology"], topology);
    assert_eq!(ready.body["writable"], true);

    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let first = app.acquire(P, &d, &a, 30_000).await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    assert_eq!(first.outcome(), "acquired");
    assert_eq!(first.body["lease"]["guarantee"], "fenced");
    let replay = app.acquire(P, &d, &a, 60_000).await;
    assert_eq!(
        replay.outcome(),
        "replayed_same_operation",
        "{:?}",
        replay.body
    );
    assert_eq!(replay.fencing_token(), first.fencing_token());
    assert!(replay.remaining_ms() <= 30_000);
    let sibling = app
        .acquire(P, &d, &TestApp::other_operation(&a), 30_000)
        .await;
    assert_eq!(sibling.status, StatusCode::CONFLICT);
    assert_eq!(sibling.outcome(), "owner_operation_conflict");
    let contended = app.acquire(P, &d, &b, 30_000).await;
    assert_eq!(contended.status, StatusCode::CONFLICT);
    assert_eq!(contended.outcome(), "contended");
    assert!(contended.body["retryAfterMs"]
        .as_u64()
        .is_some_and(|ms| ms > 0 && ms <= 30_000));

    let renewed = app.renew(P, &d, &a, 45_000).await;
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
    assert_eq!(renewed.fencing_token(), first.fencing_token());
    assert_eq!(
        app.renew(P, &d, &b, 45_000).await.body["reason"],
        "not_owner"
    );

    let seen = app.inspect(P, &d, Some(&a)).await;
    assert_eq!(seen.body["held"], true);
    assert_eq!(seen.body["heldBy"], "caller");
    assert_eq!(
        seen.body["fencingToken"].as_u64(),
        Some(first.fencing_token())
    );
    assert!(!seen.body.to_string().contains(&a.token));

    assert_eq!(app.release(P, &d, &b).await.outcome(), "not_owner");
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    assert_eq!(app.release(P, &d, &a).await.outcome(), "already_absent");
    let absent = app.renew(P, &d, &a, 1_000).await;
    assert_eq!(absent.status, StatusCode::NOT_FOUND);
    assert_eq!(absent.body["reason"], "absent");
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);

    let again = app.acquire(P, &d, &b, 30_000).await;
    assert_eq!(again.outcome(), "acquired");
    assert!(again.fencing_token() > first.fencing_token());
    assert_eq!(app.release(P, &d, &b).await.outcome(), "released");
}

/// `<ns>:lease:v2:{<purpose>:<digest>}`, as the store writes it.
fn lease_key(namespace: &str, digest: &str) -> String {
    format!("{namespace}:lease:v2:{{{P}:{digest}}}")
}

/// Whether `r` is one of the outcomes the contract allows for `verb`, with
/// its status; panics naming the answer otherwise (a 500 included).
fn assert_typed(verb: &str, r: &Reply) {
    let expected = match (verb, r.outcome()) {
        ("acquire", "acquired") => StatusCode::CREATED,
        ("acquire", "replayed_same_operation") => StatusCode::OK,
        ("acquire", "contended" | "owner_operation_conflict") => StatusCode::CONFLICT,
        ("release", "released" | "already_absent") => StatusCode::OK,
        ("release", "not_owner") => StatusCode::CONFLICT,
        (_, "unavailable") => StatusCode::SERVICE_UNAVAILABLE,
        (_, "indeterminate") => StatusCode::GATEWAY_TIMEOUT,
        _ => panic!("{verb}: untyped answer {} {:?}", r.status, r.body),
    };
    assert_eq!(r.status, expected, "{verb}: {:?}", r.body);
    if r.status.is_server_error() {
        assert_eq!(r.content_type(), "application/problem+json");
    }
}

/// Counts of outcomes, printed at the end of load tests.
#[derive(Default)]
struct Tally(Mutex<BTreeMap<String, usize>>);

impl Tally {
    fn add(&self, verb: &str, r: &Reply) {
        assert_typed(verb, r);
        *self
            .0
            .lock()
            .unwrap()
            .entry(format!("{verb}:{}", r.outcome()))
            .or_default() += 1;
    }
    fn get(&self, key: &str) -> usize {
        self.0.lock().unwrap().get(key).copied().unwrap_or(0)
    }
    fn show(&self) -> String {
        format!("{:?}", self.0.lock().unwrap())
    }
}

// ---------------------------------------------------------------------------
// Redis Cluster
// ---------------------------------------------------------------------------

fn cluster_flag(cluster: &RedisCluster) -> String {
    cluster.seed_urls().join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_contract_spread_and_cross_instance_wakeups() {
    let cluster = RedisCluster::start(3, 0);
    // Give only one seed: the rest is discovered.
    let seeds = cluster.seed_urls()[1].clone();
    let a = spawn(&["--redis-cluster-nodes", &seeds]).await;
    contract_basics(&a, "cluster").await;

    // Keys of many resources land on every master.
    let mut digests = Vec::new();
    for _ in 0..60 {
        let d = digest();
        let at = a.attempt().await;
        assert_eq!(a.acquire(P, &d, &at, 60_000).await.outcome(), "acquired");
        digests.push(d);
    }
    let pattern = format!("{}:lease:v2:*", a.namespace);
    let mut total = 0;
    for master in cluster.masters() {
        let keys = master.cli(&["KEYS", &pattern]);
        let n = keys.lines().filter(|l| !l.is_empty()).count();
        assert!(n > 0, "master {} holds none of 60 leases", master.port());
        total += n;
    }
    assert_eq!(total, 60, "every lease key on exactly one master");

    // A slot being migrated: ASK is followed (ASKING + the script on the
    // importing node); once the slot has moved, MOVED is followed.
    let (moving, fresh) = (digest(), digest());
    let (lease, fence, history) = (
        lease_key(&a.namespace, &moving),
        format!("{}:seq:v2:{{{P}:{moving}}}", a.namespace),
        format!("{}:hist:v2:{{{P}:{moving}}}", a.namespace),
    );
    let holder = a.attempt().await;
    assert_eq!(
        a.acquire(P, &moving, &holder, 30_000).await.outcome(),
        "acquired"
    );
    // A fresh resource in the same slot, so both move together.
    let slot = cluster.slot_for_key(&lease).to_string();
    let fresh = (0..)
        .map(|_| digest())
        .find(|d| key_slot(&format!("{P}:{d}")).to_string() == slot)
        .unwrap_or(fresh);
    assert_eq!(
        cluster
            .slot_for_key(&lease_key(&a.namespace, &fresh))
            .to_string(),
        slot
    );
    let source = cluster.node_for_key(&lease);
    let masters = cluster.masters();
    let target = *masters
        .iter()
        .find(|m| m.port() != source.port())
        .expect("another master");
    let (source_id, target_id) = (
        source.cli(&["CLUSTER", "MYID"]),
        target.cli(&["CLUSTER", "MYID"]),
    );
    target.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
    source.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
    // Every key a script touches is in its KEYS (lua/*.lua headers), so
    // Redis decides before the script runs: keys not on the source are ASK,
    // and a script on keys the importing node lacks is TRYAGAIN:
    // unavailable, read or write, and nothing applied.
    let other = a.attempt().await;
    let r = a.inspect(P, &fresh, Some(&other)).await;
    assert_eq!(r.outcome(), "unavailable", "{:?}", r.body);
    let r = a.acquire(P, &fresh, &other, 30_000).await;
    assert_eq!(r.outcome(), "unavailable", "{:?}", r.body);
    // A read whose keys are all still on the source is served there; a
    // renew that changes the label (renew.lua: a plain renew keeping it,
    // lua/plain_renew.lua, names only the record) names keys that exist
    // nowhere yet (tombstones, index): some keys here, some missing is
    // TRYAGAIN, before anything is written.
    let before = a.inspect(P, &moving, Some(&holder)).await;
    assert_eq!(before.body["heldBy"], "caller", "{:?}", before.body);
    let relabel = serde_json::json!({ "ttlMs": 60_000, "holder": "moved" });
    let r = a.renew_body(P, &moving, &holder, &relabel).await;
    assert_eq!(r.outcome(), "unavailable", "{:?}", r.body);
    let detail = r.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("nothing was applied"), "{:?}", r.body);
    let after = a.inspect(P, &moving, Some(&holder)).await;
    assert_eq!(
        after.body["renewedAt"], before.body["renewedAt"],
        "the refused renew changed nothing"
    );
    assert_eq!(after.body["ttlMs"], 30_000);
    let port = target.port().to_string();
    source.cli(&[
        "MIGRATE",
        "127.0.0.1",
        &port,
        "",
        "0",
        "5000",
        "KEYS",
        &lease,
        &fence,
        &history,
    ]);
    // Moved keys: ASK to the importing node, which has them (a read of
    // them is served there); a renew that changes the label, which names
    // keys it lacks, is TRYAGAIN there: unavailable, and nothing applied.
    let seen = a.inspect(P, &moving, Some(&holder)).await;
    assert_eq!(seen.body["heldBy"], "caller", "{:?}", seen.body);
    let r = a.renew_body(P, &moving, &holder, &relabel).await;
    assert_eq!(r.outcome(), "unavailable", "{:?}", r.body);
    assert!(captured_logs().contains("ASK; following once"));
    let seen = a.inspect(P, &moving, Some(&holder)).await;
    assert_eq!(seen.body["renewedAt"], before.body["renewedAt"]);
    for node in [target, source].into_iter().chain(masters.iter().copied()) {
        node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    }
    // The slot map still names the source: MOVED, followed; the new owner
    // serves every verb.
    assert_eq!(
        a.inspect(P, &moving, Some(&holder)).await.body["heldBy"],
        "caller"
    );
    assert_eq!(
        a.renew(P, &moving, &holder, 30_000).await.outcome(),
        "renewed"
    );
    assert_eq!(a.release(P, &moving, &holder).await.outcome(), "released");
    assert_eq!(
        a.acquire(P, &fresh, &other, 30_000).await.outcome(),
        "acquired"
    );
    assert_eq!(
        target.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        "5",
        "moved fence and history, fresh lease, fence and history"
    );

    // Instance B (same namespace, all seeds) waits; instance A releases.
    // One resource per master, so the wake-up crosses shards.
    let mut b_args = topology_args(&["--redis-cluster-nodes", &cluster_flag(&cluster)]);
    b_args.store.namespace = a.namespace.clone();
    let b = Arc::new(spawn_with(b_args).await);
    let mut per_master: BTreeMap<u16, String> = BTreeMap::new();
    while per_master.len() < 3 {
        let d = digest();
        let port = cluster.node_for_key(&lease_key(&a.namespace, &d)).port();
        per_master.entry(port).or_insert(d);
    }
    for (port, d) in per_master {
        let took = woken_by_release(&a, &b, &d).await;
        println!("cross-instance wake-up, resource on master {port}: answered after {took:?}");
    }
}

/// CRC16/XMODEM of a hash tag modulo 16384 (checked against CLUSTER KEYSLOT
/// where it matters): finds a resource in a given slot without thousands of
/// redis-cli runs.
fn key_slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &byte in tag.as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 0x3FFF
}

/// `holder_app` takes `d`, a waiter on `waiter_app` waits for it, then the
/// holder releases: the waiter must be answered `acquired` after having
/// waited, well before the holder's TTL (30 s) or its own deadline (10 s)
/// could explain it. Returns how long the waiter took.
async fn woken_by_release(holder_app: &TestApp, waiter_app: &Arc<TestApp>, d: &str) -> Duration {
    // The waiter gauge is process-wide: one such dance at a time.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    let holder = holder_app.attempt().await;
    let r = holder_app.acquire(P, d, &holder, 30_000).await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    let waiter = waiter_app.attempt().await;
    let (app, d2) = (Arc::clone(waiter_app), d.to_owned());
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let r = app.acquire_wait(P, &d2, &waiter, 30_000, 10_000).await;
        (r, started.elapsed())
    });
    until_waiting(waiter_app, 1).await;
    assert_eq!(
        holder_app.release(P, d, &holder).await.outcome(),
        "released"
    );
    let (r, took) = waiting.await.expect("waiter");
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    assert!(
        r.body["waitedMs"].as_u64().is_some(),
        "it waited: {:?}",
        r.body
    );
    assert!(took < Duration::from_secs(5), "woken after {took:?}");
    took
}

/// Waits (bounded) until the process-wide `leasehold_waiters` gauge reaches
/// `n`: the waiter's first try is done and it sleeps server-side.
async fn until_waiting(app: &TestApp, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = app.metrics_text().await;
        let waiting = text
            .lines()
            .find_map(|l| l.strip_prefix("leasehold_waiters "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if waiting >= n as f64 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no waiter registered within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Acquire/release on fresh resources from `workers` tasks until `stop`.
fn start_load(
    app: &Arc<TestApp>,
    workers: usize,
    ttl_ms: u64,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workers)
        .map(|_| {
            let (app, stop, tally) = (Arc::clone(app), Arc::clone(stop), Arc::clone(tally));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let d = digest();
                    let at = app.attempt().await;
                    let r = app.acquire(P, &d, &at, ttl_ms).await;
                    tally.add("acquire", &r);
                    if r.outcome() == "acquired" {
                        let r = app.release(P, &d, &at).await;
                        tally.add("release", &r);
                    }
                }
            })
        })
        .collect()
}

/// One fresh digest per current master of `cluster`.
fn digest_per_master(cluster: &RedisCluster, namespace: &str) -> Vec<String> {
    let mut per_master: BTreeMap<u16, String> = BTreeMap::new();
    while per_master.len() < cluster.masters().len() {
        let d = digest();
        let port = cluster.node_for_key(&lease_key(namespace, &d)).port();
        per_master.entry(port).or_insert(d);
    }
    per_master.into_values().collect()
}

/// Retries acquiring each of `digests` (typed answers only) until all are
/// acquired; panics after `within`. Returns how long it took.
async fn all_acquired(app: &TestApp, digests: &[String], within: Duration) -> Duration {
    let started = Instant::now();
    for d in digests {
        let at = app.attempt().await;
        loop {
            let r = app.acquire(P, d, &at, 10_000).await;
            assert_typed("acquire", &r);
            if matches!(r.outcome(), "acquired" | "replayed_same_operation") {
                break;
            }
            assert!(
                started.elapsed() < within,
                "no recovery within {within:?}: {:?}",
                r.body
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_with_replicas_survives_failovers_under_load() {
    let mut cluster = RedisCluster::start(3, 1);
    let app = Arc::new(
        spawn(&[
            "--redis-cluster-nodes",
            &cluster_flag(&cluster),
            "--command-timeout-ms",
            "500",
        ])
        .await,
    );
    contract_basics(&app, "cluster").await;

    // 1. Coordinated CLUSTER FAILOVER on a replica, under load.
    let probes = digest_per_master(&cluster, &app.namespace);
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = start_load(&app, 8, 10_000, &stop, &tally);
    let started = Instant::now();
    tokio::task::block_in_place(|| cluster.failover_replica(0));
    let failover_took = started.elapsed();
    let recovered = all_acquired(&app, &probes, Duration::from_secs(10)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.expect("load task");
    }
    println!(
        "CLUSTER FAILOVER: harness saw it settled after {failover_took:?}; every shard acquirable {recovered:?} later; answers {}",
        tally.show()
    );
    assert!(tally.get("acquire:acquired") > 0);

    // 2. A master that goes away (SIGKILL): its slots answer `unavailable`
    //    (connection refused, nothing sent) or `indeterminate` (in flight),
    //    never anything untyped, until its replica takes over.
    let probes = digest_per_master(&cluster, &app.namespace);
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = start_load(&app, 8, 10_000, &stop, &tally);
    let key = lease_key(&app.namespace, &probes[0]);
    let victim = cluster.node_for_key(&key).port();
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port() == victim)
        .expect("victim is ours")
        .kill();
    let recovered = all_acquired(&app, &probes, Duration::from_secs(30)).await;
    let new_port =
        tokio::task::block_in_place(|| cluster.wait_for_new_node_for_key(&key, victim).port());
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.expect("load task");
    }
    println!(
        "master {victim} killed: every shard acquirable again {recovered:?} after the kill (replica {new_port} promoted); answers {}",
        tally.show()
    );
    assert!(
        tally.get("acquire:unavailable") + tally.get("acquire:indeterminate") > 0,
        "the outage was seen: {}",
        tally.show()
    );
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{:?}", ready.body);
}

// ---------------------------------------------------------------------------
// Redis Sentinel
// ---------------------------------------------------------------------------

/// One `acquired` answer of the load, and when its request was sent.
struct Acquired {
    digest: String,
    token: u64,
    sent: Instant,
}

/// Acquires fresh resources until one is `acquired` (within 30 s) and returns
/// its fencing token. The requests pace themselves: while no master is
/// writable each waits out its command timeout.
async fn first_lease(app: &TestApp, what: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        let a = app.attempt().await;
        let got = app.acquire(P, &digest(), &a, 30_000).await;
        if got.status == StatusCode::CREATED {
            return got.fencing_token();
        }
        last = format!("{} {:?}", got.status, got.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no lease served within 30 s {what}; last answer: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_serves_after_successive_and_aborted_failovers() {
    use futures_util::StreamExt as _;
    let set = RedisSentinelSet::start(1, 3);
    let app = spawn(&[
        "--redis-sentinels",
        &set.sentinel_urls().join(","),
        "--redis-sentinel-master",
        set.master_name(),
        "--command-timeout-ms",
        "500",
    ])
    .await;
    let mut tokens = vec![first_lease(&app, "at start").await];
    // Two failovers in a row: every sentinel announces each +switch-master;
    // the instance must follow both and keep serving.
    for round in 1..=2 {
        let old = set.current_master_port();
        let new = tokio::task::block_in_place(|| set.failover());
        assert_ne!(old, new);
        tokens.push(first_lease(&app, &format!("after failover {round}")).await);
    }
    // An aborted failover: the replica is frozen, so the promotion Sentinel
    // asks for never happens and it gives up after failover-timeout (5 s).
    let sentinel = &set.sentinels[0];
    let mut aborts = redis::Client::open(sentinel.url().as_str())
        .expect("sentinel url")
        .get_async_pubsub()
        .await
        .expect("subscribe to a sentinel");
    aborts
        .psubscribe("-failover-abort-*")
        .await
        .expect("psubscribe");
    // The old master must be a synced replica again before Sentinel will
    // start another failover.
    tokio::task::block_in_place(|| set.wait_settled());
    let master_port = set.current_master_port();
    let replica = std::iter::once(&set.master)
        .chain(&set.replicas)
        .find(|n| n.port() != master_port)
        .expect("a replica");
    replica.freeze();
    let started = sentinel.cli_result(&["SENTINEL", "FAILOVER", set.master_name()]);
    assert!(started.is_ok(), "SENTINEL FAILOVER refused: {started:?}");
    let aborted = tokio::time::timeout(Duration::from_secs(30), aborts.on_message().next()).await;
    assert!(
        matches!(aborted, Ok(Some(_))),
        "the failover did not abort within 30 s"
    );
    tokens.push(first_lease(&app, "after the aborted failover").await);
    replica.thaw();
    assert_eq!(
        set.current_master_port(),
        master_port,
        "the aborted failover moved the master"
    );
    tokens.push(first_lease(&app, "after the replica came back").await);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must keep increasing across failovers: {tokens:?}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_contract_and_failover_under_load() {
    use futures_util::StreamExt as _;
    let set = RedisSentinelSet::start(1, 3);
    let app = Arc::new(
        spawn(&[
            "--redis-sentinels",
            &set.sentinel_urls().join(","),
            "--redis-sentinel-master",
            set.master_name(),
            "--command-timeout-ms",
            "500",
        ])
        .await,
    );
    contract_basics(&app, "sentinel").await;

    // When the sentinels announce the new master, as the test sees it.
    let (switched, mut switch_seen) = tokio::sync::watch::channel(None::<Instant>);
    let switched = Arc::new(switched);
    for url in set.sentinel_urls() {
        let client = redis::Client::open(url.as_str()).expect("sentinel url");
        let mut pubsub = client
            .get_async_pubsub()
            .await
            .expect("subscribe to a sentinel");
        pubsub.subscribe("+switch-master").await.expect("subscribe");
        let switched = Arc::clone(&switched);
        tokio::spawn(async move {
            if pubsub.into_on_message().next().await.is_some() {
                switched
                    .send_if_modified(|at| at.is_none() && at.replace(Instant::now()).is_none());
            }
        });
    }

    // Load: fresh resources acquired and kept (60 s), and one resource
    // acquired and released over and over for its fencing tokens.
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let kept: Arc<Mutex<Vec<Acquired>>> = Arc::default();
    let progress = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (app, stop, tally, kept, progress) = (
            Arc::clone(&app),
            Arc::clone(&stop),
            Arc::clone(&tally),
            Arc::clone(&kept),
            Arc::clone(&progress),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let d = digest();
                let at = app.attempt().await;
                let sent = Instant::now();
                let r = app.acquire(P, &d, &at, 60_000).await;
                tally.add("acquire", &r);
                if r.outcome() == "acquired" {
                    kept.lock().unwrap().push(Acquired {
                        digest: d,
                        token: r.fencing_token(),
                        sent,
                    });
                    progress.notify_one();
                }
            }
        }));
    }
    let fenced = digest();
    let fence_tokens: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    {
        let (app, stop, tally, tokens, fenced, progress) = (
            Arc::clone(&app),
            Arc::clone(&stop),
            Arc::clone(&tally),
            Arc::clone(&fence_tokens),
            fenced.clone(),
            Arc::clone(&progress),
        );
        tasks.push(tokio::spawn(async move {
            // One attempt per cycle, retried until a definite answer (an
            // `indeterminate` acquire may hold the lease: the retry replays).
            while !stop.load(Ordering::Relaxed) {
                let at = app.attempt().await;
                let sent = Instant::now();
                let token = loop {
                    let r = app.acquire(P, &fenced, &at, 10_000).await;
                    tally.add("acquire", &r);
                    match r.outcome() {
                        "acquired" | "replayed_same_operation" => break Some(r.fencing_token()),
                        "contended" => break None,
                        _ if stop.load(Ordering::Relaxed) => break None,
                        _ => {}
                    }
                };
                let Some(token) = token else { continue };
                tokens.lock().unwrap().push((sent, token));
                progress.notify_one();
                loop {
                    let r = app.release(P, &fenced, &at).await;
                    tally.add("release", &r);
                    if matches!(r.outcome(), "released" | "already_absent")
                        || stop.load(Ordering::Relaxed)
                    {
                        break;
                    }
                }
            }
        }));
    }

    // The load is under way (leases and fencing tokens from the old master)
    // before the failover starts.
    tokio::time::timeout(Duration::from_secs(10), async {
        while kept.lock().unwrap().len() < 10 || fence_tokens.lock().unwrap().len() < 3 {
            progress.notified().await;
        }
    })
    .await
    .expect("load running before the failover");
    let old_port = set.current_master_port();
    let failover_started = Instant::now();
    let new_port = tokio::task::block_in_place(|| set.failover());
    let settled = failover_started.elapsed();
    let switch_at = tokio::time::timeout(
        Duration::from_secs(10),
        switch_seen.wait_for(Option::is_some),
    )
    .await
    .expect("+switch-master seen by the test")
    .expect("observer alive")
    .expect("set");
    // Keep the load on until 20 leases were acquired with requests sent
    // after the switch was announced.
    let recovered_by = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let after: Vec<Instant> = kept
                .lock()
                .unwrap()
                .iter()
                .filter(|a| a.sent > switch_at)
                .map(|a| a.sent)
                .collect();
            let fenced_after = fence_tokens
                .lock()
                .unwrap()
                .iter()
                .any(|(sent, _)| *sent > switch_at);
            if after.len() >= 20 && fenced_after {
                return after.into_iter().min();
            }
            progress.notified().await;
        }
    })
    .await
    .expect("service recovers within 15 s of the switch");
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("load task");
    }
    let first_after = recovered_by.expect("an acquisition after the switch");
    println!(
        "SENTINEL FAILOVER {old_port} -> {new_port}: switch announced {:?} after SENTINEL FAILOVER, sentinels agreed after {settled:?}; \
         first lease acquired {:?} after the announcement; answers {}",
        switch_at - failover_started,
        first_after.saturating_duration_since(switch_at),
        tally.show()
    );

    // No `acquired` came from the demoted master: every lease whose request
    // left after the switch is on the new master with its token.
    let kept = std::mem::take(&mut *kept.lock().unwrap());
    let (after, before): (Vec<&Acquired>, Vec<&Acquired>) =
        kept.iter().partition(|a| a.sent > switch_at);
    for a in &after {
        let seen = inspect_definite(&app, &a.digest).await;
        assert_eq!(
            seen.body["held"], true,
            "acquired after the switch but not on the new master: {:?}",
            seen.body
        );
        assert_eq!(seen.body["fencingToken"].as_u64(), Some(a.token));
    }
    let mut lost = 0;
    for a in &before {
        let seen = inspect_definite(&app, &a.digest).await;
        if seen.body["fencingToken"].as_u64() != Some(a.token) {
            lost += 1;
        }
    }
    println!(
        "{} leases acquired after the switch all on the new master; {lost} of {} acquired before it lost",
        after.len(),
        before.len()
    );
    // Writes stop when the failover begins, long before the replica is
    // promoted, so even leases acquired before the announcement survive
    // (loopback replication lags by microseconds). Writing on until
    // +switch-master loses hundreds of them in this very test.
    assert_eq!(
        lost, 0,
        "leases acquired on the old master after the replica's promotion were lost"
    );

    // Fencing tokens after the failover are greater than any before it.
    let tokens = std::mem::take(&mut *fence_tokens.lock().unwrap());
    let before_max = tokens
        .iter()
        .filter(|(sent, _)| *sent < failover_started)
        .map(|(_, t)| *t)
        .max();
    let after_min = tokens
        .iter()
        .filter(|(sent, _)| *sent > switch_at)
        .map(|(_, t)| *t)
        .min();
    let (Some(before_max), Some(after_min)) = (before_max, after_min) else {
        panic!("fence worker saw no acquisition before and after: {tokens:?}")
    };
    assert!(
        after_min > before_max,
        "token {after_min} after the failover, {before_max} before"
    );
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{:?}", ready.body);
    assert_eq!(ready.body["topology"], "sentinel");
}

/// Inspect, retried while the answer is a transient `unavailable` or
/// `indeterminate` (bounded), so a verification never mistakes a slow
/// moment for a lost lease.
async fn inspect_definite(app: &TestApp, d: &str) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = app.inspect(P, d, None).await;
        if r.status == StatusCode::OK || Instant::now() >= deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------
// TLS and ACL
// ---------------------------------------------------------------------------

/// An instance that cannot reach its Redis: `unavailable` (problem+json,
/// 503) and a failing `/readyz`, never a 500. Returns every body seen.
async fn refused(app: &TestApp) -> Vec<String> {
    let at = app.attempt().await;
    let d = digest();
    let mut bodies = Vec::new();
    for r in [
        app.acquire(P, &d, &at, 10_000).await,
        app.release(P, &d, &at).await,
        app.inspect(P, &d, Some(&at)).await,
    ] {
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
        assert_eq!(r.outcome(), "unavailable");
        assert_eq!(r.content_type(), "application/problem+json");
        bodies.push(r.body.to_string());
    }
    let ready = app.get("/readyz").await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        ready.body
    );
    assert_eq!(ready.body["writable"], false);
    bodies.push(ready.body.to_string());
    bodies.push(app.metrics_text().await);
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_own_ca_and_client_certificate() {
    let tls = TlsMaterial::generate();
    let server = RedisServer::start_tls(&tls, true);
    let url = server.tls_url();
    let path = |p: &std::path::Path| p.display().to_string();
    let (ca, other_ca) = (path(&tls.ca_cert), path(&tls.other_ca_cert));
    let (cert, key) = (path(&tls.client_cert), path(&tls.client_key));
    let app = spawn(&[
        "--redis-url",
        &url,
        "--redis-ca-file",
        &ca,
        "--redis-client-cert",
        &cert,
        "--redis-client-key",
        &key,
    ])
    .await;
    contract_basics(&app, "standalone").await;

    // A CA that did not sign the server's certificate: refused.
    let wrong_ca = spawn(&[
        "--redis-url",
        &url,
        "--redis-ca-file",
        &other_ca,
        "--redis-client-cert",
        &cert,
        "--redis-client-key",
        &key,
    ])
    .await;
    refused(&wrong_ca).await;
    // The right CA but no client certificate: the server refuses us.
    let anonymous = spawn(&["--redis-url", &url, "--redis-ca-file", &ca]).await;
    refused(&anonymous).await;
    // Plain text to a TLS-only port: no answer.
    let plain = spawn(&["--redis-url", &server.url()]).await;
    refused(&plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_with_least_privilege_and_wrong_password() {
    let password = unique("pw-Secret");
    let server = RedisServer::start_acl("leasehold", &password);
    let dir = std::env::temp_dir().join(unique("leasehold-acl-"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (good, bad) = (dir.join("password"), dir.join("wrong"));
    let wrong_password = unique("wrong-Secret");
    std::fs::write(&good, format!("{password}\n")).expect("write");
    std::fs::write(&bad, format!("{wrong_password}\n")).expect("write");
    let path = |p: &std::path::Path| p.display().to_string();

    // The user can do nothing leasehold does not need.
    let denied = server.cli_as("leasehold", &password, &["CONFIG", "GET", "maxmemory"]);
    assert!(
        denied.is_err_and(|e| e.contains("NOPERM")),
        "CONFIG must be denied"
    );

    let app = spawn(&[
        "--redis-url",
        &server.url(),
        "--redis-username",
        "leasehold",
        "--redis-password-file",
        &path(&good),
    ])
    .await;
    contract_basics(&app, "standalone").await;
    let mut seen = vec![
        app.get("/readyz").await.body.to_string(),
        app.metrics_text().await,
    ];

    // Credentials in the URL work too.
    let in_url = format!("redis://leasehold:{password}@127.0.0.1:{}", server.port());
    let via_url = spawn(&["--redis-url", &in_url]).await;
    let at = via_url.attempt().await;
    let r = via_url.acquire(P, &digest(), &at, 10_000).await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    seen.push(r.body.to_string());

    // A wrong password, from the file or the URL: unavailable, not ready.
    let wrong = spawn(&[
        "--redis-url",
        &server.url(),
        "--redis-username",
        "leasehold",
        "--redis-password-file",
        &path(&bad),
    ])
    .await;
    seen.extend(refused(&wrong).await);
    let wrong_url = format!(
        "redis://leasehold:{wrong_password}@127.0.0.1:{}",
        server.port()
    );
    let wrong_in_url = spawn(&["--redis-url", &wrong_url]).await;
    seen.extend(refused(&wrong_in_url).await);

    let logs = captured_logs();
    assert!(
        logs.contains("redis connect failed") || logs.contains("store unavailable"),
        "failures are logged"
    );
    for text in seen.iter().chain([&logs]) {
        assert!(!text.contains(&password), "password leaked: {text}");
        assert!(!text.contains(&wrong_password), "password leaked: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ACL rules `docs/topologies.md` recommends are enough: every verb,
/// readiness and the wake-up subscription work for a user limited to the
/// namespace's keys and wake-up channel and to the commands leasehold sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_rules_from_the_docs_are_enough() {
    let namespace = unique("acl");
    let password = unique("pw-Documented");
    let rules = format!(
        "leasehold on >{password} resetkeys ~{namespace}:* resetchannels &{namespace}:wake:v2 \
         -@all +evalsha +script|load +get +set +del +exists +pexpire +pttl +time +publish \
         +hget +hmget +hgetall +hset +hdel +hlen +hscan \
         +zadd +zrem +zcard +zcount +zrange +zrangebyscore +zrank +zscore +zscan +zremrangebyscore \
         +lpush +ltrim +lrange +lindex +scan +subscribe +ping +info +hello +auth"
    );
    let mut argv = vec!["--user"];
    argv.extend(rules.split_whitespace());
    let server = RedisServer::start_with(&argv);
    let file = std::env::temp_dir().join(unique("leasehold-acl-pw-"));
    std::fs::write(&file, &password).expect("write");
    let mut settings = topology_args(&[
        "--redis-url",
        &server.url(),
        "--redis-username",
        "leasehold",
        "--redis-password-file",
        &file.display().to_string(),
    ]);
    settings.store.namespace = namespace.clone();
    let app = Arc::new(spawn_with(settings).await);
    contract_basics(&app, "standalone").await;
    // The roster of instances (lua/instances.lua): this instance's first
    // beat, sent at start, went through (a refused beat is only logged).
    let r = app.get("/instances").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["instances"][0]["thisInstance"], true, "{:?}", r.body);
    // The wake-up subscription works too: a waiter is woken by the release.
    woken_by_release(&app, &app, &digest()).await;
    // Listing: SCAN, INFO server, PING and the inspect script, page by page.
    let (held, holder) = (digest(), app.attempt().await);
    assert_eq!(
        app.acquire(P, &held, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let mut query = "limit=1".to_owned();
    let mut listed = Vec::new();
    loop {
        let r = app.get(&format!("/leases/{P}?{query}")).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        listed.extend(r.body["leases"].as_array().into_iter().flatten().cloned());
        match r.body["nextCursor"].as_str() {
            Some(next) => query = format!("limit=1&cursor={next}"),
            None => break,
        }
    }
    assert!(
        listed.iter().any(|l| l["digest"] == held.as_str()),
        "{listed:?}"
    );
    // Sessions (lua/session.lua, lua/session_renew.lua): make, attach a
    // plain and a counted lease, renew (the light path), end.
    let owner = app.attempt().await;
    let made = app
        .http
        .post(format!("{}/sessions", app.base))
        .header("Lease-Owner-Token", &owner.token)
        .header("Lease-Operation-Id", &owner.op)
        .json(&serde_json::json!({"ttlMs": 30_000}))
        .send()
        .await
        .expect("send");
    assert_eq!(made.status(), StatusCode::CREATED);
    let made: serde_json::Value = made.json().await.expect("JSON");
    let id = made["session"]["id"].as_str().expect("id").to_owned();
    for (i, body) in [serde_json::json!({}), serde_json::json!({"limit": 2})]
        .iter()
        .enumerate()
    {
        let r = app
            .http
            .put(format!(
                "{}/sessions/{id}/leases/{P}/{}",
                app.base,
                digest()
            ))
            .header("Lease-Owner-Token", &owner.token)
            .header("Lease-Operation-Id", format!("op-{i}"))
            .json(body)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let renewed = app
        .http
        .patch(format!("{}/sessions/{id}", app.base))
        .header("Lease-Owner-Token", &owner.token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .expect("send");
    let renewed: serde_json::Value = renewed.json().await.expect("JSON");
    assert_eq!(renewed["outcome"], "renewed", "{renewed}");
    assert_eq!(renewed["lost"], serde_json::json!([]));
    let ended = app
        .http
        .delete(format!("{}/sessions/{id}", app.base))
        .header("Lease-Owner-Token", &owner.token)
        .send()
        .await
        .expect("send");
    let ended: serde_json::Value = ended.json().await.expect("JSON");
    assert_eq!(ended["released"], 2, "{ended}");
    // Nothing outside the namespace, no admin commands.
    let denied = server.cli_as("leasehold", &password, &["GET", "other:key"]);
    assert!(denied.is_err_and(|e| e.contains("NOPERM")));
    let _ = std::fs::remove_file(&file);
}

/// Logs of every instance in this test binary, kept in memory so tests can
/// assert what never appears in them (echoed to stderr with `TEST_LOG`).
fn capture_logs() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let echo = std::env::var_os("TEST_LOG").is_some();
        tracing_subscriber::fmt()
            .with_env_filter("leasehold=debug,info")
            .with_ansi(false)
            .with_writer(move || LogWriter { echo })
            .try_init()
            .expect("this test binary installs its log capture first");
    });
}

fn log_buffer() -> &'static Mutex<Vec<u8>> {
    static BUFFER: std::sync::OnceLock<Mutex<Vec<u8>>> = std::sync::OnceLock::new();
    BUFFER.get_or_init(Mutex::default)
}

fn captured_logs() -> String {
    String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned()
}

struct LogWriter {
    echo: bool,
}

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.echo {
            eprint!("{}", String::from_utf8_lossy(buf));
        }
        log_buffer().lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Replica acknowledgements
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_say_how_many_replicas_have_the_write() {
    use leasehold::domain::{
        Attempt, Bounds, OperationId, OwnerToken, Purpose, ResourceDigest, ResourceId,
    };
    use leasehold::notify::WaitRegistry;
    use leasehold::store::{AcquireSpec, Replication, StoreAcquire, StoreRelease, StoreRenew};

    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let store = |required: &str, timeout_ms: &str| {
        let args = topology_args(&[
            "--redis-url",
            &master.url(),
            "--redis-min-replicas",
            required,
            "--redis-replica-timeout-ms",
            timeout_ms,
        ]);
        let config = args.validate().expect("valid");
        leasehold::build_store(&config.store, Arc::new(WaitRegistry::new(10))).expect("store")
    };
    let resource = || ResourceId {
        purpose: Purpose::parse(P).expect("purpose"),
        digest: ResourceDigest::of_raw_id(&unique("raw-")),
    };
    let attempt = || Attempt {
        owner_token: OwnerToken::generate().expect("token"),
        operation_id: OperationId::parse(&unique("op-")).expect("op"),
    };
    let ttl = Bounds::new(10, 3_600_000, 30_000).ttl(30_000).expect("ttl");
    let acked = |n| {
        Some(Replication {
            acknowledged: n,
            required: 1,
        })
    };

    // WAIT blocks until the replica (syncing at first) has the write.
    let patient = store("1", "10000");
    let (r, a) = (resource(), attempt());
    let got = patient
        .acquire(&r, &a, &AcquireSpec::plain(ttl))
        .await
        .expect("answer");
    assert!(
        matches!(got.value, StoreAcquire::Acquired { .. }),
        "{got:?}"
    );
    assert_eq!(got.replication, acked(1));
    // A replay writes nothing: no WAIT, nothing to report.
    let again = patient
        .acquire(&r, &a, &AcquireSpec::plain(ttl))
        .await
        .expect("answer");
    assert!(matches!(again.value, StoreAcquire::Replayed { .. }));
    assert_eq!(again.replication, None);
    let renewed = patient.renew(&r, &a, ttl, None).await.expect("answer");
    assert!(matches!(renewed.value, StoreRenew::Renewed { .. }));
    assert_eq!(renewed.replication, acked(1));
    let released = patient.release(&r, &a).await.expect("answer");
    assert!(
        matches!(released.value, StoreRelease::Released { held_ms } if held_ms < 60_000),
        "{:?}",
        released.value
    );
    assert_eq!(released.replication, acked(1));
    let absent = patient.release(&r, &a).await.expect("answer");
    assert_eq!(
        (absent.value, absent.replication),
        (StoreRelease::AlreadyAbsent, None)
    );

    // More replicas asked for than exist: the write stands, the answer says 1 of 2.
    let greedy = store("2", "200");
    let got = greedy
        .acquire(&resource(), &attempt(), &AcquireSpec::plain(ttl))
        .await
        .expect("answer");
    assert!(matches!(got.value, StoreAcquire::Acquired { .. }));
    let replication = got.replication.expect("reported");
    assert_eq!((replication.acknowledged, replication.required), (1, 2));
    assert!(!replication.satisfied());

    // The replica stops answering: acquired, acknowledged by none.
    let hasty = store("1", "200");
    replica.freeze();
    let started = Instant::now();
    let got = hasty
        .acquire(&resource(), &attempt(), &AcquireSpec::plain(ttl))
        .await;
    replica.thaw();
    let got = got.expect("answer");
    assert!(matches!(got.value, StoreAcquire::Acquired { .. }));
    assert_eq!(got.replication, acked(0));
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "WAIT waited for its timeout"
    );
}

// ---------------------------------------------------------------------------
// Start-up errors
// ---------------------------------------------------------------------------

#[tokio::test]
async fn conflicting_topology_settings_are_start_up_errors() {
    let fails = |extra: &[&str], names: &[&str]| {
        let err = topology_args(extra)
            .validate()
            .expect_err("must be refused")
            .to_string();
        for name in names {
            assert!(err.contains(name), "{err:?} should name {name}");
        }
    };
    let (url, tls_url) = ("redis://127.0.0.1:6379", "rediss://127.0.0.1:6379");
    fails(
        &["--redis-url", url, "--redis-cluster-nodes", url],
        &["LEASEHOLD_REDIS_URL", "LEASEHOLD_REDIS_CLUSTER_NODES"],
    );
    fails(
        &[
            "--redis-cluster-nodes",
            url,
            "--redis-sentinels",
            url,
            "--redis-sentinel-master",
            "m",
        ],
        &["LEASEHOLD_REDIS_CLUSTER_NODES", "LEASEHOLD_REDIS_SENTINELS"],
    );
    fails(
        &["--redis-sentinels", url],
        &["LEASEHOLD_REDIS_SENTINEL_MASTER"],
    );
    fails(
        &["--redis-url", url, "--redis-sentinel-master", "m"],
        &["LEASEHOLD_REDIS_SENTINEL_MASTER"],
    );
    fails(
        &["--redis-url", url, "--redis-ca-file", "/ca.pem"],
        &["LEASEHOLD_REDIS_CA_FILE", "rediss://"],
    );
    fails(
        &["--redis-url", tls_url, "--redis-client-cert", "/c.pem"],
        &["LEASEHOLD_REDIS_CLIENT_KEY"],
    );
    fails(
        &["--redis-cluster-nodes", &format!("{url},{tls_url}")],
        &["LEASEHOLD_REDIS_CLUSTER_NODES", "schemes"],
    );
    fails(
        &["--redis-cluster-nodes", "http://127.0.0.1:1"],
        &["LEASEHOLD_REDIS_CLUSTER_NODES"],
    );
    fails(
        &["--redis-min-replicas", "1"],
        &["LEASEHOLD_REDIS_MIN_REPLICAS"],
    );
    fails(
        &[
            "--redis-url",
            url,
            "--redis-min-replicas",
            "1",
            "--redis-replica-timeout-ms",
            "0",
        ],
        &["LEASEHOLD_REDIS_REPLICA_TIMEOUT_MS"],
    );
    topology_args(&[
        "--redis-cluster-nodes",
        &format!("{tls_url}, {tls_url}"),
        "--redis-ca-file",
        "/ca.pem",
    ])
    .validate()
    .expect("one topology, TLS files with rediss://");

    // A URL that does not parse is not quoted back: it may hold a password.
    let args = topology_args(&["--redis-cluster-nodes", "redis://user:hunter2-Secret@[::1"]);
    let err = match leasehold::build_store(
        &args.store,
        Arc::new(leasehold::notify::WaitRegistry::new(1)),
    ) {
        Err(err) => err.to_string(),
        Ok(_) => panic!("a broken URL must be refused"),
    };
    assert!(
        err.contains("LEASEHOLD_REDIS_CLUSTER_NODES") && !err.contains("hunter2"),
        "{err}"
    );
    // So is an unreadable CA file.
    let args = topology_args(&[
        "--redis-url",
        tls_url,
        "--redis-ca-file",
        "/nonexistent/ca.pem",
    ]);
    let err = match leasehold::build_store(
        &args.store,
        Arc::new(leasehold::notify::WaitRegistry::new(1)),
    ) {
        Err(err) => err.to_string(),
        Ok(_) => panic!("a missing CA file must be refused"),
    };
    assert!(err.contains("LEASEHOLD_REDIS_CA_FILE"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_are_reported_on_lease_answers() {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let app = TestApp::spawn_with(args(
        &Backend::Redis(master.url()),
        &[
            "--redis-min-replicas",
            "1",
            "--redis-replica-timeout-ms",
            "10000",
        ],
    ))
    .await;
    let d = digest();
    let a = app.attempt().await;
    let got = app.acquire(P, &d, &a, 30_000).await;
    assert_eq!(got.status, StatusCode::CREATED, "{:?}", got.body);
    assert_eq!(got.body["lease"]["replication"]["acknowledged"], 1);
    assert_eq!(got.body["lease"]["replication"]["required"], 1);
    assert_eq!(got.body["lease"]["guarantee"], "fenced");
    // A replay wrote nothing: no replication to report.
    let replay = app.acquire(P, &d, &a, 30_000).await;
    assert!(replay.body["lease"].get("replication").is_none());
    let renewed = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(renewed.body["lease"]["replication"]["acknowledged"], 1);

    // A replica that cannot answer: the lease is still granted on the
    // primary, and the answer says it is not replicated.
    let short = TestApp::spawn_with(args(
        &Backend::Redis(master.url()),
        &[
            "--redis-min-replicas",
            "1",
            "--redis-replica-timeout-ms",
            "100",
        ],
    ))
    .await;
    replica.freeze();
    let b = short.attempt().await;
    let unacked = short.acquire(P, &digest(), &b, 30_000).await;
    replica.thaw();
    assert_eq!(unacked.status, StatusCode::CREATED, "{:?}", unacked.body);
    assert_eq!(unacked.body["lease"]["replication"]["acknowledged"], 0);
    assert_eq!(unacked.body["lease"]["replication"]["required"], 1);
}
