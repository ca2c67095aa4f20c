//! A lease's event stream once it is open: the events' bytes, what a
//! stream keeps between events ([`Stream`]), and the two ways it reaches
//! its client: as hyper's streamed body ([`response`]), or, on a plain
//! connection the accept loop took out of hyper, handed over through a
//! [`DirectSlot`] and written by [`crate::http::direct`].

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use tokio::sync::watch;

use crate::domain::Change;
use crate::http::schemas::STATE_EVENT;
use crate::notify::{Snapshot, Watcher};

/// The comment line a stream writes when it has been quiet for the
/// keep-alive interval.
pub const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// One event: `event:`, `id:` (the version) and `data:` (the state).
fn event(kind: &str, snapshot: &Snapshot, data: &str) -> Bytes {
    Bytes::from(format!(
        "event: {kind}\nid: {}\ndata: {data}\n\n",
        snapshot.version()
    ))
}

/// The `state` event: the group's state may be seconds old, so its
/// countdown is brought up to now.
pub fn state_event(snapshot: &Snapshot) -> Bytes {
    let data = serde_json::to_string(&snapshot.now()).unwrap_or_default();
    event(STATE_EVENT, snapshot, &data)
}

/// A `revoked` event's data: the state, plus who broke it and why.
fn revoked_data(snapshot: &Snapshot, revocation: &crate::domain::Revocation) -> String {
    let mut data = serde_json::to_value(&snapshot.inspection).unwrap_or_default();
    if let (Some(object), Ok(revocation)) = (data.as_object_mut(), serde_json::to_value(revocation))
    {
        object.insert("revocation".to_owned(), revocation);
    }
    data.to_string()
}

/// A change's event as sent: encoded once per state and kind, the same
/// bytes for every watcher (see [`Snapshot::encoded`]).
pub fn change_event(change: Change, snapshot: &Snapshot) -> Bytes {
    snapshot.encoded(change, |s| match (change, &s.revocation) {
        (Change::Revoked, Some(revocation)) => {
            event(change.as_str(), s, &revoked_data(s, revocation))
        }
        _ => event(change.as_str(), s, s.json()),
    })
}

/// What a stream keeps between events: a small fixed state. The
/// keep-alive is the instance's shared tick
/// ([`crate::notify::WatchHub::keepalive`]), not a timer per stream. No
/// shutdown token of its own: at shutdown the group and the ticker end,
/// and with them the stream (one registration fewer to make and undo per
/// event and watcher).
pub struct Stream {
    watcher: Watcher,
    first: Option<Bytes>,
    keepalive: watch::Receiver<u64>,
    /// Events still to send (`maxEvents`); `None`: no bound.
    left: Option<u32>,
    /// When the stream ends (`maxMs`); `None`: no bound.
    deadline: Option<tokio::time::Instant>,
}

/// A [`Stream`] taken apart, for a direct stream's task
/// ([`crate::http::direct`]), which writes its events itself.
pub struct StreamParts {
    pub watcher: Watcher,
    pub first: Option<Bytes>,
    pub keepalive: watch::Receiver<u64>,
    pub left: Option<u32>,
    pub deadline: Option<tokio::time::Instant>,
}

impl Stream {
    /// The stream's parts.
    pub fn into_parts(self) -> StreamParts {
        StreamParts {
            watcher: self.watcher,
            first: self.first,
            keepalive: self.keepalive,
            left: self.left,
            deadline: self.deadline,
        }
    }

    /// A stream of `watcher`'s changes, `first` (the `state` event, unless
    /// the client resumes with nothing missed) sent first, ending after
    /// `max_events` events or `max_ms` (`maxEvents`, `maxMs`).
    pub fn new(
        watcher: Watcher,
        first: Option<Bytes>,
        (max_events, max_ms): (Option<u32>, Option<u64>),
        keepalive: watch::Receiver<u64>,
    ) -> Self {
        let now = tokio::time::Instant::now();
        Self {
            watcher,
            first,
            keepalive,
            left: max_events,
            deadline: max_ms.map(|ms| now + Duration::from_millis(ms)),
        }
    }

    /// `event` to send, counted against `maxEvents`.
    fn sent(&mut self, event: Bytes) -> Bytes {
        if let Some(left) = &mut self.left {
            *left = left.saturating_sub(1);
        }
        event
    }

    /// The next bytes to send: an event or a keep-alive comment; `None`
    /// when the stream is over (a bound reached, or shutdown). Cancel-safe:
    /// nothing is taken before its last await.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.left == Some(0) {
            return None;
        }
        if let Some(first) = self.first.take() {
            return Some(self.sent(first));
        }
        tokio::select! {
            biased;
            () = until(self.deadline) => None,
            // `None`: the group ended (shutdown).
            next = self.watcher.next() => {
                let (change, snapshot) = next?;
                Some(self.sent(change_event(change, &snapshot)))
            }
            // The ticker ends only at shutdown.
            tick = self.keepalive.changed() => match tick {
                Ok(()) => Some(Bytes::from_static(KEEPALIVE)),
                Err(_) => None,
            },
        }
    }
}

/// Until `deadline`, or forever without one.
pub async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// An event stream's 200 answer (status and headers) with `body`; also
/// the purpose stream's.
pub fn event_stream(body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies that buffer answers (nginx) pass this one through as it comes.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The 200 answer: events until shutdown or a bound (the body then ends
/// cleanly) or until the client goes (the body is dropped, and the watcher
/// with it).
///
/// With `direct` (the request came through the accept loop's own parser,
/// [`crate::http::direct`]) the stream is left in the slot and the body is
/// empty: the accept loop writes the head and the events itself, without
/// hyper's connection and its buffers.
pub fn response(stream: Stream, direct: Option<&DirectSlot>) -> Response {
    if let Some(slot) = direct {
        slot.put(stream);
        return event_stream(Body::empty());
    }
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        let chunk = s.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), s))
    });
    event_stream(Body::from_stream(body))
}

/// The request's [`DirectSlot`], if the accept loop parsed it (an
/// extractor).
pub struct Direct(pub Option<DirectSlot>);

impl<S: Send + Sync> FromRequestParts<S> for Direct {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Self(parts.extensions.remove::<DirectSlot>()))
    }
}

/// Where the events handler leaves an open stream for the accept loop to
/// write: a request extension set only on requests the accept loop parsed
/// itself.
#[derive(Clone, Default)]
pub struct DirectSlot(Arc<Mutex<Option<Opened>>>);

/// A stream a handler opened, for the accept loop to write.
pub enum Opened {
    /// A lease's event stream ([`crate::http::direct::run`]).
    Watch(Stream),
    /// A session's keep-alive stream ([`crate::http::keepalive::run_direct`]).
    Keepalive(Box<crate::http::keepalive::Opened>),
}

impl DirectSlot {
    fn put(&self, stream: Stream) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(Opened::Watch(stream));
        }
    }

    /// Leaves an opened keep-alive stream.
    pub fn put_keepalive(&self, opened: Box<crate::http::keepalive::Opened>) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(Opened::Keepalive(opened));
        }
    }

    /// The stream the handler left, if it opened one.
    pub fn take(&self) -> Option<Opened> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}
