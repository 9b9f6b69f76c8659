//! Bit layout shared with NoNoncense: `timestamp:42 | machine_id:9 | rest`.
//!
//! | size | timestamp | machine ID | rest |
//! |---|---|---|---|
//! | 64 | 42 | 9 | 13-bit count |
//! | 96 | 42 | 9 | 45-bit count |
//! | 128 | 42 | 9 | 13 zero bits, then a 64-bit count |
//!
//! [`Nonce64::decode`](crate::Nonce64::decode) and its siblings split a nonce into these
//! fields ([`Decoded`]); [`Nonce64::compose`](crate::Nonce64::compose) and its siblings put
//! them back together, checked; [`Nonce64::bounds`](crate::Nonce64::bounds) and its siblings
//! give the smallest and largest nonce of a time range.

use core::fmt;

use crate::{Base, MachineId};

/// Bits of the millisecond timestamp.
pub const TIMESTAMP_BITS: u32 = 42;
/// Bits of the machine ID.
pub const MACHINE_ID_BITS: u32 = MachineId::BITS;
/// The largest timestamp (ms since the epoch) a nonce can carry; about 139 years.
pub const MAX_TIMESTAMP: u64 = (1 << TIMESTAMP_BITS) - 1;
/// The default epoch, 2025-01-01T00:00:00Z, in Unix milliseconds.
pub const DEFAULT_EPOCH_MS: u64 = 1_735_689_600_000;
/// Milliseconds in 365 days: the warning horizon before timestamp overflow.
pub const OVERFLOW_WARNING_MS: u64 = 365 * 24 * 3600 * 1000;

/// Bits of the 64-bit counter/sortable nonce's count.
pub(crate) const COUNT64_BITS: u32 = 13;
pub(crate) const COUNT64_MASK: u64 = (1 << COUNT64_BITS) - 1;
/// Bits of the 96-bit counter nonce's count.
pub(crate) const COUNT96_BITS: u32 = 45;
pub(crate) const COUNT96_MASK: u64 = (1 << COUNT96_BITS) - 1;
/// Bits of the 128-bit nonce's count (below 13 zero bits).
pub(crate) const COUNT128_BITS: u32 = 64;
/// Bits of the count in the sortable state word: no sortable nonce of this crate's factories
/// carries a larger count, whatever its size.
pub(crate) const SORTABLE_COUNT_BITS: u32 = 22;
pub(crate) const SORTABLE_COUNT_MASK: u64 = (1 << SORTABLE_COUNT_BITS) - 1;

/// The fields of a nonce, as [`Nonce64::decode`](crate::Nonce64::decode),
/// [`Nonce96::decode`](crate::Nonce96::decode) and
/// [`Nonce128::decode`](crate::Nonce128::decode) read them from its bits.
///
/// Every value of a size decodes: the fields are what the bits say, whoever made them. Only a
/// plain nonce's fields mean anything, so decrypt an encrypted nonce first (with the
/// factory's key: [`Factory::decrypt64`](crate::Factory::decrypt64) and its siblings); a
/// ciphertext decodes to noise. A 96-bit nonce encrypted with Blowfish or 3DES is a 64-bit
/// nonce and 32 zero bits: decrypted, decode its first 8 bytes as a
/// [`Nonce64`](crate::Nonce64).
///
/// The fields compose back into the nonce ([`Nonce64::compose`](crate::Nonce64::compose) and
/// its siblings), except a 128-bit value's 13 bits between the machine ID and the count, which
/// every nonce of the layout has as zero: decoding ignores them and composing writes zeros.
///
/// ```
/// use nonce_core::{Base, DEFAULT_EPOCH_MS, MachineId, Nonce64, Nonce96};
///
/// let n = Nonce64::from_u64(0x03be_4cb5_0000_2000);
/// let d = n.decode(DEFAULT_EPOCH_MS);
/// assert_eq!(d.bits, 64);
/// assert_eq!(d.timestamp_ms, 64_310_400_000); // since the epoch
/// assert_eq!(d.unix_ms, 1_800_000_000_000); // 2027-01-15T08:00:00Z
/// assert_eq!((d.machine_id.get(), d.count), (1, 0));
/// // Counter and sortable 64-bit nonces share one layout: the bits do not tell which.
/// assert_eq!(d.kind, None);
/// assert_eq!(Nonce64::compose(d.timestamp_ms, d.machine_id, d.count), Ok(n));
///
/// // A 96-bit count past what a sortable nonce carries: a counter nonce.
/// let id = MachineId::new(7).unwrap();
/// let counter = Nonce96::compose(5, id, 1 << 30).unwrap();
/// assert_eq!(counter.decode(DEFAULT_EPOCH_MS).kind, Some(Base::Counter));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decoded {
    /// Size in bits: 64, 96 or 128.
    pub bits: u16,
    /// Milliseconds since the epoch the nonce was made with (0 to [`MAX_TIMESTAMP`]).
    pub timestamp_ms: u64,
    /// Milliseconds since the Unix epoch: `timestamp_ms` plus the epoch given to `decode`
    /// (saturating at `u64::MAX` for an epoch that large).
    pub unix_ms: u64,
    /// The machine ID.
    pub machine_id: MachineId,
    /// The count field: 13 bits (64), 45 bits (96) or 64 bits (128).
    pub count: u64,
    /// The kind of base nonce, where the bits tell it; `None` where they do not.
    ///
    /// Counter and sortable nonces of one size share one layout, so the bits never show a
    /// nonce to be sortable. They show a counter nonce in one case: a 96 or 128-bit count of
    /// 2^22 or more, which no sortable nonce of this crate's factories carries (a sortable
    /// count that would pass 2^22 - 1 moves on to the next millisecond instead). So this is
    /// `Some(Base::Counter)` for those, and `None` for every 64-bit nonce and every other 96
    /// or 128-bit one. It speaks of plain nonces from this crate's factories: a sortable
    /// nonce of another implementation of the layout may count further, and a ciphertext
    /// (not decrypted) decodes to a meaningless kind like its other fields.
    pub kind: Option<Base>,
}

/// The kind the count of a 96 or 128-bit nonce shows (see [`Decoded::kind`]).
const fn kind_of_wide_count(count: u64) -> Option<Base> {
    if count >> SORTABLE_COUNT_BITS == 0 {
        None
    } else {
        Some(Base::Counter)
    }
}

/// Why fields do not compose into a nonce ([`Nonce64::compose`](crate::Nonce64::compose) and
/// its siblings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ComposeError {
    /// The timestamp does not fit in 42 bits.
    TimestampTooLarge {
        /// The timestamp given, in milliseconds since the epoch.
        timestamp_ms: u64,
    },
    /// The count does not fit the size's count field.
    CountTooWide {
        /// The nonce's size in bits.
        bits: u16,
        /// The count given.
        count: u64,
    },
}

impl fmt::Display for ComposeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TimestampTooLarge { timestamp_ms } => write!(
                f,
                "timestamp {timestamp_ms} ms is past the largest a nonce carries, {MAX_TIMESTAMP} ms after the epoch (42 bits, about 139 years): give a timestamp in 0..={MAX_TIMESTAMP}, counted from the epoch, not from 1970"
            ),
            Self::CountTooWide { bits, count } => {
                let width = count_bits(bits);
                write!(
                    f,
                    "count {count} does not fit the {width}-bit count field of a {bits}-bit nonce: give a count in 0..={}",
                    count_max(width)
                )
            }
        }
    }
}

impl core::error::Error for ComposeError {}

/// The width of the count field of a `bits`-bit nonce (64, 96 or 128).
pub(crate) const fn count_bits(bits: u16) -> u32 {
    match bits {
        64 => COUNT64_BITS,
        96 => COUNT96_BITS,
        _ => COUNT128_BITS,
    }
}

/// The largest count of a field `width` bits wide (at most 64).
pub(crate) const fn count_max(width: u32) -> u64 {
    u64::MAX >> (64 - width)
}

/// Checks fields for a nonce of `bits` bits: the timestamp in 42 bits, the count in its
/// field.
pub(crate) const fn check_fields(
    bits: u16,
    timestamp_ms: u64,
    count: u64,
) -> Result<(), ComposeError> {
    if timestamp_ms > MAX_TIMESTAMP {
        return Err(ComposeError::TimestampTooLarge { timestamp_ms });
    }
    if count > count_max(count_bits(bits)) {
        return Err(ComposeError::CountTooWide { bits, count });
    }
    Ok(())
}

#[inline]
pub(crate) const fn pack64(ts: u64, id: u16, count: u64) -> u64 {
    (ts << 22) | ((id as u64) << COUNT64_BITS) | count
}

#[inline]
pub(crate) const fn pack96(ts: u64, id: u16, count: u64) -> u128 {
    ((ts as u128) << 54) | ((id as u128) << COUNT96_BITS) | count as u128
}

#[inline]
pub(crate) const fn pack128(ts: u64, id: u16, count: u64) -> u128 {
    ((ts as u128) << 86) | ((id as u128) << 77) | count as u128
}

// The masks below keep every narrowing exact.
#[allow(clippy::cast_possible_truncation)]
pub(crate) const fn decode64(v: u64, epoch_ms: u64) -> Decoded {
    let ts = v >> 22;
    Decoded {
        bits: 64,
        timestamp_ms: ts,
        unix_ms: ts.saturating_add(epoch_ms),
        machine_id: MachineId::from_low_bits(v >> COUNT64_BITS),
        count: v & COUNT64_MASK,
        kind: None,
    }
}

#[allow(clippy::cast_possible_truncation)]
pub(crate) const fn decode96(v: u128, epoch_ms: u64) -> Decoded {
    let ts = (v >> 54) as u64 & MAX_TIMESTAMP;
    let count = v as u64 & COUNT96_MASK;
    Decoded {
        bits: 96,
        timestamp_ms: ts,
        unix_ms: ts.saturating_add(epoch_ms),
        machine_id: MachineId::from_low_bits((v >> COUNT96_BITS) as u64),
        count,
        kind: kind_of_wide_count(count),
    }
}

#[allow(clippy::cast_possible_truncation)]
pub(crate) const fn decode128(v: u128, epoch_ms: u64) -> Decoded {
    let ts = (v >> 86) as u64 & MAX_TIMESTAMP;
    let count = v as u64;
    Decoded {
        bits: 128,
        timestamp_ms: ts,
        unix_ms: ts.saturating_add(epoch_ms),
        machine_id: MachineId::from_low_bits((v >> 77) as u64),
        count,
        kind: kind_of_wide_count(count),
    }
}
