//! A Rust client for leasehold's HTTP API (feature `client`).
//!
//! * [`Client`] speaks the API over one keep-alive connection pool:
//!   [`Client::create_attempt`], [`Client::acquire`] (optionally waiting
//!   server-side), [`Client::renew`], [`Client::release`],
//!   [`Client::inspect`], over `http://` or `https://` ([`TlsSettings`]:
//!   the system's trust store or a CA file, an optional client
//!   certificate; rustls on `ring`). Each answers the server's typed outcome (the
//!   [`crate::domain`] types) or an [`Error`] that says what the caller may
//!   assume: [`Error::Unavailable`] and [`Error::Overloaded`] were definitely
//!   not applied, [`Error::Indeterminate`] may have been.
//! * [`LeaseHandle`], from `acquired` and `replayed_same_operation`, owns a
//!   lease: its [fencing token](LeaseHandle::fencing_token), a local
//!   validity counted from the instant the request was *sent*, and the
//!   closed state machine of [`HandleCore`] (ACTIVE → LOST / RELEASED /
//!   UNKNOWN, all terminal).
//! * [`Watchdog`] renews registered handles below their TTL and hands each
//!   registration a [`CancellationToken`](tokio_util::sync::CancellationToken)
//!   that is cancelled once, when the lease stops protecting the work.
//! * [`Election`] campaigns for one lease with a public holder label and
//!   tells, on a bounded channel, when this candidate starts and stops
//!   leading (with a [`Leadership`] token cancelled before the lease's local
//!   validity ends) and every change of leader; [`Observer`] follows the
//!   leader without campaigning ([`Client::inspect_changed`], the long-poll).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use leasehold::client::{Acquire, Client, ClientSettings, Watchdog};
//! use leasehold::domain::{OperationId, Purpose, ResourceDigest, ResourceId};
//!
//! let client = Client::new(ClientSettings::new("http://127.0.0.1:8080"))?;
//! let resource = ResourceId {
//!     purpose: Purpose::parse("invoice-export")?,
//!     digest: ResourceDigest::of_raw_id("customer-42"),
//! };
//! let attempt = client.create_attempt(&OperationId::parse("export-1")?).await?;
//! if let Acquire::Acquired { handle, .. } = client.acquire(&resource, &attempt, Duration::from_secs(30), Duration::ZERO).await? {
//!     let watchdog = Watchdog::new(16);
//!     let registration = watchdog.register(&handle)?;
//!     // ... work, presenting handle.fencing_token(), until registration.token() is cancelled ...
//!     handle.release().await?;
//! }
//! # Ok(()) }
//! ```

mod api;
mod election;
mod handle;
mod machine;
mod observe;
mod reply;
mod tls;
mod watchdog;

use std::fmt;
use std::time::Duration;

pub use self::api::{Acquire, AcquireOptions, BuildError, Client, ClientSettings};
pub use self::election::{
    Election, ElectionError, ElectionEvent, ElectionSettings, Leadership, StopReason,
};
pub use self::handle::LeaseHandle;
pub use self::machine::{HandleCore, LeaseState, Refused, ReleaseReply, RenewReply};
pub use self::observe::{Leader, Observer};
pub use self::tls::{ClientIdentity, TlsSettings};
pub use self::watchdog::{
    EndReason, EventKind, Registration, Watchdog, WatchdogError, WatchdogEvent,
};

use crate::domain::OperationId;
use crate::domain::FieldError;

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
