//! A clock read as one atomic load: a ticker thread publishes its source clock's readings.
//!
//! A sortable nonce needs the time; reading `CLOCK_BOOTTIME` costs about as much as the rest of
//! the call. A [`TickerClock`] instead loads the last reading a ticker thread took of its
//! source (a [`BootClock`] by default) and published with `fetch_max`. What the lease math
//! needs from it:
//!
//! - **never ahead of the source**: every published value is a reading the source gave
//!   earlier, so a reading of the ticker is at most the source's reading taken right after it.
//!   A ticker that falls behind (starved, descheduled, stopped by a debugger) only makes
//!   timestamps older;
//! - **monotonic**: values are published with `fetch_max`, so one that loses a race with a
//!   later one is never seen;
//! - **through suspend**: it publishes what the source reads, and a `BootClock` counts
//!   suspended time, so after a resume the next tick publishes the time that passed;
//! - **exact where it decides**: [`Clock::exact_now_ms`] reads the source (and publishes what it
//!   read), so the start of a generation and the lease manager's deadlines and expiry checks
//!   never get a later answer than the source would give; [`Clock::wait_until_ms`] waits on the
//!   source and publishes its reading, so a wait ends even when the ticker does not run.
//!
//! One thread serves every clone of a clock. [`TickerClock::shared`] is the process's ticker
//! over the process's boot clock, started on first use and stopped within a period of the last
//! clone's drop; a later call starts it again on the same boot clock, so every reading of it
//! belongs to one timeline.

extern crate std;

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use core::time::Duration;
use std::io;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use crate::clock::{BootClock, Clock};

/// How often the ticker threads publish: twice per millisecond, so a reading is normally less
/// than a millisecond behind its source. About 2000 wake-ups per second; see
/// docs/performance.md for the CPU time this costs.
pub const DEFAULT_TICK_PERIOD: Duration = Duration::from_micros(500);

/// A clock whose [`now_ms`](Clock::now_ms) is one atomic load of a value a ticker thread
/// publishes from its `source` clock (a [`BootClock`] by default).
///
/// Readings are never ahead of the source and never go backwards; a ticker that runs late
/// makes them older, which every lease rule tolerates (see the module docs and
/// docs/safety.md). Clones share the published value and the thread.
///
/// ```
/// use nonce_core::{BootClock, Clock, Factory, FactoryConfig, NO_DEADLINE, TickerClock};
///
/// let clock = TickerClock::shared().unwrap();
/// let factory = Factory::new(clock.clone(), FactoryConfig::new()).unwrap();
/// factory.enable(nonce_core::MachineId::new(3).unwrap(), NO_DEADLINE).unwrap();
/// let id = factory.sortable128().unwrap();
/// // The ticker's reading never passes the boot clock it publishes.
/// let made_at = id.decode(factory.epoch_ms()).unix_ms;
/// assert!(made_at <= clock.source().now_ms());
/// ```
pub struct TickerClock<S: Clock = BootClock> {
    shared: Arc<Published<S>>,
}

/// What a ticker and its clocks share; kept on its own cache lines so that no other write
/// slows the hot path's load.
#[repr(align(128))]
struct Published<S> {
    now_ms: AtomicU64,
    source: S,
}

impl<S: Clock> Published<S> {
    fn new(source: S) -> Self {
        let now_ms = AtomicU64::new(source.now_ms());
        Self { now_ms, source }
    }

    /// Publishes a fresh reading of the source; returns the value now published (the reading,
    /// or a later one another thread published meanwhile).
    fn tick(&self) -> u64 {
        let read = self.source.now_ms();
        self.now_ms.fetch_max(read, Relaxed).max(read)
    }
}

impl TickerClock<BootClock> {
    /// A clock on the process's ticker over the process's boot clock, starting the ticker's
    /// thread if no such clock is alive. Every call gives a clock on the same timeline (the
    /// boot clock's offset to Unix time is fixed once per process) and, while any of them is
    /// alive, on the same thread.
    ///
    /// # Errors
    /// When the ticker thread could not be spawned (the operating system refused a thread).
    pub fn shared() -> io::Result<Self> {
        static SOURCE: OnceLock<BootClock> = OnceLock::new();
        static RUNNING: Mutex<Weak<Published<BootClock>>> = Mutex::new(Weak::new());
        let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = running.upgrade() {
            return Ok(Self { shared });
        }
        let source = *SOURCE.get_or_init(BootClock::new);
        let clock = Self::spawn(source, DEFAULT_TICK_PERIOD)?;
        *running = Arc::downgrade(&clock.shared);
        Ok(clock)
    }
}

impl<S: Clock> TickerClock<S> {
    /// A clock with its own ticker thread publishing a reading of `source` every `period`.
    /// The thread serves this clock and its clones, and ends within one period after the last
    /// of them is dropped.
    ///
    /// # Errors
    /// When the thread could not be spawned.
    pub fn spawn(source: S, period: Duration) -> io::Result<Self>
    where
        S: Send + Sync + 'static,
    {
        let clock = Self::without_thread(source);
        let published = Arc::downgrade(&clock.shared);
        std::thread::Builder::new()
            .name("nononce-ticker".into())
            .spawn(move || run_ticker(&published, period))?;
        Ok(clock)
    }

    /// A clock with no ticker thread: its reading moves only when [`tick`](Self::tick) is
    /// called, or when a wait or [`exact_now_ms`](Clock::exact_now_ms) reads the source. For
    /// callers that drive the ticks themselves (a timer of their own, a simulation, a test).
    pub fn without_thread(source: S) -> Self {
        Self {
            shared: Arc::new(Published::new(source)),
        }
    }

    /// Publishes a fresh reading of the source and returns the published value (at least that
    /// reading). The ticker thread calls this every period.
    pub fn tick(&self) -> u64 {
        self.shared.tick()
    }

    /// The source clock whose readings this clock publishes.
    pub fn source(&self) -> &S {
        &self.shared.source
    }
}

/// The ticker thread: publishes until no clock holds the published value any more.
fn run_ticker<S: Clock>(published: &Weak<Published<S>>, period: Duration) {
    loop {
        std::thread::sleep(period);
        match published.upgrade() {
            Some(shared) => {
                shared.tick();
            }
            None => return,
        }
    }
}

impl<S: Clock> Clone for TickerClock<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: Clock + fmt::Debug> fmt::Debug for TickerClock<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TickerClock")
            .field("published_ms", &self.now_ms())
            .field("source", &self.shared.source)
            .finish()
    }
}

impl<S: Clock> Clock for TickerClock<S> {
    /// The last published reading: one relaxed load. Relaxed is enough: every value stored
    /// was read from the source before, and reads of one atomic never go back in its
    /// modification order, which `fetch_max` only ever raises.
    #[inline]
    fn now_ms(&self) -> u64 {
        self.shared.now_ms.load(Relaxed)
    }

    /// Reads the source and publishes the reading.
    fn exact_now_ms(&self) -> u64 {
        self.shared.tick()
    }

    /// Waits on the source, not on the ticker, so that a starved or stopped ticker cannot make
    /// a wait last longer than the source's own (or refuse one whose target the source has
    /// passed); then publishes the source's reading so that the caller's next
    /// [`now_ms`](Clock::now_ms) sees the target at once.
    fn wait_until_ms(&self, target_ms: u64) -> bool {
        if self.now_ms() >= target_ms || self.shared.tick() >= target_ms {
            return true;
        }
        if !self.shared.source.wait_until_ms(target_ms) {
            return false;
        }
        self.shared.tick();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_EPOCH_MS as EPOCH, Error, Factory, FactoryConfig, MachineId, ManualClock};
    use proptest::prelude::*;
    use std::sync::mpsc;

    const T0: u64 = 1_800_000_000_000;
    const ID: MachineId = MachineId::from_low_bits(5);

    type Ticker = TickerClock<ManualClock>;

    #[test]
    fn a_starved_ticker_reads_older_never_newer() {
        let clock = TickerClock::without_thread(ManualClock::new(T0));
        for step in 1..=1000 {
            clock.source().advance(7);
            assert_eq!(clock.now_ms(), T0, "no tick ran, step {step}");
            assert!(clock.now_ms() <= clock.source().now_ms());
        }
        assert_eq!(clock.tick(), T0 + 7000);
        assert_eq!(clock.now_ms(), T0 + 7000);
    }

    /// A factory on `clock`, enabled as machine 5 until `deadline_ms`.
    fn enabled(clock: &Ticker, deadline_ms: u64) -> Factory<Ticker> {
        let factory = Factory::new(clock.clone(), FactoryConfig::new()).unwrap();
        factory.enable(ID, deadline_ms).unwrap();
        factory
    }

    #[test]
    fn a_suspend_shows_at_the_next_tick() {
        let clock = TickerClock::without_thread(ManualClock::new(T0));
        let factory = enabled(&clock, T0 + 10_000);
        let made_at = || factory.sortable128().unwrap().decode(EPOCH).unix_ms;
        assert_eq!(made_at(), T0);
        // The machine sleeps for an hour; the boot clock counted it, no tick ran yet.
        clock.source().advance(3_600_000);
        // Before the tick the reading is older than the source, and so below the deadline.
        assert_eq!(made_at(), T0);
        clock.tick();
        assert_eq!(factory.sortable128(), Err(Error::LeaseExpired));
        assert_eq!(clock.now_ms(), T0 + 3_600_000);
    }

    #[test]
    fn a_generation_starts_at_the_source_not_at_a_stale_reading() {
        let clock = TickerClock::without_thread(ManualClock::new(T0));
        let factory = Factory::new(clock.clone(), FactoryConfig::new()).unwrap();
        clock.source().advance(60_000);
        assert_eq!(clock.now_ms(), T0, "no tick ran");
        factory.enable(ID, u64::MAX).unwrap();
        let first = factory.counter128().unwrap().decode(EPOCH).unix_ms;
        assert_eq!(first, T0 + 60_000);
        let published = clock.now_ms();
        assert_eq!(published, T0 + 60_000, "the enable published its reading");
    }

    #[test]
    fn waits_use_the_source_and_publish_its_reading() {
        let waiting = TickerClock::without_thread(ManualClock::new(T0).jump_on_wait(true));
        assert!(waiting.wait_until_ms(T0 + 5));
        assert_eq!(waiting.now_ms(), T0 + 5);
        // Already reached: no wait at all.
        assert!(waiting.wait_until_ms(T0 + 3));
        assert_eq!(waiting.source().now_ms(), T0 + 5);

        let refusing = TickerClock::without_thread(ManualClock::new(T0));
        assert!(!refusing.wait_until_ms(T0 + 1));
        assert_eq!(refusing.now_ms(), T0);
    }

    #[test]
    fn sortable64_past_its_cap_waits_on_the_source() {
        let clock = TickerClock::without_thread(ManualClock::new(T0).jump_on_wait(true));
        let factory = enabled(&clock, u64::MAX);
        let mut last = 0;
        for _ in 0..3 * 8192 {
            let n = factory.sortable64().unwrap().to_u64();
            assert!(n > last);
            last = n;
        }
        let reached = factory.sortable64().unwrap().decode(EPOCH).unix_ms;
        assert_eq!(reached, T0 + 3);
        assert!(clock.now_ms() <= clock.source().now_ms());
    }

    #[test]
    fn never_ahead_of_the_boot_clock_read_right_after() {
        let clock = TickerClock::shared().unwrap();
        let mut previous = 0;
        for _ in 0..200_000 {
            let ticker = clock.now_ms();
            let boot = clock.source().now_ms();
            assert!(ticker <= boot, "ticker {ticker} ahead of boot {boot}");
            assert!(
                ticker >= previous,
                "ticker went back: {previous} then {ticker}"
            );
            previous = ticker;
        }
    }

    #[test]
    fn shared_clocks_share_one_ticker_and_one_timeline() {
        let a = TickerClock::shared().unwrap();
        let b = TickerClock::shared().unwrap();
        assert!(Arc::ptr_eq(&a.shared, &b.shared));
        assert_eq!(a.source().offset_ms(), b.source().offset_ms());
    }

    /// A source that tells, by dropping its sender, when the ticker's shared state is freed.
    struct Tracked {
        clock: ManualClock,
        _alive: mpsc::Sender<()>,
    }

    impl Clock for Tracked {
        fn now_ms(&self) -> u64 {
            self.clock.now_ms()
        }
    }

    #[test]
    fn the_thread_lets_go_when_the_last_clock_is_dropped() {
        let (alive, freed) = mpsc::channel();
        let clock = TickerClock::spawn(
            Tracked {
                clock: ManualClock::new(T0),
                _alive: alive,
            },
            Duration::from_micros(100),
        )
        .unwrap();
        let copy = clock.clone();
        drop(clock);
        copy.source().clock.advance(1);
        drop(copy);
        // Returns once the source is dropped: the thread holds no clock of its own.
        assert_eq!(freed.recv(), Err(mpsc::RecvError));
    }

    #[derive(Debug, Clone)]
    enum Step {
        Advance(u64),
        Tick,
        Exact,
        Wait(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..5_000).prop_map(Step::Advance),
            Just(Step::Tick),
            Just(Step::Exact),
            (0u64..10_000).prop_map(Step::Wait),
        ]
    }

    proptest! {
        /// Whatever the source does and however rarely the ticker runs, a reading is never
        /// ahead of the source read right after it, never goes back, and a tick catches up.
        #[test]
        fn readings_trail_the_source_and_never_go_back(
            steps in proptest::collection::vec(step(), 1..200),
            waits in any::<bool>(),
        ) {
            let clock = TickerClock::without_thread(ManualClock::new(T0).jump_on_wait(waits));
            let mut previous = clock.now_ms();
            for step in steps {
                match step {
                    Step::Advance(ms) => clock.source().advance(ms),
                    Step::Tick => {
                        let published = clock.tick();
                        prop_assert_eq!(published, clock.source().now_ms());
                    }
                    Step::Exact => {
                        let exact = clock.exact_now_ms();
                        prop_assert_eq!(exact, clock.source().now_ms());
                    }
                    Step::Wait(ms) => {
                        let target = clock.now_ms() + ms;
                        let passed = clock.source().now_ms() >= target;
                        let waited = clock.wait_until_ms(target);
                        prop_assert_eq!(waited, waits || passed);
                        if waited {
                            prop_assert!(clock.now_ms() >= target);
                        }
                    }
                }
                let reading = clock.now_ms();
                prop_assert!(reading <= clock.source().now_ms());
                prop_assert!(reading >= previous);
                previous = reading;
            }
        }
    }
}
