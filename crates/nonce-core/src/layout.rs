//! Bit layout shared with NoNoncense: `timestamp:42 | machine_id:9 | rest`.

use crate::MachineId;

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
/// Bits of the count in the sortable state word.
pub(crate) const SORTABLE_COUNT_BITS: u32 = 22;
pub(crate) const SORTABLE_COUNT_MASK: u64 = (1 << SORTABLE_COUNT_BITS) - 1;

/// The fields of a nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decoded {
    /// Size in bits.
    pub bits: u16,
    /// Milliseconds since the factory's epoch.
    pub timestamp_ms: u64,
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// The machine ID.
    pub machine_id: MachineId,
    /// The count field: 13 bits (64), 45 bits (96) or 64 bits (128).
    pub count: u64,
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
    }
}

#[allow(clippy::cast_possible_truncation)]
pub(crate) const fn decode96(v: u128, epoch_ms: u64) -> Decoded {
    let ts = (v >> 54) as u64 & MAX_TIMESTAMP;
    Decoded {
        bits: 96,
        timestamp_ms: ts,
        unix_ms: ts.saturating_add(epoch_ms),
        machine_id: MachineId::from_low_bits((v >> COUNT96_BITS) as u64),
        count: v as u64 & COUNT96_MASK,
    }
}

#[allow(clippy::cast_possible_truncation)]
pub(crate) const fn decode128(v: u128, epoch_ms: u64) -> Decoded {
    let ts = (v >> 86) as u64 & MAX_TIMESTAMP;
    Decoded {
        bits: 128,
        timestamp_ms: ts,
        unix_ms: ts.saturating_add(epoch_ms),
        machine_id: MachineId::from_low_bits((v >> 77) as u64),
        count: v as u64,
    }
}
