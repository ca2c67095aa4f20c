//! Bounds on the numbers a caller sends: TTLs and waits.

use std::time::Duration;

/// The longest hold bound (`maxHoldMs`) an acquire may ask: 30 days.
pub const MAX_HOLD_MS: u64 = 30 * 24 * 3_600_000;

/// The configured limits a TTL or wait must fall within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Smallest TTL: twice the drift budget, so a lease is never born useless.
    pub min_ttl_ms: u64,
    /// Largest TTL.
    pub max_ttl_ms: u64,
    /// Largest server-side wait.
    pub max_wait_ms: u64,
}

impl Bounds {
    /// Bounds from the drift budget, max TTL and max wait settings.
    pub fn new(drift_budget_ms: u64, max_ttl_ms: u64, max_wait_ms: u64) -> Self {
        Self {
            min_ttl_ms: (2 * drift_budget_ms).max(1),
            max_ttl_ms,
            max_wait_ms,
        }
    }

    /// Checks a requested TTL.
    pub fn ttl(&self, ms: u64) -> Result<Ttl, String> {
        if ms < self.min_ttl_ms || ms > self.max_ttl_ms {
            Err(format!(
                "must be between {} and {} milliseconds",
                self.min_ttl_ms, self.max_ttl_ms
            ))
        } else {
            Ok(Ttl(ms))
        }
    }

    /// The largest TTL.
    pub fn max_ttl(&self) -> Ttl {
        Ttl(self.max_ttl_ms)
    }

    /// Checks a requested hold bound (`maxHoldMs`): from the smallest TTL
    /// to `MAX_HOLD_MS` (30 days).
    pub fn max_hold(&self, ms: u64) -> Result<u64, String> {
        if ms < self.min_ttl_ms || ms > MAX_HOLD_MS {
            Err(format!(
                "must be between {} and {MAX_HOLD_MS} milliseconds",
                self.min_ttl_ms
            ))
        } else {
            Ok(ms)
        }
    }

    /// Checks a requested wait.
    pub fn wait(&self, ms: u64) -> Result<WaitMs, String> {
        if ms > self.max_wait_ms {
            Err(format!(
                "must be between 0 and {} milliseconds",
                self.max_wait_ms
            ))
        } else {
            Ok(WaitMs(ms))
        }
    }
}

/// How many may hold a resource at once, and how (docs/design.md §11), and the
/// lock-delay after an expiry (§12). The default is a plain lease: one
/// exclusive holder, no delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseShape {
    /// Up to this many exclusive holders at once (1..=[`LeaseShape::MAX_LIMIT`]).
    pub limit: u32,
    /// Exclusive (counted by `limit`) or shared (any number, no exclusive one).
    pub mode: Mode,
    /// After this lease *expires*, others wait this long (0..=[`LeaseShape::MAX_LOCK_DELAY_MS`]).
    pub lock_delay_ms: u64,
}

impl LeaseShape {
    /// Largest `limit`.
    pub const MAX_LIMIT: u32 = 10_000;
    /// Largest `lockDelayMs`.
    pub const MAX_LOCK_DELAY_MS: u64 = 60_000;

    /// Checks a requested limit.
    pub fn limit(n: u64) -> Result<u32, String> {
        u32::try_from(n)
            .ok()
            .filter(|n| (1..=Self::MAX_LIMIT).contains(n))
            .ok_or_else(|| format!("must be between 1 and {}", Self::MAX_LIMIT))
    }

    /// Checks a requested lock-delay.
    pub fn lock_delay(ms: u64) -> Result<u64, String> {
        if ms > Self::MAX_LOCK_DELAY_MS {
            Err(format!(
                "must be between 0 and {} milliseconds",
                Self::MAX_LOCK_DELAY_MS
            ))
        } else {
            Ok(ms)
        }
    }

    /// Whether this is a plain lease (one exclusive holder).
    pub fn is_plain(&self) -> bool {
        self.limit == 1 && self.mode == Mode::Exclusive
    }

    /// A plain lease without a lock-delay: the shape the store keeps as a
    /// single string record, and the one a release hands off in its own
    /// run (docs/queues.md).
    pub fn is_plain_undelayed(&self) -> bool {
        self.is_plain() && self.lock_delay_ms == 0
    }
}

impl Default for LeaseShape {
    fn default() -> Self {
        Self {
            limit: 1,
            mode: Mode::Exclusive,
            lock_delay_ms: 0,
        }
    }
}

/// How a permit is held.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Counted by `limit`; excludes shared holders (a plain lease: limit 1).
    #[default]
    Exclusive,
    /// Any number of shared holders at once, and no exclusive one.
    Shared,
}

impl Mode {
    /// The store's one-letter code (`x`, `s`).
    pub fn code(self) -> &'static str {
        match self {
            Mode::Exclusive => "x",
            Mode::Shared => "s",
        }
    }

    /// From the store's code.
    pub fn from_code(code: &str) -> Option<Self> {
        match code {
            "x" => Some(Mode::Exclusive),
            "s" => Some(Mode::Shared),
            _ => None,
        }
    }
}

/// A TTL within the configured bounds, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(u64);

impl Ttl {
    /// Milliseconds.
    pub fn ms(self) -> u64 {
        self.0
    }

    /// As a duration.
    pub fn duration(self) -> Duration {
        Duration::from_millis(self.0)
    }

    /// This TTL, or `ms` when shorter (a lease whose hold bound is below
    /// its TTL is granted the bound).
    pub fn at_most(self, ms: Option<u64>) -> Self {
        Self(ms.map_or(self.0, |ms| self.0.min(ms).max(1)))
    }
}

/// A server-side wait within the configured bound, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitMs(u64);

impl WaitMs {
    /// Milliseconds.
    pub fn ms(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_bounds_run_from_the_smallest_ttl_to_30_days() {
        let bounds = Bounds::new(10, 3_600_000, 30_000);
        assert!(bounds.max_hold(19).is_err());
        assert_eq!(bounds.max_hold(20), Ok(20));
        assert_eq!(bounds.max_hold(MAX_HOLD_MS), Ok(MAX_HOLD_MS));
        assert!(bounds.max_hold(MAX_HOLD_MS + 1).is_err());
        let ttl = bounds.ttl(30_000).expect("ttl");
        assert_eq!(ttl.at_most(None).ms(), 30_000);
        assert_eq!(ttl.at_most(Some(60_000)).ms(), 30_000);
        assert_eq!(ttl.at_most(Some(5_000)).ms(), 5_000);
    }

    #[test]
    fn ttl_floor_is_twice_the_drift_budget() {
        let b = Bounds::new(10, 3_600_000, 30_000);
        assert!(b.ttl(19).is_err());
        assert_eq!(b.ttl(20).map(Ttl::ms), Ok(20));
        assert!(b.ttl(3_600_001).is_err());
        assert!(b.wait(30_001).is_err());
        assert_eq!(b.wait(0).map(WaitMs::ms), Ok(0));
    }

    #[test]
    fn shape_bounds() {
        assert!(LeaseShape::limit(0).is_err());
        assert_eq!(LeaseShape::limit(1), Ok(1));
        assert_eq!(LeaseShape::limit(10_000), Ok(10_000));
        assert!(LeaseShape::limit(10_001).is_err());
        assert!(LeaseShape::limit(u64::MAX).is_err());
        assert_eq!(LeaseShape::lock_delay(60_000), Ok(60_000));
        assert!(LeaseShape::lock_delay(60_001).is_err());
        assert!(LeaseShape::default().is_plain());
        assert_eq!(Mode::from_code(Mode::Shared.code()), Some(Mode::Shared));
        assert_eq!(Mode::from_code("?"), None);
    }
}
