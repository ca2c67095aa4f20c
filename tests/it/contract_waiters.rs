//! `GET /leases/{purpose}/{digest}/waiters` (issue 43, item 3), on the
//! embedded store and a real `redis-server`: the queue read for people.
//!
//! - waiters appear in the order they started waiting, each with its
//!   position, instance, mode, place time and holder label, and leave it
//!   as they acquire (a release hands the lease to the first) or give up;
//! - `limit` cuts the list, not the count; bad limits and paths are
//!   refused by name;
//! - no owner token or operation id is ever in the answer; scoped like
//!   inspect (`read` on the purpose);
//! - Redis: the instance the waiters wait on, with its heartbeat, read
//!   for that instance whatever other instances beat in the queue (65+
//!   heartbeats sorted ahead of it), and at most 64 instances listed;
//! - and what the console shows of a held lease beside it: inspect
//!   gives each permit its `lockDelayMs` (the delay its expiry would
//!   start) beside `maxHoldMs` and `holdEndsAt`.
//!
//! Every wait is on server state (the waiters answer itself, polled within
//! a bound), never on a sleep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::app::{args, digest, unique, Backend, Reply, TestApp, TestAttempt};
use crate::common::redis::RedisServer;
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "invoice-export";

both_stores!(
    waiters_are_listed_in_order_and_leave_as_they_go,
    bad_limits_and_paths_are_refused_by_name,
    a_permit_shows_its_lock_delay_and_hold_bound,
    a_read_key_reads_the_waiters_and_another_purpose_may_not,
);

async fn waiters(app: &TestApp, d: &str, query: &str) -> Reply {
    let r = app.get(&format!("/leases/{P}/{d}/waiters{query}")).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_eq!(r.outcome(), "waiters", "{:#}", r.body);
    r
}

/// Polls the waiters answer until `waiting` is `n` (bounded: 10 s).
async fn until_waiting(app: &TestApp, d: &str, n: u64) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = waiters(app, d, "").await;
        if r.body["waiting"] == json!(n) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "waiting stuck, wanted {n}: {:#}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A waiting acquire of `d` as `holder`, in a task.
fn wait_for(
    app: &Arc<TestApp>,
    d: &str,
    a: &TestAttempt,
    holder: &str,
    wait_ms: u64,
) -> tokio::task::JoinHandle<Reply> {
    let (app, d, a) = (Arc::clone(app), d.to_owned(), a.clone());
    let body = json!({"ttlMs": 30_000, "waitMs": wait_ms, "holder": holder});
    tokio::spawn(async move { app.acquire_body(P, &d, &a, &body).await })
}

fn holders(r: &Reply) -> Vec<String> {
    r.body["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| w["holder"].as_str().unwrap_or("-").to_owned())
        .collect()
}

async fn waiters_are_listed_in_order_and_leave_as_they_go(backend: Backend) {
    let app = Arc::new(TestApp::spawn(&backend).await);
    let d = digest();
    let none = waiters(&app, &d, "").await;
    assert_eq!(
        none.body,
        json!({"outcome": "waiters", "waiting": 0, "complete": true, "waiters": [], "instances": []})
    );
    let holder = app.attempt().await;
    let r = app
        .acquire_body(
            P,
            &d,
            &holder,
            &json!({"ttlMs": 30_000, "holder": "holder-a"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);

    let (b, c, e) = (
        app.attempt().await,
        app.attempt().await,
        app.attempt().await,
    );
    let before_b = std::time::SystemTime::now();
    let b_wait = wait_for(&app, &d, &b, "waiter-b", 20_000);
    until_waiting(&app, &d, 1).await;
    let c_wait = wait_for(&app, &d, &c, "waiter-c", 20_000);
    until_waiting(&app, &d, 2).await;
    // A third that gives up (its deadline): it goes from the queue.
    let e_wait = wait_for(&app, &d, &e, "waiter-e", 1_000);
    until_waiting(&app, &d, 3).await;
    let gave_up = e_wait.await.expect("join");
    assert_eq!(gave_up.outcome(), "contended", "{:#}", gave_up.body);
    let r = until_waiting(&app, &d, 2).await;
    assert_eq!(holders(&r), ["waiter-b", "waiter-c"], "{:#}", r.body);

    let list = r.body["waiters"].as_array().expect("waiters");
    for (n, w) in list.iter().enumerate() {
        assert_eq!(w["position"], json!(n + 1), "{w:#}");
        assert_eq!(w["mode"], "exclusive", "{w:#}");
        assert!(!w["instance"].as_str().expect("instance").is_empty());
        assert!(w["waitedMs"].as_u64().expect("waitedMs") < 20_000, "{w:#}");
    }
    assert_eq!(list[0]["instance"], list[1]["instance"], "one instance");
    let since = |w: &Value| w["since"].as_str().expect("since").to_owned();
    assert!(since(&list[0]) <= since(&list[1]), "{:#}", r.body);
    // The place time is the store's clock when the waiter entered (whole
    // ms; this test's clock is the store's on the loopback machine).
    let entered = chrono_ms(&since(&list[0]));
    let sent = before_b
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert!(
        entered + 5 >= sent && entered < sent + 10_000,
        "{entered} vs {sent}"
    );
    match backend {
        Backend::Memory => assert_eq!(r.body["instances"], json!([]), "{:#}", r.body),
        Backend::Redis(_) => {
            let instances = r.body["instances"].as_array().expect("instances");
            assert_eq!(instances.len(), 1, "{:#}", r.body);
            assert_eq!(instances[0]["instance"], list[0]["instance"]);
            let alive = instances[0]["aliveForMs"].as_u64().expect("aliveForMs");
            assert!(alive <= 2_000, "the heartbeat horizon is 2 s: {alive}");
            let age = instances[0]["heartbeatAgeMs"]
                .as_u64()
                .expect("heartbeatAgeMs");
            assert_eq!(alive + age, 2_000, "{:#}", r.body);
        }
    }
    // No secret of any waiter or of the holder.
    let text = r.body.to_string();
    for a in [&holder, &b, &c, &e] {
        assert!(!text.contains(&a.token), "an owner token in {text}");
        assert!(!text.contains(&a.op), "an operation id in {text}");
    }
    // `limit` cuts the list, not the count.
    let one = waiters(&app, &d, "?limit=1").await;
    assert_eq!(one.body["waiting"], 2);
    assert_eq!(holders(&one), ["waiter-b"]);

    // A release hands the lease to the first; the second moves up.
    assert_eq!(app.release(P, &d, &holder).await.status, StatusCode::OK);
    let got = b_wait.await.expect("join");
    assert_eq!(got.outcome(), "acquired", "{:#}", got.body);
    let r = until_waiting(&app, &d, 1).await;
    assert_eq!(holders(&r), ["waiter-c"], "{:#}", r.body);
    assert_eq!(r.body["waiters"][0]["position"], 1);
    assert_eq!(app.release(P, &d, &b).await.status, StatusCode::OK);
    let got = c_wait.await.expect("join");
    assert_eq!(got.outcome(), "acquired", "{:#}", got.body);
    let r = until_waiting(&app, &d, 0).await;
    assert_eq!(r.body["waiters"], json!([]));
    assert_eq!(app.release(P, &d, &c).await.status, StatusCode::OK);
    Arc::into_inner(app).expect("one owner").shutdown().await;
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` → ms since the epoch.
fn chrono_ms(text: &str) -> u64 {
    leasehold::domain::StoreTime::parse(text)
        .unwrap_or_else(|| panic!("not a store time: {text}"))
        .0
}

async fn bad_limits_and_paths_are_refused_by_name(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    for bad in [
        "?limit=0",
        "?limit=101",
        "?limit=x",
        "?limit=1&limit=2",
        "?limit=",
    ] {
        let r = app.get(&format!("/leases/{P}/{d}/waiters{bad}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:#}", r.body);
        assert_eq!(r.outcome(), "invalid_request", "{bad}");
        assert!(r.body.to_string().contains("limit"), "{bad}: {:#}", r.body);
    }
    for path in [
        format!("/leases/{P}/v1.nothex/waiters"),
        format!("/leases/Bad/{d}/waiters"),
    ] {
        let r = app.get(&path).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {:#}", r.body);
        assert_eq!(r.outcome(), "invalid_request", "{path}");
    }
    let ok = waiters(&app, &d, "?limit=100&other=1").await;
    assert_eq!(ok.body["waiting"], 0);
    app.shutdown().await;
}

async fn a_permit_shows_its_lock_delay_and_hold_bound(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let (d, plain) = (digest(), digest());
    let a = app.attempt().await;
    let body =
        json!({"ttlMs": 30_000, "lockDelayMs": 5_000, "maxHoldMs": 3_600_000, "holder": "bounded"});
    let r = app.acquire_body(P, &d, &a, &body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    let b = app.attempt().await;
    assert_eq!(
        app.acquire(P, &plain, &b, 30_000).await.status,
        StatusCode::CREATED
    );
    let seen = app.inspect(P, &d, None).await;
    let permit = &seen.body["permits"][0];
    assert_eq!(permit["lockDelayMs"], 5_000, "{:#}", seen.body);
    assert_eq!(permit["maxHoldMs"], 3_600_000, "{:#}", seen.body);
    let ends = chrono_ms(permit["holdEndsAt"].as_str().expect("holdEndsAt"));
    let acquired = chrono_ms(permit["acquiredAt"].as_str().expect("acquiredAt"));
    assert_eq!(ends, acquired + 3_600_000);
    // No lock-delay runs while it is held.
    assert!(
        seen.body.get("lockDelayRemainingMs").is_none(),
        "{:#}",
        seen.body
    );
    // Without one, none is shown.
    let other = app.inspect(P, &plain, None).await;
    assert!(
        other.body["permits"][0].get("lockDelayMs").is_none(),
        "{:#}",
        other.body
    );
    app.shutdown().await;
}

async fn a_read_key_reads_the_waiters_and_another_purpose_may_not(backend: Backend) {
    let dir = std::env::temp_dir().join(unique("leasehold-waiters-keys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let (reader, stranger) = (
        unique("reader-key-0123456789-"),
        unique("stranger-key-0123456789-"),
    );
    let file = dir.join("keys");
    std::fs::write(
        &file,
        format!("{reader} {P} read\n{stranger} report read\n"),
    )
    .expect("keys");
    let app = TestApp::spawn_with(args(
        &backend,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let d = digest();
    let ask = |key: Option<&str>| {
        let mut rb = app.http.get(format!("{}/leases/{P}/{d}/waiters", app.base));
        if let Some(key) = key {
            rb = rb.header("authorization", format!("Bearer {key}"));
        }
        rb.send()
    };
    let r = TestApp::reply(ask(Some(&reader)).await.expect("send")).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_eq!(r.outcome(), "waiters");
    let r = TestApp::reply(ask(Some(&stranger)).await.expect("send")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:#}", r.body);
    assert_eq!(r.outcome(), "forbidden");
    let r = TestApp::reply(ask(None).await.expect("send")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:#}", r.body);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server's clock in ms (`TIME`).
fn server_now_ms(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().expect("TIME"));
    let (secs, micros) = (parts.next().expect("secs"), parts.next().expect("µs"));
    secs * 1000 + micros / 1000
}

/// Redis: a waiter counts while its own instance's heartbeat is alive,
/// however many other instances beat in the same queue. 70 other live
/// heartbeats, each with a later deadline than the real instance's (so
/// sorted ahead of it: score -(deadline)), once read the first 64 of them
/// only and counted the real waiter dead (`waiting: 0`, `complete: true`).
/// Then 70 live waiters of those instances ahead of it: all are counted,
/// the real one last, and the instances listed stop at 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_counts_behind_many_other_instances_heartbeats() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let d = digest();
    let queue = format!("{}:queue:v2:{{{P}:{d}}}", app.namespace);
    let holder = app.attempt().await;
    let r = app.acquire(P, &d, &holder, 60_000).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    let w = app.attempt().await;
    let waiting = {
        let (http, url, w) = (
            app.http.clone(),
            format!("{}/leases/{P}/{d}", app.base),
            w.clone(),
        );
        tokio::spawn(async move {
            let sent = http
                .put(url)
                .header("Lease-Owner-Token", &w.token)
                .header("Lease-Operation-Id", &w.op)
                .json(&json!({"ttlMs": 30_000, "waitMs": 20_000, "holder": "the-real-one"}))
                .send()
                .await;
            drop(sent);
        })
    };
    let r = until_waiting(&app, &d, 1).await;
    let real = r.body["waiters"][0]["instance"]
        .as_str()
        .expect("instance")
        .to_owned();

    // 70 other instances' heartbeats, each good for a minute (the real
    // one's is good for 2 s at most): all sorted ahead of it.
    let later = server_now_ms(&server) + 60_000;
    let fakes: Vec<String> = (0..70).map(|n| format!("fake{n:02}")).collect();
    let mut zadd = vec!["ZADD".to_owned(), queue.clone()];
    for (n, f) in fakes.iter().enumerate() {
        zadd.extend([format!("-{}", later + n as u64), format!("~{f}")]);
    }
    let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
    assert_eq!(server.cli(&zadd).trim(), "70");
    let beats = server.cli(&["ZRANGEBYSCORE", &queue, "-inf", "(0"]);
    let beats: Vec<&str> = beats.lines().map(str::trim).collect();
    assert_eq!(beats.len(), 71, "{beats:?}");
    assert_eq!(
        beats[70],
        format!("~{real}"),
        "the real heartbeat sorts last"
    );

    let r = waiters(&app, &d, "").await;
    assert_eq!(r.body["waiting"], 1, "{:#}", r.body);
    assert_eq!(r.body["complete"], true, "{:#}", r.body);
    assert_eq!(holders(&r), ["the-real-one"], "{:#}", r.body);
    assert_eq!(r.body["instances"].as_array().map(Vec::len), Some(1));
    assert_eq!(r.body["instances"][0]["instance"], real.as_str());

    // A live waiter of each of those instances, ahead of the real one
    // (scores 1..70 µs: the start of the store's clock).
    let mut zadd = vec!["ZADD".to_owned(), queue.clone()];
    for (n, f) in fakes.iter().enumerate() {
        zadd.extend([(n + 1).to_string(), format!("x:{f}:1")]);
    }
    let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
    assert_eq!(server.cli(&zadd).trim(), "70");
    let r = waiters(&app, &d, "?limit=100").await;
    assert_eq!(r.body["waiting"], 71, "{:#}", r.body);
    let list = r.body["waiters"].as_array().expect("waiters");
    assert_eq!(list.len(), 71);
    assert_eq!(list[70]["instance"], real.as_str(), "{:#}", r.body);
    assert_eq!(list[70]["position"], 71);
    let listed: Vec<&str> = r.body["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| i["instance"].as_str().expect("instance"))
        .collect();
    let first: Vec<&str> = fakes[..64].iter().map(String::as_str).collect();
    assert_eq!(listed, first, "the first 64 instances in queue order");

    // The fakes go; the real waiter leaves as the instance stops.
    let mut zrem = vec!["ZREM".to_owned(), queue.clone()];
    for f in &fakes {
        zrem.extend([format!("~{f}"), format!("x:{f}:1")]);
    }
    let zrem: Vec<&str> = zrem.iter().map(String::as_str).collect();
    assert_eq!(server.cli(&zrem).trim(), "140");
    app.shutdown().await;
    waiting.await.expect("the waiter's request");
}
