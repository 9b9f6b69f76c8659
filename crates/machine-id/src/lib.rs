//! The machine ID: the 9-bit node number every nonce carries, `0..=511`, and the one type
//! nonce factories, lease strategies and the lease manager exchange.
//!
//! A crate of its own, `no_std` and without dependencies, so that the lease contract
//! (`lease-core`) can name it without the nonce ciphers.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use core::fmt;

/// A machine ID: the 9-bit node number embedded in every nonce, `0..=511`.
///
/// The constructor validates the range, so holding a `MachineId` proves it fits the nonce layout.
///
/// ```
/// use machine_id::{InvalidMachineId, MachineId};
///
/// let id = MachineId::new(7).unwrap();
/// assert_eq!((id.get(), id.to_string()), (7, "7".to_owned()));
/// assert_eq!(MachineId::new(MachineId::COUNT), Err(InvalidMachineId(512)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MachineId(u16);

impl MachineId {
    /// The width of the field every nonce carries the ID in.
    pub const BITS: u32 = 9;
    /// The largest machine ID, 511.
    pub const MAX: u16 = (1 << Self::BITS) - 1;
    /// The number of distinct machine IDs, 512.
    pub const COUNT: u16 = Self::MAX + 1;

    /// Validates `id` and wraps it.
    ///
    /// # Errors
    /// [`InvalidMachineId`] when `id > 511`.
    pub const fn new(id: u16) -> Result<Self, InvalidMachineId> {
        if id <= Self::MAX {
            Ok(Self(id))
        } else {
            Err(InvalidMachineId(id))
        }
    }

    /// The ID in the low 9 bits of `bits`, the rest ignored: for fields a nonce layout already
    /// confines to 9 bits, where no value can be out of range.
    #[inline]
    #[must_use]
    pub const fn from_low_bits(bits: u64) -> Self {
        // The mask keeps the narrowing exact; `From` is not available in a const fn.
        #[allow(clippy::cast_possible_truncation, clippy::cast_lossless)]
        Self((bits & Self::MAX as u64) as u16)
    }

    /// The ID as a number in `0..=511`.
    #[must_use]
    pub const fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for MachineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<MachineId> for u16 {
    fn from(id: MachineId) -> Self {
        id.0
    }
}

impl TryFrom<u16> for MachineId {
    type Error = InvalidMachineId;
    fn try_from(id: u16) -> Result<Self, Self::Error> {
        Self::new(id)
    }
}

/// A machine ID outside `0..=511`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidMachineId(pub u16);

impl fmt::Display for InvalidMachineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "machine id {} is out of range: use 0..={}",
            self.0,
            MachineId::MAX
        )
    }
}

impl core::error::Error for InvalidMachineId {}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;

    #[test]
    fn the_range_is_the_nine_bit_field() {
        assert_eq!((MachineId::MAX, MachineId::COUNT), (511, 512));
        assert_eq!(MachineId::new(511).map(MachineId::get), Ok(511));
        assert_eq!(MachineId::new(512), Err(InvalidMachineId(512)));
        assert_eq!(
            MachineId::try_from(u16::MAX),
            Err(InvalidMachineId(u16::MAX))
        );
        assert_eq!(u16::from(MachineId::new(3).unwrap()), 3);
        assert_eq!(MachineId::from_low_bits(512 + 5).get(), 5);
        assert_eq!(MachineId::from_low_bits(u64::MAX).get(), 511);
    }

    #[test]
    fn an_invalid_id_says_what_to_use() {
        assert_eq!(
            InvalidMachineId(600).to_string(),
            "machine id 600 is out of range: use 0..=511"
        );
    }
}
