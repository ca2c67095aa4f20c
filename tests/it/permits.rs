//! Counting and shared leases (docs/design.md §11), on the embedded store and on
//! a real `redis-server`: `limit` admits exactly that many holders, each
//! with its own TTL, replay, renew, release and fencing token; shared and
//! exclusive holders exclude each other; a queued writer is not starved by
//! a stream of readers; a release on one instance wakes a waiter on another.

#[allow(unused_imports)]
use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::app::{args, digest, unique, Backend, Reply, TestApp, TestAttempt};
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "thumbnail-render";

both_stores!(
    limit_admits_exactly_n_then_one_per_release_and_expiry,
    limit_mismatch_names_the_current_limit,
    replay_answers_its_own_permit,
    renew_and_release_touch_only_their_own_permit,
    shared_and_exclusive_exclude_each_other,
    queued_writer_is_not_starved_by_readers,
    release_on_one_instance_wakes_a_counting_waiter_on_another,
    counting_waiters_take_freed_permits_in_start_order,
    shared_waiters_on_two_instances_all_go_when_the_writer_leaves,
    rust_client_speaks_limit_mode_and_reasons,
    queued_reader_is_not_overtaken_by_counting_writers,
    a_read_of_many_holders_shows_the_oldest_hundred_and_counts_all,
);

/// Two instances sharing one store namespace (Redis), or one instance twice
/// (memory: the embedded store is one process).
async fn pair(backend: &Backend) -> (Arc<TestApp>, Arc<TestApp>) {
    match backend {
        Backend::Memory => {
            let one = Arc::new(TestApp::spawn(backend).await);
            (Arc::clone(&one), one)
        }
        Backend::Redis(_) => {
            let ns = unique("pm");
            let a = TestApp::spawn_with(args(backend, &["--namespace", &ns])).await;
            let b = TestApp::spawn_with(args(backend, &["--namespace", &ns])).await;
            (Arc::new(a), Arc::new(b))
        }
    }
}

fn counting(ttl_ms: u64, limit: u64) -> Value {
    json!({ "ttlMs": ttl_ms, "limit": limit })
}

fn retry_after(r: &Reply) -> u64 {
    r.body["retryAfterMs"].as_u64().expect("retryAfterMs")
}

/// The permit with this fencing token in an inspect answer.
fn permit(seen: &Reply, token: u64) -> Value {
    seen.body["permits"]
        .as_array()
        .expect("permits")
        .iter()
        .find(|p| p["fencingToken"].as_u64() == Some(token))
        .cloned()
        .unwrap_or_else(|| panic!("no permit {token} in {:?}", seen.body))
}

/// Every attempt in `who` asks at once; answers in the same order.
async fn all_at_once(app: &Arc<TestApp>, d: &str, who: &[TestAttempt], body: &Value) -> Vec<Reply> {
    let tasks: Vec<_> = who
        .iter()
        .map(|a| {
            let (app, d, a, body) = (Arc::clone(app), d.to_owned(), a.clone(), body.clone());
            tokio::spawn(async move { app.acquire_body(P, &d, &a, &body).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("acquirer"));
    }
    out
}

/// Splits answers into (index, fencing token) of the acquired ones, and
/// checks every other one is a sane `contended`.
fn tally(replies: &[Reply], ttl_ms: u64) -> Vec<(usize, u64)> {
    let mut got = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        match r.outcome() {
            "acquired" => {
                assert_eq!(r.status, StatusCode::CREATED);
                got.push((i, r.fencing_token()));
            }
            "contended" => {
                assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
                let retry = retry_after(r);
                assert!(
                    retry > 0 && retry <= ttl_ms,
                    "retryAfterMs {retry}: {:?}",
                    r.body
                );
                assert!(r.body.get("reason").is_none(), "{:?}", r.body);
            }
            other => panic!("unexpected {other}: {:?}", r.body),
        }
    }
    got
}

async fn limit_admits_exactly_n_then_one_per_release_and_expiry(backend: Backend) {
    let app = Arc::new(TestApp::spawn(&backend).await);
    let d = digest();
    const TTL: u64 = 30_000;
    let mut who = Vec::new();
    for _ in 0..24 {
        who.push(app.attempt().await);
    }
    // 24 at once for 3 permits: exactly 3.
    let first = tally(&all_at_once(&app, &d, &who, &counting(TTL, 3)).await, TTL);
    assert_eq!(first.len(), 3, "{first:?}");
    let mut tokens: Vec<u64> = first.iter().map(|(_, t)| *t).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "distinct fencing tokens");
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(seen.body["holders"], 3, "{:?}", seen.body);
    assert_eq!(seen.body["limit"], 3);
    assert_eq!(seen.body["mode"], "exclusive");
    assert_eq!(seen.body["permits"].as_array().map(Vec::len), Some(3));

    // One release: exactly one more, with a higher token than all before.
    let (released, _) = first[0];
    assert_eq!(
        app.release(P, &d, &who[released]).await.outcome(),
        "released"
    );
    let holders: Vec<usize> = first.iter().map(|(i, _)| *i).collect();
    let rest: Vec<TestAttempt> = (0..who.len())
        .filter(|i| !holders.contains(i))
        .map(|i| who[i].clone())
        .collect();
    let second = tally(&all_at_once(&app, &d, &rest, &counting(TTL, 3)).await, TTL);
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(second[0].1 > *tokens.last().expect("tokens"), "fence grows");
    let mut last = second[0].1;

    // Release that one too and let a short-TTL permit take its place.
    let newest = rest[second[0].0].clone();
    assert_eq!(app.release(P, &d, &newest).await.outcome(), "released");
    let short = app.attempt().await;
    let brief = app.acquire_body(P, &d, &short, &counting(300, 3)).await;
    assert_eq!(brief.outcome(), "acquired", "{:?}", brief.body);
    assert!(brief.fencing_token() > last);
    last = brief.fencing_token();
    // Full again: the soonest expiry is the hint.
    let full = app
        .acquire_body(P, &d, &app.attempt().await, &counting(TTL, 3))
        .await;
    assert_eq!(full.outcome(), "contended", "{:?}", full.body);
    assert!(retry_after(&full) <= 300, "{:?}", full.body);

    // Its expiry frees exactly one permit: of 8 waiters, one gets it.
    let waiters: Vec<TestAttempt> = rest
        .iter()
        .filter(|a| a.op != newest.op)
        .take(8)
        .cloned()
        .collect();
    let started = Instant::now();
    let third = all_at_once(
        &app,
        &d,
        &waiters,
        &json!({ "ttlMs": TTL, "limit": 3, "waitMs": 1_500 }),
    )
    .await;
    let got: Vec<&Reply> = third.iter().filter(|r| r.outcome() == "acquired").collect();
    assert_eq!(got.len(), 1, "{third:?}");
    assert!(got[0].fencing_token() > last);
    let waited = got[0].body["waitedMs"].as_u64().expect("waitedMs");
    assert!(waited < 1_500, "woken by the expiry, {waited} ms");
    for r in third.iter().filter(|r| r.outcome() != "acquired") {
        assert_eq!(r.outcome(), "contended", "{:?}", r.body);
        assert!(r.body["waitedMs"].as_u64().expect("waitedMs") >= 1_500);
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(app.inspect(P, &d, None).await.body["holders"], 3);
}

async fn limit_mismatch_names_the_current_limit(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    assert_eq!(
        app.acquire_body(P, &d, &a, &counting(30_000, 3))
            .await
            .outcome(),
        "acquired"
    );
    for other in [2, 1, 4] {
        let r = app.acquire_body(P, &d, &b, &counting(30_000, other)).await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
        assert_eq!(r.outcome(), "limit_mismatch", "{:?}", r.body);
        assert_eq!(r.body["limit"], 3, "{:?}", r.body);
        assert_eq!(r.content_type(), "application/problem+json");
    }
    // A plain acquire (limit left out = 1) on a counting lease too.
    let plain = app.acquire(P, &d, &b, 30_000).await;
    assert_eq!(plain.outcome(), "limit_mismatch", "{:?}", plain.body);
    assert_eq!(plain.body["limit"], 3);
    // And the other way: a plain lease held, a counting acquire refused.
    let d2 = digest();
    assert_eq!(app.acquire(P, &d2, &a, 30_000).await.outcome(), "acquired");
    let r = app.acquire_body(P, &d2, &b, &counting(30_000, 3)).await;
    assert_eq!(r.outcome(), "limit_mismatch", "{:?}", r.body);
    assert_eq!(r.body["limit"], 1);
    // Once the holders are gone, any limit goes.
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let r = app.acquire_body(P, &d, &b, &counting(30_000, 2)).await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    assert_eq!(app.inspect(P, &d, None).await.body["limit"], 2);
}

async fn replay_answers_its_own_permit(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let first = app
        .acquire_body(
            P,
            &d,
            &a,
            &json!({ "ttlMs": 30_000, "limit": 2, "holder": "a" }),
        )
        .await;
    assert_eq!(first.outcome(), "acquired", "{:?}", first.body);
    let second = app
        .acquire_body(
            P,
            &d,
            &b,
            &json!({ "ttlMs": 60_000, "limit": 2, "holder": "b" }),
        )
        .await;
    assert_eq!(second.outcome(), "acquired", "{:?}", second.body);
    for (who, original, ttl) in [(&a, &first, 30_000), (&b, &second, 60_000)] {
        let replay = app
            .acquire_body(P, &d, who, &json!({ "ttlMs": 90_000, "limit": 2 }))
            .await;
        assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
        assert_eq!(replay.outcome(), "replayed_same_operation");
        let (lease, was) = (&replay.body["lease"], &original.body["lease"]);
        assert_eq!(lease["fencingToken"], was["fencingToken"]);
        assert_eq!(lease["ttlMs"], ttl, "the TTL of the acquisition it replays");
        assert_eq!(lease["acquiredAt"], was["acquiredAt"]);
        assert_eq!(lease["holder"], was["holder"]);
        assert!(replay.remaining_ms() <= ttl, "{:?}", replay.body);
        assert!(replay.remaining_ms() > ttl - 10_000, "{:?}", replay.body);
    }
}

async fn renew_and_release_touch_only_their_own_permit(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let ta = app.acquire_body(P, &d, &a, &counting(30_000, 2)).await;
    let tb = app.acquire_body(P, &d, &b, &counting(30_000, 2)).await;
    assert_eq!(ta.outcome(), "acquired");
    assert_eq!(tb.outcome(), "acquired");
    let before = permit(&app.inspect(P, &d, None).await, tb.fencing_token());

    let renewed = app.renew(P, &d, &a, 120_000).await;
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
    assert_eq!(renewed.fencing_token(), ta.fencing_token());
    assert_eq!(renewed.remaining_ms(), 120_000);
    let seen = app.inspect(P, &d, None).await;
    let (pa, pb) = (
        permit(&seen, ta.fencing_token()),
        permit(&seen, tb.fencing_token()),
    );
    assert!(pa["remainingMs"].as_u64().expect("remaining") > 30_000);
    assert_eq!(pa["ttlMs"], 120_000);
    assert!(
        pb["remainingMs"].as_u64().expect("remaining") <= 30_000,
        "{pb}"
    );
    assert_eq!(pb["ttlMs"], 30_000);
    assert_eq!(pb["renewedAt"], before["renewedAt"]);
    assert_eq!(pb["acquiredAt"], before["acquiredAt"]);

    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(seen.body["holders"], 1, "{:?}", seen.body);
    let pb = permit(&seen, tb.fencing_token());
    assert!(pb["remainingMs"].as_u64().expect("remaining") <= 30_000);
    assert_eq!(pb["renewedAt"], before["renewedAt"]);
    // The released permit is gone for its owner; the other one still renews.
    assert_eq!(app.release(P, &d, &a).await.outcome(), "not_owner");
    let lost = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(lost.outcome(), "lost", "{:?}", lost.body);
    let renewed = app.renew(P, &d, &b, 45_000).await;
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
    assert_eq!(renewed.fencing_token(), tb.fencing_token());
    assert_eq!(app.release(P, &d, &b).await.outcome(), "released");
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);
}

async fn shared_and_exclusive_exclude_each_other(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let shared = json!({ "ttlMs": 30_000, "mode": "shared" });
    let readers = [
        app.attempt().await,
        app.attempt().await,
        app.attempt().await,
    ];
    let mut tokens = Vec::new();
    for r in &readers {
        let got = app.acquire_body(P, &d, r, &shared).await;
        assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
        tokens.push(got.fencing_token());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(seen.body["mode"], "shared", "{:?}", seen.body);
    assert_eq!(seen.body["holders"], 3);
    let writer = app.attempt().await;
    let refused = app.acquire(P, &d, &writer, 30_000).await;
    assert_eq!(refused.outcome(), "contended", "{:?}", refused.body);
    assert!(retry_after(&refused) <= 30_000);
    for r in &readers {
        assert_eq!(app.release(P, &d, r).await.outcome(), "released");
    }
    let w = app.acquire(P, &d, &writer, 30_000).await;
    assert_eq!(w.outcome(), "acquired", "{:?}", w.body);
    assert!(w.fencing_token() > tokens[2]);
    let reader = app.acquire_body(P, &d, &app.attempt().await, &shared).await;
    assert_eq!(reader.outcome(), "contended", "{:?}", reader.body);
    assert_eq!(app.inspect(P, &d, None).await.body["mode"], "exclusive");
}

async fn queued_writer_is_not_starved_by_readers(backend: Backend) {
    let app = Arc::new(TestApp::spawn(&backend).await);
    let d = Arc::new(digest());
    let shared = json!({ "ttlMs": 30_000, "mode": "shared" });
    // Readers keep arriving, each holding briefly, so that without a queue
    // some reader would hold the resource at almost every instant.
    let stop = Arc::new(AtomicBool::new(false));
    let refused_queued = Arc::new(AtomicUsize::new(0));
    let first_refusal = Arc::new(tokio::sync::Notify::new());
    let first_reader = app.attempt().await;
    assert_eq!(
        app.acquire_body(P, &d, &first_reader, &shared)
            .await
            .outcome(),
        "acquired"
    );
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (app, d, stop, shared, refused_queued, first_refusal) = (
            Arc::clone(&app),
            Arc::clone(&d),
            Arc::clone(&stop),
            shared.clone(),
            Arc::clone(&refused_queued),
            Arc::clone(&first_refusal),
        );
        readers.push(tokio::spawn(async move {
            let mut acquired = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let me = app.attempt().await;
                let r = app.acquire_body(P, &d, &me, &shared).await;
                match r.outcome() {
                    "acquired" => {
                        acquired += 1;
                        assert_eq!(app.release(P, &d, &me).await.outcome(), "released");
                    }
                    "contended" => {
                        if r.body["reason"] == "queued" {
                            // No holder's expiry to point at: the fallback.
                            assert_eq!(r.body["retryAfterMs"], 50, "{:?}", r.body);
                            refused_queued.fetch_add(1, Ordering::SeqCst);
                            first_refusal.notify_one();
                        }
                    }
                    other => panic!("reader: {other} {:?}", r.body),
                }
            }
            acquired
        }));
    }
    // The writer waits; a reader that waits too queues behind it.
    let writer = app.attempt().await;
    let started = Instant::now();
    let w = {
        let (app, d, writer) = (Arc::clone(&app), Arc::clone(&d), writer.clone());
        tokio::spawn(async move { app.acquire_wait(P, &d, &writer, 30_000, 5_000).await })
    };
    // Queued in the store, not only registered: else the late reader below
    // could look before the writer has its place, and rightly go first.
    until_queued(&backend, &app, &d, 1).await;
    let late_reader = app.attempt().await;
    let lr = {
        let (app, d, late_reader) = (Arc::clone(&app), Arc::clone(&d), late_reader.clone());
        tokio::spawn(async move {
            app.acquire_body(
                P,
                &d,
                &late_reader,
                &json!({ "ttlMs": 30_000, "mode": "shared", "waitMs": 10_000 }),
            )
            .await
        })
    };
    until_queued(&backend, &app, &d, 2).await;
    // While the writer waits, arriving readers are refused (`queued`), not
    // let in beside the reader that holds: heard before that reader
    // leaves (a loaded machine may send no reader in the short window
    // between the writer's place and its grant otherwise).
    tokio::time::timeout(Duration::from_secs(4), first_refusal.notified())
        .await
        .expect("no arriving reader was refused with reason queued while the writer waited");
    // The reader that held from the start leaves; the stream cannot refill.
    assert_eq!(
        app.release(P, &d, &first_reader).await.outcome(),
        "released"
    );
    let w = w.await.expect("writer");
    let took = started.elapsed();
    assert_eq!(w.outcome(), "acquired", "writer starved: {:?}", w.body);
    let waited = w.body["waitedMs"].as_u64().expect("waitedMs");
    assert!(waited < 5_000, "{waited}");
    // The queued reader still waits behind the writer.
    assert_eq!(app.waiters().await, 1);
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.expect("reader");
    }
    assert!(
        refused_queued.load(Ordering::SeqCst) > 0,
        "readers were refused with reason queued while the writer waited"
    );
    assert_eq!(app.release(P, &d, &writer).await.outcome(), "released");
    let lr = lr.await.expect("late reader");
    assert_eq!(lr.outcome(), "acquired", "{:?}", lr.body);
    assert!(lr.fencing_token() > w.fencing_token());
    println!(
        "writer acquired after {took:?} (waitedMs {waited}) with 4 readers arriving; {} reader refusals with reason queued",
        refused_queued.load(Ordering::SeqCst)
    );
}

async fn release_on_one_instance_wakes_a_counting_waiter_on_another(backend: Backend) {
    let (one, two) = pair(&backend).await;
    let d = digest();
    let (a, b) = (one.attempt().await, one.attempt().await);
    for who in [&a, &b] {
        assert_eq!(
            one.acquire_body(P, &d, who, &counting(30_000, 2))
                .await
                .outcome(),
            "acquired"
        );
    }
    let waiter = two.attempt().await;
    let task = {
        let (two, d, waiter) = (Arc::clone(&two), d.clone(), waiter.clone());
        tokio::spawn(async move {
            let r = two
                .acquire_body(
                    P,
                    &d,
                    &waiter,
                    &json!({ "ttlMs": 30_000, "limit": 2, "waitMs": 20_000 }),
                )
                .await;
            (r, Instant::now())
        })
    };
    two.until_waiters(1).await;
    assert_eq!(one.release(P, &d, &a).await.outcome(), "released");
    let released = Instant::now();
    let (got, at) = task.await.expect("waiter");
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    let handoff = at.saturating_duration_since(released);
    println!("counting hand-off across instances: {handoff:?}");
    // Woken by the release at once, not at a holder's 30 s TTL.
    assert!(handoff < Duration::from_millis(1_000), "{handoff:?}");
    let seen = one.inspect(P, &d, None).await;
    assert_eq!(seen.body["holders"], 2, "{:?}", seen.body);
    two.until_waiters(0).await;
}

/// Polls until `app` has `n` waits registered, and the store's queue (on
/// Redis) holds `queued` waiters: a waiter counts as started once it has
/// its place.
async fn until_queued(backend: &Backend, app: &TestApp, d: &str, queued: u64) {
    let Backend::Redis(url) = backend else {
        return app.until_waiters(queued).await;
    };
    let key = format!("{}:queue:v2:{{{P}:{d}}}", app.namespace);
    let client = ::redis::Client::open(url.as_str()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now: u64 = ::redis::cmd("ZCOUNT")
            .arg(&key)
            .arg("(0")
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .expect("ZCOUNT");
        if now == queued {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue stuck at {now}, wanted {queued}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn counting_waiters_take_freed_permits_in_start_order(backend: Backend) {
    let (one, two) = pair(&backend).await;
    let d = digest();
    let body = counting(30_000, 2);
    let holders = [one.attempt().await, one.attempt().await];
    for h in &holders {
        assert_eq!(
            one.acquire_body(P, &d, h, &body).await.outcome(),
            "acquired"
        );
    }
    // Six waiters, alternately on the two instances, each queued before
    // the next starts; none of them releases.
    let mut tasks = Vec::new();
    let mut attempts = Vec::new();
    for i in 0..6u64 {
        let app = Arc::clone(if i % 2 == 0 { &one } else { &two });
        let me = app.attempt().await;
        attempts.push(me.clone());
        let dd = d.clone();
        tasks.push(tokio::spawn(async move {
            app.acquire_body(
                P,
                &dd,
                &me,
                &json!({ "ttlMs": 30_000, "limit": 2, "waitMs": 20_000 }),
            )
            .await
        }));
        until_queued(&backend, &one, &d, i + 1).await;
    }
    // Each release frees one permit: the earliest waiter takes it, and
    // only it. Then that waiter releases, and so on.
    let mut releaser = (Arc::clone(&one), holders[0].clone());
    let mut tokens = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(
            releaser.0.release(P, &d, &releaser.1).await.outcome(),
            "released"
        );
        let got = task.await.expect("waiter");
        assert_eq!(got.outcome(), "acquired", "waiter {i}: {:?}", got.body);
        tokens.push(got.fencing_token());
        until_queued(&backend, &one, &d, 5 - i as u64).await;
        let seen = one.inspect(P, &d, None).await;
        assert_eq!(seen.body["holders"], 2, "{:?}", seen.body);
        let app = Arc::clone(if i % 2 == 0 { &one } else { &two });
        releaser = (app, attempts[i].clone());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

async fn shared_waiters_on_two_instances_all_go_when_the_writer_leaves(backend: Backend) {
    let (one, two) = pair(&backend).await;
    let d = digest();
    let writer = one.attempt().await;
    assert_eq!(
        one.acquire(P, &d, &writer, 30_000).await.outcome(),
        "acquired"
    );
    let mut tasks = Vec::new();
    for i in 0..6u64 {
        let app = Arc::clone(if i % 2 == 0 { &one } else { &two });
        let me = app.attempt().await;
        let dd = d.clone();
        tasks.push(tokio::spawn(async move {
            let r = app
                .acquire_body(
                    P,
                    &dd,
                    &me,
                    &json!({ "ttlMs": 30_000, "mode": "shared", "waitMs": 20_000 }),
                )
                .await;
            (r, Instant::now())
        }));
        until_queued(&backend, &one, &d, i + 1).await;
    }
    assert_eq!(one.release(P, &d, &writer).await.outcome(), "released");
    let released = Instant::now();
    let mut slowest = Duration::ZERO;
    for t in tasks {
        let (r, at) = t.await.expect("reader");
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
        slowest = slowest.max(at.saturating_duration_since(released));
    }
    println!(
        "six queued readers on two instances all held within {slowest:?} of the writer's release"
    );
    assert!(slowest < Duration::from_millis(1_000), "{slowest:?}");
    let seen = two.inspect(P, &d, None).await;
    assert_eq!(seen.body["holders"], 6, "{:?}", seen.body);
    assert_eq!(seen.body["mode"], "shared");
}

async fn rust_client_speaks_limit_mode_and_reasons(backend: Backend) {
    use leasehold::client::{Acquire, AcquireOptions, Client, ClientSettings};
    use leasehold::domain::{
        ContendedReason, LeaseShape, Mode, OperationId, Purpose, ResourceDigest, ResourceId,
    };
    let app = TestApp::spawn(&backend).await;
    let client = Client::new(ClientSettings::new(app.base.clone())).expect("client");
    let resource = ResourceId {
        purpose: Purpose::parse(P).expect("purpose"),
        digest: ResourceDigest::parse(&digest()).expect("digest"),
    };
    let attempt = |op: &str| {
        let client = client.clone();
        let op = OperationId::parse(&unique(op)).expect("operation id");
        async move { client.create_attempt(&op).await.expect("attempt") }
    };
    let ttl = Duration::from_secs(30);
    let two = AcquireOptions {
        shape: LeaseShape {
            limit: 2,
            ..LeaseShape::default()
        },
        ..AcquireOptions::new(ttl)
    };
    let (a, b, c) = (
        attempt("a-").await,
        attempt("b-").await,
        attempt("c-").await,
    );
    for who in [&a, &b] {
        let got = client
            .acquire_with(&resource, who, &two)
            .await
            .expect("acquire");
        assert!(matches!(got, Acquire::Acquired { .. }), "{got:?}");
    }
    let full = client
        .acquire_with(&resource, &c, &two)
        .await
        .expect("acquire");
    assert!(
        matches!(full, Acquire::Contended { reason: None, retry_after_ms, .. } if retry_after_ms <= 30_000),
        "{full:?}"
    );
    let three = AcquireOptions {
        shape: LeaseShape {
            limit: 3,
            ..LeaseShape::default()
        },
        ..AcquireOptions::new(ttl)
    };
    let mismatch = client
        .acquire_with(&resource, &c, &three)
        .await
        .expect("acquire");
    assert!(
        matches!(mismatch, Acquire::LimitMismatch { limit: 2 }),
        "{mismatch:?}"
    );
    // A shared reader on another resource, then a lock-delay's reason.
    let other = ResourceId {
        purpose: Purpose::parse(P).expect("purpose"),
        digest: ResourceDigest::parse(&digest()).expect("digest"),
    };
    let shared = AcquireOptions {
        shape: LeaseShape {
            mode: Mode::Shared,
            ..LeaseShape::default()
        },
        ..AcquireOptions::new(ttl)
    };
    let got = client
        .acquire_with(&other, &a, &shared)
        .await
        .expect("acquire");
    assert!(matches!(got, Acquire::Acquired { .. }), "{got:?}");
    let delayed = ResourceId {
        purpose: Purpose::parse(P).expect("purpose"),
        digest: ResourceDigest::parse(&digest()).expect("digest"),
    };
    let brief = AcquireOptions {
        shape: LeaseShape {
            lock_delay_ms: 30_000,
            ..LeaseShape::default()
        },
        ..AcquireOptions::new(Duration::from_millis(100))
    };
    let got = client
        .acquire_with(&delayed, &b, &brief)
        .await
        .expect("acquire");
    assert!(matches!(got, Acquire::Acquired { .. }), "{got:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = client
            .acquire_with(&delayed, &c, &AcquireOptions::new(ttl))
            .await
            .expect("acquire");
        match got {
            Acquire::Contended {
                reason: Some(ContendedReason::LockDelay),
                retry_after_ms,
                ..
            } => {
                assert!(retry_after_ms <= 30_000);
                break;
            }
            Acquire::Contended { reason: None, .. } => {}
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline, "never saw the lock-delay");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn queued_reader_is_not_overtaken_by_counting_writers(backend: Backend) {
    let (one, two) = pair(&backend).await;
    let d = digest();
    let three = json!({ "ttlMs": 30_000, "limit": 3 });
    let holder = one.attempt().await;
    assert_eq!(
        one.acquire_body(P, &d, &holder, &three).await.outcome(),
        "acquired"
    );
    // A reader waits for the writer to go (head of the queue) ...
    let reader = two.attempt().await;
    let r = {
        let (two, d, reader) = (Arc::clone(&two), d.clone(), reader.clone());
        tokio::spawn(async move {
            two.acquire_body(
                P,
                &d,
                &reader,
                &json!({ "ttlMs": 30_000, "mode": "shared", "waitMs": 20_000 }),
            )
            .await
        })
    };
    until_queued(&backend, &two, &d, 1).await;
    // ... and a second writer behind it may not take one of the two free
    // permits ahead of it (else a stream of writers would starve it).
    let writer = one.attempt().await;
    let w = {
        let (one, d, writer) = (Arc::clone(&one), d.clone(), writer.clone());
        tokio::spawn(async move {
            one.acquire_body(
                P,
                &d,
                &writer,
                &json!({ "ttlMs": 30_000, "limit": 3, "waitMs": 20_000 }),
            )
            .await
        })
    };
    if matches!(backend, Backend::Memory) {
        one.until_waiters(2).await;
    } else {
        until_queued(&backend, &one, &d, 2).await;
    }
    assert_eq!(one.release(P, &d, &holder).await.outcome(), "released");
    let r = r.await.expect("reader");
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    assert_eq!(two.release(P, &d, &reader).await.outcome(), "released");
    let w = w.await.expect("writer");
    assert_eq!(w.outcome(), "acquired", "{:?}", w.body);
    assert!(
        w.fencing_token() > r.fencing_token(),
        "the writer went before the reader queued ahead of it"
    );
}

/// A counting lease with more holders than one read shows (the store's
/// `PERMITS_SHOWN`, 100): inspect and list count every holder and show the
/// 100 with the smallest fencing tokens, oldest first (docs/design.md §14).
async fn a_read_of_many_holders_shows_the_oldest_hundred_and_counts_all(backend: Backend) {
    let app = Arc::new(TestApp::spawn(&backend).await);
    let d = digest();
    let mut tokens = Vec::new();
    for _ in 0..130 {
        let a = app.attempt().await;
        let got = app.acquire_body(P, &d, &a, &counting(60_000, 200)).await;
        assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
        tokens.push(got.fencing_token());
    }
    tokens.sort_unstable();
    let oldest: Vec<u64> = tokens[..100].to_vec();
    let shown = |lease: &Value| -> Vec<u64> {
        lease["permits"]
            .as_array()
            .expect("permits")
            .iter()
            .map(|p| p["fencingToken"].as_u64().expect("fencingToken"))
            .collect()
    };
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(seen.body["holders"], 130, "{:?}", seen.body);
    assert_eq!(shown(&seen.body), oldest);
    assert!(seen.body["version"]
        .as_str()
        .expect("version")
        .ends_with(".130"));

    let mut cursor: Option<String> = None;
    let listed = loop {
        let path = match &cursor {
            Some(c) => format!("/leases/{P}?limit=100&cursor={c}"),
            None => format!("/leases/{P}?limit=100"),
        };
        let page = app.get(&path).await;
        assert_eq!(page.outcome(), "listed", "{:?}", page.body);
        let found = page.body["leases"]
            .as_array()
            .expect("leases")
            .iter()
            .find(|l| l["digest"] == d.as_str())
            .cloned();
        if let Some(found) = found {
            break found;
        }
        cursor = Some(
            page.body["nextCursor"]
                .as_str()
                .unwrap_or_else(|| panic!("{d} not listed"))
                .to_owned(),
        );
    };
    assert_eq!(listed["holders"], 130, "{listed}");
    assert_eq!(shown(&listed), oldest);
}

/// Long-expired permits of a counting lease are swept by releases and by
/// renewals that walk the record, at most 256 a call, not only by acquires
/// (lua/release.lua, lua/renew.lua): the record shrinks back to its live
/// permits with nobody acquiring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_and_renewals_sweep_long_expired_permits() {
    let server = common::redis::RedisServer::start();
    let app = Arc::new(TestApp::spawn(&Backend::Redis(server.url())).await);
    let d = digest();
    let key = format!("{}:lease:v2:{{{P}:{d}}}", app.namespace);
    let (a, b) = (app.attempt().await, app.attempt().await);
    for who in [&a, &b] {
        let got = app.acquire_body(P, &d, who, &counting(60_000, 400)).await;
        assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    }
    // 300 short permits, long enough that all are written before the first
    // runs out (an acquire sweeps long-expired permits too).
    let min_ttl = 3_000;
    let mut short = Vec::new();
    for _ in 0..300 {
        short.push(app.attempt().await);
    }
    for who in &short {
        let got = app.acquire_body(P, &d, who, &counting(min_ttl, 400)).await;
        assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    }
    let hlen = || -> u64 {
        server
            .cli(&["HLEN", &key])
            .trim()
            .parse()
            .expect("HLEN answers a number")
    };
    // 302 permits plus the limit and mode fields.
    assert_eq!(hlen(), 304);
    // Until the short ones have run out: the inspect script counts the live.
    loop {
        let seen = app.inspect(P, &d, None).await;
        if seen.body["holders"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(hlen(), 304, "a read deletes nothing");
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    assert_eq!(
        hlen(),
        304 - 1 - 256,
        "the release swept 256 expired permits"
    );
    // A renewal that changes the label walks the record and sweeps the
    // expired permits whose expiry is in the history: none of the 44 left,
    // which the release had no room to write (256 a call). The next release
    // writes and sweeps them.
    let rb = app
        .http
        .patch(format!("{}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &b.token)
        .header("Lease-Operation-Id", &b.op)
        .json(&json!({ "ttlMs": 60_000, "holder": "renamed" }));
    let renewed = TestApp::reply(rb.send().await.expect("send")).await;
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
    assert_eq!(
        hlen(),
        304 - 1 - 256,
        "a renew writes no expiry, so sweeps none"
    );
    let c = app.attempt().await;
    let got = app.acquire_body(P, &d, &c, &counting(60_000, 400)).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    assert_eq!(app.release(P, &d, &c).await.outcome(), "released");
    assert_eq!(hlen(), 3, "b's permit, the limit and the mode");
    assert_eq!(app.inspect(P, &d, None).await.body["holders"], 1);
    // No expiry was written twice (the history keeps the newest 100).
    let hist = format!("{}:hist:v2:{{{P}:{d}}}", app.namespace);
    let entries = server.cli(&["LRANGE", &hist, "0", "-1"]);
    let fences: Vec<&str> = entries
        .lines()
        .filter_map(|e| e.trim().strip_prefix("x|"))
        .filter_map(|e| e.split('|').nth(1))
        .collect();
    let unique: std::collections::BTreeSet<&str> = fences.iter().copied().collect();
    assert!(!fences.is_empty());
    assert_eq!(unique.len(), fences.len(), "an expiry written twice");
}

/// Calls of one Redis command so far (`INFO commandstats`).
fn command_calls(server: &common::redis::RedisServer, command: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a call count"))
}

/// With 1 000 live holders of one counting lease, acquires, renewals and
/// releases read only what they need through the expiry index
/// (`<ns>:exp:v2:T`, docs/decisions/storage-v2.md): not one `HGETALL` of the permit
/// hash, so their work does not grow with the holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbs_on_a_lease_with_many_holders_never_read_the_whole_record() {
    let server = common::redis::RedisServer::start();
    let app = Arc::new(TestApp::spawn(&Backend::Redis(server.url())).await);
    let d = digest();
    let mut held = Vec::new();
    for _ in 0..1_000 {
        let a = app.attempt().await;
        let got = app.acquire_body(P, &d, &a, &counting(60_000, 2_000)).await;
        assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
        held.push(a);
    }
    let before = command_calls(&server, "hgetall");
    for a in &held[..50] {
        assert_eq!(app.renew(P, &d, a, 60_000).await.outcome(), "renewed");
        assert_eq!(app.release(P, &d, a).await.outcome(), "released");
        let again = app.acquire_body(P, &d, a, &counting(60_000, 2_000)).await;
        assert_eq!(again.outcome(), "acquired", "{:?}", again.body);
        let replay = app.acquire_body(P, &d, a, &counting(60_000, 2_000)).await;
        assert_eq!(replay.outcome(), "replayed_same_operation");
    }
    assert_eq!(
        command_calls(&server, "hgetall") - before,
        0,
        "a verb read the whole permit hash"
    );
    assert_eq!(app.inspect(P, &d, None).await.body["holders"], 1_000);
}

/// A permit written without the index (as a v2 script or an evicted index
/// leaves it) is still counted: the index disagrees with the hash, so the
/// acquire reads the whole record and writes the index anew, and the limit
/// holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_the_index_does_not_know_still_counts_against_the_limit() {
    let server = common::redis::RedisServer::start();
    let app = Arc::new(TestApp::spawn(&Backend::Redis(server.url())).await);
    let d = digest();
    let key = format!("{}:lease:v2:{{{P}:{d}}}", app.namespace);
    let index = format!("{}:exp:v2:{{{P}:{d}}}", app.namespace);
    let a = app.attempt().await;
    let got = app.acquire_body(P, &d, &a, &counting(60_000, 2)).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    assert_eq!(server.cli(&["ZCARD", &index]).trim(), "1");
    // A second holder written straight into the hash, as a v2 acquire does.
    let now_ms: u64 = server
        .cli(&["TIME"])
        .lines()
        .next()
        .expect("seconds")
        .trim()
        .parse::<u64>()
        .expect("seconds")
        * 1000;
    let value = format!(
        "{}|{}|{now_ms}|{now_ms}|60000|0|v2-holder",
        got.fencing_token() + 1,
        now_ms + 60_000
    );
    server.cli(&[
        "HSET",
        &key,
        "p:v2v2v2v2v2v2v2v2v2v2v2v2v2v2v2v2:op",
        &value,
    ]);
    let b = app.attempt().await;
    let refused = app.acquire_body(P, &d, &b, &counting(60_000, 2)).await;
    assert_eq!(refused.outcome(), "contended", "{:?}", refused.body);
    assert_eq!(
        server.cli(&["ZCARD", &index]).trim(),
        "2",
        "the index was written anew from the hash"
    );
    assert_eq!(app.inspect(P, &d, None).await.body["holders"], 2);
    // And an index that is gone entirely is rebuilt the same way.
    server.cli(&["DEL", &index]);
    let refused = app.acquire_body(P, &d, &b, &counting(60_000, 2)).await;
    assert_eq!(refused.outcome(), "contended", "{:?}", refused.body);
    assert_eq!(server.cli(&["ZCARD", &index]).trim(), "2");
    let pttl: i64 = server.cli(&["PTTL", &index]).trim().parse().expect("PTTL");
    assert!(
        pttl > 0,
        "the index lives no longer than the record: {pttl}"
    );
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let got = app.acquire_body(P, &d, &b, &counting(60_000, 2)).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
}
