//! Decoding, composing and the nonces of a time range: compose inverts decode for every size,
//! bounds hold exactly the nonces of their time, and every bad input is an error.

use nonce_core::{
    Base, BoundsError, ComposeError, DEFAULT_EPOCH_MS, Factory, FactoryConfig, MAX_TIMESTAMP,
    MachineId, ManualClock, NO_DEADLINE, Nonce64, Nonce96, Nonce128, RangeEnd,
};
use proptest::prelude::*;

/// The 13 bits between a 128-bit nonce's machine ID and count, zero in every nonce.
const PADDING128: u128 = ((1 << 13) - 1) << 64;

fn id(v: u16) -> MachineId {
    MachineId::new(v).unwrap()
}

proptest! {
    #[test]
    fn compose_inverts_decode_64(v: u64, epoch in 0..=u64::MAX / 2) {
        let n = Nonce64::from_u64(v);
        let d = n.decode(epoch);
        prop_assert_eq!(Nonce64::compose(d.timestamp_ms, d.machine_id, d.count), Ok(n));
        prop_assert_eq!(d.unix_ms, d.timestamp_ms + epoch);
        prop_assert_eq!(d.kind, None);
    }

    #[test]
    fn compose_inverts_decode_96(v in 0..1u128 << 96) {
        let n = Nonce96::from_u128(v).unwrap();
        let d = n.decode(DEFAULT_EPOCH_MS);
        prop_assert_eq!(Nonce96::compose(d.timestamp_ms, d.machine_id, d.count), Ok(n));
        prop_assert_eq!(d.kind, (d.count >= 1 << 22).then_some(Base::Counter));
    }

    /// Every 128-bit nonce of the layout (its padding zero) composes back; any other value
    /// composes back with the padding cleared.
    #[test]
    fn compose_inverts_decode_128(v: u128) {
        let d = Nonce128::from_u128(v).decode(DEFAULT_EPOCH_MS);
        let composed = Nonce128::compose(d.timestamp_ms, d.machine_id, d.count).unwrap();
        prop_assert_eq!(composed.to_u128(), v & !PADDING128);
        prop_assert_eq!(d.kind, (d.count >= 1 << 22).then_some(Base::Counter));
    }

    /// Fields in range compose into a nonce that decodes to them; fields out of range are
    /// refused, never truncated.
    #[test]
    fn decode_inverts_compose(ts: u64, machine in 0..=MachineId::MAX, count: u64) {
        let machine = id(machine);
        let fits = |width: u32| ts <= MAX_TIMESTAMP && count >> width == 0;
        let fields = |d: nonce_core::Decoded| (d.timestamp_ms, d.machine_id, d.count);
        let expected = (ts, machine, count);
        match Nonce64::compose(ts, machine, count) {
            Ok(n) => prop_assert_eq!(fields(n.decode(0)), expected),
            Err(e) => prop_assert!(!fits(13), "{e}"),
        }
        match Nonce96::compose(ts, machine, count) {
            Ok(n) => prop_assert_eq!(fields(n.decode(0)), expected),
            Err(e) => prop_assert!(!fits(45), "{e}"),
        }
        match Nonce128::compose(ts, machine, count) {
            Ok(n) => prop_assert_eq!(fields(n.decode(0)), expected),
            Err(e) => prop_assert!(ts > MAX_TIMESTAMP, "{e}"),
        }
    }

    /// Nonces composed with a timestamp in `[from, to]` lie within the bounds; those with a
    /// timestamp outside do not.
    #[test]
    fn bounds_hold_exactly_the_nonces_of_their_time(
        epoch in 0..=u64::MAX - MAX_TIMESTAMP,
        a in 0..=MAX_TIMESTAMP,
        b in 0..=MAX_TIMESTAMP,
        ts in prop_oneof![0..=MAX_TIMESTAMP, Just(0), Just(MAX_TIMESTAMP)],
        machine in 0..=MachineId::MAX,
        count: u64,
    ) {
        // The nonce's timestamp near an end, often, as well as anywhere.
        let (from, to) = (a.min(b), a.max(b));
        let ts = match count % 5 {
            0 => from.saturating_sub(1),
            1 => from,
            2 => to,
            3 => to.saturating_add(1).min(MAX_TIMESTAMP),
            _ => ts,
        };
        let inside = (from..=to).contains(&ts);
        let machine = id(machine);
        let range64 = Nonce64::bounds(epoch + from, epoch + to, epoch).unwrap();
        let range96 = Nonce96::bounds(epoch + from, epoch + to, epoch).unwrap();
        let range128 = Nonce128::bounds(epoch + from, epoch + to, epoch).unwrap();
        let n64 = Nonce64::compose(ts, machine, count & 0x1fff).unwrap();
        let n96 = Nonce96::compose(ts, machine, count >> 19).unwrap();
        let n128 = Nonce128::compose(ts, machine, count).unwrap();
        prop_assert_eq!(range64.contains(&n64), inside);
        prop_assert_eq!(range96.contains(&n96), inside);
        prop_assert_eq!(range128.contains(&n128), inside);
        // By integer value too, as a database compares them.
        let (lo, hi) = (range64.start().to_u64(), range64.end().to_u64());
        prop_assert_eq!((lo..=hi).contains(&n64.to_u64()), inside);
        let (lo, hi) = (range128.start().to_u128(), range128.end().to_u128());
        prop_assert_eq!((lo..=hi).contains(&n128.to_u128()), inside);
    }
}

#[test]
fn bounds_are_the_extreme_fields() {
    let (from, to) = (DEFAULT_EPOCH_MS + 10, DEFAULT_EPOCH_MS + 20);
    let r = Nonce64::bounds(from, to, DEFAULT_EPOCH_MS).unwrap();
    assert_eq!(*r.start(), Nonce64::compose(10, id(0), 0).unwrap());
    assert_eq!(*r.end(), Nonce64::compose(20, id(511), 8191).unwrap());
    let r = Nonce96::bounds(from, to, DEFAULT_EPOCH_MS).unwrap();
    assert_eq!(
        *r.end(),
        Nonce96::compose(20, id(511), (1 << 45) - 1).unwrap()
    );
    let r = Nonce128::bounds(from, to, DEFAULT_EPOCH_MS).unwrap();
    assert_eq!(*r.end(), Nonce128::compose(20, id(511), u64::MAX).unwrap());
    // One millisecond: from == to.
    let one = Nonce64::bounds(from, from, DEFAULT_EPOCH_MS).unwrap();
    assert_eq!(one.end().to_u64() - one.start().to_u64(), (1 << 22) - 1);
    // The whole range of timestamps.
    let last = DEFAULT_EPOCH_MS + MAX_TIMESTAMP;
    let all = Nonce64::bounds(DEFAULT_EPOCH_MS, last, DEFAULT_EPOCH_MS).unwrap();
    assert_eq!((all.start().to_u64(), all.end().to_u64()), (0, u64::MAX));
}

#[test]
fn bad_ranges_say_which_end_and_why() {
    let e = DEFAULT_EPOCH_MS;
    let last = e + MAX_TIMESTAMP;
    let cases = [
        (
            (e + 2, e + 1),
            BoundsError::Reversed {
                from_unix_ms: e + 2,
                to_unix_ms: e + 1,
            },
        ),
        (
            (e - 1, e + 1),
            BoundsError::BeforeEpoch {
                end: RangeEnd::From,
                unix_ms: e - 1,
                epoch_ms: e,
            },
        ),
        (
            (e, last + 1),
            BoundsError::PastMaxTimestamp {
                end: RangeEnd::To,
                unix_ms: last + 1,
                last_unix_ms: last,
            },
        ),
        (
            (last + 1, last + 2),
            BoundsError::PastMaxTimestamp {
                end: RangeEnd::From,
                unix_ms: last + 1,
                last_unix_ms: last,
            },
        ),
        (
            (u64::MAX, u64::MAX),
            BoundsError::PastMaxTimestamp {
                end: RangeEnd::From,
                unix_ms: u64::MAX,
                last_unix_ms: last,
            },
        ),
    ];
    for ((from, to), expected) in cases {
        assert_eq!(Nonce64::bounds(from, to, e), Err(expected), "{from}..={to}");
        assert_eq!(Nonce96::bounds(from, to, e), Err(expected), "{from}..={to}");
        assert_eq!(
            Nonce128::bounds(from, to, e),
            Err(expected),
            "{from}..={to}"
        );
    }
    // An epoch so late that its range ends at u64::MAX: no overflow.
    let r = Nonce64::bounds(u64::MAX, u64::MAX, u64::MAX - MAX_TIMESTAMP).unwrap();
    assert_eq!(r.end().to_u64(), u64::MAX);
    assert!(
        Nonce64::bounds(0, 1, u64::MAX)
            .unwrap_err()
            .to_string()
            .contains("before the epoch")
    );
}

#[test]
fn compose_errors_name_the_field_and_its_limit() {
    let too_late = Nonce64::compose(MAX_TIMESTAMP + 1, id(1), 0).unwrap_err();
    assert_eq!(
        too_late,
        ComposeError::TimestampTooLarge {
            timestamp_ms: MAX_TIMESTAMP + 1
        }
    );
    assert!(
        too_late.to_string().contains("0..=4398046511103"),
        "{too_late}"
    );
    assert_eq!(
        Nonce128::compose(u64::MAX, id(1), 0),
        Err(ComposeError::TimestampTooLarge {
            timestamp_ms: u64::MAX
        })
    );
    let wide = Nonce64::compose(0, id(1), 8192).unwrap_err();
    assert_eq!(
        wide,
        ComposeError::CountTooWide {
            bits: 64,
            count: 8192
        }
    );
    assert!(wide.to_string().contains("13-bit") && wide.to_string().contains("0..=8191"));
    let wide = Nonce96::compose(0, id(1), 1 << 45).unwrap_err();
    assert!(wide.to_string().contains("45-bit"), "{wide}");
    assert!(Nonce96::compose(MAX_TIMESTAMP, id(511), (1 << 45) - 1).is_ok());
}

/// What `kind` says of real nonces: counter nonces past a 22-bit count are known, nothing else.
#[test]
fn the_kind_a_nonce_shows() {
    let f = Factory::new(
        ManualClock::new(1_800_000_000_000),
        FactoryConfig::new()
            .with_kind64(Base::Sortable)
            .with_kind96(Base::Sortable),
    )
    .unwrap();
    f.enable(id(5), NO_DEADLINE).unwrap();
    let epoch = f.epoch_ms();
    assert_eq!(f.sortable64().unwrap().decode(epoch).kind, None);
    assert_eq!(f.sortable96().unwrap().decode(epoch).kind, None);
    let counter = f.counter128().unwrap().decode(epoch);
    assert_eq!((counter.count, counter.kind), (0, None));
    // A 96-bit counter nonce with a count no sortable nonce reaches.
    let n = Nonce96::compose(1, id(5), 1 << 22).unwrap();
    assert_eq!(n.decode(epoch).kind, Some(Base::Counter));
    let n = Nonce96::compose(1, id(5), (1 << 22) - 1).unwrap();
    assert_eq!(n.decode(epoch).kind, None);
}

/// The nonces a sortable factory makes in a range of its clock lie within that range's bounds.
#[test]
fn sortable_nonces_of_a_time_lie_within_its_bounds() {
    let start = 1_800_000_000_000;
    let clock = ManualClock::new(start - 5);
    let sortable = FactoryConfig::new()
        .with_kind64(Base::Sortable)
        .with_kind96(Base::Sortable)
        .with_kind128(Base::Sortable);
    let f = Factory::new(&clock, sortable).unwrap();
    f.enable(id(9), NO_DEADLINE).unwrap();
    let epoch = f.epoch_ms();
    let r64 = Nonce64::bounds(start, start + 9, epoch).unwrap();
    let r96 = Nonce96::bounds(start, start + 9, epoch).unwrap();
    let r128 = Nonce128::bounds(start, start + 9, epoch).unwrap();
    for now in start - 5..start + 15 {
        clock.set(now);
        let inside = (start..start + 10).contains(&now);
        for _ in 0..3 {
            assert_eq!(r64.contains(&f.sortable64().unwrap()), inside, "{now}");
            assert_eq!(r96.contains(&f.sortable96().unwrap()), inside, "{now}");
            assert_eq!(r128.contains(&f.sortable128().unwrap()), inside, "{now}");
        }
    }
}

#[cfg(feature = "serde")]
mod js_safe {
    use nonce_core::Nonce64;
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        #[serde(with = "nonce_core::serde::js_safe")]
        id: Nonce64,
        #[serde(with = "nonce_core::serde::js_safe::option", default)]
        parent: Option<Nonce64>,
    }

    fn read(json: &str) -> Result<Row, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    proptest! {
        /// Written as a decimal string, read back from it and from the number; the nonce's
        /// own forms (hex, base64url) are refused, never read as another value.
        #[test]
        fn every_nonce_round_trips(v: u64, parent: Option<u64>) {
            let row = Row { id: Nonce64::from_u64(v), parent: parent.map(Nonce64::from_u64) };
            let json = serde_json::to_string(&row).unwrap();
            let parent_json = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
            prop_assert_eq!(&json, &format!(r#"{{"id":"{v}","parent":{parent_json}}}"#));
            prop_assert_eq!(read(&json), Ok(row));
            let id = Nonce64::from_u64(v);
            prop_assert_eq!(read(&format!(r#"{{"id":{v}}}"#)).map(|r| r.id), Ok(id));
            for other_form in [id.base64url().to_string(), id.to_string()] {
                let read = read(&format!(r#"{{"id":"{other_form}"}}"#));
                if other_form.bytes().all(|b| b.is_ascii_digit()) {
                    // Digits alone are a decimal string, read as one (or refused past 64 bits).
                    prop_assert_eq!(
                        read.ok().map(|r| r.id.to_u64()),
                        other_form.parse::<u64>().ok()
                    );
                } else {
                    prop_assert!(read.is_err_and(|e| e.contains("decimal digits")));
                }
            }
        }
    }

    #[test]
    fn what_is_not_a_nonce_is_refused_with_the_reason() {
        for (json, says) in [
            (r#"{"id":-1}"#, "not negative"),
            (r#"{"id":1.5}"#, "decimal string"),
            (r#"{"id":1e3}"#, "decimal string"),
            (r#"{"id":18446744073709551616}"#, "decimal string"),
            (
                r#"{"id":"18446744073709551616"}"#,
                "larger than a 64-bit nonce",
            ),
            (r#"{"id":"12ab"}"#, "convert the data to decimal"),
            (
                r#"{"id":"1c000000000000ff"}"#,
                "convert the data to decimal",
            ),
            (r#"{"id":""}"#, "convert the data to decimal"),
            (
                r#"{"id":true}"#,
                "a 64-bit nonce as a string of decimal digits",
            ),
        ] {
            let e = read(json).unwrap_err();
            assert!(e.contains(says), "{json}: {e}");
        }
        // The largest nonce, as a number and as a string.
        let max = Nonce64::from_u64(u64::MAX);
        assert_eq!(read(r#"{"id":18446744073709551615}"#).unwrap().id, max);
        assert_eq!(read(r#"{"id":"18446744073709551615"}"#).unwrap().id, max);
    }
}
