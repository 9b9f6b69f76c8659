//! The chaos node's clock: the facade's clock ([`FactoryClock`], the process's ticker over the
//! suspend-aware boot clock) plus a signed offset that the orchestrator sets at start and may
//! step back while the node runs. Factories read it as the facade's do (the ticker's
//! published reading, one load); the lease manager and the records read it exactly.
//!
//! Nodes run on one machine and so share one real clock; the offset makes each node's nonce
//! and lease clock disagree with the others' the way clocks of separate machines do. A step
//! back breaks the [`Clock`] contract (monotonic) on purpose: it is one of the faults.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use nononce::FactoryClock;
use nononce::nonce::Clock;

/// How long [`Clock::wait_until_ms`] waits before giving up: the 64-bit throttle waits for a
/// millisecond or two; a clock behind a floor (or stepped back) would otherwise block the
/// generator for seconds. Beyond it the factory reports `WouldBlock`.
const MAX_WAIT_MS: u64 = 50;

/// A shared [`FactoryClock`] with a signed offset in milliseconds.
#[derive(Debug, Clone)]
pub struct NodeClock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: FactoryClock,
    offset_ms: AtomicI64,
}

impl NodeClock {
    /// A clock `offset_ms` ahead of (positive) or behind (negative) the machine's boot clock.
    ///
    /// # Errors
    /// The ticker thread could not be started.
    pub fn new(offset_ms: i64) -> io::Result<Self> {
        Ok(Self {
            inner: Arc::new(Inner {
                base: FactoryClock::shared()?,
                offset_ms: AtomicI64::new(offset_ms),
            }),
        })
    }

    /// The current offset.
    pub fn offset_ms(&self) -> i64 {
        self.inner.offset_ms.load(Ordering::SeqCst)
    }

    /// One consistent exact reading: (node clock, offset used for it).
    pub fn now_with_offset(&self) -> (u64, i64) {
        let offset = self.offset_ms();
        (apply(self.inner.base.exact_now_ms(), offset), offset)
    }

    /// Steps the clock back by `ms`; returns the new offset.
    pub fn step_back(&self, ms: u64) -> i64 {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        self.inner.offset_ms.fetch_sub(ms, Ordering::SeqCst) - ms
    }
}

/// `base + offset`, saturating at 0 and `u64::MAX`.
pub fn apply(base_ms: u64, offset_ms: i64) -> u64 {
    base_ms.saturating_add_signed(offset_ms)
}

impl Clock for NodeClock {
    /// The ticker's published reading with the offset: what a facade factory reads.
    fn now_ms(&self) -> u64 {
        apply(self.inner.base.now_ms(), self.offset_ms())
    }

    fn exact_now_ms(&self) -> u64 {
        self.now_with_offset().0
    }

    fn wait_until_ms(&self, target_ms: u64) -> bool {
        loop {
            let now = self.now_ms();
            if now >= target_ms {
                return true;
            }
            if target_ms - now > MAX_WAIT_MS {
                // Too far ahead, or stepped back while waiting.
                return false;
            }
            std::thread::sleep(
                Duration::from_micros(200).min(Duration::from_millis(target_ms - now)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_steps_move_the_reading() {
        let clock = NodeClock::new(-5_000).unwrap();
        let (now, offset) = clock.now_with_offset();
        assert_eq!(offset, -5_000);
        let base = clock.inner.base.exact_now_ms();
        assert!(now + 5_000 <= base && base <= now + 5_100, "{now} {base}");
        assert_eq!(clock.step_back(1_500), -6_500);
        assert!(clock.now_ms() + 6_400 <= clock.inner.base.exact_now_ms());
        assert_eq!(apply(10, -20), 0);
        assert_eq!(apply(10, 20), 30);
    }

    #[test]
    fn long_waits_are_refused() {
        let clock = NodeClock::new(0).unwrap();
        assert!(!clock.wait_until_ms(clock.now_ms() + 10_000));
        assert!(clock.wait_until_ms(clock.now_ms() + 2));
    }
}
