//! The lease service's limits group: TTL bounds, waits, watches, admission
//! and retry hints, with their checks.

use clap::Args;

use super::check;
use crate::domain::ConfigError;

/// What a caller may ask for, and how many at once.
#[derive(Debug, Clone, Args)]
pub struct LimitsArgs {
    /// `retryAfterMs` when the holder's remaining TTL is unknown, and for `overloaded`.
    #[arg(
        long,
        env = "LEASEHOLD_RETRY_AFTER_MS",
        default_value_t = 50,
        display_order = 160
    )]
    pub retry_after_ms: u64,
    /// Clock drift budget; the smallest TTL is twice this.
    #[arg(
        long,
        env = "LEASEHOLD_DRIFT_BUDGET_MS",
        default_value_t = 10,
        display_order = 170
    )]
    pub drift_budget_ms: u64,
    /// Largest TTL.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_TTL_MS",
        default_value_t = 3_600_000,
        display_order = 180
    )]
    pub max_ttl_ms: u64,
    /// Largest server-side wait.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_WAIT_MS",
        default_value_t = 30_000,
        display_order = 190
    )]
    pub max_wait_ms: u64,
    /// Concurrent server-side waits; more are answered `overloaded`.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_WAITERS",
        default_value_t = 10_000,
        display_order = 200
    )]
    pub max_waiters: usize,
    /// Release what a waiting acquire got after its caller had gone, unless
    /// a replay claimed it since (`true`); `false` (this release's default)
    /// leaves it to expire with its TTL. Turn it on once no instance of the
    /// previous release serves the same store: their replays do not claim
    /// (migrations-none.md).
    #[arg(long, env = "LEASEHOLD_RELEASE_ABANDONED", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL", display_order = 210)]
    pub release_abandoned: bool,
    /// The most leases one session holds (docs/design.md §18); an acquire
    /// that would attach one more is answered `session_full`.
    #[arg(
        long,
        env = "LEASEHOLD_SESSION_MAX_LEASES",
        default_value_t = 10_000,
        display_order = 215
    )]
    pub session_max_leases: u64,
    /// Concurrent watches (long-polls and event streams); more are answered `overloaded`.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_WATCHERS",
        default_value_t = 16_384,
        display_order = 220
    )]
    pub max_watchers: usize,
    /// Internal (tests): an event stream's keep-alive comment interval, at most 15 s.
    #[arg(
        long,
        env = "LEASEHOLD_SSE_KEEPALIVE_MS",
        default_value_t = 15_000,
        hide = true,
        display_order = 230
    )]
    pub sse_keepalive_ms: u64,
    /// Concurrent store calls; more are answered `overloaded`.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_IN_FLIGHT",
        default_value_t = 1024,
        display_order = 250
    )]
    pub max_in_flight: usize,
}

impl LimitsArgs {
    /// Checks the group, naming the setting that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check::positive(&[
            ("LEASEHOLD_RETRY_AFTER_MS", self.retry_after_ms),
            ("LEASEHOLD_DRIFT_BUDGET_MS", self.drift_budget_ms),
            ("LEASEHOLD_MAX_TTL_MS", self.max_ttl_ms),
            ("LEASEHOLD_MAX_IN_FLIGHT", self.max_in_flight as u64),
            ("LEASEHOLD_MAX_WATCHERS", self.max_watchers as u64),
            ("LEASEHOLD_SSE_KEEPALIVE_MS", self.sse_keepalive_ms),
        ])?;
        if self.max_ttl_ms < 2 * self.drift_budget_ms {
            return Err(ConfigError::new(
                "LEASEHOLD_MAX_TTL_MS",
                "must be at least twice LEASEHOLD_DRIFT_BUDGET_MS",
            ));
        }
        if self.max_ttl_ms > 7 * 24 * 3600 * 1000 {
            return Err(ConfigError::new(
                "LEASEHOLD_MAX_TTL_MS",
                "must be at most 7 days",
            ));
        }
        check::at_most(&[
            ("LEASEHOLD_MAX_WAIT_MS", self.max_wait_ms, 3_600_000, ""),
            (
                "LEASEHOLD_MAX_WATCHERS",
                self.max_watchers as u64,
                1_000_000,
                "",
            ),
            (
                "LEASEHOLD_SSE_KEEPALIVE_MS",
                self.sse_keepalive_ms,
                15_000,
                "",
            ),
        ])
    }
}
