//! A factory's generation counts (`Factory::stats`): each nonce issued counted once, by the
//! generator it came from, whichever path issued it (shared counters, handles, per-thread
//! blocks, ranges), through changes of generation; and each refusal counted by its cause.

use crate::common::T0;
use core::num::NonZeroU64;
use nonce_core::{
    Base, Error, Factory, FactoryConfig, Generator, MachineId, ManualClock, NO_DEADLINE,
};

fn factory(clock: &ManualClock, thread_cache: bool) -> Factory<&ManualClock> {
    let config = FactoryConfig::new().with_thread_cache(thread_cache);
    let f = Factory::new(clock, config).unwrap();
    f.enable(MachineId::new(5).unwrap(), NO_DEADLINE).unwrap();
    f
}

fn taken(f: &Factory<&ManualClock>) -> [u64; 3] {
    Generator::ALL.map(|g| f.stats().taken(g))
}

#[test]
fn a_new_factory_has_counted_nothing() {
    let clock = ManualClock::new(T0);
    let f = Factory::new(&clock, FactoryConfig::new()).unwrap();
    assert_eq!(f.stats(), nonce_core::GenerationStats::default());
    f.enable(MachineId::new(1).unwrap(), NO_DEADLINE).unwrap();
    assert_eq!(taken(&f), [0, 0, 0]);
}

#[test]
fn shared_calls_count_each_nonce_by_generator_through_generations() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, false);
    for _ in 0..5 {
        f.counter64().unwrap();
    }
    for _ in 0..3 {
        f.counter128().unwrap();
    }
    f.counter_range128(NonZeroU64::new(1000).unwrap()).unwrap();
    // Sortable nonces over three milliseconds, the first the generation's start.
    for ms in 0..3 {
        clock.set(T0 + ms);
        for _ in 0..4 {
            f.sortable96().unwrap();
        }
    }
    assert_eq!(taken(&f), [5, 1003, 12]);
    let stats = f.stats();
    assert_eq!(
        stats.kinds,
        [
            Some(Base::Counter),
            Some(Base::Sortable),
            Some(Base::Counter)
        ]
    );
    assert_eq!(stats.sizes(Generator::Counter64).collect::<Vec<_>>(), [64]);
    assert_eq!(
        stats.sizes(Generator::Counter96And128).collect::<Vec<_>>(),
        [128]
    );
    assert_eq!(stats.sizes(Generator::Sortable).collect::<Vec<_>>(), [96]);

    // A renewal, then a new generation (a lease lost and acquired again): nothing counted
    // twice, nothing lost.
    f.set_deadline(NO_DEADLINE);
    f.counter64().unwrap();
    f.disable();
    clock.set(T0 + 10);
    f.enable(MachineId::new(6).unwrap(), NO_DEADLINE).unwrap();
    assert_eq!(taken(&f), [6, 1003, 12]);
    f.counter64().unwrap();
    f.counter128().unwrap();
    f.sortable96().unwrap();
    f.sortable96().unwrap();
    assert_eq!(taken(&f), [7, 1004, 14]);
    // A second enable without a call between counts nothing.
    f.enable(MachineId::new(6).unwrap(), NO_DEADLINE).unwrap();
    assert_eq!(taken(&f), [7, 1004, 14]);
}

#[test]
fn handles_give_back_what_they_did_not_use() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, false);
    {
        let h = f.handle();
        for _ in 0..10 {
            h.counter96().unwrap();
        }
        for ms in 0..2 {
            clock.set(T0 + ms);
            for _ in 0..7 {
                h.sortable128().unwrap();
            }
        }
        // The handle holds blocks it has not handed out yet.
        assert!(f.stats().taken(Generator::Counter96And128) >= 10);
    }
    assert_eq!(taken(&f), [0, 10, 14]);
}

/// A thread's blocks count whole when reserved, and give back what they did not hand out
/// when they are refilled: at any time, what was issued and at most one block (8192 values)
/// per thread and generator.
#[test]
fn thread_cache_blocks_give_back_what_they_did_not_use() {
    const BLOCK: u64 = 8192;
    let clock = ManualClock::new(T0);
    let f = factory(&clock, true);
    for _ in 0..100 {
        f.counter64().unwrap();
    }
    let before = f.stats().taken(Generator::Counter64);
    assert!((100..100 + BLOCK).contains(&before), "{before}");
    // A renewal ends the block's generation: the next call gives back what it held.
    f.set_deadline(NO_DEADLINE);
    f.counter64().unwrap();
    let after = f.stats().taken(Generator::Counter64);
    assert!((101..101 + BLOCK).contains(&after), "{after}");

    // Sortable runs end with their millisecond, and double in size up to 8192: without the
    // give-back, 40 milliseconds of runs would count far more than that.
    for ms in 1..=40 {
        clock.set(T0 + ms);
        for _ in 0..3 {
            f.sortable128().unwrap();
        }
    }
    let sortable = f.stats().taken(Generator::Sortable);
    assert!((120..120 + BLOCK).contains(&sortable), "{sortable}");
}

#[test]
fn refusals_are_counted_by_cause() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, false);
    assert_eq!(f.stats().throttled, 0);
    // The 64-bit counter holds 8192 values a millisecond; the clock cannot wait.
    for _ in 0..8192 {
        f.counter64().unwrap();
    }
    assert!(matches!(f.counter64(), Err(Error::WouldBlock { .. })));
    assert!(matches!(f.counter64(), Err(Error::WouldBlock { .. })));
    assert_eq!(f.stats().throttled, 2);
    assert_eq!(f.stats().taken(Generator::Counter64), 8192);

    f.counter96().unwrap();
    assert!(matches!(
        f.sortable96(),
        Err(Error::KindConflict { bits: 96, .. })
    ));
    assert_eq!(f.stats().kind_conflicts, [0, 1, 0]);

    // A deadline already reached: the generation's start is at it.
    f.enable(MachineId::new(5).unwrap(), T0).unwrap();
    assert_eq!(f.counter128(), Err(Error::LeaseExpired));
    let h = f.handle();
    assert_eq!(h.counter128(), Err(Error::LeaseExpired));
    assert_eq!(f.stats().lease_expired, 2);
    // Other refusals are not deadline refusals.
    f.disable();
    assert_eq!(f.counter128(), Err(Error::Disabled));
    let stats = f.stats();
    assert_eq!((stats.lease_expired, stats.throttled), (2, 2));
    assert_eq!(stats.kind_conflicts, [0, 1, 0]);
}
