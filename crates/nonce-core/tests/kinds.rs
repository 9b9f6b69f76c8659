//! One kind (counter or sortable) per base size per factory: every entry point, factory and
//! handle, and random interleavings of all of them.

use crate::common;

use common::{
    ALL_CIPHERS, Op, T0, all_ops, ciphers96, config, conflict, enabled, enabled_as, machine_id,
    on_threads, slot,
};
use nonce_core::{Base, Cipher96, Error, Factory, ManualClock, NO_DEADLINE};
use proptest::prelude::*;
use std::collections::HashSet;

/// For every pair of entry points, under every 96-bit cipher, with both forms (plain and
/// encrypted) allowed or not: of one base size and different kinds, the first call fixes the
/// kind and the other is refused with `KindConflict` naming it (counter and sortable nonces of
/// one size share one layout: both issued, a value could come out twice); else, of one
/// returned size and different forms, with one form per size, the first fixes the form and
/// the other is refused with `EncryptionConflict` naming it. Every other pair works side by
/// side, entry points of different sizes included; the first goes on working, and nothing
/// issued repeats.
#[test]
fn the_first_call_of_a_size_fixes_its_kind_and_form() {
    let (mut kinds, mut forms) = (0, 0);
    for (cipher96, both_forms) in ciphers96()
        .into_iter()
        .flat_map(|c| [(c, true), (c, false)])
    {
        let cfg = config(cipher96).with_plain_and_encrypted(both_forms);
        for first in all_ops() {
            for second in all_ops() {
                let (bits, locked) = first.claims(cipher96);
                let (out_bits, encrypted) = first.form();
                let (bits2, base2) = second.claims(cipher96);
                let (out_bits2, encrypted2) = second.form();
                let clock = ManualClock::new(T0);
                let f = enabled(&clock, cfg);
                let h = f.handle();
                let refused = if bits == bits2 && locked != base2 {
                    kinds += 1;
                    Some(Error::KindConflict { bits, locked })
                } else if out_bits == out_bits2 && encrypted != encrypted2 && !both_forms {
                    forms += 1;
                    Some(Error::EncryptionConflict {
                        bits: out_bits,
                        encrypted,
                    })
                } else {
                    None
                };
                let pair = format!("{first:?} then {second:?} ({cipher96}, both {both_forms})");
                let mut seen = HashSet::new();
                for (op, expected) in [(first, None), (second, refused)].repeat(2) {
                    let got = op.run(&f, &h);
                    assert_eq!(got.as_ref().err(), expected.as_ref(), "{op:?}: {pair}");
                    for v in got.into_iter().flatten() {
                        assert!(seen.insert(v), "{pair}: {v:x?} issued twice");
                    }
                }
            }
        }
    }
    assert!(kinds >= 24, "{kinds} pairs of conflicting kinds checked");
    assert!(
        forms >= 60 || !ALL_CIPHERS,
        "{forms} pairs of conflicting forms"
    );
    assert!(
        config(Cipher96::Speck)
            .with_plain_and_encrypted(true)
            .plain_and_encrypted()
    );
    assert!(!config(Cipher96::Speck).plain_and_encrypted());
}

/// A refused call takes no counter value: the kind in use goes on without a gap.
#[test]
fn a_refused_call_consumes_nothing() {
    let clock = ManualClock::new(T0);
    let f = enabled(&clock, config(Cipher96::Blowfish));
    let epoch = f.epoch_ms();
    assert_eq!(f.counter64().unwrap().decode(epoch).count, 0);
    for _ in 0..10 {
        assert_eq!(f.sortable64(), conflict(64, Base::Counter));
    }
    assert_eq!(f.counter64().unwrap().decode(epoch).count, 1);

    // The sortable counter is shared by every size: refusals leave it alone too.
    assert_eq!(f.sortable96().unwrap().decode(epoch).count, 1);
    for _ in 0..10 {
        assert!(f.counter96().is_err());
        assert!(f.handle().counter96().is_err());
    }
    assert_eq!(f.sortable128().unwrap().decode(epoch).count, 2);

    // A handle refused for its first call reserves nothing from the factory...
    let h = f.handle();
    assert_eq!(h.counter128(), conflict(128, Base::Sortable));
    // ...and one refused from a block it holds keeps that block's next value.
    let g = enabled_as(&clock, config(Cipher96::Blowfish), 6);
    assert_eq!(g.sortable128().unwrap().decode(epoch).count, 1);
    let h = g.handle();
    assert_eq!(h.counter96().unwrap().decode(epoch).count, 0);
    assert!(h.counter128().is_err());
    assert_eq!(h.counter96().unwrap().decode(epoch).count, 1);
    // The handle's block was the first 1024 values; nothing else was reserved.
    assert_eq!(g.counter96().unwrap().decode(epoch).count, 1024);
}

#[test]
fn kinds_declared_up_front_refuse_from_the_first_call() {
    let clock = ManualClock::new(T0);
    let f = enabled(
        &clock,
        config(Cipher96::Blowfish)
            .with_kind64(Base::Counter)
            .with_kind64(Base::Sortable)
            .with_kind96(Base::Counter)
            .with_kind128(Base::Sortable),
    );
    assert_eq!(f.counter64(), conflict(64, Base::Sortable));
    assert_eq!(f.handle().counter64(), conflict(64, Base::Sortable));
    assert_eq!(f.sortable96(), conflict(96, Base::Counter));
    assert_eq!(f.handle().counter128(), conflict(128, Base::Sortable));
    f.sortable64().unwrap();
    f.counter96().unwrap();
    f.handle().counter96().unwrap();
    f.sortable128().unwrap();
    let debug = format!("{f:?}");
    assert!(
        debug.contains("kinds: [Some(Sortable), Some(Counter), Some(Sortable)]"),
        "{debug}"
    );
}

#[test]
fn kinds_last_for_the_factory_s_whole_life() {
    let clock = ManualClock::new(T0);
    let f = Factory::new(&clock, config(Cipher96::Blowfish)).unwrap();
    // A call on a disabled factory fixes nothing.
    assert_eq!(f.sortable64(), Err(Error::Disabled));
    f.enable(machine_id(5), NO_DEADLINE).unwrap();
    f.counter64().unwrap();
    f.disable();
    // Disabled is reported first: it is the error that goes away.
    assert_eq!(f.sortable64(), Err(Error::Disabled));
    f.enable(machine_id(6), NO_DEADLINE).unwrap();
    clock.advance(60_000);
    f.set_deadline(NO_DEADLINE);
    assert_eq!(f.sortable64(), conflict(64, Base::Counter));
    assert!(f.counter64().is_ok());
    assert!(format!("{f:?}").contains("kinds: [Some(Counter), None, None]"));
}

#[test]
fn handles_and_factory_share_the_kinds() {
    let clock = ManualClock::new(T0);
    let f = enabled(&clock, config(Cipher96::Blowfish));
    let h = f.handle();
    h.counter64().unwrap();
    assert_eq!(f.sortable64(), conflict(64, Base::Counter));
    f.sortable128().unwrap();
    // counter96 fills the handle's 96/128-bit block; counter128 may not use it.
    h.counter96().unwrap();
    assert_eq!(h.counter128(), conflict(128, Base::Sortable));
    h.counter96().unwrap();
    // A second handle learns the kinds from the factory, not from the first handle.
    let h2 = f.handle();
    assert!(h2.counter128().is_err());
    assert!(h2.counter64().is_ok());
    assert!(f.sortable96().is_err());
}

#[test]
fn racing_first_uses_agree_on_one_kind() {
    for round in 0..200 {
        let clock = ManualClock::new(T0).jump_on_wait(true);
        let f = enabled(&clock, config(Cipher96::Blowfish));
        let barrier = std::sync::Barrier::new(4);
        let results: Vec<(Base, Vec<Result<u64, Error>>)> = on_threads(4, |i| {
            let kind = [Base::Counter, Base::Sortable][(i + round) % 2];
            barrier.wait();
            let h = f.handle();
            let out = (0..50)
                .map(|_| match kind {
                    Base::Counter => h.counter64().map(|n| n.to_u64()),
                    Base::Sortable => f.sortable64().map(|n| n.to_u64()),
                })
                .collect();
            (kind, out)
        });
        let winners: HashSet<Base> = results
            .iter()
            .filter(|(_, out)| out.iter().any(Result::is_ok))
            .map(|(kind, _)| *kind)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let winner = *winners.iter().next().unwrap();
        let mut seen = HashSet::new();
        for (kind, out) in &results {
            for r in out {
                match r {
                    Ok(v) => assert!(seen.insert(*v)),
                    Err(e) => {
                        assert_ne!(*kind, winner);
                        assert_eq!(Err(*e), conflict::<()>(64, winner));
                    }
                }
            }
        }
    }
}

every_cipher! {
    /// A call refused for its form takes no counter value, from the factory or a handle's block.
    // `common::config` keys a factory only with every cipher built in.
    #[test]
    fn a_call_refused_for_its_form_consumes_nothing() {
        let clock = ManualClock::new(T0);
        // The factory's calls on its shared counter, the handle's block reserved after them.
        let f = enabled(&clock, config(Cipher96::Blowfish).with_thread_cache(false));
        let epoch = f.epoch_ms();
        assert_eq!(f.counter64().unwrap().decode(epoch).count, 0);
        let h = f.handle();
        for _ in 0..10 {
            let refused = Err(Error::EncryptionConflict {
                bits: 64,
                encrypted: false,
            });
            assert_eq!(f.encrypted64(Base::Counter), refused);
            assert_eq!(h.encrypted64(), refused);
        }
        assert_eq!(f.counter64().unwrap().decode(epoch).count, 1);
        // The handle's first refusal came before it reserved anything.
        assert_eq!(h.counter64().unwrap().decode(epoch).count, 2);
        // A handle whose block the plain calls filled is refused for the encrypted ones, and
        // keeps the block for the plain ones.
        assert_eq!(h.counter64().unwrap().decode(epoch).count, 3);
        assert!(h.encrypted64().is_err());
        assert_eq!(h.counter64().unwrap().decode(epoch).count, 4);
        // Encrypted 96-bit nonces under Blowfish have a 64-bit base but return 96 bits: a
        // factory issuing plain 64-bit nonces may issue them, and then no plain 96-bit ones.
        assert!(f.encrypted96(Base::Counter).is_ok());
        assert_eq!(
            f.counter96(),
            Err(Error::EncryptionConflict {
                bits: 96,
                encrypted: true
            })
        );
    }
}

/// The kind and form refusals name what the factory issues, why, and what to do instead.
#[test]
fn the_messages_say_what_went_wrong_and_what_to_do() {
    let kind = |bits, locked| Error::KindConflict { bits, locked };
    let form = |bits, encrypted| Error::EncryptionConflict { bits, encrypted };
    let cases: [(Error, &[&str]); 4] = [
        (
            kind(64, Base::Counter),
            &[
                "issues counter 64-bit nonces",
                "one kind per size",
                "use a separate factory for sortable 64-bit nonces",
            ],
        ),
        (
            kind(128, Base::Sortable),
            &[
                "issues sortable 128-bit nonces",
                "for counter 128-bit nonces",
            ],
        ),
        (
            form(64, true),
            &[
                "issues encrypted 64-bit nonces",
                "plain or encrypted nonces of one size",
                "n*m/2^64",
                "use a separate factory for plain 64-bit nonces",
                "with_plain_and_encrypted(true)",
            ],
        ),
        (
            form(128, false),
            &[
                "issues plain 128-bit nonces",
                "for encrypted 128-bit nonces",
            ],
        ),
    ];
    for (e, parts) in cases {
        let msg = e.to_string();
        for part in parts {
            assert!(msg.contains(part), "{part:?} in {msg}");
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Call(Op, usize),
    Advance(u64),
    Disable,
    Enable(u16),
    NewHandle,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (proptest::sample::select(all_ops()), 1usize..40).prop_map(|(op, n)| Step::Call(op, n)),
        2 => (0u64..3).prop_map(Step::Advance),
        1 => Just(Step::Disable),
        1 => (0u16..3).prop_map(Step::Enable),
        1 => Just(Step::NewHandle),
    ]
}

fn declared() -> impl Strategy<Value = Option<Base>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Base::Counter)),
        1 => Just(Some(Base::Sortable)),
    ]
}

proptest! {
    /// Random interleavings of every entry point, with re-enables, handles, declared kinds
    /// and both forms allowed or not: each call succeeds exactly when its kind is its base
    /// size's kind (fixed by the declaration or the first successful call) and its form
    /// (plain or encrypted) its returned size's (fixed by the first successful call, unless
    /// both are allowed), and no value repeats within a size.
    #[test]
    fn interleaved_kinds_never_repeat_a_value(
        cipher96 in proptest::sample::select(ciphers96()),
        kinds in (declared(), declared(), declared()),
        both_forms in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let clock = ManualClock::new(T0).jump_on_wait(true);
        let mut cfg = config(cipher96).with_plain_and_encrypted(both_forms);
        // Per returned size: whether the factory's nonces are encrypted, once fixed.
        let mut forms: [Option<bool>; 3] = [None; 3];
        let mut locks = [kinds.0, kinds.1, kinds.2];
        for (i, k) in locks.iter().enumerate() {
            if let Some(base) = *k {
                cfg = match i {
                    0 => cfg.with_kind64(base),
                    1 => cfg.with_kind96(base),
                    _ => cfg.with_kind128(base),
                };
            }
        }
        let f = enabled(&clock, cfg);
        let mut on = true;
        let mut h = f.handle();
        let mut seen = HashSet::new();
        for step in steps {
            match step {
                Step::Call(op, n) => {
                    for _ in 0..n {
                        let got = op.run(&f, &h);
                        let (bits, base) = op.claims(cipher96);
                        if !on {
                            prop_assert_eq!(got, Err(Error::Disabled));
                            continue;
                        }
                        let (out_bits, encrypted) = op.form();
                        let form = &mut forms[slot(out_bits)];
                        let lock = &mut locks[slot(bits)];
                        match (*lock, *form) {
                            (Some(locked), _) if locked != base => {
                                prop_assert_eq!(got, Err(Error::KindConflict { bits, locked }));
                            }
                            (_, Some(fixed)) if fixed != encrypted && !both_forms => {
                                prop_assert_eq!(
                                    got,
                                    Err(Error::EncryptionConflict { bits: out_bits, encrypted: fixed })
                                );
                            }
                            _ => {
                                *lock = Some(base);
                                *form = Some(encrypted);
                                let values = got.map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
                                for v in values {
                                    prop_assert!(seen.insert(v), "{:?} repeated {:x?}", op, v);
                                }
                            }
                        }
                    }
                }
                Step::Advance(ms) => clock.advance(ms),
                Step::Disable => {
                    f.disable();
                    on = false;
                }
                Step::Enable(id) => {
                    f.enable(machine_id(id), NO_DEADLINE).unwrap();
                    on = true;
                }
                Step::NewHandle => h = f.handle(),
            }
        }
    }
}
