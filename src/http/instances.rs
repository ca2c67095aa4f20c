//! `GET /instances`: the instances sharing the store, from their
//! heartbeats (docs/storage.md, "Keys"), for operators and the
//! console's health area. Never a secret: ids are random per process.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use utoipa::ToSchema;

use super::app::AppState;
use super::extract::Headers;
use super::problem::{respond, Answer};
use crate::domain::{OutcomeName, Roster, StoreTime};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{HeadersTooLargeProblem, ServiceUnavailable, UnauthorizedProblem};

/// The route (also its metric label).
pub const ROUTE: &str = "/instances";

/// `GET /instances`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(instances))
}

/// The outcome tag.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InstancesTag {
    /// `instances`.
    Instances,
}

/// One instance sharing the store.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"instance": "9f2c41d07a3b8e65", "version": "0.9.0",
    "startedAt": "2026-12-05T20:14:03.120Z", "lastBeatAgeMs": 1200, "thisInstance": true}))]
pub struct InstanceItem {
    /// Its id, random per process (the one its fair-queue waiters carry;
    /// `local` on the embedded store).
    #[schema(min_length = 1, max_length = 64, example = "9f2c41d07a3b8e65")]
    pub instance: String,
    /// Its service version.
    #[schema(example = "0.9.0")]
    pub version: String,
    /// When it started serving (RFC 3339, UTC, ms; its own clock).
    #[schema(value_type = String, format = DateTime, example = "2026-12-05T20:14:03.120Z")]
    pub started_at: StoreTime,
    /// How long ago its latest heartbeat was, by the store's clock (an
    /// instance beats every 5 s; one silent for 15 s is no longer listed).
    #[schema(minimum = 0, maximum = 15000, example = 1200)]
    pub last_beat_age_ms: u64,
    /// True for the instance that answered.
    pub this_instance: bool,
}

/// `instances` (200): the instances sharing the store.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "outcome": "instances",
    "instances": [
        {"instance": "03b7aa91c2d4e5f6", "version": "0.9.0",
         "startedAt": "2026-12-05T19:02:41.007Z", "lastBeatAgeMs": 3100, "thisInstance": false},
        {"instance": "9f2c41d07a3b8e65", "version": "0.9.0",
         "startedAt": "2026-12-05T20:14:03.120Z", "lastBeatAgeMs": 1200, "thisInstance": true}
    ]
}))]
pub struct InstancesAnswer {
    #[schema(inline)]
    pub outcome: InstancesTag,
    /// Every instance that beat within the last 15 s, sorted by id (at
    /// most 256; the embedded store: just this one).
    #[schema(max_items = 256)]
    pub instances: Vec<InstanceItem>,
}

impl From<Roster> for InstancesAnswer {
    fn from(roster: Roster) -> Self {
        Self {
            outcome: InstancesTag::Instances,
            instances: roster
                .instances
                .into_iter()
                .map(|i| InstanceItem {
                    instance: i.id,
                    version: i.version,
                    started_at: i.started,
                    last_beat_age_ms: i.beat_age_ms,
                    this_instance: i.this,
                })
                .collect(),
        }
    }
}

impl OutcomeName for InstancesAnswer {
    fn outcome_name(&self) -> &'static str {
        "instances"
    }
}

impl Answer for InstancesAnswer {
    fn status(&self) -> axum::http::StatusCode {
        axum::http::StatusCode::OK
    }
}

/// List the instances sharing the store.
///
/// Every instance that sent a heartbeat to the store within the last 15 s
/// (each beats every 5 s; one stopped cleanly leaves at once), sorted by
/// id, at most 256: its id, version, start time and the age of its latest
/// beat by the store's clock, with `thisInstance` marking the one that
/// answered. The embedded store answers just this instance. Any valid API
/// key may read it (none when keys are off). Never a secret.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "listInstances",
    tag = "operations",
    responses(
        (status = 200, description = "`instances`: the instances sharing the store.", body = InstancesAnswer),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded`: nothing was read. Retry later.", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
    ),
    security((), ("apiKey" = []))
)]
pub async fn instances(State(app): State<AppState>, Headers(headers): Headers) -> Response {
    if let Err(e) = app.authenticate(&headers) {
        return e.into_response();
    }
    respond(
        &app.service
            .read_instances()
            .await
            .map(InstancesAnswer::from),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::InstanceSeen;

    #[test]
    fn the_answer_names_each_instance_and_marks_this_one() {
        let roster = Roster::sorted(
            StoreTime(10_000),
            vec![InstanceSeen {
                id: "ab".into(),
                version: "1.0.0".into(),
                started: StoreTime(0),
                beat_age_ms: 12,
                this: true,
            }],
        );
        let json = serde_json::to_value(InstancesAnswer::from(roster)).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"outcome": "instances", "instances": [{"instance": "ab",
                "version": "1.0.0", "startedAt": "1970-01-01T00:00:00.000Z",
                "lastBeatAgeMs": 12, "thisInstance": true}]})
        );
    }
}
