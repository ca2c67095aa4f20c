//! The session operations' problem answers (docs/design.md §18), in the
//! shape [`crate::http::problem`] writes them.

use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use super::answers::{
    example, example_with, problem, LostTag, NotOwnerTag, OwnerOperationConflictProblem,
    OwnerOperationConflictTag, SessionFullTag,
};
use super::{ContendedProblem, LimitMismatchProblem};
use crate::http::problem_table::{
    ProblemType, LOST_SESSION_ENDED, SESSION_NOT_OWNER, SESSION_OTHER_OPERATION,
};

/// `reason` of a session's 404 `lost`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionLostReason {
    /// Ended by `DELETE`, or its keep-alive stream closed.
    SessionEnded,
    /// Not renewed in time.
    SessionExpired,
    /// No such session.
    Absent,
}

problem! {
    /// `lost` (404): the session is gone (`reason`); its leases ended with
    /// it. Stop the work they protected.
    #[schema(example = json!(example_with(ProblemType::Lost, LOST_SESSION_ENDED, 404, json!({"reason": "session_ended"}))))]
    SessionLostProblem, LostTag, 404 ..= 404 {
        #[schema(inline)]
        reason: SessionLostReason,
    }
}

problem! {
    /// `not_owner` (409): the owner token sent is not the session's
    /// secret; nothing was changed.
    #[schema(example = json!(example_with(ProblemType::NotOwner, SESSION_NOT_OWNER, 409, json!({}))))]
    SessionNotOwnerProblem, NotOwnerTag, 409 ..= 409 {}
}

problem! {
    /// `session_full` (409): the session holds the most leases a session
    /// may; the lease was not taken.
    #[schema(example = json!(example(ProblemType::SessionFull, json!({"limit": 10000}))))]
    SessionFullProblem, SessionFullTag, 409 ..= 409 {
        /// The most leases a session holds.
        #[schema(minimum = 1)]
        limit: u64,
    }
}

problem! {
    /// `owner_operation_conflict` (409): the owner token made a live
    /// session for another operation id; nothing was made.
    #[schema(example = json!(example_with(ProblemType::OwnerOperationConflict, SESSION_OTHER_OPERATION, 409, json!({}))))]
    SessionCreateConflict, OwnerOperationConflictTag, 409 ..= 409 {}
}

/// The 409 answers of an acquire on a session.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(discriminator(property_name = "outcome", mapping(
    ("owner_operation_conflict" = "#/components/schemas/OwnerOperationConflictProblem"),
    ("contended" = "#/components/schemas/ContendedProblem"),
    ("limit_mismatch" = "#/components/schemas/LimitMismatchProblem"),
    ("not_owner" = "#/components/schemas/SessionNotOwnerProblem"),
    ("session_full" = "#/components/schemas/SessionFullProblem"),
)))]
pub enum SessionAcquireConflict {
    /// `owner_operation_conflict`.
    OwnerOperationConflict(OwnerOperationConflictProblem),
    /// `contended`.
    Contended(ContendedProblem),
    /// `limit_mismatch`.
    LimitMismatch(LimitMismatchProblem),
    /// `not_owner`.
    NotOwner(SessionNotOwnerProblem),
    /// `session_full`.
    SessionFull(SessionFullProblem),
}
