//! Watches (docs/design.md §9): the long-poll of inspect and the event stream,
//! on the embedded store and on real Redis processes (one server, two
//! instances on it, and two instances on a Cluster). Every wait is on a
//! server-side event (an answer, an event line, /readyz), bounded; never
//! a sleep.

#[allow(unused_imports)]
use crate::common;

use std::time::{Duration, Instant};

use common::app::{args, digest, unique, Backend, TestApp, TestAttempt};
use common::redis::{RedisCluster, RedisServer};
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "watched";

/// Bound on any single wait in this file: far above what any step takes.
const BOUND: Duration = Duration::from_secs(10);

both_stores!(
    long_poll_answers_at_once_on_a_stale_version,
    long_poll_answers_each_change,
    long_poll_answers_the_unchanged_state_after_wait_ms,
    long_poll_refuses_bad_parameters_naming_them,
    stream_sends_the_state_then_every_change_in_order,
    stream_resumes_from_last_event_id,
    stream_follows_every_permit_of_a_counting_lease,
    stream_ends_after_max_events_with_events_the_document_lists,
    stream_ends_after_max_ms,
    stream_refuses_bad_bounds_naming_them,
    watches_beyond_the_cap_are_overloaded,
    a_client_that_leaves_leaves_no_watcher_behind,
    shutdown_ends_streams_and_long_polls,
);

// ------------------------------------------------------------------ helpers --

fn lease_url(app: &TestApp, d: &str) -> String {
    format!("{}/leases/{P}/{d}", app.base)
}

/// A long-poll; `attempt` adds the attempt headers.
async fn long_poll(
    http: &reqwest::Client,
    url: &str,
    since: &str,
    wait_ms: u64,
    attempt: Option<&TestAttempt>,
) -> common::app::Reply {
    let mut rb = http.get(format!("{url}?changedSince={since}&waitMs={wait_ms}"));
    if let Some(a) = attempt {
        rb = rb
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op);
    }
    let reply = TestApp::reply(rb.send().await.expect("long-poll")).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.outcome(), "inspected");
    reply
}

async fn version(app: &TestApp, d: &str) -> String {
    let r = app.inspect(P, d, None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["version"].as_str().expect("version").to_owned()
}

async fn acquire_as(app: &TestApp, d: &str, a: &TestAttempt, ttl_ms: u64, holder: &str) {
    let r = app
        .acquire_body(P, d, a, &json!({"ttlMs": ttl_ms, "holder": holder}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

async fn relabel(app: &TestApp, d: &str, a: &TestAttempt, holder: &str) {
    let r = app
        .http
        .patch(lease_url(app, d))
        .header("Lease-Owner-Token", &a.token)
        .header("Lease-Operation-Id", &a.op)
        .json(&json!({"ttlMs": 30_000, "holder": holder}))
        .send()
        .await
        .expect("renew");
    assert_eq!(r.status(), StatusCode::OK);
}

async fn release(app: &TestApp, d: &str, a: &TestAttempt) {
    let r = app.release(P, d, a).await;
    assert_eq!(r.outcome(), "released", "{:?}", r.body);
}

pub(crate) async fn readyz_watchers(app: &TestApp) -> u64 {
    app.get("/readyz").await.body["watchers"]
        .as_u64()
        .expect("watchers in /readyz")
}

/// Polls /readyz until the instance has `n` watchers (bounded).
pub(crate) async fn until_watchers(app: &TestApp, n: u64) {
    let deadline = Instant::now() + BOUND;
    loop {
        let now = readyz_watchers(app).await;
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "watchers stuck at {now}, wanted {n}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One server-sent event (or a comment line, as kind `:`).
#[derive(Debug)]
struct Event {
    kind: String,
    id: String,
    data: Value,
}

/// An open event stream, read chunk by chunk.
struct Stream {
    resp: reqwest::Response,
    buf: String,
}

impl Stream {
    async fn open(app: &TestApp, d: &str, last_event_id: Option<&str>) -> Stream {
        Stream::open_query(app, d, "", last_event_id).await
    }

    /// A stream with a query string (`maxEvents=2`), or none when empty.
    async fn open_query(
        app: &TestApp,
        d: &str,
        query: &str,
        last_event_id: Option<&str>,
    ) -> Stream {
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let mut rb = app.http.get(format!("{}/events{query}", lease_url(app, d)));
        if let Some(id) = last_event_id {
            rb = rb.header("Last-Event-ID", id);
        }
        let resp = rb.send().await.expect("open stream");
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["content-type"].to_str().expect("ascii"),
            "text/event-stream"
        );
        Stream {
            resp,
            buf: String::new(),
        }
    }

    /// The next event or comment; `None` when the stream ended.
    async fn next_any(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut event = Event {
                    kind: "message".into(),
                    id: String::new(),
                    data: Value::Null,
                };
                for line in block.lines() {
                    if line.starts_with(':') {
                        event.kind = ":".into();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event.kind = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        event.id = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        event.data = serde_json::from_str(v).expect("data is JSON");
                    }
                }
                return Some(event);
            }
            let chunk = tokio::time::timeout(BOUND, self.resp.chunk())
                .await
                .expect("stream stalled")
                .expect("stream read");
            let chunk = chunk?;
            self.buf
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8 stream"));
        }
    }

    /// The next event, skipping comment lines.
    async fn next(&mut self) -> Event {
        loop {
            let e = self.next_any().await.expect("stream ended early");
            if e.kind != ":" {
                return e;
            }
        }
    }
}

/// The event's id, its data's version, and the store's version now agree.
async fn check_ids(app: &TestApp, d: &str, e: &Event) {
    assert_eq!(e.data["version"], e.id.as_str(), "{e:?}");
    assert_eq!(version(app, d).await, e.id, "{e:?}");
    assert_eq!(e.data["outcome"], "inspected");
}

// -------------------------------------------------------------- long-poll --

async fn long_poll_answers_at_once_on_a_stale_version(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let v0 = version(&app, &d).await;
    let a = app.attempt().await;
    acquire_as(&app, &d, &a, 30_000, "worker-1").await;
    let started = Instant::now();
    let r = long_poll(&app.http, &lease_url(&app, &d), &v0, 20_000, None).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "waited on a stale version"
    );
    assert_eq!(r.body["held"], true);
    assert_eq!(r.body["holder"], "worker-1");
    assert_ne!(r.body["version"], v0.as_str());
    // With the attempt headers the answer says who holds it.
    let mine = long_poll(&app.http, &lease_url(&app, &d), &v0, 20_000, Some(&a)).await;
    assert_eq!(mine.body["heldBy"], "caller");
}

async fn long_poll_answers_each_change(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let url = lease_url(&app, &d);
    // Each step: a long-poll waits on the current version, then a change answers it.
    let mut since = version(&app, &d).await;
    for step in ["acquire", "relabel", "release"] {
        let (http, url2, since2) = (app.http.clone(), url.clone(), since.clone());
        let waiting =
            tokio::spawn(async move { long_poll(&http, &url2, &since2, 20_000, None).await });
        until_watchers(&app, 1).await;
        let changed_at = Instant::now();
        match step {
            "acquire" => acquire_as(&app, &d, &a, 30_000, "worker-1").await,
            "relabel" => relabel(&app, &d, &a, "worker-2").await,
            _ => release(&app, &d, &a).await,
        }
        let r = tokio::time::timeout(BOUND, waiting)
            .await
            .expect("long-poll answered")
            .expect("task");
        println!(
            "long-poll answered {:?} after the {step} was sent",
            changed_at.elapsed()
        );
        assert_ne!(r.body["version"], since.as_str(), "{step}");
        match step {
            "acquire" => assert_eq!(r.body["holder"], "worker-1"),
            "relabel" => assert_eq!(r.body["holder"], "worker-2"),
            _ => assert_eq!(r.body["held"], false),
        }
        since = r.body["version"].as_str().expect("version").to_owned();
        assert_eq!(
            version(&app, &d).await,
            since,
            "{step}: the answer is the state now"
        );
        until_watchers(&app, 0).await;
    }
}

async fn long_poll_answers_the_unchanged_state_after_wait_ms(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    acquire_as(&app, &d, &a, 30_000, "worker-1").await;
    let v = version(&app, &d).await;
    let started = Instant::now();
    let r = long_poll(&app.http, &lease_url(&app, &d), &v, 300, Some(&a)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}"
    );
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert_eq!(r.body["version"], v.as_str());
    assert_eq!(r.body["held"], true);
    assert_eq!(r.body["heldBy"], "caller");
    let remaining = r.body["remainingMs"].as_u64().expect("remainingMs");
    assert!(remaining <= 29_700, "remainingMs counted down: {remaining}");
    until_watchers(&app, 0).await;
}

async fn long_poll_refuses_bad_parameters_naming_them(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    for (query, field) in [
        ("changedSince=1.0&waitMs=abc", "waitMs"),
        ("changedSince=1.0&waitMs=-1", "waitMs"),
        ("changedSince=1.0&waitMs=30001", "waitMs"),
        ("changedSince=1.0&waitMs=5&waitMs=6", "waitMs"),
        ("changedSince=&waitMs=5", "changedSince"),
        ("changedSince=a%20b&waitMs=5", "changedSince"),
        ("changedSince=%ZZ&waitMs=5", "changedSince"),
        // Not a version: refused, not taken as stale (issue 22).
        ("changedSince=abc&waitMs=5", "changedSince"),
    ] {
        let r = app.get(&format!("/leases/{P}/{d}?{query}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {:?}", r.body);
        assert_eq!(r.content_type(), "application/problem+json");
        assert_eq!(r.outcome(), "invalid_request", "{query}");
        assert_eq!(r.body["errors"][0]["field"], field, "{query}: {:?}", r.body);
    }
    // A version without a wait, or a zero wait: a plain inspect.
    for query in ["changedSince=1.0", "changedSince=1.0&waitMs=0", "waitMs=0"] {
        let r = app.get(&format!("/leases/{P}/{d}?{query}")).await;
        assert_eq!(r.status, StatusCode::OK, "{query}: {:?}", r.body);
    }
}

// ------------------------------------------------------------------ stream --

async fn stream_sends_the_state_then_every_change_in_order(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let mut s = Stream::open(&app, &d, None).await;
    let state = s.next().await;
    assert_eq!(state.kind, "state");
    assert_eq!(state.data["held"], false);
    check_ids(&app, &d, &state).await;

    acquire_as(&app, &d, &a, 30_000, "worker-1").await;
    let e = s.next().await;
    assert_eq!(
        (e.kind.as_str(), &e.data["holder"]),
        ("acquired", &json!("worker-1"))
    );
    check_ids(&app, &d, &e).await;

    relabel(&app, &d, &a, "worker-2").await;
    let e = s.next().await;
    assert_eq!(
        (e.kind.as_str(), &e.data["holder"]),
        ("holder_changed", &json!("worker-2"))
    );
    check_ids(&app, &d, &e).await;

    // A renewal alone changes nothing a watcher hears of.
    let r = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(r.outcome(), "renewed");

    release(&app, &d, &a).await;
    let e = s.next().await;
    assert_eq!(
        (e.kind.as_str(), &e.data["held"]),
        ("released", &json!(false))
    );
    check_ids(&app, &d, &e).await;

    // A short lease: acquired, then expired at its TTL without anyone's help.
    let b = app.attempt().await;
    let acquired_at = Instant::now();
    acquire_as(&app, &d, &b, 500, "worker-3").await;
    let e = s.next().await;
    assert_eq!(e.kind, "acquired");
    let e = s.next().await;
    let after = acquired_at.elapsed();
    assert_eq!(
        (e.kind.as_str(), &e.data["held"]),
        ("expired", &json!(false))
    );
    assert!(
        after >= Duration::from_millis(500),
        "expired after {after:?}"
    );
    println!("expired event {after:?} after a 500 ms acquire was sent");
    check_ids(&app, &d, &e).await;
}

async fn stream_follows_every_permit_of_a_counting_lease(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let mut s = Stream::open(&app, &d, None).await;
    assert_eq!(s.next().await.kind, "state");
    for (who, n) in [(&a, 1), (&b, 2)] {
        let r = app
            .acquire_body(P, &d, who, &json!({"ttlMs": 30_000, "limit": 2}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        let e = s.next().await;
        assert_eq!(
            (e.kind.as_str(), &e.data["holders"]),
            ("acquired", &json!(n))
        );
        check_ids(&app, &d, &e).await;
    }
    release(&app, &d, &a).await;
    let e = s.next().await;
    assert_eq!(
        (e.kind.as_str(), &e.data["holders"]),
        ("released", &json!(1))
    );
    check_ids(&app, &d, &e).await;
    release(&app, &d, &b).await;
    let e = s.next().await;
    assert_eq!(
        (e.kind.as_str(), &e.data["held"]),
        ("released", &json!(false))
    );
    check_ids(&app, &d, &e).await;
}

async fn stream_resumes_from_last_event_id(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let mut s = Stream::open(&app, &d, None).await;
    let state = s.next().await;
    drop(s);
    // Nothing changed meanwhile: no `state`, the next event is the change.
    let mut s = Stream::open(&app, &d, Some(&state.id)).await;
    acquire_as(&app, &d, &a, 30_000, "worker-1").await;
    let e = s.next().await;
    assert_eq!(e.kind, "acquired", "{e:?}");
    drop(s);
    // Something changed since: a `state` with the current version first.
    let mut s = Stream::open(&app, &d, Some(&state.id)).await;
    let e = s.next().await;
    assert_eq!(e.kind, "state", "{e:?}");
    assert_eq!(e.data["held"], true);
    check_ids(&app, &d, &e).await;
}

/// The event names the document lists for the stream, and the members
/// every event's `data` must carry.
async fn documented_events(app: &TestApp) -> (Vec<String>, Vec<String>) {
    let doc = app.get("/openapi.json").await.body;
    let op = &doc["paths"]["/leases/{purpose}/{digest}/events"]["get"];
    assert_eq!(
        op["responses"]["200"]["content"]["text/event-stream"]["schema"]["$ref"],
        "#/components/schemas/LeaseEvent"
    );
    let names = doc["components"]["schemas"]["LeaseEvent"]["oneOf"]
        .as_array()
        .expect("one schema per event")
        .iter()
        .map(|e| {
            let data = &e["properties"]["data"];
            assert_eq!(data["contentMediaType"], "application/json", "{e}");
            assert_eq!(
                data["contentSchema"]["$ref"],
                "#/components/schemas/Inspected"
            );
            e["properties"]["event"]["enum"][0]
                .as_str()
                .expect("name")
                .to_owned()
        })
        .collect();
    let required = doc["components"]["schemas"]["Inspected"]["required"]
        .as_array()
        .expect("required")
        .iter()
        .map(|m| m.as_str().expect("member").to_owned())
        .collect();
    (names, required)
}

async fn stream_ends_after_max_events_with_events_the_document_lists(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let (names, required) = documented_events(&app).await;
    let d = digest();
    let a = app.attempt().await;
    let mut s = Stream::open_query(&app, &d, "maxEvents=2", None).await;
    let state = s.next().await;
    assert_eq!(state.kind, "state");
    acquire_as(&app, &d, &a, 30_000, "worker-1").await;
    let acquired = s.next().await;
    assert_eq!(acquired.kind, "acquired");
    // A third change: never sent, the body has ended after two events.
    relabel(&app, &d, &a, "worker-2").await;
    while let Some(e) = s.next_any().await {
        assert_eq!(e.kind, ":", "an event after maxEvents=2: {e:?}");
    }
    for e in [&state, &acquired] {
        assert!(names.contains(&e.kind), "{} not in {names:?}", e.kind);
        for member in &required {
            assert!(e.data.get(member).is_some(), "{member} missing: {e:?}");
        }
    }
    until_watchers(&app, 0).await;
}

async fn stream_ends_after_max_ms(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let opened = Instant::now();
    let mut s = Stream::open_query(&app, &d, "maxMs=300&maxEvents=5", None).await;
    assert_eq!(s.next().await.kind, "state");
    while let Some(e) = s.next_any().await {
        assert_eq!(e.kind, ":", "no change, no event: {e:?}");
    }
    let after = opened.elapsed();
    assert!(after >= Duration::from_millis(300), "ended after {after:?}");
    println!("a maxMs=300 stream ended after {after:?}");
    until_watchers(&app, 0).await;
}

async fn stream_refuses_bad_bounds_naming_them(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let url = format!("{}/events", lease_url(&app, &digest()));
    let long_id = "1".repeat(65);
    for (query, last_event_id, field) in [
        ("maxEvents=0", None, "maxEvents"),
        ("maxEvents=10001", None, "maxEvents"),
        ("maxEvents=two", None, "maxEvents"),
        ("maxEvents=1&maxEvents=2", None, "maxEvents"),
        ("maxMs=0", None, "maxMs"),
        ("maxMs=3600001", None, "maxMs"),
        ("maxMs=-5", None, "maxMs"),
        ("", Some(long_id.as_str()), "Last-Event-ID"),
    ] {
        let mut rb = app.http.get(format!("{url}?{query}"));
        if let Some(id) = last_event_id {
            rb = rb.header("Last-Event-ID", id);
        }
        let r = TestApp::reply(rb.send().await.expect("send")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {:?}", r.body);
        assert_eq!(r.content_type(), "application/problem+json");
        assert_eq!(r.outcome(), "invalid_request", "{query}");
        assert_eq!(r.body["errors"][0]["field"], field, "{query}: {:?}", r.body);
    }
    // No watcher was registered for a refused stream.
    assert_eq!(readyz_watchers(&app).await, 0);
}

async fn watches_beyond_the_cap_are_overloaded(backend: Backend) {
    let app = TestApp::spawn_with(args(&backend, &["--max-watchers", "2"])).await;
    let d = digest();
    let one = Stream::open(&app, &d, None).await;
    let _two = Stream::open(&app, &digest(), None).await;
    let refused = TestApp::reply(
        app.http
            .get(format!("{}/events", lease_url(&app, &d)))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        refused.body
    );
    assert_eq!(refused.outcome(), "overloaded");
    assert!(refused.headers.contains_key("retry-after"));
    let v = version(&app, &d).await;
    let r = app
        .get(&format!("/leases/{P}/{d}?changedSince={v}&waitMs=5000"))
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(r.outcome(), "overloaded");
    // A plain inspect is no watch.
    assert_eq!(app.inspect(P, &d, None).await.status, StatusCode::OK);
    drop(one);
    until_watchers(&app, 1).await;
    let mut again = Stream::open(&app, &d, None).await;
    assert_eq!(again.next().await.kind, "state");
}

async fn a_client_that_leaves_leaves_no_watcher_behind(backend: Backend) {
    let app = TestApp::spawn_with(args(&backend, &["--sse-keepalive-ms", "50"])).await;
    let d = digest();
    let mut s = Stream::open(&app, &d, None).await;
    assert_eq!(s.next().await.kind, "state");
    // Keep-alive comments flow while nothing changes.
    let mut comments = 0;
    while comments < 2 {
        let e = s.next_any().await.expect("open");
        assert_eq!(e.kind, ":", "{e:?}");
        comments += 1;
    }
    assert_eq!(readyz_watchers(&app).await, 1);
    drop(s);
    until_watchers(&app, 0).await;
    // A long-poll given up by its client leaves nothing either.
    let v = version(&app, &d).await;
    let (http, url) = (app.http.clone(), lease_url(&app, &d));
    let poll = tokio::spawn(async move { long_poll(&http, &url, &v, 20_000, None).await });
    until_watchers(&app, 1).await;
    poll.abort();
    until_watchers(&app, 0).await;
}

async fn shutdown_ends_streams_and_long_polls(backend: Backend) {
    let mut app = TestApp::spawn(&backend).await;
    let d = digest();
    let mut s = Stream::open(&app, &d, None).await;
    let state = s.next().await;
    let (http, url, v) = (app.http.clone(), lease_url(&app, &d), state.id.clone());
    let poll = tokio::spawn(async move { long_poll(&http, &url, &v, 20_000, None).await });
    until_watchers(&app, 2).await;
    let started = Instant::now();
    app.begin_shutdown();
    // The stream ends cleanly (no error, no further event).
    assert!(s.next_any().await.is_none(), "the stream ended");
    let r = tokio::time::timeout(BOUND, poll)
        .await
        .expect("answered")
        .expect("task");
    assert_eq!(r.body["version"], state.id.as_str(), "the current state");
    tokio::time::timeout(BOUND, app.finished())
        .await
        .expect("shutdown did not hang on open watches");
    println!(
        "shutdown with a stream and a long-poll open took {:?}",
        started.elapsed()
    );
}

// ------------------------------------------------------ across instances --

/// A watcher on `b` hears an acquire and a release made on `a`; returns
/// how long each took from sending the change.
async fn heard_across(a: &TestApp, b: &TestApp) -> (Duration, Duration) {
    let d = digest();
    let mut s = Stream::open(b, &d, None).await;
    assert_eq!(s.next().await.kind, "state");
    let who = a.attempt().await;
    let sent = Instant::now();
    acquire_as(a, &d, &who, 30_000, "on-a").await;
    let e = s.next().await;
    let acquired = sent.elapsed();
    assert_eq!(
        (e.kind.as_str(), &e.data["holder"]),
        ("acquired", &json!("on-a"))
    );
    let sent = Instant::now();
    release(a, &d, &who).await;
    let e = s.next().await;
    let released = sent.elapsed();
    assert_eq!(e.kind, "released");
    assert_eq!(e.id, version(a, &d).await);
    (acquired, released)
}

fn check_latency(topology: &str, (acquired, released): (Duration, Duration)) {
    println!(
        "{topology}: a watcher on B heard A's acquire {acquired:?} and release {released:?} after it was sent"
    );
    assert!(acquired < Duration::from_millis(500), "{acquired:?}");
    assert!(released < Duration::from_millis(500), "{released:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_watcher_hears_changes_made_on_another_instance() {
    let server = RedisServer::start();
    let backend = Backend::Redis(server.url());
    let ns = unique("w");
    let a = TestApp::spawn_with(args(&backend, &["--namespace", &ns])).await;
    let b = TestApp::spawn_with(args(&backend, &["--namespace", &ns])).await;
    // Warm-up round (connections, script loading), then the measured ones.
    heard_across(&a, &b).await;
    for _ in 0..3 {
        check_latency("standalone", heard_across(&a, &b).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_watcher_hears_changes_made_on_another_instance() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let seeds = cluster.seed_urls().join(",");
    let ns = unique("w");
    let flags = [
        "--namespace",
        ns.as_str(),
        "--redis-cluster-nodes",
        seeds.as_str(),
    ];
    let a = TestApp::spawn_with(args(&Backend::Memory, &flags)).await;
    let b = TestApp::spawn_with(args(&Backend::Memory, &flags)).await;
    heard_across(&a, &b).await;
    for _ in 0..3 {
        check_latency("cluster", heard_across(&a, &b).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_scope_streams_and_long_polls_like_inspect() {
    let dir = std::env::temp_dir().join(unique("leasehold-keys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keys");
    let key = unique("watch-key-0123456789-");
    std::fs::write(&file, format!("{key} {P}\n")).expect("write keys");
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let d = digest();
    let bearer = format!("Bearer {key}");
    for (purpose, auth, status) in [
        (P, None, StatusCode::UNAUTHORIZED),
        ("elsewhere", Some(&bearer), StatusCode::FORBIDDEN),
    ] {
        for path in [
            format!("/leases/{purpose}/{d}/events"),
            format!("/leases/{purpose}/{d}?changedSince=0.0&waitMs=5000"),
        ] {
            let mut rb = app.http.get(format!("{}{path}", app.base));
            if let Some(auth) = auth {
                rb = rb.header("Authorization", auth);
            }
            let r = TestApp::reply(rb.send().await.expect("send")).await;
            assert_eq!(r.status, status, "{path}: {:?}", r.body);
            assert_eq!(r.content_type(), "application/problem+json");
        }
    }
    let r = app
        .http
        .get(format!("{}/leases/{P}/{d}/events", app.base))
        .header("Authorization", &bearer)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(readyz_watchers(&app).await, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
