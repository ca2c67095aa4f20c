//! [`Rng`]: a tiny xorshift generator for test workloads (no extra crate),
//! seeded from the OS or, for a reproducible case, by the test.

/// xorshift64: not for secrets.
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from the OS.
    pub fn new() -> Rng {
        let mut seed = [0u8; 8];
        getrandom::fill(&mut seed).expect("random seed");
        Rng(u64::from_le_bytes(seed) | 1)
    }

    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True about `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
