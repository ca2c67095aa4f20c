//! A session's leases when their caller leaves or the store is slow
//! (docs/design.md §14, §18): a lease taken on a session whose caller left
//! before it was attached and given the session's expiry is released, by
//! default (it would otherwise outlive its session unattached); and a
//! session renew judges a lease's hold bound by the bound itself, however
//! slow the store. Real `redis-server` processes behind a RESP-aware proxy
//! that delays replies; instance A goes through the proxy, B straight.

#[allow(unused_imports)]
use crate::common;

use std::time::{Duration, Instant};

use common::app::{args, digest, unique, Backend, TestApp, TestAttempt};
use common::fault_proxy::FaultProxy;
use common::redis::RedisServer;
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "session-leave";

/// Instance A through `proxy`, B straight to `server`; one namespace and
/// the default settings (no `--release-abandoned`).
async fn pair(server: &RedisServer, proxy: &FaultProxy) -> (TestApp, TestApp) {
    let ns = unique("sl");
    let flags = ["--namespace", ns.as_str(), "--command-timeout-ms", "5000"];
    let a = TestApp::spawn_with(args(&Backend::Redis(proxy.url()), &flags)).await;
    let b = TestApp::spawn_with(args(&Backend::Redis(server.url()), &flags)).await;
    (a, b)
}

/// A session made on `app` with `ttl_ms`: its secret's attempt and its id.
async fn session(app: &TestApp, ttl_ms: u64) -> (TestAttempt, String) {
    let attempt = app.attempt().await;
    let made = TestApp::reply(
        app.http
            .post(format!("{}/sessions", app.base))
            .header("Lease-Owner-Token", &attempt.token)
            .header("Lease-Operation-Id", &attempt.op)
            .json(&json!({"ttlMs": ttl_ms}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(made.status, StatusCode::CREATED, "{:?}", made.body);
    let id = made.body["session"]["id"].as_str().expect("id").to_owned();
    (attempt, id)
}

/// A session acquire of `d` on `app` through a client of its own, which
/// the test aborts (the caller closes its socket).
fn waiting_take(
    app: &TestApp,
    secret: &TestAttempt,
    id: &str,
    d: &str,
    body: Value,
) -> tokio::task::JoinHandle<Result<reqwest::Response, reqwest::Error>> {
    let own = reqwest::Client::new();
    let request = own
        .put(format!("{}/sessions/{id}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &secret.token)
        .header("Lease-Operation-Id", "departed")
        .json(&body);
    tokio::spawn(async move {
        let sent = request.send().await;
        drop(own);
        sent
    })
}

/// Polls `check` on B (bounded: 10 s) until it holds.
async fn until(what: &str, mut check: impl AsyncFnMut() -> Option<Value>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let Some(seen) = check().await else {
            return;
        };
        assert!(Instant::now() < deadline, "{what}: {seen:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Holds `d` on B for another attempt, has a session acquire of it wait on
/// A, slows A's store replies, frees `d`, and leaves (closes the socket)
/// once `left_when` sees the moment on B. Then `d` must come free (B).
async fn a_departed_session_waiter(left_when: &str) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let (a, b) = pair(&server, &proxy).await;
    let d = digest();
    let holder = b.attempt().await;
    assert_eq!(
        b.acquire(P, &d, &holder, 30_000).await.outcome(),
        "acquired"
    );
    let (secret, id) = session(&b, 30_000).await;
    let pending = waiting_take(&a, &secret, &id, &d, json!({"waitMs": 20_000}));
    a.until_waiters(1).await;
    proxy.set_reply_delay(Duration::from_millis(400));
    assert_eq!(b.release(P, &d, &holder).await.outcome(), "released");
    if left_when == "taken" {
        // The acquire ran in Redis; A has not heard it yet.
        until("the session acquire never ran", async || {
            let seen = b.inspect(P, &d, None).await.body;
            (seen["held"] != true).then_some(seen)
        })
        .await;
    } else {
        // The attach ran in Redis; A has not heard it yet, nor given the
        // lease its session's expiry.
        until("the lease was never attached", async || {
            let seen = b.get(&format!("/sessions/{id}")).await.body;
            (seen["session"]["leases"] != 1).then_some(seen)
        })
        .await;
    }
    pending.abort();
    let _ = pending.await;
    until(
        "a departed session waiter's lease is still held",
        async || {
            let seen = b.inspect(P, &d, None).await.body;
            (seen["held"] != false).then_some(seen)
        },
    )
    .await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Left after the grant, before the service heard of it: the grant is
/// released (`--release-abandoned` is not needed for a session's lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lease_granted_to_a_departed_waiter_is_released() {
    a_departed_session_waiter("taken").await;
}

/// Left after the attach, before the lease was given its session's
/// expiry: released too (it would outlive its session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lease_whose_attach_the_caller_cut_short_is_released() {
    a_departed_session_waiter("attached").await;
}

/// A lease whose hold bound comes after the session's new expiry stays on
/// the session, however late (a slow store) its own renew runs after the
/// session's: the bound is compared, not the time the renew granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_after_the_sessions_expiry_is_kept_however_slow_the_store() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let (a, b) = pair(&server, &proxy).await;
    let (secret, id) = session(&b, 30_000).await;
    let d = digest();
    // Reply delay D: the session renew below runs its first script some D
    // after this acquire, and the lease's renew some 3 D after that. The
    // bound is 2.5 D past the acquire's TTL: past the session's new expiry
    // by about 1.5 D, and below what a renew 4 D late could grant.
    let delay = 500;
    let taken = TestApp::reply(
        b.http
            .put(format!("{}/sessions/{id}/leases/{P}/{d}", b.base))
            .header("Lease-Owner-Token", &secret.token)
            .header("Lease-Operation-Id", "bounded")
            .json(&json!({"maxHoldMs": 30_000 + delay * 5 / 2}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(taken.status, StatusCode::CREATED, "{:?}", taken.body);
    proxy.set_reply_delay(Duration::from_millis(delay));
    let renewed = TestApp::reply(
        a.http
            .patch(format!("{}/sessions/{id}", a.base))
            .header("Lease-Owner-Token", &secret.token)
            .json(&json!({"ttlMs": 30_000}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(renewed.status, StatusCode::OK, "{:?}", renewed.body);
    assert_eq!(renewed.body["lost"], json!([]), "{:?}", renewed.body);
    assert_eq!(renewed.body["session"]["leases"], 1, "{:?}", renewed.body);
    let held = b.inspect(P, &d, None).await;
    assert_eq!(held.body["held"], true, "{:?}", held.body);
    a.shutdown().await;
    b.shutdown().await;
}
