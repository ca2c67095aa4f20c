//! The contract suite: every row of the four outcome tables, run against the
//! embedded store and against a real `redis-server`.

#[allow(unused_imports)]
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::app::{digest, Backend, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

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
    lease_record_carries_holder_times_and_granted_ttl,
    renew_may_relabel_and_only_a_relabel_moves_the_version,
    version_moves_on_acquire_release_and_expiry_and_never_comes_back,
    holder_labels_are_validated,
    inspect_by_owner_token_alone_compares_the_token,
);

/// A PATCH with `body`, for renewals with a holder label.
async fn renew_body(app: &TestApp, d: &str, a: &common::app::TestAttempt, body: &Value) -> Reply {
    let rb = app
        .http
        .patch(format!("{}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &a.token)
        .header("Lease-Operation-Id", &a.op)
        .json(body);
    TestApp::reply(rb.send().await.expect("send")).await
}

/// Milliseconds since the epoch of an RFC 3339 `...T..:..:..mmmZ` answer.
fn epoch_ms(v: &Value) -> u64 {
    let text = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    leasehold::domain::StoreTime::parse(text)
        .unwrap_or_else(|| panic!("not YYYY-MM-DDTHH:MM:SS.mmmZ: {text}"))
        .0
}

async fn lease_record_carries_holder_times_and_granted_ttl(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let first = app
        .acquire_body(
            P,
            &d,
            &a,
            &json!({"ttlMs": 30_000, "holder": "pod-7:8080 | east"}),
        )
        .await;
    assert_eq!(first.outcome(), "acquired", "{:?}", first.body);
    let lease = &first.body["lease"];
    assert_eq!(lease["holder"], "pod-7:8080 | east");
    assert_eq!(lease["ttlMs"], 30_000);
    let acquired = epoch_ms(&lease["acquiredAt"]);
    assert_eq!(lease["acquiredAt"], lease["renewedAt"]);
    // The store's clock is this machine's (one host): within a generous bound.
    assert!(
        acquired + 5_000 >= before && acquired <= before + 60_000,
        "{acquired} vs {before}"
    );

    // A replay reports the TTL of the acquisition it replays, not the one asked.
    let replay = app
        .acquire_body(
            P,
            &d,
            &a,
            &json!({"ttlMs": 60_000, "holder": "someone-else"}),
        )
        .await;
    assert_eq!(
        replay.outcome(),
        "replayed_same_operation",
        "{:?}",
        replay.body
    );
    let r = &replay.body["lease"];
    assert_eq!(r["ttlMs"], 30_000, "{:?}", replay.body);
    assert_eq!(r["holder"], "pod-7:8080 | east", "a replay changes nothing");
    assert_eq!(r["acquiredAt"], lease["acquiredAt"]);
    assert!(r["remainingMs"].as_u64().expect("remainingMs") <= 30_000);

    // Everyone sees the record; nobody sees a token or an operation id.
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(seen.body["held"], true);
    assert_eq!(seen.body["holder"], "pod-7:8080 | east");
    assert_eq!(seen.body["ttlMs"], 30_000);
    assert_eq!(seen.body["acquiredAt"], lease["acquiredAt"]);
    assert_eq!(seen.body["renewedAt"], lease["renewedAt"]);
    assert_eq!(seen.body["holders"], 1);
    assert_eq!(seen.body["limit"], 1);
    assert_eq!(seen.body["mode"], "exclusive");
    assert!(seen.body["version"].as_str().is_some_and(|v| !v.is_empty()));
    let text = seen.body.to_string();
    assert!(!text.contains(&a.token) && !text.contains(&a.op), "{text}");

    // Without a label: no `holder` member at all.
    let (d2, b) = (digest(), app.attempt().await);
    let plain = app.acquire(P, &d2, &b, 30_000).await;
    assert!(
        plain.body["lease"].get("holder").is_none(),
        "{:?}",
        plain.body
    );
    assert!(app.inspect(P, &d2, None).await.body.get("holder").is_none());
}

async fn renew_may_relabel_and_only_a_relabel_moves_the_version(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let first = app
        .acquire_body(P, &d, &a, &json!({"ttlMs": 30_000, "holder": "leader-1"}))
        .await;
    let token = first.fencing_token();
    let v0 = app.inspect(P, &d, None).await.body["version"].clone();

    // A plain renew: new TTL and renewedAt, same label, same version.
    let plain = renew_body(&app, &d, &a, &json!({"ttlMs": 45_000})).await;
    assert_eq!(plain.outcome(), "renewed", "{:?}", plain.body);
    assert_eq!(plain.body["lease"]["holder"], "leader-1");
    assert_eq!(plain.body["lease"]["ttlMs"], 45_000);
    assert_eq!(
        plain.body["lease"]["acquiredAt"],
        first.body["lease"]["acquiredAt"]
    );
    assert!(
        epoch_ms(&plain.body["lease"]["renewedAt"]) >= epoch_ms(&first.body["lease"]["renewedAt"])
    );
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(
        seen.body["version"], v0,
        "a plain renew must not move the version"
    );
    assert_eq!(seen.body["ttlMs"], 45_000);

    // Proclaim: a new label moves the version; the fencing token stays.
    let relabel = renew_body(
        &app,
        &d,
        &a,
        &json!({"ttlMs": 30_000, "holder": "leader-1b"}),
    )
    .await;
    assert_eq!(relabel.outcome(), "renewed", "{:?}", relabel.body);
    assert_eq!(relabel.body["lease"]["holder"], "leader-1b");
    assert_eq!(relabel.fencing_token(), token);
    let seen = app.inspect(P, &d, None).await;
    assert_eq!(seen.body["holder"], "leader-1b");
    assert_ne!(seen.body["version"], v0);
    // The same label again is no change.
    let v1 = seen.body["version"].clone();
    let same = renew_body(
        &app,
        &d,
        &a,
        &json!({"ttlMs": 30_000, "holder": "leader-1b"}),
    )
    .await;
    assert_eq!(same.outcome(), "renewed");
    assert_eq!(app.inspect(P, &d, None).await.body["version"], v1);
}

async fn version_moves_on_acquire_release_and_expiry_and_never_comes_back(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let mut seen = vec![app.inspect(P, &d, None).await.body["version"].clone()];
    let record = |v: Value, seen: &mut Vec<Value>, what: &str| {
        assert!(
            !seen.contains(&v),
            "{what}: version {v} seen before: {seen:?}"
        );
        seen.push(v);
    };
    let a = app.attempt().await;
    assert_eq!(app.acquire(P, &d, &a, 30_000).await.outcome(), "acquired");
    record(
        app.inspect(P, &d, None).await.body["version"].clone(),
        &mut seen,
        "acquire",
    );
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let free = app.inspect(P, &d, None).await;
    assert_eq!(free.body["held"], false);
    assert_eq!(free.body["holders"], 0);
    record(free.body["version"].clone(), &mut seen, "release");
    // Expiry: a short TTL, then a read after it (the read is what sees it).
    let b = app.attempt().await;
    let short = app.acquire(P, &d, &b, 500).await;
    assert_eq!(short.outcome(), "acquired");
    let held = app.inspect(P, &d, None).await;
    // (A loaded machine may read it only after the short lease ran out:
    // then this read is the expiry's, recorded below.)
    if held.body["held"] == true {
        record(held.body["version"].clone(), &mut seen, "acquire 2");
    }
    let expired = loop {
        let r = app.inspect(P, &d, None).await;
        if r.body["held"] == false {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(
            r.body["remainingMs"].as_u64().unwrap_or(1) + 1,
        ))
        .await;
    };
    record(expired.body["version"].clone(), &mut seen, "expiry");
    let c = app.attempt().await;
    assert_eq!(app.acquire(P, &d, &c, 30_000).await.outcome(), "acquired");
    record(
        app.inspect(P, &d, None).await.body["version"].clone(),
        &mut seen,
        "acquire 3",
    );
}

async fn holder_labels_are_validated(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let long = "é".repeat(257);
    for bad in [
        json!(""),
        json!(long),
        json!("a\nb"),
        json!("tab\there"),
        json!(7),
        json!(null),
    ] {
        let r = app
            .acquire_body(P, &d, &a, &json!({"ttlMs": 30_000, "holder": bad}))
            .await;
        if bad.is_null() {
            // null is "left out".
            assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
            assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
            continue;
        }
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {:?}",
            r.body
        );
        assert_eq!(
            r.body["errors"][0]["field"], "holder",
            "{bad}: {:?}",
            r.body
        );
    }
    let ok = "é".repeat(256);
    let r = app
        .acquire_body(P, &d, &a, &json!({"ttlMs": 30_000, "holder": ok}))
        .await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    let r = renew_body(&app, &d, &a, &json!({"ttlMs": 30_000, "holder": ""})).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.body);
    assert_eq!(r.body["errors"][0]["field"], "holder");
}

async fn inspect_by_owner_token_alone_compares_the_token(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    assert_eq!(app.acquire(P, &d, &a, 30_000).await.outcome(), "acquired");
    let by_token = |token: String| {
        let app = &app;
        let d = d.clone();
        async move {
            let rb = app
                .http
                .get(format!("{}/leases/{P}/{d}", app.base))
                .header("Lease-Owner-Token", token);
            TestApp::reply(rb.send().await.expect("send")).await
        }
    };
    let mine = by_token(a.token.clone()).await;
    assert_eq!(
        mine.body["heldBy"], "caller_other_operation",
        "{:?}",
        mine.body
    );
    let other = app.attempt().await;
    let theirs = by_token(other.token.clone()).await;
    assert_eq!(theirs.body["heldBy"], "other", "{:?}", theirs.body);
}

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
