//! Bounds on the numbers a caller sends: TTLs and waits.

use std::time::Duration;

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
    fn ttl_floor_is_twice_the_drift_budget() {
        let b = Bounds::new(10, 3_600_000, 30_000);
        assert!(b.ttl(19).is_err());
        assert_eq!(b.ttl(20).map(Ttl::ms), Ok(20));
        assert!(b.ttl(3_600_001).is_err());
        assert!(b.wait(30_001).is_err());
        assert_eq!(b.wait(0).map(WaitMs::ms), Ok(0));
    }
}
