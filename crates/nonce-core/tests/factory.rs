//! The factory's rules, one test each, on a manual clock.

use crate::common::{EPOCH, F, KEY, T0, config, enabled, enabled_as, machine_id, until_refused};
use nonce_core::{
    Base, Cipher96, Cipher128, Clock, Error, Factory, FactoryConfig, FactoryConfigError,
    InvalidMachineId, MAX_TIMESTAMP, MachineId, ManualClock, NO_DEADLINE, Nonce64, Nonce96,
    Nonce128, ParseNonceError,
};
use std::collections::HashSet;

/// A factory whose plain and encrypted calls of one size these tests mix, to check what the
/// two share (counters, throttle, generation).
fn factory(clock: &ManualClock) -> F<'_> {
    enabled(clock, factory_config())
}

fn factory_config() -> FactoryConfig {
    config(Cipher96::Blowfish).with_plain_and_encrypted(true)
}

#[test]
fn config_errors_are_distinct() {
    let clock = ManualClock::new(T0);
    let f = Factory::new(&clock, FactoryConfig::new()).unwrap();
    // An ID past the 9-bit field cannot reach a factory: `MachineId` refuses it.
    assert_eq!(MachineId::new(512), Err(InvalidMachineId(512)));
    assert!(f.enable(machine_id(511), NO_DEADLINE).is_ok());
    let refused = |config: FactoryConfig<&[u8]>| Factory::new(&clock, config).err();
    let short = [1u8; 31];
    assert_eq!(
        refused(FactoryConfig::new().with_base_key(&short)),
        Some(FactoryConfigError::BaseKeyTooShort { len: 31 })
    );
    let k = [1u8; 17];
    assert_eq!(
        refused(FactoryConfig::new().with_key64(&k)),
        Some(FactoryConfigError::KeyLength {
            bits: 64,
            cipher: "blowfish",
            expected: 16,
            actual: 17
        })
    );
    assert_eq!(
        refused(
            FactoryConfig::new()
                .with_cipher96(Cipher96::Speck)
                .with_key96(&k)
        ),
        Some(FactoryConfigError::KeyLength {
            bits: 96,
            cipher: "speck",
            expected: 18,
            actual: 17
        })
    );
    assert_eq!(
        refused(FactoryConfig::new().with_epoch_ms(T0 + 1)),
        Some(FactoryConfigError::EpochInFuture {
            epoch_ms: T0 + 1,
            now_ms: T0
        })
    );
    let far = ManualClock::new(MAX_TIMESTAMP + 10);
    assert_eq!(
        Factory::new(&far, FactoryConfig::new().with_epoch_ms(9)).err(),
        Some(FactoryConfigError::TimestampOverflow { epoch_ms: 9 })
    );
    for msg in [
        InvalidMachineId(600).to_string(),
        FactoryConfigError::BaseKeyTooShort { len: 3 }.to_string(),
    ] {
        assert!(msg.contains("use"), "error says what to do: {msg}");
    }
}

#[test]
fn overflow_horizon_is_reported() {
    let clock = ManualClock::new(MAX_TIMESTAMP - 1000 + 5);
    let f = Factory::new(&clock, FactoryConfig::new().with_epoch_ms(5)).unwrap();
    assert_eq!(f.ms_until_overflow(), 1000);
    assert!(f.ms_until_overflow() < nonce_core::OVERFLOW_WARNING_MS);
    f.enable(machine_id(1), NO_DEADLINE).unwrap();
    clock.advance(1001);
    assert_eq!(f.sortable64(), Err(Error::TimestampOverflow));
}

#[test]
fn disabled_until_enabled_and_after_disable() {
    let clock = ManualClock::new(T0);
    let f = Factory::new(&clock, FactoryConfig::new().with_base_key(&KEY)).unwrap();
    assert_eq!(f.counter64(), Err(Error::Disabled));
    assert_eq!(f.sortable128(), Err(Error::Disabled));
    assert_eq!(f.machine_id(), None);
    // A new deadline keeps a disabled factory disabled, and an enabled one enabled.
    f.set_deadline(T0 + 1000);
    assert_eq!(f.counter64(), Err(Error::Disabled));
    f.enable(machine_id(9), T0 + 1000).unwrap();
    f.set_deadline(T0 + 2000);
    assert!(f.is_enabled());
    assert_eq!(f.machine_id(), Some(machine_id(9)));
    f.counter96().unwrap();
    f.disable();
    assert!(!f.is_enabled());
    assert_eq!(f.counter96(), Err(Error::Disabled));
    assert_eq!(f.encrypted128(Base::Counter), Err(Error::Disabled));
    assert_eq!(f.handle().counter64(), Err(Error::Disabled));
}

#[test]
fn counter64_layout_and_burst_then_throttle() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock);
    let first = f.counter64().unwrap().decode(EPOCH);
    assert_eq!(
        (first.timestamp_ms, first.machine_id.get(), first.count),
        (T0 - EPOCH, 5, 0)
    );
    assert_eq!(first.unix_ms, T0);
    for i in 1..8192 {
        assert_eq!(f.counter64().unwrap().decode(EPOCH).count, i);
    }
    // The 13-bit count is spent and the clock has not moved: no waiting clock, so say so.
    assert_eq!(f.counter64(), Err(Error::WouldBlock { until_ms: T0 + 1 }));
    // Ten unused milliseconds are saved up and can be burst through at once; the refused
    // call took nothing, so all of them are there.
    clock.advance(10);
    let mut last = 0;
    for _ in 0..8192 * 10 {
        last = f.counter64().unwrap().decode(EPOCH).timestamp_ms;
    }
    assert_eq!(last, T0 - EPOCH + 10);
    assert!(matches!(f.counter64(), Err(Error::WouldBlock { .. })));
}

#[test]
fn counter64_waits_when_the_clock_can() {
    let clock = ManualClock::new(T0).jump_on_wait(true);
    let f = factory(&clock);
    for _ in 0..8192 * 3 {
        f.counter64().unwrap();
    }
    let n = f.counter64().unwrap().decode(EPOCH);
    assert_eq!((n.timestamp_ms, n.count), (T0 - EPOCH + 3, 0));
    assert_eq!(clock.now_ms(), T0 + 3);
}

#[test]
fn counter96_and_128_share_one_counter() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock);
    let a = f.counter96().unwrap().decode(EPOCH);
    let b = f.counter128().unwrap().decode(EPOCH);
    let c = f.counter96().unwrap().decode(EPOCH);
    assert_eq!((a.count, b.count, c.count), (0, 1, 2));
    assert_eq!((a.timestamp_ms, b.timestamp_ms), (T0 - EPOCH, T0 - EPOCH));
    assert_eq!((a.machine_id.get(), b.machine_id.get()), (5, 5));
    clock.advance(1000);
    // Counter timestamps are the generation's start, not the creation time.
    assert_eq!(
        f.counter128().unwrap().decode(EPOCH).timestamp_ms,
        T0 - EPOCH
    );
    // 128-bit layout: 13 zero bits between the machine ID and the 64-bit count.
    let raw = f.counter128().unwrap().to_u128();
    assert_eq!((raw >> 64) & 0x1FFF, 0);
}

#[test]
fn sortable_timestamps_follow_the_clock() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock);
    let a = f.sortable64().unwrap().decode(EPOCH);
    let b = f.sortable64().unwrap().decode(EPOCH);
    assert_eq!((a.timestamp_ms, a.count), (T0 - EPOCH, 1));
    assert_eq!((b.timestamp_ms, b.count), (T0 - EPOCH, 2));
    clock.advance(7);
    let c = f.sortable96().unwrap().decode(EPOCH);
    assert_eq!((c.timestamp_ms, c.count), (T0 - EPOCH + 7, 0));
    let d = f.sortable128().unwrap().decode(EPOCH);
    assert_eq!((d.timestamp_ms, d.count), (T0 - EPOCH + 7, 1));
    let (a, b) = (f.sortable64().unwrap(), f.sortable64().unwrap());
    assert!(a > Nonce64::from_u64(b.decode(EPOCH).timestamp_ms << 22));
}

#[test]
fn sortable64_is_capped_at_8192_per_ms_and_96_128_are_not() {
    let clock = ManualClock::new(T0);
    let f = factory(&clock);
    clock.advance(1);
    let (issued, e) = until_refused(|| f.sortable64());
    assert_eq!(
        (issued.len(), e),
        (8192, Error::WouldBlock { until_ms: T0 + 2 })
    );
    for _ in 0..50_000 {
        f.sortable96().unwrap();
    }
    clock.advance(1);
    assert_eq!(f.sortable64().unwrap().decode(EPOCH).count, 0);
}

#[test]
fn refused_sortable64_retries_never_run_past_the_clock() {
    let (clock, calm_clock) = (ManualClock::new(T0 + 1), ManualClock::new(T0 + 1));
    let (f, calm) = (factory(&clock), factory(&calm_clock));
    let refused = Error::WouldBlock { until_ms: T0 + 2 };
    assert_eq!(until_refused(|| f.sortable64()).1, refused);
    assert_eq!(until_refused(|| calm.sortable64()).1, refused);
    // More retries than the sortable state's 22-bit count holds: were each to take a count,
    // they would carry into the timestamp and issue nonces from the future.
    for _ in 0..1 << 22 {
        match f.sortable64() {
            Ok(n) => panic!(
                "issued at {} with the clock at {}",
                n.decode(EPOCH).unix_ms,
                clock.now_ms()
            ),
            Err(e) => assert_eq!(e, refused),
        }
    }
    assert_eq!(f.issued_up_to_ms(), calm.issued_up_to_ms());
    clock.advance(1);
    calm_clock.advance(1);
    let (next, e) = until_refused(|| f.sortable64());
    assert_eq!((next.clone(), e), until_refused(|| calm.sortable64()));
    assert_eq!(next.len(), 8192);
    assert!(next.iter().all(|n| n.decode(EPOCH).unix_ms == T0 + 2));
}

#[test]
fn deadline_stops_every_kind_and_renewal_resumes() {
    let clock = ManualClock::new(T0);
    // One kind per size per factory: `f` issues counter nonces, `s` sortable ones, each
    // plain and encrypted.
    let leased = || {
        let f = Factory::new(&clock, factory_config()).unwrap();
        f.enable(machine_id(3), T0 + 5).unwrap();
        f
    };
    let (f, s) = (leased(), leased());
    assert_eq!(f.deadline_ms(), Some(T0 + 5));
    f.counter64().unwrap();
    s.sortable64().unwrap();
    clock.advance(5);
    // A sortable nonce would carry the deadline's own millisecond: refused.
    assert_eq!(s.sortable64(), Err(Error::LeaseExpired));
    assert_eq!(s.sortable128(), Err(Error::LeaseExpired));
    assert_eq!(s.encrypted64(Base::Sortable), Err(Error::LeaseExpired));
    // Counter nonces carry earlier timestamps, which no successor can issue: still safe.
    assert_eq!(
        f.counter64().unwrap().decode(EPOCH).timestamp_ms,
        T0 - EPOCH
    );
    // ...until the counter's own timestamp reaches the deadline.
    let (issued, refused) = until_refused(|| f.counter64());
    assert!(issued.len() < 8192 * 6);
    assert_eq!(refused, Error::LeaseExpired);
    f.set_deadline(T0 + 100);
    s.set_deadline(T0 + 100);
    assert!(s.sortable64().is_ok());
    assert!(f.counter64().is_ok());
    // A shortened deadline is honoured at once, handles included.
    let h = f.handle();
    h.counter128().unwrap();
    f.set_deadline(T0);
    assert_eq!(h.counter128(), Err(Error::LeaseExpired));
    assert_eq!(f.counter96(), Err(Error::LeaseExpired));
}

#[test]
fn reenable_starts_past_everything_issued() {
    let clock = ManualClock::new(T0).jump_on_wait(true);
    let f = factory(&clock);
    let mut seen = HashSet::new();
    let mut max_ts = 0;
    for _ in 0..100 {
        // Each size has one kind per factory; values are unique per size.
        for n in [
            f.counter64().unwrap().decode(EPOCH),
            f.sortable96().unwrap().decode(EPOCH),
            f.counter128().unwrap().decode(EPOCH),
        ] {
            max_ts = max_ts.max(n.timestamp_ms);
            assert!(seen.insert(n));
        }
    }
    f.disable();
    // Same machine ID, same millisecond: nothing may repeat.
    f.enable(machine_id(5), NO_DEADLINE).unwrap();
    let n = f.counter64().unwrap().decode(EPOCH);
    assert!(n.timestamp_ms > max_ts);
    for _ in 0..100 {
        assert!(seen.insert(f.counter64().unwrap().decode(EPOCH)));
        assert!(seen.insert(f.sortable96().unwrap().decode(EPOCH)));
        assert!(seen.insert(f.counter128().unwrap().decode(EPOCH)));
    }
    // After a long gap, the 64-bit counter does not burst through the gap (another node may
    // have held the ID then): it starts at the clock.
    f.disable();
    let gap_start = clock.now_ms();
    clock.advance(60_000);
    f.enable(machine_id(5), NO_DEADLINE).unwrap();
    for n in [
        f.counter64().unwrap().decode(EPOCH),
        f.counter128().unwrap().decode(EPOCH),
    ] {
        assert_eq!(n.timestamp_ms, gap_start - EPOCH + 60_000);
    }
    f.enable(machine_id(6), NO_DEADLINE).unwrap();
    assert_eq!(f.counter64().unwrap().decode(EPOCH).machine_id.get(), 6);
}

#[test]
fn encryption_needs_a_key_and_is_a_bijection() {
    let clock = ManualClock::new(T0);
    let plain = enabled_as(&clock, FactoryConfig::new(), 1);
    assert_eq!(
        plain.encrypted64(Base::Counter),
        Err(Error::NoKey { bits: 64 })
    );
    assert_eq!(
        plain.encrypt128(Nonce128::from_u128(1)),
        Err(Error::NoKey { bits: 128 })
    );
    assert!(Error::NoKey { bits: 96 }.to_string().contains("base key"));

    let f = factory(&clock);
    let e = f.encrypted96(Base::Counter).unwrap();
    assert_eq!(
        &e.as_bytes()[8..],
        &[0, 0, 0, 0],
        "blowfish 96-bit nonces end in 32 zero bits"
    );
    let d = f.decrypt96(e).unwrap();
    let inner = Nonce64::from_bytes(d.as_bytes()[..8].try_into().unwrap()).decode(EPOCH);
    assert_eq!(inner.machine_id.get(), 5);
    let tail = Nonce96::from_u128(1).unwrap();
    assert_eq!(f.encrypt96(tail), Err(Error::NonZeroTail));

    let s = enabled_as(&clock, config(Cipher96::Speck), 2);
    let e = s.encrypted96(Base::Sortable).unwrap();
    assert_eq!(s.decrypt96(e).unwrap().decode(EPOCH).machine_id.get(), 2);
    assert_eq!(s.decrypt96(s.encrypt96(tail).unwrap()).unwrap(), tail);
}

#[test]
fn batch_equals_one_at_a_time() {
    for cipher in [Cipher128::Aes, Cipher128::Speck] {
        let clock = ManualClock::new(T0);
        // One at a time on the shared counter, which the batch's run continues (a thread
        // cache would serve the single call from a run of its own).
        let config = config(Cipher96::Blowfish).with_cipher128(cipher);
        let f = enabled_as(&clock, config.with_thread_cache(false), 77);
        let single = f.encrypted128(Base::Counter).unwrap();
        let mut batch = vec![Nonce128::from_u128(0); 10_000];
        f.fill_encrypted128(&mut batch).unwrap();
        let first = f.decrypt128(single).unwrap().decode(EPOCH).count + 1;
        let mut seen = HashSet::new();
        for (expected_count, n) in (first..).zip(&batch) {
            let d = f.decrypt128(*n).unwrap().decode(EPOCH);
            assert_eq!(
                (d.machine_id.get(), d.count),
                (77, expected_count),
                "{cipher}"
            );
            assert!(seen.insert(*n));
        }
        f.disable();
        assert_eq!(f.fill_encrypted128(&mut batch[..3]), Err(Error::Disabled));
    }
}

#[test]
fn handles_share_uniqueness_and_generation() {
    let clock = ManualClock::new(T0).jump_on_wait(true);
    let f = factory(&clock);
    let (h1, h2) = (f.handle(), f.handle());
    let mut seen = HashSet::new();
    for _ in 0..20_000 {
        assert!(seen.insert(h1.counter64().unwrap().to_u64()));
        assert!(seen.insert(h2.counter64().unwrap().to_u64()));
        assert!(seen.insert(f.counter64().unwrap().to_u64()));
    }
    f.enable(machine_id(8), NO_DEADLINE).unwrap();
    assert_eq!(h1.counter128().unwrap().decode(EPOCH).machine_id.get(), 8);
    assert_eq!(
        h2.encrypted64()
            .map(|n| f.decrypt64(n).unwrap().decode(EPOCH).machine_id.get()),
        Ok(8)
    );
}

#[test]
fn nonce_text_forms_round_trip() {
    let n = Nonce96::from_u128(0x0123_4567_89ab_cdef_0011_2233).unwrap();
    assert_eq!(n.to_string(), "0123456789abcdef00112233");
    assert_eq!("0123456789ABCDEF00112233".parse::<Nonce96>(), Ok(n));
    let b64 = n.base64url().to_string();
    assert_eq!(b64.len(), 16);
    assert_eq!(b64.parse::<Nonce96>(), Ok(n));
    assert_eq!(
        Nonce64::from_u64(u64::MAX).base64url().to_string(),
        "__________8"
    );
    let length = ParseNonceError::Length { bits: 64, len: 3 };
    assert_eq!("xyz".parse::<Nonce64>(), Err(length));
    let hex = ParseNonceError::InvalidHex;
    assert_eq!("zz23456789abcdef".parse::<Nonce64>(), Err(hex));
    let base64 = ParseNonceError::InvalidBase64;
    assert_eq!("!!!!!!!!!!!".parse::<Nonce64>(), Err(base64));
    assert!(Nonce96::from_u128(1 << 96).is_none());
}

#[cfg(feature = "serde")]
#[test]
fn nonces_serialize_as_hex_text() {
    let n = Nonce96::from_u128(0x0123_4567_89ab_cdef_0011_2233).unwrap();
    let json = serde_json::to_string(&n).unwrap();
    assert_eq!(json, "\"0123456789abcdef00112233\"");
    assert_eq!(serde_json::from_str::<Nonce96>(&json).unwrap(), n);
}

#[test]
fn keys_never_appear_in_debug_output() {
    let clock = ManualClock::new(T0);
    let key = [0xAB; 32];
    let cfg = FactoryConfig::new().with_base_key(&key).with_key128(&key);
    let text = format!("{cfg:?} {:?}", Factory::new(&clock, cfg).unwrap());
    assert!(
        !text.to_lowercase().contains("ab, ") && !text.contains("171"),
        "{text}"
    );
    assert!(text.contains("redacted"));
}
