//! Operator control (issue 24, docs/design.md §17): break, on the embedded
//! store and on a real `redis-server`. A break removes every permit or the
//! one with a fencing token, needs `admin`, wakes waiters, starts no
//! lock-delay, tells the broken holder (`lost`/`revoked` on renew,
//! `already_absent`/`revoked` on release), its watchers (`revoked`,
//! with the reason and the key's name) and the history (a `revoked`
//! entry per broken permit).

use std::time::Duration;

use crate::common::app::{args, digest, unique, Backend, Reply, TestApp, TestAttempt};
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "invoice-export";

both_stores!(
    break_removes_every_permit_and_then_finds_nothing,
    break_by_fencing_token_removes_that_permit_only,
    broken_holder_hears_revoked_on_renew_and_release,
    break_bodies_are_validated,
    break_needs_the_admin_scope,
    break_wakes_a_waiter_and_starts_no_lock_delay,
    watchers_get_revoked_with_reason_and_key_name,
    each_broken_permit_is_a_revoked_history_entry,
);

/// `POST …/break` with `body` (`None`: no body at all) and `key`.
async fn break_lease(app: &TestApp, d: &str, body: Option<Value>, key: Option<&str>) -> Reply {
    let mut rb = app.http.post(format!("{}/leases/{P}/{d}/break", app.base));
    if let Some(body) = body {
        rb = rb.json(&body);
    }
    if let Some(key) = key {
        rb = rb.header("authorization", format!("Bearer {key}"));
    }
    TestApp::reply(rb.send().await.expect("send")).await
}

/// Acquires a permit of a counting lease (`limit`).
async fn take(app: &TestApp, d: &str, a: &TestAttempt, limit: u64) -> u64 {
    let r = app
        .acquire_body(P, d, a, &json!({"ttlMs": 30_000, "limit": limit}))
        .await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    r.fencing_token()
}

async fn break_removes_every_permit_and_then_finds_nothing(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    take(&app, &d, &a, 3).await;
    take(&app, &d, &b, 3).await;
    let before = app.inspect(P, &d, None).await.body["version"].clone();
    let r = break_lease(&app, &d, Some(json!({"reason": "stuck"})), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body, json!({"outcome": "broken", "permitsBroken": 2}));
    let seen = app.inspect(P, &d, None).await.body;
    assert_eq!(seen["held"], false, "{seen}");
    assert_ne!(seen["version"], before, "a break moves the version");
    assert!(seen.get("lockDelayRemainingMs").is_none(), "{seen}");

    // Nothing left: 404 nothing_to_break, as problem+json; the same for a
    // resource never held, with no body at all.
    let again = break_lease(&app, &d, None, None).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    assert_eq!(again.outcome(), "nothing_to_break", "{:?}", again.body);
    assert_eq!(again.content_type(), "application/problem+json");
    let never = break_lease(&app, &digest(), Some(json!({})), None).await;
    assert_eq!(never.outcome(), "nothing_to_break", "{:?}", never.body);
}

async fn break_by_fencing_token_removes_that_permit_only(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let ta = take(&app, &d, &a, 2).await;
    let tb = take(&app, &d, &b, 2).await;
    let r = break_lease(&app, &d, Some(json!({"fencingToken": ta})), None).await;
    assert_eq!(r.body, json!({"outcome": "broken", "permitsBroken": 1}));
    let seen = app.inspect(P, &d, None).await.body;
    assert_eq!(seen["holders"], 1, "{seen}");
    assert_eq!(seen["fencingToken"], tb, "{seen}");
    // The other holder renews as before.
    assert_eq!(app.renew(P, &d, &b, 30_000).await.outcome(), "renewed");
    // A token no live permit has: nothing changes.
    let missing = break_lease(&app, &d, Some(json!({"fencingToken": ta})), None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.outcome(), "nothing_to_break");
    assert_eq!(app.inspect(P, &d, None).await.body["holders"], 1);
}

async fn broken_holder_hears_revoked_on_renew_and_release(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    // A plain lease, and a permit of a counting lease someone else still holds.
    for limit in [1, 2] {
        let d = digest();
        let (a, b) = (app.attempt().await, app.attempt().await);
        let ta = take(&app, &d, &a, limit).await;
        if limit == 2 {
            take(&app, &d, &b, limit).await;
        }
        let body = json!({"fencingToken": ta});
        assert_eq!(
            break_lease(&app, &d, Some(body), None).await.outcome(),
            "broken"
        );
        let renew = app.renew(P, &d, &a, 30_000).await;
        assert_eq!(renew.status, StatusCode::NOT_FOUND, "{:?}", renew.body);
        assert_eq!(renew.outcome(), "lost");
        assert_eq!(renew.body["reason"], "revoked", "{:?}", renew.body);
        let release = app.release(P, &d, &a).await;
        assert_eq!(release.status, StatusCode::OK);
        assert_eq!(
            release.body,
            json!({"outcome": "already_absent", "reason": "revoked"})
        );
        // Someone who never held it hears nothing of the break.
        let stranger = app.attempt().await;
        let r = app.release(P, &d, &stranger).await;
        assert!(r.body.get("reason").is_none(), "{:?}", r.body);
    }
}

async fn break_bodies_are_validated(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    take(&app, &d, &a, 1).await;
    let long = "x".repeat(257);
    for (body, field) in [
        (json!({"reason": ""}), "reason"),
        (json!({"reason": long}), "reason"),
        (json!({"reason": "bell\u{7}"}), "reason"),
        (json!({"reason": 42}), "reason"),
        (json!({"fencingToken": 0}), "fencingToken"),
        (json!({"fencingToken": -1}), "fencingToken"),
        (json!({"fencingToken": "12"}), "fencingToken"),
        (json!({"fencingToken": 1.5}), "fencingToken"),
        (json!({"force": true}), ""),
    ] {
        let r = break_lease(&app, &d, Some(body.clone()), None).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {:?}",
            r.body
        );
        assert_eq!(r.outcome(), "invalid_request");
        let named = r.body["errors"].as_array().expect("errors");
        assert!(
            field.is_empty() || named.iter().any(|e| e["field"] == field),
            "{body}: {:?}",
            r.body
        );
    }
    let malformed = app
        .http
        .post(format!("{}/leases/{P}/{d}/break", app.base))
        .header("content-type", "application/json")
        .body("{\"reason\":")
        .send()
        .await
        .expect("send");
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    let bad_digest = break_lease(&app, "v1.nope", None, None).await;
    assert_eq!(bad_digest.status, StatusCode::BAD_REQUEST);
    // A whole number written as a float is that integer (as for ttlMs;
    // schemathesis sends one): no permit has it, so nothing to break.
    let whole = break_lease(&app, &d, Some(json!({"fencingToken": 690_035_392.0})), None).await;
    assert_eq!(whole.status, StatusCode::NOT_FOUND, "{:?}", whole.body);
    assert_eq!(whole.outcome(), "nothing_to_break");
    // Nothing of it broke the lease; 256 characters are fine.
    let ok = json!({"reason": "é".repeat(256)});
    assert_eq!(
        break_lease(&app, &d, Some(ok), None).await.outcome(),
        "broken"
    );
}

/// A keys file with a `write` key, an `admin` key named `ops-oncall` and
/// an unnamed `admin` key; removed on drop.
struct Keys {
    dir: std::path::PathBuf,
    writer: String,
    admin: String,
    unnamed: String,
}

impl Keys {
    fn write() -> Keys {
        let dir = std::env::temp_dir().join(unique("leasehold-operator-"));
        std::fs::create_dir_all(&dir).expect("dir");
        let keys = Keys {
            dir,
            writer: unique("writer-key-0123456789-"),
            admin: unique("admin-key-0123456789-"),
            unnamed: unique("unnamed-key-0123456789-"),
        };
        let text = format!(
            "{} {P} write\n{} {P} admin name=ops-oncall\n{} * admin\n",
            keys.writer, keys.admin, keys.unnamed
        );
        std::fs::write(keys.dir.join("keys"), text).expect("write keys");
        keys
    }

    async fn app(&self, backend: &Backend) -> TestApp {
        let file = self.dir.join("keys");
        TestApp::spawn_with(args(
            backend,
            &["--api-keys-file", file.to_str().expect("utf-8 path")],
        ))
        .await
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn break_needs_the_admin_scope(backend: Backend) {
    let keys = Keys::write();
    let app = keys.app(&backend).await;
    let d = digest();
    let none = break_lease(&app, &d, None, None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    let w = break_lease(&app, &d, None, Some(&keys.writer)).await;
    assert_eq!(w.status, StatusCode::FORBIDDEN, "{:?}", w.body);
    assert_eq!(w.body["scope"], "admin", "{:?}", w.body);
    assert_eq!(w.body["purpose"], P);
    let text = w.body.to_string();
    assert!(!text.contains(&keys.writer), "{text}");
    let a = break_lease(&app, &d, None, Some(&keys.admin)).await;
    assert_eq!(a.outcome(), "nothing_to_break", "{:?}", a.body);
}

async fn break_wakes_a_waiter_and_starts_no_lock_delay(backend: Backend) {
    let app = std::sync::Arc::new(TestApp::spawn(&backend).await);
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let held = app
        .acquire_body(P, &d, &a, &json!({"ttlMs": 60_000, "lockDelayMs": 60_000}))
        .await;
    assert_eq!(held.outcome(), "acquired");
    let waiter = {
        let (app, d) = (std::sync::Arc::clone(&app), d.clone());
        tokio::spawn(async move { app.acquire_wait(P, &d, &b, 30_000, 20_000).await })
    };
    app.until_waiters(1).await;
    assert_eq!(break_lease(&app, &d, None, None).await.outcome(), "broken");
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was woken")
        .expect("task");
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    assert!(got.fencing_token() > held.fencing_token());
    // Woken by the break, not by the 60 s TTL or a lock-delay.
    let waited = got.body["waitedMs"].as_u64().expect("waitedMs");
    assert!(waited < 15_000, "waited {waited} ms");
}

/// Reads server-sent events from `resp` until one named `name`; returns
/// its `id` and `data`.
async fn until_event(
    resp: &mut reqwest::Response,
    buf: &mut String,
    name: &str,
) -> (String, Value) {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let field = |f: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(f))
                    .map(str::to_owned)
            };
            if field("event: ").as_deref() == Some(name) {
                let data = field("data: ").expect("data");
                return (
                    field("id: ").expect("id"),
                    serde_json::from_str(&data).expect("JSON data"),
                );
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {name} event within 10 s"))
            .expect("read")
            .expect("stream ended");
        buf.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
    }
}

async fn watchers_get_revoked_with_reason_and_key_name(backend: Backend) {
    let keys = Keys::write();
    let app = keys.app(&backend).await;
    for (key, name) in [(&keys.admin, Some("ops-oncall")), (&keys.unnamed, None)] {
        let d = digest();
        let mut resp = app
            .http
            .get(format!("{}/leases/{P}/{d}/events", app.base))
            .header("authorization", format!("Bearer {}", keys.writer))
            .send()
            .await
            .expect("open stream");
        assert_eq!(resp.status(), StatusCode::OK);
        let mut buf = String::new();
        until_event(&mut resp, &mut buf, "state").await;
        let a = TestAttempt {
            token: {
                let r = app
                    .http
                    .post(format!("{}/attempts", app.base))
                    .header("authorization", format!("Bearer {}", keys.writer))
                    .json(&json!({"operationId": "op-1"}))
                    .send()
                    .await
                    .expect("attempt");
                TestApp::reply(r).await.body["ownerToken"]
                    .as_str()
                    .expect("token")
                    .to_owned()
            },
            op: "op-1".into(),
        };
        let acquired = app
            .http
            .put(format!("{}/leases/{P}/{d}", app.base))
            .header("authorization", format!("Bearer {}", keys.writer))
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
            .json(&json!({"ttlMs": 30_000}))
            .send()
            .await
            .expect("acquire");
        assert_eq!(acquired.status(), StatusCode::CREATED);
        until_event(&mut resp, &mut buf, "acquired").await;
        let body = json!({"reason": "stuck since the deploy"});
        let r = break_lease(&app, &d, Some(body), Some(key)).await;
        assert_eq!(r.outcome(), "broken", "{:?}", r.body);
        let (id, data) = until_event(&mut resp, &mut buf, "revoked").await;
        assert_eq!(data["held"], false, "{data}");
        assert_eq!(data["version"], id.as_str());
        assert_eq!(data["revocation"]["reason"], "stuck since the deploy");
        match name {
            Some(name) => assert_eq!(data["revocation"]["keyName"], name, "{data}"),
            None => assert!(data["revocation"].get("keyName").is_none(), "{data}"),
        }
        let text = data.to_string();
        for secret in [&keys.admin, &keys.unnamed, &keys.writer, &a.token] {
            assert!(!text.contains(secret.as_str()), "{text}");
        }
    }
}

async fn each_broken_permit_is_a_revoked_history_entry(backend: Backend) {
    let keys = Keys::write();
    let app = keys.app(&backend).await;
    let d = digest();
    let with =
        |rb: reqwest::RequestBuilder| rb.header("authorization", format!("Bearer {}", keys.writer));
    let mut tokens = Vec::new();
    for holder in ["pod-1", "pod-2"] {
        let op = unique("op-");
        let created = with(app.http.post(format!("{}/attempts", app.base)))
            .json(&json!({"operationId": op}))
            .send()
            .await
            .expect("attempt");
        let token = TestApp::reply(created).await.body["ownerToken"]
            .as_str()
            .expect("token")
            .to_owned();
        let r = with(app.http.put(format!("{}/leases/{P}/{d}", app.base)))
            .header("Lease-Owner-Token", &token)
            .header("Lease-Operation-Id", &op)
            .json(&json!({"ttlMs": 30_000, "limit": 2, "holder": holder}))
            .send()
            .await
            .expect("acquire");
        let r = TestApp::reply(r).await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
        tokens.push(r.fencing_token());
    }
    let body = json!({"reason": "rotating the | pods"});
    let r = break_lease(&app, &d, Some(body), Some(&keys.admin)).await;
    assert_eq!(r.outcome(), "broken", "{:?}", r.body);
    let seen = with(app.http.get(format!("{}/leases/{P}/{d}", app.base)))
        .send()
        .await
        .expect("inspect");
    let version = TestApp::reply(seen).await.body["version"].clone();
    let h = with(app.http.get(format!("{}/leases/{P}/{d}/history", app.base)))
        .send()
        .await
        .expect("history");
    let h = TestApp::reply(h).await;
    let entries = h.body["entries"].as_array().expect("entries").clone();
    let revoked: Vec<&Value> = entries.iter().filter(|e| e["event"] == "revoked").collect();
    assert_eq!(revoked.len(), 2, "{:#}", h.body);
    let mut broken: Vec<u64> = revoked
        .iter()
        .map(|e| e["fencingToken"].as_u64().expect("token"))
        .collect();
    broken.sort_unstable();
    assert_eq!(broken, tokens);
    for e in &revoked {
        assert_eq!(e["reason"], "rotating the | pods", "{e}");
        assert_eq!(e["keyName"], "ops-oncall", "{e}");
        assert_eq!(
            e["version"], version,
            "the version inspect answers after the break"
        );
        assert!(e["holder"] == "pod-1" || e["holder"] == "pod-2", "{e}");
    }
    // Newest first: the two revoked entries come before the acquisitions.
    assert_eq!(entries[0]["event"], "revoked", "{:#}", h.body);
    assert_eq!(entries[1]["event"], "revoked", "{:#}", h.body);
}
