//! What can go wrong talking to the service: [`Error`] (with its [`Cause`])
//! says what the caller may assume was applied; [`BuildError`] why a
//! [`Client`](super::Client) could not be built.

use std::fmt;
use std::time::Duration;

use super::machine::Refused;
use crate::domain::{FieldError, OperationId};

/// Why a [`Client`](super::Client) could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The base URL is not an absolute `http://` or `https://` URL.
    #[error(
        "base URL {0:?} must be an absolute http:// or https:// URL without query or fragment"
    )]
    BaseUrl(String),
    /// The API key cannot be sent in a header.
    #[error("the API key must be visible ASCII")]
    ApiKey,
    /// The TLS settings could not be used (a CA or client certificate file
    /// that cannot be read or parsed, no system trust roots). Names the
    /// file, never a key's content.
    #[error("TLS: {0}")]
    Tls(String),
    /// The HTTP stack could not be set up.
    #[error("the HTTP client could not be built")]
    Http,
}

/// Where a failure was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The service answered with this outcome.
    Service,
    /// No connection could be made; nothing was written.
    Connect,
    /// The TLS handshake failed (the service's certificate is not trusted
    /// or does not name the host, or it refused the client certificate);
    /// nothing was written.
    Tls,
    /// The service refused the connection for want of an acceptable client
    /// certificate (mutual TLS); it read nothing.
    ClientCertificate,
    /// The request was (or may have been) written and no reply came in time.
    Timeout,
    /// The connection failed after the request was (or may have been)
    /// written, or the reply body could not be read.
    ConnectionLost,
    /// A reply came that does not follow the API contract (unknown outcome,
    /// malformed or oversized body, 5xx without a known outcome).
    UnexpectedReply {
        /// The HTTP status of that reply.
        status: u16,
    },
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Service => f.write_str("answered by the service"),
            Self::Connect => f.write_str("could not connect"),
            Self::Tls => f.write_str("TLS handshake failed"),
            Self::ClientCertificate => {
                f.write_str("the service requires a client certificate it accepts")
            }
            Self::Timeout => f.write_str("no reply in time"),
            Self::ConnectionLost => f.write_str("connection lost awaiting the reply"),
            Self::UnexpectedReply { status } => write!(f, "unexpected reply with status {status}"),
        }
    }
}

/// A request the service refused as sent (4xx other than a lease outcome):
/// nothing was applied, and sending it again unchanged will not help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// HTTP status.
    pub status: u16,
    /// The problem's `outcome` (`invalid_request`, `unauthorized`, ...).
    pub outcome: String,
    /// The problem's `detail`.
    pub detail: String,
    /// Each invalid field, for `invalid_request`.
    pub errors: Vec<FieldError>,
}

/// Why a client call did not produce one of the verb's own outcomes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Definitely not applied: the store was unreachable, or no connection
    /// to the service could be made. Retry later.
    #[error("unavailable, nothing was applied ({cause})")]
    Unavailable {
        /// The service's retry hint, when it gave one.
        retry_after: Option<Duration>,
        /// Who decided.
        cause: Cause,
    },
    /// Shed by the service's admission limit; nothing was applied.
    #[error("overloaded, nothing was applied")]
    Overloaded {
        /// The service's retry hint, when it gave one.
        retry_after: Option<Duration>,
    },
    /// Sent, and no certain reply: it may or may not have been applied.
    /// Inspect, or retry with the same attempt.
    #[error("indeterminate: sent with no certain reply ({cause})")]
    Indeterminate {
        /// The operation whose effect is unknown.
        operation_id: OperationId,
        /// What went wrong.
        cause: Cause,
    },
    /// The service refused the request as sent; nothing was applied.
    #[error("rejected by the service: {} {}", .0.status, .0.outcome)]
    Rejected(Box<Rejection>),
    /// Refused locally, without a request, because the handle is terminal.
    #[error("refused locally: the lease handle is {}", .0.state)]
    Refused(Refused),
}

impl Error {
    /// Whether the call may have changed the lease (only
    /// [`Error::Indeterminate`]).
    pub fn may_have_applied(&self) -> bool {
        matches!(self, Self::Indeterminate { .. })
    }

    /// The service's retry hint, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Unavailable { retry_after, .. } | Self::Overloaded { retry_after } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// The snake_case outcome name, as the server would say it.
    pub fn outcome_name(&self) -> &str {
        match self {
            Self::Unavailable { .. } => "unavailable",
            Self::Overloaded { .. } => "overloaded",
            Self::Indeterminate { .. } => "indeterminate",
            Self::Rejected(r) => &r.outcome,
            Self::Refused(_) => "refused_locally",
        }
    }
}
