//! Nonces of any size on the command line.

use nononce::{Decoded, Nonce64, Nonce96, Nonce128};

/// The input as quoted in an error: escaped onto one line, and cut short.
pub fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(40).flat_map(char::escape_debug).collect();
    if text.chars().nth(40).is_some() {
        out.push_str("...");
    }
    out
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

impl AnyNonce {
    /// Hex (16, 24 or 32 digits) or unpadded base64url (11, 16 or 22 characters). Sixteen hex
    /// digits read as a 64-bit hex nonce; other 16-character text as 96-bit base64url.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let is_hex = !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit());
        let parsed = match (text.len(), is_hex) {
            (16, true) | (11, _) => text.parse().map(Self::N64).map_err(|e| e.to_string()),
            (24, true) | (16, false) => text.parse().map(Self::N96).map_err(|e| e.to_string()),
            (32, true) | (22, _) => text.parse().map(Self::N128).map_err(|e| e.to_string()),
            (len, _) => Err(format!(
                "\"{}\" is {len} characters: a nonce is 16, 24 or 32 hex digits, or 11, 16 or 22 base64url characters",
                shown(text)
            )),
        };
        parsed.map_err(|e| format!("malformed nonce \"{}\": {e}", shown(text)))
    }

    /// Parses hex only (16, 24 or 32 digits).
    pub fn parse_hex(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if !matches!(text.len(), 16 | 24 | 32) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "malformed nonce \"{}\": expected 16, 24 or 32 hex digits",
                shown(text)
            ));
        }
        Self::parse(text)
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

    /// The big-endian integer in decimal.
    pub fn int(self) -> String {
        match self {
            Self::N64(n) => n.to_u64().to_string(),
            Self::N96(n) => n.to_u128().to_string(),
            Self::N128(n) => n.to_u128().to_string(),
        }
    }
}
