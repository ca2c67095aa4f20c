//! The listener loop: HTTP/1.1 keep-alive connections, at most
//! `max_connections` at a time, each closed when it sends no complete request
//! head within `idle_timeout`, and a graceful shutdown.
//!
//! With TLS, each accepted connection does its handshake in its own task (so
//! a slow or silent client never holds up the accept loop), bounded by
//! [`HANDSHAKE_TIMEOUT`] (or the idle timeout when that is shorter), and
//! counts against the connection cap from the moment it is accepted; at
//! shutdown a connection still in its handshake is dropped at once. A
//! failed handshake is logged at DEBUG: it is the client's problem (wrong
//! CA, no client certificate, plain HTTP sent to the TLS port).
//!
//! Which path serves a request is the front door's decision
//! ([`crate::http::lanes`], its table): a plain connection is read by
//! [`crate::http::keep_alive`] while its requests are plain lease verbs,
//! handed to [`crate::http::direct`] at a lease's event stream (which then
//! writes the stream itself, so an idle watcher does not keep a hyper
//! connection's buffers and task, issue 25), and to hyper at the first
//! request of any other lane. A TLS connection, and every connection with
//! `LEASEHOLD_HTTP_FAST_PATHS=false`, is hyper's from the start.
//!
//! One head deadline per connection, whichever path reads the head (issue
//! 39 item 2): the first head must be whole within the idle timeout of the
//! accept (a TLS handshake's time included), and a head a loop began
//! reading when hyper takes the connection keeps its deadline
//! ([`ConnTimer::carry_head`]).
//!
//! Why not `axum::serve`: it sets neither bound. A client that opens
//! connections and never finishes a request head (or simply never closes an
//! idle keep-alive connection) would hold a task, a socket and its buffers
//! for ever, and enough of them exhaust file descriptors or memory
//! ("slowloris"). hyper has both knobs (`header_read_timeout` with a timer;
//! a semaphore here for the count), but `axum::serve` does not expose them.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt as _};

use crate::http::conn_timer::ConnTimer;
use crate::http::direct;
use crate::http::keep_alive::{self, Ended};
use crate::http::keepalive;
use crate::http::tls::CurrentAcceptor;
use crate::http::watch_stream::Opened;
use crate::http::write_timeout::WriteTimeout;

/// How long a TLS handshake may take at most. A handshake is a few round
/// trips: a client that needs longer is stuck or hostile.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at most; at the limit the listener stops accepting
    /// (new clients wait in the kernel's backlog) until one closes.
    pub max_connections: usize,
    /// How long a connection may go without a complete request head: idle
    /// between keep-alive requests, or trickling a head in; and how long its
    /// writes may make no progress (a peer that stops reading). Then it is
    /// closed.
    pub idle_timeout: Duration,
    /// Whether plain connections may be served by the hand-written paths
    /// (`LEASEHOLD_HTTP_FAST_PATHS`); false: hyper serves every request.
    pub fast_paths: bool,
}

/// Serves `service` on `listener` (over TLS when `tls` is given) until
/// `stop` resolves, then stops accepting, lets in-flight requests finish,
/// closes idle connections and returns once every connection is closed.
pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    tls: Option<CurrentAcceptor>,
    stop: impl Future<Output = ()>,
) where
    S: Service<Request, Response = Response, Error = Infallible> + Served + Send + 'static,
    S::Future: Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Each connection's builder gets the connection's own timer (below).
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .keep_alive(true);
    let handshake_timeout = HANDSHAKE_TIMEOUT.min(limits.idle_timeout);
    let shutting_down = CancellationToken::new();
    // Held by every connection and event stream outside hyper
    // ([`direct`]); `recv` answers `None` once all are gone.
    let (streams, mut streams_done) = mpsc::channel::<()>(1);
    let mut at_limit = false;
    tokio::pin!(stop);
    loop {
        let full = permits.available_permits() == 0;
        if full && !at_limit {
            tracing::warn!(
                max_connections = limits.max_connections,
                "connection limit reached; not accepting until one closes"
            );
        }
        at_limit = full;
        let permit = tokio::select! {
            biased;
            () = &mut stop => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead
                    // of spinning on an error that persists.
                    tracing::error!(error = %e, "accept failed; retrying in 1 s");
                    tokio::select! {
                        () = &mut stop => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        // One timer for the connection's header reads and request
        // timeouts (`conn_timer`).
        let timer = ConnTimer::new();
        let for_connection = service.on_connection(&timer);
        let service = for_connection
            .clone()
            .map_request(|req: hyper::Request<Incoming>| req.map(Body::new));
        let service = TowerToHyperService::new(service);
        // Taken now: a connection whose handshake ends after shutdown began
        // is still closed gracefully, and shutdown waits for it.
        let watcher = graceful.watcher();
        let mut builder = builder.clone();
        builder.timer(timer.clone());
        // The acceptor current now: a new client CA applies from here on.
        let tls = tls.as_ref().map(|current| current.get());
        let shutting_down = shutting_down.clone();
        let streams = streams.clone();
        // The connection's one deadline for its first head.
        let head_by =
            tokio::time::Instant::from_std(std::time::Instant::now() + limits.idle_timeout);
        tokio::spawn(async move {
            let idle = limits.idle_timeout;
            // A plain connection's requests go to the hand-written paths
            // while the front door allows (`keep_alive`, `direct`), then to
            // hyper. Either way a peer that stops reading (a watcher that
            // never reads its stream) is closed once its writes have made
            // no progress for the idle timeout, freeing its connection and
            // watcher slot.
            let result = match tls {
                None if !limits.fast_paths => {
                    timer.carry_head(head_by);
                    let stream = TokioIo::new(WriteTimeout::new(stream, idle));
                    watcher
                        .watch(builder.serve_connection(stream, service))
                        .await
                }
                None => {
                    let served = keep_alive::serve(
                        stream,
                        for_connection,
                        &timer,
                        head_by,
                        idle,
                        &shutting_down,
                    )
                    .await;
                    match served {
                        Ended::Closed => Ok(()),
                        Ended::Events(stream, opened, head) => {
                            // A small task of its own: this one's state
                            // (hyper's builder, the service) is freed.
                            let keep = (permit, streams);
                            match opened {
                                Opened::Watch(events) => {
                                    tokio::spawn(direct::run(stream, events, head, idle, keep));
                                }
                                Opened::Keepalive(kept) => {
                                    tokio::spawn(keepalive::run_direct(
                                        stream, kept, head, idle, keep,
                                    ));
                                }
                            }
                            return;
                        }
                        Ended::Hyper(stream) => {
                            let stream = TokioIo::new(stream.map(|s| WriteTimeout::new(s, idle)));
                            watcher
                                .watch(builder.serve_connection(stream, service))
                                .await
                        }
                    }
                }
                Some(acceptor) => {
                    let stream = WriteTimeout::new(stream, idle);
                    timer.carry_head(head_by);
                    let handshake =
                        tokio::time::timeout(handshake_timeout, acceptor.accept(stream));
                    tokio::select! {
                        done = handshake => match done {
                            Ok(Ok(stream)) => {
                                let conn = builder.serve_connection(TokioIo::new(stream), service);
                                watcher.watch(conn).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                Ok(())
                            }
                            Err(_) => {
                                tracing::debug!(
                                    timeout_ms = handshake_timeout.as_millis() as u64,
                                    "TLS handshake timed out"
                                );
                                Ok(())
                            }
                        },
                        // Shutting down: a connection that has not finished
                        // its handshake has sent no request; drop it now
                        // rather than hold up the shutdown.
                        () = shutting_down.cancelled() => Ok(()),
                    }
                }
            };
            if let Err(e) = result {
                // A client that went away or timed out; nothing to answer.
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop((permit, streams));
        });
    }
    drop(listener);
    shutting_down.cancel();
    graceful.shutdown().await;
    // The event streams written outside hyper end at shutdown too (their
    // watch groups and keep-alive ticker end); each holds a sender.
    drop(streams);
    let _ = streams_done.recv().await;
}

/// A service served on connections: the clone that serves one hyper
/// connection may take that connection's timer (the front does, for its
/// request timeout).
pub trait Served: Clone {
    /// The clone for one connection.
    fn on_connection(&self, timer: &ConnTimer) -> Self;
}

impl Served for axum::Router {
    fn on_connection(&self, _: &ConnTimer) -> Self {
        self.clone()
    }
}

/// Errors of one incoming connection, not of the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
