//! NoNoncense wire compatibility: derived keys, single blocks and encrypted nonces checked
//! against vectors computed independently (see tests/data/README.md).

use nonce_core::{
    Cipher64, Cipher96, Cipher128, Factory, FactoryConfig, ManualClock, Nonce64, Nonce96, Nonce128,
    derive_key,
};

const DATA: &str = include_str!("data/known_answers.txt");

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn lines(kind: &str) -> impl Iterator<Item = Vec<&'static str>> + '_ {
    DATA.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(move |f| f[0] == kind)
}

fn clock() -> ManualClock {
    ManualClock::new(1_800_000_000_000)
}

#[test]
fn derived_keys_match() {
    let mut n = 0;
    for f in lines("key") {
        let len: usize = f[2].parse().unwrap();
        let mut out = vec![0u8; len];
        derive_key(&hex(f[3]), f[1], &mut out).unwrap();
        assert_eq!(out, hex(f[4]), "derived key for salt {}", f[1]);
        n += 1;
    }
    assert_eq!(n, 16);
}

/// A factory whose cipher for nonces of `bits` is `cipher` (as the data names it), keyed with
/// `key` itself (`explicit`) or with a key derived from it as a base key.
fn factory(bits: &str, cipher: &str, key: &[u8], explicit: bool) -> Factory<ManualClock> {
    let cfg = FactoryConfig::new();
    let cfg = if explicit {
        cfg
    } else {
        cfg.with_base_key(key)
    };
    let cfg = match (bits, cipher) {
        ("64", "blowfish") => cfg.with_cipher64(Cipher64::Blowfish),
        ("64", "des3") => cfg.with_cipher64(Cipher64::Des3),
        ("64", "speck64_128") => cfg.with_cipher64(Cipher64::Speck),
        ("96", "blowfish") => cfg.with_cipher96(Cipher96::Blowfish),
        ("96", "des3") => cfg.with_cipher96(Cipher96::Des3),
        ("96", "speck96_144") => cfg.with_cipher96(Cipher96::Speck),
        ("128", "aes256") => cfg.with_cipher128(Cipher128::Aes),
        ("128", "speck128_256") => cfg.with_cipher128(Cipher128::Speck),
        other => panic!("unknown cipher in data: {other:?}"),
    };
    let cfg = match bits {
        _ if !explicit => cfg,
        "64" => cfg.with_key64(key),
        "96" => cfg.with_key96(key),
        _ => cfg.with_key128(key),
    };
    Factory::new(clock(), cfg).unwrap()
}

/// `plain` under `f`'s cipher for nonces of `bits`, checked to decrypt back to it.
fn encrypt(f: &Factory<ManualClock>, bits: &str, plain: &[u8]) -> Vec<u8> {
    match bits {
        "64" => {
            let p = Nonce64::from_bytes(plain.try_into().unwrap());
            let c = f.encrypt64(p).unwrap();
            assert_eq!(f.decrypt64(c).unwrap(), p);
            c.to_bytes().to_vec()
        }
        "96" => {
            let p = Nonce96::from_bytes(plain.try_into().unwrap());
            let c = f.encrypt96(p).unwrap();
            assert_eq!(f.decrypt96(c).unwrap(), p);
            c.to_bytes().to_vec()
        }
        _ => {
            let p = Nonce128::from_bytes(plain.try_into().unwrap());
            let c = f.encrypt128(p).unwrap();
            assert_eq!(f.decrypt128(c).unwrap(), p);
            c.to_bytes().to_vec()
        }
    }
}

#[test]
fn single_blocks_match() {
    let mut n = 0;
    for f in lines("block") {
        let (key, plain, expected) = (hex(f[2]), hex(f[3]), hex(f[4]));
        let bits = match f[1] {
            "speck96_144" => "96",
            "aes256" | "speck128_256" => "128",
            _ => "64",
        };
        let got = encrypt(&factory(bits, f[1], &key, true), bits, &plain);
        assert_eq!(got, expected, "{} block {}", f[1], f[3]);
        n += 1;
    }
    assert!(n >= 130, "only {n} block vectors");
}

#[test]
fn encrypted_nonces_match_from_base_key() {
    let mut n = 0;
    for f in lines("nonce") {
        let (bits, cipher, base, plain, expected) = (f[1], f[2], hex(f[3]), hex(f[4]), hex(f[5]));
        let got = encrypt(&factory(bits, cipher, &base, false), bits, &plain);
        assert_eq!(got, expected, "{bits}-bit {cipher} nonce {}", f[4]);
        n += 1;
    }
    assert_eq!(n, 128);
}
