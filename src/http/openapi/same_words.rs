//! Every problem says the same words in its answers, on its page and in
//! the document's examples: all three read them from the problem table,
//! and this test renders each through the real code and compares.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::domain::{
    AcquireOutcome, ContendedReason, Failure, LostReason, OperationId, ReleaseOutcome, RenewOutcome,
};
use crate::http::health::not_ready;
use crate::http::problem::{body_timeout, respond_one, ApiError, FieldError};
use crate::http::problem_table::ProblemType;
use crate::http::problems::html;

/// Every problem's answers: its usual one first (`true`), then any other.
fn answers() -> Vec<(ProblemType, bool, Response)> {
    use ProblemType as P;
    let contended = |reason| AcquireOutcome::Contended {
        retry_after_ms: 50,
        waited_ms: None,
        reason,
    };
    // The document's example of `invalid_request`, answered for real.
    let invalid = ApiError::Invalid {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        errors: vec![FieldError {
            field: "ttlMs".into(),
            message: "must be between 20 and 3600000 milliseconds".into(),
        }],
    };
    let operation_id = OperationId::parse("export-1").expect("operation id");
    vec![
        (P::InvalidRequest, true, invalid.into_response()),
        (
            P::Unauthorized,
            true,
            ApiError::Unauthorized.into_response(),
        ),
        (P::Forbidden, true, ApiError::Forbidden.into_response()),
        (
            P::Forbidden,
            false,
            ApiError::MissingScope("metrics").into_response(),
        ),
        (
            P::Forbidden,
            false,
            ApiError::MissingPurposeScope {
                scope: "write",
                purpose: crate::domain::Purpose::parse("invoice-export").expect("purpose"),
            }
            .into_response(),
        ),
        (P::NotFound, true, ApiError::NotFound.into_response()),
        (
            P::MethodNotAllowed,
            true,
            ApiError::MethodNotAllowed.into_response(),
        ),
        (
            P::PayloadTooLarge,
            true,
            ApiError::TooLarge { limit: 16384 }.into_response(),
        ),
        (
            P::UnsupportedMediaType,
            true,
            ApiError::UnsupportedMediaType.into_response(),
        ),
        (
            P::HeadersTooLarge,
            true,
            ApiError::HeadersTooLarge { limit: 16384 }.into_response(),
        ),
        (
            P::OwnerOperationConflict,
            true,
            respond_one(&AcquireOutcome::OwnerOperationConflict { retry_after_ms: 50 }),
        ),
        (P::Contended, true, respond_one(&contended(None))),
        (
            P::Contended,
            false,
            respond_one(&contended(Some(ContendedReason::LockDelay))),
        ),
        (
            P::Contended,
            false,
            respond_one(&contended(Some(ContendedReason::Queued))),
        ),
        (
            P::LimitMismatch,
            true,
            respond_one(&AcquireOutcome::LimitMismatch { limit: 4 }),
        ),
        (
            P::Lost,
            true,
            respond_one(&RenewOutcome::Lost {
                reason: LostReason::Absent,
            }),
        ),
        (
            P::Lost,
            false,
            respond_one(&RenewOutcome::Lost {
                reason: LostReason::NotOwner,
            }),
        ),
        (
            P::Lost,
            false,
            respond_one(&RenewOutcome::Lost {
                reason: LostReason::Revoked,
            }),
        ),
        (
            P::Lost,
            false,
            respond_one(&RenewOutcome::Lost {
                reason: LostReason::MaxHold,
            }),
        ),
        (P::NotOwner, true, respond_one(&ReleaseOutcome::NotOwner)),
        (
            P::NothingToBreak,
            true,
            respond_one(&crate::domain::BreakOutcome::NothingToBreak),
        ),
        (
            P::SessionFull,
            true,
            respond_one(&crate::domain::SessionOutcome::SessionFull { limit: 10_000 }),
        ),
        (
            P::Lost,
            false,
            respond_one(&crate::domain::SessionOutcome::Lost {
                reason: crate::domain::SessionGone::SessionEnded,
            }),
        ),
        (
            P::Lost,
            false,
            respond_one(&crate::domain::SessionOutcome::Lost {
                reason: crate::domain::SessionGone::SessionExpired,
            }),
        ),
        (
            P::NotOwner,
            false,
            respond_one(&crate::domain::SessionOutcome::NotOwner),
        ),
        (
            P::OwnerOperationConflict,
            false,
            respond_one(&crate::domain::SessionOutcome::OwnerOperationConflict),
        ),
        (
            P::Unavailable,
            true,
            respond_one(&Failure::Unavailable { retry_after_ms: 50 }),
        ),
        (
            P::Overloaded,
            true,
            respond_one(&Failure::Overloaded { retry_after_ms: 50 }),
        ),
        (
            P::RequestTimeout,
            true,
            ApiError::RequestTimeout.into_response(),
        ),
        (P::RequestTimeout, false, body_timeout()),
        (
            P::NotReady,
            true,
            not_ready("standalone", 0, Some("connection refused".into())),
        ),
        (P::NotReady, false, not_ready("standalone", 0, None)),
        (
            P::Indeterminate,
            true,
            respond_one(&Failure::Indeterminate { operation_id }),
        ),
        (P::Internal, true, ApiError::Internal.into_response()),
    ]
}

/// A documented problem example: outcome, status, title, detail.
type Example = (String, u64, String, String);

fn examples() -> Vec<Example> {
    let doc: Value = serde_json::from_str(&super::document_json()).expect("document");
    let text = |v: &Value| v.as_str().expect("a string").to_owned();
    doc["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .values()
        .filter(|schema| !schema["properties"]["type"].is_null())
        .map(|schema| &schema["example"])
        .map(|e| {
            let status = e["status"].as_u64().expect("example status");
            (
                text(&e["outcome"]),
                status,
                text(&e["title"]),
                text(&e["detail"]),
            )
        })
        .collect()
}

/// The page's heading.
fn page_title(problem: ProblemType) -> String {
    let page = html(problem);
    let start = page.find("<h1>").expect("a heading") + "<h1>".len();
    let end = page.find("</h1>").expect("a heading's end");
    page[start..end].to_owned()
}

#[tokio::test]
async fn every_problem_has_one_title_in_its_answers_page_and_document() {
    let examples = examples();
    let mut answered: Vec<Example> = Vec::new();
    let mut usual = Vec::new();
    for (problem, is_usual, response) in answers() {
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let body: Value = serde_json::from_slice(&body).expect("JSON");
        let outcome = problem.outcome();
        let title = body["title"].as_str().expect("title").to_owned();
        let detail = body["detail"].as_str().expect("detail").to_owned();
        assert_eq!(body["outcome"], Value::from(outcome.as_str()));
        // The one status a page does not list: a body that never came (408).
        assert!(
            problem.row().statuses.contains(&status) || (!is_usual && status == 408),
            "{outcome}: answered {status}, its page lists {:?}",
            problem.row().statuses
        );
        if is_usual {
            usual.push(problem);
            assert_eq!(title, page_title(problem), "{outcome}: answer and page");
            let documented = examples
                .iter()
                .find(|(o, s, _, _)| *o == outcome && *s == u64::from(status));
            match documented {
                Some((_, _, doc_title, _)) => {
                    assert_eq!(&title, doc_title, "{outcome}: answer and document");
                }
                None => assert!(
                    matches!(
                        problem,
                        ProblemType::MethodNotAllowed | ProblemType::Internal
                    ),
                    "{outcome} {status}: no example in the document"
                ),
            }
        }
        answered.push((outcome, u64::from(status), title, detail));
    }
    assert_eq!(
        usual,
        ProblemType::ALL,
        "a usual answer of every problem, in order"
    );
    // Every example in the document says what a real answer says.
    for example in &examples {
        assert!(
            answered.contains(example),
            "the document's example {example:?} is no answer's"
        );
    }
    assert!(examples.len() >= 19, "{} problem examples", examples.len());
}
