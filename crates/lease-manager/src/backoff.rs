//! Exponential backoff with jitter, and the small seeded generator that supplies the jitter.

use crate::SplitMix64;

/// The longest backoff delay ever used: 24 hours, in milliseconds.
pub const MAX_BACKOFF_MS: u64 = 24 * 3600 * 1000;

/// The seeded generator backoff jitter is drawn from: the workspace's [`SplitMix64`].
///
/// Jitter only spreads retries of many nodes apart; it needs no cryptographic quality, and a
/// seed makes simulations reproducible.
pub type Jitter = SplitMix64;

/// Exponential backoff: attempt `n` (1-based) waits `base * 2^(n-1) + rand(0..base)`, never more
/// than `cap` (itself at most 24 h).
///
/// ```
/// use lease_manager::backoff::{Backoff, Jitter};
/// let backoff = Backoff::new(100, 1_000);
/// let mut jitter = Jitter::new(1);
/// let first = backoff.delay_ms(1, &mut jitter);
/// assert!((100..200).contains(&first));
/// let third = backoff.delay_ms(3, &mut jitter);
/// assert!((400..500).contains(&third));
/// assert_eq!(backoff.delay_ms(20, &mut jitter), 1_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base_ms: u64,
    cap_ms: u64,
}

impl Backoff {
    /// Backoff with `base_ms` and a cap of `min(cap_ms, 24 h)`.
    #[must_use]
    pub const fn new(base_ms: u64, cap_ms: u64) -> Self {
        let cap_ms = if cap_ms < MAX_BACKOFF_MS {
            cap_ms
        } else {
            MAX_BACKOFF_MS
        };
        Self { base_ms, cap_ms }
    }

    /// The delay before retry number `attempt` (1-based; 0 is treated as 1).
    pub fn delay_ms(&self, attempt: u32, jitter: &mut Jitter) -> u64 {
        let exp = attempt.saturating_sub(1).min(63);
        let grown = self.base_ms.saturating_mul(1u64 << exp);
        grown
            .saturating_add(jitter.below(self.base_ms))
            .min(self.cap_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps() {
        let backoff = Backoff::new(100, u64::MAX);
        let mut j = Jitter::new(7);
        for n in 1..=10u32 {
            let d = backoff.delay_ms(n, &mut j);
            let low = 100 * (1 << (n - 1));
            assert!((low..low + 100).contains(&d), "attempt {n}: {d}");
        }
        assert_eq!(backoff.delay_ms(u32::MAX, &mut j), MAX_BACKOFF_MS);
    }
}
