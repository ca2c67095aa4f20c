//! The OpenAPI 3.1 document, generated from the code.
//!
//! Handlers carry `#[utoipa::path]` (operation, parameters, every status
//! code); [`crate::http::schemas`] holds the response schemas, one per
//! outcome, in the exact shape [`crate::http::problem`] writes them (a unit
//! test here renders every outcome through the real response code and
//! checks it against the document); this module, the document-wide parts (info, license, servers, the
//! optional API key scheme). `leasehold openapi` prints it, the service
//! serves it at `/openapi.json`, and `openapi/leasehold.json` is a committed
//! copy that a test keeps equal to it.

#[cfg(test)]
mod break_tests;
mod document;
#[cfg(test)]
mod same_words;
#[cfg(test)]
mod tests;

pub(super) use self::document::routes;
pub use self::document::{document_json, openapi_json, ApiDoc, REGENERATE, ROUTE};
pub use super::schemas::*;
