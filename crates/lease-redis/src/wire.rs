//! The hash layout shared with NoNoncense: `"<id>" => token` and `"token.<id>.<token>" => "<id>"`,
//! plus this crate's own timestamp floors, `"floor.<id>" => "<unix ms>"` (no TTL), which
//! NoNoncense ignores: its field parser drops every field that is not an integer.

use base64ct::{Base64UrlUnpadded, Encoding};
use lease_core::MachineId;

/// The hash NoNoncense uses.
pub(crate) const DEFAULT_KEY: &str = "no_noncense_leases";

/// A lease token: 16 random bytes (from `random`, 8 at a time), base64url without padding
/// (22 characters).
pub(crate) fn new_token(mut random: impl FnMut() -> u64) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&random().to_le_bytes());
    bytes[8..].copy_from_slice(&random().to_le_bytes());
    Base64UrlUnpadded::encode_string(&bytes)
}

/// The ownership marker field of lease `(id, token)`.
pub(crate) fn marker(id: MachineId, token: &str) -> String {
    format!("token.{id}.{token}")
}

/// The largest floor written: 19 decimal digits, far above any timestamp a 42-bit nonce field
/// can carry. A larger bound is clamped to it (still an upper bound of every timestamp).
pub(crate) const MAX_FLOOR_MS: u64 = 9_999_999_999_999_999_999;

/// The machine ID a floor field names: `floor.` and a canonical ID (as [`parse_id_field`]).
pub(crate) fn parse_floor_field(field: &[u8]) -> Option<MachineId> {
    parse_id_field(field.strip_prefix(b"floor.")?)
}

/// A stored floor value: canonical decimal (no sign, no leading zero), at most 19 digits. The
/// Lua scripts apply the same rule; anything else is unreadable.
pub(crate) fn parse_floor_value(value: &[u8]) -> Option<u64> {
    parse_canonical(value, 19)
}

/// Canonical decimal text (no sign, no leading zero) of at most `digits` (up to 19) digits.
fn parse_canonical(text: &[u8], digits: usize) -> Option<u64> {
    let canonical = text.first() != Some(&b'0') || text.len() == 1;
    (!text.is_empty() && text.len() <= digits && canonical && text.iter().all(u8::is_ascii_digit))
        .then(|| {
            text.iter()
                .fold(0, |acc, digit| acc * 10 + u64::from(digit - b'0'))
        })
}

/// What an acquire reads from the hash: the free IDs with their stored floors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeIds {
    /// Free IDs whose floor is absent (0) or readable, with it.
    pub readable: Vec<(MachineId, u64)>,
    /// Free IDs whose floor field holds something else, with it: never claimed, since nobody
    /// can say what was issued under them.
    pub unreadable: Vec<(MachineId, String)>,
}

/// The free IDs among `HGETALL` pairs (as [`free_ids`]), each with its floor.
pub(crate) fn free_ids_with_floors<F: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(F, V)]) -> FreeIds {
    let fields: Vec<&[u8]> = pairs.iter().map(|(field, _)| field.as_ref()).collect();
    let mut floors: Vec<Result<u64, &[u8]>> = vec![Ok(0); usize::from(MachineId::COUNT)];
    for (field, value) in pairs {
        if let Some(id) = parse_floor_field(field.as_ref()) {
            let value = value.as_ref();
            floors[usize::from(id.get())] = parse_floor_value(value).ok_or(value);
        }
    }
    let mut free = FreeIds::default();
    for id in free_ids(&fields) {
        match floors[usize::from(id.get())] {
            Ok(floor) => free.readable.push((id, floor)),
            Err(value) => free
                .unreadable
                .push((id, String::from_utf8_lossy(value).into_owned())),
        }
    }
    free
}

/// The machine ID a hash field names, if it is an ID field: canonical decimal `0..=511`
/// (no sign, no leading zero). Markers (`token.…`) and foreign fields give `None`.
/// The run ID `migrate` initialized the hash on (field `open_run`), among `HGETALL` pairs: 40
/// hex digits, as `INFO` writes one; anything else is no run.
pub(crate) fn initialized_on<F: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(F, V)]) -> Option<String> {
    pairs.iter().find_map(|(field, value)| {
        let value = value.as_ref();
        (field.as_ref() == b"open_run"
            && value.len() == 40
            && value.iter().all(u8::is_ascii_hexdigit))
        .then(|| String::from_utf8_lossy(value).into_owned())
    })
}

pub(crate) fn parse_id_field(field: &[u8]) -> Option<MachineId> {
    MachineId::new(u16::try_from(parse_canonical(field, 3)?).ok()?).ok()
}

/// The IDs not named by any ID field among `fields`.
pub(crate) fn free_ids<F: AsRef<[u8]>>(fields: &[F]) -> Vec<MachineId> {
    let mut taken = [false; MachineId::COUNT as usize];
    for field in fields {
        if let Some(id) = parse_id_field(field.as_ref()) {
            taken[usize::from(id.get())] = true;
        }
    }
    (0..MachineId::COUNT)
        .filter(|&id| !taken[usize::from(id)])
        .filter_map(|id| MachineId::new(id).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_22_url_safe_characters_and_differ() {
        let a = new_token(rand::random);
        let b = new_token(rand::random);
        assert_eq!(a.len(), 22);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(a, b);
        assert_eq!(Base64UrlUnpadded::decode_vec(&a).unwrap().len(), 16);
    }

    /// The fields of up to 3 bytes, every ID and the markers are checked exhaustively by
    /// `fuzz::every_id_round_trips_and_nothing_else_parses`; these are longer.
    #[test]
    fn only_canonical_ids_in_range_are_id_fields() {
        for field in ["1000", "0511", "token.1.abc", "nononce"] {
            assert_eq!(parse_id_field(field.as_bytes()), None, "{field:?}");
        }
    }

    #[test]
    fn floor_fields_and_values() {
        for id in [0, 17, 511] {
            let parsed = parse_floor_field(format!("floor.{id}").as_bytes());
            assert_eq!(parsed.map(MachineId::get), Some(id));
        }
        for field in "floor.512 floor.017 floor. floor17 17 token.17.abc".split(' ') {
            assert_eq!(parse_floor_field(field.as_bytes()), None, "{field}");
        }
        for (value, floor) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("1893456000000", Some(1_893_456_000_000)),
            ("9999999999999999999", Some(MAX_FLOOR_MS)),
            ("10000000000000000000", None),
            ("18446744073709551615", None),
        ] {
            assert_eq!(parse_floor_value(value.as_bytes()), floor, "{value:?}");
        }
        for value in ["", "00", "01", "-1", "+1", " 1", "1 ", "1e3", "1.5"] {
            assert_eq!(parse_floor_value(value.as_bytes()), None, "{value:?}");
        }
    }

    #[test]
    fn free_ids_ignore_markers_and_foreign_fields_and_come_with_their_floors() {
        let pairs = [
            ("0", "tok"),
            ("token.0.tok", "0"),
            ("token.1.y", "1"),
            ("4", "tok"),
            ("abc", "1"),
            ("512", "1"),
            ("03", "1"),
            ("floor.0", "5"),
            ("floor.1", "1893456000000"),
            ("floor.2", "soon"),
            ("floor.600", "1"),
            ("floor.03", "x"),
        ];
        let fields: Vec<&str> = pairs.iter().map(|(field, _)| *field).collect();
        let free = free_ids(&fields);
        assert_eq!(free.len(), 510);
        assert_eq!(
            free[..4].iter().map(|id| id.get()).collect::<Vec<_>>(),
            [1, 2, 3, 5]
        );
        let id = |n| MachineId::new(n).unwrap();
        let free = free_ids_with_floors(&pairs);
        assert_eq!(free.readable.len(), 509);
        assert_eq!(
            free.readable[..3],
            [(id(1), 1_893_456_000_000), (id(3), 0), (id(5), 0)]
        );
        assert_eq!(free.unreadable, [(id(2), "soon".to_owned())]);
    }

    /// NoNoncense's own reading of `HKEYS` (`leased_ids/1`): fields starting with `token.` are
    /// markers; every other field is passed to `String.to_integer/1`, and those that fail are
    /// dropped. `String.to_integer` takes an optional sign and decimal digits.
    fn nononcense_reads_as_id(field: &str) -> Option<i64> {
        if field.starts_with("token.") {
            return None;
        }
        let digits = field.strip_prefix(['+', '-']).unwrap_or(field);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        field.parse().ok()
    }

    #[test]
    fn nononcense_ignores_floor_fields() {
        for id in 0..MachineId::COUNT {
            let id = MachineId::new(id).unwrap();
            assert_eq!(nononcense_reads_as_id(&format!("floor.{id}")), None);
            assert_eq!(
                nononcense_reads_as_id(&marker(id, &new_token(rand::random))),
                None
            );
            assert_eq!(
                nononcense_reads_as_id(&id.to_string()),
                Some(i64::from(id.get()))
            );
        }
        // The marker's layout is NoNoncense's.
        assert_eq!(marker(MachineId::new(17).unwrap(), "abc"), "token.17.abc");
    }
}

/// Fuzzing by property test of the field parser, on a seeded generator (no extra dependency):
/// arbitrary bytes plus structure-aware fields (IDs, near-IDs, markers, huge fields).
/// Cases: `NONONCE_FUZZ_CASES` (256 when unset), as for the proptest targets; `cargo xtask fuzz`
/// runs many more. A failure names its seed and case.
#[cfg(test)]
mod fuzz {
    use super::*;

    /// Inputs drawn from the lease manager's seeded generator.
    struct Gen(lease_manager::SplitMix64);

    impl Gen {
        fn new(seed: u64) -> Self {
            Self(lease_manager::SplitMix64::new(seed))
        }

        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).expect("below n")
        }

        /// Fewer than `max` random bytes.
        fn bytes(&mut self, max: usize) -> Vec<u8> {
            let len = self.below(max);
            (0..len).map(|_| self.next().to_le_bytes()[0]).collect()
        }

        /// One hash field as a foreign writer, a NoNoncense node or this crate might leave it.
        fn field(&mut self) -> Vec<u8> {
            let id = self.below(1100);
            match self.below(14) {
                0 => self.bytes(8),
                1 => self.bytes(64),
                2 | 3 => id.to_string().into_bytes(),
                4 => format!("{}{id}", "0".repeat(1 + self.below(3))).into_bytes(),
                5 => {
                    let sign = [b"-", b"+", b" ", b"\t"][self.below(4)];
                    [&sign[..], id.to_string().as_bytes()].concat()
                }
                6 => format!("{id} ").into_bytes(),
                7 => format!("token.{id}.{}", new_token(rand::random)).into_bytes(),
                8 => format!("token.{id}").into_bytes(),
                // A canonical ID with one byte changed.
                9 => self.changed(id.to_string().into_bytes()),
                10 => ["٣", "７", "1e2", "0x1f", "1_0", "½", "\u{0}7"][self.below(7)]
                    .as_bytes()
                    .to_vec(),
                11 => format!("floor.{id}").into_bytes(),
                12 => self.changed(format!("floor.{id}").into_bytes()),
                _ => u64::MAX.to_string().into_bytes(),
            }
        }

        /// `field` with one random byte changed.
        fn changed(&mut self, mut field: Vec<u8>) -> Vec<u8> {
            let at = self.below(field.len());
            field[at] = self.next().to_le_bytes()[0];
            field
        }
    }

    fn cases() -> u64 {
        std::env::var("NONONCE_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256)
    }

    /// The documented rule: exactly the canonical decimal text of 0..=511.
    fn reference(field: &[u8]) -> Option<u16> {
        let text = std::str::from_utf8(field).ok()?;
        let n: u16 = text.parse().ok()?;
        (n <= 511 && n.to_string() == text).then_some(n)
    }

    fn check_field(field: &[u8], context: &str) {
        assert_eq!(
            parse_id_field(field).map(MachineId::get),
            reference(field),
            "{context}: field {:?}",
            String::from_utf8_lossy(field)
        );
    }

    #[test]
    fn every_id_round_trips_and_nothing_else_parses() {
        for id in 0..MachineId::COUNT {
            let id = MachineId::new(id).unwrap();
            assert_eq!(parse_id_field(id.to_string().as_bytes()), Some(id));
            assert_eq!(
                parse_id_field(marker(id, &new_token(rand::random)).as_bytes()),
                None
            );
        }
        // Every field of up to 3 bytes from the digits and a few neighbours: exhaustive.
        let alphabet = b"0123456789+- .\x00a/:";
        for len in 0..=3u32 {
            for n in 0..alphabet.len().pow(len) {
                let mut rest = n;
                let field: Vec<u8> = (0..len)
                    .map(|_| {
                        let c = alphabet[rest % alphabet.len()];
                        rest /= alphabet.len();
                        c
                    })
                    .collect();
                check_field(&field, "exhaustive");
            }
        }
    }

    #[test]
    fn random_fields_parse_as_documented() {
        let seed = 0x6e6f_6e6f_6e63_6501;
        let mut g = Gen::new(seed);
        for case in 0..cases() * 16 {
            let field = g.field();
            check_field(&field, &format!("seed {seed:#x} case {case}"));
        }
    }

    /// The documented floor rule: the canonical decimal text of a number below 10^19.
    fn reference_floor(value: &[u8]) -> Option<u64> {
        let text = std::str::from_utf8(value).ok()?;
        let n: u64 = text.parse().ok()?;
        (n <= MAX_FLOOR_MS && n.to_string() == text).then_some(n)
    }

    /// One stored floor value, as this crate, an operator or a corrupt write might leave it.
    fn floor_value(g: &mut Gen) -> Vec<u8> {
        let n = match g.below(4) {
            0 => g.next() % 1000,
            1 => 1_700_000_000_000 + g.next() % 1_000_000_000_000,
            2 => g.next() % (MAX_FLOOR_MS + 1),
            _ => g.next(),
        };
        match g.below(8) {
            0 => {
                let len = g.below(24);
                (0..len).map(|_| b"0123456789+- .e"[g.below(15)]).collect()
            }
            1 => format!("0{n}").into_bytes(),
            2 => format!("{n} ").into_bytes(),
            3 => format!("-{n}").into_bytes(),
            4 => g.bytes(8),
            _ => n.to_string().into_bytes(),
        }
    }

    #[test]
    fn random_floor_values_parse_as_documented() {
        let seed = 0x6e6f_6e6f_6e63_6503;
        let mut g = Gen::new(seed);
        for case in 0..cases() * 16 {
            let value = floor_value(&mut g);
            assert_eq!(
                parse_floor_value(&value),
                reference_floor(&value),
                "seed {seed:#x} case {case}: value {:?}",
                String::from_utf8_lossy(&value)
            );
            let field = g.field();
            let expected = field
                .strip_prefix(b"floor.")
                .and_then(reference)
                .map(|id| MachineId::new(id).unwrap());
            assert_eq!(
                parse_floor_field(&field),
                expected,
                "seed {seed:#x} case {case}"
            );
        }
    }

    /// `free_ids` is the sorted complement of the IDs the fields name, whatever else the hash
    /// holds (floor fields too), and never more than 512 entries; `free_ids_with_floors` is the
    /// same complement, each ID with the floor its field holds.
    #[test]
    fn free_ids_are_the_complement_of_the_id_fields_with_their_floors() {
        let seed = 0x6e6f_6e6f_6e63_6502;
        let mut g = Gen::new(seed);
        for case in 0..cases() {
            let count = match g.below(4) {
                0 => g.below(4),
                1 => g.below(64),
                2 => g.below(600),
                _ => g.below(3000),
            };
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..count)
                .map(|_| {
                    let field = g.field();
                    (field, floor_value(&mut g))
                })
                .collect();
            let taken: std::collections::BTreeSet<u16> =
                pairs.iter().filter_map(|(f, _)| reference(f)).collect();
            // The last floor field of an ID wins, as in a hash (where there is only one).
            let mut floors = std::collections::BTreeMap::new();
            for (field, value) in &pairs {
                if let Some(id) = field.strip_prefix(b"floor.").and_then(reference) {
                    floors.insert(id, reference_floor(value).ok_or(value.clone()));
                }
            }
            let free: Vec<u16> = (0..MachineId::COUNT)
                .filter(|id| !taken.contains(id))
                .collect();
            let fields: Vec<&[u8]> = pairs.iter().map(|(field, _)| field.as_slice()).collect();
            let got: Vec<u16> = free_ids(&fields).into_iter().map(MachineId::get).collect();
            assert_eq!(got, free, "seed {seed:#x} case {case}");
            let mut expected = FreeIds::default();
            for &n in &free {
                let id = MachineId::new(n).unwrap();
                match floors.get(&n).cloned().unwrap_or(Ok(0)) {
                    Ok(floor) => expected.readable.push((id, floor)),
                    Err(value) => expected
                        .unreadable
                        .push((id, String::from_utf8_lossy(&value).into_owned())),
                }
            }
            assert_eq!(
                free_ids_with_floors(&pairs),
                expected,
                "seed {seed:#x} case {case}"
            );
        }
    }

    /// Huge fields and a huge hash are handled: the parser rejects a field by its length before
    /// reading its bytes, and `free_ids` makes one pass over the fields, so the work is bounded
    /// by the input. No time limit is asserted.
    #[test]
    fn huge_fields_and_hashes_are_handled() {
        let mib = 1 << 20;
        for field in [
            vec![b'1'; mib],
            vec![b'0'; mib],
            [b"7".as_slice(), &vec![b' '; mib]].concat(),
            format!("token.7.{}", "x".repeat(mib)).into_bytes(),
            vec![0xff; mib],
        ] {
            assert_eq!(parse_id_field(&field), None);
        }
        // A million fields, every ID among them once: nothing free.
        let mut fields: Vec<Vec<u8>> = (0..1_000_000u32)
            .map(|i| format!("token.{}.{i}", i % u32::from(MachineId::COUNT)).into_bytes())
            .collect();
        fields.extend((0..MachineId::COUNT).map(|id| id.to_string().into_bytes()));
        assert!(free_ids(&fields).is_empty());
        // The same fields with the IDs' own fields dropped: every ID free again.
        let markers = &fields[..1_000_000];
        assert_eq!(free_ids(markers).len(), usize::from(MachineId::COUNT));
        let pairs: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (f.as_slice(), &b"0"[..])).collect();
        let free = free_ids_with_floors(&pairs);
        assert!(free.readable.is_empty() && free.unreadable.is_empty());
    }
}
