//! The parts of a session request: the session id of the path and the
//! session's secret (the `Lease-Owner-Token` header).

use axum::extract::RawPathParams;
use axum::http::HeaderMap;

use super::extract::Problems;
use crate::domain::{OwnerToken, SessionId};

/// The session id of the path, as a problem when malformed.
pub fn path_id(params: &RawPathParams, problems: &mut Problems) -> Option<SessionId> {
    let raw = params
        .iter()
        .find(|(name, _)| *name == "id")
        .map_or("", |(_, v)| v);
    SessionId::parse(raw)
        .map_err(|e| problems.shape("id", e.0))
        .ok()
}

/// The owner token header (the session's secret), required.
pub fn secret(headers: &HeaderMap, problems: &mut Problems) -> Option<OwnerToken> {
    match headers.get("lease-owner-token").map(|v| v.to_str()) {
        None => {
            problems.shape("Lease-Owner-Token", "is required: the session's secret");
            None
        }
        Some(Err(_)) => {
            problems.shape("Lease-Owner-Token", "must be visible ASCII");
            None
        }
        Some(Ok(raw)) => OwnerToken::parse(raw)
            .map_err(|e| problems.shape("Lease-Owner-Token", e.0))
            .ok(),
    }
}
