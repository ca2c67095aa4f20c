//! Watching a lease (docs/design.md §9): the long-poll of inspect
//! (`?changedSince=V&waitMs=N`) and the event stream
//! `GET /leases/{purpose}/{digest}/events`. Both are watchers of
//! [`crate::notify::WatchHub`]: one store read per change per instance,
//! fanned out, and counted against `LEASEHOLD_MAX_WATCHERS`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::app::AppState;
use super::extract::{path_resource, RawPath};
use super::extract::{Asker, Headers, Problems};
use super::problem::{respond, respond_one, ApiError};
use super::watch_stream::{response, state_event, Direct, Stream};
use crate::domain::{Bounds, Failure, Inspection, ResourceId, WaitMs};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    ForbiddenProblem, HeadersTooLargeProblem, InvalidRequestProblem, LeaseEvent, NotFoundProblem,
    ServiceUnavailable, UnauthorizedProblem,
};
use crate::notify::{newer, Read, Snapshot, Watcher};

/// The event stream's route template (also its metric label).
pub const ROUTE: &str = "/leases/{purpose}/{digest}/events";

/// `GET /leases/{purpose}/{digest}/events` (the long-poll is inspect's).
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(events))
}

pub use super::app::WatchSettings;

/// The watch part of an inspect's query string.
#[derive(Debug)]
pub struct LongPoll {
    /// The version the caller has; `None`: the state when the wait starts
    /// (`waitMs` alone waits for the next change from now).
    pub changed_since: Option<String>,
    /// How long to wait for it to change.
    pub wait: WaitMs,
}

/// Longest `changedSince` accepted (a version is two numbers and a dot).
const MAX_VERSION_LEN: usize = 64;

/// Parses `changedSince` and `waitMs` (both optional; other parameters are
/// ignored). `None` without a problem: answer at once (no `changedSince`, or
/// `waitMs` absent or 0).
pub fn long_poll(query: Option<&str>, bounds: Bounds, problems: &mut Problems) -> Option<LongPoll> {
    let (mut since, mut wait): (Option<String>, Option<String>) = (None, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "changedSince" => &mut since,
            "waitMs" => &mut wait,
            _ => continue,
        };
        let Some(value) = percent_decoded(value) else {
            problems.shape(name, "must be valid percent-encoded UTF-8");
            continue;
        };
        if slot.replace(value).is_some() {
            problems.shape(name, "must be given at most once");
        }
    }
    let since = since.and_then(|v| {
        let ok = v.len() <= MAX_VERSION_LEN && is_version(&v);
        if !ok {
            problems.shape(
                "changedSince",
                "must be a version from an earlier answer (digits, a dot, digits, e.g. 12.1)",
            );
        }
        ok.then_some(v)
    });
    let wait = match wait {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(ms) => bounds
                .wait(ms)
                .map_err(|m| problems.shape("waitMs", m))
                .ok(),
            Err(_) => {
                problems.shape("waitMs", "must be a non-negative integer (milliseconds)");
                None
            }
        },
    };
    match wait {
        Some(wait) if wait.ms() > 0 => Some(LongPoll {
            changed_since: since,
            wait,
        }),
        _ => None,
    }
}

/// Most events `maxEvents` may ask for.
pub const MAX_STREAM_EVENTS: u32 = 10_000;

/// Longest `maxMs`: an hour.
pub const MAX_STREAM_MS: u64 = 3_600_000;

/// Where a stream ends on its own: after `maxEvents` events (comments not
/// counted) or `maxMs` milliseconds, whichever comes first. Neither: at
/// shutdown, or when the client goes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StreamBounds {
    /// `maxEvents`.
    pub max_events: Option<u32>,
    /// `maxMs`.
    pub max_ms: Option<u64>,
}

/// Parses `maxEvents` and `maxMs` (both optional; other parameters are
/// ignored), naming each that is malformed, out of range or repeated.
pub fn stream_bounds(query: Option<&str>, problems: &mut Problems) -> StreamBounds {
    let (mut events, mut ms): (Option<String>, Option<String>) = (None, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "maxEvents" => &mut events,
            "maxMs" => &mut ms,
            _ => continue,
        };
        let Some(value) = percent_decoded(value) else {
            problems.shape(name, "must be valid percent-encoded UTF-8");
            continue;
        };
        if slot.replace(value).is_some() {
            problems.shape(name, "must be given at most once");
        }
    }
    let mut bounded = |name: &str, value: Option<String>, max: u64, unit: &str| {
        let value = value?;
        match value.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Some(n),
            _ => {
                problems.shape(name, format!("must be an integer from 1 to {max}{unit}"));
                None
            }
        }
    };
    StreamBounds {
        max_events: bounded("maxEvents", events, u64::from(MAX_STREAM_EVENTS), "")
            .and_then(|n| u32::try_from(n).ok()),
        max_ms: bounded("maxMs", ms, MAX_STREAM_MS, " (milliseconds)"),
    }
}

/// `%XX` decoded (and `+` as a space, as forms write it); `None` when that
/// is not UTF-8 or an escape is malformed.
fn percent_decoded(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// An inspect as `asker` (what a plain inspect answers).
pub async fn inspect_as(
    app: &AppState,
    resource: &ResourceId,
    asker: &Asker,
) -> Result<Inspection, Failure> {
    match asker {
        Asker::Anyone => app.service.inspect(resource, None).await,
        Asker::Attempt(attempt) => app.service.inspect(resource, Some(attempt)).await,
        Asker::Owner(owner_token) => app.service.inspect_as_owner(resource, owner_token).await,
    }
}

/// How a group of this service reads: the watcher read, which keeps the
/// resource marked watched in the store.
fn reader(app: &AppState) -> Read {
    let app = Arc::clone(app);
    Arc::new(move |resource: ResourceId| {
        let app = Arc::clone(&app);
        Box::pin(async move { app.service.inspect_for_watchers(&resource).await })
    })
}

/// Registers a watcher of `resource`, or `overloaded`.
fn join(app: &AppState, resource: &ResourceId) -> Result<Watcher, Failure> {
    app.service
        .waiters()
        .watch()
        .join(
            resource,
            app.watch.max_watchers,
            || reader(app),
            app.service.shutdown_token(),
        )
        .ok_or_else(|| app.service.overloaded())
}

/// The long-poll of inspect: answers at once when the version differs from
/// `changedSince`, else when it changes, else after `waitMs` (or at
/// shutdown) with the unchanged state. The group's state is answered as is
/// to an anonymous caller; with attempt headers the answer is read again as
/// that caller (`heldBy`).
pub async fn wait_for_change(
    app: &AppState,
    resource: &ResourceId,
    asker: &Asker,
    poll: LongPoll,
) -> Result<Inspection, Failure> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(poll.wait.ms());
    let mut watcher = join(app, resource)?;
    let mut latest = watcher.current().await?;
    // Without `changedSince`: the next change from the state read now.
    let since = poll
        .changed_since
        .unwrap_or_else(|| latest.version().to_owned());
    if latest.version() != since {
        if newer(latest.version(), &since) {
            return answer(app, resource, asker, &latest).await;
        }
        // The caller has seen a later state than this instance's group (an
        // event still on its way, or a store that started over): look now.
        let fresh = inspect_as(app, resource, asker).await?;
        if fresh.version != since {
            return Ok(fresh);
        }
    }
    let shutdown = app.service.shutdown_token();
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            next = watcher.next() => match next {
                Some((_, snapshot)) if newer(snapshot.version(), &since) => {
                    return answer(app, resource, asker, &snapshot).await;
                }
                Some((_, snapshot)) => latest = snapshot,
                None => break,
            },
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    drop(watcher);
    if latest.version() == since {
        answer(app, resource, asker, &latest).await
    } else {
        inspect_as(app, resource, asker).await
    }
}

async fn answer(
    app: &AppState,
    resource: &ResourceId,
    asker: &Asker,
    snapshot: &Snapshot,
) -> Result<Inspection, Failure> {
    match asker {
        Asker::Anyone => Ok(snapshot.now()),
        _ => inspect_as(app, resource, asker).await,
    }
}

/// Watch a lease (server-sent events).
///
/// A `text/event-stream` of the resource's changes. First an `event: state`
/// with the current inspect answer (left out when `Last-Event-ID` names the
/// current version: resuming with nothing missed), then one event per change:
/// `acquired`, `released`, `expired`, `holder_changed`, each with `id:` the
/// new `version` and `data:` the new state (the inspect answer, without
/// `heldBy`; `remainingMs` as of the event). Changes that come faster than
/// the service reads them coalesce into one event, named after the latest.
/// A comment line (`: keepalive`) comes at least every 15 s. The stream
/// ends at shutdown; resume with `Last-Event-ID`. With `maxEvents` and/or
/// `maxMs` it also ends (the body finishes) after that many events
/// (comment lines not counted) or that much time, whichever comes first:
/// a bounded read for scripts and checkers. Counts against the service's
/// watch cap (`overloaded` beyond it).
///
/// On the wire each event is `event:`, `id:` and `data:` lines and a blank
/// line; the schema below describes one event as a parser reads it.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "watchLease",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the lease is for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("digest" = String, Path, description = "The resource digest.",
            pattern = r"^v1\.[0-9a-f]{64}$", min_length = 67, max_length = 67, example = "v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("maxEvents" = Option<u32>, Query, nullable = false, description = "Optional: end the stream after this many events (`state` included, comment lines not), 1 to 10000. Left out: no bound on events.",
            minimum = 1, maximum = 10000, example = 2),
        ("maxMs" = Option<u64>, Query, nullable = false, description = "Optional: end the stream this many milliseconds after it opens, 1 to 3600000 (an hour). Left out: no bound on time.",
            minimum = 1, maximum = 3600000, example = 5000),
        ("Last-Event-ID" = Option<String>, Header, nullable = false, description = "Optional: the `id` of the last event received; the first `state` event is sent only when the version differs from it.",
            max_length = 64, example = "12.1"),
    ),
    responses(
        (status = 200, description = "The event stream: `state`, then `acquired`, `released`, `expired` and `holder_changed` events, each with `id` the version and `data` the inspect answer as JSON. The schema is one event's.",
            content_type = "text/event-stream", body = LeaseEvent),
        (status = 400, description = "`invalid_request`: a malformed path parameter, `maxEvents`, `maxMs` or `Last-Event-ID` (over 64 characters).", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `read` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: the path matched no route.", body = NotFoundProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`overloaded` (the watch cap is reached) or `unavailable` (the first read failed).", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
    ),
    security((), ("apiKey" = []))
)]
pub async fn events(
    State(app): State<AppState>,
    path: RawPath,
    RawQuery(query): RawQuery,
    Direct(direct): Direct,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let resource = path_resource(path, &mut problems);
        let bounds = stream_bounds(query.as_deref(), &mut problems);
        let last_event_id = headers.get("last-event-id");
        if last_event_id.is_some_and(|v| v.len() > MAX_VERSION_LEN) {
            problems.shape(
                "Last-Event-ID",
                "must be an event id from this stream (at most 64 characters)",
            );
        }
        problems.finish()?;
        let resource = resource.ok_or(ApiError::Internal)?;
        app.authorize(&headers, &resource, super::auth::Role::Read)?;
        let last_event_id = last_event_id
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut watcher = match join(&app, &resource) {
            Ok(watcher) => watcher,
            Err(failure) => return Ok(respond_one(&failure)),
        };
        let current = match watcher.current().await {
            Ok(current) => current,
            Err(failure) => return Ok(respond(&Err::<Inspection, _>(failure))),
        };
        let first =
            (last_event_id.as_deref() != Some(current.version())).then(|| state_event(&current));
        let shutdown = app.service.shutdown_token();
        let keepalive = app
            .service
            .waiters()
            .watch()
            .keepalive(app.watch.keepalive, shutdown);
        let bounds = (bounds.max_events, bounds.max_ms);
        let stream = Stream::new(watcher, first, bounds, keepalive);
        Ok::<_, ApiError>(response(stream, direct.as_ref()))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// A version as the stores write it: `<changes>.<live holders>`.
fn is_version(v: &str) -> bool {
    let Some((changes, live)) = v.split_once('.') else {
        return false;
    };
    let digits = |p: &str| !p.is_empty() && p.len() <= 20 && p.bytes().all(|b| b.is_ascii_digit());
    digits(changes) && digits(live)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(query: &str) -> (StreamBounds, Vec<String>) {
        let mut problems = Problems::default();
        let bounds = stream_bounds(Some(query), &mut problems);
        let named = match problems.finish() {
            Ok(()) => Vec::new(),
            Err(ApiError::Invalid { errors, .. }) => errors.into_iter().map(|e| e.field).collect(),
            Err(other) => panic!("{query}: {other:?}"),
        };
        (bounds, named)
    }

    #[test]
    fn stream_bounds_are_parsed_and_each_bad_one_named() {
        assert_eq!(parsed(""), (StreamBounds::default(), vec![]));
        assert_eq!(
            parsed("maxEvents=2&maxMs=3600000&other=x"),
            (
                StreamBounds {
                    max_events: Some(2),
                    max_ms: Some(3_600_000)
                },
                vec![]
            )
        );
        for (query, field) in [
            ("maxEvents=0", "maxEvents"),
            ("maxEvents=10001", "maxEvents"),
            ("maxEvents=-1", "maxEvents"),
            ("maxEvents=", "maxEvents"),
            ("maxEvents=1&maxEvents=2", "maxEvents"),
            ("maxMs=0", "maxMs"),
            ("maxMs=3600001", "maxMs"),
            ("maxMs=1.5", "maxMs"),
            ("maxMs=%ZZ", "maxMs"),
            ("maxMs=99999999999999999999999", "maxMs"),
        ] {
            assert_eq!(parsed(query).1, vec![field.to_owned()], "{query}");
        }
    }
}
