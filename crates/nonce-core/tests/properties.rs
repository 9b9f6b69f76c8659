//! Property tests: uniqueness across threads and handles, sortable order, cipher bijection.

use crate::common::{KEY, Op, T0, enabled_as, machine_id, on_threads};
use nonce_core::{
    Base, BootClock, Cipher64, Cipher96, Cipher128, Factory, FactoryConfig, ManualClock,
    NO_DEADLINE, Nonce64, Nonce96, Nonce128,
};
use proptest::prelude::*;
use std::collections::HashSet;

/// Each kind as a factory call and as the call of a thread with a handle (sortable nonces
/// come from the factory either way).
const KINDS: [(Op, Op); 9] = [
    (Op::Counter64, Op::HandleCounter64),
    (Op::Counter96, Op::HandleCounter96),
    (Op::Counter128, Op::HandleCounter128),
    (Op::Sortable64, Op::Sortable64),
    (Op::Sortable96, Op::Sortable96),
    (Op::Sortable128, Op::Sortable128),
    (Op::Encrypted64(Base::Counter), Op::HandleEncrypted64),
    (Op::Encrypted96(Base::Sortable), Op::HandleEncrypted96),
    (Op::Encrypted128(Base::Counter), Op::HandleEncrypted128),
];

/// Generates `per_thread` nonces of `kind` on each of `threads` threads and checks that no
/// value repeats.
fn unique_across_threads(kind: (Op, Op), threads: usize, per_thread: usize, handles: bool) {
    let op = if handles { kind.1 } else { kind.0 };
    let f = Factory::new(BootClock::new(), FactoryConfig::new().with_base_key(&KEY)).unwrap();
    f.enable(machine_id(300), NO_DEADLINE).unwrap();
    let all = on_threads(threads, |_| {
        let h = f.handle();
        (0..per_thread)
            .flat_map(|_| {
                op.run(&f, &h)
                    .expect("a real clock waits, and there is no deadline")
            })
            .map(|(_, v)| v)
            .collect::<Vec<_>>()
    });
    let mut seen = HashSet::with_capacity(threads * per_thread);
    for v in all.iter().flatten() {
        assert!(seen.insert(*v), "{op:?}: duplicate {v:#x}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 18, ..ProptestConfig::default() })]

    /// Over all cases: several million nonces, every kind and size, shared and per-thread.
    #[test]
    fn nonces_are_unique_across_threads(
        kind in proptest::sample::select(&KINDS[..]),
        threads in 1usize..=3,
        handles in any::<bool>(),
    ) {
        unique_across_threads(kind, threads, 120_000, handles);
    }

    /// Sortable nonces carry the clock's time and increase strictly within a thread, whatever
    /// the clock does between calls.
    #[test]
    fn sortable_nonces_follow_the_fake_clock(steps in proptest::collection::vec((0u64..3, 1usize..300), 1..60)) {
        let clock = ManualClock::new(T0);
        let f = enabled_as(&clock, FactoryConfig::new(), 12);
        let epoch = f.epoch_ms();
        let (mut last64, mut last96, mut last128) = (None, None, None);
        for (advance, n) in steps {
            clock.advance(advance);
            let now = nonce_core::Clock::now_ms(&clock);
            for _ in 0..n {
                let a = f.sortable64().unwrap();
                let b = f.sortable96().unwrap();
                let c = f.sortable128().unwrap();
                prop_assert_eq!(a.decode(epoch).unix_ms, now);
                prop_assert_eq!(b.decode(epoch).unix_ms, now);
                prop_assert_eq!(c.decode(epoch).unix_ms, now);
                prop_assert!(last64.is_none_or(|l| a > l));
                prop_assert!(last96.is_none_or(|l| b > l));
                prop_assert!(last128.is_none_or(|l| c > l));
                (last64, last96, last128) = (Some(a), Some(b), Some(c));
            }
        }
    }

    /// Every cipher, every size: decrypt(encrypt(x)) == x, so distinct nonces stay distinct.
    #[test]
    fn encryption_is_a_bijection(x in any::<u128>(), x64 in any::<u64>(), key in proptest::collection::vec(any::<u8>(), 32..64)) {
        let clock = ManualClock::new(T0);
        for (c64, c96, c128) in [
            (Cipher64::Blowfish, Cipher96::Blowfish, Cipher128::Aes),
            (Cipher64::Des3, Cipher96::Des3, Cipher128::Speck),
            (Cipher64::Speck, Cipher96::Speck, Cipher128::Aes),
        ] {
            let f = Factory::new(&clock, FactoryConfig::new().with_base_key(&key).with_cipher64(c64).with_cipher96(c96).with_cipher128(c128)).unwrap();
            let n64 = Nonce64::from_u64(x64);
            prop_assert_eq!(f.decrypt64(f.encrypt64(n64).unwrap()).unwrap(), n64);
            let n96 = if c96.has_64bit_block() {
                Nonce96::from_u128(u128::from(x64) << 32).unwrap()
            } else {
                Nonce96::from_u128(x >> 32).unwrap()
            };
            prop_assert_eq!(f.decrypt96(f.encrypt96(n96).unwrap()).unwrap(), n96);
            let n128 = Nonce128::from_u128(x);
            let e = f.encrypt128(n128).unwrap();
            prop_assert_ne!(e, n128);
            prop_assert_eq!(f.decrypt128(e).unwrap(), n128);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A refused 64-bit call takes nothing: a factory whose refused calls are retried in a
    /// tight loop issues exactly what one whose callers never retry does, step by step, and
    /// no sortable nonce carries a time past the clock.
    #[test]
    fn retrying_refused_64_bit_calls_changes_nothing(
        sortable in any::<bool>(),
        steps in proptest::collection::vec((0u64..3, 0usize..12_000, 0usize..3_000), 1..10),
    ) {
        let (clock, calm_clock) = (ManualClock::new(T0), ManualClock::new(T0));
        let f = enabled_as(&clock, FactoryConfig::new(), 12);
        let calm = enabled_as(&calm_clock, FactoryConfig::new(), 12);
        let next = |f: &Factory<&ManualClock>| {
            if sortable { f.sortable64() } else { f.counter64() }
        };
        let epoch = f.epoch_ms();
        for (advance, wanted, retries) in steps {
            clock.advance(advance);
            calm_clock.advance(advance);
            let now = nonce_core::Clock::now_ms(&clock);
            for _ in 0..wanted {
                let (a, b) = (next(&f), next(&calm));
                prop_assert_eq!(a, b);
                match a {
                    Ok(n) => prop_assert!(n.decode(epoch).unix_ms <= now),
                    Err(e) => {
                        let would_block = matches!(e, nonce_core::Error::WouldBlock { .. });
                        prop_assert!(would_block, "{:?}", e);
                        for _ in 0..retries {
                            prop_assert_eq!(next(&f), Err(e));
                        }
                        break;
                    }
                }
            }
            prop_assert_eq!(f.issued_up_to_ms(), calm.issued_up_to_ms());
        }
    }
}

/// Generation racing with re-enables on other threads never repeats a value and never mixes
/// one generation's machine ID with another's counters.
#[test]
fn reenable_racing_with_generation_is_safe() {
    let f = Factory::new(BootClock::new(), FactoryConfig::new()).unwrap();
    f.enable(machine_id(1), NO_DEADLINE).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let results: Vec<Vec<Nonce64>> = std::thread::scope(|s| {
        let gens: Vec<_> = (0..2)
            .map(|i| {
                let (f, stop) = (&f, &stop);
                s.spawn(move || {
                    let h = f.handle();
                    let mut out = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let r = if i == 0 { h.counter64() } else { f.counter64() };
                        if let Ok(n) = r {
                            out.push(n);
                        }
                    }
                    out
                })
            })
            .collect();
        // Each generation starts a millisecond past the last one, so re-enables faster than
        // the clock would run the timestamps ahead of it; leases change far less often.
        for round in 0..100u16 {
            if round % 2 == 0 {
                f.disable();
            }
            f.enable(machine_id(round % 3), NO_DEADLINE).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        gens.into_iter().map(|g| g.join().unwrap()).collect()
    });
    let mut seen = HashSet::new();
    for n in results.iter().flatten() {
        assert!(seen.insert(n.to_u64()), "duplicate {n}");
    }
    assert!(seen.len() > 1000, "generators made progress");
}
