use core::fmt;
use core::str::FromStr;

use base64ct::{Base64UrlUnpadded, Encoding};

use crate::MachineId;
use crate::layout::{self, ComposeError, Decoded};

/// A nonce of `N` bytes, kept as the big-endian bytes NoNoncense produces.
///
/// Displayed (and parsed) as lowercase hex; [`base64url`](Nonce::base64url) gives the
/// unpadded base64url form, which [`FromStr`] also accepts.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
// Aligned, so that in a returned `Result` the bytes start on a word, not just past the tag:
// there the compiler copied them with reads that straddled its own writes, each waiting for
// them to reach the cache (a facade sortable128 call: 6.6 ns before, 2.5 ns after). The sizes
// stay 8, 12 and 16 bytes (checked below).
#[repr(align(4))]
pub struct Nonce<const N: usize>([u8; N]);

const _: () =
    assert!(size_of::<Nonce64>() == 8 && size_of::<Nonce96>() == 12 && size_of::<Nonce128>() == 16);

/// A 64-bit nonce.
pub type Nonce64 = Nonce<8>;
/// A 96-bit nonce.
pub type Nonce96 = Nonce<12>;
/// A 128-bit nonce.
pub type Nonce128 = Nonce<16>;

impl<const N: usize> Nonce<N> {
    /// The size in bits.
    #[allow(clippy::cast_possible_truncation)] // N is 8, 12 or 16
    pub const BITS: u16 = (N * 8) as u16;

    /// Wraps big-endian bytes.
    pub const fn from_bytes(bytes: [u8; N]) -> Self {
        Self(bytes)
    }

    /// The big-endian bytes.
    pub const fn to_bytes(self) -> [u8; N] {
        self.0
    }

    /// The big-endian bytes, borrowed.
    pub const fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }

    /// The unpadded base64url form (11, 16 or 22 characters), without allocating.
    pub fn base64url(&self) -> impl fmt::Display + '_ {
        Base64Display(&self.0)
    }
}

impl Nonce64 {
    /// From the nonce's integer value.
    pub const fn from_u64(value: u64) -> Self {
        Self(value.to_be_bytes())
    }

    /// The nonce's integer value.
    pub const fn to_u64(self) -> u64 {
        u64::from_be_bytes(self.0)
    }

    /// Splits the nonce into its fields; `epoch_ms` is the factory's epoch in Unix ms. See
    /// [`Decoded`].
    pub const fn decode(self, epoch_ms: u64) -> Decoded {
        layout::decode64(self.to_u64(), epoch_ms)
    }

    /// The nonce of these fields: the inverse of [`decode`](Self::decode).
    ///
    /// # Errors
    /// [`ComposeError`] when `timestamp_ms` (since the epoch) passes
    /// [`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP) or `count` passes 13 bits (8191).
    ///
    /// ```
    /// use nonce_core::{DEFAULT_EPOCH_MS, MachineId, Nonce64};
    ///
    /// let id = MachineId::new(1).unwrap();
    /// let n = Nonce64::compose(64_310_400_000, id, 0).unwrap();
    /// assert_eq!(n.to_string(), "03be4cb500002000");
    /// assert_eq!(n.decode(DEFAULT_EPOCH_MS).unix_ms, 1_800_000_000_000);
    /// assert!(Nonce64::compose(0, id, 8192).is_err()); // a 13-bit count
    /// ```
    pub const fn compose(
        timestamp_ms: u64,
        machine_id: MachineId,
        count: u64,
    ) -> Result<Self, ComposeError> {
        match layout::check_fields(64, timestamp_ms, count) {
            Ok(()) => Ok(Self::from_u64(layout::pack64(
                timestamp_ms,
                machine_id.get(),
                count,
            ))),
            Err(e) => Err(e),
        }
    }
}

impl Nonce96 {
    /// From the nonce's integer value; `None` if it does not fit in 96 bits.
    pub const fn from_u128(value: u128) -> Option<Self> {
        if value >> 96 != 0 {
            return None;
        }
        // In the two pieces `to_u128` reads, 4 high bytes and 8 low: a nonce that goes
        // through memory (a returned `Result` does) is then read back as it was written. Split
        // otherwise (8 bytes and 4), the 8-byte read straddled both writes and waited for them
        // to reach the cache, which tripled the cost of a counter96 call (8 ns against 2.5).
        #[allow(clippy::cast_possible_truncation)] // the two halves, on purpose
        let ([a, b, c, d], [e, f, g, h, i, j, k, l]) = (
            ((value >> 64) as u32).to_be_bytes(),
            (value as u64).to_be_bytes(),
        );
        Some(Self([a, b, c, d, e, f, g, h, i, j, k, l]))
    }

    /// The nonce's integer value.
    pub const fn to_u128(self) -> u128 {
        let [a, b, c, d, low @ ..] = self.0;
        ((u32::from_be_bytes([a, b, c, d]) as u128) << 64) | u64::from_be_bytes(low) as u128
    }

    /// Splits the nonce into its fields; `epoch_ms` is the factory's epoch in Unix ms. See
    /// [`Decoded`].
    pub const fn decode(self, epoch_ms: u64) -> Decoded {
        layout::decode96(self.to_u128(), epoch_ms)
    }

    /// The nonce of these fields: the inverse of [`decode`](Self::decode).
    ///
    /// # Errors
    /// [`ComposeError`] when `timestamp_ms` (since the epoch) passes
    /// [`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP) or `count` passes 45 bits.
    pub const fn compose(
        timestamp_ms: u64,
        machine_id: MachineId,
        count: u64,
    ) -> Result<Self, ComposeError> {
        match layout::check_fields(96, timestamp_ms, count) {
            // Checked, so 96 bits: `from_u128` gives `Some`.
            Ok(()) => {
                match Self::from_u128(layout::pack96(timestamp_ms, machine_id.get(), count)) {
                    Some(n) => Ok(n),
                    None => Err(ComposeError::TimestampTooLarge { timestamp_ms }),
                }
            }
            Err(e) => Err(e),
        }
    }
}

impl Nonce128 {
    /// From the nonce's integer value.
    pub const fn from_u128(value: u128) -> Self {
        Self(value.to_be_bytes())
    }

    /// The nonce's integer value.
    pub const fn to_u128(self) -> u128 {
        u128::from_be_bytes(self.0)
    }

    /// Splits the nonce into its fields; `epoch_ms` is the factory's epoch in Unix ms. See
    /// [`Decoded`] (the 13 bits between the machine ID and the count, zero in every nonce of
    /// the layout, are no field).
    pub const fn decode(self, epoch_ms: u64) -> Decoded {
        layout::decode128(self.to_u128(), epoch_ms)
    }

    /// The nonce of these fields: the inverse of [`decode`](Self::decode), with the 13 bits
    /// between the machine ID and the count zero.
    ///
    /// # Errors
    /// [`ComposeError`] when `timestamp_ms` (since the epoch) passes
    /// [`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP); every `u64` is a 128-bit count.
    pub const fn compose(
        timestamp_ms: u64,
        machine_id: MachineId,
        count: u64,
    ) -> Result<Self, ComposeError> {
        match layout::check_fields(128, timestamp_ms, count) {
            Ok(()) => Ok(Self::from_u128(layout::pack128(
                timestamp_ms,
                machine_id.get(),
                count,
            ))),
            Err(e) => Err(e),
        }
    }
}

impl From<u64> for Nonce64 {
    fn from(value: u64) -> Self {
        Self::from_u64(value)
    }
}

impl From<Nonce64> for u64 {
    fn from(n: Nonce64) -> Self {
        n.to_u64()
    }
}

impl From<u128> for Nonce128 {
    fn from(value: u128) -> Self {
        Self::from_u128(value)
    }
}

impl From<Nonce128> for u128 {
    fn from(n: Nonce128) -> Self {
        n.to_u128()
    }
}

impl From<Nonce96> for u128 {
    fn from(n: Nonce96) -> Self {
        n.to_u128()
    }
}

impl TryFrom<u128> for Nonce96 {
    type Error = ParseNonceError;
    fn try_from(value: u128) -> Result<Self, Self::Error> {
        Self::from_u128(value).ok_or(ParseNonceError::TooLarge)
    }
}

impl<const N: usize> From<[u8; N]> for Nonce<N> {
    fn from(bytes: [u8; N]) -> Self {
        Self(bytes)
    }
}

impl<const N: usize> From<Nonce<N>> for [u8; N] {
    fn from(n: Nonce<N>) -> Self {
        n.0
    }
}

impl<const N: usize> AsRef<[u8]> for Nonce<N> {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl<const N: usize> fmt::Display for Nonce<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(self, f)
    }
}

impl<const N: usize> fmt::LowerHex for Nonce<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Encoded at once and written in one call: a `{:02x}` per byte through the formatter
        // cost `nononce serve` most of its time in a batch of hex nonces.
        let mut buf = [0u8; 2 * 16];
        match buf.get_mut(..2 * N) {
            Some(out) => match base16ct::lower::encode_str(&self.0, out) {
                Ok(hex) => f.write_str(hex),
                Err(_) => Err(fmt::Error),
            },
            None => self.0.iter().try_for_each(|b| write!(f, "{b:02x}")),
        }
    }
}

impl<const N: usize> fmt::Debug for Nonce<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nonce{}({self:x})", N * 8)
    }
}

impl<const N: usize> FromStr for Nonce<N> {
    type Err = ParseNonceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; N];
        let (decoded, invalid) = if s.len() == N * 2 {
            let hex = base16ct::mixed::decode(s, &mut out);
            (hex.map(|d| d.len()).ok(), ParseNonceError::InvalidHex)
        } else if s.len() == Base64UrlUnpadded::encoded_len(&out) {
            let base64 = Base64UrlUnpadded::decode(s, &mut out);
            (base64.map(|d| d.len()).ok(), ParseNonceError::InvalidBase64)
        } else {
            let bits = Self::BITS;
            return Err(ParseNonceError::Length { bits, len: s.len() });
        };
        match decoded {
            Some(len) if len == N => Ok(Self(out)),
            _ => Err(invalid),
        }
    }
}

struct Base64Display<'a>(&'a [u8]);

impl fmt::Display for Base64Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 24];
        let s = Base64UrlUnpadded::encode(self.0, &mut buf).map_err(|_| fmt::Error)?;
        f.write_str(s)
    }
}

/// Why a string or integer is not a nonce of the requested size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseNonceError {
    /// Neither the hex nor the base64url length for this size.
    Length {
        /// The requested size in bits.
        bits: u16,
        /// The length given.
        len: usize,
    },
    /// Right length for hex, but not hex digits.
    InvalidHex,
    /// Right length for base64url, but not unpadded base64url.
    InvalidBase64,
    /// The integer does not fit in 96 bits.
    TooLarge,
}

impl fmt::Display for ParseNonceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Length { bits, len } => {
                let bytes = usize::from(bits / 8);
                write!(
                    f,
                    "a {bits}-bit nonce is {} hex digits or {} base64url characters, not {len} characters",
                    bytes * 2,
                    (bytes * 4).div_ceil(3)
                )
            }
            Self::InvalidHex => f.write_str("nonce is not valid hex"),
            Self::InvalidBase64 => f.write_str("nonce is not valid unpadded base64url"),
            Self::TooLarge => f.write_str("value does not fit in 96 bits"),
        }
    }
}

impl core::error::Error for ParseNonceError {}

#[cfg(feature = "serde")]
mod serde_impl {
    use super::Nonce;
    use core::fmt;
    use serde::de::{self, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Hex strings in human-readable formats, raw bytes otherwise.
    impl<const N: usize> Serialize for Nonce<N> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            if s.is_human_readable() {
                s.collect_str(self)
            } else {
                s.serialize_bytes(&self.0)
            }
        }
    }

    impl<'de, const N: usize> Deserialize<'de> for Nonce<N> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<const N: usize>;
            impl<const N: usize> Visitor<'_> for V<N> {
                type Value = Nonce<N>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    write!(f, "a {}-bit nonce as hex, base64url or bytes", N * 8)
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                    v.parse().map_err(E::custom)
                }
                fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                    <[u8; N]>::try_from(v)
                        .map(Nonce)
                        .map_err(|_| E::invalid_length(v.len(), &self))
                }
            }
            if d.is_human_readable() {
                d.deserialize_str(V::<N>)
            } else {
                d.deserialize_bytes(V::<N>)
            }
        }
    }
}
