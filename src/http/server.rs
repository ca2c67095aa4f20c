//! The listener loop: HTTP/1.1 keep-alive connections, at most
//! `max_connections` at a time, each closed when it sends no complete request
//! head within `idle_timeout`, and a graceful shutdown.
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
use tokio::sync::Semaphore;
use tower::{Service, ServiceExt as _};

/// Bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at most; at the limit the listener stops accepting
    /// (new clients wait in the kernel's backlog) until one closes.
    pub max_connections: usize,
    /// How long a connection may go without a complete request head: idle
    /// between keep-alive requests, or trickling a head in. Then it is closed.
    pub idle_timeout: Duration,
}

/// Serves `service` on `listener` until `stop` resolves, then stops
/// accepting, lets in-flight requests finish, closes idle connections and
/// returns once every connection is closed.
pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    stop: impl Future<Output = ()>,
) where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .keep_alive(true);
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
        let service = service
            .clone()
            .map_request(|req: hyper::Request<Incoming>| req.map(Body::new));
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                // A client that went away or timed out; nothing to answer.
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
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
