//! The OpenAPI 3.1 document, generated from the code.
//!
//! Handlers carry `#[utoipa::path]` (operation, parameters, every status
//! code); this module holds the response schemas, one per outcome, in the
//! exact shape [`crate::http::problem`] writes them (a unit test renders
//! every outcome through the real response code and checks it against the
//! document), and the document-wide parts (info, license, servers, the
//! optional API key scheme). `leasehold openapi` prints it, the service
//! serves it at `/openapi.json`, and `openapi/leasehold.json` is a committed
//! copy that a test keeps equal to it.

#[cfg(test)]
mod break_tests;
mod document;
mod events;
mod purpose_events;
#[cfg(test)]
mod same_words;
mod schemas;
#[cfg(test)]
mod tests;

pub(super) use self::document::routes;
pub use self::document::{document_json, openapi_json, ApiDoc, REGENERATE, ROUTE};
pub use self::events::{lease_events, LeaseEvent, STATE_EVENT};
pub use self::purpose_events::{purpose_events, PurposeEventDoc};
pub use self::schemas::*;
