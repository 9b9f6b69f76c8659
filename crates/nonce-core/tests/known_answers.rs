//! NoNoncense wire compatibility: derived keys, single blocks and encrypted nonces checked
//! against vectors computed independently (see tests/data/README.md).
// Every cipher and the std clock are used throughout.
#![cfg(all(
    feature = "std",
    feature = "aes",
    feature = "blowfish",
    feature = "des3",
    feature = "speck"
))]

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

/// A factory whose cipher for the block's size is `cipher`, keyed explicitly.
enum Block {
    B64(Factory<ManualClock>),
    B96(Factory<ManualClock>),
    B128(Factory<ManualClock>),
}

fn block_factory(cipher: &str, key: &[u8]) -> Block {
    let cfg = FactoryConfig::new();
    let f = |c: FactoryConfig<&[u8]>| Factory::new(clock(), c).unwrap();
    match cipher {
        "blowfish" => Block::B64(f(cfg.with_cipher64(Cipher64::Blowfish).with_key64(key))),
        "des3" => Block::B64(f(cfg.with_cipher64(Cipher64::Des3).with_key64(key))),
        "speck64_128" => Block::B64(f(cfg.with_cipher64(Cipher64::Speck).with_key64(key))),
        "speck96_144" => Block::B96(f(cfg.with_cipher96(Cipher96::Speck).with_key96(key))),
        "aes256" => Block::B128(f(cfg.with_cipher128(Cipher128::Aes).with_key128(key))),
        "speck128_256" => Block::B128(f(cfg.with_cipher128(Cipher128::Speck).with_key128(key))),
        other => panic!("unknown cipher in data: {other}"),
    }
}

#[test]
fn single_blocks_match() {
    let mut n = 0;
    for f in lines("block") {
        let (key, plain, expected) = (hex(f[2]), hex(f[3]), hex(f[4]));
        let got: Vec<u8> = match block_factory(f[1], &key) {
            Block::B64(fac) => {
                let p = Nonce64::from_bytes(plain.clone().try_into().unwrap());
                let c = fac.encrypt64(p).unwrap();
                assert_eq!(fac.decrypt64(c).unwrap(), p);
                c.to_bytes().to_vec()
            }
            Block::B96(fac) => {
                let p = Nonce96::from_bytes(plain.clone().try_into().unwrap());
                let c = fac.encrypt96(p).unwrap();
                assert_eq!(fac.decrypt96(c).unwrap(), p);
                c.to_bytes().to_vec()
            }
            Block::B128(fac) => {
                let p = Nonce128::from_bytes(plain.clone().try_into().unwrap());
                let c = fac.encrypt128(p).unwrap();
                assert_eq!(fac.decrypt128(c).unwrap(), p);
                c.to_bytes().to_vec()
            }
        };
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
        let cfg = FactoryConfig::new().with_base_key(&base);
        let got = match (bits, cipher) {
            ("64", c) => {
                let c64 = match c {
                    "blowfish" => Cipher64::Blowfish,
                    "des3" => Cipher64::Des3,
                    "speck64_128" => Cipher64::Speck,
                    _ => panic!("{c}"),
                };
                let fac = Factory::new(clock(), cfg.with_cipher64(c64)).unwrap();
                fac.encrypt64(Nonce64::from_bytes(plain.try_into().unwrap()))
                    .unwrap()
                    .to_bytes()
                    .to_vec()
            }
            ("96", c) => {
                let c96 = match c {
                    "blowfish" => Cipher96::Blowfish,
                    "des3" => Cipher96::Des3,
                    "speck96_144" => Cipher96::Speck,
                    _ => panic!("{c}"),
                };
                let fac = Factory::new(clock(), cfg.with_cipher96(c96)).unwrap();
                fac.encrypt96(Nonce96::from_bytes(plain.try_into().unwrap()))
                    .unwrap()
                    .to_bytes()
                    .to_vec()
            }
            ("128", c) => {
                let c128 = match c {
                    "aes256" => Cipher128::Aes,
                    "speck128_256" => Cipher128::Speck,
                    _ => panic!("{c}"),
                };
                let fac = Factory::new(clock(), cfg.with_cipher128(c128)).unwrap();
                fac.encrypt128(Nonce128::from_bytes(plain.try_into().unwrap()))
                    .unwrap()
                    .to_bytes()
                    .to_vec()
            }
            other => panic!("unknown size {other:?}"),
        };
        assert_eq!(got, expected, "{bits}-bit {cipher} nonce {}", f[4]);
        n += 1;
    }
    assert_eq!(n, 128);
}
