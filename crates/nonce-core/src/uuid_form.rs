//! 128-bit nonces as [`uuid::Uuid`]s (feature `uuid`): byte for byte, and as RFC 9562
//! version 8 UUIDs.
//!
//! [`From`] converts either way byte for byte: any 128-bit nonce, encrypted ones too, fits a
//! `UUID` column that way, but its version and variant bits are whatever the nonce holds, so
//! it is generally not a valid RFC 9562 UUID.
//!
//! Where a valid one is required, [`Nonce128::to_uuid_v8`] lays out a counter or sortable
//! nonce as an RFC 9562 version 8 UUID; its documentation has the layout.

use core::fmt;

use ::uuid::Uuid;

use crate::clock::Clock;
use crate::error::Error;
use crate::factory::Factory;
use crate::handle::Handle;
use crate::nonce::Nonce128;

/// The nonce's timestamp and the machine ID's high 6 bits: in place in both forms.
const KEPT: u128 = !0 << 80;
/// The bits counter and sortable nonces leave zero.
const NONCE_ZERO_BITS: u128 = ((1 << 13) - 1) << 64;
/// The machine ID's low 3 bits: at 79..77 in the nonce, 75..73 in the UUID.
const ID_LOW: u128 = 0b111;
/// The count's high 2 bits: at 63..62 in the nonce, 65..64 in the UUID.
const COUNT_HIGH: u128 = 0b11;
/// The count's low 62 bits, in place in both forms.
const COUNT_LOW: u128 = (1 << 62) - 1;
/// RFC 9562's version 8, at bits 79..76.
const VERSION: u128 = 8;
/// RFC 9562's variant, `0b10` at bits 63..62.
const VARIANT: u128 = 0b10;
/// The UUID's bits that no nonce field uses: zero in every one made from a nonce.
const UUID_ZERO_BITS: u128 = 0b111_1111 << 66;

/// The version 8 UUID of the nonce `v`, whose zero bits are ignored.
const fn to_v8(v: u128) -> u128 {
    (v & KEPT)
        | (VERSION << 76)
        | (((v >> 77) & ID_LOW) << 73)
        | (((v >> 62) & COUNT_HIGH) << 64)
        | (VARIANT << 62)
        | (v & COUNT_LOW)
}

/// The nonce of the version 8 UUID `u`, whose version, variant and zero bits are ignored.
const fn from_v8(u: u128) -> u128 {
    (u & KEPT) | (((u >> 73) & ID_LOW) << 77) | (((u >> 64) & COUNT_HIGH) << 62) | (u & COUNT_LOW)
}

/// Why a 128-bit value has no counterpart in the other form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UuidV8Error {
    /// The nonce has bits set among the 13 (76..64) that counter and sortable nonces leave
    /// zero: an encrypted nonce, or a value not made by a factory.
    NotCounterOrSortable,
    /// The UUID is not version 8.
    Version {
        /// The UUID's version number.
        found: u8,
    },
    /// The UUID's variant is not RFC 9562's.
    Variant,
    /// A version 8 UUID with bits set that no nonce field uses: made by something else.
    NotFromNonce,
}

impl fmt::Display for UuidV8Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NotCounterOrSortable => f.write_str(
                "only counter and sortable 128-bit nonces have a version 8 UUID form, and this one has bits 64-76 set (an encrypted nonce?): store it byte for byte with `Uuid::from` instead",
            ),
            Self::Version { found } => write!(
                f,
                "the UUID is version {found}, not 8: it was not made from a nonce with `to_uuid_v8` (read a byte-for-byte UUID with `Nonce128::from`)"
            ),
            Self::Variant => f.write_str(
                "the UUID's variant is not RFC 9562's: it was not made from a nonce with `to_uuid_v8` (read a byte-for-byte UUID with `Nonce128::from`)",
            ),
            Self::NotFromNonce => f.write_str(
                "the version 8 UUID has bits 66-72 set, which no nonce's UUID has: it was made by something else",
            ),
        }
    }
}

impl core::error::Error for UuidV8Error {}

impl Nonce128 {
    /// The nonce as a valid RFC 9562 version 8 UUID, every field kept;
    /// [`from_uuid_v8`](Self::from_uuid_v8) reverses it. UUIDs of sortable nonces compare (and
    /// sort in a database's `UUID` column) in the nonces' order.
    ///
    /// Version 8 is RFC 9562's custom version (§5.8); its layout keeps the nonce's own
    /// timestamp, machine ID and count, moved apart to make room for the version and variant
    /// bits. Not version 7, which starts with the Unix time in ms: these start with the
    /// factory's own 42-bit timestamp since its epoch. The form is this crate's own, **not
    /// NoNoncense-compatible**: NoNoncense has no such form and its nodes do not read it.
    ///
    /// ```text
    ///  bits     nonce (counter, sortable)      version 8 UUID
    ///  127..86  timestamp (42)                 timestamp (42)
    ///   85..80  machine ID, high 6             machine ID, high 6
    ///   79..76  machine ID, low 3; 0           version: 0b1000
    ///   75..73  0                              machine ID, low 3
    ///   72..66  0                              0 (reserved)
    ///   65..64  0                              count, high 2
    ///   63..62  count, high 2                  variant: 0b10
    ///   61..0   count, low 62                  count, low 62
    /// ```
    ///
    /// Counter and sortable 128-bit nonces leave 13 bits (76..64) zero; the version and variant
    /// take 6 of them and nothing else is lost. So every field keeps its full width, the
    /// conversion is one-to-one and reversible, and the UUIDs
    /// compare in the nonces' order: those of one machine ID are as unique as its nonces, and
    /// those of two machine IDs never meet. The count keeps its 64 bits, so the form holds
    /// everything a factory issues, a sortable factory's 2^22 = 4,194,304 nonces a millisecond
    /// per machine ID (beyond that it borrows the next millisecond) as much as a counter
    /// factory's 64-bit count:
    ///
    /// ```
    /// use nonce_core::{MachineId, Nonce128};
    ///
    /// // The last count of a millisecond at the largest timestamp, on the largest machine ID.
    /// let fields = |t: u128, id: u128, count: u128| (t << 86) | (id << 77) | count;
    /// let last = Nonce128::from_u128(fields(nonce_core::MAX_TIMESTAMP.into(), 511, u64::MAX.into()));
    /// let uuid = last.to_uuid_v8()?;
    /// assert_eq!(uuid.get_version_num(), 8);
    /// assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
    /// assert_eq!(Nonce128::from_uuid_v8(uuid)?, last);
    /// let d = Nonce128::from_uuid_v8(uuid)?.decode(0);
    /// assert_eq!((d.machine_id, d.count), (MachineId::new(511)?, u64::MAX));
    ///
    /// // Sortable nonces: 4,194,304 distinct counts per millisecond and machine ID, in order.
    /// let per_ms = 1u128 << 22;
    /// let a = Nonce128::from_u128(fields(7, 3, per_ms - 2)).to_uuid_v8()?;
    /// let b = Nonce128::from_u128(fields(7, 3, per_ms - 1)).to_uuid_v8()?;
    /// assert!(a < b);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Keep one form per column: a version 8 UUID is also a 128-bit value that some other nonce
    /// could hold byte for byte.
    ///
    /// [`Factory::sortable_uuid_v8`] and [`Handle::sortable_uuid_v8`] make them directly.
    ///
    /// # Errors
    ///
    /// [`UuidV8Error::NotCounterOrSortable`] for a nonce with bits set among the 13 that
    /// counter and sortable nonces leave zero (an encrypted nonce): its fields are
    /// ciphertext, and it has no version 8 form. A nonce made by `counter128` or
    /// `sortable128` never fails.
    pub const fn to_uuid_v8(self) -> Result<Uuid, UuidV8Error> {
        let v = self.to_u128();
        if v & NONCE_ZERO_BITS != 0 {
            return Err(UuidV8Error::NotCounterOrSortable);
        }
        Ok(Uuid::from_u128(to_v8(v)))
    }

    /// The nonce whose [`to_uuid_v8`](Self::to_uuid_v8) form `uuid` is.
    ///
    /// # Errors
    ///
    /// [`UuidV8Error::Version`], [`UuidV8Error::Variant`] or [`UuidV8Error::NotFromNonce`]
    /// for a UUID that no nonce's version 8 form is.
    pub const fn from_uuid_v8(uuid: Uuid) -> Result<Self, UuidV8Error> {
        let u = uuid.as_u128();
        let version = (u >> 76) & 0xf;
        if version != VERSION {
            #[allow(clippy::cast_possible_truncation)] // masked to 4 bits
            return Err(UuidV8Error::Version {
                found: version as u8,
            });
        }
        if (u >> 62) & 0b11 != VARIANT {
            return Err(UuidV8Error::Variant);
        }
        if u & UUID_ZERO_BITS != 0 {
            return Err(UuidV8Error::NotFromNonce);
        }
        Ok(Self::from_u128(from_v8(u)))
    }
}

/// Byte for byte: the UUID's version and variant bits are whatever the nonce holds.
impl From<Nonce128> for Uuid {
    fn from(n: Nonce128) -> Self {
        Uuid::from_bytes(n.to_bytes())
    }
}

/// Byte for byte: the inverse of `Uuid::from(nonce)`.
impl From<Uuid> for Nonce128 {
    fn from(u: Uuid) -> Self {
        Nonce128::from_bytes(u.into_bytes())
    }
}

impl<C: Clock> Factory<C> {
    /// A [`sortable128`](Self::sortable128) nonce as its version 8 UUID
    /// ([`Nonce128::to_uuid_v8`]): a valid RFC 9562 UUID, unique as the nonce is, in creation
    /// order. It draws on the sortable 128-bit nonces, so it claims the 128-bit size for
    /// sortable nonces as `sortable128` does.
    ///
    /// # Errors
    ///
    /// Those of `sortable128`.
    pub fn sortable_uuid_v8(&self) -> Result<Uuid, Error> {
        self.sortable128().map(sortable_to_v8)
    }
}

impl<C: Clock> Handle<'_, C> {
    /// A [`sortable128`](Self::sortable128) nonce as its version 8 UUID, as
    /// [`Factory::sortable_uuid_v8`].
    ///
    /// # Errors
    ///
    /// Those of `sortable128`.
    pub fn sortable_uuid_v8(&self) -> Result<Uuid, Error> {
        self.sortable128().map(sortable_to_v8)
    }
}

/// The UUID of a sortable nonce, whose zero bits are zero.
fn sortable_to_v8(n: Nonce128) -> Uuid {
    Uuid::from_u128(to_v8(n.to_u128()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::pack128;

    #[test]
    fn the_fields_move_and_come_back() {
        let n = pack128(crate::MAX_TIMESTAMP, 0b1_0110_1101, u64::MAX);
        let u = to_v8(n);
        assert_eq!(
            u >> 80,
            n >> 80,
            "timestamp and high machine ID bits in place"
        );
        assert_eq!((u >> 76) & 0xf, 8);
        assert_eq!((u >> 73) & 0b111, 0b101);
        assert_eq!(u & UUID_ZERO_BITS, 0);
        assert_eq!((u >> 62) & 0b11, 0b10);
        assert_eq!(from_v8(u), n);
    }

    #[test]
    fn values_that_are_not_the_other_form_are_refused() {
        let encrypted = Nonce128::from_u128(1 << 70);
        assert_eq!(
            encrypted.to_uuid_v8(),
            Err(UuidV8Error::NotCounterOrSortable)
        );
        let v7 = Uuid::from_u128((7 << 76) | (0b10 << 62));
        assert_eq!(
            Nonce128::from_uuid_v8(v7),
            Err(UuidV8Error::Version { found: 7 })
        );
        let ncs = Uuid::from_u128(8 << 76);
        assert_eq!(Nonce128::from_uuid_v8(ncs), Err(UuidV8Error::Variant));
        let other = Uuid::from_u128((8 << 76) | (0b10 << 62) | (1 << 66));
        assert_eq!(
            Nonce128::from_uuid_v8(other),
            Err(UuidV8Error::NotFromNonce)
        );
    }
}
