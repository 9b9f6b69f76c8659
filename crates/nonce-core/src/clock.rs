//! Time sources for nonce timestamps and lease deadlines.
//!
//! Nonce timestamps and lease deadlines share one clock so that a deadline can be
//! checked against a nonce's own timestamp with one integer comparison.

/// A millisecond clock for nonce timestamps and lease deadlines.
///
/// Implementations must be monotonic (never go backwards) and should keep running while the
/// machine is suspended, so that a lease deadline computed before a suspend is still honoured
/// after it. Values are milliseconds since the Unix epoch, fixed to wall-clock time once when the
/// clock is created; later wall-clock jumps do not move them.
pub trait Clock {
    /// Milliseconds since the Unix epoch, monotonic.
    fn now_ms(&self) -> u64;

    /// A reading of the clock's own time source taken now: never older than
    /// [`now_ms`](Clock::now_ms), never ahead of the source.
    ///
    /// A clock that serves `now_ms` from a value published earlier (a
    /// [`TickerClock`](crate::TickerClock)) reads its source here. The decisions of *when* a
    /// lease holds use it, so that a reading that lags can only make timestamps older and never
    /// a lease longer: where a factory's generation starts
    /// ([`Factory::enable_above`](crate::Factory::enable_above)), and the lease manager's
    /// deadlines, expiry checks and call timeouts. Every other clock reads the same here as in
    /// `now_ms`, the default.
    fn exact_now_ms(&self) -> u64 {
        self.now_ms()
    }

    /// Blocks until [`now_ms`](Clock::now_ms) is at least `target_ms`, and returns `true`.
    ///
    /// A clock that cannot wait (for example in an interrupt handler, or on a platform without a
    /// way to sleep) returns `false` without waiting; generation then reports
    /// [`Error::WouldBlock`](crate::Error::WouldBlock) instead of spinning forever.
    fn wait_until_ms(&self, target_ms: u64) -> bool {
        let _ = target_ms;
        false
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
    fn exact_now_ms(&self) -> u64 {
        (**self).exact_now_ms()
    }
    fn wait_until_ms(&self, target_ms: u64) -> bool {
        (**self).wait_until_ms(target_ms)
    }
}

#[cfg(feature = "std")]
pub use self::std_clock::BootClock;

#[cfg(feature = "std")]
mod std_clock {
    extern crate std;

    use super::Clock;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// The std clock: a suspend-aware monotonic clock (`CLOCK_BOOTTIME` on Linux, the monotonic
    /// clock elsewhere), offset once at creation to milliseconds since the Unix epoch.
    ///
    /// Waiting sleeps for whole milliseconds and then yields, so a throttled generator does not
    /// burn a core.
    #[derive(Debug, Clone, Copy)]
    pub struct BootClock {
        offset_ms: u64,
    }

    impl BootClock {
        /// Reads the wall clock once and fixes the offset from the monotonic clock to it.
        ///
        /// # Panics
        /// If the wall clock is before 1970, which no supported system reports.
        pub fn new() -> Self {
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("the system clock is set before 1970");
            let wall_ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
            Self {
                offset_ms: wall_ms.saturating_sub(monotonic_ms()),
            }
        }

        /// A clock whose `now_ms` equals the monotonic reading plus `offset_ms`; for tests that
        /// need two clocks that agree exactly.
        pub const fn with_offset(offset_ms: u64) -> Self {
            Self { offset_ms }
        }

        /// The offset added to the monotonic reading.
        pub const fn offset_ms(&self) -> u64 {
            self.offset_ms
        }
    }

    impl Default for BootClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Clock for BootClock {
        #[inline]
        fn now_ms(&self) -> u64 {
            monotonic_ms() + self.offset_ms
        }

        fn wait_until_ms(&self, target_ms: u64) -> bool {
            loop {
                let now = self.now_ms();
                if now >= target_ms {
                    return true;
                }
                // The throttle waits at most a few ms; a short sleep keeps the core free.
                std::thread::sleep(
                    Duration::from_micros(200).min(Duration::from_millis(target_ms - now)),
                );
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[inline]
    fn monotonic_ms() -> u64 {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        u64::try_from(ts.tv_sec).unwrap_or(0) * 1000
            + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
    }

    #[cfg(not(target_os = "linux"))]
    fn monotonic_ms() -> u64 {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        let start = *START.get_or_init(Instant::now);
        u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
