//! Nonces of any size on the command line, and their times.
//!
//! How `decode` reads a nonce when `--input` is `auto` (the default):
//!
//! | text | read as |
//! |---|---|
//! | 16, 24 or 32 characters | hex: 64, 96 or 128 bits; any other character is an error |
//! | 11 or 22 characters | unpadded base64url: 64 or 128 bits |
//! | any other number of decimal digits | an integer: 64 bits if it fits, else 96, else 128 |
//!
//! So a hex typo is refused, never read as something else. A 96-bit base64url nonce is 16
//! characters, like 64-bit hex: read it with `--input base64url`. An integer of 11, 16, 22,
//! 24 or 32 digits needs `--input int`; `--bits` sets an integer's size.

use clap::ValueEnum;
use nononce::nonce::ParseNonceError;
use nononce::{Base, Decoded, Factory, FactoryClock, Nonce64, Nonce96, Nonce128};

/// Which kind of nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum Kind {
    /// Counter nonces: the fastest; the timestamp is the counter's, not the creation time.
    Counter,
    /// Sortable nonces: the timestamp is the creation time.
    Sortable,
    /// Counter nonces encrypted with the base key's derived keys: they reveal nothing.
    Encrypted,
}

impl Kind {
    /// Every kind, in the order messages list them.
    pub const ALL: [Self; 3] = [Self::Counter, Self::Sortable, Self::Encrypted];

    /// The kind's name, as options and URLs write it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Sortable => "sortable",
            Self::Encrypted => "encrypted",
        }
    }
}

/// How a nonce is written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Lowercase hex: 16, 24 or 32 digits.
    Hex,
    /// Unpadded base64url: 11, 16 or 22 characters.
    Base64url,
    /// The big-endian integer in decimal.
    Int,
}

/// The next nonce of `kind` and `bits` (64, 96 or 128) from `factory`. Counter calls take
/// their values from the factory's per-thread blocks, so every thread calling this scales.
pub fn next(
    factory: &Factory<FactoryClock>,
    kind: Kind,
    bits: u16,
) -> Result<AnyNonce, nononce::nonce::Error> {
    Ok(match (kind, bits) {
        (Kind::Counter, 64) => AnyNonce::N64(factory.counter64()?),
        (Kind::Counter, 96) => AnyNonce::N96(factory.counter96()?),
        (Kind::Counter, _) => AnyNonce::N128(factory.counter128()?),
        (Kind::Sortable, 64) => AnyNonce::N64(factory.sortable64()?),
        (Kind::Sortable, 96) => AnyNonce::N96(factory.sortable96()?),
        (Kind::Sortable, _) => AnyNonce::N128(factory.sortable128()?),
        (Kind::Encrypted, 64) => AnyNonce::N64(factory.encrypted64(Base::Counter)?),
        (Kind::Encrypted, 96) => AnyNonce::N96(factory.encrypted96(Base::Counter)?),
        (Kind::Encrypted, _) => AnyNonce::N128(factory.encrypted128(Base::Counter)?),
    })
}

/// The input as quoted in an error: escaped onto one line, and cut short.
pub fn shown(text: &str) -> String {
    escaped(text, 40)
}

/// `text` escaped onto one line, cut short after `n` characters.
pub fn escaped(text: &str, n: usize) -> String {
    let mut out: String = text.chars().take(n).flat_map(char::escape_debug).collect();
    if text.chars().nth(n).is_some() {
        out.push_str("...");
    }
    out
}

/// How a nonce is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Input {
    /// By its length and characters (the rule under "How the nonce is read").
    Auto,
    /// 16, 24 or 32 hex digits.
    Hex,
    /// 11, 16 or 22 unpadded base64url characters.
    Base64url,
    /// A decimal integer (as `gen --format int` prints).
    Int,
}

/// A nonce whose size is known only from its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyNonce {
    /// 64 bits.
    N64(Nonce64),
    /// 96 bits.
    N96(Nonce96),
    /// 128 bits.
    N128(Nonce128),
}

const FORMS: &str = "a nonce is 16, 24 or 32 hex digits, 11 or 22 base64url characters (16 with --input base64url), or a decimal integer";

impl AnyNonce {
    /// Reads `text` as `input` says; `bits`, when given, is the size it must have.
    pub fn parse(text: &str, input: Input, bits: Option<u16>) -> Result<Self, String> {
        let text = text.trim();
        let parsed = match input {
            Input::Auto => Self::auto(text, bits),
            Input::Hex => Self::hex_text(text),
            Input::Base64url => Self::base64url_text(text),
            Input::Int => Self::int_text(text, bits),
        };
        let nonce = parsed.map_err(|e| format!("malformed nonce \"{}\": {e}", shown(text)))?;
        match bits {
            Some(bits) if bits != nonce.bits() => Err(format!(
                "malformed nonce \"{}\": it is a {}-bit nonce, not {bits} bits (--bits)",
                shown(text),
                nonce.bits()
            )),
            _ => Ok(nonce),
        }
    }

    fn auto(text: &str, bits: Option<u16>) -> Result<Self, String> {
        let len = text.chars().count();
        let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        match len {
            16 | 24 | 32 => {
                if let Some((i, c)) = text
                    .chars()
                    .enumerate()
                    .find(|(_, c)| !c.is_ascii_hexdigit())
                {
                    let hint = if len == 16 {
                        "; a 96-bit base64url nonce needs --input base64url"
                    } else {
                        ""
                    };
                    return Err(format!(
                        "{len} characters are read as {}-bit hex, and {:?} (character {}) is not a hex digit{hint}",
                        len * 4,
                        c,
                        i + 1
                    ));
                }
                Self::hex_text(text)
            }
            11 | 22 => Self::base64url_text(text),
            _ if digits => Self::int_text(text, bits),
            _ => Err(format!("\"{}\" is {len} characters: {FORMS}", shown(text))),
        }
    }

    fn hex_text(text: &str) -> Result<Self, String> {
        let parsed = match text.len() {
            16 => text.parse().map(Self::N64),
            24 => text.parse().map(Self::N96),
            32 => text.parse().map(Self::N128),
            _ => Err(ParseNonceError::InvalidHex),
        };
        parsed.map_err(|_| "expected 16, 24 or 32 hex digits".to_owned())
    }

    // The nonce types read 11, 16 and 22 characters as base64url (and no other alphabet).
    fn base64url_text(text: &str) -> Result<Self, String> {
        let parsed = match text.len() {
            11 => text.parse().map(Self::N64),
            16 => text.parse().map(Self::N96),
            22 => text.parse().map(Self::N128),
            len => {
                return Err(format!(
                    "{len} characters: base64url nonces are 11, 16 or 22"
                ));
            }
        };
        parsed.map_err(|_| "nonce is not valid unpadded base64url".to_owned())
    }

    fn int_text(text: &str, bits: Option<u16>) -> Result<Self, String> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err("expected a decimal integer".into());
        }
        let value: u128 = text
            .parse()
            .map_err(|_| "the integer is larger than 128 bits".to_owned())?;
        let bits = bits.unwrap_or(if u64::try_from(value).is_ok() {
            64
        } else if value >> 96 == 0 {
            96
        } else {
            128
        });
        let too_large = || format!("the integer is larger than {bits} bits");
        Ok(match bits {
            64 => Self::N64(Nonce64::from_u64(
                u64::try_from(value).map_err(|_| too_large())?,
            )),
            96 => Self::N96(Nonce96::from_u128(value).ok_or_else(too_large)?),
            _ => Self::N128(Nonce128::from_u128(value)),
        })
    }

    /// Parses hex only (16, 24 or 32 digits).
    pub fn parse_hex(text: &str) -> Result<Self, String> {
        let text = text.trim();
        Self::hex_text(text).map_err(|e| format!("malformed nonce \"{}\": {e}", shown(text)))
    }

    /// The size in bits.
    pub const fn bits(self) -> u16 {
        match self {
            Self::N64(_) => 64,
            Self::N96(_) => 96,
            Self::N128(_) => 128,
        }
    }

    /// The fields, for the given epoch.
    pub fn decode(self, epoch_ms: u64) -> Decoded {
        match self {
            Self::N64(n) => n.decode(epoch_ms),
            Self::N96(n) => n.decode(epoch_ms),
            Self::N128(n) => n.decode(epoch_ms),
        }
    }

    /// Lowercase hex.
    pub fn hex(self) -> String {
        match self {
            Self::N64(n) => n.to_string(),
            Self::N96(n) => n.to_string(),
            Self::N128(n) => n.to_string(),
        }
    }

    /// Unpadded base64url.
    pub fn base64url(self) -> String {
        match self {
            Self::N64(n) => n.base64url().to_string(),
            Self::N96(n) => n.base64url().to_string(),
            Self::N128(n) => n.base64url().to_string(),
        }
    }

    /// Written out in `format`.
    pub fn format(self, format: Format) -> String {
        match format {
            Format::Hex => self.hex(),
            Format::Base64url => self.base64url(),
            Format::Int => self.int(),
        }
    }

    /// The big-endian integer in decimal.
    pub fn int(self) -> String {
        match self {
            Self::N64(n) => n.to_u64().to_string(),
            Self::N96(n) => n.to_u128().to_string(),
            Self::N128(n) => n.to_u128().to_string(),
        }
    }
}

/// `--bits`: a nonce size.
pub fn parse_bits(s: &str) -> Result<u16, String> {
    match s {
        "64" => Ok(64),
        "96" => Ok(96),
        "128" => Ok(128),
        _ => Err(format!("`{s}` is not a nonce size: use 64, 96 or 128")),
    }
}

/// A nonce's fields as JSON: as `nononce decode --format json` prints them and `serve` answers.
pub fn decoded_json(d: &Decoded) -> serde_json::Value {
    serde_json::json!({
        "bits": d.bits,
        "timestamp_ms": d.timestamp_ms,
        "unix_ms": d.unix_ms,
        "time": rfc3339(d.unix_ms),
        "machine_id": d.machine_id.get(),
        "count": d.count,
    })
}

/// Unix milliseconds as RFC 3339 in UTC (`2025-01-01T00:00:00.001Z`); `None` past year 9999,
/// which RFC 3339 cannot write.
pub fn rfc3339(unix_ms: u64) -> Option<String> {
    let days = unix_ms / 86_400_000;
    let ms_of_day = unix_ms % 86_400_000;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm), unsigned as the
    // timestamps are never before 1970.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    if year > 9999 {
        return None;
    }
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(1_735_689_600_001).unwrap(),
            "2025-01-01T00:00:00.001Z"
        );
        assert_eq!(
            rfc3339(951_782_400_000).unwrap(),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(4_107_542_399_999).unwrap(),
            "2100-02-28T23:59:59.999Z"
        );
        assert_eq!(
            rfc3339(253_402_300_799_999).unwrap(),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(rfc3339(253_402_300_800_000), None);
        assert_eq!(rfc3339(u64::MAX), None);
    }

    #[test]
    fn the_auto_rule() {
        let p = |t: &str| AnyNonce::parse(t, Input::Auto, None).map(AnyNonce::bits);
        assert_eq!(p("0123456789abcdef"), Ok(64));
        assert_eq!(p("0123456789012345"), Ok(64)); // all digits, 16 long: hex
        assert_eq!(p(&"0".repeat(24)), Ok(96));
        assert_eq!(p(&"A".repeat(32)), Ok(128));
        assert_eq!(p("A75MtQAAIAA"), Ok(64));
        assert!(
            p("03be4cb50000200g")
                .unwrap_err()
                .contains("not a hex digit")
        );
        assert_eq!(p("12345"), Ok(64));
        assert_eq!(p(&u64::MAX.to_string()), Ok(64));
        assert_eq!(p(&(u128::from(u64::MAX) + 1).to_string()), Ok(96));
        assert_eq!(p(&u128::MAX.to_string()), Ok(128));
        assert!(p("340282366920938463463374607431768211456").is_err());
        assert!(p("xyz").unwrap_err().contains("3 characters"));
    }
}
