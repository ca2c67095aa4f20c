//! The constants several parts of the benchmark share: the service's
//! defaults that raw Redis mirrors, and the time limits of a request.

use std::time::Duration;

/// The service's defaults, mirrored so raw Redis runs the same keys and arguments.
pub(crate) const NAMESPACE: &str = "leasehold";
pub(crate) const PURPOSE: &str = "bench";
pub(crate) const LEASE_TTL_MS: u64 = 30_000;
/// No single request may take longer than this; past it, it is a socket error.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a `permits` contender waits server-side for a permit (below
/// `REQUEST_TIMEOUT`: a wait that runs out is answered `contended`).
pub(crate) const PERMITS_WAIT_MS: u64 = 2_000;
