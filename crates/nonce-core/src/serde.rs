//! serde forms of nonces beside their own (hex strings in human-readable formats, raw bytes
//! otherwise).

/// 64-bit nonces as JavaScript can hold them: written as a decimal string, read from a decimal
/// string or an integer.
///
/// A JavaScript number is a double: it holds integers exactly only up to 2^53
/// (`Number.MAX_SAFE_INTEGER`, 9,007,199,254,740,991). A 64-bit nonce is an integer up to
/// 2^64 - 1, and every one made after the first 24 days or so from the epoch passes 2^53 (its
/// timestamp fills the top 42 bits), so a nonce written as a JSON number reaches a JavaScript
/// client rounded to another value, silently: `JSON.parse("1152921504606846977")` gives
/// `1152921504606846976`. Written as a string it arrives intact, and `BigInt(s)` makes it a
/// number again. This mode writes the integer's decimal digits as a string, the form of
/// `format=int` in `nononce serve` and of `nononce gen --format int`.
///
/// Reading takes what this mode writes, a string of decimal digits, and a JSON number from a
/// writer that used numbers (exact from serde_json up to 2^64 - 1; a number with a fraction or
/// exponent, or a negative one, is refused). Any other string is refused, hex and base64url
/// included: one 16-digit hex nonce in 1,850 is made only of the digits 0-9 and would read as
/// another value, so a field that held [`Nonce64`]'s own form keeps it, and a field moves to
/// this mode with its data converted, not read both ways. Formats that are not human-readable
/// (bincode, postcard) keep the 8 raw bytes either way.
///
/// ```
/// use nonce_core::Nonce64;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Order {
///     #[serde(with = "nonce_core::serde::js_safe")]
///     id: Nonce64,
///     #[serde(with = "nonce_core::serde::js_safe::option", default)]
///     parent: Option<Nonce64>,
/// }
///
/// let order = Order { id: Nonce64::from_u64(0x1c00_0000_0000_00ff), parent: None };
/// let json = serde_json::to_string(&order).unwrap();
/// assert_eq!(json, r#"{"id":"2017612633061982463","parent":null}"#);
/// // As a JSON number, JavaScript would read 2017612633061982500.
///
/// // The decimal string and the number read; hex, base64url and fractions do not.
/// for id in ["2017612633061982463", r#""2017612633061982463""#] {
///     let read: Order = serde_json::from_str(&format!(r#"{{"id":{id}}}"#)).unwrap();
///     assert_eq!(read.id, order.id, "{id}");
/// }
/// for id in [r#""1c000000000000ff""#, r#""HAAAAAAAAP8""#, "1.5"] {
///     assert!(serde_json::from_str::<Order>(&format!(r#"{{"id":{id}}}"#)).is_err(), "{id}");
/// }
/// ```
///
/// [`Nonce64`]: crate::Nonce64
pub mod js_safe {
    use core::fmt;

    use ::serde::de::{self, Visitor};
    use ::serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::Nonce64;

    /// Writes `nonce` as its decimal integer in a string (raw bytes in formats that are not
    /// human-readable).
    ///
    /// # Errors
    /// Those of the serializer.
    pub fn serialize<S: Serializer>(nonce: &Nonce64, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(&nonce.to_u64())
        } else {
            nonce.serialize(s)
        }
    }

    /// Reads a nonce from a decimal string or an integer (raw bytes in formats that are not
    /// human-readable).
    ///
    /// # Errors
    /// When the value is none of those, or does not fit in 64 bits.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Nonce64, D::Error> {
        if d.is_human_readable() {
            d.deserialize_any(JsSafeVisitor)
        } else {
            Nonce64::deserialize(d)
        }
    }

    struct JsSafeVisitor;

    impl Visitor<'_> for JsSafeVisitor {
        type Value = Nonce64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a 64-bit nonce as a string of decimal digits (or an integer)")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Nonce64, E> {
            Ok(Nonce64::from_u64(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Nonce64, E> {
            u64::try_from(v).map(Nonce64::from_u64).map_err(|_| {
                E::custom(format_args!(
                    "a nonce is not negative, and {v} is: send the nonce's decimal string"
                ))
            })
        }

        fn visit_u128<E: de::Error>(self, v: u128) -> Result<Nonce64, E> {
            u64::try_from(v)
                .map(Nonce64::from_u64)
                .map_err(|_| E::custom(format_args!("{v} does not fit in a 64-bit nonce")))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Nonce64, E> {
            Err(E::custom(format_args!(
                "{v} is not an exact integer (a number with a fraction or exponent, or past 64 bits): send the nonce's decimal string"
            )))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Nonce64, E> {
            if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
                return v.parse().map(Nonce64::from_u64).map_err(|_| {
                    E::custom(format_args!(
                        "decimal {v} is larger than a 64-bit nonce (at most 18446744073709551615)"
                    ))
                });
            }
            Err(E::custom(format_args!(
                "{v:?} is not a 64-bit nonce's decimal string: this field is written with \
                 `js_safe`, which reads only decimal digits (hex and base64url are refused, as \
                 a hex nonce of digits alone would read as another value); convert the data \
                 to decimal, or read the field without `js_safe`"
            )))
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Nonce64, E> {
            <[u8; 8]>::try_from(v)
                .map(Nonce64::from_bytes)
                .map_err(|_| E::invalid_length(v.len(), &self))
        }
    }

    /// A [`Nonce64`] in this form, for where `with` does not reach: the items of a `Vec` or a
    /// map, or a value serialized on its own.
    ///
    /// ```
    /// use nonce_core::Nonce64;
    /// use nonce_core::serde::js_safe::JsSafe;
    ///
    /// let batch: Vec<JsSafe> = serde_json::from_str(r#"["2017612633061982463", 5]"#).unwrap();
    /// assert_eq!(batch[0].0, Nonce64::from_u64(0x1c00_0000_0000_00ff));
    /// assert_eq!(serde_json::to_string(&batch).unwrap(), r#"["2017612633061982463","5"]"#);
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct JsSafe(pub Nonce64);

    impl From<Nonce64> for JsSafe {
        fn from(nonce: Nonce64) -> Self {
            Self(nonce)
        }
    }

    impl From<JsSafe> for Nonce64 {
        fn from(nonce: JsSafe) -> Self {
            nonce.0
        }
    }

    impl Serialize for JsSafe {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            serialize(&self.0, s)
        }
    }

    impl<'de> Deserialize<'de> for JsSafe {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            deserialize(d).map(Self)
        }
    }

    /// [`js_safe`](super::js_safe) for `Option<Nonce64>`: `None` is `null`. With
    /// `#[serde(default)]` a missing field reads as `None` too.
    pub mod option {
        use ::serde::{Deserialize, Deserializer, Serialize, Serializer};

        use super::JsSafe;
        use crate::Nonce64;

        /// Writes `Some` as [`js_safe::serialize`](super::serialize) does, `None` as none.
        ///
        /// # Errors
        /// Those of the serializer.
        pub fn serialize<S: Serializer>(nonce: &Option<Nonce64>, s: S) -> Result<S::Ok, S::Error> {
            nonce.map(JsSafe).serialize(s)
        }

        /// Reads none as `None`, anything else as
        /// [`js_safe::deserialize`](super::deserialize) does.
        ///
        /// # Errors
        /// When the value is not a nonce in a form `js_safe` reads.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Nonce64>, D::Error> {
            Ok(Option::<JsSafe>::deserialize(d)?.map(|n| n.0))
        }
    }
}
