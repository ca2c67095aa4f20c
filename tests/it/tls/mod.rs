//! HTTPS serving: certificates made by openssl in the test
//! ([`TlsMaterial`](common::redis::TlsMaterial)), a client driven by
//! tokio-rustls (ring) and hyper's client half, a real leasehold instance in
//! this process.
//!
//! Waits are on events (a handshake that shows the new certificate, a
//! closed socket), each bounded by a generous deadline.
//!
//! - `serving`: the lease cycle, refusals, client certificates, bounds;
//! - `rotation`: certificate and client CA replaced while serving;
//! - `healthcheck`: `leasehold healthcheck` against HTTPS.

#[allow(unused_imports)]
use crate::common;

mod healthcheck;
mod rotation;
mod serving;
mod support;
