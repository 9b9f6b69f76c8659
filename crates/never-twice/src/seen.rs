//! A value seen twice within one series (one kind and size).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Every value issued, per series (one kind and size, `S`), each with where it was last seen
/// (`T`, what the harness wants a repeat traced to; `()` for nothing).
#[derive(Debug)]
pub struct Seen<S, T = ()> {
    // A handful of series: a scan finds one faster than a hash.
    series: Vec<(S, Values<T>)>,
}

type Values<T> = HashMap<u128, T, BuildHasherDefault<Mix>>;

impl<S, T> Default for Seen<S, T> {
    fn default() -> Self {
        Self { series: Vec::new() }
    }
}

impl<S: PartialEq, T> Seen<S, T> {
    /// Nothing seen yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `value` of `series`, seen `at`.
    ///
    /// # Errors
    /// The value was seen before in `series`: where it was last seen. `at` takes its place, so
    /// that a third sighting is traced to the second.
    pub fn insert(&mut self, series: S, value: u128, at: T) -> Result<(), T> {
        let i = self.series.iter().position(|(s, _)| *s == series);
        let i = i.unwrap_or_else(|| {
            self.series.push((series, Values::default()));
            self.series.len() - 1
        });
        self.series[i].1.insert(value, at).map_or(Ok(()), Err)
    }
}

/// A fast hasher for nonce values (the murmur3 finaliser over both halves): nonces are not
/// chosen by an adversary, and a harness hashes millions of them.
#[derive(Debug, Default, Clone, Copy)]
struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    #[allow(clippy::cast_possible_truncation)] // the two halves, on purpose
    fn write_u128(&mut self, v: u128) {
        let (lo, hi) = (v as u64, (v >> 64) as u64);
        self.0 = lo ^ hi.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    #[test]
    fn a_repeated_value_is_a_duplicate_of_its_kind_only() {
        let mut seen = Seen::new();
        assert!(seen.insert(Kind::Counter64, 5, ()).is_ok());
        assert!(seen.insert(Kind::Sortable64, 5, ()).is_ok());
        assert!(seen.insert(Kind::Counter64, 6, ()).is_ok());
        assert_eq!(seen.insert(Kind::Counter64, 5, ()), Err(()));
    }

    #[test]
    fn a_repeat_is_traced_to_the_last_sighting() {
        let mut seen = Seen::new();
        assert_eq!(seen.insert(("counter", 96), 1 << 90, 'a'), Ok(()));
        assert_eq!(seen.insert(("counter", 96), 1 << 90, 'b'), Err('a'));
        assert_eq!(seen.insert(("counter", 96), 1 << 90, 'c'), Err('b'));
        // Values differing only in their high half are different values.
        assert_eq!(seen.insert(("counter", 96), 1 << 91, 'd'), Ok(()));
    }
}
