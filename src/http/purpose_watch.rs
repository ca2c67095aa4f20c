//! Watching a purpose: `GET /leases/{purpose}/events`, one
//! `text/event-stream` of every change of every lease of the purpose
//! (docs/watching.md, "Watching a purpose"). A watcher of
//! [`crate::notify::PurposeHub`]: one group per purpose and instance,
//! fanned out, counted against `LEASEHOLD_MAX_WATCHERS`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{RawPathParams, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::app::AppState;
use super::auth::Role;
use super::extract::{Headers, Problems};
use super::problem::{respond_one, ApiError};
use super::watch::{stream_bounds, StreamBounds};
use super::watch_stream::{event_stream, KEEPALIVE};
use crate::domain::{Purpose, ResourceDigest, ResourceId};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    ForbiddenProblem, HeadersTooLargeProblem, InvalidRequestProblem, NotFoundProblem,
    PurposeEventDoc, ServiceUnavailable, UnauthorizedProblem,
};
use crate::notify::{with_digest, Next, PurposeEvent, PurposeIo, PurposeWatcher, Snapshot, Start};

/// The route template (also its metric label).
pub const ROUTE: &str = "/leases/{purpose}/events";

/// Leases per `snapshot` event.
pub const SNAPSHOT_PAGE: usize = 100;

/// Longest `Last-Event-ID` accepted.
const MAX_ID_LEN: usize = 64;

/// `GET /leases/{purpose}/events`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(ROUTE, get(events))
}

/// How a purpose group of this service talks to the store.
fn io(app: &AppState) -> PurposeIo {
    let (read_app, live_app, mark_app) = (Arc::clone(app), Arc::clone(app), Arc::clone(app));
    PurposeIo {
        read: Arc::new(move |resource: ResourceId| {
            let app = Arc::clone(&read_app);
            Box::pin(async move { app.service.inspect_for_watchers(&resource).await })
        }),
        live: Arc::new(move |purpose: Purpose| {
            let app = Arc::clone(&live_app);
            Box::pin(async move { app.service.live_digests(&purpose).await })
        }),
        mark: Arc::new(move |purpose: Purpose| {
            let app = Arc::clone(&mark_app);
            Box::pin(async move { app.service.mark_purpose_watched(&purpose).await })
        }),
    }
}

/// Watch a purpose (server-sent events).
///
/// A `text/event-stream` of every change of every lease of the purpose.
/// First the live leases, each read when the stream opens: one or more
/// `snapshot` events (up to 100 leases each, the inspect answer of each
/// with its `digest`), then `snapshot_end` with the `id` the changes
/// follow. Then one event per change: `acquired`, `released`, `expired`,
/// `holder_changed`, `revoked`, and `renewed` (the same version, a later
/// end; at most one a second per lease and 128 a second per purpose,
/// the rest sent in the next seconds), each with `id` (its place in this
/// instance's stream of the purpose) and `data` the lease's new state with
/// its `digest` and `version`. Resume with
/// `Last-Event-ID`: the events after it when this instance still keeps
/// them (the last 4096 of the purpose), else `reset` and a fresh snapshot.
/// A watcher that falls 1024 events behind also gets `reset` and a fresh
/// snapshot. Changes of one lease faster than the service reads them
/// coalesce into one event, named after the latest. A comment line comes
/// at least every 15 s. With `maxEvents` and/or `maxMs` the stream ends
/// after that many events (comment lines not counted) or that much time.
/// Counts against the service's watch cap (`overloaded` beyond it).
///
/// On the wire each event is `event:`, `id:` (not on `reset` and
/// `snapshot`) and `data:` lines and a blank line; the schema below
/// describes one event as a parser reads it.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "watchPurpose",
    tag = "leases",
    params(
        ("purpose" = String, Path, description = "What the leases are for.",
            pattern = r"^[a-z][a-z0-9-]{0,62}$", min_length = 1, max_length = 63, example = "invoice-export"),
        ("maxEvents" = Option<u32>, Query, nullable = false, description = "Optional: end the stream after this many events (`reset`, `snapshot` and `snapshot_end` included, comment lines not), 1 to 10000. Left out: no bound on events.",
            minimum = 1, maximum = 10000, example = 3),
        ("maxMs" = Option<u64>, Query, nullable = false, description = "Optional: end the stream this many milliseconds after it opens, 1 to 3600000 (an hour). Left out: no bound on time.",
            minimum = 1, maximum = 3600000, example = 5000),
        ("Last-Event-ID" = Option<String>, Header, nullable = false, description = "Optional: the `id` of the last event received; the stream resumes after it when this instance still keeps the events since, else answers `reset` and a fresh snapshot.",
            max_length = 64, example = "5f3a9c01-42"),
    ),
    responses(
        (status = 200, description = "The event stream: `snapshot` events and `snapshot_end` (or, resuming, the events missed), then `acquired`, `released`, `expired`, `holder_changed`, `revoked` and `renewed` events; `reset` before a fresh snapshot. The schema is one event's.",
            content_type = "text/event-stream", body = PurposeEventDoc),
        (status = 400, description = "`invalid_request`: a malformed purpose, `maxEvents`, `maxMs` or `Last-Event-ID` (over 64 characters).", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: API keys are configured and none valid was sent.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key may not use this purpose, or lacks the `read` scope on it (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: the path matched no route.", body = NotFoundProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: the request's header block is over 16 KiB.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`overloaded` (the watch cap is reached) or `unavailable` (the first listing failed).", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds, rounded up (at least 1)."))),
    ),
    security((), ("apiKey" = []))
)]
pub async fn events(
    State(app): State<AppState>,
    path: Result<RawPathParams, RawPathParamsRejection>,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authenticate(&headers)?;
        let mut problems = Problems::default();
        let purpose = match &path {
            Ok(params) => {
                let raw = params
                    .iter()
                    .find(|(name, _)| *name == "purpose")
                    .map_or("", |(_, value)| value);
                Purpose::parse(raw)
                    .map_err(|e| problems.shape("purpose", e.to_string()))
                    .ok()
            }
            Err(_) => {
                problems.shape("path", "path parameters must be valid UTF-8");
                None
            }
        };
        let bounds = stream_bounds(query.as_deref(), &mut problems);
        let last_event_id = headers.get("last-event-id");
        if last_event_id.is_some_and(|v| v.len() > MAX_ID_LEN) {
            problems.shape(
                "Last-Event-ID",
                "must be an event id from this stream (at most 64 characters)",
            );
        }
        problems.finish()?;
        let purpose = purpose.ok_or(ApiError::Internal)?;
        app.authorize_purpose(&headers, &purpose, Role::Read)?;
        let last_event_id = last_event_id
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let hub = app.service.waiters();
        let Some(admitted) = hub.watch().admit(app.watch.max_watchers) else {
            return Ok(respond_one(&app.service.overloaded()));
        };
        let mut watcher = hub.purposes().join(
            &purpose,
            || io(&app),
            app.service.shutdown_token(),
            admitted,
        );
        let start = match watcher.start(last_event_id.as_deref()).await {
            Ok(start) => start,
            Err(failure) => return Ok(respond_one(&failure)),
        };
        let shutdown = app.service.shutdown_token();
        let keepalive = hub.watch().keepalive(app.watch.keepalive, shutdown);
        Ok::<_, ApiError>(stream(
            watcher,
            opening(start),
            bounds,
            keepalive,
            shutdown.clone(),
        ))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// One event; `id` left out when `None`.
fn event(kind: &str, id: Option<&str>, data: &str) -> Bytes {
    Bytes::from(match id {
        Some(id) => format!("event: {kind}\nid: {id}\ndata: {data}\n\n"),
        None => format!("event: {kind}\ndata: {data}\n\n"),
    })
}

/// A change's event: encoded once, the same bytes for every watcher of the
/// purpose on this instance.
fn encoded(e: &PurposeEvent) -> Bytes {
    e.encoded(|e| event(e.change.as_str(), Some(&e.id()), &e.data()))
}

/// Something a stream still has to send: an event as encoded, or a page of
/// the snapshot's leases, rendered only when the stream gets to it. A
/// stream so holds one pointer per lease, not the purpose's every lease as
/// JSON (about 480 bytes each: 100 streams of a purpose of 10 000 leases
/// held 480 MB), and each page's `remainingMs` is as of its send.
enum Queued {
    Bytes(Bytes),
    Page(Vec<(ResourceDigest, Arc<Snapshot>)>),
}

impl Queued {
    fn bytes(self) -> Bytes {
        match self {
            Queued::Bytes(bytes) => bytes,
            Queued::Page(page) => {
                let items: Vec<String> = page
                    .iter()
                    .map(|(digest, snapshot)| {
                        let now = serde_json::to_string(&snapshot.now()).unwrap_or_default();
                        with_digest(digest, &now)
                    })
                    .collect();
                let data = format!("{{\"leases\":[{}]}}", items.join(","));
                event("snapshot", None, &data)
            }
        }
    }
}

/// What a stream sends first: the events missed, or (after `reset` when
/// the id named could not be resumed) the snapshot pages and their end.
fn opening(start: Start) -> VecDeque<Queued> {
    let mut out = VecDeque::new();
    match start {
        Start::Resumed(events) => {
            for e in events {
                out.push_back(Queued::Bytes(encoded(&e)));
            }
        }
        Start::Snapshot { reset, leases, id } => {
            if reset {
                out.push_back(Queued::Bytes(event(
                    "reset",
                    None,
                    r#"{"reason":"unknown_id"}"#,
                )));
            }
            let count = leases.len();
            for page in leases.chunks(SNAPSHOT_PAGE) {
                out.push_back(Queued::Page(page.to_vec()));
            }
            let end = format!("{{\"leases\":{count}}}");
            out.push_back(Queued::Bytes(event("snapshot_end", Some(&id), &end)));
        }
    }
    out
}

/// What the stream body keeps between events.
struct Stream {
    watcher: PurposeWatcher,
    queued: VecDeque<Queued>,
    /// The instance's shared keep-alive tick.
    keepalive: watch::Receiver<u64>,
    shutdown: CancellationToken,
    /// Events still to send (`maxEvents`); `None`: no bound.
    left: Option<u32>,
    /// When the stream ends (`maxMs`); `None`: no bound.
    deadline: Option<tokio::time::Instant>,
}

/// Until `deadline`, or forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The 200 answer: events until shutdown, a bound of `bounds`, or the
/// client going (the body is dropped, and the watcher with it).
fn stream(
    watcher: PurposeWatcher,
    queued: VecDeque<Queued>,
    bounds: StreamBounds,
    keepalive: watch::Receiver<u64>,
    shutdown: CancellationToken,
) -> Response {
    let now = tokio::time::Instant::now();
    let state = Stream {
        watcher,
        queued,
        keepalive,
        shutdown,
        left: bounds.max_events,
        deadline: bounds.max_ms.map(|ms| now + Duration::from_millis(ms)),
    };
    let body = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if s.left == Some(0) {
                return None;
            }
            if let Some(next) = s.queued.pop_front() {
                if let Some(left) = &mut s.left {
                    *left -= 1;
                }
                return Some((Ok::<_, Infallible>(next.bytes()), s));
            }
            tokio::select! {
                biased;
                () = s.shutdown.cancelled() => return None,
                () = until(s.deadline) => return None,
                next = s.watcher.next() => match next? {
                    Next::Event(e) => {
                        s.queued.push_back(Queued::Bytes(encoded(&e)));
                    }
                    Next::Lagged => {
                        // Fell behind: start over from a snapshot.
                        let start = s.watcher.start(None).await.ok()?;
                        s.queued.push_back(Queued::Bytes(event(
                            "reset",
                            None,
                            r#"{"reason":"lagged"}"#,
                        )));
                        s.queued.extend(opening(start));
                    }
                },
                // The ticker ends only at shutdown.
                tick = s.keepalive.changed() => {
                    tick.ok()?;
                    return Some((Ok(Bytes::from_static(KEEPALIVE)), s));
                }
            }
        }
    });
    event_stream(Body::from_stream(body))
}
