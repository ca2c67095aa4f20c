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
//! * [`Session`] is one liveness for many leases (docs/design.md §18,
//!   §19): [`Session::acquire`] attaches leases that end with it, each a
//!   [`SessionLease`] (its own fencing token, the session's validity, a
//!   token cancelled once when it stops protecting the work); a keep-alive
//!   stream renews it ([`KeepAlive`]), falling back to `PATCH`.
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

mod acquire;
mod api;
mod election;
mod error;
mod handle;
mod history;
mod leadership;
mod machine;
mod observe;
mod purpose_stream;
mod reply;
mod session;
mod session_core;
mod session_keeper;
mod session_lease;
mod session_verbs;
mod session_wire;
mod tls;
mod watchdog;

pub use self::acquire::{Acquire, AcquireOptions};
pub use self::api::{Client, ClientSettings};
pub use self::election::Election;
pub use self::error::{BuildError, Cause, Error, Rejection};
pub use self::handle::LeaseHandle;
pub use self::leadership::{ElectionError, ElectionEvent, Leadership, StopReason};
pub use self::machine::{HandleCore, LeaseState, Refused, ReleaseReply, RenewReply};
pub use self::observe::{ElectionSettings, Leader, Observer};
pub use self::purpose_stream::{PurposeStream, StreamEvent};
pub use self::session::{Session, SessionOptions};
pub use self::session_core::SessionEnd;
pub use self::session_keeper::KeepAlive;
pub use self::session_lease::{Attach, SessionLease};
pub use self::session_verbs::{SessionEnded, SessionRenewal};
pub use self::session_wire::{
    session_id_of, AttachedLease, LostLease, SessionGone, SessionInfo, SessionPage,
};
pub use self::tls::{ClientIdentity, TlsSettings};
pub use self::watchdog::{
    EndReason, EventKind, Registration, Watchdog, WatchdogError, WatchdogEvent,
};
