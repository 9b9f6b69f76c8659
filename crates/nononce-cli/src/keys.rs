//! The base key: hex everywhere (on the command line, in an environment variable, in a file),
//! the encoding the library examples use too.

use crate::output::Exit;
use std::path::PathBuf;

/// Where the base key comes from; at most one of the three.
#[derive(Debug, clap::Args)]
#[group(multiple = false)]
pub struct KeyArgs {
    /// Base key in hex, at least 32 bytes (64 hex digits). Shows in `ps` and shell history:
    /// prefer --base-key-env or --base-key-file.
    #[arg(long, value_name = "HEX")]
    base_key_hex: Option<String>,
    /// Read the base key (hex) from this environment variable.
    #[arg(long, value_name = "VAR")]
    base_key_env: Option<String>,
    /// Read the base key (hex) from this file; surrounding whitespace is ignored.
    #[arg(long, value_name = "PATH")]
    base_key_file: Option<PathBuf>,
}

/// How to give a key, for messages.
pub const HOW: &str = "pass --base-key-env VAR, --base-key-file PATH or --base-key-hex HEX (at least 32 bytes: `openssl rand -hex 32` makes one)";

impl KeyArgs {
    /// The key, if one was given. A key that is not one is a usage error (status 2); a key
    /// file that cannot be read, a failure (status 1).
    pub fn key(&self) -> Result<Option<Vec<u8>>, Exit> {
        if let Some(hex) = &self.base_key_hex {
            return Ok(Some(parse_key(hex, "").map_err(Exit::Usage)?));
        }
        if let Some(var) = &self.base_key_env {
            let hex = std::env::var(var).map_err(|e| match e {
                std::env::VarError::NotPresent => format!(
                    "environment variable {var} is not set: set it to the base key in hex (`openssl rand -hex 32` makes one)"
                ),
                std::env::VarError::NotUnicode(_) => format!(
                    "environment variable {var} is not text: it must hold the base key in hex"
                ),
            })
            .map_err(Exit::Usage)?;
            return Ok(Some(
                parse_key(&hex, &format!(" in environment variable {var}")).map_err(Exit::Usage)?,
            ));
        }
        if let Some(file) = &self.base_key_file {
            let path = file.display();
            let text = std::fs::read(file)
                .map_err(|e| format!("cannot read the base key file {path}: {e}"))?;
            let hex = String::from_utf8(text).map_err(|_| {
                Exit::Usage(format!(
                    "base key in {path} is not hex: the file must hold hex digits (`openssl rand -hex 32 > {path}`), not raw bytes"
                ))
            })?;
            return Ok(Some(
                parse_key(&hex, &format!(" in {path}")).map_err(Exit::Usage)?,
            ));
        }
        Ok(None)
    }
}

/// The library's one key encoding ([`nononce::decode_key_hex`]), with where the key came from
/// in the message: `place` is ` in environment variable X`, ` in PATH`, or empty.
/// Whether `text` reads as a base64 key: the base64 alphabet (standard or URL-safe, padded or
/// not), with a character hex lacks, and at least 32 bytes' worth.
fn looks_like_base64(text: &str) -> bool {
    let text = text.trim().trim_end_matches('=');
    text.len() >= 43
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '-' | '_'))
        && !text.chars().all(|c| c.is_ascii_hexdigit())
}

fn parse_key(hex: &str, place: &str) -> Result<Vec<u8>, String> {
    match nononce::decode_key_hex(hex) {
        Ok(key) => Ok(key.to_vec()),
        Err(nononce::KeyHexError::TooShort { bytes }) => Err(format!(
            "base key{place} is {bytes} bytes: use at least 32 random bytes (64 hex digits)"
        )),
        Err(_) if looks_like_base64(hex) => Err(format!(
            "base key{place} is not hex, and looks like base64: give it in hex, as `openssl rand -hex 32` writes one (base64 to hex: `base64 -d | od -An -tx1 | tr -d ' \\n'`)"
        )),
        Err(_) => Err(format!(
            "base key{place} is not hex: give an even number of hex digits"
        )),
    }
}
