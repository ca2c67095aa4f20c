//! The contract suite: every row of the four outcome tables, run against the
//! embedded store and against a real `redis-server`.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::app::{digest, Backend, TestApp};
use reqwest::StatusCode;
use serde_json::json;

const P: &str = "invoice-export";

both_stores!(
    attempts_are_fresh_and_validated,
    acquire_then_replay_does_not_extend,
    owner_operation_conflict,
    contended_carries_holder_pttl,
    renew_outcomes,
    release_outcomes,
    inspect_never_reveals_the_token,
    fencing_tokens_strictly_increase,
    expired_lease_can_be_taken_by_another,
    concurrent_acquirers_never_overlap,
    readiness_reports_the_store,
);

async fn attempts_are_fresh_and_validated(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let a = app.attempt().await;
    let b = app.attempt().await;
    assert_eq!(a.token.len(), 32);
    assert_ne!(a.token, b.token);
    let bad = app
        .post_attempt(&json!({ "operationId": "has space" }))
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bad.outcome(), "invalid_request");
    assert_eq!(bad.body["errors"][0]["field"], "operationId");
    let missing = app.post_attempt(&json!({})).await;
    assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(missing.body["errors"][0]["field"], "operationId");
}

async fn acquire_then_replay_does_not_extend(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let first = app.acquire(P, &d, &a, 60_000).await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    assert_eq!(first.outcome(), "acquired");
    let lease = &first.body["lease"];
    assert_eq!(lease["purpose"], P);
    assert_eq!(lease["digest"], d.as_str());
    assert_eq!(lease["ttlMs"], 60_000);
    assert_eq!(lease["remainingMs"], 60_000);
    assert_eq!(lease["guarantee"], "fenced");
    assert!(first.body.get("waitedMs").is_none());

    // Same attempt again, asking for a longer TTL: replayed, not extended.
    let replay = app.acquire(P, &d, &a, 3_600_000).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_eq!(replay.outcome(), "replayed_same_operation");
    assert_eq!(replay.fencing_token(), first.fencing_token());
    assert!(replay.remaining_ms() <= 60_000, "{:?}", replay.body);
    let seen = app.inspect(P, &d, None).await;
    assert!(seen.body["remainingMs"].as_u64().expect("remaining") <= 60_000);
}

async fn owner_operation_conflict(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    assert_eq!(
        app.acquire(P, &d, &a, 30_000).await.status,
        StatusCode::CREATED
    );
    let other_op = TestApp::other_operation(&a);
    let r = app.acquire(P, &d, &other_op, 30_000).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.outcome(), "owner_operation_conflict");
    assert_eq!(r.content_type(), "application/problem+json");
    assert_eq!(r.body["status"], 409);
    assert!(r.body["type"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(r.body["title"].as_str().is_some());
    assert!(r.body["detail"].as_str().is_some());
}

async fn contended_carries_holder_pttl(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    assert_eq!(
        app.acquire(P, &d, &a, 2_500).await.status,
        StatusCode::CREATED
    );
    let r = app.acquire(P, &d, &b, 30_000).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.outcome(), "contended");
    assert_eq!(r.content_type(), "application/problem+json");
    let retry = r.body["retryAfterMs"].as_u64().expect("retryAfterMs");
    assert!(retry > 0 && retry <= 2_500, "{retry}");
    // Whole seconds, rounded up.
    let header: u64 = r.headers["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("number");
    assert_eq!(header, retry.div_ceil(1000));
    // waitMs 0 is try-once.
    let r = app.acquire_wait(P, &d, &b, 30_000, 0).await;
    assert_eq!(r.outcome(), "contended");
    assert!(r.body.get("waitedMs").is_none());
}

async fn renew_outcomes(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let absent = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(absent.status, StatusCode::NOT_FOUND);
    assert_eq!(absent.outcome(), "lost");
    assert_eq!(absent.body["reason"], "absent");
    assert_eq!(absent.content_type(), "application/problem+json");

    let acquired = app.acquire(P, &d, &a, 1_000).await;
    let renewed = app.renew(P, &d, &a, 45_000).await;
    assert_eq!(renewed.status, StatusCode::OK, "{:?}", renewed.body);
    assert_eq!(renewed.outcome(), "renewed");
    assert_eq!(renewed.fencing_token(), acquired.fencing_token());
    assert_eq!(renewed.remaining_ms(), 45_000);
    let after = app.inspect(P, &d, None).await;
    assert!(after.body["remainingMs"].as_u64().expect("remaining") > 1_000);

    let not_owner = app.renew(P, &d, &b, 30_000).await;
    assert_eq!(not_owner.status, StatusCode::CONFLICT);
    assert_eq!(not_owner.outcome(), "lost");
    assert_eq!(not_owner.body["reason"], "not_owner");
    // Same owner, other operation: also not the owner of this lease.
    let sibling = app
        .renew(P, &d, &TestApp::other_operation(&a), 30_000)
        .await;
    assert_eq!(sibling.body["reason"], "not_owner");
}

async fn release_outcomes(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    app.acquire(P, &d, &a, 30_000).await;
    let not_owner = app.release(P, &d, &b).await;
    assert_eq!(not_owner.status, StatusCode::CONFLICT);
    assert_eq!(not_owner.outcome(), "not_owner");
    assert_eq!(not_owner.content_type(), "application/problem+json");
    assert_eq!(
        app.inspect(P, &d, None).await.body["held"],
        true,
        "untouched"
    );

    let released = app.release(P, &d, &a).await;
    assert_eq!(released.status, StatusCode::OK);
    assert_eq!(released.outcome(), "released");
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);

    let again = app.release(P, &d, &a).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.outcome(), "already_absent");
}

async fn inspect_never_reveals_the_token(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let free = app.inspect(P, &d, Some(&a)).await;
    assert_eq!(free.status, StatusCode::OK);
    assert_eq!(free.outcome(), "inspected");
    assert_eq!(free.body["held"], false);
    assert!(free.body.get("heldBy").is_none());

    let acquired = app.acquire(P, &d, &a, 30_000).await;
    let anonymous = app.inspect(P, &d, None).await;
    assert_eq!(anonymous.body["held"], true);
    assert_eq!(
        anonymous.body["fencingToken"].as_u64(),
        Some(acquired.fencing_token())
    );
    assert!(anonymous.body["remainingMs"].as_u64().expect("remaining") <= 30_000);
    assert!(anonymous.body.get("heldBy").is_none());
    assert_eq!(app.inspect(P, &d, Some(&a)).await.body["heldBy"], "caller");
    assert_eq!(
        app.inspect(P, &d, Some(&TestApp::other_operation(&a)))
            .await
            .body["heldBy"],
        "caller_other_operation"
    );
    let other = app.inspect(P, &d, Some(&b)).await;
    assert_eq!(other.body["heldBy"], "other");
    for r in [&anonymous, &other] {
        assert!(
            !r.body.to_string().contains(&a.token),
            "token leaked: {}",
            r.body
        );
    }
}

async fn fencing_tokens_strictly_increase(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let mut last = 0;
    for _ in 0..50 {
        let a = app.attempt().await;
        let r = app.acquire(P, &d, &a, 30_000).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        let token = r.fencing_token();
        assert!(token > last, "{token} after {last}");
        assert!(token < (1u64 << 53), "fits a JSON number exactly");
        last = token;
        assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    }
}

async fn expired_lease_can_be_taken_by_another(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let first = app.acquire(P, &d, &a, 100).await;
    assert_eq!(first.status, StatusCode::CREATED);
    // Waits server-side for the expiry (an event), no client sleep.
    let second = app.acquire_wait(P, &d, &b, 30_000, 5_000).await;
    assert_eq!(second.status, StatusCode::CREATED, "{:?}", second.body);
    assert!(second.fencing_token() > first.fencing_token());
    let lost = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(lost.body["reason"], "not_owner");
    let gone = app.release(P, &d, &a).await;
    assert_eq!(gone.outcome(), "not_owner");
}

async fn concurrent_acquirers_never_overlap(backend: Backend) {
    let app = Arc::new(TestApp::spawn(&backend).await);
    let d = Arc::new(digest());
    let holders = Arc::new(AtomicUsize::new(0));
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (app, d, holders, acquisitions) = (
            Arc::clone(&app),
            Arc::clone(&d),
            Arc::clone(&holders),
            Arc::clone(&acquisitions),
        );
        tasks.push(tokio::spawn(async move {
            let a = app.attempt().await;
            for _ in 0..200 {
                let r = app.acquire(P, &d, &a, 10_000).await;
                match r.outcome() {
                    "acquired" => {
                        let before = holders.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(before, 0, "two holders at once");
                        acquisitions.fetch_add(1, Ordering::SeqCst);
                        holders.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
                    }
                    "contended" => {}
                    other => panic!("unexpected outcome {other}: {:?}", r.body),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert!(acquisitions.load(Ordering::SeqCst) > 0);
}

async fn readiness_reports_the_store(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let r = app.get("/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["writable"], true);
    let expected = match backend {
        Backend::Memory => "memory",
        Backend::Redis(_) => "standalone",
    };
    assert_eq!(r.body["topology"], expected);
}
