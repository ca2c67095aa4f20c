//! Visible contention (issue #24): the wait-time histogram of acquires that
//! asked to wait, the hold-time histogram of releases, breaks and the
//! expiries a script records, both by the bounded
//! `purpose` label (a purpose no API key names is `other`).

use std::time::{Duration, Instant};

use super::{assert_histogram_moved, delta, scrape, scrape_until, Scrape, SERIAL};
use crate::common::app::{args, digest, unique, Backend, TestApp};
use crate::common::redis::RedisServer;

const WAIT: &str = "leasehold_lease_wait_seconds";
const HOLD: &str = "leasehold_lease_hold_seconds";

/// An instance whose only key may use every purpose with `role`, names
/// `named` (so it gets its own label) and may scrape; the test client sends
/// it.
async fn keyed_app(backend: &Backend, named: &str, role: &str) -> TestApp {
    let dir = std::env::temp_dir().join(unique("leasehold-keys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keys");
    let key = unique("contention-key-0123456789-");
    std::fs::write(
        &file,
        format!("{key} * {role},metrics\n{key} {named} {role}\n"),
    )
    .expect("write keys");
    let mut app = TestApp::spawn_with(args(
        backend,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().expect("header value"),
    );
    app.http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client");
    app
}

/// The upper bounds of `name`'s buckets for the series matching `want`.
fn bounds(s: &Scrape, name: &str, want: &[(&str, &str)]) -> Vec<String> {
    s.samples
        .iter()
        .filter(|(n, labels, _)| {
            *n == format!("{name}_bucket")
                && want
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, labels, _)| labels["le"].clone())
        .collect()
}

async fn waits_and_holds_are_observed(backend: Backend) {
    let named = unique("held-");
    let app = keyed_app(&backend, &named, "write").await;
    let loose = unique("loose-");
    let (p, d) = (named.as_str(), digest());
    let (a, b, c) = (
        app.attempt().await,
        app.attempt().await,
        app.attempt().await,
    );
    let before = scrape(&app).await;
    let waiters = before.sum("leasehold_waiters", &[]);

    // `a` holds; `b` waits for it; `a` releases after a measured hold.
    assert_eq!(app.acquire(p, &d, &a, 30_000).await.outcome(), "acquired");
    let acquired = Instant::now();
    let waiter = {
        let (http, url) = (app.http.clone(), format!("{}/leases/{p}/{d}", app.base));
        let b = b.clone();
        tokio::spawn(async move {
            let r = http
                .put(url)
                .header("Lease-Owner-Token", &b.token)
                .header("Lease-Operation-Id", &b.op)
                .json(&serde_json::json!({"ttlMs": 30000, "waitMs": 10000}))
                .send()
                .await
                .expect("send");
            TestApp::reply(r).await
        })
    };
    scrape_until(&app, "the waiter waits", |s| {
        s.sum("leasehold_waiters", &[]) == waiters + 1.0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let held_ms = acquired.elapsed().as_millis();
    assert_eq!(app.release(p, &d, &a).await.outcome(), "released");
    let r = waiter.await.expect("waiter");
    assert_eq!(r.outcome(), "acquired", "{:#}", r.body);
    let waited_ms = r.body["waitedMs"].as_u64().expect("waitedMs");
    // `c` asks to wait briefly while `b` holds: contended.
    assert_eq!(
        app.acquire_wait(p, &d, &c, 30_000, 50).await.outcome(),
        "contended"
    );
    // No wait asked: no wait observed.
    assert_eq!(app.acquire(p, &d, &c, 30_000).await.outcome(), "contended");

    // A purpose no key names: its own acquire (free, asked to wait) and
    // release are labelled `other`.
    let l = app.attempt().await;
    assert_eq!(
        app.acquire_wait(&loose, &d, &l, 30_000, 1_000)
            .await
            .outcome(),
        "acquired"
    );
    assert_eq!(app.release(&loose, &d, &l).await.outcome(), "released");
    let after = scrape(&app).await;

    let waits = |purpose: &str, outcome: &str| {
        delta(
            &before,
            &after,
            &format!("{WAIT}_count"),
            &[("purpose", purpose), ("outcome", outcome)],
        )
    };
    assert_histogram_moved(
        &before,
        &after,
        WAIT,
        &[("purpose", p), ("outcome", "acquired")],
        1.0,
    );
    let wait_sum = delta(
        &before,
        &after,
        &format!("{WAIT}_sum"),
        &[("purpose", p), ("outcome", "acquired")],
    );
    assert!(
        (wait_sum * 1000.0 - waited_ms as f64).abs() < 0.5,
        "the wait observed is the waitedMs answered: {wait_sum} s, {waited_ms} ms"
    );
    assert_eq!(waits(p, "contended"), 1.0);
    assert_eq!(waits("other", "acquired"), 1.0);
    assert_eq!(waits("other", "contended"), 0.0);

    assert_histogram_moved(
        &before,
        &after,
        HOLD,
        &[("purpose", p), ("end", "released")],
        1.0,
    );
    let hold_sum = delta(
        &before,
        &after,
        &format!("{HOLD}_sum"),
        &[("purpose", p), ("end", "released")],
    );
    assert!(
        hold_sum * 1000.0 >= held_ms as f64 - 1e-6,
        "held at least the {held_ms} ms measured: {hold_sum} s"
    );
    assert!(
        hold_sum < 30.0,
        "held for less than the test ran: {hold_sum} s"
    );
    assert_eq!(
        delta(
            &before,
            &after,
            &format!("{HOLD}_count"),
            &[("purpose", "other"), ("end", "released")],
        ),
        1.0
    );
    assert!(
        !after.text.contains(&loose),
        "a purpose no key names has no label of its own"
    );

    // Their own buckets: 1 ms to 30 s for waits, 10 ms to 1 h for holds.
    let wait_bounds = bounds(&after, WAIT, &[("purpose", p), ("outcome", "acquired")]);
    assert!(
        wait_bounds.iter().any(|le| le == "0.001"),
        "{wait_bounds:?}"
    );
    assert!(wait_bounds.iter().any(|le| le == "30"), "{wait_bounds:?}");
    let hold_bounds = bounds(&after, HOLD, &[("purpose", p), ("end", "released")]);
    assert!(hold_bounds.iter().any(|le| le == "0.01"), "{hold_bounds:?}");
    assert!(hold_bounds.iter().any(|le| le == "3600"), "{hold_bounds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_waits_and_holds_are_observed() {
    let _turn = SERIAL.lock().await;
    waits_and_holds_are_observed(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_waits_and_holds_are_observed() {
    let _turn = SERIAL.lock().await;
    let server = RedisServer::start();
    waits_and_holds_are_observed(Backend::Redis(server.url())).await;
}

/// Holds that no release ends are observed too: a break's (end `broken`,
/// at the break) and an expiry's (end `expired`, `expiresAt - acquiredAt`,
/// when the next acquire of the resource reads the expired permit: here a
/// waiter during the lock-delay that keeps the permit in the record).
async fn broken_and_expired_holds_are_observed(backend: Backend) {
    let named = unique("ended-");
    let app = keyed_app(&backend, &named, "admin").await;
    let (p, broken, lapsed) = (named.as_str(), digest(), digest());
    let (a, b, c) = (
        app.attempt().await,
        app.attempt().await,
        app.attempt().await,
    );
    let before = scrape(&app).await;
    assert_eq!(
        app.acquire(p, &broken, &a, 30_000).await.outcome(),
        "acquired"
    );
    let r = app
        .http
        .post(format!("{}/leases/{p}/{broken}/break", app.base))
        .json(&serde_json::json!({}))
        .send()
        .await
        .expect("send");
    assert_eq!(TestApp::reply(r).await.outcome(), "broken");
    let short = serde_json::json!({"ttlMs": 100, "lockDelayMs": 2_000});
    assert_eq!(
        app.acquire_body(p, &lapsed, &b, &short).await.outcome(),
        "acquired"
    );
    // Woken by the expiry, the waiter reads the expired permit (contended:
    // lock-delay), and takes the resource once the delay is over.
    let r = app.acquire_wait(p, &lapsed, &c, 30_000, 10_000).await;
    assert_eq!(r.outcome(), "acquired", "{:#}", r.body);
    let after = scrape(&app).await;
    let moved = |end: &str, what: &str| {
        delta(
            &before,
            &after,
            &format!("{HOLD}_{what}"),
            &[("purpose", p), ("end", end)],
        )
    };
    assert_eq!(moved("broken", "count"), 1.0);
    assert!(moved("broken", "sum") < 30.0, "{}", moved("broken", "sum"));
    assert_eq!(moved("expired", "count"), 1.0, "each expiry once");
    let expired_ms = moved("expired", "sum") * 1000.0;
    assert!(
        (expired_ms - 100.0).abs() < 1.5,
        "held for its TTL, acquire to expiry: {expired_ms} ms"
    );
    assert_eq!(moved("released", "count"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_broken_and_expired_holds_are_observed() {
    let _turn = SERIAL.lock().await;
    broken_and_expired_holds_are_observed(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_broken_and_expired_holds_are_observed() {
    let _turn = SERIAL.lock().await;
    let server = RedisServer::start();
    broken_and_expired_holds_are_observed(Backend::Redis(server.url())).await;
}
