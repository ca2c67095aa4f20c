//! Malformed bodies on every verb that reads one (PUT and PATCH on a
//! lease, `POST /attempts`, `POST …/break`), answered by the hand-written
//! paths as hyper answers them, and both naming the member the body
//! breaks off in or `body`: never a token of the parser's message (`,`,
//! `:`), which a syntax error between members once named as its field.

use serde_json::Value;

use super::cases::{differ, Fresh, LEASE, WAIT};
use super::wire::{Conn, Next};
use crate::common::app::{Backend, TestApp};

/// `method target` with a JSON `body` (bytes: some are not UTF-8) and the
/// turn's attempt.
fn with_body(method: &str, target: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{method} {target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nlease-owner-token: {{t}}\r\nlease-operation-id: {{o}}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The bodies, their status and the one field named (`{m}`: the verb's
/// member, `{v}` a good value of it, `{w}` one of the wrong type).
const BODIES: &[(&str, &[u8], u16, &str)] = &[
    ("two commas", br#"{"{m}":{v},,}"#, 400, "body"),
    ("trailing comma", br#"{"{m}":{v},}"#, 400, "body"),
    ("no comma", br#"{"{m}":{v} "ttl":1}"#, 400, "body"),
    ("no colon", br#"{"{m}" {v}}"#, 400, "body"),
    ("a letter after a number", br#"{"{m}":3x}"#, 400, "body"),
    ("cut after the value", br#"{"{m}":{v}"#, 400, "body"),
    ("cut after the colon", br#"{"{m}":"#, 400, "{m}"),
    ("not UTF-8", b"\xff\xfe{}", 400, "body"),
    ("not UTF-8 in a value", b"{\"{m}\":\"\xff\"}", 400, "{m}"),
    ("wrong type", br#"{"{m}":{w}}"#, 422, "{m}"),
    ("unknown member", br#"{"{m}":{v},"ttl":5}"#, 422, "ttl"),
];

/// The verbs that read a body: method, target, and their `{m}`, `{v}`,
/// `{w}`.
const VERBS: &[(&str, &str, [&str; 3])] = &[
    ("PUT", LEASE, ["ttlMs", "30000", r#""30000""#]),
    ("PATCH", LEASE, ["ttlMs", "30000", "true"]),
    ("POST", "/attempts", ["operationId", r#""op-1""#, "30000"]),
    (
        "POST",
        "/leases/diff/{d}/break",
        ["fencingToken", "1", r#""1""#],
    ),
];

/// `bytes` with every `from` replaced by `to`.
fn replaced(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + to.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.starts_with(from.as_bytes()) {
            out.extend_from_slice(to.as_bytes());
            rest = &rest[from.len()..];
        } else {
            out.push(rest[0]);
            rest = &rest[1..];
        }
    }
    out
}

/// The status, outcome and fields of one answer to `template`.
async fn refusal(app: &TestApp, hyper: bool, template: &[u8]) -> (u16, String, Vec<String>) {
    let fresh = Fresh::new(app).await;
    let mut conn = if hyper {
        Conn::hyper(app.addr).await
    } else {
        Conn::open(app.addr).await
    };
    conn.send(&fresh.fill(template)).await;
    let Next::Answer(answer) = conn.next(WAIT).await else {
        panic!("no answer to {}", String::from_utf8_lossy(template));
    };
    let body: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    let fields = body["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|e| e["field"].as_str().unwrap_or("<none>").to_owned())
                .collect()
        })
        .unwrap_or_default();
    let outcome = body["outcome"].as_str().unwrap_or("<none>").to_owned();
    (answer.status, outcome, fields)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_answered_as_hyper_answers_them_naming_no_token() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let mut cases = Vec::new();
    let mut found = Vec::new();
    for (method, target, [m, v, w]) in VERBS {
        for (what, body, status, field) in BODIES {
            let body = replaced(&replaced(&replaced(body, "{m}", m), "{v}", v), "{w}", w);
            let field = field.replace("{m}", m);
            let template = with_body(method, target, &body);
            for hyper in [false, true] {
                let got = refusal(&app, hyper, &template).await;
                let want = (*status, "invalid_request".to_owned(), vec![field.clone()]);
                if got != want {
                    found.push(format!(
                        "{method} {target}, {what} (hyper's turn: {hyper}): {got:?}, wanted {want:?}"
                    ));
                }
            }
            cases.push((format!("{method} {target}, {what}"), template));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
    let cases: Vec<(&str, Vec<u8>)> = cases.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    differ(&app, &cases).await;
    app.shutdown().await;
}
