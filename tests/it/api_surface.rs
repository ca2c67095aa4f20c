//! The API surface: the committed OpenAPI document, every kind of bad input
//! (each answered problem+json naming the fields), the transport limits,
//! request ids and API keys.

#[allow(unused_imports)]
use crate::common;

use common::app::{args, digest, unique, Backend, Reply, TestApp, TestAttempt};
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "invoice-export";
const PROBLEM: &str = "application/problem+json";

#[test]
fn committed_openapi_document_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/leasehold.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = format!("{}\n", leasehold::http::openapi::document_json());
    assert!(
        committed == generated,
        "{} is stale (or missing); regenerate it with:\n\n    {}\n",
        path.display(),
        leasehold::http::openapi::REGENERATE
    );
}

#[tokio::test]
async fn the_served_document_is_the_generated_one_and_docs_render_it() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let r = app
        .http
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(
        r.text().await.expect("text"),
        leasehold::http::openapi::document_json()
    );
    let docs = app
        .http
        .get(format!("{}/docs", app.base))
        .send()
        .await
        .expect("send");
    assert_eq!(docs.status(), StatusCode::OK);
    assert!(docs.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .starts_with("text/html"));
    let html = docs.text().await.expect("text");
    assert!(
        html.contains("fetch(\"/openapi.json\""),
        "the page renders the live document"
    );
    for outside in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "@import",
    ] {
        assert!(
            !html.contains(outside),
            "/docs loads an outside asset ({outside})"
        );
    }
}

/// One bad request and what it must be answered with.
struct Case {
    what: &'static str,
    method: reqwest::Method,
    purpose: String,
    digest: String,
    attempt: Option<(Option<String>, Option<String>)>,
    body: Option<(&'static str, String)>,
    status: StatusCode,
    fields: &'static [&'static str],
}

fn problem_ok(case: &str, r: &Reply, status: StatusCode, outcome: &str) {
    assert_eq!(r.status, status, "{case}: {:#}", r.body);
    assert_eq!(r.content_type(), PROBLEM, "{case}");
    assert_eq!(r.outcome(), outcome, "{case}: {:#}", r.body);
    assert_eq!(r.body["status"], json!(status.as_u16()), "{case}");
    for member in ["type", "title", "detail"] {
        assert!(
            r.body[member].as_str().is_some_and(|s| !s.is_empty()),
            "{case}: no {member}"
        );
    }
}

fn named_fields(r: &Reply) -> Vec<String> {
    r.body["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|e| e["field"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn send(app: &TestApp, c: &Case) -> Reply {
    let url = format!("{}/leases/{}/{}", app.base, c.purpose, c.digest);
    let mut rb = app.http.request(c.method.clone(), url);
    if let Some((token, op)) = &c.attempt {
        if let Some(token) = token {
            rb = rb.header("Lease-Owner-Token", token);
        }
        if let Some(op) = op {
            rb = rb.header("Lease-Operation-Id", op);
        }
    }
    if let Some((content_type, body)) = &c.body {
        rb = rb.header("content-type", *content_type).body(body.clone());
    }
    TestApp::reply(rb.send().await.expect("send")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_problem_json_naming_each_field() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let a = app.attempt().await;
    let good = || Some((Some(a.token.clone()), Some(a.op.clone())));
    let json_body = |s: &str| Some(("application/json", s.to_owned()));
    let d = digest();
    let (put, patch, delete, get) = (
        reqwest::Method::PUT,
        reqwest::Method::PATCH,
        reqwest::Method::DELETE,
        reqwest::Method::GET,
    );
    let (bad, unprocessable) = (StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY);
    let case = |what,
                method: &reqwest::Method,
                purpose: &str,
                digest: &str,
                attempt,
                body,
                status,
                fields| Case {
        what,
        method: method.clone(),
        purpose: purpose.to_owned(),
        digest: digest.to_owned(),
        attempt,
        body,
        status,
        fields,
    };
    let ttl = json_body(r#"{"ttlMs": 30000}"#);
    let mut cases = vec![
        // Path parameters: shape errors, 400, on every verb.
        case(
            "purpose uppercase",
            &put,
            "Invoice",
            &d,
            good(),
            ttl.clone(),
            bad,
            &["purpose"],
        ),
        case(
            "purpose digit first",
            &patch,
            "1abc",
            &d,
            good(),
            ttl.clone(),
            bad,
            &["purpose"],
        ),
        case(
            "purpose underscore",
            &delete,
            "a_b",
            &d,
            good(),
            None,
            bad,
            &["purpose"],
        ),
        case(
            "purpose 64 chars",
            &get,
            &"a".repeat(64),
            &d,
            None,
            None,
            bad,
            &["purpose"],
        ),
        case(
            "digest raw id",
            &put,
            P,
            "order-42",
            good(),
            ttl.clone(),
            bad,
            &["digest"],
        ),
        case(
            "digest uppercase hex",
            &get,
            P,
            &d.to_uppercase().replacen("V1", "v1", 1),
            None,
            None,
            bad,
            &["digest"],
        ),
        case(
            "digest v2",
            &delete,
            P,
            &d.replacen("v1.", "v2.", 1),
            good(),
            None,
            bad,
            &["digest"],
        ),
        case(
            "digest short",
            &patch,
            P,
            &d[..66],
            good(),
            ttl.clone(),
            bad,
            &["digest"],
        ),
        case(
            "purpose and digest",
            &get,
            "A",
            "x",
            None,
            None,
            bad,
            &["purpose", "digest"],
        ),
        // Attempt headers.
        case(
            "no attempt headers",
            &put,
            P,
            &d,
            None,
            ttl.clone(),
            bad,
            &["Lease-Owner-Token", "Lease-Operation-Id"],
        ),
        case(
            "no owner token",
            &patch,
            P,
            &d,
            Some((None, Some(a.op.clone()))),
            ttl.clone(),
            bad,
            &["Lease-Owner-Token"],
        ),
        case(
            "no operation id",
            &delete,
            P,
            &d,
            Some((Some(a.token.clone()), None)),
            None,
            bad,
            &["Lease-Operation-Id"],
        ),
        case(
            "short owner token",
            &put,
            P,
            &d,
            Some((Some("short".into()), Some(a.op.clone()))),
            ttl.clone(),
            bad,
            &["Lease-Owner-Token"],
        ),
        case(
            "owner token not base64url",
            &delete,
            P,
            &d,
            Some((Some("+".repeat(32)), Some(a.op.clone()))),
            None,
            bad,
            &["Lease-Owner-Token"],
        ),
        case(
            "operation id with ':'",
            &put,
            P,
            &d,
            Some((Some(a.token.clone()), Some("a:b".into()))),
            ttl.clone(),
            bad,
            &["Lease-Operation-Id"],
        ),
        case(
            "operation id 129 chars",
            &patch,
            P,
            &d,
            Some((Some(a.token.clone()), Some("x".repeat(129)))),
            ttl.clone(),
            bad,
            &["Lease-Operation-Id"],
        ),
        // Inspect takes the attempt headers in any combination, but a
        // header that is sent must be well-formed.
        case(
            "inspect with a malformed token alone",
            &get,
            P,
            &d,
            Some((Some("short".into()), None)),
            None,
            bad,
            &["Lease-Owner-Token"],
        ),
        case(
            "inspect with a malformed operation id alone",
            &get,
            P,
            &d,
            Some((None, Some("a:b".into()))),
            None,
            bad,
            &["Lease-Operation-Id"],
        ),
        case(
            "inspect with both malformed",
            &get,
            P,
            &d,
            Some((Some("+".repeat(32)), Some("x".repeat(129)))),
            None,
            bad,
            &["Lease-Owner-Token", "Lease-Operation-Id"],
        ),
        // Body values: 422.
        case(
            "ttl below 2 x drift budget",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 19}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl above 1 h",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 3600001}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl zero",
            &patch,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 0}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl negative",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": -1}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl fraction",
            &patch,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 1500.5}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl string",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": "30000"}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl null",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": null}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl huge",
            &patch,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 1e300}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "ttl missing",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"waitMs": 10}"#),
            unprocessable,
            &["ttlMs"],
        ),
        case(
            "wait above 30 s",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 30000, "waitMs": 30001}"#),
            unprocessable,
            &["waitMs"],
        ),
        case(
            "wait negative",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 30000, "waitMs": -5}"#),
            unprocessable,
            &["waitMs"],
        ),
        case(
            "wait null",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 30000, "waitMs": null}"#),
            unprocessable,
            &["waitMs"],
        ),
        case(
            "wait boolean",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 30000, "waitMs": true}"#),
            unprocessable,
            &["waitMs"],
        ),
        case(
            "unknown member",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 30000, "ttl": 5}"#),
            unprocessable,
            &["ttl"],
        ),
        case(
            "renew takes no waitMs",
            &patch,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 30000, "waitMs": 5}"#),
            unprocessable,
            &["waitMs"],
        ),
        case(
            "body is an array",
            &put,
            P,
            &d,
            good(),
            json_body("[30000]"),
            unprocessable,
            &["body"],
        ),
        case(
            "body is a number",
            &patch,
            P,
            &d,
            good(),
            json_body("30000"),
            unprocessable,
            &["body"],
        ),
        // JSON syntax: 400.
        case(
            "truncated JSON",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 300"#),
            bad,
            &["body"],
        ),
        case(
            "not JSON",
            &put,
            P,
            &d,
            good(),
            json_body("ttlMs=30000"),
            bad,
            &["body"],
        ),
        case(
            "empty body",
            &patch,
            P,
            &d,
            good(),
            json_body(""),
            bad,
            &["body"],
        ),
        case(
            "trailing garbage",
            &put,
            P,
            &d,
            good(),
            json_body(r#"{"ttlMs": 30000} x"#),
            bad,
            &["body"],
        ),
        // Several problems at once: every one named, 400 because one is a shape error.
        case(
            "everything wrong",
            &put,
            "A",
            "x",
            None,
            json_body(r#"{"ttlMs": 5}"#),
            bad,
            &[
                "purpose",
                "digest",
                "Lease-Owner-Token",
                "Lease-Operation-Id",
                "ttlMs",
            ],
        ),
    ];
    cases.push(case(
        "content type with charset is JSON",
        &put,
        "Bad",
        &d,
        good(),
        Some((
            "application/json; charset=utf-8",
            "{\"ttlMs\": 30000}".into(),
        )),
        bad,
        &["purpose"],
    ));
    for c in &cases {
        let r = send(&app, c).await;
        problem_ok(c.what, &r, c.status, "invalid_request");
        let named = named_fields(&r);
        assert_eq!(
            named.len(),
            c.fields.len(),
            "{}: named {named:?}, expected {:?}",
            c.what,
            c.fields
        );
        for field in c.fields {
            assert!(
                named.iter().any(|n| n == field),
                "{}: {field} not named in {named:?}",
                c.what
            );
        }
        let detail = r.body["detail"].as_str().unwrap_or("");
        assert!(
            !detail.contains(&a.token),
            "{}: the owner token is echoed",
            c.what
        );
    }
    // Nothing above touched the store: the resource is still free.
    assert_eq!(app.inspect(P, &d, None).await.body["held"], false);

    // The bounds themselves are accepted, and a whole-number float is an integer.
    for (i, body) in [
        json!({"ttlMs": 20}),
        json!({"ttlMs": 3_600_000, "waitMs": 0}),
        json!({"ttlMs": 611.0, "waitMs": 30000.0}),
    ]
    .iter()
    .enumerate()
    {
        let fresh = app.attempt().await;
        let r = app.acquire_body(P, &digest(), &fresh, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "bound {i}: {:#}", r.body);
    }
}

#[tokio::test]
async fn attempt_body_errors_name_the_field() {
    let app = TestApp::spawn(&Backend::Memory).await;
    for (what, body, status, field) in [
        (
            "empty id",
            json!({"operationId": ""}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "operationId",
        ),
        (
            "129 chars",
            json!({"operationId": "x".repeat(129)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "operationId",
        ),
        (
            "space",
            json!({"operationId": "a b"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "operationId",
        ),
        (
            "number",
            json!({"operationId": 5}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "operationId",
        ),
        (
            "missing",
            json!({}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "operationId",
        ),
        (
            "unknown member",
            json!({"operationId": "a", "owner": "me"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "owner",
        ),
    ] {
        let r = app.post_attempt(&body).await;
        problem_ok(what, &r, status, "invalid_request");
        assert_eq!(named_fields(&r), vec![field.to_owned()], "{what}");
    }
    let r = TestApp::reply(
        app.http
            .post(format!("{}/attempts", app.base))
            .header("content-type", "application/json")
            .body("{")
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok("malformed", &r, StatusCode::BAD_REQUEST, "invalid_request");
}

#[tokio::test]
async fn size_media_type_and_routing_limits_are_problem_json() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let a = app.attempt().await;
    let url = format!("{}/leases/{P}/{}", app.base, digest());
    let with_attempt = |rb: reqwest::RequestBuilder, a: &TestAttempt| {
        rb.header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
    };

    // 413, with a Content-Length and chunked.
    let big = format!(
        "{{\"ttlMs\": 30000, \"pad\": \"{}\"}}",
        "x".repeat(17 * 1024)
    );
    let r = TestApp::reply(
        with_attempt(app.http.put(&url), &a)
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok(
        "413",
        &r,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    );
    // Chunked, no Content-Length: the limit holds while reading. Raw HTTP/1.1.
    let raw = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(app.addr)
            .await
            .expect("connect");
        let path = url.trim_start_matches(&app.base);
        let head = format!(
            "PUT {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\
             lease-owner-token: {}\r\nlease-operation-id: {}\r\nconnection: close\r\n\r\n",
            a.token, a.op
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        for _ in 0..20 {
            let chunk = format!("400\r\n{}\r\n", " ".repeat(1024));
            if stream.write_all(chunk.as_bytes()).await.is_err() {
                break; // the server answered and closed early
            }
        }
        let _ = stream.write_all(b"0\r\n\r\n").await;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    assert!(
        raw.to_ascii_lowercase()
            .contains("content-type: application/problem+json"),
        "{raw}"
    );
    assert!(raw.contains("\"outcome\":\"payload_too_large\""), "{raw}");
    let r = TestApp::reply(
        app.http
            .post(format!("{}/attempts", app.base))
            .header("content-type", "application/json")
            .body(big)
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok(
        "413 attempts",
        &r,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    );

    // 415: wrong or missing content type.
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut rb = with_attempt(app.http.put(&url), &a).body(r#"{"ttlMs": 30000}"#);
        if let Some(ct) = content_type {
            rb = rb.header("content-type", ct);
        }
        let r = TestApp::reply(rb.send().await.expect("send")).await;
        problem_ok(
            &format!("415 {content_type:?}"),
            &r,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        );
    }

    // 404 and 405.
    for path in [
        "/nope",
        "/leases",
        // `/leases/{P}` lists leases; with a trailing slash it is nothing.
        &format!("/leases/{P}/"),
        &format!("/leases/{P}/{}/extra", digest()),
    ] {
        let r = app.get(path).await;
        problem_ok(path, &r, StatusCode::NOT_FOUND, "not_found");
    }
    let r = TestApp::reply(app.http.post(&url).send().await.expect("send")).await;
    problem_ok(
        "405 POST lease",
        &r,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    let allow = r.headers["allow"].to_str().expect("ascii").to_owned();
    for method in ["PUT", "PATCH", "DELETE", "GET"] {
        assert!(allow.contains(method), "Allow: {allow}");
    }
    let r = TestApp::reply(
        app.http
            .post(format!("{}/leases/{P}", app.base))
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok(
        "405 POST list",
        &r,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    let r = app.get("/attempts").await;
    problem_ok(
        "405 GET attempts",
        &r,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );

    // 431 problem+json for a header block over 16 KiB.
    let mut rb = app.http.get(format!("{}/livez", app.base));
    for i in 0..40 {
        rb = rb.header(format!("x-pad-{i}"), "y".repeat(500));
    }
    let r = TestApp::reply(rb.send().await.expect("send")).await;
    problem_ok(
        "431",
        &r,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
    );
    // Over 100 headers hyper answers itself, before any handler: a bare 431
    // (no problem+json is possible there with axum::serve).
    let mut rb = app.http.get(format!("{}/livez", app.base));
    for i in 0..120 {
        rb = rb.header(format!("x-many-{i}"), "1");
    }
    let r = rb.send().await.expect("send");
    assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
}

#[tokio::test]
async fn request_ids_are_honoured_or_generated_and_always_returned() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let id_of = |r: &reqwest::Response| {
        r.headers()
            .get("x-request-id")
            .map(|v| v.to_str().expect("ascii").to_owned())
    };

    let r = app
        .http
        .get(format!("{}/livez", app.base))
        .send()
        .await
        .expect("send");
    let first = id_of(&r).expect("a generated id");
    assert_eq!(first.len(), 24, "{first}");
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    let r = app
        .http
        .get(format!("{}/livez", app.base))
        .send()
        .await
        .expect("send");
    let second = id_of(&r).expect("a generated id");
    assert_ne!(first, second, "ids are unique");

    let mine = unique("trace-").replace('x', ".");
    let r = app
        .http
        .get(format!("{}/livez", app.base))
        .header("x-request-id", &mine)
        .send()
        .await
        .expect("send");
    assert_eq!(
        id_of(&r).as_deref(),
        Some(mine.as_str()),
        "a well-formed id is honoured"
    );
    // Problem answers carry it too.
    let r = app
        .http
        .get(format!("{}/nope", app.base))
        .header("x-request-id", &mine)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(id_of(&r).as_deref(), Some(mine.as_str()));
    // An id that is too long or carries odd characters is replaced.
    for odd in [
        "x".repeat(129),
        "has space".to_owned(),
        "semi;colon".to_owned(),
    ] {
        let r = app
            .http
            .get(format!("{}/livez", app.base))
            .header("x-request-id", &odd)
            .send()
            .await
            .expect("send");
        let got = id_of(&r).expect("an id");
        assert_ne!(got, odd);
        assert_eq!(got.len(), 24);
    }
}

#[tokio::test]
async fn api_keys_answer_401_and_403_as_problem_json() {
    let dir = std::env::temp_dir().join(unique("leasehold-keys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keys");
    let (scoped, admin, scraper) = (
        unique("scoped-key-0123456789-"),
        unique("admin-key-0123456789-"),
        unique("scraper-key-0123456789-"),
    );
    std::fs::write(
        &file,
        format!("# test keys\n{scoped} {P},report\n{admin} *\n{scraper} - metrics # scrapes\n"),
    )
    .expect("write keys");
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let bearer = |key: &str| format!("Bearer {key}");
    let attempt_with = |key: Option<String>| {
        let mut rb = app
            .http
            .post(format!("{}/attempts", app.base))
            .json(&json!({"operationId": unique("op-")}));
        if let Some(key) = key {
            rb = rb.header("authorization", key);
        }
        rb
    };

    // 401: none, wrong, malformed; WWW-Authenticate says how.
    for key in [
        None,
        Some(bearer("wrong-key-0123456789")),
        Some(format!("Basic {admin}")),
        Some(admin.clone()),
    ] {
        let r = TestApp::reply(attempt_with(key.clone()).send().await.expect("send")).await;
        problem_ok(
            &format!("401 {key:?}"),
            &r,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        );
        assert!(r.headers["www-authenticate"]
            .to_str()
            .expect("ascii")
            .starts_with("Bearer"));
    }
    let r = TestApp::reply(
        attempt_with(Some(bearer(&scoped)))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    let a = TestAttempt {
        token: r.body["ownerToken"].as_str().expect("token").to_owned(),
        op: r.body["operationId"].as_str().expect("op").to_owned(),
    };

    let lease = |purpose: &str, key: Option<&str>, body: Value| {
        let mut rb = app
            .http
            .put(format!("{}/leases/{purpose}/{}", app.base, digest()))
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
            .json(&body);
        if let Some(key) = key {
            rb = rb.header("authorization", bearer(key));
        }
        rb
    };
    let ttl = json!({"ttlMs": 30000});
    let r = TestApp::reply(
        lease(P, Some(&scoped), ttl.clone())
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    let r = TestApp::reply(
        lease("payroll", Some(&scoped), ttl.clone())
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok("403", &r, StatusCode::FORBIDDEN, "forbidden");
    let r = TestApp::reply(
        lease("payroll", Some(&admin), ttl.clone())
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:#}", r.body);
    let r = TestApp::reply(lease(P, None, ttl.clone()).send().await.expect("send")).await;
    problem_ok("401 lease", &r, StatusCode::UNAUTHORIZED, "unauthorized");
    // Unauthenticated bad input learns nothing about validation: 401 first.
    let r = TestApp::reply(
        lease("BAD", None, json!({"ttlMs": 1}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok(
        "401 before validation",
        &r,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    // Inspect and release are guarded the same way.
    let r = TestApp::reply(
        app.http
            .get(format!("{}/leases/payroll/{}", app.base, digest()))
            .header("authorization", bearer(&scoped))
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok("403 inspect", &r, StatusCode::FORBIDDEN, "forbidden");
    let r = TestApp::reply(
        app.http
            .delete(format!("{}/leases/{P}/{}", app.base, digest()))
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok("401 release", &r, StatusCode::UNAUTHORIZED, "unauthorized");
    // Probes and documents stay open (probes carry no key).
    for path in ["/livez", "/readyz", "/openapi.json", "/docs"] {
        let r = app
            .http
            .get(format!("{}{path}", app.base))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    assert_eq!(app.get("/readyz").await.body["auth"], "keys");
    // Metrics name every purpose: on the API listener only a key with the
    // `metrics` scope reads them.
    let metrics = |key: Option<&str>| {
        let mut rb = app.http.get(format!("{}/metrics", app.base));
        if let Some(key) = key {
            rb = rb.header("authorization", bearer(key));
        }
        rb
    };
    let r = TestApp::reply(metrics(None).send().await.expect("send")).await;
    problem_ok("401 metrics", &r, StatusCode::UNAUTHORIZED, "unauthorized");
    let r = TestApp::reply(metrics(Some(&scoped)).send().await.expect("send")).await;
    problem_ok("403 metrics", &r, StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(r.body["scope"], "metrics", "{:#}", r.body);
    let r = metrics(Some(&scraper)).send().await.expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.expect("text");
    // Labels only for purposes a key names: `payroll` (reached through the
    // `*` key only) is counted as `other`.
    assert!(
        text.contains(&format!("purpose=\"{P}\"")),
        "a named purpose keeps its label"
    );
    assert!(
        !text.contains("purpose=\"payroll\""),
        "a purpose no key names must be 'other'"
    );
    // The scraper's key may not use any purpose.
    let r = TestApp::reply(
        lease(P, Some(&scraper), ttl.clone())
            .send()
            .await
            .expect("send"),
    )
    .await;
    problem_ok("403 scraper", &r, StatusCode::FORBIDDEN, "forbidden");
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads one HTTP/1.1 answer to a bodiless GET (head and a Content-Length
/// body) and returns its status line.
async fn read_answer(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .expect("a content-length");
            if buf.len() >= end + 4 + length {
                return text.lines().next().unwrap_or_default().to_owned();
            }
        }
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "closed before a whole answer: {text:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Waits (bounded) for the server to close `stream`; what it sent first is
/// returned, so the caller can assert there was no answer.
async fn closed_by_server(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut chunk = [0u8; 1024];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("the server never closed the connection");
    got
}

#[tokio::test]
async fn idle_connections_and_trickled_heads_are_closed_after_the_idle_timeout() {
    use tokio::io::AsyncWriteExt;
    const IDLE: std::time::Duration = std::time::Duration::from_millis(300);
    let app = TestApp::spawn_with(args(&Backend::Memory, &["--idle-timeout-ms", "300"])).await;

    // A keep-alive connection that answered once and then sits idle.
    let started = std::time::Instant::now();
    let mut idle = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    idle.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(read_answer(&mut idle).await, "HTTP/1.1 200 OK");
    // A connection that starts a request head and never finishes it.
    let mut trickle = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    trickle
        .write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("write");

    assert!(closed_by_server(&mut idle).await.is_empty());
    assert!(
        closed_by_server(&mut trickle).await.is_empty(),
        "an unfinished head gets no answer"
    );
    assert!(
        started.elapsed() >= IDLE,
        "closed before the idle timeout: {:?}",
        started.elapsed()
    );
    // The service itself is fine and answers new connections.
    assert_eq!(app.get("/livez").await.status, StatusCode::OK);
    app.shutdown().await;
}

#[tokio::test]
async fn at_the_connection_limit_new_connections_wait_until_one_closes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut app = TestApp::spawn_with(args(&Backend::Memory, &["--max-connections", "1"])).await;
    // The harness' client holds the one connection (its keep-alive pool);
    // dropping the client closes it.
    app.http = reqwest::Client::new();

    let request = b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut first = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    first.write_all(request).await.expect("write");
    assert_eq!(read_answer(&mut first).await, "HTTP/1.1 200 OK");

    // The kernel completes the handshake (backlog), but the service does not
    // take the connection while `first` is open.
    let mut second = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    second.write_all(request).await.expect("write");
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        second.read(&mut byte),
    )
    .await;
    assert!(
        early.is_err(),
        "answered beyond the connection limit: {early:?}"
    );

    drop(first);
    assert_eq!(read_answer(&mut second).await, "HTTP/1.1 200 OK");
    drop(second);
    app.shutdown().await;
}

/// Sends a lease verb with the attempt headers given (each one optional).
async fn with_headers(
    app: &TestApp,
    method: &str,
    d: &str,
    token: Option<&str>,
    op: Option<&str>,
) -> Reply {
    let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
    let mut rb = app
        .http
        .request(method.clone(), format!("{}/leases/{P}/{d}", app.base));
    if let Some(token) = token {
        rb = rb.header("Lease-Owner-Token", token);
    }
    if let Some(op) = op {
        rb = rb.header("Lease-Operation-Id", op);
    }
    if method == reqwest::Method::PUT || method == reqwest::Method::PATCH {
        rb = rb.json(&json!({"ttlMs": 30000}));
    }
    TestApp::reply(rb.send().await.expect("send")).await
}

/// Every combination of attempt headers the document allows is accepted,
/// and one it does not allow (a required header left out) is refused 400
/// naming it: the served document's `required` flags drive the requests.
#[tokio::test]
async fn every_header_combination_the_document_allows_is_accepted() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let doc = app.get("/openapi.json").await.body;
    let ops = &doc["paths"]["/leases/{purpose}/{digest}"];
    let mut checked = 0;
    for method in ["put", "patch", "delete", "get"] {
        let headers: Vec<(String, bool)> = ops[method]["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .filter(|p| p["in"] == "header")
            .map(|p| {
                let name = p["name"].as_str().expect("name").to_owned();
                (name, p["required"] == json!(true))
            })
            .collect();
        let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["Lease-Owner-Token", "Lease-Operation-Id"],
            "{method}"
        );
        // Each subset of the two headers, on a lease the attempt holds.
        for (send_token, send_op) in [(true, true), (true, false), (false, true), (false, false)] {
            let d = digest();
            let a = app.attempt().await;
            assert_eq!(
                app.acquire(P, &d, &a, 30_000).await.status,
                StatusCode::CREATED
            );
            let r = with_headers(
                &app,
                method,
                &d,
                send_token.then_some(a.token.as_str()),
                send_op.then_some(a.op.as_str()),
            )
            .await;
            let missing: Vec<&str> = headers
                .iter()
                .zip([send_token, send_op])
                .filter(|((_, required), sent)| *required && !sent)
                .map(|((name, _), _)| name.as_str())
                .collect();
            let case = format!("{method} token={send_token} op={send_op}");
            if missing.is_empty() {
                assert!(
                    r.status.is_success(),
                    "{case}: allowed, answered {} {:#}",
                    r.status,
                    r.body
                );
            } else {
                problem_ok(&case, &r, StatusCode::BAD_REQUEST, "invalid_request");
                assert_eq!(named_fields(&r), missing, "{case}");
                assert!(
                    ops[method]["responses"]["400"]["description"]
                        .as_str()
                        .is_some_and(|d| d.contains("attempt header")),
                    "{case}: the document says why"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 16);
}

/// Inspect's `heldBy` for each combination of attempt headers: both name
/// the attempt, the owner token alone compares the token only (never
/// `caller`), the operation id alone names no one.
#[tokio::test]
async fn inspect_held_by_follows_the_headers_sent() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let d = digest();
    let a = app.attempt().await;
    let a2 = TestApp::other_operation(&a);
    let b = app.attempt().await;
    assert_eq!(
        app.acquire(P, &d, &a, 30_000).await.status,
        StatusCode::CREATED
    );
    for (what, token, op, held_by) in [
        (
            "both, the holder",
            Some(&a.token),
            Some(&a.op),
            json!("caller"),
        ),
        (
            "both, same owner, other operation",
            Some(&a2.token),
            Some(&a2.op),
            json!("caller_other_operation"),
        ),
        (
            "both, someone else",
            Some(&b.token),
            Some(&b.op),
            json!("other"),
        ),
        (
            "the holder's token alone",
            Some(&a.token),
            None,
            json!("caller_other_operation"),
        ),
        ("another token alone", Some(&b.token), None, json!("other")),
        (
            "the holder's operation id alone",
            None,
            Some(&a.op),
            Value::Null,
        ),
        ("neither", None, None, Value::Null),
    ] {
        let r = with_headers(
            &app,
            "get",
            &d,
            token.map(String::as_str),
            op.map(String::as_str),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{what}: {:#}", r.body);
        assert_eq!(r.outcome(), "inspected", "{what}");
        assert_eq!(r.body["held"], true, "{what}");
        assert_eq!(r.body["heldBy"], held_by, "{what}: {:#}", r.body);
        let text = r.body.to_string();
        assert!(
            !text.contains(&a.token) && !text.contains(&b.token),
            "{what}: a token is echoed"
        );
    }
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let r = with_headers(&app, "get", &d, Some(&a.token), None).await;
    assert_eq!(
        (r.status, &r.body["held"], &r.body["heldBy"]),
        (StatusCode::OK, &json!(false), &Value::Null)
    );
}

/// Fetches what a problem answer's `type` points at, resolved against the
/// request's URL as RFC 9457 says, and checks it is the page of `outcome`.
async fn type_page_ok(app: &TestApp, request_url: &str, r: &Reply, case: &str) {
    let outcome = r.outcome().to_owned();
    let type_ref = r.body["type"]
        .as_str()
        .unwrap_or_else(|| panic!("{case}: no type"));
    let page = reqwest::Url::parse(request_url)
        .and_then(|u| u.join(type_ref))
        .unwrap_or_else(|e| panic!("{case}: type {type_ref:?} does not resolve: {e}"));
    let resp = app.http.get(page.clone()).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK, "{case}: GET {page}");
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/html"),
        "{case}: {page} is not HTML"
    );
    let html = resp.text().await.expect("text");
    assert!(
        html.contains(&format!("<code>{outcome}</code>")),
        "{case}: {page} is not the page of {outcome}"
    );
}

/// Every problem `type` points at a page the service serves: each problem
/// the document declares, and real answers of every kind sent here.
#[tokio::test]
async fn every_problem_type_uri_resolves_to_a_page() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let doc = app.get("/openapi.json").await.body;
    let root = format!("{}/leases/{P}/{}", app.base, digest());

    // Every problem schema of the document, by its example.
    let mut documented = 0;
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        if schema["properties"]["type"].is_null() {
            continue;
        }
        let example = Reply {
            status: StatusCode::OK,
            headers: Default::default(),
            body: schema["example"].clone(),
        };
        type_page_ok(&app, &root, &example, name).await;
        documented += 1;
    }
    assert!(documented >= 15, "{documented} problem schemas");
    // Every page the document lists.
    for slug in doc["components"]["schemas"]["ProblemType"]["enum"]
        .as_array()
        .expect("enum")
    {
        let r = app
            .get(&format!("/problems/{}", slug.as_str().expect("slug")))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{slug}");
    }

    // Real answers.
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    assert_eq!(
        app.acquire(P, &d, &a, 30_000).await.status,
        StatusCode::CREATED
    );
    let lease = format!("{}/leases/{P}/{d}", app.base);
    let mut answers = vec![
        (lease.clone(), app.acquire(P, &d, &b, 30_000).await),
        (
            lease.clone(),
            app.acquire(P, &d, &TestApp::other_operation(&a), 30_000)
                .await,
        ),
        (lease.clone(), app.release(P, &d, &b).await),
        (lease.clone(), app.renew(P, &d, &b, 30_000).await),
        (lease.clone(), app.renew(P, &d, &a, 5).await),
        (lease.clone(), app.renew(P, &digest(), &a, 30_000).await),
        (
            format!("{}/leases/Bad/{d}", app.base),
            app.inspect("Bad", &d, None).await,
        ),
        (format!("{}/nowhere", app.base), app.get("/nowhere").await),
        (
            format!("{}/problems/no-such-problem", app.base),
            app.get("/problems/no-such-problem").await,
        ),
    ];
    let put = |body: String, content_type: &'static str| {
        let url = lease.clone();
        let rb = app
            .http
            .put(&url)
            .header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
            .header("content-type", content_type)
            .body(body);
        async move { (url, TestApp::reply(rb.send().await.expect("send")).await) }
    };
    answers.push(put("{\"ttlMs\": 30000}".into(), "text/plain").await);
    answers.push(
        put(
            format!("{{\"ttlMs\": 30000, \"x\": \"{}\"}}", "y".repeat(64 * 1024)),
            "application/json",
        )
        .await,
    );
    let post = app
        .http
        .post(format!("{}/livez", app.base))
        .send()
        .await
        .expect("send");
    answers.push((format!("{}/livez", app.base), TestApp::reply(post).await));
    let mut outcomes = std::collections::BTreeSet::new();
    for (url, r) in &answers {
        assert!(!r.status.is_success(), "{url}: {:#}", r.body);
        assert_eq!(r.content_type(), PROBLEM, "{url}");
        type_page_ok(&app, url, r, &format!("{} {}", r.status, r.outcome())).await;
        outcomes.insert(r.outcome().to_owned());
    }
    for outcome in [
        "contended",
        "owner_operation_conflict",
        "not_owner",
        "lost",
        "invalid_request",
        "not_found",
        "unsupported_media_type",
        "payload_too_large",
        "method_not_allowed",
    ] {
        assert!(
            outcomes.contains(outcome),
            "{outcome} was not answered: {outcomes:?}"
        );
    }
}

/// Starts `run` with these flags and returns its configuration error, if it
/// refused to start (it is shut down at once if it started).
async fn start_error(flags: &[&str]) -> Option<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    // A setting out of bounds is refused by the one validation, before `run`.
    let config = match args(&Backend::Memory, flags).validate() {
        Ok(config) => config,
        Err(err) => return Some(err.to_string()),
    };
    match leasehold::run(listener, config, async {}).await {
        Ok(()) => None,
        Err(err) => Some(err.to_string()),
    }
}

#[tokio::test]
async fn the_api_is_open_only_when_the_operator_says_so() {
    let dir = std::env::temp_dir().join(unique("leasehold-nokeys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    // A keys file with comments and blank lines only would open the API.
    let file = dir.join("keys");
    std::fs::write(&file, "# nobody yet\n\n   # still nobody\n").expect("write");
    let path = file.to_str().expect("utf-8 path");
    let err = start_error(&["--api-keys-file", path])
        .await
        .expect("an empty keys file must refuse to start");
    assert!(err.contains("holds no key"), "{err}");
    // Keys required and none configured.
    let err = start_error(&["--api-keys-required", "true"])
        .await
        .expect("required keys must refuse to start without them");
    assert!(err.contains("LEASEHOLD_API_KEYS_REQUIRED"), "{err}");
    // Required and given: starts.
    std::fs::write(&file, "a-key-that-is-long-enough p\n").expect("write");
    assert_eq!(
        start_error(&["--api-keys-file", path, "--api-keys-required", "true"]).await,
        None
    );
    // No keys: open, and /readyz says so.
    let app = TestApp::spawn(&Backend::Memory).await;
    assert_eq!(app.get("/readyz").await.body["auth"], "open");
    assert_eq!(app.get("/metrics").await.status, StatusCode::OK);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A long-poll's query is checked like a body: `changedSince` that is not a
/// version is 400 naming it (it used to be taken as "stale"); `waitMs`
/// without `changedSince` waits for the next change from now (it used to be
/// ignored: the answer came at once).
#[tokio::test]
async fn long_poll_parameters_are_checked_and_named() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let d = digest();
    for (query, field) in [
        ("changedSince=abc&waitMs=1000", "changedSince"),
        ("changedSince=1.1.1&waitMs=1000", "changedSince"),
        ("changedSince=0.0&waitMs=abc", "waitMs"),
    ] {
        let r = app.get(&format!("/leases/{P}/{d}?{query}")).await;
        problem_ok(query, &r, StatusCode::BAD_REQUEST, "invalid_request");
        assert_eq!(r.body["errors"][0]["field"], field, "{query}: {:#}", r.body);
    }
    // Send back the version you just read: a well-formed long-poll.
    let version = app.inspect(P, &d, None).await.body["version"]
        .as_str()
        .expect("version")
        .to_owned();
    let r = app
        .get(&format!("/leases/{P}/{d}?changedSince={version}&waitMs=1"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    // `changedSince` alone (no wait) answers at once, as before.
    let r = app
        .get(&format!("/leases/{P}/{d}?changedSince={version}"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    // `waitMs` alone waits for the next change: an acquire ends it with the
    // new state, long before the wait would run out.
    let waiting = {
        let (http, url) = (
            app.http.clone(),
            format!("{}/leases/{P}/{d}?waitMs=20000", app.base),
        );
        tokio::spawn(async move { http.get(url).send().await })
    };
    let a = app.attempt().await;
    let started = std::time::Instant::now();
    // Until the long-poll has joined (a watcher is counted) ...
    while app.get("/readyz").await.body["watchers"].as_u64() != Some(1) {
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    // ... then change the lease.
    assert_eq!(app.acquire(P, &d, &a, 30_000).await.outcome(), "acquired");
    let r = waiting.await.expect("task").expect("answer");
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["held"], true, "{body:#}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    app.shutdown().await;
}

/// The front serves the lease verbs itself, except on a path with a `%`,
/// which goes through the router (it percent-decodes): the two answer
/// alike and act on the same lease.
#[tokio::test]
async fn lease_verbs_answer_alike_with_and_without_percent_escapes() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let (a, b) = (app.attempt().await, app.attempt().await);
    let d = digest();
    let plain = format!("{}/leases/{P}/{d}", app.base);
    // The same purpose with its '-' escaped.
    let escaped = format!("{}/leases/invoice%2Dexport/{d}", app.base);
    let send = |rb: reqwest::RequestBuilder, who: &TestAttempt, body: Option<Value>| {
        let rb = rb
            .header("Lease-Owner-Token", &who.token)
            .header("Lease-Operation-Id", &who.op);
        let rb = match body {
            Some(body) => rb.json(&body),
            None => rb,
        };
        async move { TestApp::reply(rb.send().await.expect("send")).await }
    };
    let ttl = Some(json!({"ttlMs": 30000}));

    let acquired = send(app.http.put(&escaped), &a, ttl.clone()).await;
    assert_eq!(acquired.status, StatusCode::CREATED, "{:#}", acquired.body);
    let token = acquired.body["lease"]["fencingToken"].clone();
    assert!(token.is_u64(), "{:#}", acquired.body);
    let seen = TestApp::reply(app.http.get(&plain).send().await.expect("send")).await;
    assert_eq!(seen.status, StatusCode::OK, "{:#}", seen.body);
    assert_eq!(seen.outcome(), "inspected", "{:#}", seen.body);
    assert_eq!(seen.body["held"], true, "{:#}", seen.body);
    assert_eq!(seen.body["fencingToken"], token, "{:#}", seen.body);
    let contended = send(app.http.put(&plain), &b, ttl.clone()).await;
    problem_ok(
        "plain path, held",
        &contended,
        StatusCode::CONFLICT,
        "contended",
    );
    let renewed = send(app.http.patch(&plain), &a, ttl.clone()).await;
    assert_eq!(renewed.outcome(), "renewed", "{:#}", renewed.body);
    assert_eq!(renewed.body["lease"]["fencingToken"], token);
    let released = send(app.http.delete(&escaped), &a, None).await;
    assert_eq!(released.outcome(), "released", "{:#}", released.body);
    let next = send(app.http.put(&plain), &b, ttl.clone()).await;
    assert_eq!(next.status, StatusCode::CREATED, "{:#}", next.body);

    // A bad purpose is named alike on both paths.
    let bad_plain = format!("{}/leases/Invoice/{d}", app.base);
    let bad_escaped = format!("{}/leases/Inv%6Fice/{d}", app.base);
    for (case, url) in [("plain", &bad_plain), ("escaped", &bad_escaped)] {
        let r = send(app.http.put(url), &a, ttl.clone()).await;
        problem_ok(case, &r, StatusCode::BAD_REQUEST, "invalid_request");
        assert_eq!(named_fields(&r), ["purpose"], "{case}: {:#}", r.body);
    }
}
