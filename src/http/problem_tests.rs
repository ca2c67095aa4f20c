//! Unit tests of the problem answers: the hand-merged body is the bytes a
//! serialised `Map` gave.

use super::*;

/// What `problem_response` wrote before it merged by hand: the five
/// members inserted into the map, the map serialised.
fn through_a_map(
    status: StatusCode,
    outcome: &str,
    title: &str,
    detail: &str,
    mut members: Map<String, Value>,
) -> Vec<u8> {
    members.insert("type".into(), Value::String(type_uri(outcome)));
    members.insert("title".into(), Value::String(title.to_owned()));
    members.insert("status".into(), Value::from(status.as_u16()));
    members.insert("detail".into(), Value::String(detail.to_owned()));
    members.insert("outcome".into(), Value::String(outcome.to_owned()));
    serde_json::to_vec(&Value::Object(members)).expect("serialised")
}

fn members(answer: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(answer).expect("value") {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn problem_bodies_are_the_bytes_a_map_writes() {
    let contended = |reason, waited_ms| AcquireOutcome::Contended {
        retry_after_ms: 1234,
        waited_ms,
        reason,
    };
    let mut own = vec![
        Map::new(),
        members(&contended(None, None)),
        members(&contended(Some(ContendedReason::Queued), Some(70))),
        members(&contended(Some(ContendedReason::LockDelay), None)),
        members(&RenewOutcome::Lost {
            reason: LostReason::NotOwner,
        }),
        members(&Failure::Unavailable {
            retry_after_ms: 500,
        }),
    ];
    // Names before, between and after the five, one the same as a problem
    // member (replaced by it), values of every JSON kind.
    let mut odd = Map::new();
    odd.insert("a".into(), Value::Null);
    odd.insert("errors".into(), json_array());
    odd.insert("status".into(), Value::from("shadowed"));
    odd.insert("tz".into(), Value::from(-1.5));
    odd.insert("zz \"quoted\"".into(), Value::Bool(true));
    own.push(odd);
    let words = [
        ("Contended", "Someone else holds it."),
        (
            "With \"quotes\"",
            "back\\slash, tab\t, é and 😀, <tags> & '",
        ),
        ("", ""),
    ];
    for members in own {
        for (title, detail) in words {
            for (status, outcome) in [
                (StatusCode::CONFLICT, "contended"),
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                (StatusCode::NOT_FOUND, "owner_operation_conflict"),
            ] {
                let hand = problem_body(status, outcome, title, detail, &members).expect("body");
                let map = through_a_map(status, outcome, title, detail, members.clone());
                assert_eq!(
                    String::from_utf8(hand).expect("UTF-8"),
                    String::from_utf8(map).expect("UTF-8"),
                    "{members:?} {title:?}"
                );
            }
        }
    }
}

fn json_array() -> Value {
    serde_json::json!([{ "field": "ttlMs", "problem": "too small" }, 1, "two"])
}

#[test]
fn retry_after_is_whole_seconds_rounded_up() {
    for (ms, want) in [(0, "1"), (1, "1"), (1000, "1"), (1001, "2"), (90_000, "90")] {
        let mut response = Response::new(axum::body::Body::empty());
        set_retry_after(&mut response, ms);
        assert_eq!(response.headers()[header::RETRY_AFTER], want, "{ms} ms");
    }
}
