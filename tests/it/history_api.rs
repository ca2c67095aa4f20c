//! `GET /leases/{purpose}/{digest}/history` (issue 24, item 5): the newest
//! changes of a resource, on the embedded store and a real `redis-server`.
//! (`history.rs` is the checked-history test of the lease contract; this
//! is the history the service keeps and answers.)
//!
//! - acquire, holder change and release are recorded newest first, with
//!   the permit's fencing token, holder label and the version inspect
//!   answers after the change;
//! - an expiry is written by the next call that finds it: with the
//!   permit's expiry as its time when the store still held the permit,
//!   marked `noticed` when Redis had already dropped it;
//! - a lock-delay is recorded after the expiry that started it, once;
//! - `limit`, the per-resource bound (`--history-entries`), bad limits and
//!   paths (400 naming the parameter), a resource never held;
//! - API keys: a read key may read the history, a key of another purpose
//!   may not.

use crate::common::app::{args, digest, unique, Backend, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "invoice-export";

both_stores!(
    acquire_relabel_and_release_are_recorded_newest_first,
    an_expiry_is_written_by_the_next_call_that_finds_it,
    an_expiry_beside_a_live_permit_keeps_its_own_time,
    a_holder_left_after_a_release_is_closed_when_it_lapses,
    a_lock_delay_follows_the_expiry_that_started_it,
    limit_and_the_bound_cut_the_history,
    bad_limits_and_paths_are_refused_by_name,
    a_read_key_reads_the_history_and_another_purpose_may_not,
    a_break_is_recorded_with_its_reason_and_key_name,
);

async fn history(app: &TestApp, d: &str, query: &str) -> Reply {
    app.get(&format!("/leases/{P}/{d}/history{query}")).await
}

/// The entries of a `history` answer.
fn entries(r: &Reply) -> Vec<Value> {
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_eq!(r.outcome(), "history", "{:#}", r.body);
    r.body["entries"].as_array().expect("entries").clone()
}

/// `event:fencingToken` of each entry, newest first.
fn kinds(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["event"].as_str().expect("event"),
                e["fencingToken"]
            )
        })
        .collect()
}

fn epoch_ms(v: &Value) -> u64 {
    let text = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    leasehold::domain::StoreTime::parse(text)
        .unwrap_or_else(|| panic!("not an RFC 3339 ms time: {text}"))
        .0
}

/// Waits (a long-poll, not a sleep) until the version moves from `version`.
async fn until_changed(app: &TestApp, d: &str, version: &str) -> Reply {
    let r = app
        .get(&format!(
            "/leases/{P}/{d}?changedSince={version}&waitMs=10000"
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_ne!(r.body["version"], version, "no change within 10 s");
    r
}

async fn acquire_relabel_and_release_are_recorded_newest_first(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    assert!(entries(&history(&app, &d, "").await).is_empty());
    let a = app.attempt().await;
    let got = app
        .acquire_body(
            P,
            &d,
            &a,
            &json!({"ttlMs": 30_000, "holder": "pod-a | east"}),
        )
        .await;
    assert_eq!(got.outcome(), "acquired", "{:#}", got.body);
    let token = got.fencing_token();
    let after_acquire = app.inspect(P, &d, None).await.body["version"].clone();
    let renew = app
        .http
        .patch(format!("{}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &a.token)
        .header("Lease-Operation-Id", &a.op)
        .json(&json!({"ttlMs": 30_000, "holder": "pod-b"}))
        .send()
        .await
        .expect("send");
    assert_eq!(renew.status(), StatusCode::OK);
    let after_relabel = app.inspect(P, &d, None).await.body["version"].clone();
    // A renew that keeps the label is no change.
    assert_eq!(app.renew(P, &d, &a, 30_000).await.outcome(), "renewed");
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let after_release = app.inspect(P, &d, None).await.body["version"].clone();

    let e = entries(&history(&app, &d, "").await);
    assert_eq!(
        kinds(&e),
        [
            format!("released:{token}"),
            format!("holder_changed:{token}"),
            format!("acquired:{token}")
        ]
    );
    assert_eq!(e[2]["holder"], "pod-a | east");
    assert_eq!(e[1]["holder"], "pod-b");
    assert_eq!(e[0]["holder"], "pod-b");
    assert_eq!(e[2]["version"], after_acquire);
    assert_eq!(e[1]["version"], after_relabel);
    assert_eq!(e[0]["version"], after_release);
    assert_eq!(
        epoch_ms(&e[2]["at"]),
        epoch_ms(&got.body["lease"]["acquiredAt"])
    );
    assert!(epoch_ms(&e[0]["at"]) >= epoch_ms(&e[1]["at"]));
    assert!(epoch_ms(&e[1]["at"]) >= epoch_ms(&e[2]["at"]));
    for entry in &e {
        assert!(entry.get("noticed").is_none(), "{entry}");
        let text = entry.to_string();
        assert!(!text.contains(&a.token) && !text.contains(&a.op), "{text}");
    }
}

async fn an_expiry_is_written_by_the_next_call_that_finds_it(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let first = app.acquire(P, &d, &a, 100).await;
    assert_eq!(first.outcome(), "acquired");
    // Waits server-side through the expiry (an event, no sleep).
    let second = app.acquire_wait(P, &d, &b, 30_000, 5_000).await;
    assert_eq!(second.outcome(), "acquired", "{:#}", second.body);
    let (ta, tb) = (first.fencing_token(), second.fencing_token());
    let e = entries(&history(&app, &d, "").await);
    assert_eq!(
        kinds(&e),
        [
            format!("acquired:{tb}"),
            format!("expired:{ta}"),
            format!("acquired:{ta}")
        ]
    );
    let acquired_at = epoch_ms(&first.body["lease"]["acquiredAt"]);
    let expired_at = epoch_ms(&e[1]["at"]);
    assert!(
        expired_at >= acquired_at + 100,
        "{expired_at} vs {acquired_at}"
    );
    assert!(expired_at <= epoch_ms(&e[0]["at"]));
    match backend {
        // Redis dropped the plain record with its TTL: the time is when
        // the next acquire found it gone.
        Backend::Redis(_) => assert_eq!(e[1]["noticed"], true, "{:#}", e[1]),
        // The embedded store still holds the permit when it looks.
        Backend::Memory => {
            assert!(e[1].get("noticed").is_none(), "{:#}", e[1]);
            assert!(
                expired_at <= acquired_at + 150,
                "{expired_at} vs {acquired_at}"
            );
        }
    }
    assert_eq!(
        e[1]["version"],
        format!(
            "{}.0",
            e[2]["version"]
                .as_str()
                .expect("v")
                .split('.')
                .next()
                .expect("changes")
        )
    );
}

async fn an_expiry_beside_a_live_permit_keeps_its_own_time(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let short = app
        .acquire_body(P, &d, &a, &json!({"ttlMs": 100, "limit": 2}))
        .await;
    assert_eq!(short.outcome(), "acquired", "{:#}", short.body);
    let long = app
        .acquire_body(P, &d, &b, &json!({"ttlMs": 30_000, "limit": 2}))
        .await;
    assert_eq!(long.outcome(), "acquired", "{:#}", long.body);
    let held = app.inspect(P, &d, None).await;
    assert_eq!(held.body["holders"], 2, "{:#}", held.body);
    let version = held.body["version"].as_str().expect("version").to_owned();
    let after = until_changed(&app, &d, &version).await;
    assert_eq!(after.body["holders"], 1, "{:#}", after.body);
    // The release reads the record, and the expired permit in it.
    assert_eq!(app.release(P, &d, &b).await.outcome(), "released");
    let (ta, tb) = (short.fencing_token(), long.fencing_token());
    let e = entries(&history(&app, &d, "").await);
    let k = kinds(&e);
    assert_eq!(
        k[2..],
        [format!("acquired:{tb}"), format!("acquired:{ta}")],
        "{k:?}"
    );
    let mut top = k[..2].to_vec();
    top.sort();
    assert_eq!(
        top,
        [format!("expired:{ta}"), format!("released:{tb}")],
        "{k:?}"
    );
    let expired = e.iter().find(|x| x["event"] == "expired").expect("expired");
    assert!(expired.get("noticed").is_none(), "{expired:#}");
    let acquired_at = epoch_ms(&short.body["lease"]["acquiredAt"]);
    // The permit's own expiry (the embedded store converts its monotonic
    // clock to wall time: within a millisecond).
    assert!(
        epoch_ms(&expired["at"]).abs_diff(acquired_at + 100) <= 1,
        "{expired:#}"
    );
}

async fn a_holder_left_after_a_release_is_closed_when_it_lapses(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b, c) = (
        app.attempt().await,
        app.attempt().await,
        app.attempt().await,
    );
    let long = app
        .acquire_body(P, &d, &a, &json!({"ttlMs": 30_000, "limit": 2}))
        .await;
    assert_eq!(long.outcome(), "acquired", "{:#}", long.body);
    let short = app
        .acquire_body(P, &d, &b, &json!({"ttlMs": 300, "limit": 2}))
        .await;
    assert_eq!(short.outcome(), "acquired", "{:#}", short.body);
    // The newest entry is now a release that left one holder live.
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let version = app.inspect(P, &d, None).await.body["version"]
        .as_str()
        .expect("version")
        .to_owned();
    let free = until_changed(&app, &d, &version).await;
    assert_eq!(free.body["held"], false, "{:#}", free.body);
    let next = app.acquire(P, &d, &c, 30_000).await;
    assert_eq!(next.outcome(), "acquired", "{:#}", next.body);
    let (ta, tb, tc) = (
        long.fencing_token(),
        short.fencing_token(),
        next.fencing_token(),
    );
    let e = entries(&history(&app, &d, "").await);
    assert_eq!(
        kinds(&e),
        [
            format!("acquired:{tc}"),
            format!("expired:{tb}"),
            format!("released:{ta}"),
            format!("acquired:{tb}"),
            format!("acquired:{ta}")
        ],
        "{e:#?}"
    );
}

async fn a_lock_delay_follows_the_expiry_that_started_it(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let first = app
        .acquire_body(P, &d, &a, &json!({"ttlMs": 100, "lockDelayMs": 300}))
        .await;
    assert_eq!(first.outcome(), "acquired", "{:#}", first.body);
    // The waiter is refused by the delay at least once, then gets it.
    let second = app.acquire_wait(P, &d, &b, 30_000, 5_000).await;
    assert_eq!(second.outcome(), "acquired", "{:#}", second.body);
    let (ta, tb) = (first.fencing_token(), second.fencing_token());
    let e = entries(&history(&app, &d, "").await);
    assert_eq!(
        kinds(&e),
        [
            format!("acquired:{tb}"),
            format!("lock_delay:{ta}"),
            format!("expired:{ta}"),
            format!("acquired:{ta}")
        ],
        "{e:#?}"
    );
    assert_eq!(e[1]["lockDelayMs"], 300);
    let expiry = epoch_ms(&first.body["lease"]["acquiredAt"]) + 100;
    assert!(epoch_ms(&e[2]["at"]).abs_diff(expiry) <= 1, "{e:#?}");
    assert_eq!(e[1]["at"], e[2]["at"]);
    assert!(epoch_ms(&e[0]["at"]) >= expiry + 300);
}

async fn limit_and_the_bound_cut_the_history(backend: Backend) {
    let app = TestApp::spawn_with(args(&backend, &["--history-entries", "5"])).await;
    let d = digest();
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let a = app.attempt().await;
        let got = app.acquire(P, &d, &a, 30_000).await;
        assert_eq!(got.outcome(), "acquired");
        tokens.push(got.fencing_token());
        assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    }
    // Eight changes, five kept: the newest.
    let newest = |n: usize| -> Vec<String> {
        tokens
            .iter()
            .rev()
            .flat_map(|t| [format!("released:{t}"), format!("acquired:{t}")])
            .take(n)
            .collect()
    };
    assert_eq!(kinds(&entries(&history(&app, &d, "").await)), newest(5));
    assert_eq!(
        kinds(&entries(&history(&app, &d, "?limit=5").await)),
        newest(5)
    );
    assert_eq!(
        kinds(&entries(&history(&app, &d, "?limit=3").await)),
        newest(3)
    );
    assert_eq!(
        kinds(&entries(&history(&app, &d, "?limit=1").await)),
        newest(1)
    );
    let over = history(&app, &d, "?limit=6").await;
    assert_eq!(over.status, StatusCode::BAD_REQUEST, "{:#}", over.body);
    assert!(
        over.body.to_string().contains("from 1 to 5"),
        "{:#}",
        over.body
    );
}

async fn bad_limits_and_paths_are_refused_by_name(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    for query in [
        "?limit=0",
        "?limit=",
        "?limit=x",
        "?limit=-1",
        "?limit=1.5",
        "?limit=101",
        "?limit=1&limit=2",
        "?limit=%ff",
    ] {
        let r = history(&app, &d, query).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {:#}", r.body);
        assert_eq!(r.content_type(), "application/problem+json", "{query}");
        assert_eq!(r.outcome(), "invalid_request", "{query}");
        assert_eq!(
            r.body["errors"][0]["field"], "limit",
            "{query}: {:#}",
            r.body
        );
    }
    let r = app.get(&format!("/leases/{P}/not-a-digest/history")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:#}", r.body);
    assert_eq!(r.body["errors"][0]["field"], "digest", "{:#}", r.body);
    let r = app.get(&format!("/leases/Bad_Purpose/{d}/history")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:#}", r.body);
    assert_eq!(r.body["errors"][0]["field"], "purpose", "{:#}", r.body);
    // Other parameters are ignored; a resource never held has no entries.
    assert!(entries(&history(&app, &d, "?other=1&limit=100").await).is_empty());
}

async fn a_read_key_reads_the_history_and_another_purpose_may_not(backend: Backend) {
    let dir = std::env::temp_dir().join(unique("leasehold-history-keys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let (reader, writer, stranger) = (
        unique("reader-key-0123456789-"),
        unique("writer-key-0123456789-"),
        unique("stranger-key-0123456789-"),
    );
    let file = dir.join("keys");
    std::fs::write(
        &file,
        format!("{reader} {P} read\n{writer} {P} write\n{stranger} report read\n"),
    )
    .expect("keys");
    let app = TestApp::spawn_with(args(
        &backend,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let d = digest();
    let ask = |key: &str| {
        app.http
            .get(format!("{}/leases/{P}/{d}/history", app.base))
            .header("authorization", format!("Bearer {key}"))
            .send()
    };
    let a = {
        let r = app
            .http
            .post(format!("{}/attempts", app.base))
            .header("authorization", format!("Bearer {writer}"))
            .json(&json!({"operationId": unique("op-")}))
            .send()
            .await
            .expect("send");
        TestApp::reply(r).await.body
    };
    let put = app
        .http
        .put(format!("{}/leases/{P}/{d}", app.base))
        .header("authorization", format!("Bearer {writer}"))
        .header(
            "Lease-Owner-Token",
            a["ownerToken"].as_str().expect("token"),
        )
        .header("Lease-Operation-Id", a["operationId"].as_str().expect("op"))
        .json(&json!({"ttlMs": 30_000}))
        .send()
        .await
        .expect("send");
    assert_eq!(put.status(), StatusCode::CREATED);
    for key in [&reader, &writer] {
        let r = TestApp::reply(ask(key).await.expect("send")).await;
        assert_eq!(kinds(&entries(&r)).len(), 1, "{:#}", r.body);
    }
    let r = TestApp::reply(ask(&stranger).await.expect("send")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:#}", r.body);
    assert_eq!(r.outcome(), "forbidden");
    assert!(!r.body.to_string().contains(&stranger));
    let r = TestApp::reply(
        app.http
            .get(format!("{}/leases/{P}/{d}/history", app.base))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:#}", r.body);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `leasehold history` as a real process against a real service on Redis:
/// JSON lines and a table, `--limit`, and its exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_the_history_as_json_lines_and_a_table() {
    use crate::common::cli::run;
    use leasehold::domain::ResourceDigest;
    let redis = crate::common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(redis.url())).await;
    let raw = unique("order-");
    let d = ResourceDigest::of_raw_id(&raw);
    let a = app.attempt().await;
    let got = app
        .acquire_body(
            "export",
            d.as_str(),
            &a,
            &json!({"ttlMs": 30_000, "holder": "pod-7"}),
        )
        .await;
    assert_eq!(got.outcome(), "acquired");
    assert_eq!(
        app.release("export", d.as_str(), &a).await.outcome(),
        "released"
    );
    let token = got.fencing_token();

    let out = run(&["history", "--url", &app.base, "--json", "export", &raw]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(
        kinds(&lines),
        [format!("released:{token}"), format!("acquired:{token}")]
    );
    assert_eq!(lines[1]["holder"], "pod-7");
    assert!(!out.stdout.contains(&a.token), "never the owner token");

    let out = run(&[
        "history", "--url", &app.base, "--limit", "1", "export", &raw,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let rows: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(rows.len(), 2, "{}", out.stdout);
    assert!(
        rows[0].starts_with("AT") && rows[0].contains("FENCING TOKEN"),
        "{}",
        out.stdout
    );
    assert!(
        rows[1].contains("released") && rows[1].contains(&token.to_string()),
        "{}",
        out.stdout
    );
    assert!(rows[1].ends_with("pod-7"), "{}", out.stdout);

    // Never held: nothing printed, success.
    let out = run(&[
        "history",
        "--url",
        &app.base,
        "--json",
        "export",
        "never-held",
    ])
    .await;
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, ""),
        "stderr: {}",
        out.stderr
    );
    // Over what the service keeps: the service's 400, a usage error.
    let out = run(&[
        "history", "--url", &app.base, "--limit", "101", "export", &raw,
    ])
    .await;
    assert_eq!(out.code(), 64, "stderr: {}", out.stderr);
    assert!(out.stderr.contains("limit"), "{}", out.stderr);
    for bad in [
        vec!["history", "--url", &app.base, "--limit", "0", "export", "x"],
        vec!["history", "--url", &app.base, "Not-A-Purpose", "x"],
        vec!["history", "--url", &app.base, "export"],
    ] {
        let out = run(&bad).await;
        assert_eq!(out.code(), 64, "{bad:?}; stderr: {}", out.stderr);
    }
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        l.local_addr().expect("addr")
    };
    let out = run(&[
        "history",
        "--url",
        &format!("http://{closed}"),
        "export",
        "x",
    ])
    .await;
    assert_eq!(out.code(), 69, "stderr: {}", out.stderr);
    drop(redis);
}

async fn a_break_is_recorded_with_its_reason_and_key_name(backend: Backend) {
    let dir = std::env::temp_dir().join(unique("leasehold-history-break-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let admin = unique("oncall-key-0123456789-");
    let file = dir.join("keys");
    std::fs::write(&file, format!("{admin} {P} admin name=oncall\n")).expect("keys");
    let app = TestApp::spawn_with(args(
        &backend,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let d = digest();
    let bearer = format!("Bearer {admin}");
    let mut tokens = Vec::new();
    for holder in ["pod-1", "pod-2"] {
        let a = TestApp::reply(
            app.http
                .post(format!("{}/attempts", app.base))
                .header("authorization", &bearer)
                .json(&json!({"operationId": unique("op-")}))
                .send()
                .await
                .expect("send"),
        )
        .await
        .body;
        let got = TestApp::reply(
            app.http
                .put(format!("{}/leases/{P}/{d}", app.base))
                .header("authorization", &bearer)
                .header(
                    "Lease-Owner-Token",
                    a["ownerToken"].as_str().expect("token"),
                )
                .header("Lease-Operation-Id", a["operationId"].as_str().expect("op"))
                .json(&json!({"ttlMs": 30_000, "limit": 2, "holder": holder}))
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(got.outcome(), "acquired", "{:#}", got.body);
        tokens.push(got.fencing_token());
    }
    let broke = TestApp::reply(
        app.http
            .post(format!("{}/leases/{P}/{d}/break", app.base))
            .header("authorization", &bearer)
            .json(&json!({"reason": "stuck | since the deploy"}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(broke.outcome(), "broken", "{:#}", broke.body);
    let after = TestApp::reply(
        app.http
            .get(format!("{}/leases/{P}/{d}", app.base))
            .header("authorization", &bearer)
            .send()
            .await
            .expect("send"),
    )
    .await;
    let r = TestApp::reply(
        app.http
            .get(format!("{}/leases/{P}/{d}/history", app.base))
            .header("authorization", &bearer)
            .send()
            .await
            .expect("send"),
    )
    .await;
    let e = entries(&r);
    let mut top = kinds(&e[..2]);
    top.sort();
    let mut want = vec![
        format!("revoked:{}", tokens[0]),
        format!("revoked:{}", tokens[1]),
    ];
    want.sort();
    assert_eq!(top, want, "{e:#?}");
    assert_eq!(
        kinds(&e[2..]),
        [
            format!("acquired:{}", tokens[1]),
            format!("acquired:{}", tokens[0])
        ]
    );
    for (entry, holder) in e[..2].iter().map(|x| {
        let h = if x["fencingToken"] == tokens[0] {
            "pod-1"
        } else {
            "pod-2"
        };
        (x, h)
    }) {
        assert_eq!(entry["reason"], "stuck | since the deploy", "{entry:#}");
        assert_eq!(entry["keyName"], "oncall", "{entry:#}");
        assert_eq!(entry["holder"], holder, "{entry:#}");
        assert_eq!(entry["version"], after.body["version"], "{entry:#}");
        assert!(!entry.to_string().contains(&admin), "never the key");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
