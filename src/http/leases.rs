//! `/leases/{purpose}/{digest}`: acquire (PUT), renew (PATCH), release
//! (DELETE) and inspect (GET).

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;

use super::extract::{self, Problems};
use super::problem::{respond, ApiError};
use super::AppState;
use crate::domain::{Attempt, ResourceId};

/// Body of an acquire.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AcquireBody {
    /// Lease time to live in milliseconds (2 × drift budget ..= max TTL).
    #[schema(minimum = 20, maximum = 3600000, example = 30000)]
    pub ttl_ms: u64,
    /// How long to wait server-side while someone else holds the lease (0 = try once).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 30000, example = 5000)]
    pub wait_ms: Option<u64>,
}

/// Body of a renew.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RenewBody {
    /// New time to live in milliseconds, counted from now.
    #[schema(minimum = 20, maximum = 3600000, example = 30000)]
    pub ttl_ms: u64,
}

type RawPath = Result<Path<(String, String)>, PathRejection>;

fn path_resource(path: RawPath, problems: &mut Problems) -> Option<ResourceId> {
    match path {
        Ok(Path((purpose, digest))) => extract::resource(&purpose, &digest, problems),
        Err(_) => {
            problems.shape("path", "path parameters must be valid UTF-8");
            None
        }
    }
}

fn parsed<T>(value: Option<T>) -> Result<T, ApiError> {
    value.ok_or(ApiError::Internal)
}

/// PUT: acquire, optionally waiting server-side.
pub async fn acquire(
    State(app): State<AppState>,
    path: RawPath,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut problems = Problems::default();
    let resource = path_resource(path, &mut problems);
    let attempt = extract::attempt(&headers, true, &mut problems);
    let body: Option<AcquireBody> =
        match extract::json_body(&headers, body, app.body_limit, &mut problems) {
            Ok(b) => b,
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
            .wait(b.wait_ms.unwrap_or(0))
            .map_err(|m| problems.value("waitMs", m))
            .ok()
    });
    let result = async {
        problems.finish()?;
        let (resource, attempt, ttl, wait) = (
            parsed(resource)?,
            parsed(attempt)?,
            parsed(ttl)?,
            parsed(wait)?,
        );
        app.authorize(&headers, &resource)?;
        Ok::<_, ApiError>(respond(
            &app.service.acquire(&resource, &attempt, ttl, wait).await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// PATCH: renew the caller's lease.
pub async fn renew(
    State(app): State<AppState>,
    path: RawPath,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut problems = Problems::default();
    let resource = path_resource(path, &mut problems);
    let attempt = extract::attempt(&headers, true, &mut problems);
    let body: Option<RenewBody> =
        match extract::json_body(&headers, body, app.body_limit, &mut problems) {
            Ok(b) => b,
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
        app.authorize(&headers, &resource)?;
        Ok::<_, ApiError>(respond(&app.service.renew(&resource, &attempt, ttl).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

fn resource_and_attempt(
    path: RawPath,
    headers: &HeaderMap,
    required: bool,
) -> Result<(ResourceId, Option<Attempt>), ApiError> {
    let mut problems = Problems::default();
    let resource = path_resource(path, &mut problems);
    let attempt = extract::attempt(headers, required, &mut problems);
    problems.finish()?;
    Ok((parsed(resource)?, attempt))
}

/// DELETE: release the caller's lease (idempotent).
pub async fn release(State(app): State<AppState>, path: RawPath, headers: HeaderMap) -> Response {
    let result = async {
        let (resource, attempt) = resource_and_attempt(path, &headers, true)?;
        let attempt = parsed(attempt)?;
        app.authorize(&headers, &resource)?;
        Ok::<_, ApiError>(respond(&app.service.release(&resource, &attempt).await))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// GET: inspect, read-only; never reveals the holder's token.
pub async fn inspect(State(app): State<AppState>, path: RawPath, headers: HeaderMap) -> Response {
    let result = async {
        let (resource, attempt) = resource_and_attempt(path, &headers, false)?;
        app.authorize(&headers, &resource)?;
        Ok::<_, ApiError>(respond(
            &app.service.inspect(&resource, attempt.as_ref()).await,
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}
