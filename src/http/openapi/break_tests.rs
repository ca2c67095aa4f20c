//! Break's outcomes (and what a broken or held-out holder hears), rendered by the real response code, conform to the
//! responses the document declares for `POST …/break` (as `tests.rs` does
//! for the other lease operations).

use axum::response::IntoResponse;
use serde_json::Value;

use super::tests::{check, missing_scope, refusals};
use crate::domain::{BreakOutcome, EndedReason, Failure, LostReason, ReleaseOutcome, RenewOutcome};
use crate::http::problem::{respond_one, ApiError};

#[tokio::test]
async fn every_break_outcome_conforms_to_its_documented_response() {
    // Break: both outcomes, every failure it can meet, every refusal.
    let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
    let break_path = "/leases/{purpose}/{digest}/break";
    let mut breaks = vec![
        respond_one(&BreakOutcome::Broken { permits: 2 }),
        respond_one(&BreakOutcome::NothingToBreak),
        respond_one(&Failure::Unavailable {
            retry_after_ms: 1000,
        }),
        respond_one(&Failure::Overloaded { retry_after_ms: 50 }),
        respond_one(&Failure::Indeterminate {
            operation_id: crate::domain::OperationId::parse("break").expect("op"),
        }),
        ApiError::RequestTimeout.into_response(),
        ApiError::Forbidden.into_response(),
        missing_scope("admin"),
        ApiError::NotFound.into_response(),
    ];
    breaks.extend(refusals(true));
    // What a broken holder hears on renew and release.
    let lease_path = "/leases/{purpose}/{digest}";
    let revoked = respond_one(&RenewOutcome::Lost {
        reason: LostReason::Revoked,
    });
    assert_eq!(check(&doc, lease_path, "patch", revoked).await.0, 404);
    let absent = respond_one(&ReleaseOutcome::AlreadyAbsent {
        reason: Some(EndedReason::Revoked),
    });
    let (status, body) = check(&doc, lease_path, "delete", absent).await;
    assert_eq!(
        (status.as_u16(), &body["reason"]),
        (200, &Value::from("revoked"))
    );
    // And a holder whose hold bound ran out (`maxHoldMs`).
    let held_out = respond_one(&RenewOutcome::Lost {
        reason: LostReason::MaxHold,
    });
    let (status, body) = check(&doc, lease_path, "patch", held_out).await;
    assert_eq!(
        (status.as_u16(), &body["reason"]),
        (404, &Value::from("max_hold"))
    );
    let absent = respond_one(&ReleaseOutcome::AlreadyAbsent {
        reason: Some(EndedReason::MaxHold),
    });
    let (status, body) = check(&doc, lease_path, "delete", absent).await;
    assert_eq!(
        (status.as_u16(), &body["reason"]),
        (200, &Value::from("max_hold"))
    );
    let mut seen_break = std::collections::BTreeSet::new();
    for response in breaks {
        let (status, _) = check(&doc, break_path, "post", response).await;
        seen_break.insert(status.as_u16());
    }
    for status in doc["paths"][break_path]["post"]["responses"]
        .as_object()
        .expect("responses")
        .keys()
    {
        let status: u16 = status.parse().expect("numeric status");
        assert!(seen_break.contains(&status), "break {status} never checked");
    }
}
