//! # leasehold
//!
//! An HTTP/JSON lease service: callers on any stack take a time-bounded,
//! owner-checked lease on a resource, renew it, release it and inspect it,
//! and every answer is a typed outcome, ambiguity included.
//!
//! ## A request's way through
//!
//! 1. [`http::lanes`], the front door, decides which path serves it: on a
//!    plain connection a lease verb is read and answered by the service's
//!    own HTTP/1.1 loop ([`http::keep_alive`]) and an opened lease event
//!    stream written by [`http::direct`]; anything else (TLS,
//!    `LEASEHOLD_HTTP_FAST_PATHS=false`, another route, a target or head
//!    the front door does not take) by hyper. Either way the request goes
//!    through [`http::Front`] (request id, timeout, metrics), which calls
//!    the lease verbs' handlers itself and hands anything else to
//!    [`http::router`], which matches the route. [`http::extract`] parses
//!    path, attempt headers and JSON body into the validating newtypes of
//!    [`domain`] (bad input → `400/422` problem+json naming each field).
//! 2. [`service::LeaseService`] admits the call (or sheds it as
//!    `overloaded`), runs it on the [`store::Store`], and for a waiting
//!    acquire queues it in [`notify::WaitRegistry`] until a release, the
//!    holder's expiry, its deadline or shutdown.
//! 3. The store, in-memory or Redis (one Lua script per verb in `lua/`,
//!    EVALSHA, one round trip), checks and mutates atomically and answers a
//!    plain result, or says the call was `Unavailable` (definitely not
//!    applied) or `Indeterminate` (sent, no certain reply).
//! 4. The service maps that to a [`domain`] outcome; [`http::problem`]
//!    answers it with the outcome's status (`application/problem+json` for
//!    every non-2xx, `Retry-After` where there is a retry hint).
//!
//! A listing (`GET /leases/{purpose}`) takes the same way with one read per
//! page: the embedded store walks its key range, Redis `SCAN`s each master
//! and reads every key found with the inspect script (`store/redis/list.rs`).
//!
//! Watches (`GET …?changedSince=V&waitMs=N` and `GET …/events`, in
//! [`http::watch`]) join [`notify::WatchHub`]: one reader per watched
//! resource per instance, woken by the same store events as waits, fans
//! each change out to every watcher. A purpose's stream
//! (`GET /leases/{purpose}/events`, [`http::purpose_watch`]) joins
//! [`notify::PurposeHub`] the same way, one reader per watched purpose.
//!
//! A resource's history (`GET …/history`, [`http::history`]) is the bounded
//! list of its changes the store keeps beside the lease; a break
//! (`POST …/break`, [`http::operator`], the `admin` scope) ends a lease
//! for its holder.
//!
//! Underneath, [`http::server`] runs the listener loop (connection cap,
//! header/idle timeout, graceful shutdown) and, with
//! `LEASEHOLD_TLS_CERT_FILE`, the TLS handshake of [`http::tls`], whose
//! certificate is re-read when its files change.
//!
//! [`startup::run`] takes an already-bound listener and a shutdown future, so tests
//! start many instances on port 0 in one process, from a
//! [`config::ValidConfig`]. `main.rs` only parses and validates the settings
//! (once), sets up logging and binds.
//!
//! ## The other side
//!
//! `client` (feature `client`) speaks this API over http or https, with a
//! lease handle's closed state machine and a renewing watchdog; `cli`
//! (feature `cli`, on by default) builds the binary's client subcommands on
//! it (`lock`, `inspect`, `list`, `history`, `watch`, `acquire`, `renew`,
//! `release`, `break`). Neither is on the server's request path.

pub mod config;
pub mod domain;
pub mod healthcheck;
pub mod http;
pub mod notify;
pub mod service;
pub mod startup;
pub mod store;
pub mod telemetry;

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "client")]
pub mod client;

pub use startup::{build_store, run, run_observed, run_with, shutdown_signal, RunError};
