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

/// What a caller's abandoned connection costs (issue 39): a real
/// `leasehold serve` process whose callers leave mid-request (a head or a
/// body cut short), mid-wait (a waiting acquire), mid-stream (a lease's
/// event stream, a purpose's event stream) and mid-long-poll. Once they
/// have gone, its descriptors, its `/readyz` waits and watchers, its
/// threads and its Redis connections return to their baseline, polled
/// with a bound (no sleep-and-assert).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_returns_to_its_baseline_after_callers_leave() {
    use common::residue::ServiceProcess;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    const EACH: usize = 12;
    let server = RedisServer::start();
    let ns = unique("cl");
    let url = server.url();
    let service = tokio::task::block_in_place(|| {
        ServiceProcess::start(&[
            ("LEASEHOLD_REDIS_URL", url.as_str()),
            ("LEASEHOLD_NAMESPACE", ns.as_str()),
            ("LEASEHOLD_POOL_SIZE", "2"),
        ])
    });
    let http = reqwest::Client::new();
    let base = service.base.clone();
    let attempt = || {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let op = unique("op-");
            let r: serde_json::Value = http
                .post(format!("{base}/attempts"))
                .json(&json!({ "operationId": op }))
                .send()
                .await
                .expect("attempts")
                .json()
                .await
                .expect("attempt json");
            TestAttempt {
                token: r["ownerToken"].as_str().expect("token").to_owned(),
                op,
            }
        }
    };
    let d = digest();
    let holder = attempt().await;
    let acquire = |who: &TestAttempt, wait: u64| {
        http.put(format!("{base}/leases/{P}/{d}"))
            .header("Lease-Owner-Token", &who.token)
            .header("Lease-Operation-Id", &who.op)
            .json(&json!({ "ttlMs": 30_000, "waitMs": wait }))
    };
    // Warm up: a cycle, a wait, a stream, each answered, so the pool, the
    // subscription and lazily made parts exist before the baseline.
    let got = acquire(&holder, 0).send().await.expect("acquire");
    assert_eq!(got.status(), StatusCode::CREATED);
    let other = attempt().await;
    let got = acquire(&other, 50).send().await.expect("wait");
    assert_eq!(got.status(), StatusCode::CONFLICT);
    let redis_clients = || server.info_u64("clients", "connected_clients");
    let baseline = (
        service.fds(),
        service.threads(),
        tokio::task::block_in_place(redis_clients),
    );
    assert_eq!(service.counts(&http).await, (0, 0));

    let addr = service.addr();
    let raw = |head: String| async move {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(head.as_bytes()).await.expect("write");
        s
    };
    let mut gone = Vec::new();
    // Mid-request: a head cut short, a body cut short.
    for _ in 0..EACH {
        gone.push(
            raw(format!(
                "PUT /leases/{P}/{d} HTTP/1.1\r\nHost: x\r\nContent-Ty"
            ))
            .await,
        );
        gone.push(
            raw(format!(
                "PUT /leases/{P}/{d} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Lease-Owner-Token: {}\r\nLease-Operation-Id: {}\r\nContent-Length: 40\r\n\r\n{{\"ttlMs\":",
                other.token, other.op
            ))
            .await,
        );
    }
    // Mid-wait: waiting acquires, each its own attempt.
    for _ in 0..EACH {
        let who = attempt().await;
        let body = json!({ "ttlMs": 30_000, "waitMs": 25_000 }).to_string();
        gone.push(
            raw(format!(
                "PUT /leases/{P}/{d} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Lease-Owner-Token: {}\r\nLease-Operation-Id: {}\r\nContent-Length: {}\r\n\r\n{body}",
                who.token,
                who.op,
                body.len()
            ))
            .await,
        );
    }
    // Mid-long-poll: inspect waiting for a change.
    for _ in 0..EACH {
        gone.push(
            raw(format!(
                "GET /leases/{P}/{d}?changedSince=0.0&waitMs=25000 HTTP/1.1\r\nHost: x\r\n\r\n"
            ))
            .await,
        );
    }
    // Mid-stream: a lease's events and a purpose's events, each read
    // until its first bytes arrived (the stream is open).
    let mut streams = Vec::new();
    for i in 0..2 * EACH {
        let path = if i % 2 == 0 {
            format!("/leases/{P}/{d}/events")
        } else {
            format!("/leases/{P}/events")
        };
        let mut s = raw(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).await;
        let mut first = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut first))
            .await
            .expect("the stream answered")
            .expect("read");
        assert!(
            first[..n].starts_with(b"HTTP/1.1 200"),
            "{path}: {:?}",
            String::from_utf8_lossy(&first[..n])
        );
        streams.push(s);
    }
    // Everyone is in: the waits are counted, and so are the watchers.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (waiters, watchers) = service.counts(&http).await;
        if waiters as usize == EACH && watchers as usize >= EACH {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "callers never all in: waiters {waiters}, watchers {watchers}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let busy = service.fds();
    assert!(
        busy >= baseline.0 + 5 * EACH as u64,
        "the callers' connections are not among the descriptors: {busy} vs {baseline:?}"
    );
    // Every caller leaves at once.
    drop(gone);
    drop(streams);
    // Back to the baseline: polled, at most 10 s (no wait or stream
    // outlives its caller's connection by more than a keep-alive tick).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counts = service.counts(&http).await;
        let now = (
            service.fds(),
            service.threads(),
            tokio::task::block_in_place(redis_clients),
        );
        // The departed waiters' places in the fair queue (and their asks)
        // are gone too: the holder still holds, nobody waits.
        let places = tokio::task::block_in_place(|| {
            server.cli(&[
                "EXISTS",
                &format!("{ns}:queue:v2:{{{P}:{d}}}"),
                &format!("{ns}:ask:v2:{{{P}:{d}}}"),
            ])
        });
        // The pool holds at most 2 connections, both made in the warm-up
        // or not: at most 2 more descriptors and Redis clients. (Threads
        // are shown, not judged: the runtime keeps idle blocking threads
        // for a while.)
        let settled = counts == (0, 0)
            && now.0 <= baseline.0 + 2
            && now.2 <= baseline.2 + 2
            && places.trim() == "0";
        if settled {
            println!(
                "callers leave: (descriptors, threads, Redis clients) baseline {baseline:?}, \
                 with {} callers in {busy} descriptors, after they left {now:?}",
                7 * EACH
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "10 s after {} callers left: /readyz (waiters, watchers) {counts:?}, \
             (descriptors, threads, Redis clients) {now:?} against the baseline {baseline:?}; \
             queue and ask keys left {places}; sockets {}\n{}",
            7 * EACH,
            service.sockets(),
            service.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Still serving: the holder releases, a new caller acquires.
    let released = http
        .delete(format!("{base}/leases/{P}/{d}"))
        .header("Lease-Owner-Token", &holder.token)
        .header("Lease-Operation-Id", &holder.op)
        .send()
        .await
        .expect("release");
    assert_eq!(released.status(), StatusCode::OK);
    let next = attempt().await;
    let got = acquire(&next, 0).send().await.expect("acquire");
    assert_eq!(got.status(), StatusCode::CREATED);
}
