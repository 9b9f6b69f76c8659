//! The one seeded generator every decision of a run is drawn from.

use lease_manager::SplitMix64;

/// lease-manager's SplitMix64 with the draws a run needs; a run is reproducible from its seed.
#[derive(Debug, Clone)]
pub struct Rng {
    stream: SplitMix64,
}

impl Rng {
    /// A generator for `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self {
            stream: SplitMix64::new(seed ^ 0x6e6f_6e6f_6e63_6573),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.stream.next_u64()
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.stream.below(bound)
    }

    /// An index into a collection of `len` elements (`len > 0`).
    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(u64::try_from(len).unwrap_or(u64::MAX))).unwrap_or(0)
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// A number in `-bound..=bound`.
    pub fn signed(&mut self, bound: u64) -> i64 {
        let magnitude = i64::try_from(self.between(0, bound)).unwrap_or(i64::MAX);
        if self.chance(500_000) {
            -magnitude
        } else {
            magnitude
        }
    }

    /// True with probability `per_million / 1 000 000`.
    pub fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn ranges_hold() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            assert!((5..=9).contains(&r.between(5, 9)));
            assert!(r.signed(3).abs() <= 3);
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.between(4, 4), 4);
    }
}
