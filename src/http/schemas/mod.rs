//! The answers' schemas for the OpenAPI document, one per outcome, in the
//! exact shape [`crate::http::problem`] writes them, and the event streams'
//! events: what the handlers' `#[utoipa::path]` annotations name. A leaf
//! under the handlers: they import it, and it imports none of them (the
//! document that names the handlers is [`crate::http::openapi`], which
//! imports both).

mod answers;
mod events;
mod purpose_events;
mod sessions;

pub use self::answers::*;
pub use self::events::{lease_events, LeaseEvent, STATE_EVENT};
pub use self::purpose_events::{purpose_events, PurposeEventDoc};
pub use self::sessions::{
    SessionAcquireConflict, SessionCreateConflict, SessionFullProblem, SessionLostProblem,
    SessionLostReason, SessionNotOwnerProblem,
};
