//! Fuzzing by property test: nonce parsing (hex and base64url), decode and cipher names.
//!
//! Stable Rust has no libFuzzer, so these are proptest targets fed with arbitrary strings and
//! bytes plus structure-aware inputs (right-length text from the right alphabet, mutated valid
//! encodings, inputs up to 1 MiB). Each input is checked against a small reference parser, so
//! "no panic" is the least they prove.
//!
//! Cases: `NONONCE_FUZZ_CASES` (256 when unset, so `cargo test` stays fast); the 1 MiB targets
//! run 1/64 of them. `cargo xtask fuzz --cases N` runs these in release mode with many more.
//! (`PROPTEST_CASES`, if set, overrides every target's count, as proptest always does.)

use std::time::{Duration, Instant};

use nonce_core::layout::{MACHINE_ID_BITS, TIMESTAMP_BITS};
use nonce_core::{
    Cipher64, Cipher96, Cipher128, MAX_TIMESTAMP, MachineId, Nonce, Nonce64, Nonce96, Nonce128,
    ParseNonceError, UnknownCipher,
};
use proptest::prelude::*;

const MIB: usize = 1 << 20;
/// Generous: linear work on 1 MiB takes milliseconds; anything quadratic takes hours.
const BIG_INPUT_BUDGET: Duration = Duration::from_secs(5);

/// `NONONCE_FUZZ_CASES` (default 256) cases, `1/divisor` of them for expensive inputs.
fn config(divisor: u32) -> ProptestConfig {
    let cases = std::env::var("NONONCE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(256);
    ProptestConfig::with_cases((cases / divisor).max(4))
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn hex_len(n: usize) -> usize {
    n * 2
}

fn b64_len(n: usize) -> usize {
    (n * 4).div_ceil(3)
}

/// Reference hex decoder: exactly `2n` ASCII hex digits, either case.
fn ref_hex(s: &str, n: usize) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() != hex_len(n) || !b.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let digit = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    Some(
        b.chunks(2)
            .map(|p| digit(p[0]).unwrap() << 4 | digit(p[1]).unwrap())
            .collect(),
    )
}

/// Reference unpadded base64url decoder, canonical only: the unused low bits of the last
/// character must be zero, so every value has exactly one encoding.
fn ref_b64(s: &str, n: usize) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() != b64_len(n) {
        return None;
    }
    let mut bits: u32 = 0;
    let mut held = 0;
    let mut out = Vec::with_capacity(n);
    for &c in b {
        let v = B64.iter().position(|&a| a == c)?;
        bits = bits << 6 | u32::try_from(v).unwrap();
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push(u8::try_from((bits >> held) & 0xff).unwrap());
        }
    }
    let leftover = bits & ((1 << held) - 1);
    (out.len() == n && leftover == 0).then_some(out)
}

fn encode_b64(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let mut word = [0u8; 3];
        word[..chunk.len()].copy_from_slice(chunk);
        let v = u32::from(word[0]) << 16 | u32::from(word[1]) << 8 | u32::from(word[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(B64[((v >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Whatever `Nonce::<N>::from_str` does with `s`, it agrees with the reference: `Length` for
/// any other length, `InvalidHex`/`InvalidBase64` for the right length and wrong text, and
/// otherwise the value whose canonical encoding `s` is.
fn check_parse<const N: usize>(s: &str) -> Result<(), TestCaseError> {
    let got = s.parse::<Nonce<N>>();
    let bits = u16::try_from(N * 8).unwrap();
    if s.len() == hex_len(N) {
        match ref_hex(s, N) {
            Some(bytes) => {
                let n = got.map_err(|e| TestCaseError::fail(format!("{s:?}: {e}")))?;
                prop_assert_eq!(&n.to_bytes()[..], &bytes[..]);
                prop_assert_eq!(n.to_string(), s.to_ascii_lowercase());
            }
            None => prop_assert_eq!(got, Err(ParseNonceError::InvalidHex), "{:?}", s),
        }
    } else if s.len() == b64_len(N) {
        match ref_b64(s, N) {
            Some(bytes) => {
                let n = got.map_err(|e| TestCaseError::fail(format!("{s:?}: {e}")))?;
                prop_assert_eq!(&n.to_bytes()[..], &bytes[..]);
                prop_assert_eq!(n.base64url().to_string(), s);
            }
            None => prop_assert_eq!(got, Err(ParseNonceError::InvalidBase64), "{:?}", s),
        }
    } else {
        prop_assert_eq!(got, Err(ParseNonceError::Length { bits, len: s.len() }));
        // The message quotes the length, never the input: bounded whatever the input size.
        let message = got.unwrap_err().to_string();
        prop_assert!(message.len() < 120, "{}", message);
    }
    Ok(())
}

fn check_parse_all(s: &str) -> Result<(), TestCaseError> {
    check_parse::<8>(s)?;
    check_parse::<12>(s)?;
    check_parse::<16>(s)
}

/// Any epoch, biased to the edges: near `u64::MAX` the Unix time of a nonce overflows.
fn epoch() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (u64::MAX - (1 << 43))..=u64::MAX,
        Just(u64::MAX),
        Just(0),
        Just(nonce_core::DEFAULT_EPOCH_MS),
    ]
}

/// Text of `len` characters, mostly from `alphabet`, sometimes anything.
fn text_from(alphabet: &'static [u8], len: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            12 => proptest::sample::select(alphabet).prop_map(char::from),
            1 => any::<char>(),
            1 => proptest::sample::select(&b"=+/ .\n\t\0"[..]).prop_map(char::from),
        ],
        len,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// Text of the hex or base64url length of some nonce size, give or take one.
fn near_valid_text() -> impl Strategy<Value = String> {
    let lens: Vec<usize> = [8, 12, 16]
        .iter()
        .flat_map(|&n| [hex_len(n), b64_len(n)])
        .flat_map(|l| [l - 1, l, l + 1])
        .collect();
    proptest::sample::select(lens).prop_flat_map(|len| {
        prop_oneof![
            text_from(b"0123456789abcdefABCDEF", len),
            text_from(B64, len),
        ]
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(usize, char),
    Insert(usize, char),
    Delete(usize),
    Upper,
    Pad,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<char>()).prop_map(|(i, c)| Mutation::Replace(i, c)),
        (any::<usize>(), any::<char>()).prop_map(|(i, c)| Mutation::Insert(i, c)),
        any::<usize>().prop_map(Mutation::Delete),
        Just(Mutation::Upper),
        Just(Mutation::Pad),
    ]
}

fn mutate(s: &str, m: &Mutation) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    match *m {
        Mutation::Replace(i, c) => {
            let i = i % chars.len();
            chars[i] = c;
        }
        Mutation::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
        Mutation::Delete(i) => {
            let i = i % chars.len();
            chars.remove(i);
        }
        Mutation::Upper => return s.to_ascii_uppercase(),
        Mutation::Pad => return format!("{s}="),
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(config(1))]

    /// Any text, lossy-decoded bytes, text of a nonce's lengths, and a valid encoding as it is
    /// and mutated: each parses as the reference says.
    #[test]
    fn parse_agrees_with_the_reference(
        s in any::<String>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..48),
        near in near_valid_text(),
        value in proptest::collection::vec(any::<u8>(), 16),
        size in proptest::sample::select(vec![8usize, 12, 16]),
        base64 in any::<bool>(),
        m in mutation(),
    ) {
        let value = &value[..size];
        let valid = if base64 {
            encode_b64(value)
        } else {
            value.iter().map(|b| format!("{b:02x}")).collect()
        };
        let lossy = String::from_utf8_lossy(&bytes).into_owned();
        for text in [s, lossy, near, mutate(&valid, &m), valid] {
            check_parse_all(&text)?;
        }
    }

    /// Display and base64url of any value parse back to it; so does uppercase hex.
    #[test]
    fn valid_encodings_round_trip(bytes in any::<[u8; 16]>()) {
        fn round_trip<const N: usize>(bytes: [u8; N]) -> Result<(), TestCaseError> {
            let n = Nonce::<N>::from_bytes(bytes);
            let hex = n.to_string();
            let b64 = n.base64url().to_string();
            prop_assert_eq!(hex.len(), hex_len(N));
            prop_assert_eq!(b64.len(), b64_len(N));
            prop_assert_eq!(&b64, &encode_b64(&bytes));
            prop_assert_eq!(hex.parse::<Nonce<N>>(), Ok(n));
            prop_assert_eq!(hex.to_ascii_uppercase().parse::<Nonce<N>>(), Ok(n));
            prop_assert_eq!(b64.parse::<Nonce<N>>(), Ok(n));
            Ok(())
        }
        round_trip::<8>(bytes[..8].try_into().unwrap())?;
        round_trip::<12>(bytes[..12].try_into().unwrap())?;
        round_trip::<16>(bytes)?;
    }

    /// Decode of each size: every field in range, and the fields re-pack to the integer, but
    /// for the 13 padding bits of 128-bit nonces between the machine ID and the 64-bit count,
    /// which generated nonces leave zero; integers past 96 bits are refused with `TooLarge`.
    #[test]
    fn decoded_fields_repack(bytes in any::<[u8; 16]>(), high in 1u128..=u128::from(u32::MAX), epoch in epoch()) {
        let v64 = u64::from_be_bytes(bytes[..8].try_into().unwrap());
        let n96 = Nonce96::from_bytes(bytes[..12].try_into().unwrap());
        let (v96, v128) = (n96.to_u128(), u128::from_be_bytes(bytes));
        prop_assert!(v96 >> 96 == 0);
        prop_assert_eq!(Nonce96::from_u128(v96), Some(n96));
        let too_large = v96 | high << 96;
        prop_assert_eq!(Nonce96::from_u128(too_large), None);
        prop_assert_eq!(Nonce96::try_from(too_large), Err(ParseNonceError::TooLarge));
        let padding = ((1u128 << 13) - 1) << 64;
        let ts64 = 64 - TIMESTAMP_BITS;
        for (bits, d, v, count_bits, ts_shift, id_shift) in [
            (64, Nonce64::from_u64(v64).decode(epoch), u128::from(v64), 13, ts64, ts64 - MACHINE_ID_BITS),
            (96, n96.decode(epoch), v96, 45, 54, 45),
            (128, Nonce128::from_u128(v128).decode(epoch), v128 & !padding, 64, 86, 77),
        ] {
            prop_assert_eq!(d.bits, bits);
            prop_assert!(d.timestamp_ms <= MAX_TIMESTAMP);
            prop_assert!(d.machine_id.get() <= MachineId::MAX);
            prop_assert!(u128::from(d.count) < 1 << count_bits);
            prop_assert_eq!(d.unix_ms, d.timestamp_ms.saturating_add(epoch));
            let repacked = u128::from(d.timestamp_ms) << ts_shift | u128::from(d.machine_id.get()) << id_shift | u128::from(d.count);
            prop_assert_eq!(repacked, v, "{} bits", bits);
        }
    }

    /// Cipher names: exactly the documented names parse, to the cipher whose name they are
    /// (every cipher's name round-trips); anything else is `UnknownCipher` for that size.
    #[test]
    fn cipher_names(s in prop_oneof![
        any::<String>(),
        proptest::sample::select(vec!["blowfish", "des3", "speck", "aes", "3des", "AES", " aes", "aes ", "speck\0", "Blowfish", "des", "aes256", ""])
            .prop_map(str::to_owned),
        ("(blowfish|des3|speck|aes)", mutation()).prop_map(|(name, m)| mutate(&name, &m)),
    ]) {
        fn check<C>(s: &str, all: &[C], bits: u16) -> Result<(), TestCaseError>
        where
            C: std::str::FromStr<Err = UnknownCipher> + std::fmt::Display + PartialEq + std::fmt::Debug + Copy,
        {
            for c in all {
                prop_assert_eq!(c.to_string().parse::<C>(), Ok(*c));
            }
            let expected = all.iter().copied().find(|c| c.to_string() == s);
            match (s.parse::<C>(), expected) {
                (Ok(c), Some(e)) => prop_assert_eq!(c, e),
                (Err(e), None) => {
                    prop_assert_eq!(e, UnknownCipher { bits });
                    let prefix = format!("unknown {bits}-bit cipher: use ");
                    prop_assert!(e.to_string().starts_with(&prefix));
                }
                (got, expected) => prop_assert!(false, "{:?}: got {:?}, expected {:?}", s, got, expected),
            }
            Ok(())
        }
        check(&s, Cipher64::ALL, 64)?;
        check(&s, Cipher96::ALL, 96)?;
        check(&s, Cipher128::ALL, 128)?;
    }
}

/// The reference decoders themselves, on known answers.
#[test]
fn the_reference_decoders_know_the_answers() {
    assert_eq!(
        ref_b64("A75MtQAAIAA", 8),
        Some(vec![0x03, 0xbe, 0x4c, 0xb5, 0, 0, 0x20, 0])
    );
    assert_eq!(ref_b64("A75MtQAAIAB", 8), None);
    assert_eq!(
        encode_b64(&[0x03, 0xbe, 0x4c, 0xb5, 0, 0, 0x20, 0]),
        "A75MtQAAIAA"
    );
    assert_eq!(ref_hex("03BE4cb500002000", 8).unwrap()[..2], [0x03, 0xbe]);
}

proptest! {
    #![proptest_config(config(64))]

    /// Inputs up to 1 MiB are refused by length, at once, with a message that does not grow.
    #[test]
    fn huge_inputs_are_refused_quickly(
        unit in prop_oneof![Just("0".to_owned()), Just("A".to_owned()), any::<char>().prop_map(String::from)],
        len in 1usize..=MIB,
    ) {
        let s = unit.repeat(len / unit.len()).chars().take(len).collect::<String>();
        let started = Instant::now();
        check_parse_all(&s)?;
        prop_assert!(started.elapsed() < BIG_INPUT_BUDGET, "{:?} for {} bytes", started.elapsed(), s.len());
    }
}
