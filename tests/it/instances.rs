//! `GET /instances` (issue 43 item 5): real `leasehold serve` processes on
//! one real Redis see each other through the roster they beat into
//! (docs/storage.md, "Keys"); one SIGKILLed drops out after the
//! staleness bound, one stopped with SIGTERM at once; the embedded store
//! answers itself; the roster key keeps its residue bounds; API keys guard
//! it as they guard `/purposes`.

use crate::common;

use std::time::{Duration, Instant};

use common::app::{args, unique, Backend, TestApp};
use common::redis::{RedisCluster, RedisServer};
use common::residue::{self, Layout, ServiceProcess};
use reqwest::StatusCode;
use serde_json::Value;

/// A roster member is dropped this long after its latest beat
/// (`STALE_AFTER`); instances beat every 5 s (`BEAT_EVERY`).
const STALE: Duration = Duration::from_secs(15);
const BEAT: Duration = Duration::from_secs(5);

/// `GET /instances` of `base` (with `key` as a bearer token when given).
async fn read(http: &reqwest::Client, base: &str, key: Option<&str>) -> (StatusCode, Value) {
    let mut req = http.get(format!("{base}/instances"));
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await.expect("GET /instances");
    let status = resp.status();
    (status, resp.json().await.expect("json"))
}

/// The instance ids of an answer, and the one marked `thisInstance`.
fn ids(body: &Value) -> (Vec<String>, Vec<String>) {
    let list = body["instances"].as_array().expect("instances");
    let all = list
        .iter()
        .map(|i| i["instance"].as_str().expect("instance").to_owned())
        .collect();
    let this = list
        .iter()
        .filter(|i| i["thisInstance"] == true)
        .map(|i| i["instance"].as_str().expect("instance").to_owned())
        .collect();
    (all, this)
}

/// Reads `base`'s roster until `done` holds of the ids, at most `within`;
/// returns the last answer and how long it took.
async fn until(
    http: &reqwest::Client,
    base: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let (status, body) = read(http, base, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if done(&ids(&body).0) {
            return (body, start.elapsed());
        }
        assert!(
            start.elapsed() < within,
            "{what} not within {within:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn layout(namespace: &str) -> Layout {
    Layout {
        namespace: namespace.to_owned(),
        max_ttl_ms: 1,
        max_lock_delay_ms: 0,
        max_limit: 1,
        limits: Vec::new(),
        history_entries: 1,
        history_age_ms: 1,
        waiters: 0,
        instances: 3,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_on_one_redis_see_each_other_and_leave_as_they_stop() {
    let redis = RedisServer::start();
    let ns = unique("inst");
    let url = redis.url();
    let env = [
        ("LEASEHOLD_REDIS_URL", url.as_str()),
        ("LEASEHOLD_NAMESPACE", ns.as_str()),
        ("LEASEHOLD_POOL_SIZE", "2"),
    ];
    let (a, mut b, mut c) = tokio::task::block_in_place(|| {
        (
            ServiceProcess::start(&env),
            ServiceProcess::start(&env),
            ServiceProcess::start(&env),
        )
    });
    let http = reqwest::Client::new();

    // Each instance beats once at start: all three are listed at once.
    let (first, _) = until(&http, &a.base, BEAT * 2, "three instances", |ids| {
        ids.len() == 3
    })
    .await;
    let (all, this_a) = ids(&first);
    assert_eq!(this_a.len(), 1, "one marked thisInstance: {first}");
    for item in first["instances"].as_array().expect("list") {
        assert_eq!(item["version"], env!("CARGO_PKG_VERSION"), "{item}");
        assert!(item["lastBeatAgeMs"].as_u64().expect("age") <= 15_000);
        assert!(item["startedAt"].as_str().expect("started").ends_with('Z'));
    }
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "sorted by id");
    // B sees the same three, itself marked, another one than A.
    let (status, seen_b) = read(&http, &b.base, None).await;
    assert_eq!(status, StatusCode::OK);
    let (all_b, this_b) = ids(&seen_b);
    assert_eq!(all_b, all, "the same roster from another instance");
    assert_eq!(this_b.len(), 1);
    assert_ne!(this_b, this_a, "each marks itself");

    // The roster key within its kind's bounds (TTL, size).
    let seen = residue::read_node(&url, &ns, Duration::from_secs(5))
        .await
        .expect("read");
    let roster: Vec<_> = seen
        .iter()
        .filter(|s| s.kind.is_some_and(|k| k.name == "instances"))
        .collect();
    assert_eq!(roster.len(), 1, "one roster key: {seen:?}");
    assert_eq!(roster[0].key, format!("{ns}:instances:v2:{{instances}}"));
    assert_eq!(roster[0].size, 3);
    assert!(roster[0].pttl > 0, "a TTL: {:?}", roster[0]);
    assert!(
        residue::judge(roster[0], &layout(&ns)).is_empty(),
        "{:?}",
        residue::judge(roster[0], &layout(&ns))
    );

    // SIGTERM: B leaves the roster before it exits.
    let gone_b = this_b[0].clone();
    let status = tokio::task::block_in_place(|| b.terminate());
    assert!(status.success(), "B exited {status}: {}", b.log());
    let (status, after_b) = read(&http, &a.base, None).await;
    assert_eq!(status, StatusCode::OK);
    let left = ids(&after_b).0;
    assert_eq!(left.len(), 2, "B left at once: {after_b}");
    assert!(!left.contains(&gone_b));

    // SIGKILL: C cannot leave; it is listed until its beat goes stale.
    let (_, seen_c) = read(&http, &c.base, None).await;
    let gone_c = ids(&seen_c).1[0].clone();
    tokio::task::block_in_place(|| c.kill());
    let killed = Instant::now();
    let (_, still) = read(&http, &a.base, None).await;
    assert!(
        ids(&still).0.contains(&gone_c),
        "a killed instance stays listed until stale: {still}"
    );
    let (after_c, _) = until(&http, &a.base, STALE + BEAT * 2, "C dropped", |ids| {
        !ids.contains(&gone_c)
    })
    .await;
    let took = killed.elapsed();
    println!("a SIGKILLed instance dropped out {took:?} after the kill");
    // Its last beat was at most one beat before the kill.
    assert!(took + BEAT >= STALE, "dropped after {took:?}: {after_c}");
    assert_eq!(ids(&after_c).0, this_a, "only A is left: {after_c}");

    // A, the last, stops cleanly: the roster key is gone with it.
    let mut a = a;
    let status = tokio::task::block_in_place(|| a.terminate());
    assert!(status.success(), "A exited {status}: {}", a.log());
    let left = redis.cli(&["EXISTS", &format!("{ns}:instances:v2:{{instances}}")]);
    assert_eq!(left.trim(), "0", "the roster outlived its last instance");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_answers_itself_and_keys_guard_the_route() {
    let dir = common::cli::temp_dir();
    let key = unique("instances-key-0123456789-");
    // A key for one purpose only, read-only: any valid key may read it.
    std::fs::write(dir.join("api-keys"), format!("{key} report read\n")).expect("keys file");
    let keys = dir.join("api-keys").display().to_string();
    let service = tokio::task::block_in_place(|| {
        ServiceProcess::start(&[("LEASEHOLD_API_KEYS_FILE", keys.as_str())])
    });
    let http = reqwest::Client::new();
    let (status, body) = read(&http, &service.base, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body) = read(&http, &service.base, Some("not-a-key-0123456789")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body) = read(&http, &service.base, Some(&key)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "instances");
    let list = body["instances"].as_array().expect("list");
    assert_eq!(list.len(), 1, "{body}");
    assert_eq!(list[0]["instance"], "local");
    assert_eq!(list[0]["thisInstance"], true);
    assert_eq!(list[0]["lastBeatAgeMs"], 0);
    assert_eq!(list[0]["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        !body.to_string().contains(&key),
        "the answer names no key: {body}"
    );
}

/// `lua/instances.lua` on a real Redis with a small cap: a full roster
/// refuses a new member (status 2) but refreshes a listed one; a beat
/// drops stale members first; each beat sets the TTL; the last leave
/// deletes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roster_script_keeps_its_bounds() {
    let redis = RedisServer::start();
    let client = ::redis::Client::open(redis.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // The script as the service runs it (its includes spliced in).
    let script = ::redis::Script::new(leasehold::store::redis::lua::INSTANCES.assembled);
    let key = "t:instances:v2:{instances}";
    // nonce 0: the reply's first item is status + 9.
    let mut run = async |op: &str, member: &str| -> (i64, Vec<String>) {
        let reply: Vec<::redis::Value> = script
            .key(key)
            .arg(op)
            .arg(member)
            .arg(60_000)
            .arg(2)
            .arg(0)
            .invoke_async(&mut conn)
            .await
            .expect("script");
        let status = match reply[0] {
            ::redis::Value::Int(t) => t - 9,
            ref other => panic!("{other:?}"),
        };
        let members = reply[2..]
            .chunks(2)
            .map(|p| ::redis::from_redis_value_ref::<String>(&p[0]).expect("member"))
            .collect();
        (status, members)
    };
    assert_eq!(
        run("read", "").await,
        (1, vec![]),
        "an empty roster reads empty"
    );
    assert_eq!(run("beat", "a|1|v").await.1, ["a|1|v"]);
    let (status, mut both) = run("beat", "b|1|v").await;
    both.sort();
    assert_eq!((status, both), (1, vec!["a|1|v".into(), "b|1|v".into()]));
    let (status, members) = run("beat", "c|1|v").await;
    assert_eq!(status, 2, "full: c is not added");
    assert_eq!(members.len(), 2, "{members:?}");
    assert_eq!(
        run("beat", "a|1|v").await.0,
        1,
        "a listed member still beats"
    );
    let pttl: i64 = redis.cli(&["PTTL", key]).trim().parse().expect("PTTL");
    assert!(pttl > 0 && pttl <= 60_000, "PTTL {pttl}");
    // b's latest beat 61 s ago: stale, dropped by the next beat, which
    // then has room for c.
    let now = redis.cli(&["TIME"]);
    let secs: u64 = now
        .lines()
        .next()
        .expect("secs")
        .trim()
        .parse()
        .expect("secs");
    let old = ((secs - 61) * 1000).to_string();
    redis.cli(&["ZADD", key, &old, "b|1|v"]);
    let (status, mut members) = run("beat", "c|1|v").await;
    members.sort();
    assert_eq!((status, members), (1, vec!["a|1|v".into(), "c|1|v".into()]));
    assert_eq!(
        redis.cli(&["ZCARD", key]).trim(),
        "2",
        "b is gone from the key"
    );
    assert_eq!(run("leave", "a|1|v").await.1, ["c|1|v"]);
    assert_eq!(run("leave", "c|1|v").await, (1, vec![]));
    assert_eq!(
        redis.cli(&["EXISTS", key]).trim(),
        "0",
        "the last leave deletes it"
    );
}

/// On a Redis Cluster the roster is one key in one slot (its hash tag):
/// two instances see each other through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_on_a_cluster_see_each_other() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = unique("instc");
    let seeds = cluster.seed_urls().join(",");
    let flags = ["--namespace", &ns, "--redis-cluster-nodes", &seeds];
    let a = TestApp::spawn_with(args(&Backend::Memory, &flags)).await;
    let b = TestApp::spawn_with(args(&Backend::Memory, &flags)).await;
    let start = Instant::now();
    let (seen_a, seen_b) = loop {
        let (ra, rb) = (a.get("/instances").await, b.get("/instances").await);
        assert_eq!(ra.status, StatusCode::OK, "{:?}", ra.body);
        assert_eq!(rb.status, StatusCode::OK, "{:?}", rb.body);
        if ids(&ra.body).0.len() == 2 && ids(&rb.body).0.len() == 2 {
            break (ra.body, rb.body);
        }
        assert!(
            start.elapsed() < BEAT * 2,
            "not both listed: {:?} {:?}",
            ra.body,
            rb.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ((all_a, this_a), (all_b, this_b)) = (ids(&seen_a), ids(&seen_b));
    assert_eq!(all_a, all_b, "one roster");
    assert_eq!((this_a.len(), this_b.len()), (1, 1));
    assert_ne!(this_a, this_b, "each marks itself");
    let key = format!("{ns}:instances:v2:{{instances}}");
    let node = cluster.node_for_key(&key);
    assert_eq!(
        node.cli(&["ZCARD", &key]).trim(),
        "2",
        "the roster on its slot's master"
    );
}
