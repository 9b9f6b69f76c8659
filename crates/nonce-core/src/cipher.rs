//! Cipher choice per nonce size, key derivation, and the keyed engines.
//!
//! A block cipher whose block equals the nonce size is a permutation, so encrypting unique
//! nonces yields unique nonces. Keys are derived exactly as NoNoncense does:
//! PBKDF2-HMAC-SHA256(base key, salt, 1000 iterations, key length).

use core::fmt;
use core::str::FromStr;

#[allow(unused_imports)]
use cipher::consts::{U8, U12, U16};
#[allow(unused_imports)]
use cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use zeroize::Zeroizing;

use crate::error::FactoryConfigError;

/// Minimum base key length in bytes.
pub const MIN_BASE_KEY_LEN: usize = 32;
const PBKDF2_ROUNDS: u32 = 1000;

macro_rules! cipher_enum {
    ($(#[$m:meta])* $name:ident, $bits:literal, default $default:ident, $( $variant:ident => ($str:literal, $feature:literal, $salt:literal, $key_len:literal) ),+ $(,)?) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $(
                #[doc = concat!("`", $str, "` (cargo feature `", $feature, "`; derived with salt `", $salt, "`, ", stringify!($key_len), "-byte key)")]
                #[cfg_attr(any(), allow(unused))]
                $variant,
            )+
        }

        impl $name {
            /// Every cipher of this size, whether compiled in or not.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The name used in configuration and on the command line.
            pub const fn name(self) -> &'static str {
                match self { $(Self::$variant => $str),+ }
            }

            /// The PBKDF2 salt NoNoncense uses for this cipher and size.
            pub const fn salt(self) -> &'static str {
                match self { $(Self::$variant => $salt),+ }
            }

            /// The key length in bytes.
            pub const fn key_len(self) -> usize {
                match self { $(Self::$variant => $key_len),+ }
            }

            /// The cargo feature that compiles this cipher in.
            pub const fn feature(self) -> &'static str {
                match self { $(Self::$variant => $feature),+ }
            }

            /// The name, PBKDF2 salt and key length its keys are checked and derived with.
            const fn key_spec(self) -> (&'static str, &'static str, usize) {
                (self.name(), self.salt(), self.key_len())
            }

            /// Whether this build includes the cipher.
            pub const fn is_available(self) -> bool {
                match self { $(Self::$variant => cfg!(feature = $feature)),+ }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::$default
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = UnknownCipher;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($str => Ok(Self::$variant),)+
                    _ => Err(UnknownCipher { bits: $bits }),
                }
            }
        }
    };
}

cipher_enum!(
    /// Ciphers for 64-bit encrypted nonces (64-bit blocks).
    Cipher64, 64, default Blowfish,
    Blowfish => ("blowfish", "blowfish", "blowfish_64", 16),
    Des3 => ("des3", "des3", "des3_64", 24),
    Speck => ("speck", "speck", "speck64_128", 16),
);

cipher_enum!(
    /// Ciphers for 96-bit encrypted nonces. Blowfish and 3DES have 64-bit blocks: their 96-bit
    /// nonce is an encrypted 64-bit nonce followed by 32 zero bits, as in NoNoncense.
    /// Speck96/144 encrypts all 96 bits.
    Cipher96, 96, default Blowfish,
    Blowfish => ("blowfish", "blowfish", "blowfish_96", 16),
    Des3 => ("des3", "des3", "des3_96", 24),
    Speck => ("speck", "speck", "speck96_144", 18),
);

cipher_enum!(
    /// Ciphers for 128-bit encrypted nonces.
    Cipher128, 128, default Aes,
    Aes => ("aes", "aes", "aes", 32),
    Speck => ("speck", "speck", "speck128_256", 32),
);

impl Cipher96 {
    /// Whether this cipher's block is 64 bits, making the 96-bit nonce an encrypted 64-bit nonce
    /// with a 32-bit zero tail.
    pub const fn has_64bit_block(self) -> bool {
        matches!(self, Self::Blowfish | Self::Des3)
    }
}

/// A cipher name that is not known for the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownCipher {
    /// Nonce size in bits.
    pub bits: u16,
}

impl fmt::Display for UnknownCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = match self.bits {
            64 | 96 => "blowfish, des3 or speck",
            _ => "aes or speck",
        };
        write!(f, "unknown {}-bit cipher: use {names}", self.bits)
    }
}

impl core::error::Error for UnknownCipher {}

/// Derives a per-cipher key from a base key as NoNoncense does.
///
/// `out` must be the cipher's key length. Fails if the base key is shorter than 32 bytes.
pub fn derive_key(base_key: &[u8], salt: &str, out: &mut [u8]) -> Result<(), FactoryConfigError> {
    if base_key.len() < MIN_BASE_KEY_LEN {
        return Err(FactoryConfigError::BaseKeyTooShort {
            len: base_key.len(),
        });
    }
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(base_key, salt.as_bytes(), PBKDF2_ROUNDS, out);
    Ok(())
}

/// The engine of one size, keyed by `new` with the explicit key or one derived from the base
/// key; `None` if neither is given.
fn keyed<E>(
    bits: u16,
    (cipher, salt, len): (&'static str, &str, usize),
    (explicit, base): (Option<&[u8]>, Option<&[u8]>),
    new: impl FnOnce(&[u8]) -> Result<E, FactoryConfigError>,
) -> Result<Option<E>, FactoryConfigError> {
    let mut buf = Zeroizing::new([0u8; 32]);
    match (explicit, base) {
        (Some(k), _) if k.len() != len => {
            return Err(FactoryConfigError::KeyLength {
                bits,
                cipher,
                expected: len,
                actual: k.len(),
            });
        }
        (Some(k), _) => buf[..len].copy_from_slice(k),
        (None, Some(b)) => derive_key(b, salt, &mut buf[..len])?,
        (None, None) => return Ok(None),
    }
    new(&buf[..len]).map(Some)
}

fn unavailable(cipher: &'static str, feature: &'static str) -> FactoryConfigError {
    FactoryConfigError::CipherUnavailable { cipher, feature }
}

/// `encrypt` and `decrypt` of one block of `$n` bytes (`$size`) for a block engine, each
/// variant (built in with `$feature`) holding its cipher.
macro_rules! block_ops {
    ($n:literal, $size:ty, $($feature:literal => $variant:ident),+) => {
        block_ops!(@op encrypt encrypt_block, $n, $size, $($feature => $variant),+);
        block_ops!(@op decrypt decrypt_block, $n, $size, $($feature => $variant),+);
    };
    (@op $name:ident $method:ident, $n:literal, $size:ty, $($f:literal => $v:ident),+) => {
        #[inline]
        #[allow(unused_mut, unused_variables, unreachable_code)]
        pub(crate) fn $name(&self, bytes: [u8; $n]) -> [u8; $n] {
            let mut b: Array<u8, $size> = Array::from(bytes);
            match self {
                Self::Unavailable(never) => match *never {},
                $(#[cfg(feature = $f)] Self::$v(c) => c.$method(&mut b),)+
            }
            b.into()
        }
    };
}

/// A keyed 64-bit-block engine. Variants hold key schedules inline (no heap): Blowfish's is
/// 4 KiB, and a factory holds at most one engine per size.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Engine64 {
    /// Keeps the enum inhabited-in-type when every cipher is compiled out.
    #[allow(dead_code)]
    Unavailable(core::convert::Infallible),
    #[cfg(feature = "blowfish")]
    Blowfish(blowfish::Blowfish),
    #[cfg(feature = "des3")]
    Des3(des::TdesEde3),
    #[cfg(feature = "speck")]
    Speck(speck_cipher::Speck64_128),
}

impl Engine64 {
    #[allow(unused_variables)]
    fn new(cipher: Cipher64, key: &[u8]) -> Result<Self, FactoryConfigError> {
        match cipher {
            #[cfg(feature = "blowfish")]
            Cipher64::Blowfish => Ok(Self::Blowfish(
                blowfish::Blowfish::new_from_slice(key).expect("16-byte key"),
            )),
            #[cfg(feature = "des3")]
            Cipher64::Des3 => Ok(Self::Des3(
                des::TdesEde3::new_from_slice(key).expect("24-byte key"),
            )),
            #[cfg(feature = "speck")]
            Cipher64::Speck => Ok(Self::Speck(
                speck_cipher::Speck64_128::new_from_slice(key).expect("16-byte key"),
            )),
            #[allow(unreachable_patterns)]
            other => Err(unavailable(other.name(), other.feature())),
        }
    }

    block_ops!(8, U8, "blowfish" => Blowfish, "des3" => Des3, "speck" => Speck);
}

/// A keyed engine for 96-bit nonces: a 64-bit-block cipher (zero tail) or Speck96/144.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Engine96 {
    Block64(Engine64),
    #[cfg(feature = "speck")]
    Speck(speck_cipher::Speck96_144),
}

impl Engine96 {
    pub(crate) fn has_64bit_block(&self) -> bool {
        matches!(self, Self::Block64(_))
    }

    /// Encrypts a 96-bit block (Speck96) or the first 8 bytes of it, keeping a zero tail.
    #[inline]
    pub(crate) fn encrypt(&self, bytes: [u8; 12]) -> [u8; 12] {
        match self {
            Self::Block64(e) => zero_tail(e.encrypt(bytes[..8].try_into().expect("8 bytes"))),
            #[cfg(feature = "speck")]
            Self::Speck(c) => {
                let mut b: Array<u8, U12> = Array::from(bytes);
                c.encrypt_block(&mut b);
                b.into()
            }
        }
    }

    #[inline]
    pub(crate) fn decrypt(&self, bytes: [u8; 12]) -> [u8; 12] {
        match self {
            Self::Block64(e) => zero_tail(e.decrypt(bytes[..8].try_into().expect("8 bytes"))),
            #[cfg(feature = "speck")]
            Self::Speck(c) => {
                let mut b: Array<u8, U12> = Array::from(bytes);
                c.decrypt_block(&mut b);
                b.into()
            }
        }
    }
}

/// A 64-bit block followed by 32 zero bits: the 96-bit nonce of a 64-bit-block cipher.
#[inline]
pub(crate) fn zero_tail(head: [u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..8].copy_from_slice(&head);
    out
}

/// A keyed 128-bit-block engine.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Engine128 {
    /// Keeps the enum inhabited-in-type when every cipher is compiled out.
    #[allow(dead_code)]
    Unavailable(core::convert::Infallible),
    #[cfg(feature = "aes")]
    Aes(aes::Aes256),
    #[cfg(feature = "speck")]
    Speck(speck_cipher::Speck128_256),
}

impl Engine128 {
    block_ops!(16, U16, "aes" => Aes, "speck" => Speck);

    /// Encrypts `out.len()` consecutive nonces starting at `first` (the low 64 bits count up,
    /// wrapping within them, as the 128-bit count does).
    #[allow(unused_variables)]
    pub(crate) fn encrypt_run(&self, first: [u8; 16], out: &mut [[u8; 16]]) {
        match self {
            Self::Unavailable(never) => match *never {},
            #[cfg(feature = "aes")]
            Self::Aes(c) => {
                // A run of consecutive counter nonces, encrypted, is the CTR keystream whose IV
                // is the first nonce; `ctr` pipelines it across AES-NI lanes.
                use cipher::{InnerIvInit, StreamCipher};
                let core = ctr::CtrCore::<&aes::Aes256, ctr::flavors::Ctr64BE>::inner_iv_init(
                    c,
                    &Array::from(first),
                );
                let mut ctr = ctr::Ctr64BE::from_core(core);
                for chunk in out.chunks_mut(64) {
                    for b in chunk.iter_mut() {
                        *b = [0u8; 16];
                    }
                    ctr.apply_keystream(chunk.as_flattened_mut());
                }
            }
            #[cfg(feature = "speck")]
            Self::Speck(_) => {
                let hi = u64::from_be_bytes(first[..8].try_into().expect("8 bytes"));
                let lo = u64::from_be_bytes(first[8..].try_into().expect("8 bytes"));
                for (i, slot) in (0u64..).zip(out.iter_mut()) {
                    let mut b = [0u8; 16];
                    b[..8].copy_from_slice(&hi.to_be_bytes());
                    b[8..].copy_from_slice(&lo.wrapping_add(i).to_be_bytes());
                    *slot = self.encrypt(b);
                }
            }
        }
    }
}

/// The keyed engines of one factory. Key schedules are zeroized on drop by the cipher crates.
pub(crate) struct Engines {
    pub(crate) e64: Option<Engine64>,
    pub(crate) e96: Option<Engine96>,
    pub(crate) e128: Option<Engine128>,
}

impl Engines {
    /// Keys each size's engine with its own key, or one derived from `base`, for its cipher.
    pub(crate) fn new(
        base: Option<&[u8]>,
        (c64, key64): (Cipher64, Option<&[u8]>),
        (c96, key96): (Cipher96, Option<&[u8]>),
        (c128, key128): (Cipher128, Option<&[u8]>),
    ) -> Result<Self, FactoryConfigError> {
        if let Some(b) = base
            && b.len() < MIN_BASE_KEY_LEN
        {
            return Err(FactoryConfigError::BaseKeyTooShort { len: b.len() });
        }
        Ok(Self {
            e64: keyed(64, c64.key_spec(), (key64, base), |k| Engine64::new(c64, k))?,
            e96: keyed(96, c96.key_spec(), (key96, base), |k| {
                Self::engine96(c96, k)
            })?,
            e128: keyed(128, c128.key_spec(), (key128, base), |k| {
                Self::engine128(c128, k)
            })?,
        })
    }

    fn engine96(c: Cipher96, key: &[u8]) -> Result<Engine96, FactoryConfigError> {
        match c {
            // The same 64-bit-block engines; only the key derivation (salt) differs.
            Cipher96::Blowfish => Ok(Engine96::Block64(Engine64::new(Cipher64::Blowfish, key)?)),
            Cipher96::Des3 => Ok(Engine96::Block64(Engine64::new(Cipher64::Des3, key)?)),
            #[cfg(feature = "speck")]
            Cipher96::Speck => Ok(Engine96::Speck(
                speck_cipher::Speck96_144::new_from_slice(key).expect("18-byte key"),
            )),
            #[allow(unreachable_patterns)]
            other => Err(unavailable(other.name(), other.feature())),
        }
    }

    #[allow(unused_variables)]
    fn engine128(c: Cipher128, key: &[u8]) -> Result<Engine128, FactoryConfigError> {
        match c {
            #[cfg(feature = "aes")]
            Cipher128::Aes => Ok(Engine128::Aes(
                aes::Aes256::new_from_slice(key).expect("32-byte key"),
            )),
            #[cfg(feature = "speck")]
            Cipher128::Speck => Ok(Engine128::Speck(
                speck_cipher::Speck128_256::new_from_slice(key).expect("32-byte key"),
            )),
            #[allow(unreachable_patterns)]
            other => Err(unavailable(other.name(), other.feature())),
        }
    }
}
