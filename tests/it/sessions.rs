//! Sessions (docs/design.md §18, §19): every verb and outcome, on the
//! embedded store and on a real `redis-server`.

#[allow(unused_imports)]
use crate::common;

use common::app::{args, digest, Backend, Reply, TestApp, TestAttempt};
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "shards";

both_stores!(
    a_session_is_made_once_per_attempt,
    bad_session_requests_are_refused_with_problems,
    leases_on_a_session_follow_its_renewals,
    ending_a_session_frees_its_leases_for_waiters,
    an_unrenewed_session_ends_its_leases_with_it,
    a_renew_lists_the_leases_it_no_longer_holds,
    a_full_session_takes_no_more_leases,
    releasing_one_lease_takes_it_off_the_session,
    a_closed_keepalive_ends_the_session,
    a_keepalive_renews_and_says_when_the_session_is_lost,
    a_lease_shows_its_session_and_keeps_it_through_a_relabel,
    a_replayed_session_acquire_answers_the_sessions_time,
    a_replay_without_a_wait_gives_the_lease_back_its_sessions_expiry,
    a_lease_whose_bound_comes_first_is_not_renewed_with_its_session,
);

/// A made session: its attempt (the token is its secret) and id.
struct Session {
    attempt: TestAttempt,
    id: String,
}

async fn send(rb: reqwest::RequestBuilder) -> Reply {
    TestApp::reply(rb.send().await.expect("send")).await
}

async fn create(app: &TestApp, a: &TestAttempt, body: &Value) -> Reply {
    send(
        app.http
            .post(format!("{}/sessions", app.base))
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
            .json(body),
    )
    .await
}

async fn session(app: &TestApp, ttl_ms: u64) -> Session {
    let attempt = app.attempt().await;
    let r = create(
        app,
        &attempt,
        &json!({"ttlMs": ttl_ms, "holder": "worker-7"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["session"]["id"].as_str().expect("id").to_owned();
    Session { attempt, id }
}

async fn renew(app: &TestApp, s: &Session, body: &Value) -> Reply {
    send(
        app.http
            .patch(format!("{}/sessions/{}", app.base, s.id))
            .header("Lease-Owner-Token", &s.attempt.token)
            .json(body),
    )
    .await
}

async fn end(app: &TestApp, s: &Session) -> Reply {
    send(
        app.http
            .delete(format!("{}/sessions/{}", app.base, s.id))
            .header("Lease-Owner-Token", &s.attempt.token),
    )
    .await
}

/// Acquires `d` on the session for operation `op`.
async fn take(app: &TestApp, s: &Session, d: &str, op: &str, body: &Value) -> Reply {
    send(
        app.http
            .put(format!("{}/sessions/{}/leases/{P}/{d}", app.base, s.id))
            .header("Lease-Owner-Token", &s.attempt.token)
            .header("Lease-Operation-Id", op)
            .json(body),
    )
    .await
}

/// Waits (a long-poll on the resource's version, bounded) until `d` is free.
async fn until_free(app: &TestApp, d: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = app.inspect(P, d, None).await;
        if r.body["held"] == false {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{d} still held: {:?}",
            r.body
        );
        let version = r.body["version"].as_str().expect("version").to_owned();
        app.get(&format!(
            "/leases/{P}/{d}?changedSince={version}&waitMs=2000"
        ))
        .await;
    }
}

async fn a_session_is_made_once_per_attempt(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let a = app.attempt().await;
    let first = create(&app, &a, &json!({"ttlMs": 30_000, "holder": "worker-7"})).await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    assert_eq!(first.outcome(), "session_created");
    let s = &first.body["session"];
    let id = s["id"].as_str().expect("id");
    assert!(id.starts_with("s1.") && id.len() == 35, "{id}");
    assert_eq!(s["holder"], "worker-7");
    assert_eq!(s["ttlMs"], 30_000);
    assert_eq!(s["leases"], 0);
    // The secret is never in an answer.
    assert!(!first.body.to_string().contains(&a.token));
    // A lost reply, retried with the same attempt: the same session.
    let again = create(&app, &a, &json!({"ttlMs": 30_000})).await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
    assert_eq!(again.outcome(), "replayed_same_operation");
    assert_eq!(again.body["session"]["id"], id);
    assert_eq!(again.body["session"]["createdAt"], s["createdAt"]);
    // The same token for another operation: a conflict, not a second session.
    let other = TestApp::other_operation(&a);
    let conflict = create(&app, &other, &json!({"ttlMs": 30_000})).await;
    assert_eq!(conflict.status, StatusCode::CONFLICT, "{:?}", conflict.body);
    assert_eq!(conflict.outcome(), "owner_operation_conflict");
    assert_eq!(conflict.content_type(), "application/problem+json");
    let read = app.get(&format!("/sessions/{id}")).await;
    assert_eq!(read.outcome(), "session", "{:?}", read.body);
    assert_eq!(read.body["leases"], json!([]));
    app.shutdown().await;
}

async fn bad_session_requests_are_refused_with_problems(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let a = app.attempt().await;
    let short = create(&app, &a, &json!({"ttlMs": 999})).await;
    assert_eq!(
        short.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{:?}",
        short.body
    );
    assert_eq!(short.body["errors"][0]["field"], "ttlMs");
    let no_attempt = send(
        app.http
            .post(format!("{}/sessions", app.base))
            .json(&json!({"ttlMs": 5000})),
    )
    .await;
    assert_eq!(
        no_attempt.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        no_attempt.body
    );
    let s = session(&app, 30_000).await;
    // Another token is not this session's secret.
    let stranger = app.attempt().await;
    let wrong = send(
        app.http
            .patch(format!("{}/sessions/{}", app.base, s.id))
            .header("Lease-Owner-Token", &stranger.token)
            .json(&json!({})),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::CONFLICT, "{:?}", wrong.body);
    assert_eq!(wrong.outcome(), "not_owner");
    let d = digest();
    let foreign = send(
        app.http
            .put(format!("{}/sessions/{}/leases/{P}/{d}", app.base, s.id))
            .header("Lease-Owner-Token", &stranger.token)
            .header("Lease-Operation-Id", &stranger.op)
            .json(&json!({})),
    )
    .await;
    assert_eq!(foreign.outcome(), "not_owner", "{:?}", foreign.body);
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);
    for bad in ["s1.XYZ", "s2.0123456789abcdef0123456789abcdef", "nope"] {
        let r = app.get(&format!("/sessions/{bad}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:?}", r.body);
        assert_eq!(r.body["errors"][0]["field"], "id");
    }
    let unknown = app
        .get("/sessions/s1.0123456789abcdef0123456789abcdef")
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{:?}", unknown.body);
    assert_eq!(unknown.body["reason"], "absent");
    let ttl = take(&app, &s, &d, "op-1", &json!({"ttlMs": 5000})).await;
    assert_eq!(
        ttl.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{:?}",
        ttl.body
    );
    let page = app.get(&format!("/sessions/{}?limit=0", s.id)).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{:?}", page.body);
    // Only plain digits: a sign is not a number this API writes.
    for q in ["limit=+2", "cursor=+1", "limit=2&limit=3"] {
        let r = app.get(&format!("/sessions/{}?{q}", s.id)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}: {:?}", r.body);
    }
    app.shutdown().await;
}

async fn leases_on_a_session_follow_its_renewals(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 20_000).await;
    let (d1, d2) = (digest(), digest());
    let a = take(&app, &s, &d1, "op-1", &json!({"holder": "shard-1"})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    let b = take(&app, &s, &d2, "op-2", &json!({"limit": 3})).await;
    assert_eq!(b.status, StatusCode::CREATED, "{:?}", b.body);
    assert!(a.remaining_ms() <= 20_000 && b.remaining_ms() <= 20_000);
    // The same lease again: a replay, no second permit.
    let replay = take(&app, &s, &d1, "op-1", &json!({"holder": "shard-1"})).await;
    assert_eq!(
        replay.outcome(),
        "replayed_same_operation",
        "{:?}",
        replay.body
    );
    assert_eq!(replay.fencing_token(), a.fencing_token());
    // Each lease has its own fencing token.
    assert_ne!(a.fencing_token(), b.fencing_token());
    let renewed = renew(&app, &s, &json!({"ttlMs": 60_000})).await;
    assert_eq!(renewed.status, StatusCode::OK, "{:?}", renewed.body);
    assert_eq!(renewed.body["lost"], json!([]));
    assert_eq!(renewed.body["session"]["leases"], 2);
    // Both now end when the session does: past the TTL they were taken with.
    for d in [&d1, &d2] {
        let r = app.inspect(P, d, None).await;
        let left = r.body["remainingMs"].as_u64().expect("remainingMs");
        assert!(left > 20_000 && left <= 60_000, "{d}: {left}");
    }
    let read = app.get(&format!("/sessions/{}", s.id)).await;
    let mut listed: Vec<&str> = read.body["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|l| l["digest"].as_str().expect("digest"))
        .collect();
    listed.sort_unstable();
    let mut want = vec![d1.as_str(), d2.as_str()];
    want.sort_unstable();
    assert_eq!(listed, want);
    let one = app.get(&format!("/sessions/{}?limit=1", s.id)).await;
    assert_eq!(one.body["leases"].as_array().map(Vec::len), Some(1));
    let cursor = one.body["nextCursor"].as_str().expect("nextCursor");
    let next = app
        .get(&format!("/sessions/{}?limit=1&cursor={cursor}", s.id))
        .await;
    let (first, second) = (
        &one.body["leases"][0]["digest"],
        &next.body["leases"][0]["digest"],
    );
    assert_ne!(first, second, "the pages differ");
    assert!(want.contains(&second.as_str().expect("digest")));
    // Someone else is contended as with any lease.
    let other = app.attempt().await;
    let c = app.acquire(P, &d1, &other, 5000).await;
    assert_eq!(c.outcome(), "contended", "{:?}", c.body);
    app.shutdown().await;
}

async fn ending_a_session_frees_its_leases_for_waiters(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 30_000).await;
    let ds: Vec<String> = (0..3).map(|_| digest()).collect();
    for (i, d) in ds.iter().enumerate() {
        let r = take(&app, &s, d, &format!("op-{i}"), &json!({})).await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    }
    // A waiter on the first: woken by the end, long before the TTL.
    let waiter = app.attempt().await;
    let wait = {
        let (http, base, d, w) = (
            app.http.clone(),
            app.base.clone(),
            ds[0].clone(),
            waiter.clone(),
        );
        tokio::spawn(async move {
            let rb = http
                .put(format!("{base}/leases/{P}/{d}"))
                .header("Lease-Owner-Token", &w.token)
                .header("Lease-Operation-Id", &w.op)
                .json(&json!({"ttlMs": 5000, "waitMs": 20_000}));
            TestApp::reply(rb.send().await.expect("send")).await
        })
    };
    app.until_waiters(1).await;
    let ended = end(&app, &s).await;
    assert_eq!(ended.status, StatusCode::OK, "{:?}", ended.body);
    assert_eq!(ended.outcome(), "ended");
    assert_eq!(ended.body["released"], 3);
    let got = wait.await.expect("waiter");
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    assert!(got.body["waitedMs"].as_u64().expect("waitedMs") < 20_000);
    for d in &ds[1..] {
        assert_eq!(app.inspect(P, d, None).await.body["held"], false);
        let h = app.get(&format!("/leases/{P}/{d}/history")).await;
        assert_eq!(h.body["entries"][0]["event"], "released", "{:?}", h.body);
        assert_eq!(
            h.body["entries"][0]["reason"], "session_ended",
            "{:?}",
            h.body
        );
    }
    // Ended: every session verb says so.
    let late = renew(&app, &s, &json!({})).await;
    assert_eq!(late.status, StatusCode::NOT_FOUND, "{:?}", late.body);
    assert_eq!(late.body["reason"], "session_ended");
    let attach = take(&app, &s, &digest(), "op-9", &json!({})).await;
    assert_eq!(attach.body["reason"], "session_ended", "{:?}", attach.body);
    assert_eq!(end(&app, &s).await.outcome(), "already_absent");
    app.shutdown().await;
}

async fn an_unrenewed_session_ends_its_leases_with_it(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 1000).await;
    let (d1, d2) = (digest(), digest());
    take(&app, &s, &d1, "op-1", &json!({})).await;
    take(&app, &s, &d2, "op-2", &json!({"mode": "shared"})).await;
    let e1 = app.inspect(P, &d1, None).await;
    let e2 = app.inspect(P, &d2, None).await;
    // One expiry for both (to the millisecond, give or take the reads).
    let r1 = e1.body["remainingMs"].as_u64().expect("remaining");
    let r2 = e2.body["remainingMs"].as_u64().expect("remaining");
    assert!(r1.abs_diff(r2) < 200, "{r1} vs {r2}");
    until_free(&app, &d1).await;
    until_free(&app, &d2).await;
    let late = renew(&app, &s, &json!({})).await;
    assert_eq!(late.status, StatusCode::NOT_FOUND, "{:?}", late.body);
    assert_eq!(late.body["reason"], "session_expired");
    let read = app.get(&format!("/sessions/{}", s.id)).await;
    assert_eq!(read.body["reason"], "session_expired", "{:?}", read.body);
    app.shutdown().await;
}

async fn a_renew_lists_the_leases_it_no_longer_holds(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 30_000).await;
    let (kept, broken, bounded) = (digest(), digest(), digest());
    take(&app, &s, &kept, "op-1", &json!({})).await;
    take(&app, &s, &broken, "op-2", &json!({})).await;
    let b = take(&app, &s, &bounded, "op-3", &json!({"maxHoldMs": 300})).await;
    assert_eq!(b.outcome(), "acquired", "{:?}", b.body);
    // Its hold bound comes before the session's new expiry: the renew
    // cannot carry it, says why, and it ends at its bound.
    let capped = renew(&app, &s, &json!({})).await;
    assert_eq!(
        capped.body["lost"],
        json!([{"purpose": P, "digest": bounded, "reason": "max_hold"}]),
        "{:?}",
        capped.body
    );
    let broke = send(
        app.http
            .post(format!("{}/leases/{P}/{broken}/break", app.base))
            .json(&json!({})),
    )
    .await;
    assert_eq!(broke.outcome(), "broken", "{:?}", broke.body);
    until_free(&app, &bounded).await;
    let r = renew(&app, &s, &json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let lost: Vec<(String, String)> = r.body["lost"]
        .as_array()
        .expect("lost")
        .iter()
        .map(|l| {
            (
                l["digest"].as_str().expect("digest").to_owned(),
                l["reason"].as_str().expect("reason").to_owned(),
            )
        })
        .collect();
    assert_eq!(lost, vec![(broken.clone(), "revoked".to_owned())]);
    // Off the session now: the next renew lists nothing.
    let again = renew(&app, &s, &json!({})).await;
    assert_eq!(again.body["lost"], json!([]), "{:?}", again.body);
    assert_eq!(again.body["session"]["leases"], 1);
    assert_eq!(app.inspect(P, &kept, None).await.body["held"], true);
    app.shutdown().await;
}

async fn a_full_session_takes_no_more_leases(backend: Backend) {
    let app = TestApp::spawn_with(args(&backend, &["--session-max-leases", "2"])).await;
    let s = session(&app, 30_000).await;
    let ds: Vec<String> = (0..3).map(|_| digest()).collect();
    for (i, d) in ds.iter().take(2).enumerate() {
        let r = take(&app, &s, d, &format!("op-{i}"), &json!({})).await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    }
    let full = take(&app, &s, &ds[2], "op-2", &json!({})).await;
    assert_eq!(full.status, StatusCode::CONFLICT, "{:?}", full.body);
    assert_eq!(full.outcome(), "session_full");
    assert_eq!(full.body["limit"], 2);
    // Nothing left held by the refused one.
    assert_eq!(app.inspect(P, &ds[2], None).await.body["held"], false);
    let page = app.get("/problems/session-full").await;
    assert_eq!(page.status, StatusCode::OK);
    app.shutdown().await;
}

async fn releasing_one_lease_takes_it_off_the_session(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 30_000).await;
    let (d1, d2) = (digest(), digest());
    take(&app, &s, &d1, "op-1", &json!({})).await;
    take(&app, &s, &d2, "op-2", &json!({})).await;
    let released = send(
        app.http
            .delete(format!("{}/sessions/{}/leases/{P}/{d1}", app.base, s.id))
            .header("Lease-Owner-Token", &s.attempt.token)
            .header("Lease-Operation-Id", "op-1"),
    )
    .await;
    assert_eq!(released.outcome(), "released", "{:?}", released.body);
    // Released by its holder, not by the session's end: no reason.
    let h = app.get(&format!("/leases/{P}/{d1}/history")).await;
    assert_eq!(h.body["entries"][0]["event"], "released", "{:?}", h.body);
    assert!(h.body["entries"][0].get("reason").is_none(), "{:?}", h.body);
    assert_eq!(app.inspect(P, &d1, None).await.body["held"], false);
    let r = renew(&app, &s, &json!({})).await;
    assert_eq!(r.body["lost"], json!([]), "{:?}", r.body);
    assert_eq!(r.body["session"]["leases"], 1);
    let ended = end(&app, &s).await;
    assert_eq!(ended.body["released"], 1, "{:?}", ended.body);
    app.shutdown().await;
}

/// Opens `s`'s keep-alive stream; the response streams events.
async fn keepalive(app: &TestApp, s: &Session, query: &str) -> reqwest::Response {
    let resp = app
        .http
        .get(format!("{}/sessions/{}/keepalive{query}", app.base, s.id))
        .header("Lease-Owner-Token", &s.attempt.token)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["content-type"].to_str().expect("type"),
        "text/event-stream"
    );
    resp
}

/// The next event of a stream: its name and data.
async fn next_event(resp: &mut reqwest::Response, buf: &mut String) -> (String, Value) {
    loop {
        if let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let name = event
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .expect("event line")
                .to_owned();
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .expect("data line");
            return (name, serde_json::from_str(data).expect("JSON data"));
        }
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), resp.chunk())
            .await
            .expect("an event within 10 s")
            .expect("read")
            .expect("the stream ended without an event");
        buf.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
    }
}

async fn a_closed_keepalive_ends_the_session(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 30_000).await;
    let d = digest();
    take(&app, &s, &d, "op-1", &json!({})).await;
    let mut stream = keepalive(&app, &s, "").await;
    let mut buf = String::new();
    let (name, data) = next_event(&mut stream, &mut buf).await;
    assert_eq!(name, "renewed");
    assert_eq!(data["session"]["id"], s.id.as_str());
    // The client goes: the session ends at once, not at its 30 s TTL.
    let closed = std::time::Instant::now();
    drop(stream);
    until_free(&app, &d).await;
    assert!(closed.elapsed() < std::time::Duration::from_secs(5));
    let late = renew(&app, &s, &json!({})).await;
    assert_eq!(late.body["reason"], "session_ended", "{:?}", late.body);
    app.shutdown().await;
}

async fn a_keepalive_renews_and_says_when_the_session_is_lost(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 1000).await;
    let d = digest();
    take(&app, &s, &d, "op-1", &json!({})).await;
    let mut stream = keepalive(&app, &s, "").await;
    let mut buf = String::new();
    // Renewed every third of the TTL: past the TTL the lease is still held.
    let mut renewals = 0;
    let first = std::time::Instant::now();
    while first.elapsed() < std::time::Duration::from_millis(1500) {
        let (name, data) = next_event(&mut stream, &mut buf).await;
        assert_eq!(name, "renewed", "{data}");
        renewals += 1;
    }
    assert!(renewals >= 3, "{renewals}");
    assert_eq!(app.inspect(P, &d, None).await.body["held"], true);
    // Ended elsewhere: the stream says `lost` and ends.
    assert_eq!(end(&app, &s).await.outcome(), "ended");
    loop {
        let (name, data) = next_event(&mut stream, &mut buf).await;
        if name == "lost" {
            assert_eq!(data["reason"], "session_ended");
            break;
        }
        assert_eq!(name, "renewed");
    }
    assert!(
        stream.chunk().await.expect("read").is_none(),
        "the stream ends after lost"
    );
    // A bounded stream ends, and ends its session with it.
    let bounded = session(&app, 30_000).await;
    let d2 = digest();
    take(&app, &bounded, &d2, "op-1", &json!({})).await;
    let short = keepalive(&app, &bounded, "?maxMs=200").await;
    let body = short.text().await.expect("body");
    assert!(body.starts_with("event: renewed"), "{body}");
    until_free(&app, &d2).await;
    app.shutdown().await;
}

async fn a_lease_shows_its_session_and_keeps_it_through_a_relabel(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 30_000).await;
    let (plain, bounded, counted) = (digest(), digest(), digest());
    take(&app, &s, &plain, "op-1", &json!({"holder": "shard-1"})).await;
    take(&app, &s, &bounded, "op-2", &json!({"maxHoldMs": 600_000})).await;
    take(
        &app,
        &s,
        &counted,
        "op-3",
        &json!({"limit": 2, "holder": "c"}),
    )
    .await;
    for d in [&plain, &bounded, &counted] {
        let r = app.inspect(P, d, None).await;
        assert_eq!(
            r.body["permits"][0]["session"],
            s.id.as_str(),
            "{:?}",
            r.body
        );
    }
    let bounded_view = app.inspect(P, &bounded, None).await;
    assert_eq!(bounded_view.body["permits"][0]["maxHoldMs"], 600_000);
    // A plain lease with no session shows none.
    let other = app.attempt().await;
    let free = digest();
    app.acquire(P, &free, &other, 5000).await;
    let r = app.inspect(P, &free, None).await;
    assert!(
        r.body["permits"][0].get("session").is_none(),
        "{:?}",
        r.body
    );
    // Listing shows it too.
    let listed = app.get(&format!("/leases/{P}?limit=100")).await;
    let mine = listed.body["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .find(|l| l["digest"] == plain.as_str())
        .cloned()
        .expect("listed");
    assert_eq!(mine["session"], s.id.as_str(), "{mine}");
    // A new label through the lease's own renew keeps the session mark.
    for (d, op) in [(&plain, "op-1"), (&counted, "op-3")] {
        let a = TestAttempt {
            token: s.attempt.token.clone(),
            op: op.to_owned(),
        };
        let rb = app
            .http
            .patch(format!("{}/leases/{P}/{d}", app.base))
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
            .json(&json!({"ttlMs": 20_000, "holder": "relabelled"}));
        let r = send(rb).await;
        assert_eq!(r.outcome(), "renewed", "{:?}", r.body);
        assert_eq!(r.body["lease"]["holder"], "relabelled");
        let v = app.inspect(P, d, None).await;
        assert_eq!(
            v.body["permits"][0]["session"],
            s.id.as_str(),
            "{:?}",
            v.body
        );
        assert_eq!(v.body["permits"][0]["holder"], "relabelled");
    }
    // The session still renews them (the light path reads the marked slot).
    let renewed = renew(&app, &s, &json!({})).await;
    assert_eq!(renewed.body["lost"], json!([]), "{:?}", renewed.body);
    assert_eq!(end(&app, &s).await.body["released"], 3);
    app.shutdown().await;
}

/// A session renew of 120 leases on one Redis is a handful of script runs
/// (the record, a page of its leases, and the light renew in batches of
/// 100), not one per lease; and every key a session writes expires, the
/// list of an ended session's leases at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_renew_is_batched_and_its_keys_expire() {
    let server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let s = session(&app, 30_000).await;
    let ds: Vec<String> = (0..120).map(|_| digest()).collect();
    for (i, d) in ds.iter().enumerate() {
        let body = if i % 10 == 0 {
            json!({"limit": 3})
        } else {
            json!({})
        };
        let r = take(&app, &s, d, &format!("op-{i}"), &body).await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    }
    // A first renew loads the scripts (NOSCRIPT, then the retry).
    renew(&app, &s, &json!({})).await;
    // Every command Redis runs is logged (SLOWLOG, no threshold): each
    // script run shows as its EVALSHA with the script's SHA.
    server.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    server.cli(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    server.cli(&["SLOWLOG", "RESET"]);
    let r = renew(&app, &s, &json!({"ttlMs": 40_000})).await;
    assert_eq!(r.body["lost"], json!([]), "{:?}", r.body);
    let log = server.cli(&["SLOWLOG", "GET", "100000"]);
    let runs = |source: &str| {
        let sha = ::redis::Script::new(source).get_hash().to_owned();
        log.lines().filter(|l| l.trim() == sha).count()
    };
    use leasehold::store::redis::lua;
    // One light run per 100 leases, none of renew.lua's (each lease's own).
    assert_eq!(runs(lua::SESSION_RENEW.assembled), 2, "{log}");
    assert_eq!(runs(lua::RENEW.assembled), 0);
    assert_eq!(
        runs(lua::SESSION.assembled),
        2,
        "the record's renew and one page"
    );
    server.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);
    for d in [&ds[0], &ds[1], &ds[119]] {
        let left = app.inspect(P, d, None).await.body["remainingMs"]
            .as_u64()
            .expect("remainingMs");
        assert!(left > 30_000, "{d}: {left}");
    }
    let (record, leases) = (
        format!("{}:session:v2:{{{}}}", app.namespace, s.id),
        format!("{}:sessleases:v2:{{{}}}", app.namespace, s.id),
    );
    for key in [&record, &leases] {
        let pttl: i64 = server.cli(&["PTTL", key]).trim().parse().expect("PTTL");
        // Its expiry (40 s) plus the time it is kept to say why it went.
        assert!(pttl > 40_000 && pttl <= 40_000 + 60_000, "{key}: {pttl}");
    }
    assert_eq!(end(&app, &s).await.body["released"], 120);
    assert_eq!(server.cli(&["EXISTS", &leases]).trim(), "0");
    let pttl: i64 = server.cli(&["PTTL", &record]).trim().parse().expect("PTTL");
    assert!(
        pttl > 0 && pttl <= 60_000,
        "an ended session's record: {pttl}"
    );
    let keys = server.cli(&["--scan", "--pattern", &format!("{}:*", app.namespace)]);
    for key in keys.lines().filter(|k| !k.is_empty()) {
        let pttl: i64 = server.cli(&["PTTL", key]).trim().parse().expect("PTTL");
        assert_ne!(pttl, -1, "{key} has no TTL");
    }
    app.shutdown().await;
}

/// An instance that stops cleanly ends its keep-alive streams without
/// ending their sessions: the client keeps the session alive elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_instance_leaves_its_streams_sessions_alive() {
    let server = common::redis::RedisServer::start();
    let backend = Backend::Redis(server.url());
    let namespace = common::app::unique("t");
    let first = TestApp::spawn_with(args(&backend, &["--namespace", &namespace])).await;
    let other = TestApp::spawn_with(args(&backend, &["--namespace", &namespace])).await;
    let s = session(&first, 30_000).await;
    let d = digest();
    take(&first, &s, &d, "op-1", &json!({})).await;
    let mut stream = keepalive(&first, &s, "").await;
    let mut buf = String::new();
    assert_eq!(next_event(&mut stream, &mut buf).await.0, "renewed");
    first.shutdown().await;
    // The stream ended without `lost`.
    let rest = tokio::time::timeout(std::time::Duration::from_secs(10), stream.text())
        .await
        .expect("the stream ends with the instance")
        .unwrap_or_default();
    assert!(
        !(buf + &rest).contains("event: lost"),
        "lost sent at a clean stop"
    );
    let renewed = renew(&other, &s, &json!({})).await;
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
    assert_eq!(other.inspect(P, &d, None).await.body["held"], true);
    other.shutdown().await;
}

/// On a Redis Cluster a session's leases live in many slots: a renew
/// renews each in its own slot (no script reads another slot's key) and an
/// end releases them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_spans_the_slots_of_a_cluster() {
    let cluster = common::redis::RedisCluster::start(3, 0);
    let seeds = cluster.seed_urls()[0].clone();
    let app = TestApp::spawn_with(args(&Backend::Memory, &["--redis-cluster-nodes", &seeds])).await;
    let s = session(&app, 20_000).await;
    let ds: Vec<String> = (0..40).map(|_| digest()).collect();
    for (i, d) in ds.iter().enumerate() {
        let body = if i % 8 == 0 {
            json!({"mode": "shared"})
        } else {
            json!({})
        };
        let r = take(&app, &s, d, &format!("op-{i}"), &body).await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    }
    // The leases are on every master.
    for master in cluster.masters() {
        let keys = master.cli(&["KEYS", &format!("{}:lease:v2:*", app.namespace)]);
        assert!(keys.lines().any(|l| !l.is_empty()), "a master with none");
    }
    let r = renew(&app, &s, &json!({"ttlMs": 60_000})).await;
    assert_eq!(r.outcome(), "renewed", "{:?}", r.body);
    assert_eq!(r.body["lost"], json!([]), "{:?}", r.body);
    for d in &ds {
        let left = app.inspect(P, d, None).await.body["remainingMs"]
            .as_u64()
            .expect("remainingMs");
        assert!(left > 20_000, "{d}: {left}");
    }
    let ended = end(&app, &s).await;
    assert_eq!(ended.body["released"], 40, "{:?}", ended.body);
    for d in &ds {
        assert_eq!(app.inspect(P, d, None).await.body["held"], false);
    }
    app.shutdown().await;
}

/// An end that marked the session ended and then failed before releasing
/// its leases (the store went away mid-way) is finished by the retry: the
/// leases still on its list are released, not left to their expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_end_releases_what_a_failed_one_left() {
    let server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let s = session(&app, 30_000).await;
    let d = digest();
    take(&app, &s, &d, "op-1", &json!({})).await;
    // What a failed end leaves: the record marked ended, the list intact.
    let record = format!("{}:session:v2:{{{}}}", app.namespace, s.id);
    server.cli(&["HSET", &record, "x", "1"]);
    assert_eq!(app.inspect(P, &d, None).await.body["held"], true);
    let again = end(&app, &s).await;
    assert_eq!(again.outcome(), "already_absent", "{:?}", again.body);
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);
    let leases = format!("{}:sessleases:v2:{{{}}}", app.namespace, s.id);
    assert_eq!(server.cli(&["EXISTS", &leases]).trim(), "0");
    app.shutdown().await;
}

/// With API keys, a session verb needs a key with the verb's scope on some
/// purpose (a session belongs to none; its leases are authorised on theirs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_verbs_need_a_key_with_the_scope_somewhere() {
    let dir = std::env::temp_dir().join(common::app::unique("leasehold-session-keys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let (reader, writer) = (
        common::app::unique("reader-key-0123456789-"),
        common::app::unique("writer-key-0123456789-"),
    );
    std::fs::write(
        dir.join("keys"),
        format!("{reader} {P} read\n{writer} {P} write\n"),
    )
    .expect("keys");
    let file = dir.join("keys");
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let attempt = |key: &str| {
        let (http, base, key) = (app.http.clone(), app.base.clone(), key.to_owned());
        async move {
            let r = http
                .post(format!("{base}/attempts"))
                .bearer_auth(&key)
                .json(&json!({"operationId": "s-op"}))
                .send()
                .await
                .expect("send");
            let body: Value = r.json().await.expect("JSON");
            body["ownerToken"].as_str().expect("token").to_owned()
        }
    };
    let make = |key: &str, token: &str| {
        app.http
            .post(format!("{}/sessions", app.base))
            .bearer_auth(key)
            .header("Lease-Owner-Token", token)
            .header("Lease-Operation-Id", "s-op")
            .json(&json!({"ttlMs": 5000}))
    };
    let token = attempt(&writer).await;
    let refused = send(make(&reader, &token)).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{:?}", refused.body);
    assert_eq!(refused.body["scope"], "write", "{:?}", refused.body);
    let none = send(
        app.http
            .post(format!("{}/sessions", app.base))
            .json(&json!({"ttlMs": 5000})),
    )
    .await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{:?}", none.body);
    let made = send(make(&writer, &token)).await;
    assert_eq!(made.outcome(), "session_created", "{:?}", made.body);
    let id = made.body["session"]["id"].as_str().expect("id");
    let read = send(
        app.http
            .get(format!("{}/sessions/{id}", app.base))
            .bearer_auth(&reader),
    )
    .await;
    assert_eq!(read.outcome(), "session", "{:?}", read.body);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A full Redis (`maxmemory` below what is used, `noeviction`) still
/// serves renewals and releases (docs/storage.md, docs/behaviour.md: they
/// add no memory; renew.lua is flagged `allow-oom`). A session's renew
/// and end rewrite its record in place too, so they are served as well:
/// else every session's leases die at its TTL while a full Redis lasts
/// (a keep-alive stream cannot renew it, a closed one cannot end it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_still_renews_and_ends_a_session() {
    let server = common::redis::RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let s = session(&app, 30_000).await;
    let d = digest();
    take(&app, &s, &d, "op-1", &json!({})).await;
    // The scripts are loaded (a SCRIPT LOAD under OOM is refused too).
    renew(&app, &s, &json!({})).await;
    tokio::task::block_in_place(|| server.cli(&["CONFIG", "SET", "maxmemory", "1"]));
    let renewed = renew(&app, &s, &json!({"ttlMs": 40_000})).await;
    let ended = end(&app, &s).await;
    tokio::task::block_in_place(|| server.cli(&["CONFIG", "SET", "maxmemory", "0"]));
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
    assert_eq!(ended.outcome(), "ended", "{:?}", ended.body);
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);
    app.shutdown().await;
}

/// A session renew reads the session's list of leases in pages of 1 000
/// by offset; a lease taken off the list meanwhile (a release on the
/// session, or a lost one detached) shifts every later lease one place
/// back, and the one at the page boundary is read by neither page. It is
/// not renewed, yet the renew answers `lost: []`: it ends at the old
/// expiry while its holder counts it valid to the session's new one, and
/// an end read the same way leaves it held. (A race: tried up to 40
/// times; on one core it showed in about one renew in ten.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_detach_does_not_make_a_renew_skip_a_lease() {
    let server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let s = session(&app, 60_000).await;
    let ds: Vec<String> = (0..1_050).map(|_| digest()).collect();
    for (i, d) in ds.iter().enumerate() {
        let r = take(&app, &s, d, &format!("op-{i}"), &json!({})).await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    }
    let mut ttl = 70_000;
    for round in 0..40 {
        ttl += 10_000;
        let (d, op) = (ds[round].clone(), format!("op-{round}"));
        let release = send(
            app.http
                .delete(format!("{}/sessions/{}/leases/{P}/{d}", app.base, s.id))
                .header("Lease-Owner-Token", &s.attempt.token)
                .header("Lease-Operation-Id", op),
        );
        let body = json!({ "ttlMs": ttl });
        let (renewed, _) = tokio::join!(renew(&app, &s, &body), release);
        // At most the lease released meanwhile is reported (`absent`).
        let lost = renewed.body["lost"].as_array().expect("lost");
        assert!(
            lost.iter().all(|l| l["digest"] == ds[round].as_str()),
            "{:?}",
            renewed.body
        );
        // The leases about the page boundary (after `round + 1` went).
        for d in &ds[round + 995..(round + 1_010).min(ds.len())] {
            let left = app.inspect(P, d, None).await.body["remainingMs"]
                .as_u64()
                .expect("remainingMs");
            assert!(
                left > ttl - 5_000,
                "round {round}: {d} was not renewed: {left} ms left, the session {ttl}"
            );
        }
    }
    app.shutdown().await;
}

/// A keep-alive stream renews every third of the session's TTL as the
/// first renew found it; a `PATCH` that shortens the TTL while the stream
/// is open (to 1 s, from 9 s) leaves the stream ticking every 3 s, and the
/// session (and its leases) expire under an open stream whose client
/// counts on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_follows_a_shortened_ttl() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let s = session(&app, 9_000).await;
    let d = digest();
    take(&app, &s, &d, "op-1", &json!({})).await;
    let mut stream = keepalive(&app, &s, "").await;
    let mut buf = String::new();
    assert_eq!(next_event(&mut stream, &mut buf).await.0, "renewed");
    let shorter = renew(&app, &s, &json!({"ttlMs": 1000})).await;
    assert_eq!(shorter.outcome(), "renewed", "{:?}", shorter.body);
    tokio::time::sleep(std::time::Duration::from_millis(2_000)).await;
    let now = app.get(&format!("/sessions/{}", s.id)).await;
    assert_eq!(now.outcome(), "session", "{:?}", now.body);
    assert_eq!(app.inspect(P, &d, None).await.body["held"], true);
    drop(stream);
    app.shutdown().await;
}

/// An end that marked the session ended and then could not release a
/// lease (here Redis refuses the release: the lease's key holds another
/// type) has been applied: it answers `indeterminate` (retry), never
/// `unavailable`, which says nothing was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_that_fails_after_ending_is_not_unavailable() {
    let server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let s = session(&app, 30_000).await;
    let d = digest();
    take(&app, &s, &d, "op-1", &json!({})).await;
    let lease = format!("{}:lease:v2:{{{P}:{d}}}", app.namespace);
    assert_eq!(server.cli(&["DEL", &lease]).trim(), "1", "{lease}");
    server.cli(&["RPUSH", &lease, "x"]);
    server.cli(&["PEXPIRE", &lease, "60000"]);
    let ended = end(&app, &s).await;
    let now = app.get(&format!("/sessions/{}", s.id)).await;
    assert_eq!(now.body["reason"], "session_ended", "{:?}", now.body);
    assert_ne!(ended.outcome(), "unavailable", "{:?}", ended.body);
    assert_eq!(ended.outcome(), "indeterminate", "{:?}", ended.body);
    app.shutdown().await;
}

/// An acquire on a session that took the lease and then could not attach
/// it (here Redis refuses the session's ZADD: an ACL without it) has been
/// applied: it answers `indeterminate` naming the attempt's operation id
/// (retried with it, it replays and attaches), never `unavailable` or an
/// id of something else. (The standalone history found an `indeterminate`
/// naming the session.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_taken_but_not_attached_is_indeterminate_for_its_attempt() {
    let server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let s = session(&app, 30_000).await;
    let d = digest();
    server.cli(&["ACL", "SETUSER", "default", "-zadd"]);
    let taken = take(&app, &s, &d, "op-1", &json!({})).await;
    server.cli(&["ACL", "SETUSER", "default", "+zadd"]);
    assert_eq!(
        taken.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{:?}",
        taken.body
    );
    assert_eq!(taken.outcome(), "indeterminate", "{:?}", taken.body);
    assert_eq!(taken.body["operationId"], "op-1", "{:?}", taken.body);
    // Retried with the same attempt: replayed, and now on the session.
    let again = take(&app, &s, &d, "op-1", &json!({})).await;
    assert_eq!(
        again.outcome(),
        "replayed_same_operation",
        "{:?}",
        again.body
    );
    let read = app.get(&format!("/sessions/{}", s.id)).await;
    assert_eq!(read.body["session"]["leases"], 1, "{:?}", read.body);
    app.shutdown().await;
}

/// A session renew from what the renewing instance remembers
/// (`src/store/redis/remembered.rs`): the second renew sends each plain
/// lease's record as last written and writes the next from its pieces,
/// the same record the long path writes; a record changed behind the
/// session (a relabel) or taken from it (a break) is read again, and a
/// remembered record is never written over another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_renew_from_memory_writes_what_the_long_path_writes() {
    let server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let s = session(&app, 30_000).await;
    let ds: Vec<String> = (0..3).map(|_| digest()).collect();
    for (i, d) in ds.iter().enumerate() {
        let r = take(&app, &s, d, &format!("op-{i}"), &json!({})).await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    }
    let key = |d: &str| format!("{}:lease:v2:{{{P}:{d}}}", app.namespace);
    let record = |d: &str| server.cli(&["GET", &key(d)]).trim().to_owned();
    // "p:<token>:<op>|fence|exp|acq|renewed|ttl|ld|slot": all but the
    // expiry, renewedAt and TTL stay as they were.
    let fields = |r: &str| r.split('|').map(ToOwned::to_owned).collect::<Vec<_>>();
    let check = |before: &str, after: &str, expires: u64| {
        let (b, a) = (fields(before), fields(after));
        assert_eq!(a.len(), b.len(), "{before} / {after}");
        for i in [0, 1, 3, 6, 7] {
            assert_eq!(a[i], b[i], "field {i}: {before} / {after}");
        }
        let n = |i: usize| a[i].parse::<u64>().expect("a number");
        assert_eq!(n(2), expires, "{after}");
        assert_eq!(n(2) - n(4), n(5), "the TTL left: {after}");
    };
    let expires = |r: &Reply| {
        let at = r.body["session"]["expiresAt"].as_str().expect("expiresAt");
        leasehold::domain::StoreTime::parse(at).expect("a time").0
    };
    let first = renew(&app, &s, &json!({})).await;
    assert_eq!(first.body["lost"], json!([]), "{:?}", first.body);
    let written: Vec<String> = ds.iter().map(|d| record(d)).collect();
    // Every command Redis runs is logged with its arguments (SLOWLOG, no
    // threshold): the next renew sends the records just written.
    server.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    server.cli(&["SLOWLOG", "RESET"]);
    let second = renew(&app, &s, &json!({"ttlMs": 40_000})).await;
    assert_eq!(second.body["lost"], json!([]), "{:?}", second.body);
    let log = server.cli(&["SLOWLOG", "GET", "1000"]);
    server.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);
    for (d, before) in ds.iter().zip(&written) {
        // SLOWLOG keeps an argument's first 128 bytes.
        let sent = &before[..before.len().min(128)];
        assert!(
            log.lines().any(|l| l.trim().starts_with(sent)),
            "the renew did not send {before}: {log}"
        );
        check(before, &record(d), expires(&second));
        // Written as remembered: renewed at the session's renewal (the
        // long path writes the script's own clock, a little later).
        let at = second.body["session"]["renewedAt"]
            .as_str()
            .expect("renewedAt");
        let renewed = leasehold::domain::StoreTime::parse(at).expect("a time").0;
        assert_eq!(fields(&record(d))[4], renewed.to_string(), "{d}");
    }
    // Changed behind the session: a relabel rewrites one record.
    let relabel = send(
        app.http
            .patch(format!("{}/leases/{P}/{}", app.base, ds[0]))
            .header("Lease-Owner-Token", &s.attempt.token)
            .header("Lease-Operation-Id", "op-0")
            .json(&json!({"ttlMs": 40_000, "holder": "relabelled"})),
    )
    .await;
    assert_eq!(relabel.outcome(), "renewed", "{:?}", relabel.body);
    let relabelled = record(&ds[0]);
    // Taken from it: a break, and another holder takes the resource.
    let broke = send(
        app.http
            .post(format!("{}/leases/{P}/{}/break", app.base, ds[1]))
            .json(&json!({})),
    )
    .await;
    assert_eq!(broke.outcome(), "broken", "{:?}", broke.body);
    let other = app.attempt().await;
    let taken = app.acquire(P, &ds[1], &other, 60_000).await;
    assert_eq!(taken.outcome(), "acquired", "{:?}", taken.body);
    let others = record(&ds[1]);
    let before_third = record(&ds[2]);
    let third = renew(&app, &s, &json!({})).await;
    let lost: Vec<&str> = third.body["lost"]
        .as_array()
        .expect("lost")
        .iter()
        .map(|l| l["digest"].as_str().expect("digest"))
        .collect();
    assert_eq!(lost, [ds[1].as_str()], "{:?}", third.body);
    check(&relabelled, &record(&ds[0]), expires(&third));
    assert!(
        record(&ds[0]).ends_with("|relabelled"),
        "{}",
        record(&ds[0])
    );
    assert_eq!(
        record(&ds[1]),
        others,
        "another holder's record is not written"
    );
    check(&before_third, &record(&ds[2]), expires(&third));
    // And from memory again after the long path re-read the relabel.
    let fourth = renew(&app, &s, &json!({})).await;
    assert_eq!(fourth.body["lost"], json!([]), "{:?}", fourth.body);
    check(&relabelled, &record(&ds[0]), expires(&fourth));
    app.shutdown().await;
}

/// A record this instance remembers for one session's lease is never
/// written for another session's renew: session A's lease is broken,
/// session B takes the resource (the same operation id) and renews it
/// here; A's renew then answers it lost and leaves B's record as B's
/// renew wrote it (before the fix A's renew wrote B's record with A's
/// expiry and answered A that it still held the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_record_is_never_renewed_for_another_session() {
    let server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let (a, b) = (session(&app, 30_000).await, session(&app, 20_000).await);
    let d = digest();
    let key = format!("{}:lease:v2:{{{P}:{d}}}", app.namespace);
    let record = || server.cli(&["GET", &key]).trim().to_owned();
    let r = take(&app, &a, &d, "op-1", &json!({})).await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    // Renewed twice: this instance now remembers A's record.
    for _ in 0..2 {
        let r = renew(&app, &a, &json!({})).await;
        assert_eq!(r.body["lost"], json!([]), "{:?}", r.body);
    }
    let broke = send(
        app.http
            .post(format!("{}/leases/{P}/{d}/break", app.base))
            .json(&json!({})),
    )
    .await;
    assert_eq!(broke.outcome(), "broken", "{:?}", broke.body);
    let r = take(&app, &b, &d, "op-1", &json!({})).await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    // B's renews: this instance now remembers B's record.
    for _ in 0..2 {
        let r = renew(&app, &b, &json!({})).await;
        assert_eq!(r.body["lost"], json!([]), "{:?}", r.body);
    }
    let bs = record();
    assert!(bs.starts_with(&format!("p:{}:", b.attempt.token)), "{bs}");
    let r = renew(&app, &a, &json!({"ttlMs": 60_000})).await;
    let lost: Vec<&str> = r.body["lost"]
        .as_array()
        .expect("lost")
        .iter()
        .map(|l| l["digest"].as_str().expect("digest"))
        .collect();
    assert_eq!(lost, [d.as_str()], "{:?}", r.body);
    assert_eq!(record(), bs, "B's record is not written by A's renew");
    // And B's next renew still renews it from memory.
    let r = renew(&app, &b, &json!({})).await;
    assert_eq!(r.body["lost"], json!([]), "{:?}", r.body);
    app.shutdown().await;
}

/// A session acquire that takes the lease to the session's expiry answers
/// that expiry, never the time the lease had before: a waited acquire
/// granted late (or its replay, after a store froze) lived only as long as
/// its session, and a holder told the grant's time believed past it while
/// another caller acquired (a Cluster history under a frozen master).
async fn a_replayed_session_acquire_answers_the_sessions_time(backend: Backend) {
    replay_gives_back_the_sessions_expiry(backend, json!({"waitMs": 100})).await;
}

/// The ordinary retry of a session acquire (no wait): a lease that
/// would outlive its session (renewed on its own, or granted after a wait
/// that counted its TTL from the grant) goes back to the session's expiry,
/// and the replay's answer says so.
async fn a_replay_without_a_wait_gives_the_lease_back_its_sessions_expiry(backend: Backend) {
    replay_gives_back_the_sessions_expiry(backend, json!({})).await;
}

/// A session acquire with `body`, its lease renewed alone far past its
/// session, then the acquire again (as after an uncertain answer): the
/// lease goes back to its session's expiry, and the answer says so.
async fn replay_gives_back_the_sessions_expiry(backend: Backend, body: Value) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 30_000).await;
    let d = digest();
    let first = take(&app, &s, &d, "op-1", &body).await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    let lease = TestAttempt {
        token: s.attempt.token.clone(),
        op: "op-1".into(),
    };
    let alone = app.renew(P, &d, &lease, 600_000).await;
    assert_eq!(alone.outcome(), "renewed", "{:?}", alone.body);
    assert!(alone.remaining_ms() > 30_000, "{:?}", alone.body);
    let replay = take(&app, &s, &d, "op-1", &body).await;
    assert_eq!(
        replay.outcome(),
        "replayed_same_operation",
        "{:?}",
        replay.body
    );
    assert!(
        replay.remaining_ms() <= 30_000,
        "the replay ({body}) answered the lease's old time, not its session's: {:?}",
        replay.body
    );
    let held = app.inspect(P, &d, None).await;
    let left = held.body["remainingMs"].as_u64().expect("remainingMs");
    assert!(left <= 30_000, "the lease outlives its session: {left} ms");
    app.shutdown().await;
}

/// A session renew that cannot give a lease the session's new expiry
/// (its `maxHoldMs` bound comes first) lists it `max_hold` and releases
/// it: answered `renewed` with the session's time, its holder would
/// believe past the bound, when the lease ends; and left held off the
/// session, no end would release it.
async fn a_lease_whose_bound_comes_first_is_not_renewed_with_its_session(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let s = session(&app, 30_000).await;
    let (bounded, plain) = (digest(), digest());
    let a = take(&app, &s, &bounded, "op-1", &json!({"maxHoldMs": 5000})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert!(a.remaining_ms() <= 5000, "{:?}", a.body);
    let b = take(&app, &s, &plain, "op-2", &json!({})).await;
    assert_eq!(b.status, StatusCode::CREATED, "{:?}", b.body);
    let renewed = renew(&app, &s, &json!({"ttlMs": 30_000})).await;
    assert_eq!(renewed.status, StatusCode::OK, "{:?}", renewed.body);
    assert_eq!(
        renewed.body["lost"],
        json!([{"purpose": P, "digest": bounded, "reason": "max_hold"}]),
        "{:?}",
        renewed.body
    );
    // Taken off the session: the renew's own answer no longer counts it,
    // and the next renew does not carry it.
    assert_eq!(renewed.body["session"]["leases"], 1, "{:?}", renewed.body);
    let read = app.get(&format!("/sessions/{}", s.id)).await;
    assert_eq!(read.body["session"]["leases"], 1, "{:?}", read.body);
    // Released, not left held to its bound off the session (no end
    // would release it): another caller takes it at once.
    let held = app.inspect(P, &bounded, None).await;
    assert_eq!(held.body["held"], false, "{:?}", held.body);
    let other = app.attempt().await;
    let next = app.acquire(P, &bounded, &other, 5000).await;
    assert_eq!(next.outcome(), "acquired", "{:?}", next.body);
    let carried = app.inspect(P, &plain, None).await;
    let left = carried.body["remainingMs"].as_u64().expect("remainingMs");
    assert!(left > 5000, "{:?}", carried.body);
    app.shutdown().await;
}
