//! The chaos schedule's draws, on the workspace's one SplitMix64.

// lease-manager's own source, compiled in: depending on lease-manager would build nonce-core and its
// cipher crates into xtask (about 45 s more from cold, against 14 s for xtask alone) for one
// small generator. The file names nothing else of lease-manager, and `below` is not drawn here.
#[allow(dead_code)]
#[path = "../../../crates/lease-manager/src/splitmix.rs"]
mod splitmix;

use splitmix::SplitMix64;

pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.next() % len as u64).unwrap_or(0)
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.index(items.len())]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }
}
