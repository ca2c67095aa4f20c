//! Unit tests of the body reader: a malformed body names the member it
//! breaks off in or `body`, never a token of the parser's message (`,`,
//! `:`); well-formed JSON that is not the body names the member (422).

use super::*;
use crate::http::attempts::AttemptBody;
use crate::http::leases::{AcquireBody, RenewBody};
use crate::http::operator::BreakBody;

/// What `json_body` makes of `body` as `T`: its status and the fields named.
fn refused<T: DeserializeOwned>(body: &[u8]) -> (u16, Vec<String>) {
    let shown = String::from_utf8_lossy(body);
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("value"),
    );
    let mut problems = Problems::default();
    let read = json_body::<T>(
        &headers,
        Ok(Bytes::copy_from_slice(body)),
        4096,
        &mut problems,
    );
    assert!(matches!(read, Ok(None)), "{shown}: read as a body");
    match problems.finish() {
        Err(ApiError::Invalid { status, errors }) => (
            status.as_u16(),
            errors.into_iter().map(|e| e.field).collect(),
        ),
        other => panic!("{shown}: {other:?}"),
    }
}

/// Bodies that are not JSON, each as every verb's body reads it.
const MALFORMED: &[(&[u8], &str)] = &[
    // Between members: the body.
    (br#"{"ttlMs":30000,,}"#, "body"),
    (br#"{"ttlMs":30000,}"#, "body"),
    (br#"{"ttlMs":30000 "waitMs":1}"#, "body"),
    (br#"{"ttlMs" 30000}"#, "body"),
    (br#"{"ttlMs":3x}"#, "body"),
    (br#"{,}"#, "body"),
    (br#"{"ttlMs":30000"#, "body"),
    (br#"{"ttlMs""#, "body"),
    (br#"{"#, "body"),
    (br#"{"ttlMs":30000} x"#, "body"),
    (b"", "body"),
    (b"\xff\xfe", "body"),
    (b"{\xff}", "body"),
    // Broken off inside a member's value: that member.
    (br#"{"ttlMs":"#, "ttlMs"),
    (br#"{"ttlMs":"30"#, "ttlMs"),
    (b"{\"holder\":\"\xff\"}", "holder"),
    (br#"{"ttlMs":1e400}"#, "ttlMs"),
];

#[test]
fn a_malformed_body_names_the_body_or_the_member_it_breaks_in() {
    for (body, field) in MALFORMED {
        let shown = String::from_utf8_lossy(body);
        for got in [
            refused::<AcquireBody>(body),
            refused::<RenewBody>(body),
            refused::<AttemptBody>(body),
            refused::<BreakBody>(body),
        ] {
            assert_eq!(got, (400, vec![(*field).to_owned()]), "{shown}");
        }
    }
}

#[test]
fn malformed_beats_unknown() {
    // Not JSON, though the member is unknown too: the syntax is told.
    let (status, fields) = refused::<AcquireBody>(b"{\"ttl\":\"\xff\"}");
    assert_eq!((status, fields), (400, vec!["ttl".to_owned()]));
    let (status, fields) = refused::<AttemptBody>(br#"{"ttl": 5,,}"#);
    assert_eq!((status, fields), (400, vec!["body".to_owned()]));
}

#[test]
fn well_formed_json_that_is_not_the_body_names_the_member() {
    let cases: &[(&[u8], u16, &str)] = &[
        (br#"{"ttlMs":"30000"}"#, 422, "ttlMs"),
        (br#"{"ttlMs":true}"#, 422, "ttlMs"),
        (br#"{"ttlMs":30000,"waitMs":[1]}"#, 422, "waitMs"),
        (br#"{"ttlMs":30000,"ttl":5}"#, 422, "ttl"),
        (br#"{"ttlMs":30000,"ttlMs":30000}"#, 422, "ttlMs"),
        (br#"{"waitMs":10}"#, 422, "ttlMs"),
        (br#"{}"#, 422, "ttlMs"),
        (br#"[30000]"#, 422, "body"),
        (br#"30000"#, 422, "body"),
    ];
    for (body, status, field) in cases {
        let got = refused::<AcquireBody>(body);
        let shown = String::from_utf8_lossy(body);
        assert_eq!(got, (*status, vec![(*field).to_owned()]), "{shown}");
    }
}

#[test]
fn a_whole_body_syntax_error_says_where() {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("value"),
    );
    let mut problems = Problems::default();
    let body = Bytes::from_static(br#"{"ttlMs":30000,,}"#);
    let read = json_body::<AcquireBody>(&headers, Ok(body), 4096, &mut problems);
    assert!(matches!(read, Ok(None)));
    let Err(ApiError::Invalid { errors, .. }) = problems.finish() else {
        panic!("not refused");
    };
    assert_eq!(
        errors[0].message,
        "malformed JSON: key must be a string at line 1 column 16"
    );
}
