//! The base key as hex text: the one encoding of the library's examples and of the `nononce`
//! command, so both derive the same keys from one secret.

use nononce::nonce::{ManualClock, Nonce64};
use nononce::{FactoryOptions, FactoryOptionsExt, KeyHexError, decode_key_hex};

/// A clock reading past the default epoch (2025-01-01).
const NOW_MS: u64 = 1_800_000_000_000;
const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

#[test]
fn decodes_either_case_and_ignores_surrounding_whitespace() {
    let decoded = |text: &str| decode_key_hex(text).unwrap().to_vec();
    let bytes: Vec<u8> = (0..32).collect();
    assert_eq!(decoded(HEX), bytes);
    assert_eq!(decoded(&HEX.to_uppercase()), bytes);
    // As `openssl rand -hex 32 > key.hex` writes a file, and as shells keep a variable.
    assert_eq!(decoded(&format!("  {HEX}\n")), bytes);
    assert_eq!(decoded(&format!("{HEX}{HEX}")).len(), 64);
}

#[test]
fn refuses_what_is_not_hex_with_its_own_error() {
    for text in ["xyz", "001", &format!("{HEX}0"), &format!("0x{HEX}")] {
        assert_eq!(decode_key_hex(text), Err(KeyHexError::NotHex), "{text:?}");
    }
    // Whitespace inside the digits is not hex either.
    let spaced = format!("{} {}", &HEX[..32], &HEX[32..]);
    assert_eq!(decode_key_hex(&spaced), Err(KeyHexError::NotHex));
    assert_eq!(
        KeyHexError::NotHex.to_string(),
        "the base key is not hex: give an even number of hex digits"
    );
}

#[test]
fn refuses_a_short_key_and_says_how_long_it_is() {
    for (text, bytes) in [("", 0), ("  \n", 0), ("0011", 2), (&HEX[..62], 31)] {
        assert_eq!(decode_key_hex(text), Err(KeyHexError::TooShort { bytes }));
    }
    assert_eq!(
        KeyHexError::TooShort { bytes: 2 }.to_string(),
        "the base key is 2 bytes: use at least 32 random bytes (64 hex digits; `openssl rand -hex 32` makes one)"
    );
    assert!(
        FactoryOptions::new().with_base_key_hex("0011").is_err(),
        "the options refuse it too"
    );
}

#[test]
fn hex_and_raw_bytes_give_the_same_keys() {
    let build = |options: FactoryOptions| options.build(ManualClock::new(NOW_MS)).unwrap();
    let from_hex = build(FactoryOptions::new().with_base_key_hex(HEX).unwrap());
    let from_bytes =
        build(FactoryOptions::new().with_base_key((0..32).collect::<Vec<u8>>().into()));
    let other = build(FactoryOptions::new().with_base_key(vec![7u8; 32].into()));
    let plain = Nonce64::from_u64(0x03be_4cb5_0000_2000);
    let sealed = from_hex.encrypt64(plain).unwrap();
    assert_eq!(sealed, from_bytes.encrypt64(plain).unwrap());
    assert_ne!(sealed, other.encrypt64(plain).unwrap());
    assert_eq!(from_bytes.decrypt64(sealed).unwrap(), plain);
    // The value the CLI's documented example prints for this key (`nononce encrypt --help`).
    assert_eq!(sealed.to_string(), "55728bcb7d191444");
}
