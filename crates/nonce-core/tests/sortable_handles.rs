//! Sortable 96/128-bit nonces from per-thread handles: blocks of one millisecond's counts,
//! each nonce still carrying the millisecond it was made in.

use crate::common::{EPOCH, F, T0, conflict, enabled_as, machine_id, ms96, ms128, on_threads};
use nonce_core::{Base, Clock, Error, Factory, FactoryConfig, Handle, ManualClock, NO_DEADLINE};
use std::collections::HashSet;

fn factory(clock: &ManualClock, id: u16) -> F<'_> {
    enabled_as(clock, FactoryConfig::new(), id)
}

#[test]
fn each_nonce_carries_the_millisecond_it_was_made_in_and_each_handle_s_increase() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, 3);
    let (h1, h2) = (f.handle(), f.handle());
    let (mut last1, mut last2) = (0u128, 0u128);
    let mut seen = HashSet::new();
    for step in 0..3000u64 {
        if step % 7 == 0 {
            clock.advance(step % 3);
        }
        let now = clock.now_ms();
        let (a, b) = (h1.sortable128().unwrap(), h2.sortable128().unwrap());
        let c = f.sortable128().unwrap();
        assert_eq!((ms128(a), ms128(b), ms128(c)), (now, now, now));
        assert!(a.to_u128() > last1 && b.to_u128() > last2);
        (last1, last2) = (a.to_u128(), b.to_u128());
        for n in [a, b, c] {
            assert!(seen.insert(n), "{n} twice");
        }
    }
    // 96-bit ones share the sortable state: same rules.
    let n = h1.sortable96().unwrap();
    assert_eq!(ms96(n), clock.now_ms());
}

/// Handles do not keep a block past its millisecond: a nonce made after another one was
/// returned never carries an earlier millisecond, whichever handle made them.
#[test]
fn a_later_nonce_never_carries_an_earlier_millisecond() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, 4);
    let (h1, h2) = (f.handle(), f.handle());
    assert_eq!(ms128(h1.sortable128().unwrap()), T0);
    assert_eq!(ms128(h2.sortable128().unwrap()), T0);
    clock.advance(1);
    let b = h2.sortable128().unwrap();
    assert_eq!(ms128(b), T0 + 1);
    // h1 still holds counts of T0, but the clock is past them.
    let a = h1.sortable128().unwrap();
    assert_eq!(ms128(a), T0 + 1);
    assert_ne!(a, b);
}

#[test]
fn handle_sortables_follow_disable_enable_deadline_and_kinds() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, 1);
    let h = f.handle();
    h.sortable96().unwrap();
    h.sortable128().unwrap();
    f.disable();
    assert_eq!(h.sortable96(), Err(Error::Disabled));
    assert_eq!(h.sortable128(), Err(Error::Disabled));
    f.enable(machine_id(2), NO_DEADLINE).unwrap();
    assert_eq!(h.sortable128().unwrap().decode(EPOCH).machine_id.get(), 2);
    assert_eq!(h.sortable96().unwrap().decode(EPOCH).machine_id.get(), 2);
    // A deadline at the clock's millisecond stops the cached block at once.
    f.set_deadline(clock.now_ms());
    assert_eq!(h.sortable96(), Err(Error::LeaseExpired));
    assert_eq!(h.sortable128(), Err(Error::LeaseExpired));
    f.set_deadline(NO_DEADLINE);
    assert!(h.sortable128().is_ok());

    // One kind per size, for handles as for the factory.
    let f = factory(&clock, 5);
    let h = f.handle();
    f.counter96().unwrap();
    assert_eq!(h.sortable96(), conflict(96, Base::Counter));
    h.sortable128().unwrap();
    assert_eq!(h.counter128(), conflict(128, Base::Sortable));
}

#[test]
fn a_floor_ahead_of_the_clock_holds_for_handles() {
    let clock = ManualClock::new(T0);
    let f = Factory::new(&clock, FactoryConfig::new()).unwrap();
    f.enable_above(machine_id(6), T0 + 50, NO_DEADLINE).unwrap();
    let (h1, h2) = (f.handle(), f.handle());
    let mut seen = HashSet::new();
    for _ in 0..5000 {
        for n in [h1.sortable128().unwrap(), h2.sortable128().unwrap()] {
            assert!(ms128(n) > T0 + 50);
            assert!(seen.insert(n));
        }
    }
}

#[test]
fn many_threads_with_handles_never_repeat() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, 7);
    let all: Vec<Vec<u128>> = on_threads(4, |_| {
        let h: Handle<'_, _> = f.handle();
        (0..20_000)
            .map(|_| h.sortable128().unwrap().to_u128())
            .collect()
    });
    let mut seen = HashSet::new();
    for mine in all {
        assert!(mine.windows(2).all(|w| w[0] < w[1]));
        assert!(mine.into_iter().all(|n| seen.insert(n)));
    }
}
