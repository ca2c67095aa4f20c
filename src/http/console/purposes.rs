//! `GET /purposes`: the purposes the sent API key may read, with its
//! scopes on each, so the console can offer them (and show the break
//! button only where the key is `admin`) without trying a verb.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::super::auth::{Reach, Role};
use super::super::extract::Headers;
use crate::http::app::AppState;
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{HeadersTooLargeProblem, UnauthorizedProblem};

/// The route (also its metric label).
pub const ROUTE: &str = "/purposes";

/// `GET /purposes`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(purposes))
}

/// The outcome tag.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PurposesTag {
    /// `purposes`.
    Purposes,
}

/// A scope a key holds on a purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    /// Inspect, list, watch, history.
    Read,
    /// Acquire, renew, release.
    Write,
    /// Break.
    Admin,
}

/// A role as the scopes it holds: each role implies the weaker ones.
fn scopes(role: Role) -> Vec<KeyScope> {
    match role {
        Role::Read => vec![KeyScope::Read],
        Role::Write => vec![KeyScope::Read, KeyScope::Write],
        Role::Admin => vec![KeyScope::Read, KeyScope::Write, KeyScope::Admin],
    }
}

/// One purpose the key may read, and its scopes there.
#[derive(Debug, Serialize, ToSchema)]
pub struct PurposeScopes {
    /// The purpose.
    #[schema(example = "invoice-export")]
    pub purpose: String,
    /// What the key may do on it (`read` always; `write`, `admin` when
    /// granted).
    pub scopes: Vec<KeyScope>,
}

/// The key's scopes on every purpose it does not name.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnyPurpose {
    /// What the key may do on any purpose.
    pub scopes: Vec<KeyScope>,
}

/// How the service checks callers.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyAccess {
    /// API keys are configured.
    Keys,
    /// No keys: anyone may do anything.
    Open,
}

/// `purposes` (200): the purposes the sent key may read. Never a key.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "purposes",
    "access": "keys",
    "version": "0.9.0",
    "purposes": [{"purpose": "invoice-export", "scopes": ["read", "write", "admin"]},
                 {"purpose": "report", "scopes": ["read"]}]
}))]
pub struct PurposesListed {
    #[schema(inline)]
    pub outcome: PurposesTag,
    /// `keys` when the service checks API keys, `open` when it does not.
    pub access: KeyAccess,
    /// The service's version.
    #[schema(example = "0.9.0")]
    pub version: &'static str,
    /// The purposes the key names, sorted by name, with its scopes on each
    /// (empty on an open API, which names none).
    pub purposes: Vec<PurposeScopes>,
    /// Present when the key may use every purpose (a `*` line, or an open
    /// API): its scopes on the purposes not listed.
    #[schema(nullable = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub any_purpose: Option<AnyPurpose>,
    /// With `anyPurpose` only: the purposes this instance has served a
    /// verb for since it started, sorted (at most 256), so a key for every
    /// purpose can be offered them.
    #[schema(nullable = false, max_items = 256)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen: Option<Vec<String>>,
}

impl PurposesListed {
    /// The answer for a key's reach (`None`: the API is open); `seen`, the
    /// purposes served, goes only to a key that may use every purpose.
    pub fn new(reach: Option<Reach>, seen: Vec<String>) -> Self {
        let mut listed = match reach {
            None => Self {
                outcome: PurposesTag::Purposes,
                access: KeyAccess::Open,
                version: env!("CARGO_PKG_VERSION"),
                purposes: Vec::new(),
                any_purpose: Some(AnyPurpose {
                    scopes: scopes(Role::Admin),
                }),
                seen: None,
            },
            Some(reach) => Self {
                outcome: PurposesTag::Purposes,
                access: KeyAccess::Keys,
                version: env!("CARGO_PKG_VERSION"),
                purposes: reach
                    .named
                    .into_iter()
                    .map(|(purpose, role)| PurposeScopes {
                        purpose,
                        scopes: scopes(role),
                    })
                    .collect(),
                any_purpose: reach.any.map(|role| AnyPurpose {
                    scopes: scopes(role),
                }),
                seen: None,
            },
        };
        if listed.any_purpose.is_some() {
            listed.seen = Some(seen);
        }
        listed
    }
}

/// List the purposes the key may read.
///
/// The purposes the sent API key names, each with the key's scopes on it,
/// and `anyPurpose` when it may use every purpose, with `seen`: the
/// purposes this instance has served (at most 256). On an open API (no
/// keys configured) no purpose is named and `anyPurpose` holds every
/// scope. Also the service's `version`. Reads no store. The console (`/console`) uses it to offer purposes and
/// to show the break button only where the key is `admin`.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "listPurposes",
    tag = "leases",
    responses(
        (status = 200, description = "`purposes`: the purposes the key may read, with its scopes.", body = PurposesListed),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn purposes(State(app): State<AppState>, Headers(headers): Headers) -> Response {
    match app.api_keys.reach(&headers) {
        Ok(reach) => {
            let seen = app.service.waiters().purposes().seen_purposes();
            Json(PurposesListed::new(reach, seen)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_become_their_scopes_and_open_means_every_scope() {
        let v = env!("CARGO_PKG_VERSION");
        let open = serde_json::to_value(PurposesListed::new(None, vec!["x".into()])).expect("json");
        assert_eq!(
            open,
            serde_json::json!({"outcome": "purposes", "access": "open", "version": v, "purposes": [],
                "anyPurpose": {"scopes": ["read", "write", "admin"]}, "seen": ["x"]})
        );
        let keyed = serde_json::to_value(PurposesListed::new(
            Some(Reach {
                any: None,
                named: vec![("a".into(), Role::Read), ("b".into(), Role::Write)],
            }),
            vec!["x".into()],
        ))
        .expect("json");
        assert_eq!(
            keyed,
            serde_json::json!({"outcome": "purposes", "access": "keys", "version": v, "purposes": [
                {"purpose": "a", "scopes": ["read"]},
                {"purpose": "b", "scopes": ["read", "write"]}]})
        );
    }
}
