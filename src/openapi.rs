//! The OpenAPI 3.1 document, generated from the code.

use utoipa::OpenApi;

/// The API description.
#[derive(OpenApi)]
#[openapi(info(
    title = "leasehold",
    description = "Time-bounded, owner-checked leases with typed outcomes and fencing tokens."
))]
pub struct ApiDoc;

/// The document as pretty JSON (what `leasehold openapi` prints and `openapi/` holds).
pub fn document_json() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_default()
}
