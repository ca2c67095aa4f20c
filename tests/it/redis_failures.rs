//! What a caller sees when Redis misbehaves: down, restarted empty, flushed,
//! frozen, replies lost, scripts flushed. Every answer stays typed.

#[allow(unused_imports)]
use crate::common;

use std::time::{Duration, Instant};

use common::app::{args, digest, Backend, TestApp};
use common::redis::{RedisServer, ReplyDropProxy};
use reqwest::StatusCode;

const P: &str = "billing";

/// Command timeout used where the test is about the timeout itself.
const TIMEOUT_MS: u64 = 200;
/// What "within the command timeout" may add: HTTP, scheduling on a loaded
/// 2-core machine running debug builds.
const MARGIN: Duration = Duration::from_millis(400);

async fn app_with_timeout(url: String) -> TestApp {
    let timeout = TIMEOUT_MS.to_string();
    TestApp::spawn_with(args(
        &Backend::Redis(url),
        &["--command-timeout-ms", &timeout],
    ))
    .await
}

fn lease_key(app: &TestApp, d: &str) -> String {
    format!("{}:lease:v2:{{{P}:{d}}}", app.namespace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_while_redis_is_down_then_recovers_with_higher_fencing() {
    let mut server = RedisServer::start();
    let app = app_with_timeout(server.url()).await;
    let d = digest();
    let a = app.attempt().await;
    let before = app.acquire(P, &d, &a, 30_000).await;
    assert_eq!(before.status, StatusCode::CREATED, "{:?}", before.body);
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");

    server.kill();
    for _ in 0..5 {
        let b = app.attempt().await;
        let started = Instant::now();
        let r = app.acquire(P, &d, &b, 30_000).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
        assert_eq!(r.outcome(), "unavailable");
        assert_eq!(r.content_type(), "application/problem+json");
        assert!(r.headers.contains_key("retry-after"));
        assert!(
            started.elapsed() < Duration::from_millis(TIMEOUT_MS) + MARGIN,
            "{:?}",
            started.elapsed()
        );
    }
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.body["writable"], false);

    // Back, empty: the fencing counter is gone, tokens still increase.
    server.restart();
    let c = app.attempt().await;
    let after = app.acquire(P, &d, &c, 30_000).await;
    assert_eq!(after.status, StatusCode::CREATED, "{:?}", after.body);
    assert!(after.fencing_token() > before.fencing_token());
    assert_eq!(app.get("/readyz").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_at_start_answers_unavailable_not_a_crash() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let app = app_with_timeout(url).await;
    let a = app.attempt().await;
    let r = app.acquire(P, &digest(), &a, 30_000).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(r.outcome(), "unavailable");
    assert_eq!(
        app.get("/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(app.get("/livez").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_keeps_increasing_across_flushall() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let d = digest();
    let mut last = 0;
    for round in 0..5 {
        let a = app.attempt().await;
        let r = app.acquire(P, &d, &a, 30_000).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        assert!(
            r.fencing_token() > last,
            "round {round}: {} after {last}",
            r.fencing_token()
        );
        last = r.fencing_token();
        server.cli(&["FLUSHALL"]);
    }
}

/// The acquire script's fast path (a plain lease on a free resource) reads
/// the sequence key as the general path does: a last token ahead of the
/// server clock is continued (not replaced by the clock), the change count
/// goes on from what was stored, a sequence written before the queue mark
/// existed (three fields) and a queue mark long past both take the fast
/// path, and what it writes back keeps every mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_and_version_continue_from_a_stored_sequence_ahead_of_the_clock() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let ahead: u64 = 8_000_000_000_000_000;
    for (stored, changes) in [
        (format!("{ahead}:41:0"), 42),
        (format!("{ahead}:99:0:1"), 100),
    ] {
        let d = digest();
        let seq = format!("{}:seq:v2:{{{P}:{d}}}", app.namespace);
        server.cli(&["SET", &seq, &stored]);
        let a = app.attempt().await;
        let r = app.acquire(P, &d, &a, 30_000).await;
        assert_eq!(r.status, StatusCode::CREATED, "{stored}: {:?}", r.body);
        assert_eq!(r.fencing_token(), ahead + 1, "{stored}: {:?}", r.body);
        let seen = app.inspect(P, &d, None).await;
        assert_eq!(
            seen.body["version"],
            format!("{changes}.1"),
            "{stored}: {:?}",
            seen.body
        );
        let marks = if stored.matches(':').count() == 2 {
            "0:0"
        } else {
            "0:1"
        };
        assert_eq!(
            server.cli(&["GET", &seq]),
            format!("{}:{changes}:{marks}", ahead + 1),
            "{stored}"
        );
        let released = app.release(P, &d, &a).await;
        assert_eq!(released.status, StatusCode::OK, "{:?}", released.body);
        let b = app.attempt().await;
        let again = app.acquire(P, &d, &b, 30_000).await;
        assert_eq!(
            again.fencing_token(),
            ahead + 2,
            "{stored}: {:?}",
            again.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_reply_is_indeterminate_then_replay_reports_server_ttl() {
    let server = RedisServer::start();
    let proxy = ReplyDropProxy::start(server.addr()).await;
    let app = app_with_timeout(proxy.url()).await;
    let d = digest();
    let warm = app.attempt().await;
    assert_eq!(
        app.acquire(P, &digest(), &warm, 30_000).await.status,
        StatusCode::CREATED
    );

    let a = app.attempt().await;
    proxy.drop_replies(true);
    let started = Instant::now();
    let r = app.acquire(P, &d, &a, 30_000).await;
    let took = started.elapsed();
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{:?}", r.body);
    assert_eq!(r.outcome(), "indeterminate");
    assert_eq!(r.body["operationId"], a.op.as_str());
    assert_eq!(r.content_type(), "application/problem+json");
    assert!(
        took < Duration::from_millis(TIMEOUT_MS) + MARGIN,
        "answered after {took:?}"
    );
    assert!(proxy.bytes_dropped() > 0, "the reply was really lost");
    // The script did run: the lease exists in Redis.
    assert_eq!(server.cli(&["EXISTS", &lease_key(&app, &d)]), "1");

    proxy.drop_replies(false);
    let replay = app.acquire(P, &d, &a, 30_000).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_eq!(replay.outcome(), "replayed_same_operation");
    assert!(replay.remaining_ms() < 30_000, "{:?}", replay.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_redis_is_answered_within_the_bound() {
    let server = RedisServer::start();
    let app = app_with_timeout(server.url()).await;
    let d = digest();
    let a = app.attempt().await;
    assert_eq!(
        app.acquire(P, &d, &a, 30_000).await.status,
        StatusCode::CREATED
    );

    server.freeze();
    for verb in ["acquire", "renew", "release", "inspect"] {
        let b = app.attempt().await;
        let started = Instant::now();
        let r = match verb {
            "acquire" => app.acquire(P, &d, &b, 30_000).await,
            "renew" => app.renew(P, &d, &a, 30_000).await,
            "release" => app.release(P, &d, &b).await,
            _ => app.inspect(P, &d, None).await,
        };
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(TIMEOUT_MS) + MARGIN,
            "{verb} answered after {took:?}"
        );
        match (r.status, r.outcome()) {
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            | (StatusCode::GATEWAY_TIMEOUT, "indeterminate") => {}
            other => panic!("{verb}: untyped answer {other:?} {:?}", r.body),
        }
    }
    server.thaw();
    // Connections that timed out were dropped; fresh ones work.
    let again = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_after_script_flush_is_recovered() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let d = digest();
    let a = app.attempt().await;
    assert_eq!(
        app.acquire(P, &d, &a, 30_000).await.status,
        StatusCode::CREATED
    );
    server.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(app.renew(P, &d, &a, 30_000).await.outcome(), "renewed");
    server.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(app.inspect(P, &d, Some(&a)).await.body["heldBy"], "caller");
    server.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    server.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(app.acquire(P, &d, &a, 30_000).await.outcome(), "acquired");
}

/// Ends every permit of a record ARGV[1] ms from now (its `expiresAt` and
/// the key's PTTL), as if the lease had been acquired long ago.
const SHORTEN_LEASE: &str = "local t = redis.call('TIME') \
    local ends = string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])) \
    local s = redis.pcall('GET', KEYS[1]) \
    if type(s) == 'string' then \
      local f, fence, rest = string.match(s, '^([^|]*)|(%d+)|%d+|(.*)$') \
      return redis.call('SET', KEYS[1], f .. '|' .. fence .. '|' .. ends .. '|' .. rest, 'PX', ARGV[1]) end \
    local r = redis.call('HGETALL', KEYS[1]) \
    for i = 1, #r, 2 do if string.sub(r[i], 1, 2) == 'p:' then \
      local f, rest = string.match(r[i + 1], '^(%d+)|%d+|(.*)$') \
      redis.call('HSET', KEYS[1], r[i], f .. '|' .. ends .. '|' .. rest) end end \
    return redis.call('PEXPIRE', KEYS[1], ARGV[1])";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_late_in_a_lease_reports_the_server_pttl() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let d = digest();
    let a = app.attempt().await;
    let first = app.acquire(P, &d, &a, 60_000).await;
    // Late in the lease: 300 ms left on the server (set directly, no sleeping).
    server.cli(&["EVAL", SHORTEN_LEASE, "1", &lease_key(&app, &d), "300"]);
    let replay = app.acquire(P, &d, &a, 60_000).await;
    assert_eq!(replay.outcome(), "replayed_same_operation");
    assert_eq!(replay.fencing_token(), first.fencing_token());
    assert!(replay.remaining_ms() <= 300, "{:?}", replay.body);
    // And replay did not extend it.
    let pttl: i64 = server
        .cli(&["PTTL", &lease_key(&app, &d)])
        .parse()
        .expect("pttl");
    assert!(pttl <= 300, "{pttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_limit_sheds_as_overloaded_without_touching_redis() {
    let server = RedisServer::start();
    let app = TestApp::spawn_with(args(
        &Backend::Redis(server.url()),
        &["--max-in-flight", "1", "--command-timeout-ms", "1500"],
    ))
    .await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    // Frozen Redis holds the single admission permit for the command timeout.
    server.freeze();
    let (ra, rb) = tokio::join!(
        app.acquire(P, &d, &a, 30_000),
        app.acquire(P, &d, &b, 30_000)
    );
    server.thaw();
    let outcomes = [ra.outcome().to_owned(), rb.outcome().to_owned()];
    let shed = [&ra, &rb]
        .into_iter()
        .filter(|r| r.outcome() == "overloaded")
        .count();
    assert_eq!(shed, 1, "{outcomes:?}");
    for r in [&ra, &rb] {
        assert!(
            matches!(
                r.status,
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
            ),
            "{:?}",
            r.body
        );
        if r.outcome() == "overloaded" {
            assert!(r.headers.contains_key("retry-after"));
            assert!(r.body["retryAfterMs"].as_u64().is_some());
        }
    }
}
