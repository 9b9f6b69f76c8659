use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use crate::clock::Clock;

/// A clock that moves only when told to: for tests, simulations and deterministic replays.
///
/// By default it cannot wait, so throttled generation reports
/// [`Error::WouldBlock`](crate::Error::WouldBlock). With
/// [`jump_on_wait`](ManualClock::jump_on_wait) a wait moves the clock to its target at once,
/// which simulates time passing without sleeping.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
    jump_on_wait: AtomicBool,
}

impl ManualClock {
    /// A clock reading `now_ms` (Unix ms).
    pub const fn new(now_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(now_ms),
            jump_on_wait: AtomicBool::new(false),
        }
    }

    /// Makes waits jump the clock forward to their target.
    pub fn jump_on_wait(self, on: bool) -> Self {
        self.jump_on_wait.store(on, SeqCst);
        self
    }

    /// Sets the reading; a value below the current one is ignored, keeping the clock monotonic.
    pub fn set(&self, now_ms: u64) {
        self.now_ms.fetch_max(now_ms, SeqCst);
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: u64) {
        self.now_ms.fetch_add(ms, SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(SeqCst)
    }

    fn wait_until_ms(&self, target_ms: u64) -> bool {
        if self.jump_on_wait.load(SeqCst) {
            self.set(target_ms);
            true
        } else {
            false
        }
    }
}
