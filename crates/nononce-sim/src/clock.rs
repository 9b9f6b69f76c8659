//! Simulated clocks: each node's kernel clock (offset, rate drift), the process clock its
//! factories and lease machine read, and the coordinator's clock.
//!
//! Simulated time ("true time") is milliseconds since the start of a run. Every other clock is
//! a piecewise-linear function of it, re-anchored whenever its rate changes or it is stepped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Unix ms at true time 0: 2027-01-15, well after the nonce epoch.
pub const START_UNIX_MS: u64 = 1_800_000_000_000;

const PPM: i128 = 1_000_000;

/// A clock that reads `value + (t - anchor) * (1 + ppm / 10^6)` at true time `t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearClock {
    anchor_t: u64,
    anchor_v: i64,
    ppm: i64,
}

impl LinearClock {
    /// A clock `offset_ms` off true time (Unix ms) at true time 0, running `ppm` fast.
    #[must_use]
    pub fn new(offset_ms: i64, ppm: i64) -> Self {
        Self {
            anchor_t: 0,
            anchor_v: i64::try_from(START_UNIX_MS).unwrap_or(i64::MAX) + offset_ms,
            ppm,
        }
    }

    /// The reading at true time `t` (not before the anchor).
    #[must_use]
    pub fn at(&self, t: u64) -> i64 {
        let dt = i128::from(t.saturating_sub(self.anchor_t));
        let v = i128::from(self.anchor_v) + dt + dt * i128::from(self.ppm) / PPM;
        i64::try_from(v).unwrap_or(i64::MAX)
    }

    /// The reading at `t` as Unix ms (0 for a reading before 1970).
    #[must_use]
    pub fn ms(&self, t: u64) -> u64 {
        u64::try_from(self.at(t)).unwrap_or(0)
    }

    /// The rate error in parts per million.
    #[must_use]
    pub const fn ppm(&self) -> i64 {
        self.ppm
    }

    /// From true time `t` on, the clock runs `ppm` fast.
    pub fn set_rate(&mut self, t: u64, ppm: i64) {
        self.anchor_v = self.at(t);
        self.anchor_t = t;
        self.ppm = ppm;
    }

    /// Steps the clock by `delta_ms` at true time `t`.
    pub fn step(&mut self, t: u64, delta_ms: i64) {
        self.anchor_v = self.at(t).saturating_add(delta_ms);
        self.anchor_t = t;
    }

    /// The earliest true time at or after `now` at which the clock, plus `offset`, reads at
    /// least `target`.
    #[must_use]
    pub fn when(&self, now: u64, offset: i64, target: u64) -> u64 {
        let target = i128::from(target) - i128::from(offset);
        if i128::from(self.at(now)) >= target {
            return now;
        }
        let rate = PPM + i128::from(self.ppm);
        if rate <= 0 {
            return u64::MAX;
        }
        let need = target - i128::from(self.anchor_v);
        // Ceiling division of a positive amount.
        let dt = (need * PPM + rate - 1) / rate;
        let mut t = u64::try_from(i128::from(self.anchor_t) + dt.max(0)).unwrap_or(u64::MAX);
        t = t.max(now);
        while t < u64::MAX && i128::from(self.at(t)) < target {
            t += 1;
        }
        while t > now && i128::from(self.at(t - 1)) >= target {
            t -= 1;
        }
        t
    }
}

/// A process clock shared with the factories: the simulator sets it, generation reads it.
/// It cannot wait, so a generator ahead of it reports `WouldBlock`.
#[derive(Debug, Clone, Default)]
pub struct SimClock(Arc<AtomicU64>);

impl SimClock {
    /// A clock reading `now_ms`.
    #[must_use]
    pub fn new(now_ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(now_ms)))
    }

    /// Moves the reading forward to `now_ms` (never back: process clocks are monotonic).
    pub fn set(&self, now_ms: u64) {
        self.0.fetch_max(now_ms, Ordering::Relaxed);
    }
}

impl nonce_core::Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_clock_reads_offset_and_drift() {
        let c = LinearClock::new(-1000, 100);
        assert_eq!(c.ms(0), START_UNIX_MS - 1000);
        // 100 ppm over 10 000 s gains a second.
        assert_eq!(c.ms(10_000_000), START_UNIX_MS - 1000 + 10_000_000 + 1000);
        let mut d = c;
        d.step(5_000, 300);
        assert_eq!(d.at(5_000), c.at(5_000) + 300);
        d.set_rate(6_000, -50);
        assert_eq!(d.ppm(), -50);
    }

    #[test]
    fn when_inverts_the_clock() {
        for ppm in [-20_000, -100, 0, 100, 20_000] {
            let c = LinearClock::new(12_345, ppm);
            for target_dt in [0u64, 1, 999, 3_600_000] {
                let target = c.ms(100) + target_dt;
                let t = c.when(100, 0, target);
                assert!(c.ms(t) >= target);
                assert!(t == 100 || c.ms(t - 1) < target, "ppm {ppm} dt {target_dt}");
            }
            // With a process offset.
            let t = c.when(0, -500, c.ms(0));
            assert!(c.at(t) - 500 >= c.at(0));
        }
    }
}
