//! Nonces of any size on the command line, and their times.
//!
//! How `decode` reads a nonce when `--input` is `auto` (the default): in every form the text is
//! valid in, of the size `--bits` names when given,
//!
//! | form | text |
//! |---|---|
//! | hex | 16, 24 or 32 hex digits (64, 96 or 128 bits), `0x` before them allowed |
//! | base64url | 11, 16 or 22 unpadded base64url characters (64, 96 or 128 bits) |
//! | int | decimal digits: 64 bits if the value fits, else 96, else 128 |
//!
//! One reading is the nonce. Several (16 hex digits are also 16 base64url characters, digits
//! alone also an integer): a reading whose time lies more than a year after now is of no nonce
//! made yet, and is dropped; if one remains it is the nonce, otherwise the text is refused,
//! naming each reading and the `--input` that picks it. Never a guess: a 96-bit base64url nonce
//! made only of hex characters was read as 64-bit hex, and a 16-digit integer as hex, both
//! silently wrong.

use clap::ValueEnum;
use nononce::nonce::Clock;
use nononce::nonce::ParseNonceError;
use nononce::{Base, BootClock, Decoded, Factory, FactoryClock, Nonce64, Nonce96, Nonce128};

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
    /// Every form the text is valid in; refused when two readings could both be the nonce
    /// (the rule under "How the nonce is read").
    Auto,
    /// 16, 24 or 32 hex digits, `0x` before them allowed.
    Hex,
    /// 11, 16 or 22 unpadded base64url characters.
    Base64url,
    /// A decimal integer (as `gen --format int` prints).
    Int,
}

impl Input {
    /// The forms auto mode tries, in the order messages list them.
    const FORMS: [Self; 3] = [Self::Hex, Self::Base64url, Self::Int];

    /// The name `--input` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Hex => "hex",
            Self::Base64url => "base64url",
            Self::Int => "int",
        }
    }
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

const FORMS: &str = "a nonce is 16, 24 or 32 hex digits (0x before them allowed), 11, 16 or 22 base64url characters, or a decimal integer";

/// How far after now a nonce's time may lie and still be that of a nonce made by now: a node's
/// clock may run a little ahead, not a year. Readings of one text in two forms lie decades
/// apart as a rule (a 96-bit base64url nonce read as 64-bit hex: year 2114).
const MADE_BY_NOW_MS: u64 = 365 * 24 * 60 * 60 * 1000;

impl AnyNonce {
    /// Reads `text` as `input` says; `bits`, when given, is the size it must have. Auto mode
    /// tells readings apart by their time on `epoch_ms` (see the module's docs).
    pub fn parse(
        text: &str,
        input: Input,
        bits: Option<u16>,
        epoch_ms: u64,
    ) -> Result<Self, String> {
        let now_ms = BootClock::new().now_ms();
        Self::parse_at(text, input, bits, epoch_ms, now_ms)
    }

    /// [`Self::parse`] at the Unix time `now_ms`.
    fn parse_at(
        text: &str,
        input: Input,
        bits: Option<u16>,
        epoch_ms: u64,
        now_ms: u64,
    ) -> Result<Self, String> {
        let text = text.trim();
        let parsed = match input {
            Input::Auto => Self::auto(text, bits, epoch_ms, now_ms),
            form => Self::read(text, form, bits),
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

    /// `text` read as `form` (hex for `Auto`).
    fn read(text: &str, form: Input, bits: Option<u16>) -> Result<Self, String> {
        match form {
            Input::Auto | Input::Hex => Self::hex_text(text),
            Input::Base64url => Self::base64url_text(text),
            Input::Int => Self::int_text(text, bits),
        }
    }

    fn auto(text: &str, bits: Option<u16>, epoch_ms: u64, now_ms: u64) -> Result<Self, String> {
        let readings: Vec<(Input, Self)> = Input::FORMS
            .into_iter()
            .filter_map(|form| Some((form, Self::read(text, form, bits).ok()?)))
            .collect();
        let sized: Vec<(Input, Self)> = readings
            .iter()
            .copied()
            .filter(|(_, nonce)| bits.is_none_or(|bits| bits == nonce.bits()))
            .collect();
        let latest = now_ms.saturating_add(MADE_BY_NOW_MS);
        let made: Vec<(Input, Self)> = sized
            .iter()
            .copied()
            .filter(|(_, nonce)| nonce.decode(epoch_ms).unix_ms <= latest)
            .collect();
        match (&readings[..], &sized[..], &made[..]) {
            ([], _, _) => Err(unreadable(text, bits)),
            // Of another size than --bits: the caller says so.
            (&[(_, nonce), ..], [], _) => Ok(nonce),
            (_, _, &[(_, nonce)]) => Ok(nonce),
            (_, _, []) => Err(format!(
                "it reads {}, and no nonce of {} is made yet (a typo, or another --epoch-ms?): {} reads it all the same",
                listed(&sized, epoch_ms),
                if sized.len() == 1 {
                    "that time"
                } else {
                    "those times"
                },
                choices(&sized)
            )),
            _ => Err(format!(
                "it reads {}: choose with {}",
                listed(&made, epoch_ms),
                choices(&made)
            )),
        }
    }

    fn hex_text(text: &str) -> Result<Self, String> {
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .unwrap_or(text);
        let parsed = match digits.len() {
            16 => digits.parse().map(Self::N64),
            24 => digits.parse().map(Self::N96),
            32 => digits.parse().map(Self::N128),
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

/// A character of the base64url alphabet.
fn is_base64url(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Why `text` is no nonce in any form (`bits`: the size `--bits` names).
fn unreadable(text: &str, bits: Option<u16>) -> String {
    let len = text.chars().count();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Only an integer too large: its own message.
        return AnyNonce::int_text(text, bits).err().unwrap_or_default();
    }
    if matches!(len, 11 | 16 | 22) && text.chars().all(is_base64url) {
        // The alphabet's, with bits set past the nonce's end: its own message.
        return AnyNonce::base64url_text(text).err().unwrap_or_default();
    }
    let allowed: fn(char) -> bool = match len {
        16 | 11 | 22 => is_base64url,
        24 | 32 => |c| c.is_ascii_hexdigit(),
        _ => |_| true,
    };
    match text.chars().enumerate().find(|&(_, c)| !allowed(c)) {
        Some((i, c)) => format!(
            "{c:?} (character {}) is in no form of {len} characters: {FORMS}",
            i + 1
        ),
        None => format!("\"{}\" is {len} characters: {FORMS}", shown(text)),
    }
}

/// `readings` named for a message: "only as a 64-bit hex nonce (machine id 1, TIME)", or "as
/// A and as B".
fn listed(readings: &[(Input, AnyNonce)], epoch_ms: u64) -> String {
    let each: Vec<String> = readings
        .iter()
        .map(|&(form, nonce)| {
            let d = nonce.decode(epoch_ms);
            format!(
                "a {}-bit {} nonce (machine id {}, {})",
                nonce.bits(),
                form.name(),
                d.machine_id,
                rfc3339(d.unix_ms).as_deref().unwrap_or("past year 9999")
            )
        })
        .collect();
    match each.as_slice() {
        [one] => format!("only as {one}"),
        _ => format!("as {}", each.join(" and as ")),
    }
}

/// The `--input` of each of `readings`: "--input hex or --input int".
fn choices(readings: &[(Input, AnyNonce)]) -> String {
    let each: Vec<String> = readings
        .iter()
        .map(|(form, _)| format!("--input {}", form.name()))
        .collect();
    each.join(" or ")
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
    use nononce::nonce::DEFAULT_EPOCH_MS;

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

    /// 2026-12-05T00:00:00Z.
    const NOW_MS: u64 = 1_796_428_800_000;

    fn auto(text: &str, bits: Option<u16>) -> Result<(u16, u16, String), String> {
        let nonce = AnyNonce::parse_at(text, Input::Auto, bits, DEFAULT_EPOCH_MS, NOW_MS)?;
        let d = nonce.decode(DEFAULT_EPOCH_MS);
        Ok((
            nonce.bits(),
            d.machine_id.get(),
            rfc3339(d.unix_ms).unwrap(),
        ))
    }

    #[test]
    fn the_auto_rule() {
        let p = |t: &str| auto(t, None).map(|(bits, _, _)| bits);
        // 64-bit hex from next month; read as 96-bit base64url it would be from the 2130s.
        assert_eq!(
            auto("03be4cb500002000", None),
            Ok((64, 1, "2027-01-15T08:00:00.000Z".to_owned()))
        );
        assert_eq!(p("0x03be4cb500002000"), Ok(64));
        assert_eq!(p("0X03BE4CB500002000"), Ok(64));
        // A 96-bit base64url nonce made only of hex characters: read as hex, year 2114.
        assert_eq!(p("A4c6978c4AAAAAAA"), Ok(96));
        // A 16-digit integer: as hex, 2060; as an integer, January 2025.
        assert_eq!(
            auto("4000000000000000", None),
            Ok((64, 208, "2025-01-12T00:54:34.316Z".to_owned()))
        );
        assert_eq!(p("0123456789abcdef01234567"), Ok(96));
        assert_eq!(p(&format!("{}a", "0".repeat(31))), Ok(128));
        assert_eq!(p("A75MtQAAIAA"), Ok(64));
        assert_eq!(p("12345"), Ok(64));
        assert!(p("340282366920938463463374607431768211456").is_err());
        assert!(p("xyz").unwrap_err().contains("3 characters"));
        assert!(
            p("03be4cb50000200+")
                .unwrap_err()
                .contains("'+' (character 16) is in no form of 16 characters")
        );
    }

    /// An integer is 64 bits if its value fits, else 96, else 128; --bits says otherwise.
    #[test]
    fn integer_sizes() {
        let int = |t: &str, bits| {
            AnyNonce::parse_at(t, Input::Int, bits, DEFAULT_EPOCH_MS, NOW_MS).map(AnyNonce::bits)
        };
        assert_eq!(int(&u64::MAX.to_string(), None), Ok(64));
        assert_eq!(int(&(u128::from(u64::MAX) + 1).to_string(), None), Ok(96));
        assert_eq!(int(&u128::MAX.to_string(), None), Ok(128));
        assert_eq!(int("12345", Some(128)), Ok(128));
    }

    /// Two readings that could both be the nonce: refused, naming each and how to choose.
    #[test]
    fn auto_never_guesses() {
        // As hex, August 2025; as an integer, the first hours of 2025: both could be.
        let refused = auto("0123456789012345", None).unwrap_err();
        assert_eq!(
            refused,
            "malformed nonce \"0123456789012345\": it reads as a 64-bit hex nonce (machine id 9, 2025-08-15T05:41:13.380Z) and as a 64-bit int nonce (machine id 110, 2025-01-01T08:10:34.392Z): choose with --input hex or --input int"
        );
        assert_eq!(auto("0123456789012345", Some(64)).unwrap_err(), refused);
        let read =
            |input| AnyNonce::parse_at("0123456789012345", input, None, DEFAULT_EPOCH_MS, NOW_MS);
        assert_eq!(read(Input::Hex).unwrap().hex(), "0123456789012345");
        assert_eq!(read(Input::Int).unwrap().int(), "123456789012345");
        // --bits keeps the readings of its size: here the integer, as 96 bits.
        assert_eq!(auto("0123456789012345", Some(96)).map(|r| r.0), Ok(96));
        assert!(
            auto("03be4cb500002000", Some(96))
                .unwrap_err()
                .contains("only as a 96-bit base64url nonce")
        );
        assert!(
            auto("03be4cb500002000", Some(128))
                .unwrap_err()
                .contains("it is a 64-bit nonce, not 128 bits (--bits)")
        );
    }

    /// A reading of no nonce made yet (a hex typo that is valid base64url, a value from the
    /// 2160s) is refused, saying how to read it all the same.
    #[test]
    fn auto_refuses_nonces_not_made_yet() {
        assert_eq!(
            auto("03be4cb50000200g", None).unwrap_err(),
            "malformed nonce \"03be4cb50000200g\": it reads only as a 96-bit base64url nonce (machine id 462, 2140-02-15T19:07:50.939Z), and no nonce of that time is made yet (a typo, or another --epoch-ms?): --input base64url reads it all the same"
        );
        let max = auto("ffffffffffffffff", None).unwrap_err();
        assert!(
            max.contains("--input hex or --input base64url reads it all the same"),
            "{max}"
        );
        let read = AnyNonce::parse_at(
            "ffffffffffffffff",
            Input::Hex,
            None,
            DEFAULT_EPOCH_MS,
            NOW_MS,
        );
        assert_eq!(read.map(AnyNonce::bits), Ok(64));
    }
}
