//! What every handler shares ([`App`], as [`AppState`]). A leaf of
//! `crate::http` as far as the handlers go: the resource modules import it,
//! and it imports none of them (so `http/mod.rs`, which names their
//! routes, is imported by none of them: no module circle).

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::PrometheusHandle;

use super::auth::{ApiKeys, Role};
use super::problem::ApiError;
use crate::domain::{Purpose, ResourceId};
use crate::service::LeaseService;
use crate::telemetry::Handles;

/// Shared state of every handler.
pub type AppState = Arc<App>;

/// What handlers need.
pub struct App {
    /// The lease service.
    pub service: LeaseService,
    /// Request body limit in bytes.
    pub body_limit: usize,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// API keys (empty: open).
    pub api_keys: ApiKeys,
    /// Bound on one request, waits included.
    pub request_timeout: Duration,
    /// HTTP metric handles by (method, route, status).
    pub http_meters: Handles<(&'static str, &'static str, u16), (Counter, Histogram)>,
    /// Watch bounds (long-polls and event streams).
    pub watch: WatchSettings,
    /// Where request spans go; `None` when no OTLP endpoint is set.
    #[cfg(feature = "otel")]
    pub tracer: Option<Arc<crate::telemetry::trace::Tracer>>,
}

impl App {
    /// 401 unless authenticated (when keys are configured).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.api_keys.authenticate(headers)
    }

    /// 401/403 unless the caller may use the resource's purpose with
    /// `need` (`read` or `write`).
    pub fn authorize(
        &self,
        headers: &HeaderMap,
        resource: &ResourceId,
        need: Role,
    ) -> Result<(), ApiError> {
        self.api_keys.authorize(headers, &resource.purpose, need)
    }

    /// 401/403 unless the caller's key has `need` on some purpose (the
    /// session verbs: a session belongs to no purpose).
    pub fn authorize_any(&self, headers: &HeaderMap, need: Role) -> Result<(), ApiError> {
        self.api_keys.authorize_any(headers, need)
    }

    /// 401/403 unless the caller may use `purpose` with `need` (listing).
    pub fn authorize_purpose(
        &self,
        headers: &HeaderMap,
        purpose: &Purpose,
        need: Role,
    ) -> Result<(), ApiError> {
        self.api_keys.authorize(headers, purpose, need)
    }
}

/// Bounds of watches.
#[derive(Debug, Clone, Copy)]
pub struct WatchSettings {
    /// Concurrent watches (long-polls and streams) on this instance.
    pub max_watchers: usize,
    /// An event stream writes a comment line at least this often.
    pub keepalive: Duration,
}
