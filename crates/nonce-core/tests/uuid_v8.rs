//! The version 8 UUID form of 128-bit counter and sortable nonces: valid RFC 9562 UUIDs,
//! reversible, in the nonces' order, as unique as the nonces.

use crate::common::{EPOCH, T0, enabled_as};
use nonce_core::{FactoryConfig, ManualClock, Nonce128, UuidV8Error};
use proptest::prelude::*;
use uuid::{Uuid, Variant};

/// A counter or sortable 128-bit nonce: any timestamp, machine ID and 64-bit count, the 13
/// bits between them zero.
fn plain_nonce() -> impl Strategy<Value = Nonce128> {
    (0..=nonce_core::MAX_TIMESTAMP, 0u16..512, any::<u64>()).prop_map(|(ts, id, count)| {
        Nonce128::from_u128((u128::from(ts) << 86) | (u128::from(id) << 77) | u128::from(count))
    })
}

/// Checks what the `uuid` crate reads from a UUID made by `to_uuid_v8`.
fn assert_valid_v8(u: Uuid) {
    assert_eq!(u.get_version_num(), 8, "{u}");
    assert_eq!(u.get_version(), Some(uuid::Version::Custom), "{u}");
    assert_eq!(u.get_variant(), Variant::RFC4122, "{u}");
    let reparsed: Uuid = u
        .hyphenated()
        .to_string()
        .parse()
        .expect("the crate parses it");
    assert_eq!(reparsed, u);
}

proptest! {
    /// Every counter or sortable nonce has a valid version 8 form that gives it back, with
    /// the same fields.
    #[test]
    fn every_plain_nonce_has_a_valid_v8_form(n in plain_nonce()) {
        let u = n.to_uuid_v8().unwrap();
        assert_valid_v8(u);
        prop_assert_eq!(Nonce128::from_uuid_v8(u), Ok(n));
        prop_assert_eq!(Nonce128::from_uuid_v8(u).unwrap().decode(EPOCH), n.decode(EPOCH));
    }

    /// The form keeps the nonces' order, so distinct nonces have distinct UUIDs.
    #[test]
    fn the_v8_form_keeps_the_order(a in plain_nonce(), b in plain_nonce()) {
        let (ua, ub) = (a.to_uuid_v8().unwrap(), b.to_uuid_v8().unwrap());
        prop_assert_eq!(a.cmp(&b), ua.cmp(&ub));
        prop_assert_eq!(ua.as_u128().cmp(&ub.as_u128()), a.cmp(&b));
    }

    /// A nonce with any of the 13 zero bits set (an encrypted one) has no version 8 form.
    #[test]
    fn nonces_with_the_zero_bits_set_are_refused(n in plain_nonce(), bit in 64u32..77) {
        let set = Nonce128::from_u128(n.to_u128() | (1 << bit));
        prop_assert_eq!(set.to_uuid_v8(), Err(UuidV8Error::NotCounterOrSortable));
    }

    /// A UUID that is not a nonce's version 8 form is refused, never misread.
    #[test]
    fn other_uuids_are_refused(bits in any::<u128>()) {
        let u = Uuid::from_u128(bits);
        match Nonce128::from_uuid_v8(u) {
            Ok(n) => prop_assert_eq!(n.to_uuid_v8(), Ok(u)),
            Err(UuidV8Error::Version { found }) => {
                prop_assert_ne!(found, 8);
                prop_assert_eq!(usize::from(found), u.get_version_num());
            }
            Err(UuidV8Error::Variant) => prop_assert_ne!(u.get_variant(), Variant::RFC4122),
            Err(e) => prop_assert_eq!(e, UuidV8Error::NotFromNonce),
        }
    }

    /// From factories: strictly increasing per factory and per handle (a handle draws runs
    /// of counts ahead, so the two sequences interleave), across milliseconds, and distinct
    /// across machine IDs and between a factory and its handle.
    #[test]
    fn factories_make_increasing_distinct_uuids(
        ids in proptest::sample::subsequence((0u16..512).collect::<Vec<_>>(), 2..=4),
        per_ms in 1usize..200,
        millis in 1u64..5,
    ) {
        let clock = ManualClock::new(T0);
        let factories: Vec<_> =
            ids.iter().map(|&id| enabled_as(&clock, FactoryConfig::new(), id)).collect();
        let handles: Vec<_> = factories.iter().map(|f| f.handle()).collect();
        // (machine ID, the factory's UUIDs, its handle's UUIDs)
        let mut made: Vec<_> = ids.iter().map(|&id| (id, Vec::new(), Vec::new())).collect();
        for _ in 0..millis {
            for ((f, h), (_, of_factory, of_handle)) in factories.iter().zip(&handles).zip(&mut made) {
                for _ in 0..per_ms {
                    of_factory.push(f.sortable_uuid_v8().expect("a sortable UUID"));
                    of_handle.push(h.sortable_uuid_v8().expect("a sortable UUID"));
                }
            }
            clock.advance(1);
        }
        let mut all = std::collections::HashSet::new();
        for (id, of_factory, of_handle) in &made {
            for uuids in [of_factory, of_handle] {
                prop_assert!(uuids.windows(2).all(|w| w[0] < w[1]), "machine {} not increasing", id);
                for u in uuids {
                    assert_valid_v8(*u);
                    let n = Nonce128::from_uuid_v8(*u).unwrap();
                    prop_assert_eq!(n.decode(EPOCH).machine_id.get(), *id);
                    prop_assert!(all.insert(*u), "duplicate {}", u);
                }
            }
        }
    }
}

/// A millisecond's 2^22 sortable counts and the next millisecond's first stay in order: the
/// form loses none of the count's bits.
#[test]
fn a_full_millisecond_of_counts_stays_in_order() {
    let clock = ManualClock::new(T0);
    let f = enabled_as(&clock, FactoryConfig::new(), 511);
    let h = f.handle();
    let first = h.sortable_uuid_v8().unwrap();
    let mut last = first;
    for _ in 0..(1 << 22) {
        let next = h.sortable_uuid_v8().unwrap();
        assert!(last < next, "{last} then {next}");
        last = next;
    }
    let fields = |u| {
        let d = Nonce128::from_uuid_v8(u).unwrap().decode(EPOCH);
        (d.timestamp_ms, d.count)
    };
    let (ts, count) = fields(first);
    assert_eq!(
        fields(last),
        (ts + 1, count),
        "2^22 counts on: the next millisecond"
    );
}

/// Byte for byte, any nonce goes to a `Uuid` and back, encrypted ones too.
#[test]
fn byte_for_byte_round_trips() {
    for bits in [
        0,
        u128::MAX,
        1 << 70,
        0x0123_4567_89ab_cdef_0123_4567_89ab_cdef,
    ] {
        let n = Nonce128::from_u128(bits);
        assert_eq!(Uuid::from(n).as_u128(), bits);
        assert_eq!(Nonce128::from(Uuid::from(n)), n);
    }
}
