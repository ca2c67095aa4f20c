//! The document itself: every operation and schema listed, the
//! document-wide parts (info, license, servers, the optional API key
//! scheme), and [`document_json`].

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::openapi::{ContactBuilder, InfoBuilder, LicenseBuilder, RefOr};
use utoipa::{Modify, OpenApi};

use crate::domain::FieldError;
use crate::domain::{Guarantee, HeldBy, Lease};
use crate::http::app::AppState;
use crate::http::attempts::{AttemptBody, AttemptCreated};
use crate::http::health::{Live, Ready};
use crate::http::leases::{AcquireBody, RenewBody};
use crate::http::problem_table::ProblemType;
use crate::http::schemas::*;

/// The document's route (also its metric label).
pub const ROUTE: &str = "/openapi.json";

/// `GET /openapi.json`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(openapi_json))
}

/// The command that rewrites the committed document.
pub const REGENERATE: &str = "cargo run -q -- openapi > openapi/leasehold.json";

const DESCRIPTION: &str = "\
Time-bounded, owner-checked leases with typed outcomes and fencing tokens.

**Flow.** `POST /attempts` hands out an owner token for one operation id. Send both as the \
`Lease-Owner-Token` and `Lease-Operation-Id` headers on every lease verb: \
`PUT` acquires (optionally waiting server-side with `waitMs`), `PATCH` renews, `DELETE` releases \
and `GET` inspects `/leases/{purpose}/{digest}`. Retrying with the same attempt after a lost reply \
is safe: the answer is `replayed_same_operation`, never a second lease.

**Outcomes.** Every lease answer carries `outcome` (snake_case). Each outcome has its own schema \
and status code. Non-2xx answers are RFC 9457 `application/problem+json` (`type`, `title`, \
`status`, `detail`) with the same `outcome` member and the outcome's fields. Their `type` is \
`/problems/<outcome with dashes>`, relative to the request's URI: the service serves a page there \
saying what the problem means and what to do. `unavailable` (503) \
means definitely not applied; `indeterminate` (504) means the command was sent and may or may not \
have been applied: inspect, or retry with the same attempt.

**Fencing.** `fencingToken` strictly increases per resource across acquisitions. Present it to \
the protected resource, which rejects writes with a token lower than one it has seen: the lease \
alone is an efficiency measure (`guarantee: fenced`).

**Optional members and headers.** A body member not listed as required may be left out: \
`waitMs` is 0 when absent. Inspect takes the attempt headers in any combination: both give `heldBy` \
relative to the attempt, `Lease-Owner-Token` alone compares the owner token only (`caller` needs \
both), `Lease-Operation-Id` alone names no one and gives no `heldBy`. The other lease verbs require \
both headers.

**Watching.** Every inspect answer carries `version`, which changes when the resource is acquired, \
released, expires or its holder label changes. Inspect with `changedSince=<version>&waitMs=<ms>` \
long-polls for the next change; `GET /leases/{purpose}/{digest}/events` streams every change as \
server-sent events (`Last-Event-ID` resumes). Both count against the service's watch cap.

**Validity.** Treat a lease as yours for at most `remainingMs` minus the drift budget (10 ms by \
default), counted from when you *sent* the request.

**Bounds.** The numbers in this document are the defaults: `ttlMs` from twice the drift budget \
(20) to 3600000, `waitMs` up to 30000, request bodies up to 16 KiB. A deployment may configure \
other bounds; a value outside them is answered `422 invalid_request` naming the field.

**Authentication.** Optional: when the service runs with `LEASEHOLD_API_KEYS_FILE`, send \
`Authorization: Bearer <key>` (401 without a valid key, 403 when the key may not use the purpose).";

/// The API description.
#[derive(OpenApi)]
#[openapi(
    paths(
        crate::http::attempts::create,
        crate::http::leases::acquire,
        crate::http::leases::renew,
        crate::http::leases::release,
        crate::http::leases::inspect,
        crate::http::list::list,
        crate::http::history::history,
        crate::http::waiters::waiters,
        crate::http::watch::events,
        crate::http::operator::break_lease,
        crate::http::purpose_watch::events,
        crate::http::health::livez,
        crate::http::health::readyz,
        crate::http::instances::instances,
        crate::http::sessions::create,
        crate::http::sessions::read,
        crate::http::sessions::renew,
        crate::http::sessions::end,
        crate::http::keepalive::keepalive,
        crate::http::sessions::acquire,
        crate::http::sessions::release,
        crate::http::health::metrics_on_api,
        openapi_json,
        crate::http::docs::page,
        crate::http::console::page,
        crate::http::console::purposes::purposes,
        crate::http::problems::page,
    ),
    components(schemas(
        AttemptBody, AttemptCreated, AcquireBody, RenewBody, Lease, Guarantee, HeldBy,
        Acquired, ReplayedSameOperation, Renewed, Released, AlreadyAbsent, ReleaseSuccess, Inspected,
        OwnerOperationConflictProblem, ContendedProblem, LimitMismatchProblem, AcquireConflict,
        LostAbsentProblem, LostNotOwnerProblem, NotOwnerProblem,
        UnavailableProblem, OverloadedProblem, RequestTimeoutProblem, BodyTimeoutProblem, ServiceUnavailable,
        IndeterminateProblem, InvalidRequestProblem, FieldError,
        PayloadTooLargeProblem, HeadersTooLargeProblem, UnsupportedMediaTypeProblem, UnauthorizedProblem, ForbiddenProblem,
        NotFoundProblem, LeaseNotFound, NotReadyProblem, Live, Ready, ProblemType,
        crate::http::list::Listed, crate::domain::ListedLease,
        crate::http::operator::BreakBody, Broken, NothingToBreakProblem, BreakNotFound, RevocationView,
        crate::domain::EndedReason,
        crate::http::history::HistoryAnswer, crate::domain::HistoryItem,
        crate::http::waiters::WaitersAnswer, crate::domain::Waiter, crate::domain::QueueInstance,
        crate::http::console::purposes::PurposesListed, crate::http::console::purposes::PurposeScopes,
        crate::http::console::purposes::AnyPurpose, crate::http::console::purposes::KeyScope,
        crate::http::console::purposes::KeyAccess,
        crate::http::instances::InstancesAnswer, crate::http::instances::InstanceItem,
        crate::http::session_schemas::SessionBody, crate::http::session_schemas::SessionRenewBody,
        crate::http::session_schemas::SessionAcquireBody, crate::http::session_schemas::SessionDoc,
        crate::http::session_schemas::LostLeaseDoc, crate::http::session_schemas::SessionLeaseDoc,
        crate::http::session_schemas::SessionAnswer, crate::http::keepalive::KeepaliveEvent,
        crate::http::schemas::SessionLostProblem, crate::http::schemas::SessionLostReason,
        crate::http::schemas::SessionNotOwnerProblem, crate::http::schemas::SessionFullProblem,
        crate::http::schemas::SessionCreateConflict, crate::http::schemas::SessionAcquireConflict,
    )),
    modifiers(&Meta),
    tags(
        (name = "attempts", description = "Owner tokens for units of work. Stateless: nothing is stored."),
        (name = "leases", description = "Acquire, renew, release and inspect leases. Every answer is a typed outcome."),
        (name = "sessions", description = "One liveness for many leases: make, renew, end and read sessions, keep one alive over an event stream, and take leases that end with it."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
    )
)]
pub struct ApiDoc;

/// Info, license, servers, the API key scheme, and required `Retry-After` headers.
struct Meta;

impl Modify for Meta {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        doc.info = InfoBuilder::new()
            .title("leasehold")
            .version(env!("CARGO_PKG_VERSION"))
            .description(Some(DESCRIPTION))
            .license(Some(
                LicenseBuilder::new()
                    .name("Apache-2.0")
                    .identifier(Some("Apache-2.0"))
                    .build(),
            ))
            .contact(Some(
                ContactBuilder::new()
                    .name(Some("leasehold maintainers"))
                    .build(),
            ))
            .build();
        let mut server = Server::new("http://127.0.0.1:8080");
        server.description = Some("A local instance with the default LEASEHOLD_LISTEN".into());
        doc.servers = Some(vec![server]);
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "apiKey",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key from LEASEHOLD_API_KEYS_FILE, each allowed a set of purposes. \
                         Only enforced when the service is configured with keys.",
                    ))
                    .build(),
            ),
        );
        // Where `Retry-After` is declared it is always sent: say so, so a
        // client (and a conformance checker) may rely on it.
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                for response in op.responses.responses.values_mut() {
                    let RefOr::T(response) = response else {
                        continue;
                    };
                    if let Some(RefOr::T(header)) = response.headers.get_mut("Retry-After") {
                        // A status shared by outcomes of which only some
                        // carry it says so ("... not with ...").
                        if header
                            .description
                            .as_deref()
                            .is_some_and(|d| d.contains("not with"))
                        {
                            continue;
                        }
                        header
                            .extensions
                            .get_or_insert_with(Default::default)
                            .insert("required".into(), serde_json::Value::Bool(true));
                    }
                }
            }
        }
        // Break's body may be left out (read as `{}`): not required. (utoipa
        // would say so only for `Option<BreakBody>`, whose schema then also
        // allows a JSON `null` body, which the service refuses.)
        if let Some(RefOr::T(body)) = doc
            .paths
            .paths
            .get_mut("/leases/{purpose}/{digest}/break")
            .and_then(|item| item.post.as_mut())
            .and_then(|op| op.request_body.as_mut())
        {
            body.required = Some(utoipa::openapi::Required::False);
        }
    }
}

/// The document as pretty JSON (what `leasehold openapi` prints, `/openapi.json`
/// serves and `openapi/leasehold.json` holds).
pub fn document_json() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_default()
}

// ------------------------------------------------------------- outcome tags --

/// The OpenAPI document.
///
/// This document: OpenAPI 3.1, generated from the code (also printed by
/// `leasehold openapi` and committed as `openapi/leasehold.json`).
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "openapi",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document.", content_type = "application/json", body = Object,
        example = json!({"openapi": "3.1.0", "info": {"title": "leasehold", "version": "0.1.0"}, "paths": {}}))),
    security(())
)]
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
        .into_response()
}
