//! Waits that really wait: `waitMs` on acquire, woken by a release on any
//! instance or by the holder's expiry, bounded, cancelled by disconnect and
//! by shutdown. Cross-instance cases run two services on one real Redis.

#[allow(unused_imports)]
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::app::{args, digest, unique, Backend, TestApp};
use common::redis::RedisServer;
use reqwest::StatusCode;
use serde_json::json;

const P: &str = "report-build";

/// Two instances sharing one store namespace (Redis), or one instance twice (memory).
async fn pair(backend: &Backend, extra: &[&str]) -> (Arc<TestApp>, Arc<TestApp>) {
    match backend {
        Backend::Memory => {
            let one = Arc::new(TestApp::spawn_with(args(backend, extra)).await);
            (Arc::clone(&one), one)
        }
        Backend::Redis(_) => {
            let ns = unique("w");
            let mut flags = vec!["--namespace", ns.as_str()];
            flags.extend_from_slice(extra);
            let a = TestApp::spawn_with(args(backend, &flags)).await;
            let b = TestApp::spawn_with(args(backend, &flags)).await;
            (Arc::new(a), Arc::new(b))
        }
    }
}

both_stores!(
    release_on_one_instance_wakes_a_waiter_on_the_other,
    expiry_wakes_a_waiter,
    deadline_ends_as_contended,
    disconnecting_waiter_leaves_nothing_behind,
    waiter_cap_answers_overloaded,
    same_attempt_retried_while_waiting_holds_once,
    a_duplicate_wait_is_answered_at_the_release,
    fifty_waiters_each_acquire_exactly_once_never_two_at_a_time,
);

async fn release_on_one_instance_wakes_a_waiter_on_the_other(backend: Backend) {
    let (a, b) = pair(&backend, &[]).await;
    let d = digest();
    let holder = a.attempt().await;
    assert_eq!(
        a.acquire(P, &d, &holder, 30_000).await.status,
        StatusCode::CREATED
    );
    let waiter = b.attempt().await;
    let task = {
        let (b, d, waiter) = (Arc::clone(&b), d.clone(), waiter.clone());
        tokio::spawn(async move { b.acquire_wait(P, &d, &waiter, 30_000, 20_000).await })
    };
    b.until_waiters(1).await;
    assert_eq!(a.release(P, &d, &holder).await.outcome(), "released");
    let got = task.await.expect("waiter");
    assert_eq!(got.status, StatusCode::CREATED, "{:?}", got.body);
    assert_eq!(got.outcome(), "acquired");
    let waited = got.body["waitedMs"].as_u64().expect("waitedMs");
    // Woken by the release, long before the holder's 30 s TTL.
    assert!(waited < 15_000, "{waited}");
    b.until_waiters(0).await;
}

async fn expiry_wakes_a_waiter(backend: Backend) {
    let (a, b) = pair(&backend, &[]).await;
    let d = digest();
    let holder = a.attempt().await;
    let held = a.acquire(P, &d, &holder, 300).await;
    assert_eq!(held.status, StatusCode::CREATED);
    let waiter = b.attempt().await;
    let got = b.acquire_wait(P, &d, &waiter, 30_000, 20_000).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    assert!(got.body["waitedMs"].as_u64().is_some());
    assert!(got.fencing_token() > held.fencing_token());
}

async fn deadline_ends_as_contended(backend: Backend) {
    let (a, b) = pair(&backend, &[]).await;
    let d = digest();
    let holder = a.attempt().await;
    a.acquire(P, &d, &holder, 30_000).await;
    let waiter = b.attempt().await;
    let got = b.acquire_wait(P, &d, &waiter, 30_000, 300).await;
    assert_eq!(got.status, StatusCode::CONFLICT, "{:?}", got.body);
    assert_eq!(got.outcome(), "contended");
    assert!(got.body["waitedMs"].as_u64().expect("waitedMs") >= 300);
    assert!(got.body["retryAfterMs"].as_u64().expect("retryAfterMs") > 0);
    assert!(got.headers.contains_key("retry-after"));
    b.until_waiters(0).await;
}

async fn disconnecting_waiter_leaves_nothing_behind(backend: Backend) {
    let (a, b) = pair(&backend, &[]).await;
    let d = digest();
    let holder = a.attempt().await;
    a.acquire(P, &d, &holder, 30_000).await;
    let waiter = b.attempt().await;
    // A client that gives up: its own connection, dropped mid-wait.
    let impatient = reqwest::Client::new();
    let request = impatient
        .put(format!("{}/leases/{P}/{d}", b.base))
        .header("Lease-Owner-Token", &waiter.token)
        .header("Lease-Operation-Id", &waiter.op)
        .json(&json!({ "ttlMs": 30_000, "waitMs": 20_000 }))
        .send();
    let pending = tokio::spawn(request);
    b.until_waiters(1).await;
    pending.abort();
    let _ = pending.await;
    drop(impatient);
    b.until_waiters(0).await;
    // Released now: nobody acquires on the vanished client's behalf.
    assert_eq!(a.release(P, &d, &holder).await.outcome(), "released");
    let seen = b.inspect(P, &d, Some(&waiter)).await;
    assert_eq!(seen.body["held"], false, "{:?}", seen.body);
}

async fn waiter_cap_answers_overloaded(backend: Backend) {
    let (a, b) = pair(&backend, &["--max-waiters", "1"]).await;
    let d = digest();
    let holder = a.attempt().await;
    a.acquire(P, &d, &holder, 30_000).await;
    let first = b.attempt().await;
    let task = {
        let (b, d, first) = (Arc::clone(&b), d.clone(), first.clone());
        tokio::spawn(async move { b.acquire_wait(P, &d, &first, 30_000, 20_000).await })
    };
    b.until_waiters(1).await;
    let second = b.attempt().await;
    let shed = b.acquire_wait(P, &d, &second, 30_000, 20_000).await;
    assert_eq!(
        shed.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        shed.body
    );
    assert_eq!(shed.outcome(), "overloaded");
    assert!(shed.headers.contains_key("retry-after"));
    // Try-once requests are not waits and are not capped.
    assert_eq!(
        b.acquire(P, &d, &second, 30_000).await.outcome(),
        "contended"
    );
    a.release(P, &d, &holder).await;
    assert_eq!(task.await.expect("waiter").outcome(), "acquired");
}

async fn same_attempt_retried_while_waiting_holds_once(backend: Backend) {
    let (a, b) = pair(&backend, &[]).await;
    let d = digest();
    let holder = a.attempt().await;
    a.acquire(P, &d, &holder, 30_000).await;
    let waiter = b.attempt().await;
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (b, d, waiter) = (Arc::clone(&b), d.clone(), waiter.clone());
        tasks.push(tokio::spawn(async move {
            b.acquire_wait(P, &d, &waiter, 30_000, 20_000).await
        }));
    }
    b.until_waiters(2).await;
    a.release(P, &d, &holder).await;
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("task").outcome().to_owned());
    }
    outcomes.sort();
    assert_eq!(outcomes, ["acquired", "replayed_same_operation"]);
    assert_eq!(
        b.inspect(P, &d, Some(&waiter)).await.body["heldBy"],
        "caller"
    );
}

/// Issue 39, item 13: a client that timed out and sent its waiting
/// acquire again (the same attempt waiting twice). The release hands the
/// lease to the first (on Redis: a grant in the release's own run when the
/// holder releases on the waiters' instance, a wake-up and a look when on
/// another); the second, whose attempt holds the lease from then on, is
/// answered then too (a replay), not at its own deadline.
async fn a_duplicate_wait_is_answered_at_the_release(backend: Backend) {
    let (a, b) = pair(&backend, &[]).await;
    // Released on the other instance, then on the waiters' own.
    duplicate_wait(&a, &b).await;
    duplicate_wait(&b, &b).await;
}

async fn duplicate_wait(a: &Arc<TestApp>, b: &Arc<TestApp>) {
    let d = digest();
    let holder = a.attempt().await;
    assert_eq!(
        a.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let waiter = b.attempt().await;
    let wait = |b: &Arc<TestApp>| {
        let (b, d, waiter) = (Arc::clone(b), d.clone(), waiter.clone());
        tokio::spawn(async move {
            let got = b.acquire_wait(P, &d, &waiter, 30_000, 20_000).await;
            (got, std::time::Instant::now())
        })
    };
    let first = wait(b);
    b.until_waiters(1).await;
    let second = wait(b);
    b.until_waiters(2).await;
    let released_at = std::time::Instant::now();
    assert_eq!(a.release(P, &d, &holder).await.outcome(), "released");
    let mut answers = Vec::new();
    for task in [first, second] {
        let (got, at) = task.await.expect("waiter");
        let after = at.saturating_duration_since(released_at);
        // The deadline is 20 s away; the hand-off takes milliseconds.
        assert!(
            after < Duration::from_secs(5),
            "answered {after:?} after the release (its deadline is 20 s): {:?}",
            got.body
        );
        answers.push((got.outcome().to_owned(), got.fencing_token()));
    }
    answers.sort();
    assert_eq!(answers[0].0, "acquired", "{answers:?}");
    assert_eq!(answers[1].0, "replayed_same_operation", "{answers:?}");
    assert_eq!(answers[0].1, answers[1].1, "one permit, one fencing token");
    b.until_waiters(0).await;
}

async fn fifty_waiters_each_acquire_exactly_once_never_two_at_a_time(backend: Backend) {
    let (a, b) = pair(&backend, &[]).await;
    let d = Arc::new(digest());
    let holder = a.attempt().await;
    a.acquire(P, &d, &holder, 30_000).await;
    let holding = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..50 {
        let app = if i % 2 == 0 {
            Arc::clone(&a)
        } else {
            Arc::clone(&b)
        };
        let (d, holding) = (Arc::clone(&d), Arc::clone(&holding));
        tasks.push(tokio::spawn(async move {
            let me = app.attempt().await;
            let got = app.acquire_wait(P, &d, &me, 30_000, 30_000).await;
            assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
            assert_eq!(
                holding.fetch_add(1, Ordering::SeqCst),
                0,
                "two holders at once"
            );
            holding.fetch_sub(1, Ordering::SeqCst);
            assert_eq!(app.release(P, &d, &me).await.outcome(), "released");
            got.fencing_token()
        }));
    }
    // Everyone is queued before the first release.
    if Arc::ptr_eq(&a, &b) {
        a.until_waiters(50).await;
    } else {
        a.until_waiters(25).await;
        b.until_waiters(25).await;
    }
    assert_eq!(a.release(P, &d, &holder).await.outcome(), "released");
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.push(t.await.expect("waiter"));
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        50,
        "each waiter acquired exactly once, with its own fencing token"
    );
}

/// The turn holder's heartbeat goes beside its wait: a heartbeat whose
/// reply hangs (every reply to the instance held back 10 s, under a 20 s
/// command timeout) holds up neither the wait's end at shutdown nor
/// anything else the wait listens for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_heartbeat_does_not_hold_up_the_wait() {
    let server = RedisServer::start();
    let queue_sha = server.script_sha("queue");
    let proxy = common::fault_proxy::FaultProxy::start(server.addr()).await;
    let ns = unique("w");
    let a = TestApp::spawn_with(args(&Backend::Redis(server.url()), &["--namespace", &ns])).await;
    let flags = ["--namespace", &ns, "--command-timeout-ms", "20000"];
    let mut b = TestApp::spawn_with(args(&Backend::Redis(proxy.url()), &flags)).await;
    let d = digest();
    let holder = a.attempt().await;
    assert_eq!(
        a.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let waiter = b.attempt().await;
    let request = b
        .http
        .put(format!("{}/leases/{P}/{d}", b.base))
        .header("Lease-Owner-Token", &waiter.token)
        .header("Lease-Operation-Id", &waiter.op)
        .json(&json!({ "ttlMs": 30_000, "waitMs": 25_000 }));
    let task =
        tokio::spawn(async move { TestApp::reply(request.send().await.expect("sent")).await });
    b.until_waiters(1).await;
    proxy.set_reply_delay(Duration::from_secs(10));
    // Redis has answered a heartbeat (at most 500 ms after the enter); its
    // reply is on hold.
    assert!(
        proxy
            .until_answered(&queue_sha, 1, Duration::from_secs(10))
            .await,
        "the waiting instance never sent a heartbeat"
    );
    let started = std::time::Instant::now();
    b.begin_shutdown();
    let got = task.await.expect("waiter");
    assert_eq!(got.outcome(), "contended", "{:?}", got.body);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the wait ended {:?} after the shutdown: it waited for the heartbeat's reply",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_waits_promptly_as_contended() {
    let server = RedisServer::start();
    let backend = Backend::Redis(server.url());
    let ns = unique("w");
    let a = TestApp::spawn_with(args(&backend, &["--namespace", &ns])).await;
    let mut b = TestApp::spawn_with(args(&backend, &["--namespace", &ns])).await;
    let d = digest();
    let holder = a.attempt().await;
    a.acquire(P, &d, &holder, 30_000).await;
    let waiter = b.attempt().await;
    let url = format!("{}/leases/{P}/{d}", b.base);
    let http = b.http.clone();
    let task = tokio::spawn(async move {
        let resp = http
            .put(url)
            .header("Lease-Owner-Token", &waiter.token)
            .header("Lease-Operation-Id", &waiter.op)
            .json(&json!({ "ttlMs": 30_000, "waitMs": 25_000 }))
            .send()
            .await
            .expect("answered before the process exits");
        TestApp::reply(resp).await
    });
    b.until_waiters(1).await;
    let started = std::time::Instant::now();
    b.begin_shutdown();
    let got = task.await.expect("waiter");
    assert_eq!(got.outcome(), "contended", "{:?}", got.body);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    b.finished().await;
}
