//! `/leases/{purpose}/{digest}`: acquire (PUT), renew (PATCH), release
//! (DELETE) and inspect (GET).

use axum::body::Bytes;
use axum::extract::{FromRequest as _, RawQuery, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use axum::Router;
use serde::Deserialize;
use utoipa::ToSchema;

use super::app::AppState;
use super::auth::Role;
use super::extract::{self, Headers, HeadersAndBody, Problems};
use super::extract::{path_resource, RawPath};
use super::problem::{respond, ApiError};
use super::verb::Verb;
use super::watch;
use crate::domain::{Attempt, HolderLabel, LeaseShape, Mode, ResourceId};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    AcquireConflict, Acquired, BodyTimeoutProblem, ForbiddenProblem, HeadersTooLargeProblem,
    IndeterminateProblem, Inspected, InvalidRequestProblem, LeaseNotFound, LostNotOwnerProblem,
    NotFoundProblem, NotOwnerProblem, PayloadTooLargeProblem, ReleaseSuccess, Renewed,
    ReplayedSameOperation, ServiceUnavailable, UnauthorizedProblem, UnsupportedMediaTypeProblem,
};
use crate::service::AcquireRequest;

/// The route template (also its metric label).
pub const ROUTE: &str = "/leases/{purpose}/{digest}";

/// The four lease verbs.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(
        ROUTE,
        put(acquire).patch(renew).delete(release).get(inspect),
    )
}

/// The four lease verbs without the router. The front sends a request
/// here when the front door's classifier (`lanes::classify`) put it in a
/// verb's lane (the lease route, no `%`, which the router would decode):
/// the same handlers, given what the router's extractors would give them,
/// without the router's per-request work (matching, the path parameters'
/// extension, a boxed future per route and per layer).
pub(super) async fn serve(app: AppState, verb: Verb, req: Request) -> Response {
    let path = RawPath::Plain(req.uri().clone());
    match verb {
        Verb::Inspect => {
            let query = req.uri().query().map(ToOwned::to_owned);
            let headers = req.into_parts().0.headers;
            inspect(State(app), path, RawQuery(query), Headers(headers)).await
        }
        Verb::Release => {
            let headers = req.into_parts().0.headers;
            release(State(app), path, Headers(headers)).await
        }
        Verb::Acquire => match HeadersAndBody::from_request(req, &app).await {
            Ok(parts) => acquire(State(app), path, parts).await,
            Err(refused) => refused,
        },
        Verb::Renew => match HeadersAndBody::from_request(req, &app).await {
            Ok(parts) => renew(State(app), path, parts).await,
            Err(refused) => refused,
        },
    }
}

/// Body of an acquire.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(example = json!({"ttlMs": 30000, "waitMs": 5000, "holder": "worker-7:8080"}))]
pub struct AcquireBody {
    /// Lease time to live in milliseconds, from twice the drift budget (20 by
    /// default) to the largest TTL (3600000 by default).
    #[serde(deserialize_with = "whole_ms")]
    #[schema(minimum = 20, maximum = 3600000, example = 30000)]
    pub ttl_ms: u64,
    /// Optional: how long to wait server-side while someone else holds the
    /// lease, in milliseconds (left out or 0: try once; at most 30000 by
    /// default). A release wakes a waiter at once; a waiter gives up at its
    /// deadline, when the client disconnects, or at shutdown (answered
    /// `contended`).
    // No `default` keyword in the schema: code generators (openapi-typescript)
    // make a member with a default required, and a client must be able to
    // leave it out.
    #[serde(default, deserialize_with = "whole_ms")]
    #[schema(minimum = 0, maximum = 30000, example = 5000)]
    pub wait_ms: u64,
    /// Optional: a public label for the holder (a pod name, `host:port`),
    /// 1–256 characters, no control characters. Anyone the purpose is open
    /// to sees it (inspect, list, watch): never put a secret here.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$", example = "worker-7:8080")]
    pub holder: Option<HolderLabel>,
    /// Optional: how many may hold the resource at once (1 to 10000; left
    /// out: 1, a plain lease). Every holder must ask with the same limit
    /// (another while held: `limit_mismatch`).
    #[serde(default, deserialize_with = "whole_opt")]
    #[schema(minimum = 1, maximum = 10000, example = 1, nullable = false)]
    pub limit: Option<u64>,
    /// Optional: `exclusive` (left out; counted by `limit`) or `shared` (any
    /// number of shared holders, and no exclusive one meanwhile).
    #[serde(default)]
    #[schema(nullable = false)]
    pub mode: Option<Mode>,
    /// Optional: when this lease *expires* (is not released), nobody else
    /// may acquire the resource for this long (0 to 60000 ms; left out: 0);
    /// its own owner token may, at once and ahead of any waiters, which
    /// ends the delay.
    #[serde(default, deserialize_with = "whole_opt")]
    #[schema(minimum = 0, maximum = 60000, example = 0, nullable = false)]
    pub lock_delay_ms: Option<u64>,
    /// Optional: bounds the whole hold, in milliseconds from the
    /// acquisition (twice the drift budget, 20 by default, to 2592000000,
    /// 30 days; left out: no bound). No renewal reaches past
    /// `acquiredAt + maxHoldMs`: the renew that would is granted the time
    /// left, and after it the lease is `lost` with `reason: max_hold`. A
    /// `ttlMs` above it is granted `maxHoldMs`.
    #[serde(default, deserialize_with = "whole_opt")]
    #[schema(
        minimum = 20,
        maximum = 2592000000_i64,
        example = 3600000,
        nullable = false
    )]
    pub max_hold_ms: Option<u64>,
}

/// Body of a renew.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schema(example = json!({"ttlMs": 30000}))]
pub struct RenewBody {
    /// New time to live in milliseconds, counted from now (same bounds as acquire).
    #[serde(deserialize_with = "whole_ms")]
    #[schema(minimum = 20, maximum = 3600000, example = 30000)]
    pub ttl_ms: u64,
    /// Optional: a new public holder label (etcd's Proclaim); the fencing
    /// token stays. Left out: the label stays as it is.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$", example = "worker-7:8080")]
    pub holder: Option<HolderLabel>,
}

/// A non-negative whole number of milliseconds. JSON Schema counts `611.0`
/// as the integer 611, so it is accepted as such; a fraction, a negative
/// number, `null` or a non-number is not.
pub(super) fn whole_ms<'de, D: serde::Deserializer<'de>>(de: D) -> Result<u64, D::Error> {
    struct Whole;
    impl serde::de::Visitor<'_> for Whole {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a non-negative integer number of milliseconds")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<u64, E> {
            // 2^53: beyond it a float no longer names one integer; far
            // beyond every bound anyway, so saturate and let the bound reject it.
            if v.fract() == 0.0 && v >= 0.0 {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Ok(v.min(9_007_199_254_740_992.0) as u64)
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
            }
        }
    }
    de.deserialize_any(Whole)
}

/// An optional [`whole_ms`].
pub(super) fn whole_opt<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    whole_ms(de).map(Some)
}

fn parsed<T>(value: Option<T>) -> Result<T, ApiError> {
    value.ok_or(ApiError::Internal)
}

/// Acquire a lease.
///
/// Takes the lease for the attempt in the headers, or reports who holds it.
/// With `waitMs > 0` the request waits server-side while someone else holds
/// the lease: a release wakes it at once, an expiry within a few
/// milliseconds. Retrying with the same attempt after a lost reply answers
/// `replayed_same_operation` (200) with the store's remaining TTL, never a
/// second lease and never an extension. Each acquisition issues a
/// `fencingToken` strictly greater than every earlier one for the resource.
#[utoipa::path(
    put,
    path = ROUTE,
    operation_id = "acquireLease",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for: a lowercase letter, then up to 62 lowercase letters, digits or '-'.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource, never its raw id: `v1.` and the 64 lowercase hex digits of the SHA-256 of the raw id (`leasehold digest <raw-id>` prints it).",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("Lease-Owner-Token" = String, Header, description = "The owner token from `POST /attempts`: a bearer secret, 32 characters of base64url.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32, example = "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz"),
        ("Lease-Operation-Id" = String, Header, description = "The operation id the owner token was created for: 1 to 128 characters of `[A-Za-z0-9._~-]`.",
            pattern = r"^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128, example = "export-2026-12-02"),
    ),
    request_body(content = AcquireBody, description = "The TTL, and how long to wait server-side.",
        example = json!({"ttlMs": 30000, "waitMs": 5000})),
    responses(
        (status = 201, description = "`acquired`: the caller now holds the lease.", body = Acquired,
            links(
                ("renew" = (operation_id = "renewLease", description = "Renew the lease just acquired.", parameters(
                ("purpose" = "$request.path.purpose"), ("digest" = "$request.path.digest"),
                ("header.Lease-Owner-Token" = "$request.header.Lease-Owner-Token"),
                ("header.Lease-Operation-Id" = "$request.header.Lease-Operation-Id"),
            ))),
                ("release" = (operation_id = "releaseLease", description = "Release the lease just acquired.", parameters(
                ("purpose" = "$request.path.purpose"), ("digest" = "$request.path.digest"),
                ("header.Lease-Owner-Token" = "$request.header.Lease-Owner-Token"),
                ("header.Lease-Operation-Id" = "$request.header.Lease-Operation-Id"),
            ))),
                ("inspect" = (operation_id = "inspectLease", description = "Inspect the lease just acquired, as its holder.", parameters(
                ("purpose" = "$request.path.purpose"), ("digest" = "$request.path.digest"),
                ("header.Lease-Owner-Token" = "$request.header.Lease-Owner-Token"),
                ("header.Lease-Operation-Id" = "$request.header.Lease-Operation-Id"),
            ))),
            )),
        (status = 200, description = "`replayed_same_operation`: the same attempt already holds the lease; its TTL was not extended.", body = ReplayedSameOperation),
        (status = 400, description = "`invalid_request`: a malformed path parameter, attempt header or JSON body.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `write` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: the path matched no route.", body = NotFoundProblem, content_type = "application/problem+json"),
        (status = 409, description = "`owner_operation_conflict` (the same owner token holds it for another operation), `contended` (someone else holds it, or every permit, or a lock-delay runs, or earlier waiters go first: `reason`) or `limit_mismatch` (held with another `limit`).",
            body = AcquireConflict, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "`retryAfterMs` in whole seconds, rounded up (at least 1); sent with `contended` and `owner_operation_conflict`, not with `limit_mismatch`."))),
        (status = 408, description = "`request_timeout`: the body did not arrive in time; nothing was done.", body = BodyTimeoutProblem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: the body is over the limit.", body = PayloadTooLargeProblem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`: the body is not `application/json`.", body = UnsupportedMediaTypeProblem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: well-formed JSON with invalid values (TTL or wait out of bounds, wrong types, unknown or missing members).", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: not applied. Retry later.",
            body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
        (status = 504, description = "`indeterminate`: sent, no certain reply; it may or may not have been applied. Inspect, or retry with the same attempt.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn acquire(
    State(app): State<AppState>,
    path: RawPath,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let WithBody {
        resource,
        attempt,
        body,
        mut problems,
    } = match with_body::<AcquireBody>(&app, path, &headers, body) {
        Ok(parts) => parts,
        Err(e) => return e.into_response(),
    };
    let bounds = app.service.bounds();
    let ttl = body.as_ref().and_then(|b| {
        bounds
            .ttl(b.ttl_ms)
            .map_err(|m| problems.value("ttlMs", m))
            .ok()
    });
    let wait = body.as_ref().and_then(|b| {
        bounds
            .wait(b.wait_ms)
            .map_err(|m| problems.value("waitMs", m))
            .ok()
    });
    let shape = body.as_ref().and_then(|b| {
        let limit = LeaseShape::limit(b.limit.unwrap_or(1))
            .map_err(|m| problems.value("limit", m))
            .ok();
        let lock_delay_ms = LeaseShape::lock_delay(b.lock_delay_ms.unwrap_or(0))
            .map_err(|m| problems.value("lockDelayMs", m))
            .ok();
        Some(LeaseShape {
            limit: limit?,
            mode: b.mode.unwrap_or_default(),
            lock_delay_ms: lock_delay_ms?,
        })
    });
    let max_hold_ms = body.as_ref().and_then(|b| b.max_hold_ms).and_then(|ms| {
        bounds
            .max_hold(ms)
            .map_err(|m| problems.value("maxHoldMs", m))
            .ok()
    });
    let result = async {
        problems.finish()?;
        let (resource, attempt, ttl, wait, shape) = (
            parsed(resource)?,
            parsed(attempt)?,
            parsed(ttl)?,
            parsed(wait)?,
            parsed(shape)?,
        );
        app.authorize(&headers, &resource, Role::Write)?;
        let request = AcquireRequest {
            ttl,
            wait,
            holder: body.and_then(|b| b.holder),
            shape,
            max_hold_ms,
            session: None,
        };
        Ok::<_, ApiError>(respond(
            &app.service.acquire(&resource, &attempt, &request).await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// Renew a lease.
///
/// Resets the TTL of the caller's lease, counted from now; the fencing token
/// stays the same. `lost` means the caller no longer holds the lease (404:
/// it expired or was released; 409: someone else holds it now): stop the
/// work it protected.
#[utoipa::path(
    patch,
    path = ROUTE,
    operation_id = "renewLease",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for: a lowercase letter, then up to 62 lowercase letters, digits or '-'.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource digest: `v1.` and 64 lowercase hex digits of the SHA-256 of the raw id.",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("Lease-Owner-Token" = String, Header, description = "The owner token from `POST /attempts`.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32, example = "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz"),
        ("Lease-Operation-Id" = String, Header, description = "The operation id the lease was acquired for.",
            pattern = r"^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128, example = "export-2026-12-02"),
    ),
    request_body(content = RenewBody, description = "The new TTL.", example = json!({"ttlMs": 30000})),
    responses(
        (status = 200, description = "`renewed`: the TTL was reset; same fencing token.", body = Renewed,
            links(("release" = (operation_id = "releaseLease", description = "Release the lease just renewed.", parameters(
                ("purpose" = "$request.path.purpose"), ("digest" = "$request.path.digest"),
                ("header.Lease-Owner-Token" = "$request.header.Lease-Owner-Token"),
                ("header.Lease-Operation-Id" = "$request.header.Lease-Operation-Id"),
            ))))),
        (status = 400, description = "`invalid_request`: a malformed path parameter, attempt header or JSON body.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `write` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`lost` with `reason: absent`: no lease exists any more; or `not_found`: the path matched no route.", body = LeaseNotFound, content_type = "application/problem+json"),
        (status = 409, description = "`lost` with `reason: not_owner`: someone else holds the lease now.", body = LostNotOwnerProblem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`: the body did not arrive in time; nothing was done.", body = BodyTimeoutProblem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: the body is over the limit.", body = PayloadTooLargeProblem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`: the body is not `application/json`.", body = UnsupportedMediaTypeProblem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: well-formed JSON with invalid values.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: not applied.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
        (status = 504, description = "`indeterminate`: sent, no certain reply. Inspect, or retry with the same attempt.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn renew(
    State(app): State<AppState>,
    path: RawPath,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let WithBody {
        resource,
        attempt,
        body,
        mut problems,
    } = match with_body::<RenewBody>(&app, path, &headers, body) {
        Ok(parts) => parts,
        Err(e) => return e.into_response(),
    };
    let ttl = body.as_ref().and_then(|b| {
        app.service
            .bounds()
            .ttl(b.ttl_ms)
            .map_err(|m| problems.value("ttlMs", m))
            .ok()
    });
    let result = async {
        problems.finish()?;
        let (resource, attempt, ttl) = (parsed(resource)?, parsed(attempt)?, parsed(ttl)?);
        app.authorize(&headers, &resource, Role::Write)?;
        let holder = body.as_ref().and_then(|b| b.holder.as_ref());
        Ok::<_, ApiError>(respond(
            &app.service.renew(&resource, &attempt, ttl, holder).await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// The parts of a lease verb that carries a JSON body, parsed together so
/// one answer names every bad field; the caller adds its body checks to
/// `problems` before finishing it.
struct WithBody<B> {
    resource: Option<ResourceId>,
    attempt: Option<Attempt>,
    body: Option<B>,
    problems: Problems,
}

fn with_body<B: serde::de::DeserializeOwned>(
    app: &AppState,
    path: RawPath,
    headers: &HeaderMap,
    body: Result<Bytes, extract::BodyError>,
) -> Result<WithBody<B>, ApiError> {
    app.authenticate(headers)?;
    let mut problems = Problems::default();
    let resource = path_resource(path, &mut problems);
    let attempt = extract::attempt(headers, true, &mut problems);
    let body = extract::json_body(headers, body, app.body_limit, &mut problems)?;
    Ok(WithBody {
        resource,
        attempt,
        body,
        problems,
    })
}

fn resource_and_attempt(
    app: &AppState,
    path: RawPath,
    headers: &HeaderMap,
    required: bool,
    need: Role,
) -> Result<(ResourceId, Option<Attempt>), ApiError> {
    app.authenticate(headers)?;
    let mut problems = Problems::default();
    let resource = path_resource(path, &mut problems);
    let attempt = extract::attempt(headers, required, &mut problems);
    problems.finish()?;
    let resource = parsed(resource)?;
    app.authorize(headers, &resource, need)?;
    Ok((resource, attempt))
}

/// Release a lease.
///
/// Deletes the caller's lease and wakes the requests waiting for it.
/// Idempotent: releasing a lease that no longer exists answers
/// `already_absent` (200). A lease someone else holds is left untouched
/// (`not_owner`, 409).
#[utoipa::path(
    delete,
    path = ROUTE,
    operation_id = "releaseLease",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource digest.",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("Lease-Owner-Token" = String, Header, description = "The owner token from `POST /attempts`.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32, example = "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz"),
        ("Lease-Operation-Id" = String, Header, description = "The operation id the lease was acquired for.",
            pattern = r"^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128, example = "export-2026-12-02"),
    ),
    responses(
        (status = 200, description = "`released` (the caller's lease was deleted) or `already_absent` (there was none).", body = ReleaseSuccess,
            example = json!({"outcome": "released"})),
        (status = 400, description = "`invalid_request`: a malformed path parameter or attempt header.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `write` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: the path matched no route.", body = NotFoundProblem, content_type = "application/problem+json"),
        (status = 409, description = "`not_owner`: someone else holds the lease; nothing was changed.", body = NotOwnerProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: not applied.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
        (status = 504, description = "`indeterminate`: sent, no certain reply. Inspect, or retry.", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn release(
    State(app): State<AppState>,
    path: RawPath,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        let (resource, attempt) = resource_and_attempt(&app, path, &headers, true, Role::Write)?;
        let attempt = parsed(attempt)?;
        Ok::<_, ApiError>(respond(&app.service.release(&resource, &attempt).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// Inspect a lease.
///
/// Read-only: whether the lease is held, its remaining time and fencing
/// token. Never reveals the holder's token. The attempt headers are
/// optional, in any combination: both answer `heldBy` relative to the
/// attempt (`caller`, `caller_other_operation` or `other`); the owner token
/// alone compares the token only (`caller_other_operation` when it holds
/// the lease, whatever the operation; `other` otherwise); the operation id
/// alone names no one and answers no `heldBy`.
///
/// Long-poll: with `changedSince` (a `version` from an earlier answer) and
/// `waitMs`, the answer waits until the version differs from it (at most
/// `waitMs`): a watcher hears of an acquire, release or holder change on any
/// instance within a few milliseconds, and of an expiry within a few
/// milliseconds of the holder's TTL. Long-polls count against the
/// service's watch cap (`overloaded` beyond it).
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "inspectLease",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource digest.",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("Lease-Owner-Token" = Option<String>, Header, nullable = false, description = "Optional: fills `heldBy`. Alone, compares the owner token only (`caller_other_operation` or `other`); with `Lease-Operation-Id`, the attempt (`caller` too).",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32, example = "Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz"),
        ("Lease-Operation-Id" = Option<String>, Header, nullable = false, description = "Optional: with `Lease-Owner-Token`, `heldBy` can be `caller`. Alone it names no owner and is ignored (no `heldBy`), though a malformed one is still refused.",
            pattern = r"^[A-Za-z0-9._~-]{1,128}$", min_length = 1, max_length = 128, example = "export-2026-12-02"),
        ("changedSince" = Option<String>, Query, nullable = false, description = "Optional, with `waitMs`: a `version` from an earlier answer (send back the one you just read). The answer comes at once when the version differs from it, else when it changes, else after `waitMs` with the unchanged state (always `inspected`). Anything but a version is 400.",
            pattern = r"^[0-9]{1,20}\.[0-9]{1,20}$", min_length = 3, max_length = 41, example = "12.1"),
        ("waitMs" = Option<u64>, Query, nullable = false, description = "Optional: how long to wait for a change of `changedSince`, in milliseconds (left out or 0: answer at once; at most 30000 by default). Without `changedSince` it waits for the next change from the state read when the request arrives. Shutdown answers early with the current state.",
            minimum = 0, maximum = 30000, example = 5000),
    ),
    responses(
        (status = 200, description = "`inspected`.", body = Inspected),
        (status = 400, description = "`invalid_request`: a malformed path parameter, attempt header or query parameter (a missing one is fine).", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `read` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: the path matched no route.", body = NotFoundProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, or `overloaded` (too many requests in flight, or the watch cap is reached): not applied.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
        (status = 504, description = "`indeterminate`: the read was sent with both attempt headers and no certain reply came (without them an uncertain read is `unavailable`).", body = IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn inspect(
    State(app): State<AppState>,
    path: RawPath,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let resource = path_resource(path, &mut problems);
        let asker = extract::asker(&headers, &mut problems);
        let poll = watch::long_poll(query.as_deref(), app.service.bounds(), &mut problems);
        problems.finish()?;
        let (resource, asker) = (parsed(resource)?, parsed(asker)?);
        app.authorize(&headers, &resource, Role::Read)?;
        let answer = match poll {
            None => watch::inspect_as(&app, &resource, &asker).await,
            Some(poll) => watch::wait_for_change(&app, &resource, &asker, poll).await,
        };
        Ok::<_, ApiError>(respond(&answer))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}
