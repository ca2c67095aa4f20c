//! Roles in the keys file (issue 24): `read` inspects, lists and watches;
//! `write` also acquires, renews and releases; `admin` implies `write`; a
//! line without scopes still means `write`; `metrics` is its own scope.
//! A valid key that lacks the verb's scope is `403 forbidden` naming it.
//! Each check runs against the embedded store and a real `redis-server`.

use crate::common::app::{args, digest, unique, Backend, Reply, TestApp, TestAttempt};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const P: &str = "invoice-export";

/// The keys of one test, and the file that grants them.
struct Keys {
    dir: std::path::PathBuf,
    reader: String,
    writer: String,
    old: String,
    admin: String,
    read_metrics: String,
    scraper: String,
}

impl Keys {
    fn write() -> Keys {
        let dir = std::env::temp_dir().join(unique("leasehold-roles-"));
        std::fs::create_dir_all(&dir).expect("dir");
        let keys = Keys {
            dir,
            reader: unique("reader-key-0123456789-"),
            writer: unique("writer-key-0123456789-"),
            old: unique("old-key-0123456789-"),
            admin: unique("admin-key-0123456789-"),
            read_metrics: unique("read-metrics-key-0123456789-"),
            scraper: unique("scraper-key-0123456789-"),
        };
        let text = format!(
            "# roles\n\
             {} {P},report read\n\
             {} {P} write\n\
             {} {P}   # a line from before roles: write\n\
             {} * admin\n\
             {} {P} read,metrics\n\
             {} - metrics\n",
            keys.reader, keys.writer, keys.old, keys.admin, keys.read_metrics, keys.scraper
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

/// One request with `key`, the attempt headers when given, and `body`.
async fn call(
    app: &TestApp,
    method: Method,
    path: &str,
    key: &str,
    attempt: Option<&TestAttempt>,
    body: Option<Value>,
) -> Reply {
    let mut rb = app
        .http
        .request(method, format!("{}{path}", app.base))
        .header("authorization", format!("Bearer {key}"));
    if let Some(a) = attempt {
        rb = rb
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op);
    }
    if let Some(body) = body {
        rb = rb.json(&body);
    }
    TestApp::reply(rb.send().await.expect("send")).await
}

/// An attempt minted with `key` (any valid key may mint one).
async fn attempt(app: &TestApp, key: &str) -> TestAttempt {
    let r = call(
        app,
        Method::POST,
        "/attempts",
        key,
        None,
        Some(json!({"operationId": unique("op-")})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    TestAttempt {
        token: r.body["ownerToken"].as_str().expect("token").to_owned(),
        op: r.body["operationId"].as_str().expect("op").to_owned(),
    }
}

/// A `403 forbidden` that names `scope` on `P`, and never the key.
fn lacks(case: &str, r: &Reply, scope: &str, key: &str) {
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{case}: {:#}", r.body);
    assert_eq!(r.content_type(), "application/problem+json", "{case}");
    assert_eq!(r.outcome(), "forbidden", "{case}");
    assert_eq!(r.body["scope"], scope, "{case}: {:#}", r.body);
    assert_eq!(r.body["purpose"], P, "{case}: {:#}", r.body);
    let detail = r.body["detail"].as_str().expect("detail");
    assert!(
        detail.contains(&format!("'{scope}' scope")) && detail.contains(P),
        "{case}: {detail}"
    );
    assert!(
        !r.body.to_string().contains(key) && !format!("{:?}", r.headers).contains(key),
        "{case}: the key is echoed"
    );
}

async fn a_read_key_inspects_lists_and_watches_but_may_not_write(backend: Backend) {
    let keys = Keys::write();
    let app = keys.app(&backend).await;
    let d = digest();
    let lease = format!("/leases/{P}/{d}");
    let ttl = json!({"ttlMs": 30000});

    // The reader's own attempt: acquire is refused, nothing is written.
    let mine = attempt(&app, &keys.reader).await;
    let r = call(
        &app,
        Method::PUT,
        &lease,
        &keys.reader,
        Some(&mine),
        Some(ttl.clone()),
    )
    .await;
    lacks("reader acquires", &r, "write", &keys.reader);
    let r = call(&app, Method::GET, &lease, &keys.reader, None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_eq!(r.body["held"], false, "a refused acquire wrote nothing");

    // A writer holds it; the reader sees it, and may neither renew nor
    // release it, even with the holder's attempt.
    let held = attempt(&app, &keys.writer).await;
    let r = call(
        &app,
        Method::PUT,
        &lease,
        &keys.writer,
        Some(&held),
        Some(ttl.clone()),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    let token = r.fencing_token();
    let r = call(&app, Method::GET, &lease, &keys.reader, Some(&held), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_eq!(r.body["held"], true);
    assert_eq!(r.body["heldBy"], "caller");
    let version = r.body["version"].as_str().expect("version").to_owned();
    let r = call(
        &app,
        Method::PATCH,
        &lease,
        &keys.reader,
        Some(&held),
        Some(ttl.clone()),
    )
    .await;
    lacks("reader renews", &r, "write", &keys.reader);
    let r = call(
        &app,
        Method::DELETE,
        &lease,
        &keys.reader,
        Some(&held),
        None,
    )
    .await;
    lacks("reader releases", &r, "write", &keys.reader);
    let r = call(&app, Method::GET, &lease, &keys.reader, None, None).await;
    assert_eq!(r.body["held"], true, "refused verbs changed nothing");
    assert_eq!(r.body["fencingToken"], token);

    // Long-poll, list and watch are reads.
    let poll = format!("{lease}?changedSince={version}&waitMs=20");
    let r = call(&app, Method::GET, &poll, &keys.reader, None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    let r = call(
        &app,
        Method::GET,
        &format!("/leases/{P}"),
        &keys.reader,
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_eq!(r.outcome(), "listed");
    assert!(r.body["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .any(|l| l["digest"] == d.as_str()));
    let stream = app
        .http
        .get(format!("{}{lease}/events", app.base))
        .header("authorization", format!("Bearer {}", keys.reader))
        .send()
        .await
        .expect("send");
    assert_eq!(stream.status(), StatusCode::OK);
    drop(stream);

    // A purpose the reader is not given at all: the plain 403, no scope.
    let r = call(
        &app,
        Method::GET,
        &format!("/leases/payroll/{d}"),
        &keys.reader,
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:#}", r.body);
    assert!(r.body.get("scope").is_none(), "{:#}", r.body);
    app.shutdown().await;
}

async fn write_admin_and_old_lines_do_every_verb(backend: Backend) {
    let keys = Keys::write();
    let app = keys.app(&backend).await;
    let ttl = json!({"ttlMs": 30000});
    for key in [&keys.writer, &keys.old, &keys.admin] {
        let lease = format!("/leases/{P}/{}", digest());
        let a = attempt(&app, key).await;
        let r = call(&app, Method::PUT, &lease, key, Some(&a), Some(ttl.clone())).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
        let r = call(
            &app,
            Method::PATCH,
            &lease,
            key,
            Some(&a),
            Some(ttl.clone()),
        )
        .await;
        assert_eq!(r.outcome(), "renewed", "{:#}", r.body);
        let r = call(&app, Method::GET, &lease, key, Some(&a), None).await;
        assert_eq!(r.body["heldBy"], "caller", "{:#}", r.body);
        let r = call(&app, Method::GET, &format!("/leases/{P}"), key, None, None).await;
        assert_eq!(r.outcome(), "listed", "{:#}", r.body);
        let r = call(&app, Method::DELETE, &lease, key, Some(&a), None).await;
        assert_eq!(r.outcome(), "released", "{:#}", r.body);
    }
    // `admin` on `*` reaches a purpose no other key names.
    let lease = format!("/leases/payroll/{}", digest());
    let a = attempt(&app, &keys.admin).await;
    let r = call(&app, Method::PUT, &lease, &keys.admin, Some(&a), Some(ttl)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    app.shutdown().await;
}

async fn the_metrics_scope_is_its_own(backend: Backend) {
    let keys = Keys::write();
    let app = keys.app(&backend).await;
    for key in [&keys.read_metrics, &keys.scraper] {
        let r = app
            .http
            .get(format!("{}/metrics", app.base))
            .header("authorization", format!("Bearer {key}"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::OK);
    }
    for key in [&keys.reader, &keys.writer, &keys.admin] {
        let r = call(&app, Method::GET, "/metrics", key, None, None).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{:#}", r.body);
        assert_eq!(r.body["scope"], "metrics", "{:#}", r.body);
    }
    // `read,metrics` reads but does not write.
    let lease = format!("/leases/{P}/{}", digest());
    let r = call(&app, Method::GET, &lease, &keys.read_metrics, None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    let a = attempt(&app, &keys.read_metrics).await;
    let r = call(
        &app,
        Method::PUT,
        &lease,
        &keys.read_metrics,
        Some(&a),
        Some(json!({"ttlMs": 30000})),
    )
    .await;
    lacks("read,metrics acquires", &r, "write", &keys.read_metrics);
    app.shutdown().await;
}

both_stores!(
    a_read_key_inspects_lists_and_watches_but_may_not_write,
    write_admin_and_old_lines_do_every_verb,
    the_metrics_scope_is_its_own,
);

#[tokio::test]
async fn an_unknown_scope_refuses_to_start_with_its_line() {
    let dir = std::env::temp_dir().join(unique("leasehold-roles-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keys");
    let key = unique("typo-key-0123456789-");
    std::fs::write(
        &file,
        format!("# ok\n{key}-a {P} read\n{key} {P} read,wirte\n"),
    )
    .expect("write keys");
    let config = args(
        &Backend::Memory,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    )
    .validate()
    .expect("valid settings");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let err = leasehold::run(listener, config, async {})
        .await
        .expect_err("an unknown scope must refuse to start")
        .to_string();
    assert!(err.contains("line 3: unknown scope"), "{err}");
    assert!(!err.contains(&key), "the key is quoted: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}
