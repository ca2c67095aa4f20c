//! `GET /sessions/{id}/keepalive` (docs/design.md §19): while the stream
//! is open this instance renews the session (and every lease on it) every
//! third of its TTL and sends `event: renewed`; when the client goes (the
//! body is dropped: a crash, a reset, a closed lid) the session is ended at
//! once and its leases are released. When the session is lost the stream
//! sends `event: lost` and ends. If this instance dies, the session ends at
//! its TTL like any other.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{RawPathParams, RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use utoipa::ToSchema;

use super::app::AppState;
use super::direct::{frame, gone, write};
use super::extract::{Headers, Problems};
use super::problem::{respond_one, ApiError};
use super::session_extract::{path_id, secret};
use super::watch_stream::{event_stream, Direct, Opened as Handed};
use crate::domain::{OwnerToken, SessionGone, SessionId, SessionOutcome};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{
    ForbiddenProblem, HeadersTooLargeProblem, InvalidRequestProblem, ServiceUnavailable,
    UnauthorizedProblem,
};
#[allow(unused_imports)] // named by the OpenAPI annotations only
use crate::http::schemas::{SessionLostProblem, SessionNotOwnerProblem};
use crate::notify::Admitted;
use crate::service::KeptGuard;

/// The route (also its metric label).
pub const ROUTE: &str = "/sessions/{id}/keepalive";

/// `GET /sessions/{id}/keepalive`.
pub(super) fn routes() -> axum::Router<AppState> {
    axum::Router::new().route(ROUTE, axum::routing::get(keepalive))
}

/// One event of the keep-alive stream, as an event-stream parser reads it.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeepaliveEvent {
    /// `renewed` (data: the session answer of a renew, `lost` listing the
    /// leases it no longer holds) or `lost` (data: `{"reason"}`,
    /// `session_ended`, `session_expired` or `absent`; the last event).
    #[schema(pattern = "^(renewed|lost)$")]
    pub event: String,
    /// JSON.
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// Why the stream stopped renewing.
enum Stopped {
    /// The client went: end the session.
    Gone,
    /// The session is gone: say so.
    Lost(SessionGone),
    /// The stream's own bound (`maxMs`): end the session.
    Bound,
    /// This instance stops: the stream ends, the session lives on (its
    /// client reopens the stream on another instance within the TTL).
    Shutdown,
}

/// A stream counted in `leasehold_session_keepalive_streams` while it
/// lives (however its task ends).
struct OpenStream;

impl OpenStream {
    fn counted() -> Self {
        metrics::gauge!(crate::telemetry::KEEPALIVES).increment(1.0);
        Self
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::gauge!(crate::telemetry::KEEPALIVES).decrement(1.0);
    }
}

fn sse(event: &str, data: &impl Serialize) -> Bytes {
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".to_owned());
    Bytes::from(format!("event: {event}\ndata: {json}\n\n"))
}

/// Keep a session alive while connected.
///
/// While this `text/event-stream` is open the instance serving it renews
/// the session (and every lease on it) every third of its TTL, sending
/// `renewed` each time (the first at once). When the connection closes the
/// session is ended and its leases released at once; when the stream ends
/// at `maxMs` too. When the session is lost (ended elsewhere, or a renew
/// came too late) the stream sends `lost` and ends. If the serving instance
/// dies, the session ends at its TTL.
#[utoipa::path(
    get,
    path = ROUTE,
    operation_id = "keepSessionAlive",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session id.", pattern = r"^s1\.[0-9a-f]{32}$", min_length = 35, max_length = 35),
        ("Lease-Owner-Token" = String, Header, description = "The session's secret.",
            pattern = r"^[A-Za-z0-9_-]{32}$", min_length = 32, max_length = 32),
        ("maxMs" = Option<u64>, Query, nullable = false, description = "Optional: end the stream (and the session) this many milliseconds after it opens, 1 to 3600000.",
            minimum = 1, maximum = 3600000),
    ),
    responses(
        (status = 200, description = "The event stream: `renewed` events, and `lost` last when the session is lost. The schema is one event's.",
            content_type = "text/event-stream", body = KeepaliveEvent),
        (status = 400, description = "`invalid_request`: a malformed path, header or `maxMs`.", body = InvalidRequestProblem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`.", body = UnauthorizedProblem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: the API key has the scope on no purpose (`scope` names it).", body = ForbiddenProblem, content_type = "application/problem+json"),
        (status = 404, description = "`lost`: the session ended, expired or never was.", body = SessionLostProblem, content_type = "application/problem+json"),
        (status = 409, description = "`not_owner`: the token is not this session's secret.", body = SessionNotOwnerProblem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`.", body = HeadersTooLargeProblem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` or `overloaded` (the watch cap is reached).", body = ServiceUnavailable, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "When to retry, in whole seconds."))),
        (status = 504, description = "`indeterminate`: the first renew's reply was lost; open the stream again.", body = crate::http::schemas::IndeterminateProblem, content_type = "application/problem+json"),
    ),
    security((), ("apiKey" = []))
)]
pub async fn keepalive(
    State(app): State<AppState>,
    path: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    RawQuery(query): RawQuery,
    Direct(direct): Direct,
    Headers(headers): Headers,
) -> Response {
    let result = async {
        app.authorize_any(&headers, super::auth::Role::Write)?;
        let mut problems = Problems::default();
        let id = match path {
            Ok(p) => path_id(&p, &mut problems),
            Err(_) => {
                problems.shape("path", "path parameters must be valid UTF-8");
                None
            }
        };
        let token = secret(&headers, &mut problems);
        let mut max_ms = None;
        for pair in query
            .as_deref()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("maxMs", v)) if max_ms.is_none() => match v.parse::<u64>() {
                    Ok(ms)
                        if (1..=3_600_000).contains(&ms)
                            && v.bytes().all(|b| b.is_ascii_digit()) =>
                    {
                        max_ms = Some(ms)
                    }
                    _ => problems.shape("maxMs", "must be between 1 and 3600000"),
                },
                _ => problems.shape("query", "only maxMs, once"),
            }
        }
        problems.finish()?;
        let (id, token) = (
            id.ok_or(ApiError::Internal)?,
            token.ok_or(ApiError::Internal)?,
        );
        // Counted as a watcher: the same cap bounds streams of every kind.
        let Some(admitted) = app.service.waiters().watch().admit(app.watch.max_watchers) else {
            return Ok(respond_one(&app.service.overloaded()));
        };
        // Registered first: a change made here once the client has the
        // first event (a PATCH with a new TTL) reaches the stream.
        let kept = app.service.keep_alive(&id);
        // The first renew answers the request: a stream opens only on a
        // live session.
        let first = match app.service.renew_session(&id, &token, None).await {
            Ok(outcome @ SessionOutcome::Renewed { .. }) => outcome,
            Ok(other) => return Ok(respond_one(&other)),
            Err(failure) => return Ok(respond_one(&failure)),
        };
        let ttl_ms = match &first {
            SessionOutcome::Renewed { session, .. } => session.ttl_ms,
            _ => 1000,
        };
        let opened = Opened {
            app: Arc::clone(&app),
            id,
            token,
            ttl_ms,
            max_ms,
            first: sse("renewed", &first),
            admitted,
            kept,
        };
        // The accept loop parsed the request: it writes the stream from a
        // small task of its own (no hyper connection, no channel).
        if let Some(slot) = direct {
            slot.put_opened(Box::new(opened));
            return Ok(event_stream(Body::empty()));
        }
        let mut opened = opened;
        let (tx, rx) = mpsc::channel::<Bytes>(4);
        let _ = tx.try_send(std::mem::take(&mut opened.first));
        tokio::spawn(async move {
            let mut events = Channel(tx);
            opened.drive(&mut events).await;
        });
        let body = futures_util::stream::unfold(rx, |mut rx| async move {
            let chunk = rx.recv().await?;
            Some((Ok::<_, Infallible>(chunk), rx))
        });
        Ok::<_, ApiError>(event_stream(Body::from_stream(body)))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// An opened keep-alive stream, its first `renewed` event written or to
/// be written: what renews it, for either way of writing it.
pub struct Opened {
    app: AppState,
    id: SessionId,
    token: OwnerToken,
    ttl_ms: u64,
    max_ms: Option<u64>,
    first: Bytes,
    /// Its place under the watch cap, for the stream's life.
    admitted: Admitted,
    /// Its registration among the streams this instance keeps.
    kept: KeptGuard,
}

/// Where a stream's events go.
trait Events {
    /// Sends `event`; false when the client went.
    fn send(&mut self, event: Bytes) -> impl Future<Output = bool> + Send;
    /// Resolves when the client went.
    fn gone(&self) -> impl Future<Output = ()> + Send;
}

/// A stream served by hyper: its body reads this channel.
struct Channel(mpsc::Sender<Bytes>);

impl Events for Channel {
    async fn send(&mut self, event: Bytes) -> bool {
        self.0.send(event).await.is_ok()
    }

    async fn gone(&self) {
        self.0.closed().await;
    }
}

/// A stream on a plain connection the accept loop handed over: events are
/// written to the socket as chunks.
struct Socket {
    stream: TcpStream,
    /// A write that makes no progress for this long closes it.
    limit: Duration,
}

impl Events for Socket {
    async fn send(&mut self, event: Bytes) -> bool {
        write(&self.stream, &[&frame(&event)], self.limit)
            .await
            .is_ok()
    }

    async fn gone(&self) {
        loop {
            if self.stream.readable().await.is_err() || gone(&self.stream) {
                return;
            }
        }
    }
}

/// Serves an opened keep-alive stream on `stream` (a plain connection the
/// accept loop handed over): writes `head` and the first event, renews
/// until the stream ends, then closes the connection. Its memory while
/// idle is this task's: the socket and the stream's state, no buffers
/// (docs/performance.md, "Sessions").
pub async fn run_direct(
    stream: TcpStream,
    opened: Box<Opened>,
    head: Vec<u8>,
    limit: Duration,
    keep: Box<dyn Send>,
) {
    let mut opened = *opened;
    let first = std::mem::take(&mut opened.first);
    if write(&stream, &[&head, &frame(&first)], limit)
        .await
        .is_err()
    {
        // The client went before its first event: end the session as
        // when it goes later.
        drop(stream);
        opened.end_gone().await;
        drop(keep);
        return;
    }
    drop((head, first));
    let mut socket = Socket { stream, limit };
    if opened.drive(&mut socket).await {
        // The last chunk, and the connection closes (its head said so).
        if write(&socket.stream, &[b"0\r\n\r\n"], limit).await.is_ok() {
            let _ = socket.stream.shutdown().await;
        }
    }
    drop(keep);
}

impl Handed for Opened {
    fn serve(
        self: Box<Self>,
        socket: TcpStream,
        head: Vec<u8>,
        limit: Duration,
        keep: Box<dyn Send>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(run_direct(socket, self, head, limit, keep))
    }
}

impl Opened {
    /// Renews until the stream ends, and ends the session if its client
    /// went or its bound came. Answers whether the client may still read
    /// (the stream ends cleanly).
    async fn drive<E: Events>(mut self, events: &mut E) -> bool {
        let _open = OpenStream::counted();
        let why = keep(
            &self.app,
            &self.id,
            &self.token,
            (self.ttl_ms, self.max_ms),
            &mut self.kept,
            events,
        )
        .await;
        let readable = match why {
            Stopped::Lost(reason) => {
                events
                    .send(sse("lost", &serde_json::json!({ "reason": reason })))
                    .await
            }
            Stopped::Shutdown => true,
            Stopped::Bound => {
                self.end().await;
                true
            }
            Stopped::Gone => {
                self.end().await;
                false
            }
        };
        drop(self.admitted);
        readable
    }

    /// The client went before the stream began.
    async fn end_gone(self) {
        let _open = OpenStream::counted();
        self.end().await;
    }

    async fn end(&self) {
        // Boxed: only a stream that is ending holds the end's state.
        if let Err(failure) = Box::pin(self.app.service.end_session(&self.id, &self.token)).await {
            tracing::warn!(
                ?failure,
                "ending a session whose keep-alive closed failed; it ends at its TTL"
            );
        }
    }
}

/// Renews until the client goes, the session is lost, or the bound. It
/// renews every third of the session's TTL, as the last renew answered it
/// or a renew on this instance set it.
async fn keep<E: Events>(
    app: &AppState,
    id: &SessionId,
    token: &OwnerToken,
    (ttl_ms, max_ms): (u64, Option<u64>),
    kept: &mut KeptGuard,
    events: &mut E,
) -> Stopped {
    let period = |ttl_ms: u64| Duration::from_millis((ttl_ms / 3).max(100));
    let mut every = period(ttl_ms);
    let bound = max_ms.map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let shutdown = app.service.shutdown_token().clone();
    loop {
        let until_bound = async {
            match bound {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = events.gone() => return Stopped::Gone,
            () = until_bound => return Stopped::Bound,
            () = shutdown.cancelled() => return Stopped::Shutdown,
            // Ended on this instance: the renew below hears it. Given a
            // new TTL on this instance: the next renew comes a third of it
            // from now (a shorter one would otherwise expire before the
            // old period's tick).
            Ok(()) = kept.signal.changed() => {
                let signal = *kept.signal.borrow_and_update();
                if let Some(ms) = signal.ttl_ms {
                    every = period(ms);
                }
                if !signal.ended {
                    continue;
                }
            }
            () = tokio::time::sleep(every) => {}
        }
        // Boxed: an idle stream does not hold a renew's state.
        match Box::pin(app.service.renew_session(id, token, None)).await {
            Ok(outcome @ SessionOutcome::Renewed { .. }) => {
                if let SessionOutcome::Renewed { session, .. } = &outcome {
                    every = period(session.ttl_ms);
                }
                if !events.send(sse("renewed", &outcome)).await {
                    return Stopped::Gone;
                }
            }
            Ok(SessionOutcome::Lost { reason }) => return Stopped::Lost(reason),
            Ok(_) => return Stopped::Lost(SessionGone::Absent),
            // A store failure: try again at the next tick (the session
            // lives its TTL, three ticks).
            Err(_) => {}
        }
    }
}
