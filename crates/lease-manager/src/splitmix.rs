//! SplitMix64, the workspace's one small seeded generator.
//!
//! Self-contained on purpose: `xtask`, which does not depend on lease-core, compiles this file
//! into itself, so it must name nothing else of this crate.

/// SplitMix64 (Steele, Lea and Flood): a small, fast seeded generator, good enough for backoff
/// jitter, simulation schedules and test inputs, and of no cryptographic quality.
///
/// Its output for a seed is part of the workspace's contract: the lease manager's jitter and
/// the simulation's schedules (and the outcomes documented for particular seeds) are drawn from
/// it, so the algorithm never changes.
///
/// ```
/// use lease_manager::SplitMix64;
///
/// let mut a = SplitMix64::new(42);
/// let mut b = SplitMix64::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded from the process's random hash keys (different in every process).
    #[must_use]
    pub fn from_entropy() -> Self {
        use std::hash::{BuildHasher, RandomState};
        Self::new(RandomState::new().hash_one(0x006e_6f6e_6f6e_6365_u64))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`0` when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        // Widening multiply maps 64 random bits onto 0..bound with negligible bias.
        let wide = u128::from(self.next_u64()) * u128::from(bound);
        u64::try_from(wide >> 64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    /// The reference outputs for seed 0 (from the algorithm's published C code): schedules
    /// and jitter drawn from this generator stay what they were.
    #[test]
    fn the_stream_is_splitmix64_s() {
        let mut g = SplitMix64::new(0);
        assert_eq!(
            [g.next_u64(), g.next_u64(), g.next_u64()],
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
    }

    #[test]
    fn below_stays_below_its_bound_and_repeats_for_a_seed() {
        let (mut g, mut h) = (SplitMix64::new(7), SplitMix64::new(7));
        for bound in [1, 2, 3, 10, 100, 1 << 40, u64::MAX] {
            for _ in 0..1000 {
                let x = g.below(bound);
                assert!(x < bound);
                assert_eq!(x, h.below(bound));
            }
        }
        assert_eq!(g.below(0), 0);
    }
}
