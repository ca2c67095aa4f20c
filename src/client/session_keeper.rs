//! The keep-alive task of a [`Session`](super::Session): the keep-alive
//! stream (`GET /sessions/{id}/keepalive`) while it works, `PATCH` every
//! third of the validity left when it cannot be opened or drops
//! ([`KeepAlive`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::error::Error;
use super::purpose_stream::PurposeStream;
use super::session_core::{SessionEnd, SessionShared};
use super::session_verbs::SessionRenewal;
use super::session_wire::{stream_data, SessionGone, SessionWire, StreamData};

/// How a session is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeepAlive {
    /// `GET /sessions/{id}/keepalive`: the serving instance renews the
    /// session and says so per renewal; if this process dies, the
    /// connection closes and the service ends the session at once. While
    /// the stream's answer is awaited, and when it cannot be opened or
    /// drops, the session is renewed by `PATCH` every third of its validity
    /// (the stream is tried again after each renewal); when no event comes
    /// for half the validity left, one `PATCH` is sent while the stream
    /// stays open. A stream is never given up for being slow: its close
    /// would end the session. A stream renewal is timed by the service, so
    /// its validity counts from when the previous event (or the request
    /// opening the stream) arrived, an instant before the renewal.
    Stream,
    /// `PATCH /sessions/{id}` every third of the validity left (jittered),
    /// sooner after a failure; the session ends at its TTL if this process
    /// dies.
    Renew,
    /// Nothing renews it: call [`Session::renew`](super::Session::renew) yourself.
    Manual,
}

/// The shortest pause between two renew attempts.
const MIN_PAUSE: Duration = Duration::from_millis(5);

/// Starts keeping `shared` alive as `mode` says; for `Manual`, only ends
/// the session when its local validity is about to run out.
pub(super) fn spawn(shared: &Arc<SessionShared>, mode: KeepAlive) {
    if mode == KeepAlive::Manual {
        tokio::spawn(watch_expiry(Arc::downgrade(shared), shared.stop.clone()));
        return;
    }
    let keeper = Keeper {
        session: Arc::downgrade(shared),
        stop: shared.stop.clone(),
        stream: mode == KeepAlive::Stream,
    };
    tokio::spawn(keeper.run());
}

/// Why a stream stopped being followed.
enum Followed {
    /// The session ended (or the keeper was stopped): nothing more to do.
    Over,
    /// The stream dropped or broke the contract: renew by `PATCH` at once.
    Dropped,
}

/// What opening the stream gave.
enum Opened {
    Stream(PurposeStream, Instant),
    /// The session is gone.
    Gone(SessionGone),
    /// The service does not serve the stream (an older one): do not try
    /// again.
    Unsupported,
    /// Not now (unreachable, unavailable): try again after a renewal.
    Failed,
}

struct Keeper {
    session: Weak<SessionShared>,
    stop: CancellationToken,
    /// Whether the stream may be tried.
    stream: bool,
}

impl Keeper {
    /// The session while it is alive and not being ended here.
    fn live(&self) -> Option<Arc<SessionShared>> {
        let s = self.session.upgrade()?;
        if s.end_reason().is_some() || s.ending.load(Ordering::SeqCst) || self.stop.is_cancelled() {
            return None;
        }
        Some(s)
    }

    async fn run(mut self) {
        let mut renew_at: Option<Instant> = None;
        loop {
            if self.stream {
                let Some(s) = self.live() else { return };
                // The stream's head may be slow to come: renew by PATCH meanwhile,
                // never abandoning the request (the service may have it open, and
                // its close would end the session).
                let opened = {
                    let opening = open(&s);
                    tokio::pin!(opening);
                    let mut renew_at: Option<Instant> = None;
                    loop {
                        let stop_at = s.stop_at();
                        let at = *renew_at
                            .get_or_insert_with(|| next_renew(Instant::now(), s.valid_until()));
                        tokio::select! {
                            biased;
                            _ = self.stop.cancelled() => return,
                            _ = sleep_until(stop_at) => return expire(&s),
                            opened = &mut opening => break opened,
                            _ = sleep_until(at) => {
                                renew_at = match self.renew_once(&s).await {
                                    None => return,
                                    Some(true) => None,
                                    Some(false) => Some(next_renew(Instant::now(), s.valid_until())),
                                };
                            }
                        }
                    }
                };
                drop(s);
                match opened {
                    Opened::Stream(stream, sent) => match self.follow(stream, sent).await {
                        Followed::Over => return,
                        Followed::Dropped => renew_at = Some(Instant::now()),
                    },
                    Opened::Gone(gone) => {
                        if let Some(s) = self.live() {
                            s.finish(SessionEnd::Lost(gone));
                        }
                        return;
                    }
                    Opened::Unsupported => self.stream = false,
                    Opened::Failed => {}
                }
            }
            let Some(s) = self.live() else { return };
            let stop_at = s.stop_at();
            let at = renew_at
                .take()
                .unwrap_or_else(|| next_renew(Instant::now(), s.valid_until()));
            let result = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = sleep_until(stop_at) => return expire(&s),
                result = async {
                    sleep_until(at).await;
                    s.renew().await
                } => result,
            };
            match result {
                Ok(SessionRenewal::Renewed { .. }) => {}
                Ok(SessionRenewal::Lost(_)) | Err(Error::Refused(_)) => return,
                Err(error) => {
                    tracing::debug!(session = %s.id, outcome = error.outcome_name(), "session renew failed");
                    renew_at = Some(next_renew(Instant::now(), s.valid_until()));
                }
            }
        }
    }

    /// One PATCH, bounded by the session's stop instant: `Some(true)` renewed,
    /// `Some(false)` failed without ending it, `None` the session is over.
    async fn renew_once(&self, s: &SessionShared) -> Option<bool> {
        let stop_at = s.stop_at();
        let result = tokio::select! {
            biased;
            _ = self.stop.cancelled() => return None,
            _ = sleep_until(stop_at) => {
                expire(s);
                return None;
            }
            result = s.renew() => result,
        };
        match result {
            Ok(SessionRenewal::Renewed { .. }) => Some(true),
            Ok(SessionRenewal::Lost(_)) | Err(Error::Refused(_)) => None,
            Err(error) => {
                tracing::debug!(session = %s.id, outcome = error.outcome_name(), "session renew failed");
                Some(false)
            }
        }
    }

    /// Follows an open stream until the session ends or the stream drops.
    async fn follow(&self, mut stream: PurposeStream, opened: Instant) -> Followed {
        // A stream renewal happens on the service after the previous event
        // (or the request opening the stream) arrived: validity counts
        // from that instant, never from the event's own arrival.
        let mut mark = opened;
        let mut check_at: Option<Instant> = None;
        loop {
            let Some(s) = self.live() else {
                return Followed::Over;
            };
            let stop_at = s.stop_at();
            // No event for half the validity left: ask with a PATCH.
            let at = *check_at.get_or_insert_with(|| {
                let now = Instant::now();
                now + (s.valid_until().saturating_duration_since(now) / 2).max(MIN_PAUSE)
            });
            let event = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Followed::Over,
                _ = sleep_until(stop_at) => {
                    expire(&s);
                    return Followed::Over;
                }
                _ = sleep_until(at) => {
                    let result = tokio::select! {
                        biased;
                        _ = self.stop.cancelled() => return Followed::Over,
                        _ = sleep_until(stop_at) => {
                            expire(&s);
                            return Followed::Over;
                        }
                        result = s.renew() => result,
                    };
                    check_at = match result {
                        Ok(SessionRenewal::Renewed { .. }) => None,
                        Ok(SessionRenewal::Lost(_)) | Err(Error::Refused(_)) => return Followed::Over,
                        Err(_) => Some(next_renew(Instant::now(), s.valid_until())),
                    };
                    continue;
                }
                event = stream.next() => event,
            };
            let event = match event {
                Ok(Some(event)) => event,
                Ok(None) | Err(_) => {
                    tracing::debug!(session = %s.id, "keep-alive stream dropped; renewing by PATCH");
                    return Followed::Dropped;
                }
            };
            match stream_data(&event.event, &event.data) {
                Some(StreamData::Renewed { session, lost }) if session.id == s.id => {
                    let arrived = Instant::now();
                    s.apply_renewed(mark, &session, &lost);
                    mark = arrived;
                    check_at = None;
                }
                Some(StreamData::Lost(gone)) => {
                    // While Session::end is in flight, this is our own end.
                    if !s.ending.load(Ordering::SeqCst) {
                        s.finish(SessionEnd::Lost(gone));
                    }
                    return Followed::Over;
                }
                Some(StreamData::Other) => {}
                Some(StreamData::Renewed { .. }) | None => {
                    tracing::debug!(session = %s.id, event = %event.event, "keep-alive event off contract; renewing by PATCH");
                    return Followed::Dropped;
                }
            }
        }
    }
}

/// Ends the session one drift budget before its validity runs out, unless
/// someone renews it meanwhile ([`KeepAlive::Manual`]).
async fn watch_expiry(session: Weak<SessionShared>, stop: CancellationToken) {
    loop {
        let Some(stop_at) = session.upgrade().map(|s| s.stop_at()) else {
            return;
        };
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = sleep_until(stop_at) => {}
        }
        match session.upgrade() {
            Some(s) if Instant::now() >= s.stop_at() => return expire(&s),
            Some(_) => {}
            None => return,
        }
    }
}

/// Local validity is about to run out: the session ends.
fn expire(s: &SessionShared) {
    s.finish(SessionEnd::Expired);
}

/// About a third of the validity left (jittered down to 80 % of it).
fn next_renew(now: Instant, valid_until: Instant) -> Instant {
    let left = valid_until.saturating_duration_since(now);
    let mut bytes = [0u8; 1];
    let jitter = match getrandom::fill(&mut bytes) {
        Ok(()) => 0.8 + 0.2 * f64::from(bytes[0]) / 255.0,
        Err(_) => 0.9,
    };
    now + (left / 3).mul_f64(jitter).max(MIN_PAUSE)
}

/// `GET /sessions/{id}/keepalive` with the session's secret.
async fn open(s: &SessionShared) -> Opened {
    let op = &s.attempt.operation_id;
    let url = s.client.url(&format!("/sessions/{}/keepalive", s.id));
    let headers = [
        ("Accept", "text/event-stream"),
        ("Lease-Owner-Token", s.attempt.owner_token.expose()),
    ];
    let sent = Instant::now();
    let response = match s.client.open_stream(url, &headers, op).await {
        Ok(response) => response,
        Err(_) => return Opened::Failed,
    };
    let status = response.status().as_u16();
    let event_stream = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if status == 200 && event_stream {
        return Opened::Stream(PurposeStream::from_response(response, op.clone()), sent);
    }
    let Ok(reply) = s.client.read_reply(response, op).await else {
        return Opened::Failed;
    };
    let wire = SessionWire::read(&reply.body).unwrap_or_default();
    match (status, wire.outcome.as_deref()) {
        (404, Some("lost")) => match wire.reason.as_deref().and_then(SessionGone::parse) {
            Some(gone) => Opened::Gone(gone),
            None => Opened::Unsupported,
        },
        // Unavailable, overloaded, a timeout of the service's own: later.
        (500..=599, _) | (429, _) => Opened::Failed,
        _ => Opened::Unsupported,
    }
}
