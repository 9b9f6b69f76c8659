//! Timestamp floors: `enable_above` starts strictly above what an earlier holder of the
//! machine ID issued, and `issued_up_to_ms` reports what this factory issued.

use crate::common;

use common::{Op, T0, all_ops, ciphers96, config, enabled_as, machine_id, slot, until_refused};
use nonce_core::{
    Base, Cipher96, Clock, Error, Factory, FactoryConfig, FactoryConfigError, MAX_TIMESTAMP,
    ManualClock, NO_DEADLINE,
};
use proptest::prelude::*;
use std::collections::HashSet;

const HOUR: u64 = 3_600_000;
const HOUR_LAG: i64 = 3_600_000;

fn factory<'c>(clock: &'c ManualClock, config: FactoryConfig<&[u8]>) -> common::F<'c> {
    Factory::new(clock, config).unwrap()
}

/// A factory on `config`, enabled as machine 5 strictly above `floor_ms` until `deadline_ms`.
fn above<'c>(
    clock: &'c ManualClock,
    config: FactoryConfig,
    floor: u64,
    deadline: u64,
) -> common::F<'c> {
    let f = factory(clock, config);
    f.enable_above(machine_id(5), floor, deadline).unwrap();
    f
}

fn sortables() -> FactoryConfig {
    config(Cipher96::Blowfish)
        .with_kind64(Base::Sortable)
        .with_kind96(Base::Sortable)
        .with_kind128(Base::Sortable)
}

/// counter96 and counter128 start past the floor at once; counter64 starts past it too, but
/// waits for the clock to pass it.
#[test]
fn counters_start_past_the_floor() {
    let clock = ManualClock::new(T0);
    let floor = T0 + HOUR;
    let f = above(&clock, config(Cipher96::Blowfish), floor, NO_DEADLINE);
    let epoch = f.epoch_ms();
    assert_eq!(f.counter96().unwrap().decode(epoch).unix_ms, floor + 1);
    assert_eq!(f.counter128().unwrap().decode(epoch).unix_ms, floor + 1);
    assert_eq!(
        f.handle().counter128().unwrap().decode(epoch).unix_ms,
        floor + 1
    );
    // The clock has not moved: these run ahead of it, as counter nonces may.
    assert_eq!(clock.now_ms(), T0);

    // A clock that cannot wait: the caller is told when to come back.
    let wait = Err(Error::WouldBlock {
        until_ms: floor + 1,
    });
    assert_eq!(f.counter64(), wait);
    assert_eq!(f.handle().counter64(), wait);
    clock.set(floor + 1);
    let n = f.counter64().unwrap().decode(epoch);
    assert_eq!(n.unix_ms, floor + 1);

    // A clock that can wait: the call waits until the clock passes the floor.
    let clock = ManualClock::new(T0).jump_on_wait(true);
    let f = above(&clock, config(Cipher96::Blowfish), floor, NO_DEADLINE);
    let n = f.counter64().unwrap().decode(epoch);
    assert_eq!((n.unix_ms, n.count), (floor + 1, 0));
    assert_eq!(clock.now_ms(), floor + 1);
}

#[test]
fn sortable_nonces_never_carry_the_floor() {
    let clock = ManualClock::new(T0);
    let floor = T0 + HOUR;
    let f = above(&clock, sortables(), floor, NO_DEADLINE);
    let epoch = f.epoch_ms();
    // sortable64 issues the rest of its starting millisecond, one past the floor, ahead of
    // the clock...
    let (issued, refused) = until_refused(|| f.sortable64());
    assert_eq!(issued.len(), 8191);
    assert!(issued.iter().all(|v| v.decode(epoch).unix_ms == floor + 1));
    // ...then waits for the clock (here: cannot, so it says until when).
    assert_eq!(
        refused,
        Error::WouldBlock {
            until_ms: floor + 2
        }
    );
    // sortable96 and 128 share that counter and keep counting in the same millisecond.
    for _ in 0..10_000 {
        assert_eq!(f.sortable96().unwrap().decode(epoch).unix_ms, floor + 1);
        assert_eq!(f.sortable128().unwrap().decode(epoch).unix_ms, floor + 1);
    }
    // Once the clock passes the floor they follow the clock again.
    clock.set(floor + 5);
    assert_eq!(f.sortable64().unwrap().decode(epoch).unix_ms, floor + 5);
    assert_eq!(f.sortable96().unwrap().decode(epoch).unix_ms, floor + 5);
}

#[test]
fn a_floor_in_the_past_or_below_the_epoch_has_no_effect() {
    let clock = ManualClock::new(T0);
    let f = above(&clock, config(Cipher96::Blowfish), T0 - HOUR, NO_DEADLINE);
    let epoch = f.epoch_ms();
    assert_eq!(f.counter128().unwrap().decode(epoch).unix_ms, T0);
    assert!(f.issued_up_to_ms() >= T0);

    // Floors are clock ms: with an epoch at the clock, floor == epoch means "from ts 1".
    let epoch_now = config(Cipher96::Blowfish).with_epoch_ms(T0);
    let at_epoch = above(&clock, epoch_now, T0 - 1, NO_DEADLINE);
    assert_eq!(at_epoch.counter128().unwrap().decode(T0).timestamp_ms, 0);
    let at_epoch = above(&clock, epoch_now, T0, NO_DEADLINE);
    assert_eq!(at_epoch.counter128().unwrap().decode(T0).timestamp_ms, 1);
    // `enable` is `enable_above` with floor 0.
    let plain = enabled_as(&clock, config(Cipher96::Blowfish), 5);
    assert_eq!(plain.counter128().unwrap().decode(epoch).unix_ms, T0);
}

#[test]
fn a_floor_at_or_past_the_deadline_issues_nothing() {
    for floor in [T0 + HOUR, T0 + HOUR + 1, T0 + 2 * HOUR] {
        let deadline = T0 + HOUR;
        let clock = ManualClock::new(T0).jump_on_wait(true);
        for cipher96 in ciphers96() {
            // Every entry point of each kind, plain and encrypted.
            let [counters, sortables] = [(); 2].map(|()| {
                let config = config(cipher96).with_plain_and_encrypted(true);
                above(&clock, config, floor, deadline)
            });
            let (hc, hs) = (counters.handle(), sortables.handle());
            for op in all_ops() {
                let f = if op.claims(cipher96).1 == Base::Counter {
                    (&counters, &hc)
                } else {
                    (&sortables, &hs)
                };
                assert_eq!(
                    op.run(f.0, f.1),
                    Err(Error::LeaseExpired),
                    "{op:?} floor {floor}"
                );
            }
        }
    }
    // Two ms below the deadline: exactly one millisecond to issue in.
    let clock = ManualClock::new(T0);
    let f = above(&clock, config(Cipher96::Blowfish), T0 + HOUR - 2, T0 + HOUR);
    let epoch = f.epoch_ms();
    assert_eq!(f.counter96().unwrap().decode(epoch).unix_ms, T0 + HOUR - 1);
}

#[test]
fn a_floor_past_the_timestamp_range_is_refused() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, config(Cipher96::Blowfish));
    let epoch = f.epoch_ms();
    let last = epoch + MAX_TIMESTAMP;
    for floor in [last, last + 1, u64::MAX - 1, u64::MAX] {
        assert_eq!(
            f.enable_above(machine_id(5), floor, NO_DEADLINE),
            Err(FactoryConfigError::TimestampOverflow { epoch_ms: epoch }),
            "floor {floor}"
        );
        // A refused enable leaves the factory disabled.
        assert_eq!(f.counter128(), Err(Error::Disabled));
    }
    f.enable_above(machine_id(5), last - 1, NO_DEADLINE)
        .unwrap();
    assert_eq!(
        f.counter128().unwrap().decode(epoch).timestamp_ms,
        MAX_TIMESTAMP
    );
}

#[test]
fn issued_up_to_covers_the_floor_and_everything_issued() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock, config(Cipher96::Blowfish));
    assert_eq!(f.issued_up_to_ms(), 0, "never enabled");
    f.disable();
    f.set_deadline(T0 + HOUR);
    assert_eq!(f.issued_up_to_ms(), 0, "never enabled");
    f.enable(machine_id(5), NO_DEADLINE).unwrap();
    assert!(f.issued_up_to_ms() >= T0 - 1);
    let floor = T0 + HOUR;
    f.enable_above(machine_id(5), floor, NO_DEADLINE).unwrap();
    assert!(
        f.issued_up_to_ms() >= floor,
        "nothing issued yet, still the floor"
    );
    f.disable();
    assert!(f.issued_up_to_ms() >= floor);
    let epoch = f.epoch_ms();
    // The 96/128-bit counter runs ahead of the clock: the bound follows it.
    f.enable(machine_id(5), NO_DEADLINE).unwrap();
    let n = f.counter96().unwrap().decode(epoch);
    assert!(n.unix_ms > floor);
    f.disable();
    let up_to = f.issued_up_to_ms();
    assert!(up_to >= n.unix_ms);
    // A successor above it starts past every nonce issued, whatever its clock.
    f.enable_above(machine_id(6), up_to, NO_DEADLINE).unwrap();
    assert!(f.counter96().unwrap().decode(epoch).unix_ms > up_to);
}

/// The clock at the epoch: the first generation starts at timestamp 0, and a re-enable still
/// starts past it.
#[test]
fn a_generation_at_timestamp_zero_is_remembered() {
    let clock = ManualClock::new(T0).jump_on_wait(true);
    let f = enabled_as(&clock, config(Cipher96::Blowfish).with_epoch_ms(T0), 5);
    let first = f.counter64().unwrap();
    assert_eq!(first.decode(T0).timestamp_ms, 0);
    f.disable();
    assert_eq!(f.issued_up_to_ms(), T0);
    f.enable(machine_id(5), NO_DEADLINE).unwrap();
    assert_ne!(f.counter64().unwrap(), first);

    // Enabled at timestamp 0 and never used: a re-enable works and starts at the clock.
    let clock = ManualClock::new(T0);
    let g = enabled_as(&clock, config(Cipher96::Blowfish).with_epoch_ms(T0), 5);
    g.disable();
    assert_eq!(g.enable(machine_id(5), NO_DEADLINE), Ok(()));
    assert!(g.counter128().unwrap().decode(T0).timestamp_ms <= 1);
}

/// The entry points a factory declared with `kinds` (per size) may use.
fn ops_for(kinds: [Base; 3], cipher96: Cipher96) -> Vec<Op> {
    all_ops()
        .into_iter()
        .filter(|op| {
            let (bits, base) = op.claims(cipher96);
            kinds[slot(bits)] == base
        })
        .collect()
}

fn kinds() -> impl Strategy<Value = [Base; 3]> {
    let base = || prop_oneof![Just(Base::Counter), Just(Base::Sortable)];
    [base(), base(), base()]
}

#[derive(Debug, Clone)]
enum Step {
    Call(usize, usize),
    Advance(u64),
    Reenable(u16),
    NewHandle,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            10 => (any::<usize>(), 1usize..3000).prop_map(|(op, n)| Step::Call(op, n)),
            2 => (0u64..5).prop_map(Step::Advance),
            1 => (0u16..3).prop_map(Step::Reenable),
            1 => Just(Step::NewHandle),
        ],
        1..25,
    )
}

/// Runs `steps` on `f` (already enabled) and returns every value issued, per size, with the
/// entry point that issued it.
fn run(f: &common::F<'_>, ops: &[Op], steps: &[Step], clock: &ManualClock) -> Vec<(Op, u16, u128)> {
    let mut out = Vec::new();
    let mut h = f.handle();
    for step in steps {
        match *step {
            Step::Call(op, n) => {
                let op = ops[op % ops.len()];
                for _ in 0..n {
                    for (bits, v) in op.run(f, &h).unwrap_or_else(|e| panic!("{op:?}: {e}")) {
                        out.push((op, bits, v));
                    }
                }
            }
            Step::Advance(ms) => clock.advance(ms),
            Step::Reenable(id) => {
                f.disable();
                f.enable(machine_id(id), NO_DEADLINE).unwrap();
            }
            Step::NewHandle => h = f.handle(),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A mix of kinds, with handles and with or without the thread cache, across several
    /// enables: once disabled, every timestamp issued is at most `issued_up_to_ms`, and a
    /// successor enabled above it, on a clock an hour (or any lag) behind or ahead, repeats
    /// none of them.
    #[test]
    fn a_successor_above_issued_up_to_never_repeats(
        cipher96 in proptest::sample::select(ciphers96()),
        kinds in kinds(),
        first in steps(),
        second in steps(),
        lag in prop_oneof![
            Just(-HOUR_LAG),
            Just(HOUR_LAG),
            Just(0i64),
            -HOUR_LAG..=HOUR_LAG,
        ],
        id in 0u16..3,
        thread_cache in any::<bool>(),
    ) {
        let cfg = config(cipher96)
            .with_kind64(kinds[0])
            .with_kind96(kinds[1])
            .with_kind128(kinds[2])
            .with_plain_and_encrypted(true)
            // Per-thread blocks behind the factory's own calls, or not (without std: not).
            .with_thread_cache(thread_cache);
        let ops = ops_for(kinds, cipher96);
        let clock_a = ManualClock::new(T0).jump_on_wait(true);
        let a = enabled_as(&clock_a, cfg, id);
        let issued = run(&a, &ops, &first, &clock_a);
        a.disable();
        let up_to = a.issued_up_to_ms();
        for &(op, bits, v) in &issued {
            let ms = op.unix_ms(&a, cipher96, bits, v);
            prop_assert!(ms <= up_to, "{:?} issued {} > {}", op, ms, up_to);
        }

        let clock_b = ManualClock::new(clock_a.now_ms().saturating_add_signed(lag)).jump_on_wait(true);
        let b = factory(&clock_b, cfg);
        b.enable_above(machine_id(id), up_to, NO_DEADLINE).unwrap();
        let seen: HashSet<(u16, u128)> = issued.iter().map(|&(_, bits, v)| (bits, v)).collect();
        for (op, bits, v) in run(&b, &ops, &second, &clock_b) {
            prop_assert!(op.unix_ms(&b, cipher96, bits, v) > up_to, "{:?} at or below the floor", op);
            prop_assert!(!seen.contains(&(bits, v)), "{:?} repeated {:x}", op, v);
        }
    }
}
