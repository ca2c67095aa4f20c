//! Honest when callers leave (docs/design.md §14): what the service does on its own
//! after a caller has gone never undoes what another request was told, and
//! a wait survives a store hiccup. Real `redis-server` processes behind a
//! RESP-aware proxy that delays, loses or cuts replies.

#[allow(unused_imports)]
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::app::{args, digest, unique, Backend, TestApp, TestAttempt};
use common::fault_proxy::FaultProxy;
use common::redis::RedisServer;
use reqwest::StatusCode;
use serde_json::json;

const P: &str = "callers-leave";

/// Instance A reaches Redis through `proxy`, instance B directly; one
/// namespace, so they serve the same leases.
async fn pair(server: &RedisServer, proxy: &FaultProxy, timeout_ms: &str) -> (TestApp, TestApp) {
    let ns = unique("cl");
    let flags = [
        "--namespace",
        ns.as_str(),
        "--command-timeout-ms",
        timeout_ms,
        "--release-abandoned",
        "true",
    ];
    let a = TestApp::spawn_with(args(&Backend::Redis(proxy.url()), &flags)).await;
    let b = TestApp::spawn_with(args(&Backend::Redis(server.url()), &flags)).await;
    (a, b)
}

/// A waiting acquire on `app` through a client of its own, which the test
/// drops (the caller closes its socket).
fn waiting_acquire(
    app: &TestApp,
    d: &str,
    who: &TestAttempt,
    wait_ms: u64,
) -> tokio::task::JoinHandle<Result<reqwest::Response, reqwest::Error>> {
    let own = reqwest::Client::new();
    let request = own
        .put(format!("{}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &who.token)
        .header("Lease-Operation-Id", &who.op)
        .json(&json!({ "ttlMs": 30_000, "waitMs": wait_ms }));
    tokio::spawn(async move {
        let sent = request.send().await;
        drop(own);
        sent
    })
}

/// Polls B until the waiter's acquire has run in Redis (B reads the record
/// directly, while A's copy of the reply is still held back by the proxy).
async fn until_held_by(b: &TestApp, d: &str, who: &TestAttempt) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = b.inspect(P, d, Some(who)).await;
        if seen.body["heldBy"] == "caller" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter's acquire never ran: {:?}",
            seen.body
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The reproduction: the waiter's acquire runs, its reply is held
/// back, the caller closes its socket and retries with the same attempt on
/// another instance (told `replayed_same_operation`). The clean-up release
/// of the departed waiter then runs, and must leave the lease to the caller
/// that was told it holds it: a third attempt stays `contended`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_up_after_a_departed_waiter_spares_a_lease_its_retry_was_told_it_holds() {
    let server = RedisServer::start();
    let release_sha = server.script_sha("release");
    let proxy = FaultProxy::start(server.addr()).await;
    let (a, b) = pair(&server, &proxy, "1500").await;
    let d = digest();
    let holder = b.attempt().await;
    assert_eq!(
        b.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let waiter = a.attempt().await;
    let pending = waiting_acquire(&a, &d, &waiter, 20_000);
    a.until_waiters(1).await;
    proxy.set_reply_delay(Duration::from_millis(400));
    assert_eq!(b.release(P, &d, &holder).await.outcome(), "released");
    until_held_by(&b, &d, &waiter).await;
    // The caller gives up while A still waits for the script's reply...
    pending.abort();
    let _ = pending.await;
    // ... and retries with the same attempt: it is told it holds the lease.
    let retry = b.acquire(P, &d, &waiter, 30_000).await;
    assert_eq!(retry.status, StatusCode::OK, "{:?}", retry.body);
    assert_eq!(retry.outcome(), "replayed_same_operation");
    // A's clean-up release has run in Redis (the proxy saw its answer).
    assert!(
        proxy
            .until_answered(&release_sha, 1, Duration::from_secs(10))
            .await,
        "the departed waiter's clean-up release never ran"
    );
    let seen = b.inspect(P, &d, Some(&waiter)).await;
    assert_eq!(seen.body["heldBy"], "caller", "{:?}", seen.body);
    let third = b.attempt().await;
    let other = b.acquire(P, &d, &third, 30_000).await;
    assert_eq!(other.status, StatusCode::CONFLICT, "{:?}", other.body);
    assert_eq!(other.outcome(), "contended");
    assert_eq!(
        b.release(P, &d, &waiter).await.outcome(),
        "released",
        "the caller told it holds the lease can still release it"
    );
}

/// Without a retry, the clean-up does take back what the departed waiter
/// got: nobody is left holding a lease for a caller that has gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_up_after_a_departed_waiter_releases_what_nobody_claimed() {
    let server = RedisServer::start();
    let release_sha = server.script_sha("release");
    let proxy = FaultProxy::start(server.addr()).await;
    let (a, b) = pair(&server, &proxy, "1500").await;
    let d = digest();
    let holder = b.attempt().await;
    assert_eq!(
        b.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let waiter = a.attempt().await;
    let pending = waiting_acquire(&a, &d, &waiter, 20_000);
    a.until_waiters(1).await;
    proxy.set_reply_delay(Duration::from_millis(400));
    assert_eq!(b.release(P, &d, &holder).await.outcome(), "released");
    until_held_by(&b, &d, &waiter).await;
    pending.abort();
    let _ = pending.await;
    assert!(
        proxy
            .until_answered(&release_sha, 1, Duration::from_secs(10))
            .await,
        "the departed waiter's clean-up release never ran"
    );
    let seen = b.inspect(P, &d, None).await;
    assert_eq!(seen.body["held"], false, "{:?}", seen.body);
    let next = b.attempt().await;
    assert_eq!(b.acquire(P, &d, &next, 30_000).await.outcome(), "acquired");
}

/// A wait whose acquire reply is lost (Redis applied it) does not answer
/// `indeterminate` while its deadline leaves room: it tries again with the
/// same attempt, the replay shows the first try applied, and the caller is
/// told `acquired`, once, with the first try's fencing token. Without a
/// wait the same loss is `indeterminate` (nothing to wait in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_inside_a_wait_is_retried_with_the_same_attempt() {
    let server = RedisServer::start();
    let acquire_sha = server.script_sha("acquire");
    let proxy = FaultProxy::start(server.addr()).await;
    let (a, b) = pair(&server, &proxy, "300").await;

    let d = digest();
    let waiter = a.attempt().await;
    proxy.lose_script_replies(1);
    let got = a.acquire_wait(P, &d, &waiter, 30_000, 5_000).await;
    assert_eq!(got.status, StatusCode::CREATED, "{:?}", got.body);
    assert_eq!(got.outcome(), "acquired");
    assert_eq!(proxy.lost_replies(), 1);
    // Two runs of the acquire script: the lost one (it applied) and the replay.
    assert_eq!(proxy.answered(&acquire_sha), 2);
    let seen = b.inspect(P, &d, Some(&waiter)).await;
    assert_eq!(seen.body["heldBy"], "caller", "{:?}", seen.body);
    assert_eq!(
        seen.body["fencingToken"].as_u64(),
        Some(got.fencing_token())
    );

    let d2 = digest();
    let plain = a.attempt().await;
    proxy.lose_script_replies(1);
    let got = a.acquire(P, &d2, &plain, 30_000).await;
    assert_eq!(got.status, StatusCode::GATEWAY_TIMEOUT, "{:?}", got.body);
    assert_eq!(got.outcome(), "indeterminate");
}

/// Every connection of an instance to Redis is cut for a moment while its
/// waiters wait: they keep waiting (no 503/504), and when the holder
/// releases, one of them acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_survive_a_cut_of_every_store_connection() {
    let server = RedisServer::start();
    let acquire_sha = server.script_sha("acquire");
    let proxy = FaultProxy::start(server.addr()).await;
    let (a, b) = pair(&server, &proxy, "300").await;
    let a = Arc::new(a);
    let d = digest();
    let holder = b.attempt().await;
    assert_eq!(
        b.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let who = a.attempt().await;
        let (a, d) = (Arc::clone(&a), d.clone());
        waiting.push(tokio::spawn(async move {
            a.acquire_wait(P, &d, &who, 30_000, 8_000).await
        }));
    }
    a.until_waiters(3).await;
    // The cut: the wake-up subscription drops, so the waiter with the turn
    // looks at once, and its look meets the cut (new connections hang).
    proxy.set_stalled(true);
    // A's readiness probe, sent after the cut began, times out only after
    // the command timeout: by then the waiter's look has failed too.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while a.get("/readyz").await.body["writable"] != false {
        assert!(std::time::Instant::now() < deadline, "the cut never showed");
    }
    let before = proxy.answered(&acquire_sha);
    proxy.set_stalled(false);
    assert!(
        proxy
            .until_answered(&acquire_sha, before + 1, Duration::from_secs(6))
            .await,
        "no waiter looked again after the cut"
    );
    assert_eq!(b.release(P, &d, &holder).await.outcome(), "released");
    let mut outcomes = Vec::new();
    for task in waiting {
        let got = task.await.expect("waiter");
        assert!(
            got.status == StatusCode::CREATED || got.status == StatusCode::CONFLICT,
            "a wait ended with {} {:?}",
            got.status,
            got.body
        );
        outcomes.push(got.outcome().to_owned());
    }
    assert_eq!(
        outcomes.iter().filter(|o| *o == "acquired").count(),
        1,
        "{outcomes:?}"
    );
}

/// By default (this release) the service does nothing on its own after a
/// waiter has gone: what it acquired ends with its TTL, so an instance of
/// the previous release (whose replays do not claim) can never have told a
/// caller it holds a lease this one then releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_departed_waiters_lease_ends_with_its_ttl() {
    let server = RedisServer::start();
    let acquire_sha = server.script_sha("acquire");
    let release_sha = server.script_sha("release");
    let proxy = FaultProxy::start(server.addr()).await;
    let ns = unique("cl");
    let flags = ["--namespace", ns.as_str(), "--command-timeout-ms", "1500"];
    let a = TestApp::spawn_with(args(&Backend::Redis(proxy.url()), &flags)).await;
    let b = TestApp::spawn_with(args(&Backend::Redis(server.url()), &flags)).await;
    let d = digest();
    let holder = b.attempt().await;
    assert_eq!(
        b.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let waiter = a.attempt().await;
    let pending = waiting_acquire(&a, &d, &waiter, 20_000);
    a.until_waiters(1).await;
    let before = proxy.answered(&acquire_sha);
    proxy.set_reply_delay(Duration::from_millis(400));
    assert_eq!(b.release(P, &d, &holder).await.outcome(), "released");
    until_held_by(&b, &d, &waiter).await;
    pending.abort();
    let _ = pending.await;
    // The departed waiter's acquire has been answered through the proxy,
    // and A's wait is over: nothing follows it, no release runs through A.
    assert!(
        proxy
            .until_answered(&acquire_sha, before + 1, Duration::from_secs(10))
            .await
    );
    a.until_waiters(0).await;
    // A call through A after that: a clean-up, were there one, would have
    // been sent right after the acquire's answer, before this inspect.
    let inspect_sha = server.script_sha("inspect");
    let seen_by_a = proxy.answered(&inspect_sha);
    assert_eq!(a.inspect(P, &d, None).await.body["held"], true);
    assert!(proxy.answered(&inspect_sha) > seen_by_a);
    assert_eq!(proxy.answered(&release_sha), 0);
    let seen = b.inspect(P, &d, Some(&waiter)).await;
    assert_eq!(seen.body["heldBy"], "caller", "{:?}", seen.body);
}
