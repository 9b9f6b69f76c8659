//! sqlx column types for the nonce types (features `sqlx-postgres`, `sqlx-mysql`,
//! `sqlx-sqlite`).
//!
//! | nonce | PostgreSQL | MySQL / MariaDB | SQLite |
//! |---|---|---|---|
//! | [`Nonce64`] | `BIGINT` (bits as `i64`) | `BIGINT UNSIGNED` | `INTEGER` (bits as `i64`) |
//! | [`Nonce96`] | `BYTEA` | `BINARY(12)` | `BLOB` |
//! | [`Nonce128`] | `BYTEA`; read from `UUID` too | `BINARY(16)` | `BLOB` |
//!
//! The 96- and 128-bit nonces are stored as their big-endian bytes, so the databases' byte
//! order (`memcmp`) is the nonces' own order, and `ORDER BY` on the column sorts sortable
//! nonces by creation. MySQL's `BIGINT UNSIGNED` holds the 64-bit value as it is, in order.
//!
//! PostgreSQL and SQLite have no unsigned 64-bit integer: a [`Nonce64`] is stored as the
//! `i64` of the same bits, and read back unchanged, so every value round-trips. Their order
//! differs from the nonces' only for values with the top bit set, which sort below all
//! others. A sortable or counter 64-bit nonce has its top bit set once its timestamp is
//! 2^41 ms after the factory's epoch (about 69.7 years; from 2094-09-07 on the default epoch,
//! 2025-01-01): up to then `ORDER BY` a `BIGINT` column sorts them by creation, and from then
//! on the newer nonces sort first. Encrypted 64-bit nonces have the top bit set half the time,
//! but have no order to keep.
//!
//! sqlx gives a Rust type one SQL type per database to bind as. [`Nonce128`] binds as
//! `BYTEA`, the type that holds every size alike; it also decodes from a `UUID` column (both
//! are the 16 bytes on the wire). To write to a `UUID` column, bind a [`uuid::Uuid`] (this
//! crate's `uuid` feature, with sqlx's own `uuid` feature): `Uuid::from(nonce)` for the
//! nonce's bytes as they are, or `nonce.to_uuid_v8()` for a valid RFC 9562 UUID (see
//! [`Nonce128::to_uuid_v8`]). A `UUID` column compares bytes in order too, so it sorts either
//! form by creation.
//!
//! A value of another length than the nonce's is refused with a decode error that names both
//! lengths ([`ColumnLengthError`]); nothing panics on what a column holds.
//!
//! [`uuid::Uuid`]: https://docs.rs/uuid/1/uuid/struct.Uuid.html
//! [`Nonce128::to_uuid_v8`]: https://docs.rs/nonce-core/latest/nonce_core/type.Nonce128.html#method.to_uuid_v8

extern crate std;

use core::fmt;
use std::boxed::Box;

use sqlx::error::BoxDynError;

use crate::nonce::Nonce;
#[cfg(doc)]
use crate::nonce::{Nonce64, Nonce96, Nonce128};

/// A column value of another length than the nonce it was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnLengthError {
    /// The size of the nonce asked for, in bits.
    pub bits: u16,
    /// The length of the value the column held, in bytes.
    pub len: usize,
}

impl fmt::Display for ColumnLengthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {}-bit nonce is stored as {} bytes, but the column value has {}: read the column as the nonce size it was written with",
            self.bits,
            self.bits / 8,
            self.len
        )
    }
}

impl std::error::Error for ColumnLengthError {}

/// The nonce whose big-endian bytes a column value holds.
fn from_column_bytes<const N: usize>(bytes: &[u8]) -> Result<Nonce<N>, BoxDynError> {
    match <[u8; N]>::try_from(bytes) {
        Ok(bytes) => Ok(Nonce::from_bytes(bytes)),
        Err(_) => Err(Box::new(ColumnLengthError {
            bits: Nonce::<N>::BITS,
            len: bytes.len(),
        })),
    }
}

/// The 64-bit value as the signed integer of the same bits, for databases without an unsigned
/// 64-bit column type.
#[cfg(any(test, feature = "sqlx-postgres", feature = "sqlx-sqlite"))]
#[allow(clippy::cast_possible_wrap)] // the bit-cast is the point
const fn to_signed_bits(n: Nonce<8>) -> i64 {
    n.to_u64() as i64
}

/// The inverse of [`to_signed_bits`].
#[cfg(any(test, feature = "sqlx-postgres", feature = "sqlx-sqlite"))]
#[allow(clippy::cast_sign_loss)] // the bit-cast is the point
const fn from_signed_bits(v: i64) -> Nonce<8> {
    Nonce::<8>::from_u64(v as u64)
}

/// `Type`, `Encode` and `Decode` of `$db` for the 64-bit nonce as the integer type `$int`
/// (converted by `$to` and `$from`), and for the 96- and 128-bit nonces as bytes.
macro_rules! columns {
    ($db:ty, $int:ty, $to:expr, $from:expr) => {
        impl sqlx::Type<$db> for Nonce<8> {
            fn type_info() -> <$db as sqlx::Database>::TypeInfo {
                <$int as sqlx::Type<$db>>::type_info()
            }
            fn compatible(ty: &<$db as sqlx::Database>::TypeInfo) -> bool {
                <$int as sqlx::Type<$db>>::compatible(ty)
            }
        }

        impl sqlx::Encode<'_, $db> for Nonce<8> {
            fn encode_by_ref(
                &self,
                buf: &mut <$db as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, BoxDynError> {
                sqlx::Encode::<$db>::encode($to(*self), buf)
            }
        }

        impl sqlx::Decode<'_, $db> for Nonce<8> {
            fn decode(value: <$db as sqlx::Database>::ValueRef<'_>) -> Result<Self, BoxDynError> {
                <$int as sqlx::Decode<$db>>::decode(value).map($from)
            }
        }

        columns!(@bytes $db, 12);
        columns!(@bytes $db, 16);
    };
    (@bytes $db:ty, $n:literal) => {
        impl sqlx::Encode<'_, $db> for Nonce<$n> {
            fn encode_by_ref(
                &self,
                buf: &mut <$db as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, BoxDynError> {
                sqlx::Encode::<$db>::encode(self.as_bytes().as_slice(), buf)
            }
        }
    };
}

/// `Type` and `Decode` for the byte-stored nonces where the database's `[u8]` decoding reads
/// every value the column type can hold.
#[cfg(any(feature = "sqlx-mysql", feature = "sqlx-sqlite"))]
macro_rules! byte_columns {
    ($db:ty, $($n:literal),*) => {$(
        impl sqlx::Type<$db> for Nonce<$n> {
            fn type_info() -> <$db as sqlx::Database>::TypeInfo {
                <[u8] as sqlx::Type<$db>>::type_info()
            }
            fn compatible(ty: &<$db as sqlx::Database>::TypeInfo) -> bool {
                <[u8] as sqlx::Type<$db>>::compatible(ty)
            }
        }

        impl sqlx::Decode<'_, $db> for Nonce<$n> {
            fn decode(value: <$db as sqlx::Database>::ValueRef<'_>) -> Result<Self, BoxDynError> {
                from_column_bytes(<&[u8] as sqlx::Decode<$db>>::decode(value)?)
            }
        }
    )*};
}

#[cfg(feature = "sqlx-postgres")]
mod postgres {
    use super::std::format;
    use super::std::vec::Vec;
    use super::{BoxDynError, Nonce, from_column_bytes, from_signed_bits, to_signed_bits};
    use sqlx::postgres::types::Oid;
    use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef, Postgres};
    use sqlx::{Decode, Type, TypeInfo as _, ValueRef as _};

    /// PostgreSQL's fixed OID of `uuid`.
    const UUID_OID: Oid = Oid(2950);

    columns!(Postgres, i64, to_signed_bits, from_signed_bits);

    /// Whether `ty` is `uuid`.
    fn is_uuid(ty: &PgTypeInfo) -> bool {
        ty.oid() == Some(UUID_OID) || ty.name().eq_ignore_ascii_case("uuid")
    }

    /// The nonce a `BYTEA` (or for 128 bits, `UUID`) value holds, in the binary format of
    /// prepared statements or the text format of simple queries.
    fn decode_bytes<const N: usize>(value: PgValueRef<'_>) -> Result<Nonce<N>, BoxDynError> {
        match value.format() {
            PgValueFormat::Binary => from_column_bytes(value.as_bytes()?),
            PgValueFormat::Text if is_uuid(&value.type_info()) => {
                // `01234567-89ab-cdef-0123-456789abcdef`: the hex digits are the bytes.
                let digits: Vec<u8> = value.as_str()?.bytes().filter(|&b| b != b'-').collect();
                let mut bytes = [0u8; N];
                match base16ct::mixed::decode(&digits, &mut bytes) {
                    Ok(decoded) if decoded.len() == N => Ok(Nonce::from_bytes(bytes)),
                    _ => Err(format!(
                        "the UUID {:?} is not {N} bytes of hex: read it as a 128-bit nonce",
                        value.as_str()?
                    )
                    .into()),
                }
            }
            // `\x0123…`, which sqlx's own `BYTEA` decoding reads.
            PgValueFormat::Text => {
                from_column_bytes(&<Vec<u8> as Decode<Postgres>>::decode(value)?)
            }
        }
    }

    impl Type<Postgres> for Nonce<12> {
        fn type_info() -> PgTypeInfo {
            <[u8] as Type<Postgres>>::type_info()
        }
    }

    impl Decode<'_, Postgres> for Nonce<12> {
        fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
            decode_bytes(value)
        }
    }

    /// Binds as `BYTEA`; reads `BYTEA` and `UUID`.
    impl Type<Postgres> for Nonce<16> {
        fn type_info() -> PgTypeInfo {
            <[u8] as Type<Postgres>>::type_info()
        }
        fn compatible(ty: &PgTypeInfo) -> bool {
            <[u8] as Type<Postgres>>::compatible(ty) || is_uuid(ty)
        }
    }

    impl Decode<'_, Postgres> for Nonce<16> {
        fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
            decode_bytes(value)
        }
    }
}

#[cfg(feature = "sqlx-mysql")]
mod mysql {
    use super::{BoxDynError, Nonce, from_column_bytes};
    use sqlx::mysql::MySql;

    columns!(MySql, u64, Nonce::<8>::to_u64, Nonce::<8>::from_u64);
    byte_columns!(MySql, 12, 16);
}

#[cfg(feature = "sqlx-sqlite")]
mod sqlite {
    use super::{BoxDynError, Nonce, from_column_bytes, from_signed_bits, to_signed_bits};
    use sqlx::sqlite::Sqlite;

    columns!(Sqlite, i64, to_signed_bits, from_signed_bits);
    byte_columns!(Sqlite, 12, 16);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn the_signed_bit_cast_round_trips_every_value() {
        for v in [
            0,
            1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
            0x0123_4567_89ab_cdef,
        ] {
            let n = Nonce::<8>::from_u64(v);
            assert_eq!(from_signed_bits(to_signed_bits(n)), n);
        }
        assert_eq!(to_signed_bits(Nonce::<8>::from_u64(1 << 63)), i64::MIN);
    }

    #[test]
    fn a_value_of_another_length_is_a_clear_error() {
        let err = from_column_bytes::<16>(&[0; 12]).unwrap_err();
        assert_eq!(
            err.downcast_ref::<ColumnLengthError>(),
            Some(&ColumnLengthError { bits: 128, len: 12 })
        );
        assert_eq!(
            err.to_string(),
            "a 128-bit nonce is stored as 16 bytes, but the column value has 12: read the column as the nonce size it was written with"
        );
        assert_eq!(
            from_column_bytes::<12>(&[7; 12]).unwrap(),
            Nonce::from_bytes([7; 12])
        );
    }
}
